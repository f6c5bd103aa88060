"""Each stage's paths cover every file its tests import, so --changed-since never skips
a stage that a change can break.

pytest collects the whole tree once (the session fixture ``collected_tree``, a
subprocess) and says which markers each test carries; a stage's test files are those
with a test its marker expression selects. The files they import, transitively
(rankgate modules, sibling helpers, conftests, the pytest plugins every run loads),
must match the stage's paths.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest
from tree_collection import selects

from rankgate.pipeline import changes, stages

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def collected(collected_tree) -> dict[str, list[list[str]]]:
    """test file -> the marker names of each of its tests."""
    found: dict[str, list[list[str]]] = {}
    for node, names in collected_tree.items():
        found.setdefault(node.split("::", 1)[0], []).append(names)
    return found


def stage_files(stage: stages.Stage, collected) -> list[str]:
    """Test files with at least one test the stage's marker expression selects."""
    return sorted(
        path
        for path, tests in collected.items()
        if any(selects(stage.markers, names) for names in tests)
    )


def plugin_files() -> set[Path]:
    """The modules of rankgate's pytest plugins (pyproject's pytest11 entry points)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = set()
    for target in project["entry-points"]["pytest11"].values():
        found |= closure(module_file(target, ROOT))
    return found


def module_file(name: str, importer: Path) -> Path | None:
    """The file of module ``name`` in this repository (src/, or beside the importer)."""
    parts = name.split(".")
    for base in (ROOT / "src", importer.parent):
        candidate = base.joinpath(*parts)
        for path in (candidate.with_suffix(".py"), candidate / "__init__.py"):
            if path.is_file():
                return path
    return None


@cache  # every closure walks the same modules: each file is parsed once
def imports_of(path: Path) -> frozenset[Path]:
    """Repository files ``path`` imports (at any depth of the file: lazy imports count)."""
    found: set[Path] = set()
    tree = ast.parse(path.read_text(), str(path))
    package = path.parent
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the importer's package
                base = package
                for _ in range(node.level - 1):
                    base = base.parent
                in_src = base.is_relative_to(ROOT / "src")
                stem = ".".join(base.relative_to(ROOT / "src").parts) if in_src else ""
                prefix = ".".join(filter(None, (stem, node.module or "")))
            else:
                prefix = node.module or ""
            names = [f"{prefix}.{alias.name}" for alias in node.names] + [prefix]
        # ``from a import b``: b is a module or a name in a; both resolve where they exist.
        found.update(t for name in names if name and (t := module_file(name, path)))
    return frozenset(found)


@cache
def closure(start: Path | None) -> frozenset[Path]:
    """``start`` and every repository file it imports, transitively, with the packages'
    ``__init__`` files on the way."""
    if start is None:
        return frozenset()
    seen: set[Path] = set()
    todo = [start]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo.extend(imports_of(path))
        parent = path.parent
        while parent.is_relative_to(ROOT / "src" / "rankgate"):
            init = parent / "__init__.py"
            if init.is_file() and init not in seen:
                todo.append(init)
            parent = parent.parent
    return frozenset(seen)


def conftests(test_file: Path) -> set[Path]:
    found, folder = set(), test_file.parent
    while folder.is_relative_to(ROOT):
        if (folder / "conftest.py").is_file():
            found.add(folder / "conftest.py")
        folder = folder.parent
    return found


def test_the_tree_collects_every_stage(collected):
    for stage in stages.all_stages():
        if stage.markers:
            assert stage_files(stage, collected), f"stage {stage.name} selects no test file"


@pytest.mark.parametrize(
    "stage", [s for s in stages.all_stages() if s.markers], ids=lambda s: s.name
)
def test_stage_paths_cover_what_its_tests_import(stage, collected):
    needed: dict[str, str] = {}
    for test in stage_files(stage, collected):
        test_path = ROOT / test
        for start in {test_path, *conftests(test_path)}:
            for path in closure(start):
                needed.setdefault(str(path.relative_to(ROOT)), test)
    for path in plugin_files():
        needed.setdefault(str(path.relative_to(ROOT)), "the pytest plugins")
    uncovered = {
        path: why
        for path, why in sorted(needed.items())
        if not changes.first_match(path, (*stage.paths, *stages.RUN_EVERYTHING_PATHS))
    }
    assert not uncovered, (
        f"stage {stage.name}'s paths miss files its tests import; add them to "
        f"Stage(name={stage.name!r}).paths in src/rankgate/pipeline/stages.py: "
        + "; ".join(f"{path} (from {why})" for path, why in uncovered.items())
    )
