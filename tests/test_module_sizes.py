"""Every module of src/rankgate stays small enough to read in one sitting: none is over
600 lines, and no class over 400 (a class past that holds several jobs: split them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400


def oversized(root: Path) -> list[str]:
    """Each module and class under ``root`` past its limit, with its length."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        where = path.relative_to(root)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            found.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text, str(path))):
            length = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, ast.ClassDef) and length > MAX_CLASS_LINES:
                found.append(f"{where}: class {node.name}, {length} lines")
    return found


def test_the_check_sees_a_long_module_and_a_long_class(tmp_path):
    (tmp_path / "long.py").write_text("x = 1\n" * 601)
    (tmp_path / "wide.py").write_text("class Wide:\n" + "    x = 1\n" * 400)
    (tmp_path / "fine.py").write_text("class Fine:\n" + "    x = 1\n" * 399)
    assert oversized(tmp_path) == ["long.py: 601 lines", "wide.py: class Wide, 401 lines"]


def test_no_module_or_class_of_src_is_oversized():
    assert oversized(SRC) == []
