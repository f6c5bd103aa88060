"""Where the collective ledger's in-situ cost goes: dist.all_reduce of 4 floats on a
world of one, called bare and through wrappers that each add one step of the ledger's
(see src/rankgate/harness/ledger.py), interleaved round by round, best round kept.

"bare" is torch's all_reduce with the ledger installed (its ProcessGroup wrappers let
the inner group.allreduce through); "unwrapped" is the same with the ledger uninstalled,
torch as it ships. "pg_unwrapped" and "pg_ledger" time ``pg.allreduce([t]).wait()``
likewise. The ledger's cost per call is "ledger" less "unwrapped", and "pg_ledger" less
"pg_unwrapped".

Usage: python scripts/ledger/wrapper_breakdown.py gloo|nccl [--calls N] [--rounds R] [--no-gc]
       [--only NAME,NAME...]
Prints one line per wrapper (us per call: the best round and the median round, and the
best's excess over bare) and a JSON line (best rounds).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

from rankgate.bench.ledger_cost import _test_code
from rankgate.harness import ledger


def wrappers(original) -> dict:
    entries = ledger._entries

    def passthrough(*args, **kwargs):
        return original(*args, **kwargs)

    def caller_frame(*args, **kwargs):
        caller = sys._getframe(1)
        del caller
        return original(*args, **kwargs)

    def entry_kept(*args, **kwargs):
        caller = sys._getframe(1)
        entry = [None, 1, "all_reduce", None, caller.f_code.co_filename, caller.f_lineno, "i"]
        entries.append(entry)
        del caller
        result = original(*args, **kwargs)
        entry[6] = "c"
        return result

    def entry_with_shape(*args, **kwargs):
        caller = sys._getframe(1)
        arg = args[0]
        arg = (arg.dtype, arg.shape)
        entry = [None, 1, "all_reduce", arg, caller.f_code.co_filename, caller.f_lineno, "i"]
        entries.append(entry)
        del caller
        result = original(*args, **kwargs)
        entry[6] = "c"
        return result

    full = ledger._wrap("all_reduce", original)
    return {
        "unwrapped": original,
        "bare": original,
        "passthrough": passthrough,
        "caller_frame": caller_frame,
        "entry_kept": entry_kept,
        "entry_with_shape": entry_with_shape,
        "ledger": full,
        "pg_unwrapped": None,
        "pg_ledger": None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("backend", choices=("gloo", "nccl"))
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-gc", action="store_true", help="the collector off while timing")
    parser.add_argument("--only", default="", help="comma-separated wrappers to time (and bare)")
    args = parser.parse_args()
    ledger.install()
    code = _test_code()  # compiled as a test's own file, as `rankgate bench ledger` does
    loop, loop_method = code["loop"], code["loop_method"]
    device = torch.device("cuda", 0) if args.backend == "nccl" else None
    sync = torch.cuda.synchronize if device is not None else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        dist.init_process_group(args.backend, store=store, rank=0, world_size=1, device_id=device)
        t = torch.ones(4, device=device)
        original = dist.all_reduce.__wrapped__
        calls = wrappers(original)
        if args.only:
            keep = {"bare", *args.only.split(",")}
            calls = {name: fn for name, fn in calls.items() if name in keep}
        loop(original, t, args.calls // 10)
        sync()
        if args.no_gc:
            gc.disable()
        rounds: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, fn in calls.items():
                if name.endswith("unwrapped"):
                    ledger.uninstall()  # torch's ProcessGroup methods as it ships them
                ledger.begin_test()
                start = time.perf_counter()
                if fn is None:
                    loop_method(dist.group.WORLD, t, args.calls)
                else:
                    loop(fn, t, args.calls)
                sync()
                rounds[name].append(time.perf_counter() - start)
                ledger.install()
        gc.enable()
        dist.destroy_process_group()
    us = {name: 1e6 * min(times) / args.calls for name, times in rounds.items()}
    median = {name: 1e6 * statistics.median(times) / args.calls for name, times in rounds.items()}
    for name, value in us.items():
        gc_state = "off" if args.no_gc else "on"
        print(f"{args.backend} gc={gc_state} {name:17s} {value:7.2f} us "
              f"(+{value - us['bare']:.2f}), median {median[name]:7.2f} us")  # fmt: skip
    print(json.dumps({"backend": args.backend, "gc": not args.no_gc, "us_per_call": us}))


if __name__ == "__main__":
    main()
