"""Site profiles: one TOML file says where and how a dispatched stage runs.

A profile file holds one profile at its top level::

    target = "slurm"            # slurm | slurm-ssh | interlink-kube | interlink-rest
    partition = "gpu"
    nodes = 2
    tasks_per_node = 4
    gpus_per_node = 4
    time_limit = "00:30:00"
    modules = ["cuda/12.8"]
    results_dir = "/scratch/ci/rankgate"
    shards = 2                  # two jobs, each one shard of the tests (docs/dispatch.md)
    durations = "/scratch/ci/rankgate/durations.json"
    [container]
    runtime = "apptainer"
    image = "/scratch/images/rankgate.sif"
    [env]
    NCCL_DEBUG = "WARN"

Every key is a field below; an unknown key, a negative count or GPUs asked of a
profile without GPUs is a :class:`ProfileError` naming the file, the key and the fix.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rankgate import tomlfile
from rankgate.errors import RankgateError

TARGETS = ("slurm", "slurm-ssh", "interlink-kube", "interlink-rest")
RUNTIMES = ("none", "apptainer", "singularity", "enroot")
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


class ProfileError(RankgateError, ValueError):
    """A profile that cannot be used; the message names the key and the fix."""


# Characters a job's folders cannot hold, and why: each reaches a reader that would
# change the path (rankgate quotes paths wherever a shell or sbatch reads them).
_PATH_REFUSED = {
    "$": "pytest expands $NAME in its --junitxml path, so the ranks would write elsewhere",
    '"': "an #SBATCH line cannot carry a double quote",
    "\\": "sbatch reads a backslash in an #SBATCH line as an escape",
    "\n": "an #SBATCH line cannot carry a newline",
}


def check_job_path(key: str, value: str, *, allow: str = "") -> None:
    """Refuse a folder holding a character no part of the job can carry unchanged."""
    for char, why in _PATH_REFUSED.items():
        if char in value and char not in allow:
            raise ProfileError(
                f"{key} = {value!r} holds {char!r}: {why}; choose a folder without it "
                "(rankgate never expands variables in paths: write the path out in full)"
            )


@dataclass(kw_only=True, slots=True)
class Container:
    """How each rank's command is wrapped in a container."""

    runtime: str = "none"
    """none, apptainer, singularity, or enroot (through pyxis's ``srun --container-*``)."""
    image: str = ""
    """Image path or reference: a .sif file, an enroot squashfs, or docker://..."""
    options: list[str] = field(default_factory=list)
    """Extra runtime options, e.g. ``["--cleanenv"]`` for apptainer."""
    mounts: list[str] = field(default_factory=list)
    """Bind mounts as ``src:dst[:flags]``."""

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ProfileError(f"container.runtime = {self.runtime!r}: use one of {RUNTIMES}")
        if self.runtime != "none" and not self.image:
            raise ProfileError(f"container.runtime = {self.runtime!r} needs container.image")


@dataclass(kw_only=True, slots=True)
class Interlink:
    """Settings of the interLink targets (ignored by the SLURM ones)."""

    node: str = "interlink-slurm"
    """Name of the interLink virtual node (its kubernetes.io/hostname label)."""
    namespace: str = "default"
    """Kubernetes namespace of the pods."""
    kubeconfig: str = ""
    """Kubeconfig for interlink-kube; empty uses the client's default lookup."""
    url: str = ""
    """Base URL of the interLink API for interlink-rest, e.g. https://interlink.example:3000."""
    token_file: str = ""
    """File holding the bearer token for interlink-rest (never the token itself)."""
    image_root: str = ""
    """Folder of .sif images on the cluster (annotation slurm-job.vk.io/image-root)."""
    queue_timeout: float = 1800.0
    """Seconds a pod may wait before it starts running."""
    run_timeout: float = 3600.0
    """Seconds a pod may run once started."""
    poll_interval: float = 10.0
    """Seconds between status requests."""

    def __post_init__(self) -> None:
        for name in ("queue_timeout", "run_timeout", "poll_interval"):
            if getattr(self, name) <= 0:
                raise ProfileError(f"interlink.{name} must be > 0, got {getattr(self, name)}")


