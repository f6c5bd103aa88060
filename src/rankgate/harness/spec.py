"""The world marker: ``@pytest.mark.world(n, backend="auto", timeout=None)``.

Parsing and validation live here so bad input becomes one clear collection error
that names the test and the problem.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rankgate.errors import RankgateError

BACKENDS = ("auto", "gloo", "nccl")
MAX_TIMEOUT_S = 7 * 24 * 3600.0
"""The longest test timeout accepted (a week). Waits on pipes and selects overflow
somewhere past 24 days, and a timeout of infinity would make a hang last forever."""


class WorldMarkerError(RankgateError, ValueError):
    """A world marker whose arguments cannot describe a job."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorldSpec:
    """What a test asked of its world."""

    size: int
    """Number of ranks the test body runs on."""
    backend: str
    """Requested backend: auto, gloo or nccl (auto is resolved per machine)."""
    timeout: float | None
    """Seconds before the test counts as hung; None uses the ini/CLI default."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_world_marker(args: tuple, kwargs: dict) -> WorldSpec:
    """Validate the marker's arguments; raise WorldMarkerError naming the problem."""
    kwargs = dict(kwargs)
    if len(args) > 1:
        raise WorldMarkerError(f"world() takes one positional argument (n), got {len(args)}")
    if args and "n" in kwargs:
        raise WorldMarkerError("world() got n both positionally and as a keyword")
    if not args and "n" not in kwargs:
        raise WorldMarkerError("world() needs the number of ranks, e.g. @pytest.mark.world(2)")
    size = args[0] if args else kwargs.pop("n")
    kwargs.pop("n", None)
    backend = kwargs.pop("backend", "auto")
    timeout = kwargs.pop("timeout", None)
    if kwargs:
        raise WorldMarkerError(
            f"world() got unknown argument(s) {sorted(kwargs)}; valid: n, backend, timeout"
        )
    if isinstance(size, list | tuple):
        raise WorldMarkerError(
            f"world size must be an integer, got the list {size!r}: a list of sizes is read "
            "only from adopted test classes (rankgate_world_classes, docs/adopting.md). Run a "
            "test at several sizes with one marker per size: @pytest.mark.parametrize("
            '"size", [pytest.param(1, marks=pytest.mark.world(1)), pytest.param(2, '
            "marks=pytest.mark.world(2))])"
        )
    if not _is_int(size):
        raise WorldMarkerError(f"world size must be an integer, got {size!r}")
    if size < 1:
        raise WorldMarkerError(f"world size must be >= 1, got {size}")
    if backend not in BACKENDS:
        raise WorldMarkerError(
            f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)}"
        )
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise WorldMarkerError(f"timeout must be a number of seconds, got {timeout!r}")
        problem = timeout_problem(float(timeout), "timeout")
        if problem:
            raise WorldMarkerError(problem)
    return WorldSpec(
        size=size, backend=backend, timeout=None if timeout is None else float(timeout)
    )


def timeout_problem(seconds: float, what: str) -> str | None:
    """Why ``seconds`` cannot be a test timeout (None when it can); ``what`` names it."""
    if not seconds > 0:  # NaN too
        return f"{what} must be > 0 seconds, got {seconds:g}"
    if not math.isfinite(seconds) or seconds > MAX_TIMEOUT_S:
        return (
            f"{what} must be a finite number of seconds up to {MAX_TIMEOUT_S:g} (a week), "
            f"got {seconds:g}; a hang must end some time, with every rank's stack"
        )
    return None


def parse_world_markers(markers: list) -> WorldSpec:
    """The spec of a test's world markers: one, or several that say the same thing.

    Two different world markers (a decorator stacked on another, or a class's marker
    under a function's) would leave which one wins to marker order: an error instead.
    """
    specs = [parse_world_marker(m.args, m.kwargs) for m in markers]
    if len(set(specs)) > 1:
        shown = ", ".join(_marker_text(m) for m in markers)
        raise WorldMarkerError(
            f"the test has {len(markers)} different world markers ({shown}); keep one"
        )
    return specs[0]


def _marker_text(marker) -> str:
    args = [repr(a) for a in marker.args] + [f"{k}={v!r}" for k, v in marker.kwargs.items()]
    return f"world({', '.join(args)})"


AUTO_ON_GPUS = "cpu:gloo,cuda:nccl"
"""What auto gives when every rank has a GPU: torch's own default, a group that takes
CPU tensors through gloo and CUDA tensors through NCCL."""


def resolve_backend(requested: str, size: int, visible_gpus: int) -> str:
    """The group's backend: auto is cpu:gloo,cuda:nccl with a GPU for every rank, else gloo."""
    if requested == "auto":
        return AUTO_ON_GPUS if visible_gpus >= size else "gloo"
    return requested


def uses_gpus(backend: str) -> bool:
    """Whether a group with this (resolved) backend puts each rank on its own GPU."""
    return "nccl" in backend
