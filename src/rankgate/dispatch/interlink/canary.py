"""The interLink canary: three tiny pods that check the whole path works.

:func:`run_canary` submits pods meant to succeed, to fail with exit 3, and to outlive
the run deadline, through the same :func:`~rankgate.dispatch.target.wait_for_job` as a
stage, and checks that each ended exactly that way.
"""

from __future__ import annotations

from dataclasses import dataclass

from rankgate.dispatch.interlink.backends import Backend
from rankgate.dispatch.interlink.manifest import pod_name
from rankgate.dispatch.interlink.target import InterlinkTarget
from rankgate.dispatch.job import JobSpec
from rankgate.dispatch.job_outcome import JobOutcome
from rankgate.dispatch.profile import Profile, ProfileError
from rankgate.dispatch.target import wait_for_job
from rankgate.dispatch.watch import Progress, WaitPolicy


@dataclass(frozen=True, slots=True)
class CanaryCheck:
    name: str
    expected: JobOutcome
    got: JobOutcome
    detail: str

    @property
    def ok(self) -> bool:
        return self.expected is self.got


CANARIES: tuple[tuple[str, str, JobOutcome], ...] = (
    ("succeed", "echo rankgate canary: ok", JobOutcome.COMPLETED),
    ("fail", "echo rankgate canary: failing on purpose; exit 3", JobOutcome.FAILED),
    ("timeout", "echo rankgate canary: sleeping; sleep 100000", JobOutcome.RUN_TIMEOUT),
)


class _CanaryTarget(InterlinkTarget):
    """An interLink target whose pods run a canary's script instead of pytest."""

    def __init__(self, profile: Profile, backend: Backend | None, script: str) -> None:
        super().__init__(profile, backend)
        self._script = script

    def script(self, job: JobSpec) -> str:
        return self._script + "\n"


def run_canary(
    profile: Profile,
    *,
    backend: Backend | None = None,
    run_timeout_s: float = 60.0,
    poll_s: float | None = None,
    progress: Progress | None = None,
) -> list[CanaryCheck]:
    """Submit the three canary pods and check each ended as it should."""
    if not profile.target.startswith("interlink"):
        raise ProfileError(
            f"--canary is for interLink profiles; {profile.name!r} is {profile.target}"
        )
    say = progress or (lambda line: None)
    il = profile.interlink
    policy = WaitPolicy(
        poll_s=poll_s or il.poll_interval,
        queue_timeout_s=il.queue_timeout,
        run_timeout_s=run_timeout_s,
    )
    checks = []
    for label, script, expected in CANARIES:
        target = _CanaryTarget(profile, backend, script)
        backend = target.backend  # one backend for all three pods
        name = pod_name(f"canary-{label}")
        job = JobSpec(job_dir=f"/tmp/{name}", pytest_args=(), name=name, stage=f"canary-{label}")
        ended = wait_for_job(target, job, policy, say=say)
        last, got = ended.last, ended.outcome
        code = last.exit_code if last else ""
        message = "\n".join(ended.notes)
        detail = f"exit {code}" if code else message or (last.state if last else "")
        if expected is JobOutcome.FAILED and got is JobOutcome.FAILED and code != "3":
            got = JobOutcome.OTHER  # failed, but not the way the canary fails
        checks.append(CanaryCheck(label, expected, got, detail))
        say(f"canary {label}: expected {expected.value}, got {got.value} ({detail})")
    return checks
