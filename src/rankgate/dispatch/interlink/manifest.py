"""The pod that runs a stage on an interLink virtual node.

The pod is pinned to the virtual node (nodeSelector ``kubernetes.io/hostname``),
tolerates its ``virtual-node.interlink/no-schedule`` taint, never restarts, and
carries the SLURM plugin's annotations built from the profile:

- ``slurm-job.vk.io/flags``: ``--nodes --ntasks-per-node --cpus-per-task --gres --time --partition
  --account --qos`` (the long forms of -t, -p and -A: the plugin splits this
  annotation on spaces, so every flag is one ``--key=value`` word);
- ``slurm-job.vk.io/pre-exec``: module loads and pre-exec lines;
- ``slurm-job.vk.io/singularity-options`` / ``singularity-mounts``: the container
  options (``--nv`` when GPUs are asked for) and ``--bind`` mounts;
- ``slurm-job.vk.io/image-root`` when the profile sets one.

The container runs :func:`pod_script`: torchrun starts ``tasks_per_node`` ranks, each
running pytest in the harness's in-place mode with its own JUnit file and log, and the
pod's last output is the results archive (:mod:`rankgate.dispatch.archive`).
"""

from __future__ import annotations

import re
import secrets
import shlex

from rankgate.dispatch.job import JobSpec
from rankgate.dispatch.profile import Profile, ProfileError
from rankgate.dispatch.sbatch import rank_command, resource_options

TOLERATION_KEY = "virtual-node.interlink/no-schedule"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ANNOTATION = "slurm-job.vk.io/"
CONTAINER_NAME = "rankgate"


def pod_name(stage: str) -> str:
    """A unique DNS-1123 pod name for ``stage``."""
    base = re.sub(r"[^a-z0-9-]+", "-", stage.lower()).strip("-") or "stage"
    return f"rankgate-{base}-{secrets.token_hex(4)}"[:63]


def check_profile(profile: Profile) -> None:
    """interLink-specific limits, as errors that name the fix."""
    if profile.nodes != 1:
        raise ProfileError(
            f"profile {profile.name!r}: nodes = {profile.nodes}; the interLink target starts "
            "one node's ranks with torchrun inside the pod, so use nodes = 1 (or a slurm target)"
        )
    if not profile.workdir:
        raise ProfileError(
            f"profile {profile.name!r}: interLink pods need workdir (the project folder inside "
            "the image, where pytest finds the suites)"
        )
    if not profile.container.image:
        raise ProfileError(
            f"profile {profile.name!r}: interLink pods need [container] image "
            "(a .sif path or docker:// reference the SLURM plugin can run)"
        )


def slurm_flags(profile: Profile) -> str:
    """``slurm-job.vk.io/flags``: the resource options, which the plugin splits on spaces."""
    flags = resource_options(profile)
    spaced = [flag for flag in flags if " " in flag]
    if spaced:
        raise ProfileError(f"sbatch option(s) {spaced} contain spaces; write them as --key=value")
    return " ".join(flags)


def annotations(profile: Profile) -> dict[str, str]:
    found = {ANNOTATION + "flags": slurm_flags(profile)}
    pre = [f"module load {shlex.quote(m)}" for m in profile.modules] + list(profile.pre_exec)
    if pre:
        found[ANNOTATION + "pre-exec"] = " && ".join(pre)
    options = (["--nv"] if profile.gpus_per_node else []) + list(profile.container.options)
    if options:
        found[ANNOTATION + "singularity-options"] = " ".join(options)
    if profile.container.mounts:
        found[ANNOTATION + "singularity-mounts"] = " ".join(
            f"--bind {m}" for m in profile.container.mounts
        )
    if profile.interlink.image_root:
        found[ANNOTATION + "image-root"] = profile.interlink.image_root
    return found


def pod_script(profile: Profile, job: JobSpec) -> str:
    """What the container runs: torchrun over the ranks, then the results archive."""
    ranks = profile.tasks_per_node
    rank = rank_command(profile, job, rank_var="RANK")
    folder = shlex.quote(job.job_dir)
    python = shlex.quote(profile.python)
    exports = {
        "RANKGATE_STORE": f"{job.job_dir}/rendezvous.store",
        "RANKGATE_SHARED_TMP": job.job_dir,
        "PYTHONUNBUFFERED": "1",
    }
    lines = [
        "set -u",
        f"rm -rf {folder} && mkdir -p {folder}",
        *(f"export {k}={shlex.quote(v)}" for k, v in exports.items()),
        f"echo 'rankgate: {ranks} rank(s) of {shlex.quote(' '.join(job.pytest_args))}'",
        f"{python} -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node={ranks} "
        f"--no-python bash -c {shlex.quote(rank)}",
        "rc=$?",
        f"tail -n 200 {folder}/rank0.log",
        "echo 'rankgate: ranks exited with status '$rc",
        f"{python} -m rankgate.dispatch.archive pack {folder} || rc=70",
        "exit $rc",
    ]
    return "\n".join(lines) + "\n"


def build_pod(profile: Profile, *, name: str, stage: str, script: str) -> dict:
    """The pod manifest (a plain dict in Kubernetes' camelCase wire form) running ``script``."""
    check_profile(profile)
    il = profile.interlink
    limits: dict[str, str] = {"cpu": str(profile.cpus_per_task * profile.tasks_per_node)}
    if profile.gpus_per_node:
        limits["nvidia.com/gpu"] = str(profile.gpus_per_node)
    env = [{"name": k, "value": v} for k, v in profile.env.items()]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": il.namespace,
            "labels": {"app.kubernetes.io/name": "rankgate", "rankgate/stage": stage},
            "annotations": annotations(profile),
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {HOSTNAME_LABEL: il.node},
            "tolerations": [{"key": TOLERATION_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": CONTAINER_NAME,
                    "image": profile.container.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/bash", "-c", script],
                    "env": env,
                    "resources": {"limits": limits, "requests": dict(limits)},
                }
            ],
        },
    }
