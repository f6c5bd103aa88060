"""Ray Train: the training loop on the workers of a TorchTrainer, and a local Ray to run it.

:class:`RayStrategy` runs inside a Ray Train worker: rank, world and local rank come
from Ray Train's context, the gloo/NCCL group is the one Ray Train set up, and the
model is wrapped by ``ray.train.torch.prepare_model`` (DDP). :func:`run_on_ray` starts
a TorchTrainer that calls a function on every worker and returns each worker's result;
:func:`local_ray` starts (and stops) a private local Ray instance for it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch import nn

from rankgate.errors import RankgateError
from rankgate.workloads.ray_address import pin_ray_address
from rankgate.workloads.trainer.strategies.base import (
    OptimizerFactory,
    StrategyError,
    device_for,
)
from rankgate.workloads.trainer.strategies.torch_native import DDPStrategy


def unavailable_reason() -> str | None:
    """Why Ray Train cannot run here, or None."""
    for module, install in (("ray", "ray[train]"), ("pandas", "ray[train]")):
        if importlib.util.find_spec(module) is None:
            return f"Ray Train is not installed: pip install '{install}'"
    return None


class RayStrategy(DDPStrategy):
    """DDP on the workers of a Ray Train TorchTrainer."""

    name = "ray"

    def _setup(self):
        import ray.train

        try:
            context = ray.train.get_context()
            rank, world = context.get_world_rank(), context.get_world_size()
            local = context.get_local_rank()
        except Exception as exc:  # outside a worker Ray raises its own errors
            raise StrategyError(
                "ray: init() must run inside a Ray Train worker (a TorchTrainer's "
                f"train_loop_per_worker, e.g. through run_on_ray): {exc}"
            ) from None
        if not dist.is_initialized():
            raise StrategyError(
                "ray: Ray Train set up no process group; use TorchTrainer (not DataParallelTrainer)"
            )
        return rank, world, local, device_for(local)

    def _prepare(self, model: nn.Module, make_optimizer: OptimizerFactory):
        import ray.train.torch

        wrapped = ray.train.torch.prepare_model(model)
        return wrapped, make_optimizer(wrapped.parameters())


@dataclass(frozen=True, slots=True)
class WorkerResult:
    """One Ray Train worker's return value, or the traceback it failed with."""

    rank: int
    value: Any = None
    error: str | None = None


class RayRunError(RankgateError, RuntimeError):
    """The TorchTrainer failed or did not finish; the message carries every worker's log."""


# Named by its own light module: the workers import it without torch.
_SETUP_HOOK = f"{pin_ray_address.__module__}.{pin_ray_address.__name__}"


@contextlib.contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[Path]:
    """A private local Ray instance (never one that others started); yields its temp dir.

    ``address="local"`` always starts a new instance; its session files live in a
    fresh short temp dir (Ray's socket paths must stay under 107 bytes), removed after.
    """
    import ray

    if ray.is_initialized():
        raise RayRunError("ray is already initialised in this process; shut it down first")
    root = Path(tempfile.mkdtemp(prefix="rg-ray-", dir="/tmp" if os.name == "posix" else None))
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_TRAIN_V2_ENABLED")}
    # No auth token written to the home directory; Train v2 (v1 needs a CPU for its
    # trainer actor and waits forever on a 2-CPU instance).
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ["RAY_TRAIN_V2_ENABLED"] = "1"
    try:
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=True,
            _temp_dir=str(root / "ray"),
            # Workers start when a task or actor needs one: prestarted ones (one per CPU at
            # start, more when the first driver connects) were never used by a fit.
            _system_config={"enable_worker_prestart": False, "prestart_worker_first_driver": False},
            runtime_env={
                # Workers import the caller's modules (test files too) by the same paths.
                "env_vars": {"PYTHONPATH": os.pathsep.join(_import_paths())},
                "worker_process_setup_hook": _SETUP_HOOK,
            },
        )
        yield root
    finally:
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(root, ignore_errors=True)


def _import_paths() -> list[str]:
    return [p for p in sys.path if p and Path(p).is_dir()]


