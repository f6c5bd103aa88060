"""A suite's own spawn helper, run on rankgate's ranks.

Tests like ``run_distributed_test(body, world_size=2, backend="gloo")`` start
processes for every test. Adopted, the helper is replaced (in every module that
holds it) by one that, on a rank of a world test, runs ``body`` on this rank with the
launcher's variables set; elsewhere the project's own helper runs as before. At
collection, a test whose source calls the helper with a world size and backend that
can be read there (literals, its parametrize arguments, module constants, the
helper's defaults) is marked ``world(n, backend=...)``; one whose call cannot be read
starts its own ranks: it is marked ``launches`` and the helper runs its own way.

A test with code after its helper calls (reading back what the ranks wrote) expects
one process again there, as the project's helper leaves it: after the last call every
rank waits for the others, ranks other than 0 end the test, and rank 0 runs the rest
with the process group out of sight (``dist.is_initialized()`` is false) until the
test ends.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
from collections.abc import Iterable

from rankgate.errors import RankgateError
from rankgate.harness.adopt.config import SpawnHelper, parse_spawn_helper
from rankgate.harness.adopt.prelude import call_target, launcher_environment

ADOPTED_ATTR = "__rankgate_adopted__"
_BACKENDS = {"gloo": "gloo", "nccl": "nccl"}


class HelperWorldError(RankgateError, RuntimeError):
    """An adopted helper called in a way its test's marker did not foresee."""


class DoneOnThisRank(BaseException):
    """Raised on ranks other than 0 after the last helper call of a test with code after
    it: the project's helper would have returned in one process, rank 0's."""


_after: dict = {"calls_left": None, "hidden": None}
"""This rank's test with code after its helper calls: calls before that code, and the
process group rank 0 hid while the code runs."""


def expect_code_after(calls: int) -> None:
    """The test about to run has ``calls`` helper calls, then code for one process."""
    _after.update(calls_left=calls, hidden=None)


def end_of_test() -> None:
    """Bring back the process group hidden for the code after the helper calls."""
    hidden = _after["hidden"]
    _after.update(calls_left=None, hidden=None)
    if hidden is not None:
        from torch.distributed import distributed_c10d as c10d

        c10d._world.default_pg = hidden


def _after_a_call() -> None:
    if _after["calls_left"] is None:
        return
    _after["calls_left"] -= 1
    if _after["calls_left"] > 0:
        return
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    dist.barrier()  # every rank's body has ended, as when the helper's processes joined
    if dist.get_rank() != 0:
        raise DoneOnThisRank
    _after["hidden"] = c10d._world.default_pg
    c10d._world.default_pg = None  # back in one process, as far as the test can tell


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
            raise HelperWorldError(
                f"{helper.target} was called for {world} ranks on a world of "
                f"{dist.get_world_size()}: mark the test @pytest.mark.world({world})"
            )
        body_args = tuple(given.get(helper.args) or ()) if helper.args else ()
        body_kwargs = dict(given.get(helper.kwargs) or {}) if helper.kwargs else {}
        with launcher_environment(helper.env):
            result = given[body_param](*body_args, **body_kwargs)
        _after_a_call()
        return result

    setattr(adopted, ADOPTED_ATTR, helper)
    adopted.__wrapped__ = original
    return adopted


def _world_value(helper: SpawnHelper, given: dict) -> int:
    return int(helper.world) if helper.world.isdigit() else int(given[helper.world])


# --------------------------------------------------------------------- collection


def world_of_test(item, helper: SpawnHelper) -> tuple[int, str, int] | str | None:
    """(world, backend, calls before code that runs after them; 0 when none) of the
    helper calls in the test's source; a string when they cannot be read before running
    (why); None when the test never calls the helper."""
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
    if isinstance(after, str):
        return after
    signature = inspect.signature(original)
    found = set()
    for call in calls:
        try:
            found.add(_read_call(call, signature, helper, item))
        except _Unreadable as exc:
            return f"{ast.unparse(call)[:120]}: {exc}"
    if len(found) > 1:
        return f"it calls {helper.target} with different worlds: {sorted(found)}"
    return (*found.pop(), after)


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


def _code_after_the_calls(function, names: set[str]) -> int | str:
    """How many helper calls come before code that runs after them (0: the body ends
    with its helper calls); a string saying why such code cannot be adopted.

    That code runs on rank 0 once every rank's body ended, as in the one process the
    project's helper returns to; so the calls before it must be plain statements of
    the test's body (their number is counted as they run), with none after it.
    """
    tree = _tree(getattr(function, "__code__", None))
    if tree is None or not tree.body or not hasattr(tree.body[0], "body"):
        return 0
    body = tree.body[0].body
    calling = [i for i, statement in enumerate(body) if _calls_helper(statement, names)]
    if not calling or calling[-1] == len(body) - 1:
        return 0  # the body ends with its helper calls
    first_after = next(i for i in range(calling[0], len(body)) if i not in calling)
    line = body[first_after].lineno + function.__code__.co_firstlineno - 1
    if calling[-1] > first_after:
        return (
            f"line {line} runs between the helper's calls, in one process between two "
            "worlds, which rankgate's ranks cannot give it"
        )
    if not all(_plain_call(body[i], names) for i in calling):
        return (
            f"line {line} runs after the helper's ranks ended, and a helper call before "
            "it sits inside other code, so rankgate cannot tell which call is the last"
        )
    return len(calling)


def _plain_call(statement: ast.AST, names: set[str]) -> bool:
    """``helper(...)`` or ``x = helper(...)`` as a statement of its own."""
    value = getattr(statement, "value", None)
    plain = isinstance(statement, (ast.Expr, ast.Assign, ast.AnnAssign))
    return plain and isinstance(value, ast.Call) and _called_name(value) in names


def _calls_helper(statement: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Call) and _called_name(n) in names for n in ast.walk(statement))


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