@dataclass(kw_only=True, slots=True)
class Profile:
    """A site's settings for one target."""

    name: str = "profile"
    """Shown in progress lines and reports; defaults to the file's stem."""
    target: str = "slurm"
    """slurm (local CLI), slurm-ssh (CLI on ``host``), interlink-kube or interlink-rest."""
    host: str = ""
    """Login node for slurm-ssh (anything ssh accepts, e.g. ``ci@login.cluster``)."""
    ssh_options: list[str] = field(default_factory=list)
    """Extra ssh arguments for slurm-ssh."""
    partition: str = ""
    """SLURM partition (-p); empty uses the cluster's default."""
    account: str = ""
    """SLURM account (-A)."""
    qos: str = ""
    """SLURM quality of service (--qos)."""
    nodes: int = 1
    """Nodes (-N)."""
    tasks_per_node: int = 1
    """Ranks per node (--ntasks-per-node); world size is nodes * tasks_per_node."""
    cpus_per_task: int = 1
    """CPUs per rank (--cpus-per-task)."""
    gpus_per_node: int = 0
    """GPUs the nodes have and the job asks for (--gres=gpu:N); 0 means a CPU-only profile."""
    time_limit: str = "00:30:00"
    """Job time limit as SLURM writes it: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS."""
    queue_timeout: float = 21600.0
    """SLURM targets: seconds a job may wait in the queue before rankgate cancels it
    (outcome queue-timeout), so a job held or starved forever still ends; interLink
    targets use ``[interlink] queue_timeout``."""
    modules: list[str] = field(default_factory=list)
    """Environment modules loaded before the ranks start (``module load ...``)."""
    pre_exec: list[str] = field(default_factory=list)
    """Shell lines run before the ranks start (activate a venv, set paths)."""
    container: Container = field(default_factory=Container)
    """Container each rank runs in."""
    results_dir: str = ""
    """Shared folder (seen by all nodes) under which each job gets its own directory."""
    workdir: str = ""
    """Folder the ranks run pytest in (the project checkout on the cluster)."""
    python: str = "python3"
    """Python interpreter on the cluster that has rankgate installed."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables exported to every rank."""
    sbatch_options: list[str] = field(default_factory=list)
    """Further sbatch options, verbatim (e.g. ``["--exclusive"]``)."""
    interlink: Interlink = field(default_factory=Interlink)
    """interLink settings (interlink-* targets)."""
    shards: int = 1
    """Jobs the stage is split into, run side by side, each running one shard of its
    tests (``--rankgate-shard K/N``) split by measured time; 1 = one job."""
    durations: str = ""
    """Durations file (JSON, node id -> seconds) the shards are split by. SLURM: a path
    every node sees; each shard stores its tests' times back into it. interLink: a path
    inside the pod's working folder, only read. Empty: shards split by test count."""

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ProfileError(f"target = {self.target!r}: use one of {TARGETS}")
        if self.target == "slurm-ssh" and not self.host:
            raise ProfileError("target 'slurm-ssh' needs host = 'user@login-node'")
        if self.target == "interlink-rest" and not (
            self.interlink.url and self.interlink.token_file
        ):
            raise ProfileError(
                "target 'interlink-rest' needs [interlink] url and token_file "
                "(a file holding the bearer token)"
            )
        counts = (("nodes", 1), ("tasks_per_node", 1), ("cpus_per_task", 1), ("gpus_per_node", 0))
        for name, least in counts:
            value = getattr(self, name)
            if not least <= value <= MAX_COUNT:
                raise ProfileError(f"{name} = {value}: must be {least} to {MAX_COUNT}")
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ProfileError(f"shards = {self.shards}: must be 1 to {MAX_SHARDS}")
        check_job_path("durations", self.durations)
        time_limit_minutes(self.time_limit)  # raises on a malformed value
        if self.queue_timeout <= 0:
            raise ProfileError(f"queue_timeout must be > 0 seconds, got {self.queue_timeout}")
        check_job_path("results_dir", self.results_dir)
        check_job_path("workdir", self.workdir, allow="$")  # only reached quoted
        bad_env = [key for key in self.env if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key)]
        if bad_env:
            raise ProfileError(f"env: {bad_env} are not valid variable names")

    @property
    def world_size(self) -> int:
        """Ranks of a job: nodes * tasks_per_node."""
        return self.nodes * self.tasks_per_node

    def require_gpus(self, what: str) -> None:
        """Raise when ``what`` (a stage) needs GPUs and this profile has none."""
        if self.gpus_per_node == 0:
            raise ProfileError(
                f"{what} needs GPUs but profile {self.name!r} has gpus_per_node = 0: "
                "pick a GPU profile or set gpus_per_node"
            )


MAX_SHARDS = 1000
"""The most jobs one dispatch splits a stage into."""
MAX_COUNT = 1_000_000
"""The most nodes, tasks, CPUs or GPUs a profile may ask for: more than any cluster has, and
far less than the numbers SLURM's options overflow at."""


