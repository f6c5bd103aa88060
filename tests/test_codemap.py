"""The code map (docs/code-map.md and docs/code-map/): every package and module with its
docstring's first sentence, as the code says now."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankgate import codemap

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def planted(root: Path) -> Path:
    """A package ``pkg`` with a module, a subpackage and a module inside it."""
    package = root / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""The planted package. More words."""\n')
    (package / "one.py").write_text('"""Does one thing.\n\nDetails, left out."""\n')
    (package / "sub" / "__init__.py").write_text('"""The sub package: ``two`` inside."""\n')
    (package / "sub" / "two.py").write_text('"""Reads :mod:`pkg.one` and a|b. Then more."""\n')
    return package


def test_every_module_has_a_docstring():
    assert codemap.undocumented() == [], "give each a docstring whose first sentence says its job"


def test_the_committed_map_says_what_the_code_says():
    assert codemap.stale(ROOT / "docs") == [], (
        "the code map is stale: run python -m rankgate.codemap (nox -s docs does) and commit"
    )


def test_a_module_without_a_docstring_is_named(tmp_path):
    package = planted(tmp_path)
    (package / "sub" / "bare.py").write_text("X = 1\n")
    assert codemap.undocumented(package) == ["pkg/sub/bare.py"]
    with pytest.raises(codemap.UndocumentedModules, match=r"pkg/sub/bare\.py"):
        codemap.pages(package)


def test_each_package_lists_its_modules_with_their_first_sentence(tmp_path):
    pages = codemap.pages(planted(tmp_path))
    assert sorted(pages) == ["code-map.md", "code-map/sub.md"]
    index, sub = pages["code-map.md"], pages["code-map/sub.md"]
    assert "| `one.py` | Does one thing. |" in index
    assert "| [`pkg.sub`](code-map/sub.md#pkgsub) | The sub package: `two` inside. |" in index
    assert "| `two.py` | Reads `pkg.one` and a\\|b. |" in sub
    assert "Details" not in index


def test_a_stale_or_leftover_page_is_named(tmp_path):
    package = planted(tmp_path)
    docs = tmp_path / "docs"
    codemap.write(docs, package)
    assert codemap.stale(docs, package) == []
    (docs / "code-map" / "sub.md").write_text("typed by hand\n")
    (docs / "code-map" / "gone.md").write_text("a package that was removed\n")
    assert codemap.stale(docs, package) == ["code-map/sub.md", "code-map/gone.md"]
    codemap.write(docs, package)
    assert codemap.stale(docs, package) == []


def test_the_site_navigation_lists_every_page_of_the_map():
    yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra")
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    (section,) = [
        entry["Code map"] for entry in nav if isinstance(entry, dict) and "Code map" in entry
    ]
    listed = sorted(page for entry in section for page in entry.values())
    assert listed == sorted(codemap.pages())
