"""Names in src/rankgate say one thing: no class name is defined twice, and a module's
file name that repeats in several packages means the same kind of module in each.

A class name that two modules define means two things to a reader who meets it in a
traceback, a docstring or an import; each class gets the name of what it is instead. A
repeated file name is allowed only where :data:`SAME_MEANING` says what it means in
every package that has one.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[1] / "src"


def classes_defined_twice(root: Path) -> list[str]:
    """Each class name defined more than once under ``root``, with where."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{path.relative_to(root)}:{node.lineno}")
    return sorted(
        f"{name}: {', '.join(places)}" for name, places in where.items() if len(places) > 1
    )


def test_the_check_sees_a_class_defined_twice(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "a.py").write_text("class Verdict:\n    pass\n\n\nclass Only:\n    pass\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    class Verdict:\n        pass\n")
    assert classes_defined_twice(tmp_path) == ["Verdict: a.py:1, pkg/b.py:2"]


def test_no_class_name_is_defined_twice_in_src():
    assert classes_defined_twice(SRC) == []


SAME_MEANING = {
    "options.py": "a part's command-line options (the harness's pytest options, a stage run's)",
    "plugin.py": "a pytest plugin (the harness's, the shards')",
    "reference.py": "the single-process reference a workload is checked against",
    "reruns.py": "a harness mode's reruns of a failed world test (pool, in place)",
    "session.py": "a harness mode's pytest session (pool, in place)",
    "target.py": "a dispatch target (the seam every target implements, interLink's)",
    "verdict.py": "the cross-rank verdict of one test (shared, and in place's as shown)",
}
"""Each file name that more than one package of src/rankgate has, and what it means in all."""


def repeated_basenames(root: Path) -> dict[str, list[str]]:
    """Each module file name (``__init__.py`` aside) found in more than one folder."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if path.name != "__init__.py":
            where[path.name].append(str(path.parent.relative_to(root)))
    return {name: folders for name, folders in where.items() if len(folders) > 1}


def test_the_check_sees_a_repeated_basename(tmp_path):
    for folder in ("a", "b", "b/c"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "a" / "results.py").write_text("")
    (tmp_path / "b" / "c" / "results.py").write_text("")
    (tmp_path / "b" / "only.py").write_text("")
    assert repeated_basenames(tmp_path) == {"results.py": ["a", "b/c"]}


def test_a_repeated_basename_means_one_thing():
    unexplained = sorted(set(repeated_basenames(SRC)) - set(SAME_MEANING))
    assert unexplained == [], (
        "these file names repeat across packages of src/rankgate: rename the modules that "
        "mean different things, or say in SAME_MEANING what they all mean"
    )
