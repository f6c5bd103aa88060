"""``rankgate dispatch`` argument handling: bad input exits 2 with the reason; --dry-run."""

from __future__ import annotations

import shlex

import pytest
from _pytest.mark.expression import Expression

from rankgate.cli import main
from tests.pipeline.tree_collection import collect_once_for_run

pytestmark = pytest.mark.unit


def _write(tmp_path, text: str, name: str = "site.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _rank_words(script: str) -> list[str]:
    """The words of the command each rank runs, from a dry run's sbatch script."""
    (srun,) = [line for line in script.splitlines() if line.startswith("srun")]
    return shlex.split(shlex.split(srun)[-1])


def test_unknown_key_exits_2_naming_it(tmp_path, capsys):
    profile = _write(tmp_path, "nodes = 1\ngpu_per_node = 4\n")
    assert main(["dispatch", "--profile", profile, "--stage", "hpc"]) == 2
    assert "unknown key(s) ['gpu_per_node']" in capsys.readouterr().err


def test_gpu_stage_on_a_cpu_profile_exits_2(tmp_path, capsys):
    profile = _write(tmp_path, "results_dir = '/scratch'\n", "cpu.toml")
    assert main(["dispatch", "--profile", profile, "--stage", "gpu"]) == 2
    assert (
        "stage 'gpu' needs GPUs but profile 'cpu' has gpus_per_node = 0" in capsys.readouterr().err
    )


def test_unknown_stage_exits_2(tmp_path, capsys):
    profile = _write(tmp_path, "")
    assert main(["dispatch", "--profile", profile, "--stage", "nope"]) == 2
    assert "unknown stage 'nope'" in capsys.readouterr().err


def test_profile_by_name_from_rankgate_profiles(tmp_path, capsys, monkeypatch):
    _write(
        tmp_path,
        "gpus_per_node = 4\nresults_dir = '/scratch'\npartition = 'booster'\n",
        "juwels.toml",
    )
    monkeypatch.setenv("RANKGATE_PROFILES", str(tmp_path))
    code = main(["dispatch", "--profile", "juwels", "--stage", "gpu", "--dry-run", "--", "-x"])
    out = capsys.readouterr().out
    assert code == 0
    assert "#SBATCH --gres=gpu:4\n" in out and "#SBATCH --partition=booster\n" in out
    words = _rank_words(out)
    at = words.index("gpu and world")  # the stage's remote markers, then the extra args
    assert words[at - 1 : at + 2] == ["-m", "gpu and world", "-x"]


def test_hpc_stage_dispatches_multi_rank_tests_not_the_local_slurm_ones(tmp_path, capsys):
    # The hpc tests start their own SLURM; every rank of a cluster job doing so would
    # fight over one port. The cluster gets the genuine multi-rank (world) tests.
    profile = _write(tmp_path, "tasks_per_node = 2\nresults_dir = '/scratch'\n")
    assert main(["dispatch", "--profile", profile, "--stage", "hpc", "--dry-run"]) == 0
    rank_words = _rank_words(capsys.readouterr().out)
    after_m = [rank_words[i + 1] for i, word in enumerate(rank_words) if word == "-m"]
    assert after_m == ["pytest", "world and not gpu and not hpc and not container"]


# Fixtures that start pytest runs of their own.
_SPAWNING_FIXTURES = {"pytester", "testdir"}
# The tests that start a local SLURM (one node or two) and dispatch to it.
_LOCAL_SLURM_FILES = {
    f"tests/dispatch/{name}.py"
    for name in (
        "test_dispatch_command", "test_local_slurm", "test_sharded_dispatch",
        "test_slurm_dispatch", "test_two_node_cluster", "test_two_nodes",
    )
}  # fmt: skip


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> list[dict]:
    """What a cluster's ranks would collect (tests and suites), with markers and fixtures:
    from the run's one collection of the tree, shared with tests/pipeline (8 s a
    collection on 2 cores)."""
    tree = collect_once_for_run(tmp_path_factory)
    return [
        {"id": test, "markers": markers, "fixtures": tree.fixtures[test]}
        for test, markers in tree.items()
        if test.split("/", 1)[0] in ("tests", "suites")
    ]


def _selected(rows: list[dict], expression: str) -> dict[str, dict]:
    """The rows ``-m expression`` selects (pytest's own expression parser)."""
    compiled = Expression.compile(expression)

    def selects(row: dict) -> bool:
        return compiled.evaluate(lambda name, /, **kwargs: name in row["markers"])

    return {row["id"]: row for row in rows if selects(row)}


@pytest.mark.parametrize("stage", ["gpu", "hpc"])
def test_a_dispatched_stage_runs_no_test_that_starts_its_own_run(collected, stage):
    # Every rank of the remote job runs the selection in place: a test that starts its
    # own pytest (pytester, the xdist GPU split), torchrun or local SLURM would run once
    # per rank and fight the others. Only multi-rank (world) tests belong there.
    from rankgate.pipeline import stages

    selected = _selected(collected, stages.get(stage).dispatch_markers)
    assert selected, f"stage {stage} selects nothing remotely"
    spawning = {i for i, row in selected.items() if _SPAWNING_FIXTURES & set(row["fixtures"])}
    assert not spawning
    assert not {i for i, row in selected.items() if "world" not in row["markers"]}
    assert not {i for i in selected if i.split("::")[0] in _LOCAL_SLURM_FILES}


def test_the_gpu_stage_sends_nccl_world_tests_but_not_the_xdist_split(collected):
    from rankgate.pipeline import stages

    selected = _selected(collected, stages.get("gpu").dispatch_markers)
    assert "tests/harness/test_gpu.py::test_nccl_all_reduce_on_each_rank_gpu[world2]" in selected
    assert "tests/harness/test_gpu.py::test_xdist_workers_get_disjoint_gpus" not in selected
    assert "tests/harness/test_gpu.py::test_xdist_workers_get_disjoint_gpus" in _selected(
        collected, "gpu"
    )  # it is a GPU test: it stays in the local gpu stage


def test_the_hpc_stage_sends_the_cpu_world_tests(collected):
    from rankgate.pipeline import stages

    selected = _selected(collected, stages.get("hpc").dispatch_markers)
    assert any(i.startswith("suites/pipeline/test_dist_smoke.py::") for i in selected)
    assert not {i for i, row in selected.items() if "gpu" in row["markers"]}
