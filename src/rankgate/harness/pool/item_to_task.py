"""What a rank needs to run one world test, made in the controller: where the test
function is, its fixture values, what set-up gave its class and instance, and how an
``async def`` body runs. Everything that crosses into the ranks is pickled here, and
what cannot be is an error naming it.
"""

from __future__ import annotations

import inspect
import os
import pickle
import sys
import types
import unittest
from pathlib import Path

import pytest

from rankgate.errors import RankgateError
from rankgate.harness.item_settings import PRELUDE_KEY
from rankgate.harness.pool import classstate, ranklogs, rankwarnings
from rankgate.harness.pool.messages import TestTask
from rankgate.harness.pool.pool import NOT_SENT, Pool, raw_environ_to_send


class FixtureCrossingError(RankgateError, RuntimeError):
    """A fixture value (or a set-up's attribute) that cannot be sent into the ranks."""


def build_task(
    item: pytest.Function,
    seed: int,
    pool: Pool | None = None,
    class_baseline: dict | None = None,
    function=None,
) -> TestTask:
    """What a rank needs to run this test: where the function is, its arguments, what
    set-up gave its class and instance, and what it changed in the environment and
    working directory since ``pool`` started. ``function``: the test's own function,
    when ``item.obj`` now calls the ranks (a unittest method)."""
    kwargs = {name: item.funcargs[name] for name in item._fixtureinfo.argnames}
    blob = _pickled(
        kwargs,
        lambda name: f"fixture {name!r}",
        "Fixtures of world tests are created once in the controller and pickled into every rank",
    )
    module = item.module
    return TestTask(
        test_id=item.nodeid,
        kwargs=blob,
        instance_state=_instance_state(item),
        class_state=_class_state(item, class_baseline or {}),
        environ=_environ_changes(pool) if pool is not None else {},
        cwd=os.getcwd() if pool is not None and os.getcwd() != pool.cwd else "",
        async_backend=_async_backend(item, function or item.obj),
        module=module.__name__,
        module_file=module.__file__,
        rewrite="@py_builtins" in vars(module),
        qualname=_qualname_in_module(item),
        sys_path=tuple(sys.path),
        seed=seed,
        prelude=item.stash.get(PRELUDE_KEY, None),
        warning_filters=rankwarnings.current_filters(),
        log_settings=ranklogs.settings_of(item.config),
        conftests=_conftests(item),
        default_dtype=_default_dtype(),
    )


# A test folder's conftests, found once: pytest loaded them all during collection.
_CONFTESTS_KEY = pytest.StashKey[dict]()


def _conftests(item: pytest.Item) -> tuple[tuple[str, str], ...]:
    """The conftest.py modules pytest applies to the test (in its folder and the ones
    above), outermost first, as (module name, file): each rank imports them too."""
    by_folder = item.config.stash.setdefault(_CONFTESTS_KEY, {})
    folder = item.path.parent
    if folder not in by_folder:
        found = []
        for plugin in item.config.pluginmanager.get_plugins():
            file = getattr(plugin, "__file__", None)
            if not isinstance(plugin, types.ModuleType) or not file:
                continue
            path = Path(file)
            if path.name == "conftest.py" and folder.is_relative_to(path.parent):
                found.append((plugin.__name__, file))
        by_folder[folder] = tuple(sorted(found, key=lambda entry: len(Path(entry[1]).parts)))
    return by_folder[folder]


def _default_dtype() -> str:
    """torch's default dtype here (a conftest or a fixture may have set it): the ranks'."""
    torch = sys.modules.get("torch")
    return str(torch.get_default_dtype()).removeprefix("torch.") if torch else "float32"


def _environ_changes(pool: Pool) -> dict[str, str | None]:
    """The controller's variables that set-up set, changed or removed since the ranks
    started (None: removed); the pool's own variables for each rank stay theirs."""
    if pool.environ_raw is not None and raw_environ_to_send() == pool.environ_raw:
        return {}  # nearly every test: nothing changed, found without decoding a variable
    started, now = pool.environ, os.environ
    changes: dict[str, str | None] = {
        name: value for name, value in now.items() if started.get(name) != value
    }
    changes.update({name: None for name in started if name not in now})
    return {name: value for name, value in changes.items() if name not in NOT_SENT}


def _async_backend(item: pytest.Function, function) -> tuple[str, dict] | None:
    """How an ``async def`` body runs on the ranks: with the backend the plugin that
    would have run it in this process chose ("" when none would); None for a plain one."""
    if not inspect.iscoroutinefunction(function):
        return None
    if is_unittest(item):
        return "asyncio", {}  # IsolatedAsyncioTestCase runs its methods on asyncio
    chosen = item.funcargs.get("anyio_backend")  # anyio's plugin asks for it when it runs the test
    if chosen:
        from anyio.pytest_plugin import extract_backend_and_options

        name, options = extract_backend_and_options(chosen)
        return name, dict(options)
    if item.config.pluginmanager.has_plugin("asyncio") and (
        item.get_closest_marker("asyncio") is not None
        or item.config.getini("asyncio_mode") == "auto"
    ):
        return "asyncio", {}
    return "", {}


def is_unittest(item: pytest.Item) -> bool:
    cls = getattr(item, "cls", None)
    return cls is not None and issubclass(cls, unittest.TestCase)


def _class_state(item: pytest.Function, baseline: dict) -> bytes:
    """What the controller's class set-up changed on the test's class, pickled ("" when
    nothing): each rank's class is its own module's, as imported."""
    if item.cls is None:
        return b""
    changed = classstate.class_changes(item.cls, baseline)
    if not changed:
        return b""
    return _pickled(
        changed,
        lambda name: f"{item.cls.__name__}.{name}",
        "setup_class, setUpClass and class-scoped fixtures run once in the controller, "
        "and what they set on the test's class is pickled into every rank",
    )


def _instance_state(item: pytest.Function) -> bytes:
    """The attributes the controller's set-up gave the test's instance, pickled ("" when
    none): the ranks run the method on instances of their own."""
    state = classstate.instance_attributes(item.instance, item.name)
    if not state:
        return b""
    return _pickled(
        state,
        lambda name: f"self.{name}",
        "setup_method and fixtures run once in the controller, and what they set on the "
        "test's instance is pickled into every rank",
    )


def _pickled(values: dict, naming, why: str) -> bytes:
    """``values`` pickled; else an error naming the first that cannot be, and what to do."""
    try:
        return pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        for name, value in values.items():
            try:
                pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                raise FixtureCrossingError(
                    f"{naming(name)} ({type(value).__name__}) cannot be sent into the ranks: "
                    f"{type(exc).__name__}: {exc}. {why}; create this object inside the test "
                    "body instead, or make it picklable."
                ) from None
        raise


def _qualname_in_module(item: pytest.Item) -> str:
    """The path from the module to the test, through the class pytest collected it on.

    An inherited method's own ``__qualname__`` names the base class, whose attributes
    are not the subclass's: the ranks would run the test on the wrong class.
    """
    if item.cls is None:
        return item.originalname
    return f"{item.cls.__qualname__}.{item.originalname}"
