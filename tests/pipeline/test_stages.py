"""The stage registry: order, shape and validation."""

from __future__ import annotations

import pytest

from rankgate.pipeline import stages
from rankgate.pipeline.stages import Command, Stage

pytestmark = pytest.mark.unit


def test_stage_names_in_pipeline_order():
    assert stages.names() == (
        "lint", "unit", "dist", "package", "gpu", "hpc", "bench", "container", "gate", "latest",
    )  # fmt: skip


def test_registry_is_a_copy():
    copy = stages.registry()
    copy.pop("lint")
    assert "lint" in stages.registry()


def test_unknown_stage_names_the_known_ones():
    with pytest.raises(KeyError, match="unknown stage 'gpus'; stages are: lint, unit"):
        stages.get("gpus")


@pytest.mark.parametrize("stage", stages.all_stages(), ids=lambda s: s.name)
def test_every_stage_is_described_and_placed(stage: Stage):
    assert stage.description and "\n" not in stage.description
    assert stage.where and stage.dagger and stage.workflow.count(":") == 1
    assert all(
        p.startswith(("junit/", "bench/", "container/", "latest/", "package/")) or p == "gate.json"
        for p in stage.products
    )


@pytest.mark.parametrize(
    ("name", "markers", "needs"),
    [
        ("unit", "unit", ()),
        ("dist", "dist and not gpu", ()),
        ("gpu", "gpu", ("gpus",)),
        ("hpc", "hpc", ("slurm",)),
        ("bench", "perf", ()),
        ("container", "container", ("container-engine",)),
    ],
)
def test_markers_and_needs(name, markers, needs):
    stage = stages.get(name)
    assert (stage.markers, stage.needs) == (markers, needs)


@pytest.mark.parametrize(
    ("name", "remote"),
    [("gpu", "gpu and world"), ("hpc", "world and not gpu and not hpc and not container")],
)
def test_dispatched_runs_select_tests_that_run_in_place_on_every_rank(name, remote):
    # hpc tests start a local SLURM, which a cluster job's ranks must not each do.
    assert stages.get(name).dispatch_markers == remote


def test_only_gpu_and_hpc_are_dispatchable():
    assert [s.name for s in stages.all_stages() if s.dispatchable] == ["gpu", "hpc"]


def test_gate_includes_every_other_stage_after_env_check():
    gate = stages.get("gate")
    assert gate.includes == tuple(
        s.name for s in stages.all_stages() if s.name != "gate" and not s.scheduled
    )
    assert [c.name for c in gate.commands] == ["env-check"]


def test_only_latest_runs_on_a_schedule_and_it_passes_the_pytest_args_on():
    # Its verdict is news about upstream releases: never part of the gate (above).
    assert [s.name for s in stages.all_stages() if s.scheduled] == ["latest"]
    (command,) = stages.get("latest").commands
    assert command.argv[1:] == ("-m", "rankgate.pipeline.latest") and command.pytest_args


def test_bench_runs_the_harness_benchmark_small_and_repeated_then_compares():
    bench_cmd, compare_cmd, committed_cmd = [
        c for c in stages.get("bench").commands if c.argv[0] == "rankgate"
    ]
    assert bench_cmd.argv[:6] == ("rankgate", "bench", "--repeat", "2", "harness", "--json")
    assert int(bench_cmd.argv[bench_cmd.argv.index("--k") + 1]) <= 20
    assert bench_cmd.stdout == "bench/harness.json"
    # against benchmarks/baselines/<this machine's kind>/ (test_bench_compare.py)
    assert compare_cmd.argv == ("rankgate", "bench", "compare", "--kind", "auto")
    assert committed_cmd.argv == ("rankgate", "bench", "compare", "--committed")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"where": ("cloud",)}, "where='cloud'; use one of"),
        ({"where": ("local",), "needs": ("tpu",)}, "need 'tpu'; use one of"),
        ({"where": ("dispatch",)}, "a dispatched stage needs a marker expression"),
    ],
)
def test_bad_stage_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Stage(name="x", description="x", dagger="x", workflow="a:b", **kwargs)


def test_empty_command_is_refused():
    with pytest.raises(ValueError, match="argv is empty"):
        Command(argv=())