def time_limit_minutes(value: str) -> float:
    """Minutes in a SLURM time limit string; raises :class:`ProfileError` if malformed.

    Fields after the first are bounded (seconds and minutes below 60, hours after a
    day count below 24): SLURM itself reads ``1:99`` as 3 minutes rather than refusing
    it. A limit of zero is refused too: SLURM reads ``0`` as no limit at all.
    """
    match = _TIME.match(value.strip())
    if not match:
        raise ProfileError(f"time_limit = {value!r}: write minutes, MM:SS, HH:MM:SS or D-HH:MM:SS")
    days, a, b, c = (int(x) if x else None for x in match.groups())
    if days is not None:  # D-HH[:MM[:SS]]
        bounded = {"hours": (a, 24), "minutes": (b, 60), "seconds": (c, 60)}
        minutes = days * 1440 + a * 60 + (b or 0) + (c or 0) / 60
    elif c is not None:  # HH:MM:SS
        bounded = {"minutes": (b, 60), "seconds": (c, 60)}
        minutes = a * 60 + b + c / 60
    elif b is not None:  # MM:SS
        bounded = {"seconds": (b, 60)}
        minutes = a + b / 60
    else:
        bounded, minutes = {}, float(a)
    for unit, (field_value, limit) in bounded.items():
        if field_value is not None and field_value >= limit:
            raise ProfileError(
                f"time_limit = {value!r}: {field_value} {unit} is out of range (0-{limit - 1}); "
                "write minutes, MM:SS, HH:MM:SS or D-HH:MM:SS with each field in range"
            )
    if minutes == 0:
        raise ProfileError(
            f"time_limit = {value!r}: SLURM reads a zero limit as no limit at all; "
            'give the job a real limit, e.g. time_limit = "00:30:00"'
        )
    return minutes


_NESTED = {"container": Container, "interlink": Interlink}


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ProfileError(f"{where}: unknown key(s) {unknown}; known keys are {sorted(known)}")
    _check_types(cls, data, where)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        nested = _NESTED.get(key) if cls is Profile else None
        if nested is not None:
            if not isinstance(value, dict):
                raise ProfileError(f"{where}: [{key}] must be a table")
            value = _build(nested, value, f"{where} [{key}]")
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except ProfileError as exc:
        raise ProfileError(f"{where}: {exc}") from None
    except TypeError as exc:
        raise ProfileError(f"{where}: {exc}") from None


def profile_from_dict(data: dict[str, Any], *, name: str, where: str = "profile") -> Profile:
    """Build and validate a profile from parsed TOML."""
    return _build(Profile, {"name": name, **data}, where)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Field type (as annotated) -> (check, how to write it in TOML).
_TYPES: dict[str, tuple[Any, str]] = {
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number: {k} = 2"),
    "float": (_is_number, "a number of seconds, without quotes: {k} = 60"),
    "str": (lambda v: isinstance(v, str), 'a string in quotes: {k} = "..."'),
    "list[str]": (
        lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        'a list of strings, one word per item: {k} = ["--opt", "value"]',
    ),
    "dict[str, str]": (
        lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
        'a table of strings: [{k}] NAME = "value"',
    ),
}


def _check_types(cls: type, data: dict[str, Any], where: str) -> None:
    """TOML gives the right types when the user wrote the right thing; say so when not.

    A string where a list belongs would be splatted character by character, and a
    quoted number would fail later with an unclear TypeError.
    """
    for f in dataclasses.fields(cls):
        if f.name not in data or f.name in _NESTED:
            continue
        value, expected = data[f.name], str(f.type)
        check, how = _TYPES.get(expected, (lambda v: True, ""))
        if not check(value):
            raise ProfileError(
                f"{where}: {f.name} = {value!r} must be {expected}; write " + how.format(k=f.name)
            )


def load_profile(path: str | Path) -> Profile:
    """Read and validate the profile in TOML file ``path`` (its name is the file's stem)."""
    path = Path(path)
    try:
        data = tomlfile.read(path)
    except tomlfile.TomlFileError as exc:
        raise ProfileError(str(exc)) from None
    return profile_from_dict(data, name=data.pop("name", path.stem), where=str(path))


def find_profile(spec: str, search: list[Path]) -> Path:
    """Resolve ``--profile`` to a file: a path, or NAME looked up as NAME.toml in ``search``."""
    direct = Path(spec)
    if direct.suffix == ".toml" or direct.exists():
        return direct
    for folder in search:
        candidate = folder / f"{spec}.toml"
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(folder) for folder in search) or "(no folders)"
    raise ProfileError(
        f"no profile {spec!r}: looked for {spec}.toml in {looked}; "
        "pass a path to a .toml file or set RANKGATE_PROFILES to the folder holding it"
    )


def resolve_profile(spec: str) -> Profile:
    """``--profile SPEC``: a .toml path, or NAME.toml in $RANKGATE_PROFILES, then ./profiles."""
    search = [Path(p) for p in os.environ.get("RANKGATE_PROFILES", "").split(":") if p]
    return load_profile(find_profile(spec, [*search, Path("profiles")]))


def profile_problem(spec: str) -> str | None:
    """Why ``--profile SPEC`` cannot be used, in one line; None when it can."""
    try:
        resolve_profile(spec)
    except ProfileError as exc:
        return f"--profile {spec}: {exc}"
    return None
