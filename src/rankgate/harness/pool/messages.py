"""Controller <-> rank messages: ``(name, kwargs)`` tuples, one decoder per side.

This module is imported inside rank processes: standard library only.
"""

from __future__ import annotations

import pickle
import signal
from dataclasses import dataclass, field
from typing import Any

from rankgate.errors import RankgateError
from rankgate.harness.pool.ranklogs import LogSettings

STACK_SIGNAL = signal.SIGUSR1
"""The controller sends this to make a rank print every thread's Python stack."""

# Controller -> rank
RUN = "run"
SHUTDOWN = "shutdown"
# Rank -> controller
READY = "ready"
START_FAILED = "start_failed"
RESULT = "result"

_TO_RANK = frozenset({RUN, SHUTDOWN})
_TO_CONTROLLER = frozenset({READY, START_FAILED, RESULT})


@dataclass(frozen=True, slots=True, kw_only=True)
class RankConfig:
    """What a pool's rank process starts with (the pool sends one to each rank)."""

    rank: int
    world: int
    backend: str
    """gloo, nccl, or auto's cpu:gloo,cuda:nccl."""
    store_path: str
    """The FileStore the pool's ranks rendezvous through."""
    rendezvous_timeout: float
    setup_hook: str | None
    """ini rankgate_worker_setup: ``module:function`` called as function(rank)."""
    threads: int
    """torch's intra-op threads: the host's cores shared by the world."""
    sys_path: tuple[str, ...]
    controller_pid: int
    """The rank exits when this process is gone."""
    stdout: str
    stderr: str
    """The rank's own log files (fds 1 and 2 are redirected there)."""
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class TestTask:
    """One test for every rank of a pool: where its function is, and its arguments."""

    __test__ = False  # not a pytest test class, despite the name

    test_id: str
    """The test's node id; every rank's result names it."""
    kwargs: bytes
    """The fixture values, pickled once in the controller."""
    module: str
    module_file: str
    rewrite: bool
    """Import the module with pytest's assertion rewriting, as the controller did."""
    qualname: str
    sys_path: tuple[str, ...]
    seed: int
    collective_timeout: float = 0.0
    """The process group's operation timeout during this test (set by the pool)."""
    prelude: dict | None = None
    """An adopted test's set-up on each rank (``rankgate.harness.adopt.rankentry.enter``)."""
    async_backend: tuple[str, dict] | None = None
    """An ``async def`` test body: the backend (and its options) the controller's async
    plugin would run it with; "" when no plugin took it. None: a plain function."""
    instance_state: bytes = b""
    """A test method's instance attributes as the controller left them (``setup_method``,
    a fixture that sets ``self.x``), pickled; each rank's fresh instance gets them."""
    environ: dict[str, str | None] = field(default_factory=dict)
    """What the controller's set-up changed in its environment since the pool started
    (``monkeypatch.setenv`` in a fixture): the value, or None for a removed variable."""
    cwd: str = ""
    """The controller's working directory when set-up changed it (``monkeypatch.chdir``)."""
    class_state: bytes = b""
    """What the controller's class set-up (``setup_class``, ``setUpClass``, a class-scoped
    fixture) set on the test's class, pickled; each rank sets it on its own class."""
    warning_filters: tuple[bytes, ...] = ()
    """The controller's warning filters for this test (ini ``filterwarnings``, ``-W``, the
    test's marks), each pickled: the body runs under them on every rank."""
    log_settings: LogSettings | None = None
    """pytest's log level and format in the controller (None: its logging plugin is
    off): each rank writes what the body logged to its stderr."""
    conftests: tuple[tuple[str, str], ...] = ()
    """The conftest.py modules that apply to the test, outermost first, as (module name,
    file): each rank imports them once, before the test's module, as pytest did."""
    default_dtype: str = "float32"
    """torch's default dtype in the controller (``float64`` when a conftest set it)."""


class UnknownMessage(RankgateError, RuntimeError):
    """A message whose name the receiving side does not handle (a version skew or a bug)."""


def encode(name: str, **kwargs: Any) -> bytes:
    return pickle.dumps((name, kwargs), protocol=pickle.HIGHEST_PROTOCOL)


def _decode(data: bytes, allowed: frozenset[str]) -> tuple[str, dict[str, Any]]:
    name, kwargs = pickle.loads(data)
    if name not in allowed:
        raise UnknownMessage(f"unexpected message {name!r}; expected one of {sorted(allowed)}")
    return name, kwargs


def decode_for_rank(data: bytes) -> tuple[str, dict[str, Any]]:
    return _decode(data, _TO_RANK)


def decode_for_controller(data: bytes) -> tuple[str, dict[str, Any]]:
    return _decode(data, _TO_CONTROLLER)


class RankValue:
    """Stands for a per-rank fixture value (rank, device) until the rank fills it in.

    Fixtures run once in the controller, where no rank exists yet; using this
    placeholder there (arithmetic, comparison, int(), str(), an f-string) is an
    error that says so. repr() alone works, so pytest can still show it.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}: known only inside a rank>"

    def __reduce__(self):
        return (RankValue, (self.name,))

    def _refuse(self, *_args: Any) -> Any:
        raise RuntimeError(
            f"the {self.name!r} fixture has no value outside a rank: fixtures run once in the "
            f"controller and are sent to every rank, so compute {self.name}-dependent values "
            "inside the test body"
        )

    __hash__ = object.__hash__
    __index__ = __int__ = __float__ = __bool__ = __str__ = __format__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __mod__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse  # type: ignore[assignment]
    __floordiv__ = __truediv__ = __getitem__ = _refuse
