"""The wheel alone, used as a user uses it (stage package).

``python -m rankgate.pipeline.wheel_trial [--wheel PATH]`` makes a new virtual
environment in a temp folder outside the checkout, installs the wheel
(:mod:`rankgate.pipeline.distfiles` built it into ``dist/``) and the torch this
environment runs, nothing else, and from a small outside project in another temp folder
runs what a user runs: ``rankgate --version`` and ``--help``, ``rankgate run`` (its
world(2) tests in the pool, and the report it writes), the same file under ``torchrun``
in place with ``rankgate merge-junit``, and ``rankgate report`` of the merged file. The
project plants a failure on rank 1; each step must give exactly :data:`EXPECTED`: the
passing test passed, the planted one failed on rank 1 alone. A module or a file the
wheel misses shows here as a step that cannot start, or gives another verdict.

Outputs, each step's log and the trial's lines (``trial.txt``) go to ``package/`` under
the run's output folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import venv
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from rankgate.errors import RankgateError
from rankgate.proc import command

PROJECT_TEST = """\
import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2)
def test_all_reduce_sums_every_rank(rank, world_size):
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == world_size * (world_size + 1) / 2


@pytest.mark.world(2)
def test_planted_failure_on_rank_1(rank):
    assert rank != 1, "planted: rank 1 fails"
"""
"""The outside project's one test file: a world(2) test that passes and one that fails
on rank 1 alone."""

EXPECTED = {
    "test_outside::test_all_reduce_sums_every_rank": ("passed", ()),
    "test_outside::test_planted_failure_on_rank_1": ("failed", (1,)),
}
"""Every step's verdicts: test id -> (verdict, failing ranks)."""

DROPPED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTEST_ADDOPTS",
           "PYTEST_PLUGINS", "TRACEPARENT", "PYTHONDONTWRITEBYTECODE")  # fmt: skip
DROPPED_PREFIXES = ("RANKGATE_", "COV_CORE_", "COVERAGE_", "OTEL_", "PYTEST_XDIST_")
"""What this process's environment may carry that would reach into the checkout or its
run (a path, the stage's output folder, coverage, traces): the trial runs without it.
Bytecode is written: the wheel and torch are installed without it (--no-compile), so the
first process compiles what it imports and the later ones (ranks, pools) reuse it."""
STEP_TIMEOUT_S = 600.0


class TrialFailed(RankgateError, Exception):
    """A step did not do what a user of the wheel must see."""


@dataclass(frozen=True, slots=True)
class Trial:
    """Where one trial runs: the new environment, the outside project, the outputs."""

    venv: Path
    project: Path
    out: Path
    seconds: dict[str, float] = field(default_factory=dict)
    """Each step's wall time, by name."""

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def env(self) -> dict[str, str]:
        """This environment, less :data:`DROPPED`, with the new one's commands first."""
        env = {
            key: value for key, value in os.environ.items()
            if key not in DROPPED and not key.startswith(DROPPED_PREFIXES)
        }  # fmt: skip
        env["PATH"] = os.pathsep.join([str(self.bin), env.get("PATH", "")])
        env["VIRTUAL_ENV"] = str(self.venv)
        return env

    def step(self, name: str, argv: list[str], codes: tuple[int, ...]) -> command.Finished:
        """Run ``argv`` in the project folder, its output kept in ``<name>.log``."""
        done = command.finish(argv, cwd=self.project, env=self.env(), timeout=STEP_TIMEOUT_S)
        log = self.out / f"{name}.log"
        log.write_text(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}")
        self.seconds[name] = done.seconds
        if done.returncode not in codes:
            tail = "\n".join(
                f"    {line}" for line in (done.stdout + done.stderr).splitlines()[-15:]
            )
            how = "timed out" if done.timed_out else f"exit code {done.returncode}"
            raise TrialFailed(f"{name}: {how}, expected {' or '.join(map(str, codes))} "
                              f"({log}):\n{tail}")  # fmt: skip
        return done

    def step_json(self, name: str, argv: list[str], codes: tuple[int, ...]) -> Any:
        """Run a step whose stdout ends with one JSON value (a command's ``--json``)."""
        done = self.step(name, argv, codes)
        lines = done.stdout.strip().splitlines()
        try:
            return json.loads(lines[-1] if name == "rankgate-run" else done.stdout)
        except (IndexError, json.JSONDecodeError):
            said = (done.stdout + done.stderr).splitlines()[-15:]
            tail = "\n".join(f"    {line}" for line in said)
            raise TrialFailed(
                f"{name}: exit code {done.returncode} and no JSON verdict "
                f"({self.out / f'{name}.log'}):\n{tail}"
            ) from None


