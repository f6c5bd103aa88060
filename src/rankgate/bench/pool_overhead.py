"""``rankgate bench harness``: per-test overhead of the worker pool vs spawning ranks per test.

Pool: one pytest run (in a subprocess, as users run it) of K trivial world(n)
tests per world size; a conftest times each test's whole protocol (setup, call,
teardown, reporting), and the CPU time the controller spent in each phase. The first
test of each world starts the pool and is reported separately, the other K give the
per-test figure.

Spawn: K times a fresh ``torch.multiprocessing.spawn`` of n ranks that
initialise a process group, run the same trivial all_reduce and exit, as
torch's MultiProcessTestCase does for every test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
from datetime import timedelta
from pathlib import Path

from rankgate.cliargs import UsageError, int_at_least
from rankgate.proc.command import finish

_TEST_FILE = """
import pytest
import torch
import torch.distributed as dist

@pytest.mark.world({world}, backend={backend!r})
@pytest.mark.parametrize("i", range({count}))
def test_trivial_w{world}(i, rank, device):
    t = torch.ones(1, device=device)
{calls}    assert t.item() == {world} ** {collectives}
"""

_PLAIN_FILE = """
import pytest

@pytest.mark.parametrize("i", range({count}))
def test_plain(i):
    assert i >= 0
"""
"""The floor: pytest's own cost of a test that needs no ranks, in the same session."""

_TIMING_CONFTEST = """
import json, os, time
import pytest

_durations = {}
_phases = {}
_cpu = {}

@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start, cpu = time.perf_counter(), time.thread_time()
    try:
        return (yield)
    finally:
        _durations[item.nodeid] = time.perf_counter() - start
        _cpu.setdefault(item.nodeid, {})["protocol"] = time.thread_time() - cpu

def _cpu_of(phase):
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def timed(item):
        cpu = time.thread_time()
        try:
            return (yield)
        finally:
            _cpu.setdefault(item.nodeid, {})[phase] = time.thread_time() - cpu
    return timed

pytest_runtest_setup = _cpu_of("setup")
pytest_runtest_call = _cpu_of("call")
pytest_runtest_teardown = _cpu_of("teardown")

def pytest_runtest_logreport(report):
    _phases.setdefault(report.nodeid, {})[report.when] = report.duration

def pytest_sessionfinish(session):
    with open(os.environ["RANKGATE_BENCH_TIMINGS"], "w") as f:
        json.dump({"protocol": _durations, "phases": _phases, "cpu": _cpu}, f)
"""
"""Per test: its protocol's wall time, pytest's duration of each phase, and the CPU time
the controller's thread spent in each (the ranks' work and the waits for it are not
CPU time there): on a loaded machine the wall times swing, its own CPU far less."""

