"""What the sdist and the wheel must hold, and where the checkout says so (stage package).

The build itself runs in the stage (``nox -s package``); these check the comparisons it
makes and that MANIFEST.in names every top-level part of the repository.
"""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

import rankgate
from rankgate.pipeline import distfiles
from rankgate.pipeline.distfiles import DistProblem

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
INFO = f"rankgate-{rankgate.__version__}.dist-info/"


def test_the_version_is_read_from_the_package_without_importing_it():
    assert distfiles.version(ROOT) == rankgate.__version__


def test_a_package_without_a_version_names_where_it_belongs(tmp_path):
    (tmp_path / "src" / "rankgate").mkdir(parents=True)
    (tmp_path / "src" / "rankgate" / "__init__.py").write_text('"""doc"""\n')
    with pytest.raises(DistProblem, match="sets no __version__: the version is written there"):
        distfiles.version(tmp_path)


def test_a_complete_wheel_has_no_problem():
    names = {"rankgate/__init__.py", "rankgate/py.typed", f"{INFO}METADATA", f"{INFO}RECORD"}
    expected = {"rankgate/__init__.py", "rankgate/py.typed"}
    assert distfiles.wheel_problems(names, expected, rankgate.__version__) == []


def test_a_module_the_wheel_misses_is_named_with_the_fix():
    names = {"rankgate/__init__.py", f"{INFO}METADATA"}
    expected = {"rankgate/__init__.py", "rankgate/report/junit.py", "rankgate/py.typed"}
    (problem,) = distfiles.wheel_problems(names, expected, rankgate.__version__)
    assert problem == (
        "the wheel lacks 2 file(s) of src/rankgate: rankgate/py.typed, rankgate/report/junit.py. "
        "A module needs an __init__.py in its folder; a data file needs "
        "[tool.setuptools.package-data] in pyproject.toml"
    )


def test_files_outside_the_package_and_a_wrong_version_are_problems():
    names = {"rankgate/__init__.py", "tests/test_x.py", "rankgate-0.0.1.dist-info/METADATA"}
    problems = distfiles.wheel_problems(names, {"rankgate/__init__.py"}, rankgate.__version__)
    assert problems[0].startswith(
        f"the wheel has files outside rankgate/ and {INFO}: rankgate-0.0.1.dist-info/METADATA, "
        "tests/test_x.py."
    )
    assert (
        problems[1] == f"the wheel has no {INFO}METADATA: its version is not {rankgate.__version__}"
    )


def test_a_long_list_is_cut_and_counted():
    missing = [f"tests/t{i:02}.py" for i in range(25)]
    (problem,) = distfiles.sdist_problems(set(), set(missing), "git")
    assert problem.startswith("the sdist lacks 25 file(s) of the checkout (git): tests/t00.py")
    assert "tests/t19.py and 5 more. A packager runs the tests from it" in problem


def test_the_package_files_are_every_file_under_src_rankgate_but_bytecode(tmp_path):
    package = tmp_path / "src" / "rankgate"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "kernel.cu").write_text("")
    (package / "__pycache__" / "x.cpython-311.pyc").write_text("")
    assert distfiles.package_files(tmp_path) == {"rankgate/__init__.py", "rankgate/kernel.cu"}


def test_the_sdist_names_are_relative_to_its_top_folder(tmp_path):
    sdist = tmp_path / "x.tar.gz"
    top = f"rankgate-{rankgate.__version__}"
    with tarfile.open(sdist, "w:gz") as archive:
        for name in (f"{top}/README.md", f"{top}/tests/test_a.py"):
            info = tarfile.TarInfo(name)
            archive.addfile(info, io.BytesIO(b""))
    assert distfiles.sdist_names(sdist, rankgate.__version__) == {"README.md", "tests/test_a.py"}
    with pytest.raises(DistProblem, match=r"files outside rankgate-9\.9/"):
        distfiles.sdist_names(sdist, "9.9")


def make_tree(root: Path) -> None:
    for name in ("README.md", ".ci/run", "src/rankgate/__init__.py", "out/gate.json",
                 "src/rankgate/__pycache__/x.pyc", "src/rankgate.egg-info/PKG-INFO",
                 "ci/sdk/x.py", "ci/tests/test_m.py", ".nox/x", "a/build/y"):  # fmt: skip
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    (root / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git is a file


def test_without_git_the_tree_is_read_less_what_is_generated(tmp_path, monkeypatch):
    make_tree(tmp_path)
    monkeypatch.setenv("PATH", "")  # no git here, as in a CI container without .git
    files, how = distfiles.tracked_files(tmp_path)
    assert files == {"README.md", ".ci/run", "src/rankgate/__init__.py", "ci/tests/test_m.py"}
    assert how.startswith("the tree less .cache, .git, .hypothesis, .nox")


def test_with_git_the_tracked_files_count(tmp_path):
    make_tree(tmp_path)
    (tmp_path / ".git").unlink()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "README.md", ".ci/run"], check=True)
    assert distfiles.tracked_files(tmp_path) == ({"README.md", ".ci/run"}, "git")


def test_outside_a_checkout_it_says_where_to_run_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="run it from the rankgate checkout"):
        distfiles.main([])


def test_manifest_puts_every_top_level_part_in_the_sdist():
    """setuptools puts src/, pyproject.toml and README.md in by itself; MANIFEST.in the
    rest. A new top-level file or folder fails here before the package stage builds."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    top = {name.split("/")[0] for name in listed if (ROOT / name).exists()}
    manifest = (ROOT / "MANIFEST.in").read_text()
    named = set(re.findall(r"^graft (\S+)$", manifest, re.M))
    for line in re.findall(r"^include (.+)$", manifest, re.M):
        named.update(line.split())
    assert top - {"src", "pyproject.toml", "README.md", "MANIFEST.in"} <= named
