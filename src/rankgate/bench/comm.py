"""``rankgate bench comm``: collective bandwidth and latency, measured like nccl-tests.

For each backend, collective and message size (``-b`` to ``-e`` by ``-f``): one call
on reference data checked against the host (#wrong; in the first round, once per backend
in a run, against a reference built once per size), ``--warmup`` calls, then
``--reps`` repetitions of ``--iters`` back-to-back calls timed with device events
(perf_counter on the CPU); the median repetition gives the time per call, averaged
over ranks as nccl-tests does. Every backend is alive for the whole sweep, and at each
size they are timed in turn, the order reversed every size and every ``--rounds`` round.
Sizes up to ``--graph-max-bytes`` are timed a second
time with the calls captured in a CUDA graph. algbw and busbw follow nccl-tests
(``rankgate.bench.busbw``). Output: an nccl-tests-style table, ``--json`` (the last
line printed), and with ``--out DIR`` the JSON, the table and a PNG per collective
(busbw and latency against size, with the ``--reference`` nccl-tests curve).
``--nccl-tests DIR`` runs the nccl-tests binaries built there right after the ranks, in
this process tree, and puts their figures beside every backend's
(``rankgate.bench.nccltests``).

The timed calls work on views of buffers filled once per run at the largest size
(``rankgate.bench.commbuffers``). Rank 0 prints one line per size and backend on stderr
as it goes (``rankgate.bench.commprogress``); docs/bench.md says where a sweep's time goes.

Backends: the names of ``rankgate.workloads.comm`` (auto, p2p, nccl, gloo) and
``p2p-push`` / ``p2p-oneshot`` / ``p2p-twoshot``, the p2p all-reduce forced onto one
kernel up to that kernel's limit (never falling back), from which the crossovers are
measured: for each mode, the fastest single backend at each all-reduce size, and how
far ``auto`` is from it.

Ranks: started here (``--world``, spawn, FileStore rendezvous) or, when the command
itself runs under torchrun (RANK and WORLD_SIZE set), in place.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rankgate.bench.commoptions import FORCED, CommOptions, add_arguments
from rankgate.bench.ranks import init_bench_group, run_meta, run_ranks
from rankgate.bench.samples import save_run
from rankgate.cliargs import UsageError, make_output_folder, run_module_main

if TYPE_CHECKING:  # torch is imported inside the ranks only
    from rankgate.bench.commbuffers import Buffers
    from rankgate.bench.commchecks import HostChecks
    from rankgate.bench.commprogress import SweepProgress

__all__ = ["add_arguments", "main", "run"]

PRINTS_PROGRESS = True
"""Rank 0 prints a line per size and backend (rankgate.bench.commprogress): no spinner."""

SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


# --- the parent: options, launch, report ---------------------------------------------


def options_from(args: argparse.Namespace) -> CommOptions:
    """The run's options; a bad value or a run this machine cannot do is a UsageError."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    try:
        return CommOptions.from_args(args, gpus)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def validate(args: argparse.Namespace) -> None:
    """Before the run starts (``rankgate bench`` calls it)."""
    options_from(args)
    make_output_folder("--out", args.out)


def run(args: argparse.Namespace) -> int:
    from rankgate.bench import commreport

    for key, value in SAFE_ENV.items():
        os.environ.setdefault(key, value)
    opts = options_from(args)
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    started = time.time()
    if launched:
        result = _rank_main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), opts, None)
        if result is None:  # not rank 0
            return 0
    else:
        result = run_ranks(_rank_main, opts.world, opts, name="comm")
    result["meta"]["window"] = {"ranks_started": started, "ranks_finished": time.time()}
    nccl_errors = 0
    if opts.nccl_tests:
        from rankgate.bench import nccltests

        found = nccltests.run_all(opts.nccl_tests, opts)
        nccltests.attach(result["results"], found)
        result["nccl_tests"] = found
        for error in found["errors"]:
            print(f"rankgate bench comm: nccl-tests: {error}", file=sys.stderr)
        nccl_errors = len(found["errors"])
    references = commreport.load_references(args.reference)
    result["crossovers"] = commreport.crossovers(result["results"])
    result["reference_files"] = sorted(references)
    text = commreport.table(result, references)
    print(text)
    if args.out:
        out = save_run(args.out, "comm", result, text)
        for path in commreport.plots(result, references, out):
            print(f"# plot: {path}")
    if args.json:
        print(json.dumps(result))
    failed = sum(r["wrong"] or 0 for r in result["results"])
    return 1 if failed or nccl_errors else 0


# --- inside each rank ------------------------------------------------------------------


