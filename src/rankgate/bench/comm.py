"""``rankgate bench comm``: collective bandwidth and latency, measured like nccl-tests.

For each backend, collective and message size (``-b`` to ``-e`` by ``-f``): one call
on reference data checked against the host (#wrong), ``--warmup`` calls, then
``--reps`` repetitions of ``--iters`` back-to-back calls timed with device events
(perf_counter on the CPU); the median repetition gives the time per call, averaged
over ranks as nccl-tests does. Sizes up to ``--graph-max-bytes`` are timed a second
time with the calls captured in a CUDA graph. algbw and busbw follow nccl-tests
(``rankgate.bench.busbw``). Output: an nccl-tests-style table, ``--json`` (the last
line printed), and with ``--out DIR`` the JSON, the table and a PNG per collective
(busbw and latency against size, with the ``--reference`` nccl-tests curve).

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
import socket
import sys
import tempfile
import time
from pathlib import Path

SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
FORCED = {"p2p-push": "push", "p2p-oneshot": "oneshot", "p2p-twoshot": "twoshot"}
BACKENDS = ("auto", "p2p", "nccl", "gloo", *FORCED)
GPU_DEFAULT_BACKENDS = "nccl,p2p-push,p2p-oneshot,p2p-twoshot,auto"
GPU_DEFAULT_COLLECTIVES = "all_reduce,broadcast,all_gather,reduce_scatter,send_recv"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--backends", default=None, help=f"comma list of {', '.join(BACKENDS)} "
        f"(default: {GPU_DEFAULT_BACKENDS} with GPUs, gloo without)")  # fmt: skip
    add("--collectives", default=None, help="comma list (default: all_reduce on CPU; "
        f"{GPU_DEFAULT_COLLECTIVES} on GPUs)")  # fmt: skip
    add("--dtype", default="fp32", choices=("fp32", "bf16", "fp16", "int32"))
    add("-b", "--min-bytes", default="8", help="smallest size (default 8)")
    add("-e", "--max-bytes", default=None, help="largest size (default 2G on GPUs, 1M on CPU)")
    add("-f", "--factor", type=int, default=4, help="size step factor (default 4)")
    add("--iters", type=int, default=20, help="calls per timed repetition (default 20)")
    add("--warmup", type=int, default=5, help="untimed calls first (default 5)")
    add("--reps", type=int, default=5, help="timed repetitions; the median counts (default 5)")
    add("--rounds", type=int, default=1, help="sweeps over every backend, in reverse order "
        "every other one; each figure is the median over rounds (default 1)")  # fmt: skip
    add("--graph-max-bytes", default="64M", help="also time in a CUDA graph up to this (0: off)")
    add("--check-max-bytes", default="64M", help="check results on the host up to this size")
    add("--buffer-bytes", default="16M", help="p2p symmetric buffer per rank (default 16M)")
    add("--auto-thresholds", choices=("measured", "defaults"), default="measured",
        help="p2p sizes for auto: the crossovers of a first sweep, in as many rounds, over "
        "the single backends listed (default; list nccl and p2p-push/-oneshot/-twoshot) or "
        "P2PConfig's defaults")  # fmt: skip
    add("--world", type=int, default=None, help="ranks (default: visible GPUs, or 2 on CPU)")
    add("--cpu", action="store_true", help="stay on the CPU even where GPUs are visible")
    add("--reference", action="append", default=[], help="nccl-tests output file or folder")
    add("--out", default=None, help="folder for comm.json, comm.txt and the PNG plots")
    add("--json", action="store_true", help="end with the results as one JSON line")


# --- the parent: options, launch, report ---------------------------------------------


def _options(args: argparse.Namespace) -> dict:
    import torch

    from rankgate.bench.busbw import message_sizes, parse_size

    gpus = 0 if args.cpu or not torch.cuda.is_available() else torch.cuda.device_count()
    world = args.world or (gpus if gpus >= 2 else 2)
    if world < 1:
        raise SystemExit("--world must be >= 1")
    on_gpu = gpus >= world
    backends = (args.backends or (GPU_DEFAULT_BACKENDS if on_gpu else "gloo")).split(",")
    for b in backends:
        if b not in BACKENDS:
            raise SystemExit(f"unknown backend {b!r}; valid: {', '.join(BACKENDS)}")
    collectives = args.collectives or (GPU_DEFAULT_COLLECTIVES if on_gpu else "all_reduce")
    max_bytes = parse_size(args.max_bytes or ("2G" if on_gpu else "1M"))
    for name in ("iters", "warmup", "reps", "rounds"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            raise SystemExit(f"--{name} must be >= {0 if name == 'warmup' else 1}")
    return {
        "world": world,
        "on_gpu": on_gpu,
        "backends": backends,
        "collectives": collectives.split(","),
        "dtype": args.dtype,
        "sizes": message_sizes(parse_size(args.min_bytes), max_bytes, args.factor),
        "iters": args.iters,
        "warmup": args.warmup,
        "reps": args.reps,
        "rounds": args.rounds,
        "graph_max": parse_size(args.graph_max_bytes) if on_gpu else 0,
        "check_max": parse_size(args.check_max_bytes),
        "buffer_bytes": parse_size(args.buffer_bytes),
        "auto_thresholds": args.auto_thresholds,
    }


def run(args: argparse.Namespace) -> int:
    from rankgate.bench import commreport

    for key, value in SAFE_ENV.items():
        os.environ.setdefault(key, value)
    opts = _options(args)
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if launched:
        result = _rank_main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), opts, None)
        if result is None:  # not rank 0
            return 0
    else:
        result = _spawn(opts)
    references = commreport.load_references(args.reference)
    result["crossovers"] = commreport.crossovers(result["results"])
    result["reference_files"] = sorted(references)
    text = commreport.table(result, references)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "comm.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "comm.txt").write_text(text + "\n")
        for path in commreport.plots(result, references, out):
            print(f"# plot: {path}")
    if args.json:
        print(json.dumps(result))
    failed = sum(r["wrong"] or 0 for r in result["results"])
    return 1 if failed else 0


def _spawn(opts: dict) -> dict:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="rankgate-bench-comm-") as tmp:
        store = os.path.join(tmp, "store")
        result_path = os.path.join(tmp, "result.json")
        mp.start_processes(
            _spawned_rank,
            args=(opts["world"], opts, store, result_path),
            nprocs=opts["world"],
            start_method="spawn",
        )
        with open(result_path) as f:
            return json.load(f)


def _spawned_rank(rank: int, world: int, opts: dict, store: str, result_path: str) -> None:
    result = _rank_main(rank, world, opts, store)
    if result is not None:
        with open(result_path, "w") as f:
            json.dump(result, f)


# --- inside each rank ------------------------------------------------------------------


def _rank_main(rank: int, world: int, opts: dict, store_path: str | None) -> dict | None:
    for key, value in SAFE_ENV.items():
        os.environ.setdefault(key, value)
    import torch
    import torch.distributed as dist

    kwargs: dict = {"rank": rank, "world_size": world}
    if store_path is not None:
        kwargs["store"] = dist.FileStore(store_path, world)
    if opts["on_gpu"]:
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("cpu:gloo,cuda:nccl", device_id=device, **kwargs)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", **kwargs)
    try:
        rows = _measure_all(opts, device)
        cpu = dist.new_group(backend="gloo")
        every: list = [None] * world
        dist.all_gather_object(every, rows, group=cpu)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    meta = _meta(opts, device)
    meta["auto_config"] = opts.get("auto_config")
    return {"meta": meta, "results": _combine(every)}


def _make_backend(name: str, device, opts: dict):
    from rankgate.workloads.comm import P2PBackend, P2PConfig, create_backend
    from rankgate.workloads.comm.push_kernel import MAX_SLOT_BYTES

    config = P2PConfig(buffer_bytes=opts["buffer_bytes"], **(opts.get("auto_config") or {}))
    if name in FORCED:
        config = P2PConfig(
            buffer_bytes=opts["buffer_bytes"],
            push_max_bytes=MAX_SLOT_BYTES,
            algorithm=FORCED[name],
        )
        return P2PBackend(device=device, config=config, check_shapes=False)
    dev = device if name != "gloo" else None
    return create_backend(name, device=dev, check_shapes=False, p2p_config=config)


def _measure_all(opts: dict, device) -> list[dict]:
    import torch
    import torch.distributed as dist

    from rankgate.bench.busbw import fit_size
    from rankgate.workloads.comm.reference import DTYPES

    cpu_group = dist.new_group(backend="gloo")

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier(group=cpu_group)

    dtype = DTYPES[opts["dtype"]]

    def sweeps(backends: list[str]) -> list[dict]:
        # Backends are timed one after another, minutes apart on a long sweep; a machine
        # that drifts meanwhile (clocks, host load) would favour whichever ran at the
        # good moment. Rounds in alternating order share any drift out between them.
        rounds = []
        for index in range(opts["rounds"]):
            rows: list[dict] = []
            for name in backends if index % 2 == 0 else backends[::-1]:
                backend = _make_backend(name, device, opts)
                for collective in opts["collectives"]:
                    if name in FORCED and collective != "all_reduce":
                        continue
                    for size in opts["sizes"]:
                        nbytes, count = fit_size(collective, size, dtype.itemsize, world)
                        if name in FORCED and nbytes > _forced_limit(name, opts):
                            continue
                        rows.append(
                            _measure_one(backend, name, collective, nbytes, count, dtype, opts,
                                         sync)
                        )  # fmt: skip
                backend.destroy()
            rounds.append(rows)
        return median_over_rounds(rounds)

    world = dist.get_world_size()
    singles = [b for b in opts["backends"] if b not in ("auto", "p2p")]
    if opts["auto_thresholds"] == "measured" and len(singles) < len(opts["backends"]):
        # auto's sizes come from sweeps of the single backends alone (as many rounds),
        # so one slow moment of one round cannot choose its kernels.
        opts["auto_config"] = _measured_thresholds(sweeps(singles), cpu_group, opts)
    return sweeps(opts["backends"])


def median_over_rounds(rounds: list[list[dict]]) -> list[dict]:
    """One row per measurement, in the first round's order: median times over rounds.

    #wrong is the worst round's; the rounds' own times stay in ``eager_rounds_s`` and
    ``graph_rounds_s``.
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
        wrong = [r["wrong"] for r in same]
        merged["wrong"] = None if any(w is None for w in wrong) else max(wrong)
        out.append(merged)
    return out


