"""CPU time per pool test, in the controller by phase and in each rank: where a world
test's work is, whatever the machine's load does to its wall time (docs/bench.md).

Usage: python scripts/pool/rank_cpu.py [--world 2] [--k 200] [--backend gloo|nccl]
Runs K trivial world tests (``rankgate bench harness``'s) in one pytest session here and
prints one JSON line: the controller thread's median CPU us per steady test by phase
(``rest``: the protocol less the phases) and each rank's median process CPU us per test
(every thread of the rank: its body's backend threads too), read at each task it gets.
This file is also the ranks' ``rankgate_worker_setup`` (``rank_cpu:note_each_task``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import textwrap
import time
from pathlib import Path

_OUT = "RANKGATE_RANK_CPU_DIR"


def note_each_task(rank: int) -> None:
    """In a rank: its process CPU time as each task arrives, written when it shuts down."""
    from rankgate.harness.pool import messages, worker

    marks: list[int] = []
    decode, shutdown = messages.decode_for_rank, worker._shutdown

    def noted(data: bytes):
        marks.append(time.process_time_ns())
        return decode(data)

    def write_then_shut_down() -> None:
        Path(os.environ[_OUT], f"rank{rank}.json").write_text(json.dumps(marks))
        shutdown()

    messages.decode_for_rank, worker._shutdown = noted, write_then_shut_down


class _ControllerCpu:
    """pytest plugin: the controller thread's CPU time per test, whole and by phase."""

    def __init__(self) -> None:
        self.by_test: dict[str, dict[str, int]] = {}

    def _timed(phase: str):  # builds the hook methods below (no self: not a method)
        import pytest

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def hook(self, item, *args):
            start = time.thread_time_ns()
            try:
                return (yield)
            finally:
                self.by_test.setdefault(item.nodeid, {})[phase] = time.thread_time_ns() - start

        return hook

    pytest_runtest_protocol = _timed("protocol")
    pytest_runtest_setup = _timed("setup")
    pytest_runtest_call = _timed("call")
    pytest_runtest_teardown = _timed("teardown")


def main() -> None:
    import pytest

    from rankgate.bench.pool_overhead import _TEST_FILE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--k", type=int, default=200)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rankgate-rank-cpu-") as tmp:
        root = Path(tmp)
        source = _TEST_FILE.format(
            world=args.world, backend=args.backend, count=args.k + 1,
            calls="    dist.all_reduce(t)\n", collectives=1,
        )  # fmt: skip
        (root / "test_cpu.py").write_text(textwrap.dedent(source))
        (root / "pytest.ini").write_text(
            "[pytest]\nrankgate_worker_setup = rank_cpu:note_each_task\n"
        )
        os.environ[_OUT] = tmp
        controller = _ControllerCpu()
        code = pytest.main(
            ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(root)], plugins=[controller]
        )
        if code != 0:
            raise SystemExit(f"the pool's tests failed (pytest exit {code})")
        steady = [t for name, t in controller.by_test.items() if not name.endswith("[0]")]
        row = {f"controller_{p}_us": statistics.median(t[p] for t in steady) / 1e3
               for p in ("setup", "call", "teardown", "protocol")}  # fmt: skip
        row["controller_rest_us"] = row["controller_protocol_us"] - sum(
            row[f"controller_{p}_us"] for p in ("setup", "call", "teardown")
        )
        for rank in range(args.world):
            marks = json.loads((root / f"rank{rank}.json").read_text())
            per_test = [b - a for a, b in itertools.pairwise(marks[1:])]  # after the first test
            row[f"rank{rank}_us"] = statistics.median(per_test) / 1e3
    print(json.dumps({k: round(v, 1) for k, v in row.items()}))


if __name__ == "__main__":
    main()
