"""scripts/ keeps what is used: every file under it has a row in scripts/README.md, and is
named outside scripts/ (a doc, a CI step, a nox session, the code, a test, or the
committed results it produced) or called by a script that is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

THIS_FILE = Path(__file__).resolve()
ROOT = THIS_FILE.parents[1]

# Where a script counts as named, and which files there are read (text the size of a
# README or a command log; the committed XML and JSON results name no script).
NAMING_PLACES = (
    "README.md", "noxfile.py", "pyproject.toml", "mkdocs.yml", "dagger.json", ".ci", ".github",
    "ci", "containers", "docs", "src", "tests", "suites", "benchmarks",
)  # fmt: skip
TEXT_SUFFIXES = {"", ".md", ".txt", ".sh", ".py", ".yml", ".yaml", ".toml", ".cfg", ".ini"}
SKIPPED_FOLDERS = {"__pycache__", ".nox", ".venv", "node_modules", ".pytest_cache"}
LARGEST_TEXT = 2_000_000
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|", re.MULTILINE)


def scripts(root: Path) -> list[str]:
    """Every file under root/scripts but its README, relative to root/scripts."""
    folder = root / "scripts"
    return sorted(
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file()
        and path.name != "README.md"
        and not SKIPPED_FOLDERS & set(path.relative_to(folder).parts)
        and path.suffix != ".pyc"
    )


def listed(root: Path) -> set[str]:
    """The scripts scripts/README.md has a row for (the row's first cell, in backticks)."""
    readme = root / "scripts" / "README.md"
    return set(ROW.findall(readme.read_text())) if readme.is_file() else set()


def _texts(root: Path):
    for place in NAMING_PLACES:
        top = root / place
        paths = [top] if top.is_file() else top.rglob("*") if top.is_dir() else []
        for path in paths:
            if (
                path.is_file()
                and path.resolve() != THIS_FILE  # its own examples name no real script
                and path.suffix in TEXT_SUFFIXES
                and not SKIPPED_FOLDERS & set(path.relative_to(root).parts)
                and path.stat().st_size <= LARGEST_TEXT
            ):
                yield path.read_text(errors="replace")


def names_of(script: str) -> tuple[str, ...]:
    """How a text outside scripts/ names a script: its path, or the path of a folder of
    its own that is used whole (scripts/ledger/pool_variant goes on PYTHONPATH)."""
    parts = script.split("/")
    return tuple("/".join(["scripts", *parts[:depth]]) for depth in range(2, len(parts) + 1))


def named_by_another_script(script: str, caller: str, text: str) -> bool:
    """A script calls another by its path, or, beside it in one folder, by its name."""
    same_folder = Path(script).parent == Path(caller).parent
    return f"scripts/{script}" in text or (same_folder and Path(script).name in text)


def unnamed(root: Path) -> list[str]:
    """Scripts named nowhere outside scripts/ and called by no script that is."""
    found = scripts(root)
    texts = list(_texts(root))
    used = {s for s in found if any(name in text for name in names_of(s) for text in texts)}
    sources = {s: (root / "scripts" / s).read_text(errors="replace") for s in found}
    grew = True
    while grew:  # a helper of a used script is used
        more = {
            s
            for s in set(found) - used
            if any(named_by_another_script(s, caller, sources[caller]) for caller in used)
        }
        used |= more
        grew = bool(more)
    return sorted(set(found) - used)


def test_every_script_has_a_row_in_the_readme():
    missing = sorted(set(scripts(ROOT)) - listed(ROOT))
    assert not missing, f"add a row to scripts/README.md for: {', '.join(missing)}"


def test_every_row_of_the_readme_is_a_script():
    stale = sorted(listed(ROOT) - set(scripts(ROOT)))
    assert not stale, f"scripts/README.md lists files that are gone: {', '.join(stale)}"


def test_every_script_is_named_outside_scripts_or_called_by_one_that_is():
    orphans = unnamed(ROOT)
    assert not orphans, (
        "named by no doc, CI step, nox session, source, test or committed result, and "
        f"called by no script that is: {', '.join(orphans)}; name it where it is used, "
        "or git rm it"
    )


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_script_without_a_row_is_found(tmp_path):
    root = _tree(tmp_path, {
        "scripts/README.md": "| script | what |\n|---|---|\n| `gpu/a.sh` | a |\n",
        "scripts/gpu/a.sh": "", "scripts/gpu/b.sh": "",
    })  # fmt: skip
    assert set(scripts(root)) - listed(root) == {"gpu/b.sh"}


def test_a_script_named_nowhere_is_found_and_a_used_ones_helper_is_not(tmp_path):
    root = _tree(tmp_path, {
        "docs/page.md": "run `scripts/gpu/a.sh OUT`; PYTHONPATH=scripts/ledger/variant",
        "scripts/gpu/a.sh": "python3 scripts/gpu/helper.py; . \"$(dirname \"$0\")/lib.sh\"",
        "scripts/gpu/helper.py": "", "scripts/gpu/lib.sh": "",
        "scripts/ledger/variant/sitecustomize.py": "",
        # named only by each other, and by a same-named file in another folder
        "scripts/dev/x.sh": "bash scripts/dev/y.sh", "scripts/dev/y.sh": "bash scripts/dev/x.sh",
        "scripts/ci/lib.sh": "",
    })  # fmt: skip
    assert unnamed(root) == ["ci/lib.sh", "dev/x.sh", "dev/y.sh"]
