"""``rankgate bench ledger``: what the collective ledger costs per call, on the host.

Two figures, best of ``--repeat-inner`` rounds of ``--calls`` calls each (and the time
of the ledger's digest, which each rank computes once per test):

- host: the ledger's wrapper around a function that does nothing, against calling that
  function bare, from code outside torch and rankgate (as a test calls): the ledger's
  own cost per collective, free of any backend's noise;
- in situ, per ``--backends`` entry (gloo, nccl, fake): ``dist.all_reduce`` of 4 floats
  and ``pg.allreduce([t]).wait()`` on a world of one, recorded and with the ledger
  uninstalled (torch as it ships: its ProcessGroup methods unwrapped too), interleaved
  round by round. On NCCL each round ends with a device synchronize, so the figure is
  the call's whole cost as a test sees it: host time the GPU does not hide. ``fake`` is
  torch's own fake process group, whose collectives do nothing: torch.distributed's
  Python path with and without the ledger, steady to a tenth of a microsecond on a
  loaded host where one gloo call's time varies by several.

The pool's per-test cost with the ledger on and off: ``rankgate bench harness`` and
``RANKGATE_LEDGER=0 rankgate bench harness`` (see docs/ledger-cost.md).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from rankgate.cliargs import UsageError, int_at_least

BACKENDS = ("gloo", "nccl", "fake")

_LOOP = """
def loop(call, arg, calls):
    for _ in range(calls):
        call(arg)
def loop_group(call, arg, calls, group):
    for _ in range(calls):
        call(arg, group=group)
def loop_method(group, arg, calls):
    for _ in range(calls):
        group.allreduce([arg]).wait()
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument(
        "--calls", type=int_at_least(100), default=20000, help="calls per round (default 20000)"
    )
    parser.add_argument(
        "--repeat-inner", type=int_at_least(1), default=7, help="rounds, best kept (default 7)"
    )
    parser.add_argument(
        "--backends",
        type=_backends,
        default=("gloo",),
        help="comma-separated, of gloo, nccl, fake: the in-situ all_reduce's backends "
        "(default gloo; fake: torch's process group that does nothing)",
    )


def _backends(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in BACKENDS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a comma-separated list of {', '.join(BACKENDS)}"
        )
    return names


def validate(args: argparse.Namespace) -> None:
    """nccl needs a GPU (before the host measurement, which takes seconds)."""
    if "nccl" not in args.backends:
        return
    import torch

    if not torch.cuda.is_available():
        raise UsageError("--backends nccl needs a CUDA GPU; none is visible. Use --backends gloo")


def _test_code() -> dict:
    """Loops compiled under a file name outside torch and rankgate: the wrapper's walk to
    the call site stops at their frame, as it stops at a test's."""
    scope: dict = {}
    exec(compile(_LOOP, "test_bench_ledger.py", "exec"), scope)
    return scope


