"""Names in src/rankgate say one thing: no class name is defined twice.

A class name that two modules define means two things to a reader who meets it in a
traceback, a docstring or an import; each class gets the name of what it is instead.
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
