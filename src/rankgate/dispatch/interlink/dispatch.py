"""Run a stage on an interLink virtual node, and the canary that checks the path works.

:func:`run_stage`: build the pod (:mod:`.manifest`), submit it, watch it with separate
queue and run deadlines (:mod:`rankgate.dispatch.watch`), fetch its logs *before*
deleting it, unpack the results archive from the logs, and merge every rank's results.

:func:`run_canary`: three tiny pods meant to succeed, fail (exit 3) and run past the
run deadline, each checked for exactly that outcome.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rankgate.dispatch.archive import ArchiveError, unpack
from rankgate.dispatch.interlink.backends import LOST_AFTER, Backend, backend_for
from rankgate.dispatch.interlink.manifest import build_pod, check_profile, pod_name, pod_script
from rankgate.dispatch.interlink.rest import InterlinkAPIError
from rankgate.dispatch.outcome import Outcome, Phase
from rankgate.dispatch.profile import Profile
from rankgate.dispatch.results import DispatchResult, merge_job_dir
from rankgate.dispatch.sbatch import JobSpec
from rankgate.dispatch.watch import Observation, Progress, caught_interrupts, watch


@dataclass(slots=True)
class PodRun:
    """One pod's life: how it ended and the logs fetched before it was deleted."""

    outcome: Outcome
    last: Observation | None = None
    logs: str | None = None
    message: str = ""
    queued_s: float = 0.0
    running_s: float = 0.0


def run_pod(
    backend: Backend,
    pod: dict,
    *,
    queue_timeout_s: float,
    run_timeout_s: float,
    poll_s: float,
    say: Progress,
    deadline_s: float | None = None,
) -> PodRun:
    """Submit ``pod``, watch it, fetch its logs, delete it. Never leaves the pod behind.

    Interrupts are caught from before the create until after the delete, so a Ctrl-C
    while the pod is created or its logs are fetched still ends in the delete.
    """
    with caught_interrupts() as interrupts:
        name = pod["metadata"]["name"]
        try:
            backend.submit(pod)
        except InterlinkAPIError as exc:
            return PodRun(Outcome.SUBMIT_ERROR, message=str(exc))
        say(f"submitted pod {name} through {backend.name}")
        misses, phase = [0], [Phase.QUEUED]

        def observe() -> Observation:
            seen = backend.observe(pod)
            if seen is not None:
                misses[0] = 0
                if isinstance(seen.status, Phase):
                    phase[0] = seen.status
                return seen
            misses[0] += 1
            if misses[0] >= LOST_AFTER:
                return Observation("absent", Outcome.LOST, "the target no longer knows the pod")
            return Observation("absent", phase[0], "not known to the target (yet)")

        waited = watch(
            observe,
            lambda: None,
            label=f"pod {name}",
            poll_s=poll_s,
            say=say,
            deadline_s=deadline_s,
            queue_timeout_s=queue_timeout_s,
            run_timeout_s=run_timeout_s,
            wait_after_cancel=False,
            transient=(InterlinkAPIError,),
            interrupts=interrupts,
        )
        run = PodRun(
            waited.outcome, waited.last, queued_s=waited.queued_s, running_s=waited.running_s
        )
        notes = (
            [waited.last.reason] if run.outcome in (Outcome.API_ERROR, Outcome.START_ERROR) else []
        )
        try:
            run.logs = backend.logs(pod)  # before the delete: afterwards they are gone
        except InterlinkAPIError as exc:
            notes.append(f"could not fetch the logs: {exc}")
        try:
            backend.delete(pod)
        except InterlinkAPIError as exc:
            notes.append(f"could not delete pod {name}: {exc}")
        run.message = "\n".join(notes)
        return run