PHASES = ("setup", "call", "teardown", "rest")
"""Where a pool test's time goes: pytest's set-up (GPU leases, the pool, the task), call
(the ranks' round trip and the verdict) and teardown phases, and the rest of its protocol
(pytest's reports, logging and terminal hooks around the phases)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument(
        "--k", type=int_at_least(1), default=50, help="pool tests per world (default 50)"
    )
    parser.add_argument(
        "--spawn-k", type=int_at_least(1), default=5,
        help="spawn-per-test runs per world (default 5); under bench --repeat, in the "
        "first run only",
    )  # fmt: skip
    parser.add_argument(
        "--worlds", type=int_at_least(1), nargs="+", default=[2, 4],
        help="world sizes (default 2 4)",
    )  # fmt: skip
    parser.add_argument(
        "--backend", choices=("gloo", "nccl"), default="gloo",
        help="process-group backend (default gloo)",
    )  # fmt: skip


def validate(args: argparse.Namespace) -> None:
    """nccl needs one GPU per rank of the largest world (before any pool starts)."""
    if args.backend != "nccl":
        return
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < max(args.worlds):
        raise UsageError(
            f"--backend nccl needs {max(args.worlds)} GPUs for --worlds "
            f"{' '.join(map(str, args.worlds))}; {gpus} visible. Use --backend gloo"
        )


def run(args: argparse.Namespace) -> int:
    pool = measure_pool(args.worlds, args.backend, args.k)
    # Spawning ranks per test is the reference the pool is set against, not what this
    # measures: under ``bench --repeat`` it is spawned in the first run alone (two runs
    # of the bench stage spawned 12 ranks importing torch, 21.6 CPU-s of the quick gate).
    spawns = args.repetition == 1  # set by bench_command, the one caller
    rows = []
    for world in args.worlds:
        spawn_ms = measure_spawn(world, args.backend, args.spawn_k) if spawns else None
        rows.append(
            {
                "world": world,
                "pool_ms_per_test": round(pool[world]["per_test_ms"], 3),
                "spawn_ms_per_test": None if spawn_ms is None else round(spawn_ms, 1),
                "backend": args.backend,
                "pool_start_s": round(pool[world]["first_test_s"], 3),
                "pool_median_ms": round(pool[world]["median_ms"], 3),
                "pool_phases_median_ms": pool[world]["phases_median_ms"],
                "pool_phases_cpu_median_ms": pool[world]["phases_cpu_median_ms"],
                "plain_median_ms": round(pool[world]["plain_median_ms"], 3),
                "plain_cpu_median_ms": round(pool[world]["plain_cpu_median_ms"], 3),
                "k_pool": args.k,
                "k_spawn": args.spawn_k if spawns else 0,
            }
        )
    print(format_table(rows))
    if args.json:
        print(json.dumps(rows))
    return 0


def format_table(rows: list[dict]) -> str:
    header = (
        f"{'world':>5} {'backend':>7} {'pool ms/test':>13} {'median':>8} "
        f"{'spawn ms/test':>14} {'speed-up':>9} {'pool start s':>13}"
    )
    lines = [header]
    for r in rows:
        spawn = r["spawn_ms_per_test"]
        if spawn is None:  # a later run of bench --repeat: the first one spawned
            spawn_cols = f"{'-':>14} {'-':>9}"
        else:
            spawn_cols = f"{spawn:>14.1f} {spawn / r['pool_ms_per_test']:>8.0f}x"
        lines.append(
            f"{r['world']:>5} {r['backend']:>7} {r['pool_ms_per_test']:>13.2f} "
            f"{r['pool_median_ms']:>8.2f} {spawn_cols} {r['pool_start_s']:>13.2f}"
        )
    for key, what in (
        ("pool_phases_median_ms", "pool test's median ms by phase"),
        ("pool_phases_cpu_median_ms", "its controller's median CPU ms by phase"),
    ):
        by_phase = []
        for r in rows:
            if key not in r:  # a row from before the CPU times
                continue
            phases = r[key]
            by_phase.append(
                f"world {r['world']} " + " ".join(f"{p} {phases[p]:.2f}" for p in PHASES)
            )
        if by_phase:
            lines.append(f"{what}: " + "; ".join(by_phase))
    if rows:  # the same session's plain tests: what pytest itself costs a test
        cpu = rows[0].get("plain_cpu_median_ms")
        lines.append(
            f"a plain test's median ms (no ranks): {rows[0]['plain_median_ms']:.2f}"
            + (f" (controller CPU {cpu:.2f})" if cpu is not None else "")
        )
    return "\n".join(lines)


def measure_pool(worlds: list[int], backend: str, k: int, collectives: int = 1) -> dict[int, dict]:
    """Per world: the first test's seconds, the steady tests' mean and median ms and each
    steady test's ms (``steady_ms``). ``collectives``: all_reduce calls per test (the
    benchmark's is one; scripts/ledger/pool_body.py varies it)."""
    calls = "    dist.all_reduce(t)\n" * collectives
    with tempfile.TemporaryDirectory(prefix="rankgate-bench-") as tmp:
        root = Path(tmp)
        # The files in the order they run: the first test of each world starts its pool
        # and is reported apart (a shuffling plugin, pytest-randomly, would put that start
        # among the steady tests and interleave the worlds). The plain tests come last:
        # before the world tests they ran beside the fork server's import of torch, which
        # took a core from them on a small machine.
        files = []
        for world in worlds:
            source = _TEST_FILE.format(
                world=world, backend=backend, count=k + 1, calls=calls,
                collectives=collectives,
            )  # fmt: skip
            files.append(root / f"test_bench_w{world}.py")
            files[-1].write_text(textwrap.dedent(source))
        files.append(root / "test_bench_plain.py")
        files[-1].write_text(_PLAIN_FILE.format(count=k + 1))
        (root / "conftest.py").write_text(_TIMING_CONFTEST)
        (root / "pytest.ini").write_text("[pytest]\n")  # keep the caller's config out
        timings_path = root / "timings.json"
        env = {**os.environ, "RANKGATE_BENCH_TIMINGS": str(timings_path)}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               *map(str, files)]  # fmt: skip
        proc = finish(cmd, cwd=root, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"pool benchmark run failed:\n{proc.stdout}\n{proc.stderr}")
        timings = json.loads(timings_path.read_text())
    plain_ids = [f"test_bench_plain.py::test_plain[{i}]" for i in range(1, k + 1)]
    plain = [timings["protocol"][i] for i in plain_ids]
    cpu_protocol = {nodeid: cpu["protocol"] for nodeid, cpu in timings["cpu"].items()}
    plain_cpu = [cpu_protocol[i] for i in plain_ids]
    results = {}
    for world in worlds:
        ids = [f"test_bench_w{world}.py::test_trivial_w{world}[{i}]" for i in range(k + 1)]
        ordered = [timings["protocol"][i] for i in ids]
        steady = ordered[1:]
        results[world] = {
            "first_test_s": ordered[0],
            "per_test_ms": 1000 * sum(steady) / len(steady),
            "median_ms": 1000 * statistics.median(steady),
            "steady_ms": [1000 * s for s in steady],
            "phases_median_ms": _phase_medians(timings["phases"], timings["protocol"], ids[1:]),
            "phases_cpu_median_ms": _phase_medians(timings["cpu"], cpu_protocol, ids[1:]),
            "plain_median_ms": 1000 * statistics.median(plain),
            "plain_cpu_median_ms": 1000 * statistics.median(plain_cpu),
        }
    return results


