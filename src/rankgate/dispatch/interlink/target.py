"""The interLink target: one pod per job on an interLink virtual node.

:class:`InterlinkTarget` implements :class:`~rankgate.dispatch.target.Target` over a
:class:`~rankgate.dispatch.interlink.backends.Backend` (interLink's REST API or the
Kubernetes API): it builds the pod (:mod:`.manifest`), submits it, observes it, and on
release reads its logs *before* deleting it; fetching unpacks the results archive the
pod printed last (:mod:`rankgate.dispatch.archive`). Queue and run deadlines come from
the profile's ``[interlink]`` table.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

from rankgate.dispatch.archive import ArchiveError, unpack
from rankgate.dispatch.interlink.backends import LOST_AFTER, Backend, backend_for
from rankgate.dispatch.interlink.manifest import build_pod, check_profile, pod_name, pod_script
from rankgate.dispatch.interlink.rest import InterlinkAPIError
from rankgate.dispatch.job import JobSpec
from rankgate.dispatch.job_outcome import JobOutcome, Phase
from rankgate.dispatch.profile import Profile
from rankgate.dispatch.target import Fetched, SubmitError
from rankgate.dispatch.watch import Observation, WaitPolicy, Watched


class InterlinkTarget:
    """Pods on an interLink virtual node; a :class:`~rankgate.dispatch.target.Target`.

    ``backend``: how the pods travel; by default the profile's (REST or Kubernetes),
    made on first use, so a dry run needs neither a token nor the kubernetes package.
    """

    transient = (InterlinkAPIError,)
    settles_after_cancel = False  # nothing to cancel: release deletes the pod after its logs

    def __init__(self, profile: Profile, backend: Backend | None = None) -> None:
        check_profile(profile)
        self.profile = profile
        self._backend = backend
        self._pods: dict[str, dict] = {}
        self._misses: dict[str, int] = {}
        self._phase: dict[str, Phase] = {}
        self._logs: dict[str, str] = {}

    @staticmethod
    def default_wait(profile: Profile) -> WaitPolicy:
        il = profile.interlink
        return WaitPolicy(
            poll_s=il.poll_interval, queue_timeout_s=il.queue_timeout, run_timeout_s=il.run_timeout
        )

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = backend_for(self.profile)
        return self._backend

    @property
    def world_size(self) -> int:
        return self.profile.tasks_per_node  # one node per pod

    def job(self, stage: str, pytest_args: Sequence[str]) -> JobSpec:
        name = pod_name(stage)
        return JobSpec(
            job_dir=f"/tmp/{name}",
            pytest_args=tuple(pytest_args),
            name=name,
            stage=stage,
            workdir=self.profile.workdir,
        )

    def script(self, job: JobSpec) -> str:
        """What the pod's container runs."""
        return pod_script(self.profile, job)

    def pod(self, job: JobSpec) -> dict:
        """The pod of ``job`` (the same one from the dry run to the delete)."""
        if job.name not in self._pods:
            pod = build_pod(self.profile, name=job.name, stage=job.stage, script=self.script(job))
            pod["metadata"]["uid"] = str(uuid.uuid4())
            self._pods[job.name] = pod
        return self._pods[job.name]

    def describe(self, job: JobSpec) -> str:
        return json.dumps(self.pod(job), indent=2) + "\n"

    def submit(self, job: JobSpec) -> str:
        backend = self.backend  # no client (no kubernetes package) is not a refused pod
        try:
            backend.submit(self.pod(job))
        except InterlinkAPIError as exc:
            raise SubmitError(str(exc)) from None
        return job.name

    def find(self, job: JobSpec) -> str | None:
        return None  # a refused create leaves no pod to look for

    def submitted(self, job: JobSpec, job_id: str) -> str:
        return f"submitted pod {job_id} through {self.backend.name}"

    def label(self, job_id: str) -> str:
        return f"pod {job_id}"

    def observe(self, job_id: str) -> Observation:
        """The pod's state; LOST_AFTER looks in a row that do not find it make it lost."""
        seen = self.backend.observe(self._pods[job_id])
        if seen is not None:
            self._misses[job_id] = 0
            if isinstance(seen.status, Phase):
                self._phase[job_id] = seen.status
            return seen
        self._misses[job_id] = self._misses.get(job_id, 0) + 1
        if self._misses[job_id] >= LOST_AFTER:
            return Observation("absent", JobOutcome.LOST, "the target no longer knows the pod")
        phase = self._phase.get(job_id, Phase.QUEUED)
        return Observation("absent", phase, "not known to the target (yet)")

    def cancel(self, job_id: str) -> None:
        pass  # the pod is deleted on release, once its logs are read

    def release(self, job_id: str) -> list[str]:
        """Read the logs (afterwards they are gone), then delete the pod."""
        pod, notes = self._pods[job_id], []
        try:
            self._logs[job_id] = self.backend.logs(pod)
        except InterlinkAPIError as exc:
            notes.append(f"could not fetch the logs: {exc}")
        try:
            self.backend.delete(pod)
        except InterlinkAPIError as exc:
            notes.append(f"could not delete pod {job_id}: {exc}")
        return notes

    def explain(self, job_id: str, watched: Watched) -> list[str]:
        return []  # the pod's own reasons (start errors, API errors) are said for every target

    def fetch(self, job: JobSpec, job_id: str, local: Path | None) -> Fetched:
        """The pod, its logs and the results unpacked from them, in ``local``."""
        local = local or Path(tempfile.mkdtemp(prefix="rankgate-")) / job_id
        local.mkdir(parents=True, exist_ok=True)
        (local / "pod.json").write_text(json.dumps(self._pods[job_id], indent=2) + "\n")
        logs = self._logs.get(job_id)
        if logs is None:
            return Fetched(local)
        (local / "pod.log").write_text(logs)
        try:
            unpack(logs, local)
        except ArchiveError as exc:
            return Fetched(local, (f"results: {exc}",))
        return Fetched(local)