def torch_requirement() -> str:
    """``torch==<the version this environment runs>``: pip finds the same build (a local
    wheel, an index the machine's pip configuration names) and never another one."""
    try:
        return f"torch=={metadata.version('torch')}"
    except metadata.PackageNotFoundError:
        raise SystemExit(
            "rankgate: wheel trial: torch is not installed here; the trial installs the "
            "torch this environment runs (e.g. pip install torch==2.13.0 for the CPU build)"
        ) from None


def install(trial: Trial, wheel: Path) -> None:
    """A new environment with the wheel and torch; nothing comes from the checkout."""
    venv.EnvBuilder(with_pip=True, clear=True).create(trial.venv)
    # --no-compile: the steps compile only what they import (torch's whole tree would
    # cost more than the steps themselves)
    argv = [str(trial.bin / "python"), "-m", "pip", "install", "--quiet", "--no-compile",
            "--disable-pip-version-check", str(wheel), torch_requirement()]  # fmt: skip
    trial.step("install", argv, (0,))
    code = "import rankgate; print(rankgate.__file__)"
    where = trial.step("import", [str(trial.bin / "python"), "-c", code], (0,)).stdout.strip()
    if not Path(where).is_relative_to(trial.venv):
        raise TrialFailed(f"import: rankgate comes from {where}, not the new environment")


def check_cli(trial: Trial, wanted_version: str) -> list[str]:
    rankgate = str(trial.bin / "rankgate")
    shown = trial.step("version", [rankgate, "--version"], (0,)).stdout.strip()
    if shown != f"rankgate {wanted_version}":
        raise TrialFailed(f"version: rankgate --version printed {shown!r}, expected "
                          f"'rankgate {wanted_version}' (the wheel's version)")  # fmt: skip
    usage = trial.step("help", [rankgate, "--help"], (0,)).stdout
    listed = {line.split()[0] for line in usage.splitlines() if line.startswith("    ")}
    absent = [name for name in ("run", "merge-junit", "report") if name not in listed]
    if absent:
        raise TrialFailed(f"help: rankgate --help lists no {', '.join(absent)}")
    return [f"rankgate --version: {shown}", "rankgate --help: lists run, merge-junit, report"]


def run_in_pool(trial: Trial) -> str:
    """``rankgate run`` on the project: its world tests in the pool, and its report."""
    out = trial.out / "run"
    argv = [str(trial.bin / "rankgate"), "run", "--file", "test_outside.py",
            "--out", str(out), "--json"]  # fmt: skip
    (outcome,) = trial.step_json("rankgate-run", argv, (1,))
    counts = {"tests": 2, "passed": 1, "failed": 1}
    got = {key: outcome["tests"][key] for key in counts}
    if outcome["status"] != "failed" or got != counts:
        raise TrialFailed(f"rankgate run: {outcome['status']} with {got}, expected failed "
                          f"with {counts}")  # fmt: skip
    verdicts = report_verdicts(json.loads((out / "report.json").read_text()))
    return compare("rankgate run (pool)", verdicts)


