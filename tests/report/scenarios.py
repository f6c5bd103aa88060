"""Planted suites run for real through ``rankgate run`` (the harness on real ranks), each
leaving an output folder as a user's run leaves it: run.json, stages/, junit/.

One work folder per scenario: the planted test file, a pytest.ini, and ``out/``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PASSING = textwrap.dedent(
    """
    import os
    import time

    import pytest
    import torch
    import torch.distributed as dist

    pytestmark = pytest.mark.dist


    @pytest.mark.world(2)
    def test_all_reduce(rank):
        t = torch.ones(4) * (rank + 1)
        dist.all_reduce(t)
        assert t.tolist() == [3.0] * 4


    @pytest.mark.world(2)
    def test_broadcast(rank):
        t = torch.arange(3) if rank == 0 else torch.zeros(3, dtype=torch.long)
        dist.broadcast(t, src=0)
        assert t.tolist() == [0, 1, 2]


    def test_slow_setup():
        time.sleep(0.6)


    def test_flaky_until_fixed():
        assert os.environ.get("PLANTED_BROKEN") != "1", "broken in the earlier run"


    @pytest.mark.parametrize("n", [1, 2, 3])
    def test_sizes(n):
        assert n > 0


    @pytest.mark.xfail(reason="gloo has no bf16 all_to_all here")
    def test_known_gap():
        raise NotImplementedError("bf16 all_to_all")


    @pytest.mark.xfail(reason="fixed upstream?")
    def test_passes_despite_its_mark():
        pass
    """
)

FAILING = textwrap.dedent(
    """
    import sys

    import pytest
    import torch
    import torch.distributed as dist

    pytestmark = pytest.mark.dist


    @pytest.mark.world(3)
    def test_shards_agree(rank):
        print(f"rank {rank}: shard ready")
        print(f"rank {rank}: checking", file=sys.stderr)
        shard = torch.full((2,), float(rank))
        total = shard.clone()
        dist.all_reduce(total)
        assert rank != 2, f"rank {rank} holds a stale shard: {shard.tolist()}"


    @pytest.mark.world(2)
    def test_passes_on_both(rank):
        pass


    def test_plain_failure():
        assert 1 == 2, "one is not two"
    """
)

HANG = textwrap.dedent(
    """
    import time

    import pytest
    import torch
    import torch.distributed as dist

    pytestmark = pytest.mark.dist


    @pytest.mark.world(2, timeout=4)
    def test_rank1_never_joins(rank):
        t = torch.ones(1)
        if rank == 1:
            time.sleep(120)  # never reaches the all_reduce its peer waits in
        dist.all_reduce(t)


    @pytest.mark.world(2)
    def test_next_test_still_runs(rank):
        t = torch.ones(1)
        dist.all_reduce(t)
        assert t.item() == 2.0
    """
)

GPU_SKIPS = textwrap.dedent(
    """
    import pytest
    import torch.distributed as dist

    pytestmark = pytest.mark.dist


    @pytest.mark.world(4, backend="nccl")
    def test_all_reduce_4(rank):
        pass


    @pytest.mark.world(4, backend="nccl")
    def test_all_gather_4(rank):
        pass


    @pytest.mark.world(8, backend="nccl")
    def test_all_reduce_8(rank):
        pass


    @pytest.mark.world(2)
    def test_gloo_runs_here(rank):
        assert dist.get_world_size() == 2


    def test_needs_deepspeed():
        pytest.importorskip("planted_missing_deepspeed", reason="needs DeepSpeed")


    @pytest.mark.xfail(reason="NCCL 2.19 hangs on this topology")
    def test_expected_failure():
        assert False
    """
)

INTERRUPTED = textwrap.dedent(
    """
    import os
    import time
    from pathlib import Path

    import pytest

    pytestmark = pytest.mark.unit


    def test_runs_until_released():
        flag = Path(os.environ["PLANTED_RELEASE"])
        Path(os.environ["PLANTED_STARTED"]).touch()
        deadline = time.monotonic() + 120
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    """
)


def scenario_env(**extra: str) -> dict[str, str]:
    """The environment of a planted run: this checkout's rankgate, plain progress lines."""
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env["PYTEST_ADDOPTS"] = "-p no:randomly"  # not the outer run's options; no shuffled order
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["RANKGATE_PROGRESS"] = "plain"
    env["CUDA_VISIBLE_DEVICES"] = ""  # the same skips on a GPU host
    return {**env, **extra}


