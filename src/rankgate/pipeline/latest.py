"""Stage latest: unit and dist against the newest release of every dependency, no lock.

The lock (:mod:`rankgate.pipeline.lock`) keeps CI and a fresh machine on what was
tested; this stage watches what comes next, on a schedule, in a job of its own. It
makes a fresh virtual environment under the output dir (``latest/venv``) that sees the
packages of the one it starts from, so torch stays the one installed there (a GPU
host's build is never replaced, and is held at its version), installs rankgate's dev
extra into it without the lock, upgrading every other dependency to its newest release,
writes what it installed (``latest/versions.txt``), and runs the gate's unit and dist
stages inside it (``latest/gate.json``). An upstream release that breaks rankgate then
turns this stage red, not a newcomer's first command.

``python -m rankgate.pipeline.latest [pytest args]`` (``nox -s latest -- [pytest args]``).
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import venv
from importlib import metadata
from pathlib import Path

from rankgate.proc import command

GATE = ("--full", "--only", "unit,dist")
"""What runs inside the new environment: the gate's unit and dist stages, in full."""


def out_dir() -> Path:
    """``latest/`` under the run's output dir (the executor sets RANKGATE_OUT)."""
    return Path(os.environ.get("RANKGATE_OUT", "out")) / "latest"


def torch_pin() -> str:
    """``torch==<installed version>``: the upgrade keeps the torch this machine has."""
    try:
        return f"torch=={metadata.version('torch')}"
    except metadata.PackageNotFoundError:
        raise SystemExit(
            "rankgate: latest: torch is not installed here; install the one to test "
            "against first (e.g. pip install torch==2.13.0 for the CPU build)"
        ) from None


def make_environment(where: Path) -> Path:
    """A new virtual environment at ``where`` (an old one is removed) that sees this
    environment's packages after its own; returns its bin folder."""
    shutil.rmtree(where, ignore_errors=True)
    # --system-site-packages would show the base interpreter's packages, not those of
    # the virtual environment this runs in: a .pth file adds this one's folders instead.
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    own = sysconfig.get_paths(vars={"base": str(where), "platbase": str(where)})["purelib"]
    here = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    lines = [f"import site; site.addsitedir({folder!r})" for folder in here]
    (Path(own) / "rankgate_latest_base.pth").write_text("\n".join(lines) + "\n")
    add_commands(where / "bin")
    return where / "bin"


_COMMAND = """#!{python}
import sys
from {module} import {name}
if __name__ == "__main__":
    sys.exit({call}())
"""


def add_commands(bin_dir: Path) -> None:
    """Each command (console script) of this environment's packages, run by the new
    environment's python: the stages start pytest, torchrun, rankgate by name, and a
    package the upgrade leaves alone keeps its command only in this environment, whose
    python would not see what the upgrade changed. pip replaces the ones it upgrades."""
    for dist in metadata.distributions():
        for entry in dist.entry_points:
            target = bin_dir / entry.name
            if entry.group != "console_scripts" or target.exists():
                continue
            module, _, call = entry.value.partition(":")
            target.write_text(
                _COMMAND.format(
                    python=bin_dir / "python", module=module.strip(),
                    name=call.strip().split(".")[0], call=call.strip().split()[0],
                )
            )  # fmt: skip
            target.chmod(0o755)


def install_newest(python: Path, constraints: Path, env: dict[str, str]) -> None:
    """rankgate with its dev extra, every dependency upgraded to its newest release."""
    command.run(
        [str(python), "-m", "pip", "install", "--upgrade", "--upgrade-strategy", "eager",
         "--constraint", str(constraints), "--editable", ".[dev]"],
        env=env,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    pytest_args = list(sys.argv[1:] if argv is None else argv)
    if not Path("pyproject.toml").is_file():
        raise SystemExit("rankgate: latest: run it from the rankgate checkout (no pyproject.toml)")
    out = out_dir().resolve()
    out.mkdir(parents=True, exist_ok=True)
    constraints = out / "torch.txt"
    constraints.write_text(torch_pin() + "\n")
    bin_dir = make_environment(out / "venv")
    # Every tool the stages start (nox, pytest, torchrun, rankgate) from the new one.
    env = {
        "VIRTUAL_ENV": str(bin_dir.parent),
        "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
    }
    python = bin_dir / "python"
    try:
        install_newest(python, constraints, env)
        command.run(
            [str(python), "-m", "pip", "list", "--format=freeze"],
            stdout_path=out / "versions.txt", env=env,
        )  # fmt: skip
        command.run(
            [str(python), "-m", "nox", "-s", "gate", "--", *GATE, "--out", str(out),
             *pytest_args],
            env=env,
        )  # fmt: skip
    except command.CommandFailed as exc:
        print(f"rankgate: latest: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
