"""Where a SLURM job is, asked through the most structured interface the cluster offers.

Three ways, tried in this order; one that the installed SLURM lacks is dropped for the
rest of the run the first time it says so:

1. ``scontrol --json show job ID`` (SLURM 23.02 and later): exactly the one job.
2. ``squeue --json -j ID -t all``: the same job records. SLURM 22.05 (Debian 12's
   slurm-wlm) has this but not the one above, and its ``--json`` ignores ``-j`` and
   ``-t``: it prints every job slurmctld remembers, so the job is picked out here.
3. Text, for a SLURM without the JSON serializer: ``squeue -o %T|%r|%N``, then
   ``scontrol show job -o`` for the exit code (``Key=Value`` pairs read with a regex).

A job none of them knows any more (purged from slurmctld's memory) is looked up in
``sacct`` by :class:`~rankgate.dispatch.slurm.SlurmTarget`. A query that fails for any
other reason (controller unreachable, ssh down) raises
:class:`~rankgate.proc.command.CommandFailed`, which the wait treats as a failed look.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rankgate.dispatch.job_outcome import JobOutcome, Phase, slurm_never_starts, slurm_state
from rankgate.dispatch.shell import Output, Shell
from rankgate.dispatch.watch import Observation
from rankgate.proc.command import CommandFailed

MODES = ("scontrol-json", "squeue-json", "text")
# What SLURM says when it lacks an option or the JSON serializer plugin.
_UNSUPPORTED = re.compile(
    r"unrecognized option|invalid option|unknown option|serializer|data_parser|plugin",
    re.IGNORECASE,
)
# What it says about a job it does not know (never existed, or purged).
_UNKNOWN_JOB = re.compile(r"invalid job id", re.IGNORECASE)


class _Unsupported(Exception):
    """The installed SLURM lacks this way of asking."""


def exit_code(value: Any) -> str:
    """SLURM's ``code:signal`` from a JSON ``exit_code``, as ``scontrol`` prints it.

    SLURM 22.05 gives the raw wait status (768 is exit 3, 9 is signal 9); later versions
    give ``{"return_code": n, "signal": {"id": s}}``, where each number may itself be
    ``{"set": true, "number": n}``.
    """
    if isinstance(value, dict):
        signal = value.get("signal") or {}
        sig = _number(signal.get("id", signal.get("signal_id")))
        return f"{_number(value.get('return_code'))}:{sig}"
    status = _number(value)
    sig = status & 0x7F
    if sig not in (0, 0x7F):  # WIFSIGNALED: scontrol prints 0:<signal>
        return f"0:{sig}"
    return f"{(status >> 8) & 0xFF}:0"


def _number(value: Any) -> int:
    if isinstance(value, dict):
        return int(value.get("number") or 0) if value.get("set", True) else 0
    return int(value or 0)


def _state_word(value: Any) -> str:
    """``job_state``: a word (22.05) or a list of a base state and flags (later)."""
    if isinstance(value, list):
        words = [str(w) for w in value]
        if "COMPLETING" in words:  # still ending: the running phase, as in squeue's text
            return "COMPLETING"
        known = [w for w in words if slurm_state(w) is not JobOutcome.OTHER]
        return (known or words or [""])[0]
    return str(value or "")


def observation_from_record(job: dict) -> Observation:
    """An :class:`Observation` of one JSON job record (squeue/scontrol ``--json``)."""
    state = _state_word(job.get("job_state"))
    status = slurm_state(state)
    reason = str(job.get("state_reason") or "")
    return Observation(
        state,
        status,
        reason,
        exit_code(job.get("exit_code")) if isinstance(status, JobOutcome) else "",
        str(job.get("nodes") or ""),
        never_starts=status is Phase.QUEUED and slurm_never_starts(reason),
    )


def _records(out: Output, argv: list[str]) -> list[dict]:
    """The ``jobs`` of a JSON answer; raises for an answer that is not one."""
    try:
        return list(json.loads(out.stdout).get("jobs") or [])
    except (json.JSONDecodeError, AttributeError):
        raise CommandFailed(
            argv, out.returncode, stdout=out.stdout[:500], stderr=out.stderr
        ) from None


def _fields(text: str) -> dict[str, str]:
    """``Key=Value`` pairs of ``scontrol show job -o`` (values may not contain spaces)."""
    return dict(re.findall(r"(\w+)=(\S*)", text))


class SlurmQuery:
    """Looks up jobs on one :class:`~rankgate.dispatch.shell.Shell`, in the best mode it has."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.modes = list(MODES)
        """Ways still to try, best first; ``modes[0]`` is the one in use."""

    @property
    def mode(self) -> str:
        return self.modes[0]

    def look(self, job_id: str) -> Observation | None:
        """Where job ``job_id`` is; None when SLURM no longer knows it."""
        while True:
            try:
                return self._look(self.mode, job_id)
            except _Unsupported:
                self.modes.pop(0)  # "text" never raises it, so this ends

    def find(self, name: str) -> str | None:
        """The id of a job named ``name`` that SLURM still knows, if any."""
        if self.mode == "text":
            listing = ["squeue", "-h", "-t", "all", f"--name={name}", "-o", "%i"]
            out = self.shell.run(listing, check=False)
            ids = out.stdout.split() if out.returncode == 0 else []
            return ids[0] if ids else None
        argv = ["squeue", "--json", "-t", "all", f"--name={name}"]
        out = self.shell.run(argv, check=False)
        if out.returncode != 0:
            return None
        named = [job for job in _records(out, argv) if job.get("name") == name]
        return str(named[0]["job_id"]) if named else None

    def _look(self, mode: str, job_id: str) -> Observation | None:
        if mode == "text":
            return self._look_text(job_id)
        argv = (
            ["scontrol", "--json", "show", "job", job_id]
            if mode == "scontrol-json"
            else ["squeue", "--json", "-j", job_id, "-t", "all"]
        )
        out = self.shell.run(argv, check=False)
        said = out.stderr + out.stdout[:300]
        if out.returncode != 0 and _UNKNOWN_JOB.search(said):
            return None
        if out.returncode != 0 and _UNSUPPORTED.search(said):
            raise _Unsupported(said)
        if out.returncode != 0:
            raise CommandFailed(argv, out.returncode, stdout=out.stdout, stderr=out.stderr)
        mine = [job for job in _records(out, argv) if str(job.get("job_id")) == job_id]
        return observation_from_record(mine[0]) if mine else None

    def _look_text(self, job_id: str) -> Observation | None:
        listing = ["squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T|%r|%N"]
        out = self._run_knowing(listing)
        seen = None
        if out is not None and out.stdout.strip():
            state, reason, nodes = ([*out.stdout.strip().splitlines()[0].split("|"), "", ""])[:3]
            stuck = slurm_never_starts(reason)
            seen = Observation(state, slurm_state(state), reason, "", nodes, never_starts=stuck)
            if isinstance(seen.status, Phase):
                return seen
        show = self._run_knowing(["scontrol", "show", "job", "-o", job_id])
        if show is not None and "JobState=" in show.stdout:
            f = _fields(show.stdout)
            state = f.get("JobState", "")
            return Observation(
                state,
                slurm_state(state),
                f.get("Reason", ""),
                f.get("ExitCode", ""),
                f.get("NodeList", ""),
            )
        return seen

    def _run_knowing(self, argv: list[str]) -> Output | None:
        """``argv``'s output; None when SLURM does not know the job, raises on other errors."""
        out = self.shell.run(argv, check=False)
        if out.returncode == 0:
            return out
        if _UNKNOWN_JOB.search(out.stderr + out.stdout):
            return None
        raise CommandFailed(argv, out.returncode, stdout=out.stdout, stderr=out.stderr)
