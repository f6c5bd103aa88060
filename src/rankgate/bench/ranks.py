"""Start a benchmark's ranks and bring rank 0's result back (bench comm, bench attention).

Each benchmark supplies ``rank_main(rank, world, opts, store_path) -> dict | None``, a
module-level function (its ranks import it by name); rank 0 returns the result.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from rankgate.harness.pool.program import environment_cold_reason, omp_threads

RankMain = Callable[[int, int, Any, "str | None"], "dict | None"]


def run_ranks(rank_main: RankMain, world: int, opts: Any, *, name: str) -> dict:
    """Start ``world`` ranks that meet in a FileStore; rank 0's result.

    The ranks fork from multiprocessing's fork server, which imports torch once for every
    rank this process starts (a spawned rank imports it itself: about 2 CPU-s on 2
    cores), and each takes this process's environment of the moment. Where a variable
    read at import (:data:`~rankgate.harness.pool.program.READ_AT_IMPORT`) differs from
    the one the server started under, the ranks are spawned instead. A forked rank writes
    to the standard streams this process had when the server started.
    """
    import torch.multiprocessing as mp

    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix=f"rankgate-bench-{name}-") as tmp:
        store = os.path.join(tmp, "store")
        result_path = os.path.join(tmp, "result.json")
        mp.start_processes(_rank, args=(rank_main, world, opts, store, result_path, env),
                           nprocs=world, start_method=_SERVER.start_method(env))  # fmt: skip
        with open(result_path) as f:
            return json.load(f)


class _ForkServerEnvironment:
    """The environment multiprocessing's fork server was started under (by this process's
    first ``run_ranks``): its preload, torch, imported with it."""

    def __init__(self) -> None:
        self._env: dict[str, str] | None = None

    def start_method(self, env: dict[str, str]) -> str:
        if self._env is None:
            import multiprocessing

            multiprocessing.set_forkserver_preload(["torch", "torch.distributed"])
            self._env = env
        server = self._env
        if "OMP_NUM_THREADS" not in env or omp_threads(env) is not None:
            # share_the_cores sets the rank's threads, whatever its OpenMP read at import
            env, server = _without_omp(env), _without_omp(server)
        return "spawn" if environment_cold_reason(env, server) else "forkserver"


def _without_omp(env: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items() if key != "OMP_NUM_THREADS"}


_SERVER = _ForkServerEnvironment()


def _rank(
    rank: int,
    rank_main: RankMain,
    world: int,
    opts: Any,
    store: str,
    result_path: str,
    env: dict[str, str],
) -> None:
    os.environ.clear()
    os.environ.update(env)  # the server's own is that of the first run's start
    share_the_cores(world)
    result = rank_main(rank, world, opts, store)
    if result is not None:
        with open(result_path, "w") as f:
            json.dump(result, f)


def share_the_cores(world: int) -> None:
    """Give this rank its share of the host's cores for torch's intra-op threads.

    Spawned ranks each took every core: on nvidia-h100-x4 four comm ranks ran 256
    threads on 64 cores (load average 236) and a 1 KiB-64 MiB sweep did not finish in
    200 s, where the same sweep under torchrun (which sets OMP_NUM_THREADS=1) took 42 s.
    An OMP_NUM_THREADS the user set is kept (applied here: a forked rank's OpenMP read
    the server's at import).
    """
    import torch

    if os.environ.get("OMP_NUM_THREADS"):
        if (threads := omp_threads(os.environ)) is not None:
            torch.set_num_threads(threads)
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(max(1, (cores or 1) // world))


def init_bench_group(
    rank: int, world: int, *, on_gpu: bool, store_path: str | None, timeout_s: float | None = None
):
    """The default group and this rank's device: ``cpu:gloo,cuda:nccl`` on GPUs, else gloo.

    Without ``store_path`` the ranks meet through the launcher's variables (torchrun).
    """
    import torch
    import torch.distributed as dist

    kwargs: dict = {"rank": rank, "world_size": world}
    if store_path is not None:
        kwargs["store"] = dist.FileStore(store_path, world)
    if timeout_s is not None:
        kwargs["timeout"] = timedelta(seconds=timeout_s)
    if not on_gpu:
        dist.init_process_group("gloo", **kwargs)
        return torch.device("cpu")
    # run_ranks' ranks are all on this host; a launcher's say where each rank is
    local = rank if store_path is not None else int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("cpu:gloo,cuda:nccl", device_id=device, **kwargs)
    return device


def run_meta(device, options: dict, env_keys) -> dict:
    """What a result records of its run: time, host, versions, the device, the options."""
    import torch

    meta = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "device": str(device),
        "options": options,
        "env": {k: os.environ.get(k) for k in env_keys},
    }
    if device.type == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(device)
        meta["gpu_memory_bytes"] = torch.cuda.get_device_properties(device).total_memory
        meta["cuda"] = torch.version.cuda
        try:
            meta["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:
            meta["nccl"] = f"unknown ({exc})"
    return meta