def write_harness_run_at_best(path: Path, baseline: dict) -> None:
    """Write what ``rankgate bench harness --json`` prints for a quiet run at the harness
    ``baseline``'s best: each world's best pool median, and a plain test that gives its
    best ``pool_over_plain``."""
    best = {s: min(v) for s, v in baseline["samples"]["pool_median_ms"].items()}
    ratio = {s: min(v) for s, v in baseline["samples"]["pool_over_plain"].items()}
    rows = [{"world": int(s.split()[1]), "backend": "gloo", "pool_median_ms": v,
             "pool_ms_per_test": v, "plain_median_ms": v / ratio[s],
             "spawn_ms_per_test": 1200.0, "pool_start_s": 1.0, "k_pool": 20, "k_spawn": 1}
            for s, v in best.items()]  # fmt: skip
    probes = {"rankgate_contention": [{"seconds": 12.0, "cpus": 2, "others_share": 0.02}]}
    path.write_text(json.dumps(rows) + "\n" + json.dumps(probes) + "\n")


def plant(work: Path, name: str, text: str) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    (work / "pytest.ini").write_text("[pytest]\nrankgate_timeout = 60\n")
    path = work / name
    path.write_text(text)
    git = ["git", "-c", "user.name=planted", "-c", "user.email=planted@localhost"]
    for argv in (["init", "-q"], ["add", "."], ["commit", "-qm", "planted suite"]):
        subprocess.run([*git, *argv], cwd=work, check=True, capture_output=True)
    return path


def rankgate_run(work: Path, test_file: str, **env: str) -> subprocess.CompletedProcess:
    """``rankgate run --file FILE --out out`` in ``work``: a run of its own, as a user starts it."""
    return subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "run", "--file", test_file, "--out", "out"],
        cwd=work, env=scenario_env(**env), capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def report(out: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "report", "--out", str(out), *args],
        env=scenario_env(**env), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def interrupted_gate(work: Path) -> Path:
    """A gate (env-check, lint, unit, bench) killed with SIGTERM while unit runs, as
    ``timeout`` kills it: on its way out it records unit INCOMPLETE (stopped before any
    test ended); bench, which runs only after the others, never starts."""
    plant(work, "test_long.py", INTERRUPTED)
    started, release = work / "started.flag", work / "release.flag"
    code = (
        "from pathlib import Path\n"
        "from rankgate.pipeline import executor\n"
        "executor.run_gate(executor.Options(out_dir=Path('out')), include=('lint', 'unit', 'bench'))\n"
    )
    gate = subprocess.Popen(
        [sys.executable, "-c", code], cwd=work, start_new_session=True,
        env=scenario_env(PLANTED_STARTED=str(started), PLANTED_RELEASE=str(release)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not started.exists():
            assert gate.poll() is None, "the gate ended before unit's test started"
            assert time.monotonic() < deadline, "unit's test never started"
            time.sleep(0.1)
        os.kill(gate.pid, signal.SIGTERM)  # the gate alone, as `timeout` does
        gate.wait(timeout=60)
    finally:
        if gate.poll() is None:
            gate.kill()
            gate.wait()
    marker = json.loads((work / "out" / "stages" / "unit.json").read_text())
    assert marker["status"] == "incomplete", marker
    return release  # the caller touches it after reading the report: the orphan ends
