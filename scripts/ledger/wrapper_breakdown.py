"""Where the collective ledger's in-situ cost goes: dist.all_reduce of 4 floats on a
world of one, called bare and through wrappers that each add one step of the ledger's
(see src/rankgate/harness/ledger.py), interleaved round by round, best round kept.

Usage: python scripts/ledger/wrapper_breakdown.py gloo|nccl [--calls N] [--rounds R] [--no-gc]
Prints one line per wrapper (us per call, and its excess over bare) and a JSON line.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
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

    full = ledger._wrap("all_reduce", original, list(inspect.signature(original).parameters))
    return {
        "bare": original,
        "passthrough": passthrough,
        "caller_frame": caller_frame,
        "entry_kept": entry_kept,
        "entry_with_shape": entry_with_shape,
        "ledger": full,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("backend", choices=("gloo", "nccl"))
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-gc", action="store_true", help="the collector off while timing")
    args = parser.parse_args()
    ledger.install()
    loop = _test_code()["loop"]  # compiled as a test's own file, as `rankgate bench ledger` does
    device = torch.device("cuda", 0) if args.backend == "nccl" else None
    sync = torch.cuda.synchronize if device is not None else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        dist.init_process_group(args.backend, store=store, rank=0, world_size=1, device_id=device)
        t = torch.ones(4, device=device)
        original = dist.all_reduce.__wrapped__
        calls = wrappers(original)
        loop(original, t, args.calls // 10)
        sync()
        if args.no_gc:
            gc.disable()
        best = dict.fromkeys(calls, float("inf"))
        for _ in range(args.rounds):
            for name, fn in calls.items():
                ledger.begin_test()
                start = time.perf_counter()
                loop(fn, t, args.calls)
                sync()
                best[name] = min(best[name], time.perf_counter() - start)
        gc.enable()
        dist.destroy_process_group()
    us = {name: 1e6 * s / args.calls for name, s in best.items()}
    for name, value in us.items():
        print(f"{args.backend} gc={'off' if args.no_gc else 'on'} {name:17s} "
              f"{value:7.2f} us (+{value - us['bare']:.2f})")  # fmt: skip
    print(json.dumps({"backend": args.backend, "gc": not args.no_gc, "us_per_call": us}))


if __name__ == "__main__":
    main()
