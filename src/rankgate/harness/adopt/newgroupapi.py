"""Tests that split or merge groups of torch's newer group API, left to their own way.

``torch.distributed._dist2.new_group`` makes a group that torch.distributed does not
register; its ``split_group`` and ``merge_remote_group`` crash the process (SIGSEGV in
``ProcessGroupGloo::split``, torch 2.13) when the process also has a default process
group, as every rank of rankgate's has. Its own way each test is a new process without
one, and passes. Such a test is found at collection, from its source: a
``.split_group(...)`` or ``.merge_remote_group(...)`` called on a group (not on the
torch.distributed module, whose ``split_group`` works on rankgate's ranks), in a module
that uses ``torch.distributed._dist2``. It keeps its own launcher, saying why.

Runs in the controller at collection: standard library only (torch is imported by then).
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import types

NEW_API = "torch.distributed._dist2"
CALLS = ("split_group", "merge_remote_group")


def why_not_adopted(item) -> str | None:
    """Why the test cannot run on rankgate's ranks (None: it can)."""
    module = sys.modules.get(getattr(item.module, "__name__", ""), item.module)
    if not _uses_new_api(module):
        return None
    function = getattr(item, "function", None)
    try:
        source = textwrap.dedent(inspect.getsource(function))
        first = inspect.getsourcelines(function)[1]
    except (OSError, TypeError):
        return None
    calls = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    ]
    for node in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):  # the first in the source
        if node.func.attr in CALLS and not _is_torch_distributed(node.func.value, module):
            where = f"{item.path.name}:{first + node.lineno - 1}"
            return (
                f"it calls {node.func.attr} at {where} on a group of torch's newer group API "
                f"({NEW_API}), which crashes (SIGSEGV) in a process that also has a default "
                "process group, as rankgate's ranks have; its own launcher runs it"
            )
    return None


def _uses_new_api(module) -> bool:
    for value in vars(module).values():
        if isinstance(value, types.ModuleType) and value.__name__ == NEW_API:
            return True
        if getattr(value, "__module__", None) == NEW_API:
            return True
    return False


def _is_torch_distributed(node: ast.expr, module) -> bool:
    """Whether ``node`` names the torch.distributed module (``dist.split_group``)."""
    if isinstance(node, ast.Name):
        value = vars(module).get(node.id)
        return isinstance(value, types.ModuleType) and value.__name__ == "torch.distributed"
    return isinstance(node, ast.Attribute) and ast.unparse(node) == "torch.distributed"