def _phase_medians(by_test: dict, protocol: dict, ids: list[str]) -> dict[str, float]:
    """Each phase's median over the steady tests, in ms (``rest``: protocol - phases)."""
    columns: dict[str, list[float]] = {phase: [] for phase in PHASES}
    for nodeid in ids:
        phases = by_test[nodeid]
        for phase in PHASES[:-1]:
            columns[phase].append(phases.get(phase, 0.0))
        columns["rest"].append(protocol[nodeid] - sum(phases.get(p, 0.0) for p in PHASES[:-1]))
    return {phase: round(1000 * statistics.median(v), 3) for phase, v in columns.items()}


def _spawned_rank(rank: int, world: int, backend: str, store_path: str) -> None:
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(rank)
    store = dist.FileStore(store_path, world)
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    assert t.item() == world
    dist.destroy_process_group()


def measure_spawn(world: int, backend: str, k: int) -> float:
    import torch.multiprocessing as tmp_mp

    durations = []
    with tempfile.TemporaryDirectory(prefix="rankgate-spawn-") as tmp:
        for i in range(k):
            store = str(Path(tmp) / f"store{i}")
            start = time.perf_counter()
            tmp_mp.spawn(_spawned_rank, args=(world, backend, store), nprocs=world, join=True)
            durations.append(time.perf_counter() - start)
    return 1000 * sum(durations) / len(durations)