def run_in_place(trial: Trial) -> str:
    """The same file under torchrun, each rank in place; merge-junit's verdict."""
    junit = trial.out / "inplace"
    launch = [str(trial.bin / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m",
              "pytest", "test_outside.py", "-p", "no:cacheprovider",
              f"--junitxml={junit / 'junit.xml'}"]  # fmt: skip
    done = trial.step("torchrun", launch, (1,))
    said = done.stdout + done.stderr
    named = "rankgate: 1 test failed on rank 1: test_outside.py::test_planted_failure_on_rank_1"
    if named not in said:
        raise TrialFailed(f"torchrun: the ranks' output does not say {named!r}")
    merge = [str(trial.bin / "rankgate"), "merge-junit", str(junit), "--world", "2",
             "-o", str(trial.out / "merged.xml"), "--json"]  # fmt: skip
    merged = trial.step_json("merge-junit", merge, (1,))
    verdicts = {
        test["id"]: (test["verdict"],
                     tuple(sorted(int(r) for r, v in test["ranks"].items() if v == "failed")))
        for test in merged["tests"]
    }  # fmt: skip
    return compare("torchrun + merge-junit", verdicts)


def report(trial: Trial) -> str:
    """``rankgate report`` of the merged in-place file."""
    argv = [str(trial.bin / "rankgate"), "report", str(trial.out / "merged.xml"),
            "--out", str(trial.out / "report"), "--json"]  # fmt: skip
    summary = trial.step_json("report", argv, (1,))
    for page in ("report.html", "summary.md"):
        if not (trial.out / "report" / page).is_file():
            raise TrialFailed(f"report: wrote no {page}")
    return compare("rankgate report", report_verdicts(summary))


def report_verdicts(summary: dict) -> dict[str, tuple[str, tuple[int, ...]]]:
    """A report's verdicts: test id -> (verdict, failing ranks)."""
    ranks = {f["id"]: tuple(sorted(f.get("failing_ranks") or ())) for f in summary["failing"]}
    return {test: (verdict, ranks.get(test, ())) for test, verdict in summary["tests"].items()}


def compare(step: str, verdicts: dict[str, tuple[str, tuple[int, ...]]]) -> str:
    """One line per step when its verdicts are :data:`EXPECTED`; else TrialFailed."""
    if verdicts != EXPECTED:
        raise TrialFailed(f"{step}: verdicts {verdicts}, expected {EXPECTED}")
    return f"{step}: 1 passed, 1 failed (test_planted_failure_on_rank_1, rank 1 only)"


def trial_in(where: Path, wheel: Path, out: Path) -> list[str]:
    """The whole trial in the temp folder ``where``; its lines, one per step."""
    trial = Trial(venv=where / "venv", project=where / "project", out=out)
    trial.project.mkdir(parents=True)
    (trial.project / "pytest.ini").write_text("[pytest]\n")  # its own rootdir
    (trial.project / "test_outside.py").write_text(PROJECT_TEST)
    install(trial, wheel)
    wanted = wheel.name.split("-")[1]
    lines = [*check_cli(trial, wanted), run_in_pool(trial), run_in_place(trial), report(trial)]
    times = ", ".join(f"{name} {seconds:.1f}" for name, seconds in trial.seconds.items())
    return [*lines, f"wall time (s): {times}"]


def the_wheel(dist: Path) -> Path:
    wheels = sorted(dist.glob("rankgate-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(
            f"rankgate: wheel trial: {len(wheels)} rankgate wheels in {dist}; build one "
            "first: python -m rankgate.pipeline.distfiles (or pass --wheel PATH)"
        )
    return wheels[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rankgate.pipeline.wheel_trial",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument(
        "--wheel", type=Path, default=None,
        help="the wheel to try (default: the one in dist/ under the run's output folder)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    base = Path(os.environ.get("RANKGATE_OUT", "out")).resolve()
    wheel = (args.wheel or the_wheel(base / "dist")).resolve()
    out = base / "package"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    where = Path(tempfile.mkdtemp(prefix="rankgate-wheel-trial-"))
    if where.is_relative_to(Path.cwd()):
        raise SystemExit(f"rankgate: wheel trial: the temp folder {where} is inside the "
                         "checkout; set TMPDIR to a folder outside it")  # fmt: skip
    try:
        lines = trial_in(where, wheel, out)
    except (TrialFailed, command.CommandFailed) as exc:
        print(f"rankgate: wheel trial: {wheel.name}: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        shutil.rmtree(where, ignore_errors=True)
    lines.append(f"{wheel.name} works alone (logs in {out})")
    (out / "trial.txt").write_text("".join(f"{line}\n" for line in lines))
    for line in lines:
        print(f"rankgate: wheel trial: {line}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
