"""Two ways to reach an interLink virtual node, behind one small interface.

- :class:`RestBackend`: straight to the interLink API (:mod:`.rest`), as the virtual
  kubelet does; no Kubernetes needed.
- :class:`KubeBackend`: through the Kubernetes API with the official ``kubernetes``
  client and a kubeconfig; the virtual kubelet forwards the pod to interLink.

Both answer :meth:`observe` with a :class:`~rankgate.dispatch.watch.Observation`
derived from the pod's container status by :func:`classify`, so the failure classes
are the same whichever way the pod went.
"""

from __future__ import annotations

from typing import Any, Protocol

from rankgate.dispatch.interlink.manifest import CONTAINER_NAME
from rankgate.dispatch.interlink.rest import InterlinkAPIError, InterlinkREST, redact
from rankgate.dispatch.job_outcome import JobOutcome, Phase
from rankgate.dispatch.profile import Profile
from rankgate.dispatch.watch import Observation

# Container "waiting" reasons that mean it will never start by itself.
START_ERRORS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerError",
        "CreateContainerConfigError",
        "RunContainerError",
        "ProviderFailed",
    }
)
LOST_AFTER = 3
"""Consecutive looks that do not find the pod before it counts as lost."""


class Backend(Protocol):
    name: str

    def submit(self, pod: dict) -> None: ...

    def observe(self, pod: dict) -> Observation | None:
        """None when the target does not know the pod (yet, or any more)."""

    def logs(self, pod: dict) -> str: ...

    def delete(self, pod: dict) -> None: ...


def classify(container: dict | None, phase: str | None = None) -> Observation:
    """Map a V1ContainerStatus (wire form) and the pod phase to a phase or outcome."""
    state = (container or {}).get("state") or {}
    if "terminated" in state and state["terminated"] is not None:
        done = state["terminated"]
        code = done.get("exitCode")
        reason = done.get("reason") or ""
        if reason == "OOMKilled":
            outcome = JobOutcome.OUT_OF_MEMORY
        else:
            outcome = JobOutcome.COMPLETED if code == 0 else JobOutcome.FAILED
        message = done.get("message") or ""
        return Observation("terminated", outcome, reason or message, str(code))
    if state.get("running") is not None:
        return Observation("running", Phase.RUNNING)
    if state.get("waiting") is not None:
        reason = state["waiting"].get("reason") or ""
        if reason in START_ERRORS:
            return Observation(
                f"waiting: {reason}",
                JobOutcome.START_ERROR,
                state["waiting"].get("message") or reason,
            )
        return Observation("waiting", Phase.QUEUED, reason)
    by_phase = {
        "Running": Phase.RUNNING,
        "Succeeded": JobOutcome.COMPLETED,
        "Failed": JobOutcome.FAILED,
        "Unknown": JobOutcome.LOST,
    }
    return Observation(phase or "Pending", by_phase.get(phase or "", Phase.QUEUED))


class RestBackend:
    """Pods straight through interLink's REST API."""

    name = "interlink-rest"

    def __init__(self, client: InterlinkREST) -> None:
        self.client = client

    @classmethod
    def from_profile(cls, profile: Profile) -> RestBackend:
        il = profile.interlink
        return cls(InterlinkREST(il.url, il.token_file))

    def submit(self, pod: dict) -> None:
        self.client.create(pod)

    def observe(self, pod: dict) -> Observation | None:
        uid = pod["metadata"]["uid"]
        for status in self.client.status([pod]):
            if status.get("UID") == uid or status.get("name") == pod["metadata"]["name"]:
                containers = status.get("containers") or []
                mine = [c for c in containers if c.get("name") == CONTAINER_NAME] or containers
                obs = classify(mine[0] if mine else None)
                return Observation(
                    obs.state, obs.status, obs.reason, obs.exit_code, where=status.get("JID", "")
                )
        return None

    def logs(self, pod: dict) -> str:
        return self.client.logs(pod)

    def delete(self, pod: dict) -> None:
        self.client.delete(pod)


class KubeBackend:
    """Pods through the Kubernetes API (the ``kubernetes`` package, a kubeconfig)."""

    name = "interlink-kube"

    def __init__(self, api: Any) -> None:
        self.api = api

    @classmethod
    def from_profile(cls, profile: Profile) -> KubeBackend:
        try:
            from kubernetes import client, config
        except ImportError:
            raise InterlinkAPIError(
                "-",
                "-",
                None,
                "the interlink-kube target needs the kubernetes package: pip install kubernetes",
            ) from None
        api_client = config.new_client_from_config(config_file=profile.interlink.kubeconfig or None)
        return cls(client.CoreV1Api(api_client))

    def _secrets(self) -> list[str]:
        """The credentials the client sends, to redact from what the server says back."""
        config = self.api.api_client.configuration
        found = [getattr(config, "password", None) or ""]
        for value in (getattr(config, "api_key", None) or {}).values():
            found.append(value.split(" ", 1)[-1])  # the token of "Bearer <token>"
        return found

    def _call(self, what: str, fn, *args, **kwargs):
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            said = redact(str(exc.body or exc.reason), *self._secrets())
            raise InterlinkAPIError("kube", what, exc.status, said) from None
        except OSError as exc:  # urllib3 connection errors are OSErrors
            said = redact(str(exc), *self._secrets())
            raise InterlinkAPIError("kube", what, None, said) from None

    def submit(self, pod: dict) -> None:
        ns = pod["metadata"]["namespace"]
        self._call("create pod", self.api.create_namespaced_pod, ns, pod)

    def observe(self, pod: dict) -> Observation | None:
        meta = pod["metadata"]
        try:
            found = self._call(
                "read pod", self.api.read_namespaced_pod, meta["name"], meta["namespace"]
            )
        except InterlinkAPIError as exc:
            if exc.status == 404:
                return None
            raise
        wire = self.api.api_client.sanitize_for_serialization(found)
        status = wire.get("status") or {}
        containers = status.get("containerStatuses") or []
        mine = [c for c in containers if c.get("name") == CONTAINER_NAME] or containers
        obs = classify(mine[0] if mine else None, status.get("phase"))
        return Observation(
            obs.state,
            obs.status,
            obs.reason,
            obs.exit_code,
            where=(wire.get("spec") or {}).get("nodeName", ""),
        )

    def logs(self, pod: dict) -> str:
        meta = pod["metadata"]
        return self._call(
            "read log",
            self.api.read_namespaced_pod_log,
            meta["name"],
            meta["namespace"],
            container=CONTAINER_NAME,
        )

    def delete(self, pod: dict) -> None:
        meta = pod["metadata"]
        self._call(
            "delete pod",
            self.api.delete_namespaced_pod,
            meta["name"],
            meta["namespace"],
            grace_period_seconds=0,
        )


def backend_for(profile: Profile) -> Backend:
    if profile.target == "interlink-kube":
        return KubeBackend.from_profile(profile)
    return RestBackend.from_profile(profile)
