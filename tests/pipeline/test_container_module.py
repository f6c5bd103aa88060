"""rankgate.pipeline.container offline: the podman/docker command lines, the Containerfile,
the variant matrix, and the container suite failing (not skipping) when it must run.
(Named apart from tests/containers/test_container.py: test basenames must be unique.)

No engine runs here: :mod:`rankgate.proc.command` (the one subprocess module) is
replaced by a recorder.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from rankgate.pipeline import container, probe, stages
from rankgate.proc import command as process

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "containers" / "Containerfile"
MATRIX = container.load_matrix(ROOT / "containers" / "matrix.toml")
SUITE = ROOT / "tests" / "containers" / "test_container.py"


class Recorder:
    """Commands ``build`` ran, with their environment; ``inspect`` is image inspect's code."""

    def __init__(self) -> None:
        self.runs: list[tuple[list[str], dict[str, str]]] = []
        self.inspect = 0

    def run(self, argv, *, env=None, **_):
        self.runs.append((list(argv), dict(env or {})))
        return 0

    def capture(self, argv, **_):
        return (self.inspect, "") if argv[1:3] == ["image", "inspect"] else (0, "")


@pytest.fixture
def recorder(monkeypatch, tmp_path):
    rec = Recorder()
    monkeypatch.setattr(process, "run", rec.run)
    monkeypatch.setattr(process, "capture", rec.capture)
    monkeypatch.setattr(container, "_fill_context", lambda context: None)
    monkeypatch.setenv("RANKGATE_CONTAINER_RUNTIME", "/usr/sbin/runc")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("RANKGATE_WHEELS", str(wheels))
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(container, "CA_BUNDLE", ca)
    rec.wheels, rec.ca = wheels, ca
    return rec


def build_args(argv: list[str]) -> dict[str, str]:
    pairs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--build-arg"]
    return dict(pair.split("=", 1) for pair in pairs)


def test_podman_build_has_runc_ulimits_mounts_and_build_args(recorder):
    tag = container.build(MATRIX["cpu-local"], engine="podman")
    assert tag == "localhost/rankgate:cpu-local"
    ((argv, _),) = recorder.runs  # the base image exists: only the build
    context = argv[-1]
    assert Path(context).name.startswith("rankgate-context-")
    assert argv[:10] == [
        "podman",
        "build",
        "--runtime",
        "/usr/sbin/runc",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        "-f",
        "containers/Containerfile",
    ]
    assert argv[10:12] == ["-t", "localhost/rankgate:cpu-local"]
    volumes = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-v"]
    assert volumes == [f"{recorder.wheels}:/wheels:ro", f"{recorder.ca}:/etc/rankgate-ca.crt:ro"]
    assert build_args(argv) == {
        "BASE_IMAGE": "localhost/rankgate-base:bookworm",
        "TORCH_SPEC": "torch==2.13.0+cpu",
        "TORCH_INDEX_URL": "",
        "WHEELS": "/wheels",
        "PIP_CERT": "/etc/rankgate-ca.crt",
    }
    assert "--no-cache" not in argv


def test_fresh_build_rebuilds_the_local_base_and_every_layer(recorder):
    container.build(MATRIX["cpu-local"], engine="podman", fresh=True)
    (base, base_env), (argv, _) = recorder.runs
    assert base == ["bash", "scripts/container/base-image.sh", "localhost/rankgate-base:bookworm"]
    assert base_env == {"REBUILD": "1", "CONTAINER_ENGINE": "podman"}
    assert "--no-cache" in argv


def test_missing_local_base_is_built_first(recorder):
    recorder.inspect = 125
    container.build(MATRIX["cpu-local"], engine="podman")
    assert [argv[:2] for argv, _ in recorder.runs] == [
        ["bash", "scripts/container/base-image.sh"],
        ["podman", "build"],
    ]


def test_registry_variant_passes_its_base_image_and_index(recorder):
    container.build(MATRIX["cu128-torch2.11"], engine="podman")
    ((argv, _),) = recorder.runs
    args = build_args(argv)
    assert {key: args[key] for key in ("BASE_IMAGE", "TORCH_SPEC", "TORCH_INDEX_URL")} == {
        "BASE_IMAGE": "docker.io/nvidia/cuda:12.8.1-runtime-ubuntu24.04",
        "TORCH_SPEC": "torch==2.11.0",
        "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cu128",
    }


