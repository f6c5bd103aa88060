"""The pytest side of adoption: marks adopted tests, switches the project's launcher off
while rankgate runs them, and runs the rank prelude in place."""

from __future__ import annotations

import pytest

from rankgate.harness.adopt import spawnhelper, worldclass
from rankgate.harness.adopt.config import (
    AdoptConfigError,
    SpawnHelper,
    WorldClass,
    parse_spawn_helper,
    parse_world_class,
)
from rankgate.harness.adopt.rankentry import enter
from rankgate.harness.testitem import PRELUDE_KEY

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
        self._installed = False

    @classmethod
    def from_config(cls, config: pytest.Config) -> Adoption | None:
        helpers = config.getini("rankgate_spawn_helpers")
        classes = config.getini("rankgate_world_classes")
        return cls(helpers, classes) if helpers or classes else None

    def _install(self) -> None:
        """Once the test modules can import the helpers (conftests put them on sys.path)."""
        if self._installed:
            return
        for helper in self.helpers:
            try:
                spawnhelper.install(helper)
            except (ImportError, AttributeError) as exc:
                raise pytest.UsageError(
                    f"rankgate adoption: cannot import {helper.target}: {exc}"
                ) from None
        self._installed = True

    @pytest.hookimpl(tryfirst=True)
    def pytest_itemcollected(self, item: pytest.Item) -> None:
        if not isinstance(item, pytest.Function) or item.get_closest_marker("world"):
            return
        self._install()
        for wc in self.classes:
            base = worldclass.base_class(wc)
            if base is None or item.cls is None or not issubclass(item.cls, base):
                continue
            if worldclass.starts_own_ranks(item.cls, wc):
                item.add_marker(pytest.mark.launches)
                return
            found = worldclass.world_of_test(item, wc)
            if isinstance(found, str):
                _not_adopted(item, wc.target, found)
                item.add_marker(pytest.mark.launches)  # the project's launcher starts its ranks
                return
            self._mark(item, found, worldclass.prelude(wc))
            if wc.launcher:
                item.stash[LAUNCHER_KEY] = wc.launcher
            return
        for helper in self.helpers:
            found = spawnhelper.world_of_test(item, helper)
            if found is None:
                continue
            if isinstance(found, str):
                _not_adopted(item, helper.target, found)
                item.add_marker(pytest.mark.launches)  # it starts its own ranks
                return
            self._mark(item, found, {"helpers": self.helper_lines})
            return

    @staticmethod
    def _mark(item: pytest.Item, found: tuple[int, str], prelude: dict) -> None:
        from rankgate.harness.pluginnames import PER_PROCESS_FIXTURES

        used = set(item._fixtureinfo.argnames) & set(PER_PROCESS_FIXTURES)
        if used:
            _not_adopted(item, "rankgate", f"it uses {sorted(used)}, which a rank cannot have")
            return
        world, backend = found
        item.add_marker(pytest.mark.world(world, backend=backend))
        item.stash[PRELUDE_KEY] = prelude

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        from rankgate.harness.pluginnames import INPLACE_PLUGIN

        attr = item.stash.get(LAUNCHER_KEY, None)
        cls = getattr(item, "cls", None)
        saved = cls.__dict__.get(attr, _ABSENT) if attr and cls else _ABSENT
        if attr and cls:
            setattr(cls, attr, False)  # the project's hooks would start their own ranks
        try:
            prelude = item.stash.get(PRELUDE_KEY, None)
            if prelude and item.config.pluginmanager.get_plugin(INPLACE_PLUGIN):
                enter(prelude)  # in place the body runs here; in the pool, on the ranks
            return (yield)
        finally:
            if attr and cls:
                if saved is _ABSENT:
                    delattr(cls, attr)
                else:
                    setattr(cls, attr, saved)


_ABSENT = object()


def _not_adopted(item: pytest.Item, target: str, why: str) -> None:
    item.warn(
        pytest.PytestWarning(f"rankgate: {item.nodeid} runs its own way, not on rankgate's "
                             f"ranks ({target}): {why}")
    )