def _forced_limit(name: str, opts: dict) -> int:
    """The largest payload a forced kernel serves (beyond it, it would fall back)."""
    from rankgate.workloads.comm import P2PConfig
    from rankgate.workloads.comm.push_kernel import MAX_SLOT_BYTES

    if FORCED[name] == "push":
        return MAX_SLOT_BYTES
    return P2PConfig(buffer_bytes=opts["buffer_bytes"]).payload_max_bytes


def _measured_thresholds(rows: list[dict], cpu_group, opts: dict) -> dict | None:
    """p2p sizes from this run's all-reduce crossovers (the same on every rank)."""
    import torch.distributed as dist

    from rankgate.bench.commreport import crossovers
    from rankgate.workloads.comm import P2PConfig

    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, rows, group=cpu_group)
    limit = P2PConfig(buffer_bytes=opts["buffer_bytes"]).payload_max_bytes
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


def _measure_one(backend, name, collective, nbytes, count, dtype, opts, sync) -> dict:
    from rankgate.bench.timing import time_eager, time_graph

    fn, reset, path, graph_path = _workload(backend, collective, count, dtype)
    wrong = _validate(backend, collective, count, dtype) if nbytes <= opts["check_max"] else None
    fallbacks_before = sum(getattr(backend, "fallbacks", {}).values())

    kw = {"device": backend.device, "iters": opts["iters"], "warmup": opts["warmup"],
          "reps": opts["reps"], "sync": sync, "reset": reset}  # fmt: skip
    reset()
    eager = time_eager(fn, **kw).median
    in_graph = backend.device.type == "cuda" and nbytes <= opts["graph_max"]
    graph = time_graph(fn, **kw).median if in_graph else None
    fell_back = sum(getattr(backend, "fallbacks", {}).values()) > fallbacks_before
    return {
        "collective": collective,
        "backend": name,
        "bytes": nbytes,
        "count": count,
        "dtype": opts["dtype"],
        "path": "nccl" if (name in FORCED and fell_back) else path,
        "graph_path": graph_path if in_graph else "",
        "eager_s": eager,
        "graph_s": graph,
        "wrong": wrong,
    }