def test_docker_gets_no_podman_flags_or_build_mounts(recorder):
    container.build(MATRIX["cpu"], engine="docker")
    ((argv, _),) = recorder.runs
    assert argv[:2] == ["docker", "build"]
    assert not {"--runtime", "--ulimit", "-v"} & set(argv)
    assert set(build_args(argv)) == {"BASE_IMAGE", "TORCH_SPEC", "TORCH_INDEX_URL"}


def test_podman_without_runc_keeps_the_ulimits(monkeypatch):
    monkeypatch.delenv("RANKGATE_CONTAINER_RUNTIME", raising=False)
    monkeypatch.setattr(container.shutil, "which", lambda name: None)
    assert container.engine_flags("podman") == [
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
    ]
    assert container.engine_flags("/usr/bin/docker") == []


def test_run_args_isolate_the_container(monkeypatch):
    monkeypatch.setenv("RANKGATE_CONTAINER_RUNTIME", "/usr/sbin/runc")
    argv = container.run_args("podman", "img:tag", ["id", "-u"], mounts={"/tmp/r": "/results"})
    assert argv[:4] == ["podman", "run", "--rm", "--init"]
    assert argv[4:6] == ["--runtime", "/usr/sbin/runc"]
    text = shlex.join(argv)
    assert "--network none --shm-size 1g -v /tmp/r:/results img:tag id -u" in text


def test_unknown_variant_names_the_matrix(monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit, match="unknown variant 'nope'; the matrix has: cu128"):
        container.main(["build", "nope"])


# --- the Containerfile and the matrix ---------------------------------------------------


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Containerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_containerfile_takes_base_image_before_from():
    steps = instructions()
    first_from = next(i for i, (op, _) in enumerate(steps) if op == "FROM")
    pre = [args for op, args in steps[:first_from] if op == "ARG"]
    assert any(a.startswith("BASE_IMAGE=docker.io/nvidia/cuda:") for a in pre)
    assert steps[first_from][1] == "${BASE_IMAGE}"


def test_containerfile_declares_every_build_arg_the_builders_pass():
    declared = {args.split("=")[0] for op, args in instructions() if op == "ARG"}
    assert {"BASE_IMAGE", "TORCH_SPEC", "TORCH_INDEX_URL", "WHEELS", "PIP_CERT"} <= declared


def test_containerfile_runs_as_a_non_root_user_and_smoke_checks_as_it():
    steps = instructions()
    users = [i for i, (op, _) in enumerate(steps) if op == "USER"]
    assert users and steps[users[-1]][1] == "rankgate"
    assert any("useradd" in a and "--uid 10001" in a for op, a in steps if op == "RUN")
    smoke = [a for op, a in steps[users[-1] :] if op == "RUN"]
    assert len(smoke) == 1
    assert "import sys, torch, rankgate" in smoke[0]
    assert "rankgate run --list" in smoke[0]
    assert "pytest --collect-only" in smoke[0]


def test_pip_installs_use_a_cache_mount_the_image_does_not_keep():
    steps = instructions()
    installs = [i for i, (op, a) in enumerate(steps) if op == "RUN" and "pip install" in a]
    assert len(installs) == 3  # torch, the dependencies (lock, then the rest), the project
    for i in installs:
        assert steps[i][1].startswith("--mount=type=cache,target=/root/.cache/pip ")
    # pip reads any PIP_NO_CACHE_DIR value as "no cache": set only after the installs.
    no_cache = [i for i, (op, a) in enumerate(steps) if op == "ENV" and "PIP_NO_CACHE_DIR" in a]
    assert no_cache and min(no_cache) > max(installs)


LOCK_IN_IMAGE = "/opt/rankgate/requirements/dev-lock.txt"
UV_FROM_LOCK = '"uv==$(sed -n \'s/^uv==\\([^ ]*\\).*/\\1/p\' /opt/rankgate/requirements/dev-lock.txt)"'


def pip_installs() -> list[list[str]]:
    """The words of each ``pip install`` the Containerfile's RUN steps make, in order."""
    return [
        part.split("pip install", 1)[1].split()
        for op, args in instructions()
        if op == "RUN"
        for part in args.split("&&")
        if "pip install" in part
    ]


