"""The ledger's cost per collective in situ on torch's fake process group, whose
collectives do nothing: ``dist.all_reduce(t)`` and ``pg.allreduce([t]).wait()`` with the
ledger installed and uninstalled, interleaved round by round, from a loop compiled
under a test's file name. Independent of ``rankgate bench ledger`` so that one command
times any tree: put that tree's ``src`` first on PYTHONPATH.

Usage: python scripts/ledger/fake_group_cost.py [CALLS] [ROUNDS]
Prints the best and median round per setting (us per call) and the ledger's excess.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from rankgate.harness import ledger

_LOOPS = """
def loop(call, arg, calls):
    for _ in range(calls):
        call(arg)
def loop_pg(group, arg, calls):
    for _ in range(calls):
        group.allreduce([arg]).wait()
"""


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    loops: dict = {}
    exec(compile(_LOOPS, "test_fake_group_cost.py", "exec"), loops)
    t, group = torch.ones(4), dist.group.WORLD
    times: dict[str, list[float]] = {k: [] for k in ("off", "on", "pg_off", "pg_on")}
    for _ in range(rounds):
        for setting in ("off", "on"):
            ledger.install() if setting == "on" else ledger.uninstall()
            ledger.begin_test()
            start = time.perf_counter()
            loops["loop"](dist.all_reduce, t, calls)
            times[setting].append((time.perf_counter() - start) / calls * 1e6)
            ledger.begin_test()
            start = time.perf_counter()
            loops["loop_pg"](group, t, calls)
            times[f"pg_{setting}"].append((time.perf_counter() - start) / calls * 1e6)
    ledger.uninstall()
    dist.destroy_process_group()
    best = {k: min(v) for k, v in times.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    print(" ".join(f"{k}={best[k]:.3f}/{median[k]:.3f}" for k in times), end=" | ")
    excess = {
        k: (best[k] - best[f"{k[:-2]}off"], median[k] - median[f"{k[:-2]}off"])
        for k in ("on", "pg_on")
    }
    print(
        f"all_reduce +{excess['on'][0]:.3f} us (median +{excess['on'][1]:.3f}), "
        f"pg.allreduce +{excess['pg_on'][0]:.3f} us (median +{excess['pg_on'][1]:.3f})"
    )


if __name__ == "__main__":
    main()
