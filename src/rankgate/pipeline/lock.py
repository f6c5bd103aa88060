"""The lock of the dependency set: what a fresh machine installs, so that it gets what CI tested.

``requirements/dev-lock.txt`` pins, with hashes, every package of rankgate's core
dependencies and its dev extra, and what torch itself requires, for every supported
Python on Linux x86_64 (one universal file: a pin that differs by Python carries a
marker). torch and the CUDA library its CUDA builds pin (:data:`OWN`) are left out: a
machine keeps the torch it has (a GPU host's CUDA build), and CI names the CPU build on
its own command line. The README's commands
and ``.ci/run`` install it with plain pip (``pip install --no-deps -r LOCK``, then the
project itself); uv only resolves it.

``python -m rankgate.pipeline.lock [uv pip compile options, e.g. --upgrade]`` makes it
again; :func:`problems` says where pyproject.toml and the lock disagree (a unit test
runs it).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rankgate.proc import command

LOCK = Path("requirements/dev-lock.txt")
TORCH_DEPS = Path("requirements/torch-deps.in")
COMMAND = "python -m rankgate.pipeline.lock"
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
"""The Pythons the lock is checked for (requires-python's oldest up to the newest that
every locked package ships for)."""
OWN = ("torch", "nvidia-cuda-nvrtc-cu12")
"""Packages the lock leaves to the machine: torch, and the CUDA library a CUDA build of
torch pins to its own version (the dev extra wants NVRTC on CPU machines too; a lock pin
would replace a GPU host's, under its torch)."""
DIGEST = "# inputs sha256: "
"""The lock's line naming the inputs it was made from (their requirements, normalised)."""


@dataclass(frozen=True, slots=True)
class Pin:
    """One ``name==version [; marker]`` entry of the lock."""

    name: str
    version: str
    marker: str
    hashes: int


def inputs(root: Path) -> list[str]:
    """What the lock is made from, normalised: core dependencies, the dev extra (marked
    ``extra == "dev"``) and torch's own requirements; one line each, sorted."""
    from packaging.requirements import Requirement

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    lines = [str(Requirement(r)) for r in project["dependencies"]]
    lines += [f"{Requirement(r)} [dev]" for r in project["optional-dependencies"]["dev"]]
    for line in (root / TORCH_DEPS).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            lines.append(f"{Requirement(line)} [torch]")
    return sorted(lines)


def inputs_digest(root: Path) -> str:
    return hashlib.sha256("\n".join(inputs(root)).encode()).hexdigest()


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*(.*?))?\s*\\?$")


def pins(text: str) -> list[Pin]:
    """The lock's entries, each with the number of hashes that follow it."""
    found: list[Pin] = []
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            name, version, marker = match.groups()
            found.append(Pin(_canonical(name), version, marker or "", 0))
        elif line.strip().startswith("--hash=") and found:
            last = found[-1]
            found[-1] = Pin(last.name, last.version, last.marker, last.hashes + 1)
    return found


def problems(root: Path) -> list[str]:
    """Where pyproject.toml (and torch-deps.in) and the lock disagree; [] when they agree."""
    lock = root / LOCK
    if not lock.is_file():
        return [f"{LOCK} is missing: make it with {COMMAND}"]
    text = lock.read_text()
    found = []
    lines = text.splitlines()
    recorded = [line[len(DIGEST) :].strip() for line in lines if line.startswith(DIGEST)]
    if recorded != [inputs_digest(root)]:
        found.append(
            f"pyproject.toml's dependencies or {TORCH_DEPS} changed since {LOCK} was made: "
            f"make it again with {COMMAND}"
        )
    locked = pins(text)
    found += [f"{LOCK} pins {p.name}: it is the machine's own, leave it out" for p in locked
              if p.name in OWN]  # fmt: skip
    found += [f"{LOCK}: {p.name}=={p.version} has no hash" for p in locked if not p.hashes]
    for python in PYTHONS:
        found += _unmet(root, locked, python)
    return found


def _unmet(root: Path, locked: list[Pin], python: str) -> list[str]:
    """The inputs that no pin satisfies on Linux x86_64 with this Python."""
    from packaging.markers import Marker
    from packaging.requirements import Requirement

    env = _environment(python)
    chosen: dict[str, list[str]] = {}
    for pin in locked:
        if not pin.marker or Marker(pin.marker).evaluate(env):
            chosen.setdefault(pin.name, []).append(pin.version)
    found = []
    for line in inputs(root):
        text, _, group = line.partition(" [")
        requirement = Requirement(text)
        extra = "dev" if group == "dev]" else ""
        if requirement.marker and not requirement.marker.evaluate({**env, "extra": extra}):
            continue
        name = _canonical(requirement.name)
        if name in OWN:
            continue
        versions = chosen.get(name, [])
        if len(versions) != 1:
            what = "not pinned" if not versions else f"pinned {len(versions)} times"
            found.append(f"{requirement} is {what} in {LOCK} for Python {python}")
        elif not requirement.specifier.contains(versions[0], prereleases=True):
            found.append(
                f"{requirement}: {LOCK} has {name}=={versions[0]} for Python {python}; "
                f"make it again with {COMMAND}"
            )
    return found


def _environment(python: str) -> dict[str, str]:
    return {
        "python_version": python, "python_full_version": f"{python}.0",
        "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
        "os_name": "posix", "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }  # fmt: skip


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def compile_lock(root: Path, extra: list[str]) -> None:
    """uv resolves the inputs once for every Python from the oldest supported (universal,
    with hashes) and writes the lock; pins already in it are kept unless ``--upgrade``."""
    with tempfile.TemporaryDirectory(prefix="lock-inputs-") as tmp:
        excluded = Path(tmp) / "own.txt"
        excluded.write_text("\n".join(OWN) + "\n")
        argv = [
            "uv", "pip", "compile", "pyproject.toml", "--extra", "dev", str(TORCH_DEPS),
            "--excludes", str(excluded), "--universal", "--python-version", PYTHONS[0],
            "--generate-hashes", "--system-certs", "--custom-compile-command", COMMAND,
            "--output-file", str(LOCK), "--quiet", *extra,
        ]  # fmt: skip
        _in(root, argv)
    lock = root / LOCK
    lines = lock.read_text().splitlines()
    lines = [line for line in lines if not line.startswith(DIGEST)]
    lines.insert(2, f"{DIGEST}{inputs_digest(root)}")
    lock.write_text("\n".join(lines) + "\n")


def _in(root: Path, argv: list[str]) -> None:
    here = Path.cwd()
    os.chdir(root)  # uv writes the inputs' paths into the lock as given: keep them relative
    try:
        command.run(argv)
    except command.CommandFailed as exc:
        hint = " (pip install uv: it is in the dev extra)" if exc.returncode == 127 else ""
        raise SystemExit(f"rankgate: lock: {exc}{hint}") from None
    finally:
        os.chdir(here)


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file():
        raise SystemExit(f"rankgate: lock: no pyproject.toml at {root}: run it from a checkout")
    compile_lock(root, list(sys.argv[1:] if argv is None else argv))
    left = problems(root)
    for line in left:
        print(f"rankgate: lock: {line}", file=sys.stderr)
    print(f"rankgate: wrote {LOCK}", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
