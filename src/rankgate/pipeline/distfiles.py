"""The sdist and the wheel, built and checked before anyone installs them (stage package).

``python -m rankgate.pipeline.distfiles`` builds both with ``python -m build`` (the sdist
first, then the wheel from it, as a downstream packager builds) into ``dist/`` under the
run's output folder, checks their metadata with ``twine check --strict`` (what PyPI
would refuse is refused here), and compares their files with the checkout's:

- the wheel holds every file under ``src/rankgate`` (a module in a folder without
  ``__init__.py``, or a data file pyproject.toml does not declare, would be left out),
  and nothing outside ``rankgate/`` but its ``.dist-info``;
- the sdist holds every tracked file of the repository (MANIFEST.in grafts them): a
  packager runs the tests from it, and they read the docs, the workflows, the scripts
  and the committed benchmark results too;
- both carry ``rankgate.__version__``, the one place the version is written.

:mod:`rankgate.pipeline.wheel_trial` then installs the wheel alone and uses it.
"""

from __future__ import annotations

import ast
import os
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

from rankgate.errors import RankgateError
from rankgate.proc import command

PACKAGE = "rankgate"
GENERATED = frozenset(
    {".git", ".nox", ".venv", "out", "build", "dist", "__pycache__", ".pytest_cache",
     ".ruff_cache", ".hypothesis", ".cache", "ci/sdk"}
)  # fmt: skip
"""Folders a checkout has that are never part of it (what .gitignore and the Dagger
module leave out): the tree is read without them where git cannot say what is tracked."""
SHOWN = 20
"""How many missing files a failure names before it counts the rest."""


class DistProblem(RankgateError, Exception):
    """The sdist or the wheel is not what the checkout says it must be."""


def dist_dir() -> Path:
    """``dist/`` under the run's output folder (the executor sets RANKGATE_OUT)."""
    return Path(os.environ.get("RANKGATE_OUT", "out")) / "dist"


def version(root: Path) -> str:
    """``rankgate.__version__`` as src/rankgate/__init__.py writes it (read, not imported)."""
    init = root / "src" / PACKAGE / "__init__.py"
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise DistProblem(f"{init} sets no __version__: the version is written there, once")


def build(root: Path, dist: Path) -> tuple[Path, Path]:
    """The sdist and the wheel built from it, in a fresh ``dist`` folder: (sdist, wheel).

    Without build isolation: the build backend is the environment's (the lock's
    setuptools), so a build needs no package index."""
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir(parents=True)
    command.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(root)])
    sdists, wheels = sorted(dist.glob("*.tar.gz")), sorted(dist.glob("*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        made = ", ".join(p.name for p in sorted(dist.iterdir())) or "nothing"
        raise DistProblem(f"python -m build made {made} in {dist}: expected one sdist, one wheel")
    return sdists[0], wheels[0]


def twine_check(paths: list[Path]) -> None:
    """PyPI's checks of the metadata and the long description, warnings as errors."""
    command.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, paths)])