def _best(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure_host(calls: int, rounds: int) -> dict[str, float]:
    import torch

    from rankgate.harness import ledger

    ledger.install()  # sets where torch and rankgate live (for the call-site walk)

    def all_reduce(tensor, op=None, group=None, async_op=False):
        return None

    code = _test_code()
    wrapped = ledger._wrap("all_reduce", all_reduce)
    t = torch.ones(4)
    ledger.begin_test()
    bare = _best(lambda: code["loop"](all_reduce, t, calls), rounds)
    recorded = _best(lambda: code["loop"](wrapped, t, calls), rounds)
    marker = object()  # a subgroup: its own count
    bare_g = _best(lambda: code["loop_group"](all_reduce, t, calls, marker), rounds)
    recorded_g = _best(lambda: code["loop_group"](wrapped, t, calls, marker), rounds)
    describe = ledger._describe_group
    ledger._describe_group = lambda group: ("world", (0, 1))  # no process group here
    try:
        ledger.begin_test()
        code["loop"](wrapped, t, 8)
        digest_8 = _best(ledger.digest, rounds * 100)  # a test of 8 collectives
        code["loop"](wrapped, t, ledger.CAPACITY)
        digest_full = _best(ledger.digest, rounds * 10)  # a full ledger
    finally:
        ledger._describe_group = describe
        ledger.begin_test()
    return {
        "host_us_per_call": round(1e6 * (recorded - bare) / calls, 3),
        "host_us_per_call_with_group": round(1e6 * (recorded_g - bare_g) / calls, 3),
        "digest_us_8_calls": round(1e6 * digest_8, 1),
        f"digest_us_{ledger.CAPACITY}_calls": round(1e6 * digest_full, 1),
    }


def measure_backend(backend: str, calls: int, rounds: int) -> dict[str, float]:
    """One all_reduce of 4 floats on a world of one, bare and recorded, per call (us)."""
    import torch
    import torch.distributed as dist

    from rankgate.harness import ledger

    if backend == "nccl" and not torch.cuda.is_available():
        raise SystemExit("rankgate bench ledger: --backends nccl needs a CUDA GPU; none is visible")
    ledger.install()
    code = _test_code()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else None
    sync = torch.cuda.synchronize if device is not None else (lambda: None)

    def timed(fn, *, recorded: bool) -> float:
        def round_() -> None:
            if fn is None:
                code["loop_method"](dist.group.WORLD, t, calls)
            else:
                code["loop"](fn, t, calls)
            sync()  # NCCL: the queued calls finish inside the round

        if not recorded:
            ledger.uninstall()
        try:
            return _best(round_, 1)
        finally:
            ledger.install()

    with tempfile.TemporaryDirectory(prefix="rankgate-bench-ledger-") as tmp:
        store = _store(backend, os.path.join(tmp, "store"))
        dist.init_process_group(backend, store=store, rank=0, world_size=1, device_id=device)
        try:
            t = torch.ones(4, device=device)
            recorded_fn = dist.all_reduce
            bare_fn = getattr(recorded_fn, "__wrapped__", recorded_fn)
            code["loop"](bare_fn, t, calls // 10)  # warm up
            sync()
            best = dict.fromkeys(("off", "on", "pg_off", "pg_on"), float("inf"))
            for _ in range(rounds):  # interleaved: drifts of a shared host hit both
                ledger.begin_test()
                best["off"] = min(best["off"], timed(bare_fn, recorded=False))
                best["on"] = min(best["on"], timed(recorded_fn, recorded=True))
                best["pg_off"] = min(best["pg_off"], timed(None, recorded=False))
                best["pg_on"] = min(best["pg_on"], timed(None, recorded=True))
        finally:
            dist.destroy_process_group()
    return {
        f"{backend}_us_per_all_reduce_off": round(1e6 * best["off"] / calls, 2),
        f"{backend}_us_per_all_reduce_on": round(1e6 * best["on"] / calls, 2),
        f"{backend}_us_per_pg_allreduce_off": round(1e6 * best["pg_off"] / calls, 2),
        f"{backend}_us_per_pg_allreduce_on": round(1e6 * best["pg_on"] / calls, 2),
    }


def _store(backend: str, path: str):
    import torch.distributed as dist

    if backend == "fake":  # torch's fake group takes its fake store
        from torch.testing._internal.distributed.fake_pg import FakeStore

        return FakeStore()
    return dist.FileStore(path, 1)


def run(args: argparse.Namespace) -> int:
    result = {
        "calls": args.calls,
        "rounds": args.repeat_inner,
        **measure_host(args.calls, args.repeat_inner),
    }
    print(
        f"ledger, host cost per collective: {result['host_us_per_call']:.3f} us "
        f"({result['host_us_per_call_with_group']:.3f} us with a group argument); "
        f"digest a rank sends per test: {result['digest_us_8_calls']:.1f} us of 8 calls, "
        f"{result['digest_us_512_calls']:.1f} us of 512"
    )
    for backend in args.backends:
        figures = measure_backend(backend, args.calls, args.repeat_inner)
        result.update(figures)
        print(
            f"{backend} all_reduce of 4 floats, world 1: "
            f"{figures[f'{backend}_us_per_all_reduce_off']:.2f} us bare, "
            f"{figures[f'{backend}_us_per_all_reduce_on']:.2f} us recorded; "
            f"pg.allreduce([t]).wait(): {figures[f'{backend}_us_per_pg_allreduce_off']:.2f} us "
            f"bare, {figures[f'{backend}_us_per_pg_allreduce_on']:.2f} us recorded"
        )
    if args.json:
        print(json.dumps(result))
    return 0
