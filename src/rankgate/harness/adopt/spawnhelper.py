"""A suite's own spawn helper, run on rankgate's ranks.

Tests like ``run_distributed_test(body, world_size=2, backend="gloo")`` start
processes for every test. Adopted, the helper is replaced (in every module that
holds it) by one that, on a rank of a world test, runs ``body`` on this rank with the
launcher's variables set; elsewhere the project's own helper runs as before. At
collection, a test whose source calls the helper with a world size and backend that
can be read there (literals, its parametrize arguments, module constants, the
helper's defaults) is marked ``world(n, backend=...)``; one whose call cannot be read
starts its own ranks: it is marked ``launches`` and the helper runs its own way. So
is a test with code after its helper calls: that code expects one process again.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
from collections.abc import Iterable

from rankgate.harness.adopt.config import SpawnHelper, parse_spawn_helper
from rankgate.harness.adopt.prelude import call_target, launcher_environment

ADOPTED_ATTR = "__rankgate_adopted__"
_BACKENDS = {"gloo": "gloo", "nccl": "nccl"}


class AdoptionError(RuntimeError):
    """An adopted helper called in a way its test's marker did not foresee."""


def install_lines(lines: Iterable[str]) -> list[SpawnHelper]:
    helpers = [parse_spawn_helper(line) for line in lines]
    for helper in helpers:
        install(helper)
    return helpers


def install(helper: SpawnHelper):
    """Replace the helper everywhere it is bound; return the replacement (idempotent)."""
    current = call_target(helper.target)
    if getattr(current, ADOPTED_ATTR, None) is not None:
        return current
    adopted = _adopt(current, helper)
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", None)
        if not isinstance(names, dict):
            continue
        for name, value in list(names.items()):
            if value is current:
                setattr(module, name, adopted)
    return adopted


def _adopt(original, helper: SpawnHelper):
    signature = inspect.signature(original)
    body_param = helper.func or next(iter(signature.parameters))

    @functools.wraps(original)
    def adopted(*args, **kwargs):
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return original(*args, **kwargs)  # not on a rank: the project's own way
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        given = bound.arguments
        world = _world_value(helper, given)
        if world != dist.get_world_size():
            raise AdoptionError(
                f"{helper.target} was called for {world} ranks on a world of "
                f"{dist.get_world_size()}: mark the test @pytest.mark.world({world})"
            )
        body_args = tuple(given.get(helper.args) or ()) if helper.args else ()
        body_kwargs = dict(given.get(helper.kwargs) or {}) if helper.kwargs else {}
        with launcher_environment(helper.env):
            return given[body_param](*body_args, **body_kwargs)

    setattr(adopted, ADOPTED_ATTR, helper)
    adopted.__wrapped__ = original
    return adopted


def _world_value(helper: SpawnHelper, given: dict) -> int:
    return int(helper.world) if helper.world.isdigit() else int(given[helper.world])


# --------------------------------------------------------------------- collection


def world_of_test(item, helper: SpawnHelper) -> tuple[int, str] | str | None:
    """(world, backend) of the helper calls in the test's source; a string when they
    cannot be read before running (why); None when the test never calls the helper."""
    helper_obj = call_target(helper.target)
    original = getattr(helper_obj, "__wrapped__", helper_obj)
    names = {
        name for name, value in vars(item.module).items() if value in (helper_obj, original)
    }
    names.add(helper.target.rpartition(":")[2].rpartition(".")[2])
    calls = [c for c in _calls(item.function) if _called_name(c) in names]
    if not calls:
        return None
    after = _code_after_the_calls(item.function, names)
    if after:
        return f"line {after} runs after the helper's ranks ended, in one process"
    signature = inspect.signature(original)
    found = set()
    for call in calls:
        try:
            found.add(_read_call(call, signature, helper, item))
        except _Unreadable as exc:
            return f"{ast.unparse(call)[:120]}: {exc}"
    if len(found) > 1:
        return f"it calls {helper.target} with different worlds: {sorted(found)}"
    return found.pop()


class _Unreadable(Exception):
    pass


@functools.cache
def _tree(code) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(code)))
    except (OSError, TypeError, SyntaxError):
        return None


def _calls(function) -> list[ast.Call]:
    tree = _tree(getattr(function, "__code__", None))
    return [] if tree is None else [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _code_after_the_calls(function, names: set[str]) -> int | None:
    """The first line of the test body after its first helper call that is not itself a
    helper call (None: the body ends with its helper calls).

    On rankgate's ranks the whole body runs on every rank, so code that expects to be
    back in one process after the helper returned (say, reading a checkpoint with a
    function that refuses a distributed context) cannot be adopted.
    """
    tree = _tree(getattr(function, "__code__", None))
    if tree is None or not tree.body or not hasattr(tree.body[0], "body"):
        return None
    body, first = tree.body[0].body, None
    for index, statement in enumerate(body):
        calls = [n for n in ast.walk(statement) if isinstance(n, ast.Call)]
        if any(_called_name(c) in names for c in calls):
            first = index
            break
    if first is None:
        return None
    for statement in body[first + 1 :]:
        is_call = isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
        if not (is_call and _called_name(statement.value) in names):
            return statement.lineno + function.__code__.co_firstlineno - 1
    return None


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _read_call(call: ast.Call, signature, helper: SpawnHelper, item) -> tuple[int, str]:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        raise _Unreadable("*args or **kwargs in the call")
    bound = signature.bind_partial(*call.args, **{k.arg: k.value for k in call.keywords})
    if helper.world.isdigit():
        world = int(helper.world)
    else:
        world = _value(bound, signature, helper.world, item)
    if not isinstance(world, int) or isinstance(world, bool):
        raise _Unreadable(f"{helper.world}={world!r} is not a number of ranks")
    backend = "gloo"
    if helper.backend:
        value = _value(bound, signature, helper.backend, item)
        backend = _BACKENDS.get(str(value).lower(), "auto")
    return world, backend


def _value(bound, signature, param: str, item):
    if param not in signature.parameters:
        raise _Unreadable(f"the helper has no parameter {param!r}")
    if param not in bound.arguments:
        default = signature.parameters[param].default
        if default is inspect.Parameter.empty:
            raise _Unreadable(f"{param} is not given")
        return default
    node = bound.arguments[param]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        params = getattr(getattr(item, "callspec", None), "params", {})
        if node.id in params:
            return params[node.id]
        if node.id in vars(item.module):
            return vars(item.module)[node.id]
    raise _Unreadable(f"{param}={ast.unparse(node)} is known only when the test runs")