def package_files(root: Path) -> set[str]:
    """Every file under src/rankgate, as the wheel names it (``rankgate/...``)."""
    src = root / "src"
    return {
        path.relative_to(src).as_posix()
        for path in (src / PACKAGE).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def tracked_files(root: Path) -> tuple[set[str], str]:
    """The repository's files and how they were found: git's tracked files, or (no git
    here: a CI container gets the tree without .git) the tree less :data:`GENERATED`."""
    try:
        listed = command.output(["git", "-C", str(root), "ls-files", "-z"])
    except command.CommandFailed:
        listed = ""
    if listed:
        return {name for name in listed.split("\0") if name and (root / name).is_file()}, "git"
    found = set()
    for folder, subfolders, files in os.walk(root):
        here = Path(folder).relative_to(root)
        subfolders[:] = [
            name for name in subfolders
            if name not in GENERATED and (here / name).as_posix() not in GENERATED
            and not name.endswith(".egg-info")
        ]  # fmt: skip
        # .git is a file in a worktree
        found.update(
            (here / name).as_posix() for name in files
            if name not in GENERATED and not name.endswith(".pyc")
        )  # fmt: skip
    return found, f"the tree less {', '.join(sorted(GENERATED))}"


def wheel_problems(names: set[str], expected: set[str], wanted_version: str) -> list[str]:
    """What the wheel's file list lacks or has that it must not."""
    found = []
    missing = sorted(expected - names)
    if missing:
        found.append(
            f"the wheel lacks {len(missing)} file(s) of src/{PACKAGE}: {_some(missing)}. A "
            "module needs an __init__.py in its folder; a data file needs "
            "[tool.setuptools.package-data] in pyproject.toml"
        )
    info = f"{PACKAGE}-{wanted_version}.dist-info/"
    stray = sorted(n for n in names if not n.startswith((f"{PACKAGE}/", info)))
    if stray:
        found.append(
            f"the wheel has files outside {PACKAGE}/ and {info}: {_some(stray)}. Only "
            f"src/{PACKAGE} is the package; check [tool.setuptools.packages.find]"
        )
    if f"{info}METADATA" not in names:
        found.append(f"the wheel has no {info}METADATA: its version is not {wanted_version}")
    return found


def sdist_problems(names: set[str], tracked: set[str], how: str) -> list[str]:
    """The tracked files the sdist lacks."""
    missing = sorted(tracked - names)
    if not missing:
        return []
    return [
        f"the sdist lacks {len(missing)} file(s) of the checkout ({how}): {_some(missing)}. "
        "A packager runs the tests from it: graft or include them in MANIFEST.in"
    ]


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown if len(names) <= SHOWN else f"{shown} and {len(names) - SHOWN} more"


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if not name.endswith("/")}


def sdist_names(sdist: Path, wanted_version: str) -> set[str]:
    """The sdist's files, relative to its top folder (``rankgate-<version>/``)."""
    top = f"{PACKAGE}-{wanted_version}/"
    with tarfile.open(sdist) as archive:
        files = [m.name for m in archive.getmembers() if m.isfile()]
    outside = [name for name in files if not name.startswith(top)]
    if outside:
        raise DistProblem(f"{sdist.name}: files outside {top}: {_some(outside)}")
    return {name[len(top) :] for name in files}


def check(root: Path, dist: Path) -> list[str]:
    """Build, check with twine, compare with the checkout; every problem found."""
    wanted = version(root)
    sdist, wheel = build(root, dist)
    twine_check([sdist, wheel])
    problems = []
    expected_names = (f"{PACKAGE}-{wanted}.tar.gz", f"{PACKAGE}-{wanted}-py3-none-any.whl")
    if (sdist.name, wheel.name) != expected_names:
        problems.append(
            f"built {sdist.name} and {wheel.name}; rankgate.__version__ is {wanted}, so "
            f"expected {' and '.join(expected_names)}"
        )
    in_wheel = wheel_names(wheel)
    problems += wheel_problems(in_wheel, package_files(root), wanted)
    tracked, how = tracked_files(root)
    in_sdist = sdist_names(sdist, wanted)
    problems += sdist_problems(in_sdist, tracked, how)
    if not problems:
        print(
            f"rankgate: package: {sdist.name} ({len(in_sdist)} files, every one of the "
            f"{len(tracked)} the checkout has by {how}) and {wheel.name} ({len(in_wheel)} "
            f"files, every one of src/{PACKAGE}'s), twine check --strict passed",
            flush=True,
        )
    return problems


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args:
        raise SystemExit(f"rankgate: package: no arguments expected, got {' '.join(args)}")
    root = Path.cwd()
    if not (root / "pyproject.toml").is_file() or not (root / "src" / PACKAGE).is_dir():
        raise SystemExit("rankgate: package: run it from the rankgate checkout (its root)")
    try:
        problems = check(root, dist_dir().resolve())
    except (DistProblem, command.CommandFailed) as exc:
        problems = [str(exc)]
    for problem in problems:
        print(f"rankgate: package: {problem}", file=sys.stderr, flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