def _workload(backend, collective: str, count: int, dtype):
    """(call, reset, path, graph path): the timed call on fresh buffers, a refill, and
    the p2p path it takes eagerly and when captured in a CUDA graph."""
    import torch

    dev, world, rank = backend.device, backend.world_size, backend.rank
    gen = torch.Generator(device="cpu").manual_seed(rank)

    def data(n):
        if dtype.is_floating_point:
            return (torch.randn(n, generator=gen) * 2**-10).to(dtype).to(dev)
        return torch.randint(-8, 9, (n,), generator=gen, dtype=torch.int32).to(dev)

    path = graph_path = ""
    if collective == "all_reduce":
        pristine = data(count)
        buf = pristine.clone()
        if hasattr(backend, "all_reduce_path"):
            path = backend.all_reduce_path(buf, capturing=False)[0]
            graph_path = backend.all_reduce_path(buf, capturing=True)[0]
        return (lambda: backend.all_reduce(buf)), (lambda: buf.copy_(pristine)), path, graph_path
    if collective == "broadcast":
        buf = data(count)
        if hasattr(backend, "all_reduce_path"):
            limit = min(backend.config.broadcast_max_bytes, backend.config.buffer_bytes)
            path = "p2p" if buf.nbytes <= limit else "nccl"
        return (lambda: backend.broadcast(buf, 0)), (lambda: None), path, graph_path
    if collective == "all_gather":
        inp, out = data(count), torch.empty(world * count, dtype=dtype, device=dev)
        return (lambda: backend.all_gather(out, inp)), (lambda: None), path, graph_path
    if collective == "reduce_scatter":
        inp, out = data(world * count), torch.empty(count, dtype=dtype, device=dev)
        return (lambda: backend.reduce_scatter(out, inp)), (lambda: None), path, graph_path
    if collective == "gather":
        inp = data(count)
        return (lambda: backend.gather(inp, 0)), (lambda: None), path, graph_path
    if collective == "send_recv":
        send, recv = data(count), torch.empty(count, dtype=dtype, device=dev)
        nxt, prev = (rank + 1) % world, (rank - 1) % world
        return (lambda: backend.send_recv(send, nxt, recv, prev)), (lambda: None), path, graph_path
    raise SystemExit(f"unknown collective {collective!r}")


