"""Build and run rankgate images with podman or docker: the container stage's engine side.

``python -m rankgate.pipeline.container build VARIANT`` builds one variant of
containers/matrix.toml and prints its tag as the last line; ``variants`` lists them.
Engine flags for these machines (runc, explicit ulimits) live in :func:`engine_flags`.

Environment: RANKGATE_CONTAINER_ENGINE (podman or docker), RANKGATE_CONTAINER_RUNTIME
(podman's OCI runtime), RANKGATE_WHEELS (wheel folder mounted for pip, overriding the
variant's), RANKGATE_CONTAINER_FRESH=1 (rebuild the base and every layer, as CI does),
RANKGATE_REQUIRE_CONTAINER=1 (the container stage sets it; CI=true does too): the
container tests fail instead of skipping when the engine or the image is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rankgate.pipeline.probe import Machine
from rankgate.proc import command

MATRIX = Path("containers/matrix.toml")
CONTAINERFILE = Path("containers/Containerfile")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
IMAGE = "localhost/rankgate"


@dataclass(frozen=True, kw_only=True, slots=True)
class Variant:
    """One row of containers/matrix.toml."""

    name: str
    base_image: str
    """BASE_IMAGE build argument."""
    torch: str
    """TORCH_SPEC: the pip requirement for torch."""
    torch_index_url: str = ""
    """TORCH_INDEX_URL: the index with that torch build ("" = PyPI and local wheels)."""
    gpu: bool = False
    """Meant for GPUs (test-gpu's default image)."""
    local_base: str = ""
    """Script that builds ``base_image`` here when no registry is reachable."""
    wheels: str = ""
    """Host wheel directory mounted at build time for pip --find-links."""

    @property
    def tag(self) -> str:
        return f"{IMAGE}:{self.name}"


def load_matrix(path: Path = MATRIX) -> dict[str, Variant]:
    """The variants of the matrix file, by name."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    data = tomllib.loads(path.read_text())
    return {name: Variant(name=name, **spec) for name, spec in data["variants"].items()}


def engine_flags(engine: str) -> list[str]:
    """Flags every build and run needs on this machine.

    podman: runc (crun fails on hybrid cgroups; RANKGATE_CONTAINER_RUNTIME overrides)
    and explicit ulimits (the host's are too large for the runtime to set).
    """
    if Path(engine).name != "podman":
        return []
    flags = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
    runtime = os.environ.get("RANKGATE_CONTAINER_RUNTIME") or shutil.which("runc") or ""
    return ["--runtime", runtime, *flags] if runtime else flags


def required() -> bool:
    """Must the container tests run? Under the container stage or in CI they must."""
    if os.environ.get("RANKGATE_REQUIRE_CONTAINER") == "1":
        return True
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def unavailable(engine: str, why: str, image: str, variant: str) -> str | None:
    """Why the container tests cannot run against ``image`` (naming the fix), or None.

    ``engine``/``why``: :attr:`Machine.container_engine`.
    """
    if not engine:
        return f"needs a container engine: {why}"
    if command.capture([engine, "image", "inspect", image])[0] != 0:
        return (
            f"{image} is not built ({engine} image inspect failed): "
            f"python -m rankgate.pipeline.container build {variant}"
        )
    return None


def pick_engine() -> str:
    """The first working engine, or SystemExit with why none works."""
    engine, why = Machine().container_engine
    if not engine:
        raise SystemExit(f"no container engine: {why}")
    return engine


def build(variant: Variant, *, engine: str, fresh: bool = False) -> str:
    """Build ``variant`` from a context holding the repository's files; return its tag.

    ``fresh``: rebuild the local base and every layer (no cache from an earlier run).
    """
    if variant.local_base and (fresh or not _image_exists(engine, variant.base_image)):
        env = {"REBUILD": "1", "CONTAINER_ENGINE": engine}
        command.run(["bash", variant.local_base, variant.base_image], env=env)
    args = [engine, "build", *engine_flags(engine), "-f", str(CONTAINERFILE), "-t", variant.tag]
    if fresh:
        args.append("--no-cache")
    build_args = {
        "BASE_IMAGE": variant.base_image,
        "TORCH_SPEC": variant.torch,
        "TORCH_INDEX_URL": variant.torch_index_url,
    }
    if Path(engine).name == "podman":  # build mounts: docker build has no -v
        wheels = os.environ.get("RANKGATE_WHEELS") or variant.wheels
        if wheels and Path(wheels).is_dir():
            args += ["-v", f"{wheels}:/wheels:ro"]
            build_args["WHEELS"] = "/wheels"
        if CA_BUNDLE.exists():
            args += ["-v", f"{CA_BUNDLE}:/etc/rankgate-ca.crt:ro"]
            build_args["PIP_CERT"] = "/etc/rankgate-ca.crt"
    for key, value in build_args.items():
        args += ["--build-arg", f"{key}={value}"]
    with tempfile.TemporaryDirectory(prefix="rankgate-context-") as context:
        _fill_context(Path(context))
        command.run([*args, context])
    return variant.tag


def run_args(engine: str, image: str, argv: list[str], *, mounts: dict[str, str]) -> list[str]:
    """The command line that runs ``argv`` in ``image``.

    No network; room for torch's shared memory; an init process as PID 1, so rank
    processes the harness kills are reaped (pytest as PID 1 would leave zombies).
    """
    volumes = [arg for host, inside in mounts.items() for arg in ("-v", f"{host}:{inside}")]
    return [
        engine,
        "run",
        "--rm",
        "--init",
        *engine_flags(engine),
        "--network",
        "none",
        "--shm-size",
        "1g",
        *volumes,
        image,
        *argv,
    ]


def _fill_context(context: Path) -> None:
    """Copy the repository's tracked and unignored files (no .git, out/, caches)."""
    argv = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    done = command.finish(argv, binary=True)
    if done.returncode != 0:
        raise command.CommandFailed(argv, done.returncode, stderr=done.stderr.decode())
    listed = done.stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = Path(name)
        if source.is_file():
            target = context / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def _image_exists(engine: str, image: str) -> bool:
    return command.capture([engine, "image", "inspect", image])[0] == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rankgate.pipeline.container")
    sub = parser.add_subparsers(dest="action", required=True)
    build_parser = sub.add_parser("build", help="build one variant; prints its tag last")
    build_parser.add_argument("variant")
    sub.add_parser("variants", help="list the matrix")
    args = parser.parse_args(argv)
    matrix = load_matrix()
    if args.action == "variants":
        for variant in matrix.values():
            print(f"{variant.name:<18} {variant.torch:<20} {variant.base_image}")
        return 0
    if args.variant not in matrix:
        raise SystemExit(f"unknown variant {args.variant!r}; the matrix has: {', '.join(matrix)}")
    try:
        fresh = os.environ.get("RANKGATE_CONTAINER_FRESH") == "1"
        tag = build(matrix[args.variant], engine=pick_engine(), fresh=fresh)
    except command.CommandFailed as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return exc.returncode or 1
    print(tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