def _worker_loop(config: dict[str, Any]) -> None:
    """train_loop_per_worker: call the function, write its result or traceback."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    try:
        result = WorkerResult(rank, value=config["function"](*config["args"]))
    except BaseException:
        result = WorkerResult(rank, error=traceback.format_exc())
    with open(Path(config["out"]) / f"worker{rank}.pkl", "wb") as f:
        pickle.dump(result, f)


def run_on_ray(
    function: Callable[..., Any],
    *args: Any,
    ray_root: Path,
    num_workers: int = 2,
    timeout: float = 300.0,
) -> list[WorkerResult]:
    """Call ``function(*args)`` on ``num_workers`` Ray Train workers (CPU, gloo).

    Returns one :class:`WorkerResult` per rank. A failed fit, a missing result or a
    run past ``timeout`` raises :class:`RayRunError` with every worker's log.
    """
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    out = Path(tempfile.mkdtemp(prefix="results-", dir=ray_root))
    trainer = TorchTrainer(
        _worker_loop,
        train_loop_config={"function": function, "args": args, "out": str(out)},
        scaling_config=ScalingConfig(
            num_workers=num_workers, use_gpu=False, resources_per_worker={"CPU": 1}
        ),
        torch_config=TorchConfig(backend="gloo", timeout_s=int(timeout)),
        run_config=RunConfig(
            storage_path=str(ray_root / "storage"),
            name=out.name,
            # A failure ends the fit with its error: retried (a failed worker start is
            # retried without limit by default) it would show only as a timeout here.
            failure_config=FailureConfig(max_failures=0, controller_failure_limit=0),
        ),
    )
    outcome: dict[str, BaseException | None] = {"error": None}

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=fit, name="rankgate-ray-fit", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        stopped = _stop_abandoned_fit(thread)
        raise RayRunError(
            f"Ray Train did not finish within {timeout:g} s; {stopped}\n{worker_logs(ray_root)}"
        )
    if outcome["error"] is not None:
        raise RayRunError(f"Ray Train failed: {outcome['error']}\n{worker_logs(ray_root)}")
    results = []
    for rank in range(num_workers):
        path = out / f"worker{rank}.pkl"
        if not path.exists():
            raise RayRunError(f"worker {rank} left no result\n{worker_logs(ray_root)}")
        results.append(pickle.loads(path.read_bytes()))
    return results


STOP_GRACE_S = 60.0
"""How long a fit that ran past its timeout gets to end once its workers are gone."""

KILL_AFTER_S = 15.0
"""How long the removal of its groups alone gets to end the fit, before its controller is
killed: under CI's load one fit's controller did not end within 60 s of the removal."""


def _stop_abandoned_fit(thread: threading.Thread) -> str:
    """End a fit that ran past its timeout, so that it frees the instance's CPUs.

    Removing a placement group kills the workers placed in it, and Ray Train then fails
    the fit (run_on_ray allows no retries, yet a start cut short was seen retried once).
    Groups are removed until the fit's thread ends: the controller may not have created
    its group at the first pass, or may create another on that retry. A controller that
    has not ended the fit :data:`KILL_AFTER_S` after is killed (its workers, which it
    owns, end with it). Only the fits of this process use the instance (:func:`local_ray`
    starts a private one, and a fit runs at a time), so every group and controller is the
    fit's. Returns a clause for the error message.
    """
    import ray
    from ray.util.placement_group import PlacementGroup

    removed: set[str] = set()
    killed: set[int] = set()
    start = time.monotonic()
    while thread.is_alive() and time.monotonic() < start + STOP_GRACE_S:
        for group_id, info in ray.util.placement_group_table().items():
            if info["state"] != "REMOVED" and group_id not in removed:
                group = PlacementGroup(ray.PlacementGroupID(bytes.fromhex(group_id)))
                ray.util.remove_placement_group(group)
                removed.add(group_id)
        if time.monotonic() >= start + KILL_AFTER_S:
            killed |= _kill_train_controllers()
        thread.join(1.0)
    controller = ", its controller killed" if killed else ""
    if thread.is_alive():
        return (
            f"it did not end within {STOP_GRACE_S:g} s of removing its {len(removed)} placement "
            f"group(s){controller}: its workers may still hold the instance's CPUs"
        )
    return (
        f"stopped: its {len(removed)} placement group(s) removed{controller}, their workers "
        "ended"
    )


def _kill_train_controllers() -> set[int]:
    """SIGKILL every live Ray Train controller of this instance; their process IDs.

    The instance is local (every actor runs on this host); its actor table comes from
    Ray's control store (the state API needs the dashboard, which local_ray leaves off),
    through a module of Ray's own that a release may move: then none is killed, and the
    stop's message says the fit did not end.
    """
    try:
        from ray._private import state
    except ImportError:
        return set()

    killed = set()
    for info in state.actors(actor_state_name="ALIVE").values():
        pid = info.get("Pid")
        if info.get("ActorClassName") == "TrainController" and pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
    return killed


def worker_logs(ray_root: Path, limit: int = 20_000) -> str:
    """Every Ray worker's stdout/stderr file of this instance, for a failure report."""
    sections = []
    # session_latest links to the session's own folder: each file once, by its real path
    paths = {p.resolve() for p in (ray_root / "ray").glob("session_*/logs/worker-*")}
    for path in sorted(paths):
        if path.suffix not in (".out", ".err"):
            continue
        try:
            text = path.read_text(errors="replace").strip()
        except FileNotFoundError:  # gone between the listing and the read (seen in CI)
            continue
        if text:
            sections.append(f"--- {path.name} ---\n{text[-limit:]}")
    return "\n".join(sections) or "(no Ray worker wrote a log)"