def _validate(backend, collective: str, count: int, dtype) -> int:
    """Elements wrong on this rank after one call on reference data (nccl-tests' #wrong)."""
    import torch

    from rankgate.workloads.comm.reference import expected, mismatches, rank_input, run_collective

    world, rank = backend.world_size, backend.rank
    numel = world * count if collective == "reduce_scatter" else count
    inputs = [rank_input(r, numel, dtype, seed=numel) for r in range(world)]
    if collective == "send_recv":  # the simultaneous exchange this benchmark times
        got = torch.empty(count, dtype=dtype, device=backend.device)
        mine = inputs[rank].to(backend.device)
        backend.send_recv(mine, (rank + 1) % world, got, (rank - 1) % world)
    else:
        got = run_collective(backend, collective, inputs)
    want = expected(collective, inputs, rank)
    if collective == "gather":
        if want is None:
            return 0 if got is None else 1
        return sum(mismatches(g, w) for g, w in zip(got, want))
    return mismatches(got, want)


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


def _meta(opts: dict, device) -> dict:
    import torch

    meta = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "world": opts["world"],
        "device": str(device),
        "options": {k: v for k, v in opts.items() if k != "sizes"},
        "env": {k: os.environ.get(k) for k in SAFE_ENV},
    }
    if device.type == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(device)
        meta["cuda"] = torch.version.cuda
        try:
            meta["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:
            meta["nccl"] = f"unknown ({exc})"
        from rankgate.workloads.comm.detect import detect_topology

        meta["topology"] = detect_topology(opts["world"]).as_dict()
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rankgate bench comm", description=__doc__.splitlines()[0]
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