def run_stage(
    profile: Profile,
    *,
    stage: str,
    pytest_args: Sequence[str],
    progress: Progress | None = None,
    local_dir: Path | None = None,
    poll_s: float | None = None,
    dry_run: bool = False,
    backend: Backend | None = None,
    deadline_s: float | None = None,
    queue_timeout_s: float | None = None,
    run_timeout_s: float | None = None,
) -> DispatchResult | None:
    """Dispatch ``pytest pytest_args`` as ``stage`` through interLink (None for dry runs)."""
    check_profile(profile)
    say = progress or (lambda line: None)
    name = pod_name(stage)
    job = JobSpec(
        job_dir=f"/tmp/{name}", pytest_args=tuple(pytest_args), name=name, workdir=profile.workdir
    )
    pod = build_pod(profile, name=name, stage=stage, script=pod_script(profile, job))
    pod["metadata"]["uid"] = str(uuid.uuid4())
    if dry_run:
        print(json.dumps(pod, indent=2))
        return None
    il = profile.interlink
    backend = backend or backend_for(profile)
    run = run_pod(
        backend,
        pod,
        poll_s=poll_s or il.poll_interval,
        say=say,
        deadline_s=deadline_s,
        queue_timeout_s=queue_timeout_s or il.queue_timeout,
        run_timeout_s=run_timeout_s or il.run_timeout,
    )
    result = DispatchResult(
        profile=profile.name,
        target=profile.target,
        job_id=name,
        outcome=run.outcome,
        state=run.last.state if run.last else "",
        reason=run.last.reason if run.last else "",
        exit_code=run.last.exit_code if run.last else "",
        message=run.message,
        queued_s=run.queued_s,
        running_s=run.running_s,
    )
    if run.outcome is Outcome.SUBMIT_ERROR:
        return result
    local = local_dir or Path(tempfile.mkdtemp(prefix="rankgate-")) / name
    local.mkdir(parents=True, exist_ok=True)
    result.job_dir = local
    (local / "pod.json").write_text(json.dumps(pod, indent=2) + "\n")
    if run.logs is not None:
        (local / "pod.log").write_text(run.logs)
        try:
            unpack(run.logs, local)
        except ArchiveError as exc:
            result.message = "\n".join(x for x in (result.message, f"results: {exc}") if x)
    result.merged = merge_job_dir(local, profile.tasks_per_node)
    result.write_summary()
    return result


@dataclass(frozen=True, slots=True)
class CanaryCheck:
    name: str
    expected: Outcome
    got: Outcome
    detail: str

    @property
    def ok(self) -> bool:
        return self.expected is self.got


CANARIES: tuple[tuple[str, str, Outcome], ...] = (
    ("succeed", "echo rankgate canary: ok", Outcome.COMPLETED),
    ("fail", "echo rankgate canary: failing on purpose; exit 3", Outcome.FAILED),
    ("timeout", "echo rankgate canary: sleeping; sleep 100000", Outcome.RUN_TIMEOUT),
)


def run_canary(
    profile: Profile,
    *,
    backend: Backend | None = None,
    run_timeout_s: float = 60.0,
    poll_s: float | None = None,
    progress: Progress | None = None,
) -> list[CanaryCheck]:
    """Submit the three canary pods and check each ended as it should."""
    say = progress or (lambda line: None)
    backend = backend or backend_for(profile)
    il = profile.interlink
    checks = []
    for label, script, expected in CANARIES:
        name = pod_name(f"canary-{label}")
        pod = build_pod(profile, name=name, stage=f"canary-{label}", script=script + "\n")
        pod["metadata"]["uid"] = str(uuid.uuid4())
        run = run_pod(
            backend,
            pod,
            queue_timeout_s=il.queue_timeout,
            run_timeout_s=run_timeout_s,
            poll_s=poll_s or il.poll_interval,
            say=say,
        )
        code = run.last.exit_code if run.last else ""
        detail = f"exit {code}" if code else run.message or (run.last.state if run.last else "")
        if expected is Outcome.FAILED and run.outcome is Outcome.FAILED and code != "3":
            run.outcome = Outcome.OTHER  # failed, but not the way the canary fails
        checks.append(CanaryCheck(label, expected, run.outcome, detail))
        say(f"canary {label}: expected {expected.value}, got {run.outcome.value} ({detail})")
    return checks
