"""Every user-facing error of src/rankgate derives from :class:`rankgate.errors.RankgateError`.

The rule is the base's docstring: internal control flow (BaseException-derived, private,
or listed in :data:`INTERNAL` with where it is caught) stays outside; everything else is
an error a user sees and derives from the base, beside the builtin base its callers catch.
The check reads the source (no import runs), following base classes by name.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

from rankgate.errors import RankgateError

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[1] / "src"
BASE = "RankgateError"

INTERNAL = {
    "AnotherRankFailedExample": "harness/hypothesis_bridge.py: its makereport hook turns it into a pass",
    "RunAborted": "harness/inplace: caught where a rank waits, and turned into the run's stop",
    "PeerGone": "harness/inplace: caught where a rank waits, and reported as the ranks that ended",
    "Stopped": "harness/inplace/round.py: caught by the round, whose session then ends in order",
    "GpuHeldTooLong": "harness/pool/session.py: caught, and its text raised as the test's failure",
}
"""Exceptions derived from Exception that never reach a user as themselves: each is
caught inside rankgate, where said."""

_EXTERNAL_EXCEPTIONS = {"CalledProcessError", "UsageError", "ArgumentTypeError"}
"""Exception classes of other packages that a rankgate class may derive from."""


def _builtin_exceptions() -> set[str]:
    return {
        name
        for name, value in vars(builtins).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }


_CONTROL_FLOW = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type)
    and issubclass(value, BaseException)
    and not issubclass(value, Exception)
}
"""BaseException itself and the builtins beside Exception (KeyboardInterrupt, SystemExit):
a class derived from one of them is control flow by the rule."""


def exception_classes(root: Path) -> dict[str, tuple[str, bool]]:
    """Each exception class under ``root``: name -> (where, derives from ``BASE``).

    A class is an exception when a base (by its last dotted name) is a builtin or known
    exception or another exception class under ``root``; it derives from ``BASE`` when a
    chain of its bases reaches it. BaseException-derived classes are left out (control
    flow, by the rule).
    """
    known = _builtin_exceptions() | _EXTERNAL_EXCEPTIONS
    classes: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rpartition(".")[2] for b in node.bases]
                classes[node.name] = (f"{path.relative_to(root)}:{node.lineno}", bases)

    def chain(name: str, seen: frozenset = frozenset()) -> set[str]:
        """Every base name above ``name``, itself included."""
        if name in seen or name not in classes:
            return {name}
        found = {name}
        for base in classes[name][1]:
            found |= chain(base, seen | {name})
        return found

    found = {}
    for name, (where, _) in classes.items():
        above = chain(name) - {name}
        if name == BASE or not above & (known | {BASE}) or above & _CONTROL_FLOW:
            continue
        found[name] = (where, BASE in above)
    return found


def outside_the_base(root: Path) -> list[str]:
    """User-facing exception classes under ``root`` that do not derive from ``BASE``."""
    return sorted(
        f"{where}: {name}"
        for name, (where, derived) in exception_classes(root).items()
        if not derived and not name.startswith("_") and name not in INTERNAL
    )


def test_the_check_sees_an_error_outside_the_base(tmp_path):
    (tmp_path / "errors.py").write_text(f"class {BASE}(Exception):\n    pass\n")
    (tmp_path / "a.py").write_text(
        f"class Good({BASE}, ValueError):\n    pass\n\n\n"
        "class Child(Good):\n    pass\n\n\n"
        "class Bad(errors.ValueError):\n    pass\n\n\n"
        "class AlsoBad(Bad):\n    pass\n\n\n"
        "class Stop(BaseException):\n    pass\n\n\n"
        "class _Private(Exception):\n    pass\n\n\n"
        "class Stopped(Exception):\n    pass\n\n\n"
        "class NotAnError:\n    pass\n"
    )
    assert outside_the_base(tmp_path) == ["a.py:13: AlsoBad", "a.py:9: Bad"]


def test_every_user_facing_error_derives_from_the_base():
    assert outside_the_base(SRC) == []


def test_every_internal_exception_is_still_defined():
    assert sorted(set(INTERNAL) - set(exception_classes(SRC))) == []


def test_an_error_keeps_its_builtin_base():
    from rankgate.dispatch.profile import ProfileError
    from rankgate.workloads.comm.backend import CollectiveTimeoutError

    assert issubclass(ProfileError, RankgateError) and issubclass(ProfileError, ValueError)
    assert issubclass(CollectiveTimeoutError, RankgateError)
    assert issubclass(CollectiveTimeoutError, TimeoutError)