def _rank_main(rank: int, world: int, opts: CommOptions, store_path: str | None) -> dict | None:
    for key, value in SAFE_ENV.items():
        os.environ.setdefault(key, value)
    import torch.distributed as dist

    device = init_bench_group(rank, world, on_gpu=opts.on_gpu, store_path=store_path)
    try:
        rows, auto_config = _measure_all(opts, device)
        cpu = dist.new_group(backend="gloo")
        every: list = [None] * world
        dist.all_gather_object(every, rows, group=cpu)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    meta = _meta(opts, device)
    meta["auto_config"] = auto_config
    return {"meta": meta, "results": _combine(every)}


def _make_backend(name: str, device, opts: CommOptions, auto_config: dict | None):
    """Backend ``name``; ``auto_config``: auto's sizes from a calibrating sweep (None: defaults)."""
    from rankgate.workloads.comm import P2PBackend, create_backend
    from rankgate.workloads.comm.push_kernel import MAX_SLOT_BYTES

    if name in FORCED:
        config = opts.p2p_config(push_max_bytes=MAX_SLOT_BYTES, algorithm=FORCED[name])
        return P2PBackend(device=device, config=config, check_shapes=False)
    dev = device if name != "gloo" else None
    config = opts.p2p_config(**(auto_config or {}))
    return create_backend(name, device=dev, check_shapes=False, p2p_config=config)


def _measure_all(opts: CommOptions, device) -> tuple[list[dict], dict | None]:
    """This rank's rows, and auto's sizes when a calibrating sweep chose them."""
    import torch
    import torch.distributed as dist

    from rankgate.bench.commbuffers import Buffers, elements_needed
    from rankgate.bench.commchecks import HostChecks
    from rankgate.bench.commprogress import SweepProgress
    from rankgate.workloads.comm.reference import DTYPES

    cpu_group = dist.new_group(backend="gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    dtype = DTYPES[opts.dtype]

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier(group=cpu_group)

    # Made once for the run, not per size: the buffers (filled at the largest size and
    # viewed), the host checks' references (one per size, shared by the backends) and
    # the backends (the calibrating sweep's stay alive for the final one).
    run = _Run(
        buffers=Buffers(elements_needed(opts.collectives, opts.sizes, dtype.itemsize, world),
                        dtype, device, rank),
        checks=HostChecks(dtype),
        progress=SweepProgress(rank == 0, opts.rounds),
        sync=sync,
    )  # fmt: skip
    made: dict = {}

    def sweeps(backends: tuple[str, ...], auto_config: dict | None, stage: str) -> list[dict]:
        # A machine drifts (clocks, host load) over a sweep of minutes. Every backend stays
        # alive for the whole sweep and, at each size, they are timed one right after
        # another, in an order that turns around every size and every round: drift falls
        # on all of them alike, not on whichever backend swept its sizes at a good moment.
        for name in backends:
            if name not in made:
                made[name] = _make_backend(name, device, opts, auto_config)
        alive = {name: made[name] for name in backends}
        rounds = [_one_round(alive, index, opts, world, run, stage)
                  for index in range(opts.rounds)]  # fmt: skip
        return median_over_rounds(rounds)

    singles = tuple(b for b in opts.backends if b not in ("auto", "p2p"))
    auto_config = None
    try:
        if opts.auto_thresholds == "measured" and len(singles) < len(opts.backends):
            # auto's sizes come from sweeps of the single backends alone (as many rounds),
            # so one slow moment of one round cannot choose its kernels.
            auto_config = _measured_thresholds(
                sweeps(singles, None, "calibration"), cpu_group, opts
            )
        return sweeps(opts.backends, auto_config, "final"), auto_config
    finally:
        for backend in made.values():
            backend.destroy()


@dataclass(frozen=True, slots=True)
class _Run:
    """What every measurement of a run shares."""

    buffers: Buffers
    checks: HostChecks
    progress: SweepProgress
    sync: Callable[[], None]


def _one_round(made: dict, index: int, opts: CommOptions, world: int, run: _Run,
               stage: str) -> list[dict]:  # fmt: skip
    """Round ``index`` over every size, ``made``'s backends in turn at each size."""
    from rankgate.bench.busbw import fit_size
    from rankgate.workloads.comm.reference import DTYPES

    itemsize = DTYPES[opts.dtype].itemsize
    names = tuple(made)
    rows: list[dict] = []
    for collective in opts.collectives:
        for step, size in enumerate(opts.sizes):
            nbytes, count = fit_size(collective, size, itemsize, world)
            order = names if (index + step) % 2 == 0 else names[::-1]
            here = [n for n in order if _serves(n, collective, nbytes, opts)]
            for turn, name in enumerate(here, 1):
                # the final sweep's first round checks (the calibrating sweep's backends
                # are the same): one host reference per size, every backend checked on it
                fitted, check = (nbytes, count), index == 0 and stage == "final"
                rows.append(_measure_one(made[name], name, collective, fitted, opts, run, check))
                run.progress.measured(stage, index, collective, nbytes, turn, len(here), name)
    return rows


def _serves(name: str, collective: str, nbytes: int, opts: CommOptions) -> bool:
    """Whether backend ``name`` is measured at this collective and size (a forced p2p
    kernel: all-reduce only, up to its limit)."""
    if name not in FORCED:
        return True
    return collective == "all_reduce" and nbytes <= _forced_limit(name, opts)


def median_over_rounds(rounds: list[list[dict]]) -> list[dict]:
    """One row per measurement, in the first round's order: median times over rounds.

    #wrong is the checked rounds' worst (the first round checks; each check of a 64 MiB
    result costs seconds of host time, which nine rounds of five backends made minutes);
    the rounds' own times stay in ``eager_rounds_s`` and ``graph_rounds_s``.
    """
    import statistics

    def key(row: dict) -> tuple:
        return row["collective"], row["backend"], row["bytes"]

    by_key: dict[tuple, list[dict]] = {}
    for rows in rounds:
        for row in rows:
            by_key.setdefault(key(row), []).append(row)
    out = []
    for row in rounds[0]:
        same = by_key[key(row)]
        merged = dict(row)
        for mode in ("eager", "graph"):
            times = [r[f"{mode}_s"] for r in same if r[f"{mode}_s"] is not None]
            merged[f"{mode}_s"] = statistics.median(times) if times else None
            merged[f"{mode}_rounds_s"] = times
        checked = [r["wrong"] for r in same if r["wrong"] is not None]
        merged["wrong"] = max(checked) if checked else None
        out.append(merged)
    return out


def _forced_limit(name: str, opts: CommOptions) -> int:
    """The largest payload a forced kernel serves (beyond it, it would fall back)."""
    from rankgate.workloads.comm.push_kernel import MAX_SLOT_BYTES

    if FORCED[name] == "push":
        return MAX_SLOT_BYTES
    return opts.p2p_config().payload_max_bytes


def _measured_thresholds(rows: list[dict], cpu_group, opts: CommOptions) -> dict | None:
    """p2p sizes from this run's all-reduce crossovers (the same on every rank)."""
    import torch.distributed as dist

    from rankgate.bench.commreport import crossovers

    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, rows, group=cpu_group)
    limit = opts.p2p_config().payload_max_bytes
    return thresholds_from_crossovers(crossovers(_combine(every)), limit)


