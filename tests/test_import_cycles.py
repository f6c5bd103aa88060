"""No two modules of src/rankgate import each other, directly or round a longer loop, and
no import runs back up a floor.

Every import counts, at module level, inside functions and under TYPE_CHECKING: a loop
of any kind means two modules share a record that belongs in a third, and an import
that runs up a floor means a record sits above one who needs it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(*, inits: bool = False) -> dict[str, set[str]]:
    """Module -> the rankgate modules it imports (a package's __init__ is not followed
    unless ``inits``)."""
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        # A package's __init__ only hands names on; its imports make no loop of their own.
        graph[name] = {t for t in targets if t in modules and t != name}
        if path.name == "__init__.py" and not inits:
            graph[name] = set()
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_finder_sees_a_loop():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_src_has_no_import_cycle():
    graph = import_graph()
    assert "rankgate.dispatch.target" in graph  # the walk found the package
    assert cycles(graph) == []


FLOORS: tuple[tuple[str, ...], ...] = (
    ("rankgate", "errors", "proc", "cliargs", "tomlfile", "fastexit"),  # version, errors, commands, args, TOML, exit
    ("launch",),  # rank environments and launcher commands
    ("harness", "workloads", "parity", "envcheck"),  # the plugin; what the suites exercise
    ("report",),  # results of runs: JUnit, summaries, launched jobs
    ("dispatch", "bench"),  # remote targets; benchmarks
    ("pipeline",),  # the stage list, the gate and the commands that run stages
    ("cli", "pytest_plugin"),  # the entry points: the ``rankgate`` command, pytest's plugin
    ("docsite", "codemap"),  # the documentation site's generated pages: from the entry points, the docstrings
)
"""The rooms of src/rankgate (a top-level package or module) by floor, lowest first: a
module imports only from its own floor or below."""


def floor_of(module: str) -> int:
    room = module.split(".")[1] if "." in module else module
    for floor, rooms in enumerate(FLOORS):
        if room in rooms:
            return floor
    raise AssertionError(f"{module} is in no room of FLOORS: add {room!r} to a floor")


def runs_back_up(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every import to a higher floor."""
    return sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        for target in targets
        if floor_of(target) > floor_of(name)
    )


def test_the_floor_check_sees_an_import_that_runs_back_up():
    graph = {"rankgate.proc.command": {"rankgate.pipeline.stages"}, "rankgate.cli": {"rankgate"}}
    assert runs_back_up(graph) == ["rankgate.proc.command -> rankgate.pipeline.stages"]
    with pytest.raises(AssertionError, match="add 'nowhere' to a floor"):
        floor_of("rankgate.nowhere.x")


def test_no_import_runs_back_up_a_floor():
    graph = import_graph(inits=True)
    assert "rankgate.pipeline.executor" in graph
    assert runs_back_up(graph) == []


WINGS = ("rankgate.harness.pool", "rankgate.harness.inplace")
"""The harness's two modes: neither imports the other, and what both share imports neither."""


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def imports_into(graph: dict[str, set[str]], importers, package: str) -> list[str]:
    """``module -> target`` for each import of ``package`` by a module ``importers`` accepts."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if importers(module)
        for target in targets
        if _in(target, package) and not _in(module, package)
    )


def test_the_finder_sees_an_import_into_a_package():
    graph = {"h.pool.a": {"h.inplace.b"}, "h.inplace.b": {"h.verdict"}, "h.verdict": set()}
    assert imports_into(graph, lambda m: _in(m, "h.pool"), "h.inplace") == [
        "h.pool.a -> h.inplace.b"
    ]
    assert imports_into(graph, lambda m: _in(m, "h.inplace"), "h.pool") == []


def test_neither_wing_of_the_harness_imports_the_other():
    graph = import_graph()
    assert "rankgate.harness.pool.session" in graph and "rankgate.harness.inplace.stop" in graph
    pool, inplace = WINGS
    assert imports_into(graph, lambda m: _in(m, pool), inplace) == []
    assert imports_into(graph, lambda m: _in(m, inplace), pool) == []


def test_what_both_modes_share_imports_neither_wing():
    # The plugin alone chooses a mode, so it alone sees both.
    graph = import_graph()

    def shared(module: str) -> bool:
        return (
            _in(module, "rankgate.harness")
            and module != "rankgate.harness.plugin"
            and not any(_in(module, wing) for wing in WINGS)
        )

    for wing in WINGS:
        assert imports_into(graph, shared, wing) == []


def test_the_report_reads_the_rank_files_without_the_in_place_wing():
    # Their formats live in rankgate.harness.rankfiles, which both import.
    graph = import_graph()
    report = imports_into(graph, lambda m: _in(m, "rankgate.report"), "rankgate.harness.rankfiles")
    assert report, "the report reads the per-rank files through rankfiles"
    assert imports_into(graph, lambda m: _in(m, "rankgate.report"), WINGS[1]) == []
