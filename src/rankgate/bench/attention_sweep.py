"""What each rank of ``rankgate bench attention`` runs: the sweep, one cell's measurement,
the memory fit, and the run's metadata.

:func:`rank_main` is the ``rank_main`` of :mod:`rankgate.bench.ranks` for
:mod:`rankgate.bench.attention`, which parses the options, starts the ranks and reports
rank 0's result; the method of measuring is that module's docstring.
"""

from __future__ import annotations

import json
import math
import time

from rankgate.bench.ranks import init_bench_group, run_meta

SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    # fewer fragments between lengths, so the memory cap measures what is allocated
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def rank_main(rank: int, world: int, opts: dict, store_path: str) -> dict | None:
    import torch.distributed as dist

    from rankgate.bench import attnreport

    # a collective stuck for 5 minutes is a hang (the slowest iteration takes seconds)
    device = init_bench_group(rank, world, on_gpu=opts["on_gpu"], store_path=store_path,
                              timeout_s=300)  # fmt: skip
    cpu_group = dist.new_group(backend="gloo")
    rows: list[dict] = []
    try:
        for w in opts["worlds"]:
            # world/w groups of w ranks run the same sweep side by side, so every rank is
            # busy for the same time and meets the others at the barrier below
            blocks = [list(range(g * w, (g + 1) * w)) for g in range(world // w)]
            whole = w == world
            groups = [dist.group.WORLD if whole else dist.new_group(b) for b in blocks]
            syncs = [cpu_group if whole else dist.new_group(b, backend="gloo") for b in blocks]
            mine = rank // w
            measured = _sweep(w, groups[mine], syncs[mine], opts, device, report=mine == 0)
            if mine == 0:
                rows += measured
            dist.barrier(group=cpu_group)
            if rank == 0:
                print(f"# world {w} done", flush=True)
        every: list = [None] * world
        dist.all_gather_object(every, rows, group=cpu_group)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    combined = attnreport.combine([r for rs in every for r in rs], opts)
    return {"meta": _meta(opts, device), "results": combined["results"], "fit": combined["fit"]}


def _applies(method: str, w: int, opts: dict) -> str:
    """'' when ``method`` runs at world ``w``, else why not."""
    if f"{method}@{w}" in opts.get("skip", ()):
        return "--skip"
    if method == "single" and w != 1:
        return "single runs at world 1"
    if method == "torch-cp":
        if w == 1:
            return "torch-cp needs world > 1"
        if not opts["on_gpu"]:
            return "PyTorch's context_parallel has no sharding rule for the CPU attention kernel"
        if not opts["causal"]:
            return "PyTorch's context_parallel load-balances causal attention only"
    return ""


def _sweep(w: int, group, sync_group, opts: dict, device, report: bool) -> list[dict]:
    import torch.distributed as dist

    rank = dist.get_rank(group)
    report = report and rank == 0  # the one rank that prints progress
    rows = []
    for method in opts["methods"]:
        reason = _applies(method, w, opts)
        if reason:
            if report and w > 1 and method == "torch-cp":
                rows.append({"method": method, "world": w, "seq": None, "rank": 0,
                             "skipped": reason})  # fmt: skip
            continue
        failed_at = None
        for seq in opts["seq_lens"]:
            base = {"method": method, "world": w, "seq": seq, "rank": rank}
            if failed_at is not None:
                rows.append(base | {"error": f"skipped: failed at {failed_at}"})
                continue
            row = _measure_agreed(method, w, seq, group, sync_group, opts, device)
            rows.append(base | row)
            if row.get("error"):
                failed_at = seq
            if report:
                stamp = time.strftime("%H:%M:%S")
                print(f"# {stamp} {method} world {w} seq {seq}: " + json.dumps(row)[:300],
                      flush=True)  # fmt: skip
        if opts["fit_cap_gib"] and failed_at is None:
            rows += _fit_check(method, w, group, sync_group, opts, device, rows, report)
    return rows


# seven parameters: one cell of the sweep (method, world, length) and where it runs
# (its group, the lockstep group, options, device); the GPU runs measured this signature
def _measure_agreed(method, w, seq, group, sync_group, opts, device) -> dict:
    """One measurement; every rank of the world records an error if any rank had one.

    PyTorch's context parallel is retried once with key/value heads repeated to the
    query heads when it refuses grouped-query attention (the note says so).
    """
    row = _attempt(method, w, seq, group, sync_group, opts, device)
    gqa = opts["heads"] != opts["kv_heads"]
    if method == "torch-cp" and gqa and row.get("error") and "out of memory" not in row["error"]:
        first = row["error"]
        row = _attempt(method, w, seq, group, sync_group, dict(opts, repeat_kv=True), device)
        row["note"] = f"key/value heads repeated to {opts['heads']} (with enable_gqa: {first})"
    return row


def _attempt(method, w, seq, group, sync_group, opts, device) -> dict:  # as _measure_agreed
    import torch
    import torch.distributed as dist

    try:
        row = _measure(method, w, seq, group, sync_group, opts, device)
    except Exception as exc:  # OOM, an unsupported case of a peer: recorded, not fatal
        row = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    _release(device)
    flag = torch.tensor([1 if row.get("error") else 0])
    dist.all_reduce(flag, group=sync_group)
    if flag.item() and not row.get("error"):
        row = {"error": "failed on another rank"}
    return row


def _release(device) -> None:
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _inputs(w: int, seq: int, opts: dict, device, seed: int):
    import torch

    dtype = getattr(torch, DTYPES[opts["dtype"]])
    b, h, hk, d = opts["batch"], opts["heads"], opts["kv_heads"], opts["head_dim"]
    n = seq // w
    g = torch.Generator(device=device).manual_seed(seed)

    def rand(heads):
        return torch.randn(b, heads, n, d, generator=g, device=device, dtype=dtype)

    q, k, v = (rand(x).requires_grad_() for x in (h, hk, hk))
    if opts.get("repeat_kv"):
        k, v = (t.detach().repeat_interleave(h // hk, dim=1).requires_grad_() for t in (k, v))
    return q, k, v, rand(h)


# eight parameters: the cell's method and group, plus the tensors and timers it closes over
def _stepper(method: str, w: int, group, opts: dict, leaves, dout, timer, stack):
    """The iteration to time: forward and backward of ``method``."""
    import torch.nn.functional as F

    from rankgate.workloads.ring_attention import ring_attention

    causal = opts["causal"]
    gqa = leaves[0].shape[1] != leaves[1].shape[1]

    def clear():
        for t in leaves:
            t.grad = None

    def sdpa_step():
        clear()
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=gqa)
        out.backward(dout)

    def ring_step():
        clear()
        out = ring_attention(*leaves, causal=causal, group=group, kernel=opts["ring_kernel"],
                             head_chunks=opts["head_chunks"], timer=timer)  # fmt: skip
        out.backward(dout)

    if method == "single":
        return sdpa_step
    if method == "ring":
        return ring_step

    # torch-cp: open PyTorch's context once; its SDPA treats the local tensors as this
    # rank's head-tail shards (a dummy buffer switches its load balancing on).
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.experimental import context_parallel

    mesh = DeviceMesh.from_group(group, leaves[0].device.type)
    dummy = torch.zeros(1, 1, 2 * w, 1, device=leaves[0].device)
    stack.enter_context(context_parallel(mesh, buffers=[dummy], buffer_seq_dims=[2]))
    return sdpa_step


def _measure(method, w, seq, group, sync_group, opts, device) -> dict:  # as _measure_agreed
    import contextlib

    import torch
    import torch.distributed as dist

    from rankgate.workloads.ring_attention import CommTimer

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    rank = dist.get_rank(group)
    q, k, v, dout = _inputs(w, seq, opts, device, seed=1000 * seq + rank)
    timer = CommTimer() if method == "ring" else None
    note = "kv heads repeated" if opts.get("repeat_kv") else ""
    with contextlib.ExitStack() as stack:
        step = _stepper(method, w, group, opts, [q, k, v], dout, timer, stack)

        def sync():
            if cuda:
                torch.cuda.synchronize(device)
            dist.barrier(group=sync_group)

        for _ in range(opts["warmup"]):
            step()
        one = _timed(step, 1, device, sync)
        iters = torch.tensor([max(1, min(50, math.ceil(opts["min_rep_seconds"] / max(one, 1e-6))))])
        dist.all_reduce(iters, op=dist.ReduceOp.MAX, group=sync_group)
        iters = int(iters.item())
        if timer is not None:
            timer.reset()
        reps = [_timed(step, iters, device, sync) for _ in range(opts["reps"])]
        row = {"rep_s": reps, "iters": iters, "note": note}
        if timer is not None:
            count = iters * opts["reps"]
            row["exposed_comm_s"] = timer.exposed_seconds() / count
            row["bytes_sent"] = timer.bytes_sent / count
        row["peak_bytes"] = torch.cuda.max_memory_allocated(device) if cuda else None
        if opts["profile"] and w > 1:  # communication only; one GPU has none
            sync()
            row |= _profile(step, device)
        sync()
    return row


def _timed(step, iters: int, device, sync) -> float:
    import torch

    sync()
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    return (time.perf_counter() - t0) / iters


def _profile(step, device) -> dict:
    """NCCL and other kernel time on this rank's GPU during one iteration."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize(device)
        comm = compute = 0.0
        for event in prof.events():
            if event.device_type != DeviceType.CUDA:
                continue
            us = event.time_range.elapsed_us()
            if "nccl" in event.name.lower():
                comm += us
            else:
                compute += us
        return {"comm_kernel_s": comm / 1e6, "compute_kernel_s": compute / 1e6}
    except Exception as exc:
        return {"profile_error": f"{type(exc).__name__}: {exc}"[:200]}


# eight parameters: a cell's placement (as _measure_agreed) and the rows it fits to
def _fit_check(method, w, group, sync_group, opts, device, rows, report) -> list[dict]:
    """Project the longest sequence under the cap from measured peaks, and confirm it."""
    import torch
    import torch.distributed as dist

    from rankgate.bench.attnreport import linear_fit

    rank = dist.get_rank(group)
    mine = [r for r in rows if r["method"] == method and r["world"] == w and r.get("peak_bytes")]
    if len(mine) < 2:
        return []
    # The two longest lengths: shorter shards may run another plan (the ring's auto head
    # chunks call more heads at once there), which bends the line the fit extends.
    mine = sorted(mine, key=lambda r: r["seq"])[-2:]
    peaks = torch.tensor([[r["seq"], r["peak_bytes"]] for r in mine], dtype=torch.float64)
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX, group=sync_group)  # the fullest rank
    intercept, slope = linear_fit(peaks[:, 0].tolist(), peaks[:, 1].tolist())
    cap = opts["fit_cap_gib"] * 2**30
    total = torch.cuda.get_device_properties(device).total_memory
    grain = 2 * w * 1024
    fits_cap = int((cap - intercept) / slope // grain * grain) if slope > 0 else 0
    fits_device = int((total - intercept) / slope // grain * grain) if slope > 0 else 0
    out = {"method": method, "world": w, "rank": rank, "fit": True, "cap_bytes": cap,
           "device_bytes": total, "intercept_bytes": intercept, "bytes_per_token": slope,
           "projected_seq_cap": fits_cap, "projected_seq_device": fits_device,
           "checks": []}  # fmt: skip
    probes = [("fits", int(0.97 * fits_cap) // grain * grain)]
    if w == 1:  # no peer to leave waiting: an out-of-memory error is safe to provoke
        probes.append(("too_long", math.ceil(1.05 * fits_cap / grain) * grain))
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), device)
    try:
        for label, seq in probes:
            if seq <= 0:
                continue
            probe = dict(opts, warmup=0, reps=1, min_rep_seconds=0.0, profile=False)
            got = _measure_agreed(method, w, seq, group, sync_group, probe, device)
            out["checks"].append({"probe": label, "seq": seq, "ran": not got.get("error"),
                                  "peak_bytes": got.get("peak_bytes"),
                                  "error": got.get("error", "")})  # fmt: skip
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
    if report:
        print(f"# fit {method} world {w}: " + json.dumps(out), flush=True)
    return [out]


def _meta(opts: dict, device) -> dict:
    meta = run_meta(device, opts, SAFE_ENV)
    from rankgate.workloads.ring_attention.ring import auto_head_chunks

    # auto splits by this rank's rows: one figure per length at the largest ring
    w = max(x for x in opts["worlds"] if x > 1) if max(opts["worlds"]) > 1 else 1
    chunks = {
        f"{seq // 1024}K" if seq % 1024 == 0 else str(seq): auto_head_chunks(
            opts["heads"], opts["kv_heads"], opts["batch"] * seq // w
        )
        for seq in opts["seq_lens"]
    }
    meta["ring_head_chunks"] = opts["head_chunks"] or (
        "auto (" + ", ".join(f"{seq}: {n}" for seq, n in chunks.items()) + f" at world {w})"
    )
    if device.type == "cuda":
        from rankgate.workloads.ring_attention.kernels import FUSED_FALLBACKS

        kernel = opts["ring_kernel"]
        if kernel == "auto":
            kernel = "flash (cuDNN refused: " + "; ".join(FUSED_FALLBACKS.values()) + ")" \
                if FUSED_FALLBACKS else "cudnn"
        meta["ring_kernel"] = kernel
    return meta
