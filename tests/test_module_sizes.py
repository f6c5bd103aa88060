"""Every module, class and function of src/rankgate stays small enough to hold in mind.

The caps, and why each number:

- **module: 500 lines.** A module with one job fits in one sitting; the anchors this
  project imitates keep medians of 150-200 lines (nox, pytest-xdist) and their largest
  modules near 500. Past that a file holds two jobs: split it along the seam between them.
- **class: 350 lines.** A class past that holds several lifecycles or roles (a plugin that
  is also a scheduler and a recorder); give each its own object that talks through
  narrow callbacks, never a mixin cut out only to fit.
- **function: 60 lines**, from the ``def`` line through the last line, docstring included
  (decorators aside). One screen: a function that long does one phase of one lifecycle;
  longer ones do several in a row (parse, then run, then report), and each of those is
  a function of its own.

A cap is a tripwire, not a target: cut along a seam, never shave lines to fit.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 350
MAX_FUNCTION_LINES = 60


def oversized(root: Path) -> list[str]:
    """Each module, class and function under ``root`` past its cap, with its length."""
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
            elif (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and length > MAX_FUNCTION_LINES
            ):
                found.append(f"{where}: function {node.name}, {length} lines")
    return found


def test_the_check_sees_a_long_module_and_a_long_class(tmp_path):
    (tmp_path / "long.py").write_text("x = 1\n" * 501)
    (tmp_path / "wide.py").write_text("class Wide:\n" + "    x = 1\n" * 350)
    (tmp_path / "fine.py").write_text("class Fine:\n" + "    x = 1\n" * 349)
    assert oversized(tmp_path) == ["long.py: 501 lines", "wide.py: class Wide, 351 lines"]


def test_the_check_sees_a_long_function_from_its_def_line(tmp_path):
    def function(head: str, lines: int, indent: str = "") -> str:
        """``head`` and a body of ``lines`` lines, its docstring the first."""
        body = ['"""Docstring."""'] + ["x = 1"] * (lines - 1)
        return "".join(f"{indent}{line}\n" for line in [head, *(f"    {b}" for b in body)])

    (tmp_path / "funcs.py").write_text(
        "@decorator\n"
        + function("def fine():", 59)  # 60 lines with its def line: at the cap
        + function("async def longer():", 60)
        + "class Holder:\n"
        + function("def method(self):", 60, indent="    ")
    )
    assert oversized(tmp_path) == [
        "funcs.py: function longer, 61 lines",
        "funcs.py: function method, 61 lines",
    ]


def test_no_module_class_or_function_of_src_is_oversized():
    assert oversized(SRC) == []
