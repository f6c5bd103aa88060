"""torch.distributed functions a test replaced: found at the end of the test, put back,
and named in its failure.

A test that assigns ``dist.all_reduce = lambda *a, **k: None`` passes itself and breaks
every later test on that rank (which then blames the innocent). After each world test the
functions of ``torch.distributed`` (and of ``distributed_c10d``, where they live) are
compared with what they were when it started; one the test put there (its code is not
torch's nor rankgate's, whose ledger wraps the collectives) is put back, and the test
fails naming it. A replacement a ``monkeypatch`` fixture made is undone by that fixture:
it is left alone.

Imports the standard library and torch only (it runs inside rank processes).
"""

from __future__ import annotations

import types
from collections.abc import Iterable

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

_MODULES = (dist, c10d)
_OWN = ("torch", "rankgate")
"""Where the functions that may stand there come from (torch's, the ledger's wrappers)."""


class FunctionWatch:
    """The functions of torch.distributed when a test starts."""

    def __init__(self) -> None:
        # Each module's namespace as it is, copied in C: taken before every test, where
        # picking its ~390 names' functions one by one took 0.4-1 ms of a rank's 2 ms.
        self.before = [(module, dict(vars(module))) for module in _MODULES]

    def put_back(self, fixtures: Iterable[object] = ()) -> list[str]:
        """Put back each function the test replaced; their names ("torch.distributed.
        all_reduce (now <lambda> at test_x.py:6)"), [] for none. ``fixtures``: the
        test's fixture values (in place), whose ``monkeypatch`` undoes its own changes."""
        found = []
        for module, before in self.before:
            now_names = vars(module)
            if _unchanged(before, now_names):
                continue
            patched = _monkeypatched(fixtures)
            for name, value in before.items():
                now = now_names.get(name)
                if now is value or not _function(name, value):
                    continue
                if (module, name) in patched or _own(now):
                    continue
                setattr(module, name, value)
                found.append(f"{module.__name__}.{name} (now {_what(now)})")
        return found


def _unchanged(before: dict, now: dict) -> bool:
    """Whether the namespace holds the same names, each the very object it held (one
    C-level pass: values compare by identity first, by ``==`` only where one changed)."""
    try:
        return before == now
    except Exception:  # a changed value whose == raises (a tensor's): look name by name
        return False


def problem(found: list[str]) -> str:
    """The failure's text."""
    return (
        f"rankgate: the test replaced {'; '.join(found)}. It is put back for the tests after "
        "it: patch it with the monkeypatch fixture or unittest.mock.patch (undone when the "
        "test ends), never by assignment"
    )


def _function(name: str, value: object) -> bool:
    return not name.startswith("_") and callable(value) and not isinstance(value, type)


def _own(value: object) -> bool:
    return str(getattr(value, "__module__", "") or "").startswith(_OWN)


def _what(value: object) -> str:
    """'<lambda> at test_x.py:6', or the object's type where it has no code."""
    code = getattr(value, "__code__", None)
    if isinstance(code, types.CodeType):
        file = code.co_filename.rsplit("/", 1)[-1]
        return f"{code.co_name} at {file}:{code.co_firstlineno}"
    return type(value).__name__ if value is not None else "deleted"


def _monkeypatched(fixtures: Iterable[object]) -> set[tuple[object, str]]:
    """(module, name) pairs a monkeypatch fixture among ``fixtures`` set."""
    found = set()
    for value in fixtures:
        for target, name, _ in getattr(value, "_setattr", None) or ():
            found.add((target, name))
    return found