def thresholds_from_crossovers(cross: dict, limit: int) -> dict | None:
    """P2PConfig sizes for ``auto`` from measured crossovers, or None to keep the defaults.

    Per mode (eager, and graph for calls being captured): push up to the largest size
    where the push kernel was the fastest single backend, one-shot up to the largest
    where one-shot was, two-shot up to the largest where two-shot was; NCCL beyond
    (also where NCCL won nowhere: auto runs only at the sizes measured here). ``limit``
    caps one-shot and two-shot (``P2PConfig.payload_max_bytes``).
    """
    from rankgate.bench.commreport import SINGLE
    from rankgate.workloads.comm.push_kernel import MAX_SLOT_BYTES

    config = {}
    for mode, prefix in (("eager", ""), ("graph", "graph_")):
        fastest = cross.get(mode, {}).get("fastest", {})
        sizes = {b: [int(k) for k, v in fastest.items() if v == b] for b in SINGLE}
        if not any(sizes[b] for b in SINGLE if b != "nccl"):
            continue  # no p2p kernel won: keep P2PConfig's defaults for this mode
        push = max(sizes["p2p-push"], default=0)
        one = max(max(sizes["p2p-oneshot"], default=0), push)
        two = max(max(sizes["p2p-twoshot"], default=0), one)
        config[f"{prefix}push_max_bytes"] = min(-(-push // 16) * 16, MAX_SLOT_BYTES)
        config[f"{prefix}oneshot_max_bytes"] = min(one, limit)
        config[f"{prefix}twoshot_max_bytes"] = min(two, limit)
    return config or None


def _measure_one(backend, name, collective, fitted, opts: CommOptions, run: _Run,
                 check: bool) -> dict:  # fmt: skip
    """One row: ``collective`` on ``backend`` at ``fitted`` = (bytes, element count);
    with ``check``, its result on reference data checked on the host first."""
    from rankgate.bench.timing import time_eager, time_graph

    nbytes, count = fitted
    fn, reset, path, graph_path = _workload(backend, collective, count, run.buffers)
    checked = check and nbytes <= opts.check_max
    wrong = run.checks.wrong(backend, collective, count) if checked else None
    fallbacks_before = sum(getattr(backend, "fallbacks", {}).values())

    kw = {"device": backend.device, "iters": opts.iters, "warmup": opts.warmup,
          "reps": opts.reps, "sync": run.sync, "reset": reset}  # fmt: skip
    reset()
    eager = time_eager(fn, **kw).median
    in_graph = backend.device.type == "cuda" and nbytes <= opts.graph_max
    graph = time_graph(fn, **kw).median if in_graph else None
    fell_back = sum(getattr(backend, "fallbacks", {}).values()) > fallbacks_before
    return {
        "collective": collective,
        "backend": name,
        "bytes": nbytes,
        "count": count,
        "dtype": opts.dtype,
        "path": "nccl" if (name in FORCED and fell_back) else path,
        "graph_path": graph_path if in_graph else "",
        "eager_s": eager,
        "graph_s": graph,
        "wrong": wrong,
    }


def _workload(backend, collective: str, count: int, buffers):
    """(call, reset, path, graph path): the timed call on views of the run's buffers, a
    refill, and the p2p path it takes eagerly and when captured in a CUDA graph."""
    world, rank = backend.world_size, backend.rank
    data, out = buffers.data, buffers.out
    path = graph_path = ""
    if collective == "all_reduce":
        pristine, buf = data(count), buffers.work_copy(count)
        if hasattr(backend, "all_reduce_path"):
            path = backend.all_reduce_path(buf, capturing=False)[0]
            graph_path = backend.all_reduce_path(buf, capturing=True)[0]
        return (lambda: backend.all_reduce(buf)), (lambda: buf.copy_(pristine)), path, graph_path
    if collective == "broadcast":
        buf = buffers.work_copy(count)  # written on every rank but the root
        if hasattr(backend, "all_reduce_path"):
            limit = min(backend.config.broadcast_max_bytes, backend.config.buffer_bytes)
            path = "p2p" if buf.nbytes <= limit else "nccl"
        return (lambda: backend.broadcast(buf, 0)), (lambda: None), path, graph_path
    if collective == "all_gather":
        inp, got = data(count), out(world * count)
        return (lambda: backend.all_gather(got, inp)), (lambda: None), path, graph_path
    if collective == "reduce_scatter":
        inp, got = data(world * count), out(count)
        return (lambda: backend.reduce_scatter(got, inp)), (lambda: None), path, graph_path
    if collective == "gather":
        inp = data(count)
        return (lambda: backend.gather(inp, 0)), (lambda: None), path, graph_path
    if collective == "send_recv":
        send, recv = data(count), out(count)
        nxt, prev = (rank + 1) % world, (rank - 1) % world
        return (lambda: backend.send_recv(send, nxt, recv, prev)), (lambda: None), path, graph_path
    raise SystemExit(f"unknown collective {collective!r}")


def _combine(every: list[list[dict]]) -> list[dict]:
    """Per measurement: time averaged over ranks (as nccl-tests), #wrong summed."""
    from rankgate.bench.busbw import algbw, busbw

    world = len(every)
    out = []
    for rows in zip(*every):
        first = dict(rows[0])
        for mode in ("eager", "graph"):
            if first[f"{mode}_s"] is None:
                first[f"{mode}_us"] = first[f"{mode}_algbw"] = first[f"{mode}_busbw"] = None
            else:
                t = sum(r[f"{mode}_s"] for r in rows) / world
                first[f"{mode}_us"] = t * 1e6
                first[f"{mode}_algbw"] = algbw(first["bytes"], t)
                first[f"{mode}_busbw"] = busbw(first["collective"], first["bytes"], t, world)
            del first[f"{mode}_s"]
            rounds = [r.get(f"{mode}_rounds_s") or [] for r in rows]
            if len(rounds[0]) > 1:  # per round, averaged over ranks like the median
                first[f"{mode}_rounds_us"] = [sum(ts) / world * 1e6 for ts in zip(*rounds)]
            first.pop(f"{mode}_rounds_s", None)
        wrong = [r["wrong"] for r in rows]
        first["wrong"] = None if any(w is None for w in wrong) else sum(wrong)
        out.append(first)
    return out


def _meta(opts: CommOptions, device) -> dict:
    meta = {"world": opts.world, **run_meta(device, opts.as_meta(), SAFE_ENV)}
    if device.type == "cuda":
        from rankgate.workloads.comm.detect import detect_topology

        meta["topology"] = detect_topology(opts.world).as_dict()
    return meta


def main(argv: list[str] | None = None) -> int:
    return run_module_main("rankgate bench comm", __doc__, sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
