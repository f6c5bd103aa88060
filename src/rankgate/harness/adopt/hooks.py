"""The pytest side of adoption: marks adopted tests, switches the project's launcher off
while rankgate runs them, and runs the rank prelude in place."""

from __future__ import annotations

import os

import pytest

from rankgate.harness.adopt import newgroupapi, spawnhelper, torchcase, worldclass
from rankgate.harness.adopt.config import (
    DEFAULT_SETUP_TIMEOUT_S,
    AdoptConfigError,
    SpawnHelper,
    WorldClass,
    parse_spawn_helper,
    parse_world_class,
)
from rankgate.harness.adopt.rankentry import enter
from rankgate.harness.adopt.targets import check_callables, check_parameters
from rankgate.harness.item_settings import NOT_ADOPTED_KEY, PRELUDE_KEY

__tracebackhide__ = True  # pytest leaves this module's frames out of every traceback

ADOPT_PLUGIN = "rankgate-adopt"
LAUNCHER_KEY = pytest.StashKey[str]()
"""The class attribute that starts the project's own launcher, switched off for a test."""


class Adoption:
    """Registered when ``rankgate_spawn_helpers`` or ``rankgate_world_classes`` is set."""

    def __init__(self, helper_lines: list[str], class_lines: list[str]) -> None:
        try:
            self.helpers: list[SpawnHelper] = [parse_spawn_helper(x) for x in helper_lines]
            self.classes: list[WorldClass] = [parse_world_class(x) for x in class_lines]
        except AdoptConfigError as exc:
            raise pytest.UsageError(f"rankgate adoption: {exc}") from None
        self.helper_lines = list(helper_lines)
        self.class_lines = list(class_lines)
        self._installed = False
        self._setups_done: set[str] = set()  # in place: adopted set-ups this rank ran

    @classmethod
    def from_config(cls, config: pytest.Config) -> Adoption | None:
        helpers = config.getini("rankgate_spawn_helpers")
        classes = config.getini("rankgate_world_classes")
        return cls(helpers, classes) if helpers or classes else None

    def _install(self) -> None:
        """Once the test modules can import the helpers (conftests put them on sys.path)."""
        if self._installed:
            return
        for line, helper in zip(self.helper_lines, self.helpers, strict=True):
            try:
                check_parameters(line, helper, spawnhelper.install(helper))
            except (ImportError, AttributeError) as exc:
                raise pytest.UsageError(
                    f"rankgate adoption: cannot import {helper.target}: {exc}"
                ) from None
            except AdoptConfigError as exc:
                raise pytest.UsageError(f"rankgate adoption: {exc}") from None
        for line, wc in zip(self.class_lines, self.classes, strict=True):
            try:
                check_callables(line, wc)  # before any test runs it on a rank
            except AdoptConfigError as exc:
                raise pytest.UsageError(f"rankgate adoption: {exc}") from None
        self._installed = True

    def _world_class_of(self, cls: type | None) -> WorldClass | None:
        for wc in self.classes:
            base = worldclass.base_class(wc)
            if base is not None and cls is not None and issubclass(cls, base):
                return wc
        return None

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """A class asking for several world sizes: one test per size."""
        wc = self._world_class_of(metafunc.cls)
        if wc is None or worldclass.starts_own_ranks(metafunc.cls, wc):
            return
        if wc.world in metafunc.fixturenames:
            return  # the test's own world_size parameter or fixture says it
        markers = list(metafunc.definition.iter_markers())
        name = metafunc.definition.name
        sizes = worldclass.sizes_of(metafunc.cls, metafunc.function, markers, wc, name)
        several = worldclass.several_sizes(sizes)
        if several:
            metafunc.fixturenames.append(worldclass.WORLD_PARAM)
            metafunc.parametrize(
                worldclass.WORLD_PARAM, several, ids=[f"world{n}" for n in several]
            )

    @pytest.hookimpl(tryfirst=True)
    def pytest_itemcollected(self, item: pytest.Item) -> None:
        if not isinstance(item, pytest.Function) or item.get_closest_marker("world"):
            return
        self._install()
        wc = self._world_class_of(item.cls)
        if wc is not None:
            if worldclass.starts_own_ranks(item.cls, wc):
                item.add_marker(pytest.mark.launches)
                return
            found = worldclass.world_of_test(item, wc)
            if isinstance(found, str):
                _not_adopted(item, wc.target, found)
                return
            why = newgroupapi.why_not_adopted(item)
            if why is not None:
                _not_adopted(item, wc.target, why)
                return
            prelude = worldclass.prelude(wc, item.cls)
            if torchcase.is_torch_case(item.cls):
                prelude["torch_case"] = True
            self._mark(item, found, prelude)
            if wc.launcher:
                item.stash[LAUNCHER_KEY] = wc.launcher
            return
        for helper in self.helpers:
            found = spawnhelper.world_of_test(item, helper)
            if found is None:
                continue
            if isinstance(found, str):
                _not_adopted(item, helper.target, found)
                return
            world, backend, after = found
            self._mark(item, (world, backend), {"helpers": self.helper_lines, "after": after})
            return

    @staticmethod
    def _mark(item: pytest.Item, found: tuple[int, str], prelude: dict) -> None:
        from rankgate.harness.pluginnames import PER_PROCESS_FIXTURES

        used = set(item._fixtureinfo.argnames) & set(PER_PROCESS_FIXTURES)
        if used:
            why = f"it uses {sorted(used)}, which a rank cannot have"
            _not_adopted(item, "rankgate", why)
            return
        world, backend = found
        item.add_marker(pytest.mark.world(world, backend=backend))
        item.stash[PRELUDE_KEY] = prelude

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Warn of the tests left to their own way among those selected only."""
        for item in session.items:
            found = item.stash.get(NOT_ADOPTED_KEY, None)
            if found is not None:
                target, why = found
                item.warn(
                    pytest.PytestWarning(
                        f"rankgate: {item.nodeid} runs its own way, not on rankgate's ranks "
                        f"({target}): {why}"
                    )
                )

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """In place, an adopted class's ``setup=`` first runs on this rank before the
        test's timeout starts, under its own start timeout (the pool does the same on
        its ranks: pool.session)."""
        prelude = item.stash.get(PRELUDE_KEY, None)
        setup = (prelude or {}).get("setup")
        if not setup or setup in self._setups_done:
            return
        from rankgate.harness.pluginnames import INPLACE_PLUGIN

        inplace = item.config.pluginmanager.get_plugin(INPLACE_PLUGIN)
        if inplace is None:
            return
        seconds = prelude.get("setup_timeout") or DEFAULT_SETUP_TIMEOUT_S
        what = f"the start timeout of the adoption's setup={setup}"
        saved = dict(os.environ)
        try:
            inplace.run_step(item, seconds, what, lambda: enter({**prelude, "setup_only": True}))
        finally:
            os.environ.clear()  # the test sets them again; in place they must not leak
            os.environ.update(saved)
        self._setups_done.add(setup)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        prelude = item.stash.get(PRELUDE_KEY, None)
        if prelude is None:
            return (yield)  # not adopted: nothing of rankgate's around it
        from rankgate.harness.pluginnames import INPLACE_PLUGIN

        inplace = item.config.pluginmanager.get_plugin(INPLACE_PLUGIN)
        if prelude.get("torch_case"):
            torchcase.without_processes(item.instance)  # setUp starts no processes
        attr = item.stash.get(LAUNCHER_KEY, None)
        cls = getattr(item, "cls", None)
        saved = cls.__dict__.get(attr, _ABSENT) if attr and cls else _ABSENT
        if attr and cls:
            setattr(cls, attr, False)  # the project's hooks would start their own ranks
        body = item.obj
        try:
            if inplace is None:  # in the pool the body runs on the ranks
                return (yield)
            store = None
            if prelude.get("torch_case"):
                store = str(inplace.shared_dir(item.nodeid) / "store")
            item.obj = enter(prelude, body, file_name=store)  # in place it runs here
            if not prelude.get("torch_case"):
                return (yield)
            with torchcase.redirecting():  # its setUp and tearDown run here too
                return (yield)
        finally:
            item.obj = body
            if attr and cls:
                if saved is _ABSENT:
                    delattr(cls, attr)
                else:
                    setattr(cls, attr, saved)


_ABSENT = object()


def _not_adopted(item: pytest.Item, target: str, why: str) -> None:
    """Left to the project's own way, which starts its own ranks: ``launches`` (skipped
    in place, naming ``why``); warned of once collection knows the selected tests."""
    item.stash[NOT_ADOPTED_KEY] = (target, why)
    item.add_marker(pytest.mark.launches)