def test_dependencies_come_from_the_lock_before_anything_resolves_them():
    # The image holds what CI tested, installed as the README and .ci/run install it: the
    # lock with its hashes, then what it leaves out (torch's own), then the project.
    copied = [a.split()[-2:] for op, a in instructions() if op == "COPY"]
    assert ["requirements/dev-lock.txt", LOCK_IN_IMAGE] in copied, "the lock is not copied in"
    installs = pip_installs()
    from_lock = [i for i, words in enumerate(installs) if LOCK_IN_IMAGE in words]
    assert from_lock, f"no pip install reads {LOCK_IN_IMAGE}: the image ignores the lock"
    lock = installs[from_lock[0]]
    assert lock[lock.index(LOCK_IN_IMAGE) - 1] == "-r"
    assert {"--no-deps", "--require-hashes"} <= set(lock)
    # Before it only torch (the base image's or the matrix's build, which the lock leaves
    # out) and the installer of the lock, uv at the version the lock pins; every install
    # that resolves dependencies comes after it.
    torch_install, uv_install = installs[: from_lock[0]]
    assert torch_install[-1] == '"$TORCH_SPEC"'
    assert " ".join(uv_install).endswith(f"--no-deps {UV_FROM_LOCK}"), uv_install
    *_, project = installs
    assert "--no-deps" in project and project[-1] == "/opt/rankgate"


def variant_with(torch: str, cuda: str):
    tag = "cu" + cuda.replace(".", "")
    return [
        v
        for v in MATRIX.values()
        if v.torch.startswith(f"torch=={torch}.")
        and f"cuda:{cuda}." in v.base_image
        and v.torch_index_url.endswith(f"/whl/{tag}")
        and v.gpu
    ]


@pytest.mark.parametrize("torch", ["2.9", "2.11"])
@pytest.mark.parametrize("cuda", ["12.8", "13.0"])
def test_matrix_has_each_torch_and_cuda(torch, cuda):
    assert variant_with(torch, cuda), f"no GPU variant with torch {torch} and CUDA {cuda}"


def test_matrix_has_the_cpu_variants():
    cpu, local = MATRIX["cpu"], MATRIX["cpu-local"]
    assert not cpu.gpu and cpu.torch_index_url.endswith("/whl/cpu")
    assert not local.gpu and local.torch.endswith("+cpu") and not local.torch_index_url
    assert local.base_image.startswith("localhost/")
    assert (ROOT / local.local_base).is_file()


def test_test_gpus_default_variant_is_a_gpu_variant():
    assert MATRIX["cu128-torch2.11"].gpu


# --- the container suite must not pass by skipping ---------------------------------------


@pytest.mark.parametrize(
    ("env", "required"),
    [
        ({}, False),
        ({"RANKGATE_REQUIRE_CONTAINER": "1"}, True),
        ({"CI": "true"}, True),
        ({"CI": "false"}, False),
        ({"CI": "0"}, False),
    ],
)
def test_required_under_the_stage_or_ci(monkeypatch, env, required):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("RANKGATE_REQUIRE_CONTAINER", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert container.required() is required


def test_unavailable_names_the_cause_and_the_fix(recorder):
    assert container.unavailable("", "podman not on PATH", "img", "cpu-local") == (
        "needs a container engine: podman not on PATH"
    )
    recorder.inspect = 125
    why = container.unavailable("podman", "", "localhost/rankgate:cpu-local", "cpu-local")
    assert why.startswith("localhost/rankgate:cpu-local is not built")
    assert why.endswith("python -m rankgate.pipeline.container build cpu-local")
    recorder.inspect = 0
    assert container.unavailable("podman", "", "img", "cpu-local") is None


def test_the_container_stage_requires_its_tests():
    (tests,) = [c for c in stages.get("container").commands if c.argv[0] == "pytest"]
    assert dict(tests.env) == {"RANKGATE_REQUIRE_CONTAINER": "1"}


@pytest.mark.parametrize(
    ("env", "outcome"),
    [
        ({}, {"skipped": 5}),
        ({"RANKGATE_REQUIRE_CONTAINER": "1"}, {"errors": 5}),
        ({"CI": "true"}, {"errors": 5}),
    ],
)
def test_container_suite_without_an_engine(pytester, monkeypatch, env, outcome):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("RANKGATE_REQUIRE_CONTAINER", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    no_engine = property(lambda self: ("", "podman not on PATH (apt-get install podman runc)"))
    monkeypatch.setattr(probe.Machine, "container_engine", no_engine)
    pytester.makepyfile(test_suite=SUITE.read_text())
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rsE")
    result.assert_outcomes(**outcome)
    result.stdout.fnmatch_lines(["*needs a container engine: podman not on PATH*"])


def test_test_file_basenames_are_unique():
    """pytest imports test files by basename (no packages): a repeated one fails the
    collection, and with it the image's smoke check."""
    seen: dict[str, Path] = {}
    for path in sorted([*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("suites/**/test_*.py")]):
        assert path.name not in seen, f"{path} and {seen[path.name]} share a basename"
        seen[path.name] = path
