"""What a world test's own set-up left on its class and its instance, for the ranks.

The controller runs a test class's set-up once: ``setup_class`` or ``setUpClass`` and
class-scoped fixtures that set ``request.cls.x`` change the class; ``setup_method``,
``setUp`` and fixtures that set ``self.x`` fill the instance. Each rank imports the
test's module afresh, so its class and its instance have none of that: the changes
travel with the test, as fixture values do.
"""

from __future__ import annotations

import pickle
import types
import unittest

_PROTOCOL = pickle.HIGHEST_PROTOCOL
# What unittest's TestCase and IsolatedAsyncioTestCase put on every instance as they
# start and run it: the rank's own instance has its own (the controller's result object
# and event loop runner cannot travel). tearDown: pytest's --pdb replaces it.
_TESTCASE_INTERNALS = frozenset(vars(unittest.IsolatedAsyncioTestCase())) | {
    "_outcome",
    "_asyncioRunner",
    "tearDown",
}


def class_baseline(cls: type) -> dict[str, tuple[object, bytes | None]]:
    """The class's attributes as its module defined them: taken at collection, before
    any set-up ran. Each maps to (the object, its pickle; None for code and for what
    cannot be pickled)."""
    return {
        name: (value, None if _code(value) else _pickle_or_none(value))
        for name, value in vars(cls).items()
        if not _dunder(name)
    }


def class_changes(cls: type, baseline: dict[str, tuple[object, bytes | None]]) -> dict:
    """The attributes set-up added, replaced or changed in place since the baseline."""
    changed = {}
    for name, value in vars(cls).items():
        if _dunder(name):
            continue
        before = baseline.get(name)
        if before is None or before[0] is not value:
            changed[name] = value  # added or replaced: it must travel
        elif before[1] is not None and _pickle_or_none(value) != before[1]:
            changed[name] = value  # a list or dict the set-up filled
    return changed


def instance_attributes(instance: object | None, test_name: str) -> dict:
    """What set-up put on the test's instance (a TestCase's own bookkeeping left out)."""
    if instance is None:
        return {}
    state = vars(instance)
    if isinstance(instance, unittest.TestCase):
        # pytest binds the test method to the instance under its own name while it runs
        skip = _TESTCASE_INTERNALS | {test_name}
        state = {name: value for name, value in state.items() if name not in skip}
    return state


def _dunder(name: str) -> bool:
    # and what some pytest versions hang on the class: _Class__pytest_setup_class
    return (name.startswith("__") and name.endswith("__")) or "__pytest" in name


def _code(value: object) -> bool:
    """Methods, properties, nested classes, modules: the rank's import has them."""
    return isinstance(value, (type, types.ModuleType)) or hasattr(value, "__get__")


def _pickle_or_none(value: object) -> bytes | None:
    try:
        return pickle.dumps(value, protocol=_PROTOCOL)
    except Exception:
        return None  # a lock or a handle made at import: the rank made its own
