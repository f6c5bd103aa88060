"""``rankgate env-check``: what this machine offers a distributed PyTorch job.

:func:`collect` returns a JSON-ready dict (``--json`` prints it); :func:`write_table`
prints it for people, with rich when it is importable and as plain text otherwise.
Nothing here raises on a missing tool, a missing GPU or even a missing torch: what is
absent is reported absent, a probe that fails records its error, and the command
always exits 0.

Keys of :func:`collect`'s dict (``schema`` names this layout)::

    schema       "rankgate.env-check/1"
    rankgate     rankgate's version
    python       {version, implementation, executable}
    platform     {system, release, machine, hostname}
    torch        {version, cuda_build, hip_build, cudnn, error}   (error: why no torch)
    cuda         {available, device_count, nccl, error}
    backends     {gloo, nccl, mpi, ucc: bool}   (torch.distributed.is_*_available)
    gpus         [{index, name, memory_bytes, capability, multiprocessors}]
    peer_access  n-by-n matrix: [i][j] = GPU i can access GPU j's memory; null on the diagonal
    launchers    {torchrun, srun, mpirun, ray: TOOL}
    containers   {podman, docker, apptainer, singularity, enroot: TOOL}
    environment  {name: value} of the variables below that are set

    TOOL = {found, path, version, error}: found on PATH; version where it is cheap to
    ask; error when asking failed (the tool is still reported found).
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from rankgate import __version__
from rankgate.proc.command import CommandFailed, finish

SCHEMA = "rankgate.env-check/1"

# name -> how to learn its version: arguments to run it with, or None for a tool whose
# version costs too much to ask (torchrun imports torch: ~2 s).
LAUNCHERS: dict[str, tuple[str, ...] | None] = {
    "torchrun": None,
    "srun": ("--version",),
    "mpirun": ("--version",),
    "ray": None,  # `ray --version` imports ray; the installed package's metadata is read instead
}
CONTAINER_ENGINES: dict[str, tuple[str, ...] | None] = {
    "podman": ("--version",),
    "docker": ("--version",),
    "apptainer": ("--version",),
    "singularity": ("--version",),
    "enroot": ("version",),
}
ENVIRONMENT = (
    "CUDA_VISIBLE_DEVICES",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NCCL_SOCKET_IFNAME",
)
PROBE_TIMEOUT_S = 5.0
"""How long one ``TOOL --version`` may take before it is reported as timed out."""

_VERSION = re.compile(r"\d+(?:\.\d+)+[\w.+-]*")
BACKENDS = ("gloo", "nccl", "mpi", "ucc")


def collect(path: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Probe the machine. ``path`` replaces $PATH for finding tools (tests use it)."""
    return {
        "schema": SCHEMA,
        "rankgate": __version__,
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "platform": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "hostname": platform.node(),
        },
        **torch_and_gpus(),
        "launchers": launchers(path, timeout),
        "containers": {n: _tool(n, a, path, timeout) for n, a in CONTAINER_ENGINES.items()},
        "environment": {k: os.environ[k] for k in ENVIRONMENT if k in os.environ},
    }


def torch_and_gpus() -> dict[str, Any]:
    """``torch``, ``cuda``, ``backends``, ``gpus`` and ``peer_access``, as in
    :func:`collect` (this imports torch)."""
    torch_info, torch = _torch_info()
    cuda = _cuda_info(torch)
    gpus, peer = _gpus(torch, cuda["device_count"])
    return {
        "torch": torch_info,
        "cuda": cuda,
        "backends": _backends(torch),
        "gpus": gpus,
        "peer_access": peer,
    }


def launchers(path: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """The launchers on PATH (``path`` replaces it), as ``collect()["launchers"]``."""
    return {n: _tool(n, a, path, timeout) for n, a in LAUNCHERS.items()}


def torch_build() -> dict[str, Any] | None:
    """The installed torch's ``version``, ``cuda_build`` and ``hip_build``, read from its
    version.py without importing torch (its libraries take seconds to load); None where
    torch is not installed or the file does not say."""
    try:
        spec = importlib.util.find_spec("torch")  # finds the package; runs none of it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        source = Path(next(iter(spec.submodule_search_locations)), "version.py").read_text()
        tree = ast.parse(source)
    except (OSError, SyntaxError, StopIteration):
        return None
    values: dict[str, Any] = {}
    for node in tree.body:  # literal assignments only: nothing of the file is run
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            values[target.id] = value.value
    if not isinstance(values.get("__version__"), str):
        return None
    return {
        "version": values["__version__"],
        "cuda_build": values.get("cuda"),
        "hip_build": values.get("hip"),
    }


# --------------------------------------------------------------------------- probes


def _guard(probe: Callable[[], Any], default: Any = None) -> tuple[Any, str | None]:
    """(value, None), or (default, "Type: message") when the probe raised."""
    try:
        return probe(), None
    except Exception as exc:
        return default, f"{type(exc).__name__}: {exc}"


def _torch_info() -> tuple[dict[str, Any], Any]:
    try:
        import torch
    except Exception as exc:  # not installed, or a broken install (missing libraries)
        error = f"{type(exc).__name__}: {exc}"
        info = {"version": None, "cuda_build": None, "hip_build": None, "cudnn": None}
        return {**info, "error": error}, None
    cudnn, _ = _guard(lambda: torch.backends.cudnn.version())
    return {
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "hip_build": getattr(torch.version, "hip", None),
        "cudnn": cudnn,
        "error": None,
    }, torch


def _cuda_info(torch: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"available": False, "device_count": 0, "nccl": None, "error": None}
    if torch is None:
        return info
    available, error = _guard(torch.cuda.is_available, False)
    count, count_error = _guard(torch.cuda.device_count, 0) if available else (0, None)
    info.update(available=bool(available), device_count=int(count), error=error or count_error)
    if available:
        nccl, _ = _guard(torch.cuda.nccl.version)
        if nccl is not None:
            info["nccl"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
    return info


def _backends(torch: Any) -> dict[str, bool]:
    if torch is None:
        return dict.fromkeys(BACKENDS, False)
    dist = torch.distributed
    if not _guard(dist.is_available, False)[0]:
        return dict.fromkeys(BACKENDS, False)
    out = {}
    for name in BACKENDS:
        probe = getattr(dist, f"is_{name}_available", None)
        out[name] = bool(probe is not None and _guard(probe, False)[0])
    return out


def _gpus(torch: Any, count: int) -> tuple[list[dict[str, Any]], list[list[bool | None]]]:
    gpus = []
    for i in range(count):
        props, error = _guard(lambda i=i: torch.cuda.get_device_properties(i))
        if props is None:
            gpus.append({"index": i, "error": error})
            continue
        gpus.append(
            {
                "index": i,
                "name": props.name,
                "memory_bytes": int(props.total_memory),
                "capability": f"{props.major}.{props.minor}",
                "multiprocessors": getattr(props, "multi_processor_count", None),
            }
        )
    peer = [
        [None if i == j else _guard(lambda i=i, j=j: torch.cuda.can_device_access_peer(i, j))[0]
         for j in range(count)]
        for i in range(count)
    ]
    return gpus, peer


def _tool(
    name: str, version_args: tuple[str, ...] | None, path: str | None, timeout: float
) -> dict[str, Any]:
    exe = shutil.which(name, path=path)
    entry: dict[str, Any] = {"found": exe is not None, "path": exe, "version": None, "error": None}
    if exe is None:
        return entry
    if version_args is None:
        if name == "ray":
            entry["version"] = _guard(lambda: importlib.metadata.version("ray"))[0]
        return entry
    output, entry["error"] = _run_quietly([exe, *version_args], timeout)
    if output is not None:
        first = output.strip().splitlines()[0] if output.strip() else ""
        match = _VERSION.search(first)
        entry["version"] = match.group(0) if match else (first[:80] or None)
    return entry


def _run_quietly(cmd: list[str], timeout: float) -> tuple[str | None, str | None]:
    """(stdout, None) on success, else (None, why). Never raises; kills the whole tree."""
    try:
        done = finish(cmd, timeout=timeout)
    except CommandFailed as exc:
        return None, exc.reason
    if done.timed_out:
        return None, f"'{' '.join(cmd)}' timed out after {timeout:g} s"
    out, err = done.stdout, done.stderr
    if done.returncode != 0:
        lines = [line for line in (err or out).splitlines() if line.strip()]
        last = lines[-1].strip() if lines else "no output"
        return None, f"exit {done.returncode}: {last}"
    return out or err, None


# --------------------------------------------------------------------------- output


def rows(info: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(section, item, value) rows of the human table."""
    t, c, b = info["torch"], info["cuda"], info["backends"]
    py = info["python"]
    out = [
        ("system", "python", f"{py['version']} ({py['implementation']}) {py['executable']}"),
        ("system", "platform", " ".join(info["platform"][k] for k in ("system", "release",
                                                                     "machine", "hostname"))),
        ("system", "rankgate", info["rankgate"]),
        ("torch", "torch", t["version"] or f"not importable ({t['error']})"),
        ("torch", "CUDA build", t["cuda_build"] or ("none (ROCm build)" if t["hip_build"]
                                                     else "none (CPU build)")),
        ("torch", "cuDNN", _cudnn_text(t["cudnn"])),
        ("torch", "CUDA available", _cuda_text(c)),
        ("torch", "NCCL", c["nccl"] or "none"),
        ("torch", "backends", "  ".join(f"{k} {'yes' if v else 'no'}" for k, v in b.items())),
    ]
    for gpu in info["gpus"]:
        if "error" in gpu:
            value = f"unreadable ({gpu['error']})"
        else:
            gib = gpu["memory_bytes"] / 2**30
            value = f"{gpu['name']}, {gib:.1f} GiB, compute capability {gpu['capability']}"
        out.append(("GPUs", f"GPU {gpu['index']}", value))
    if not info["gpus"]:
        out.append(("GPUs", "count", "0 (none visible)"))
    for i, row in enumerate(info["peer_access"]):
        cells = ["-" if v is None and i == j else {True: "yes", False: "no"}.get(v, "?")
                 for j, v in enumerate(row)]
        out.append(("GPUs", f"peer access {i}->", " ".join(f"{j}:{v}" for j, v in
                                                         enumerate(cells))))
    for section in ("launchers", "containers"):
        for name, tool in info[section].items():
            out.append((section, name, _tool_text(tool)))
    for name, value in info["environment"].items():
        out.append(("environment", name, value))
    return out


def _cudnn_text(version: int | None) -> str:
    if not version:
        return "none"
    # cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 major*1000 + minor*100 + patch.
    major, rest = divmod(version, 10000 if version >= 10000 else 1000)
    return f"{major}.{rest // 100}.{rest % 100} ({version})"


def _cuda_text(cuda: dict[str, Any]) -> str:
    if cuda["error"]:
        return f"no ({cuda['error']})"
    if not cuda["available"]:
        return "no (0 GPUs)"
    return f"yes ({cuda['device_count']} GPU{'s' if cuda['device_count'] != 1 else ''})"


def _tool_text(tool: dict[str, Any]) -> str:
    if not tool["found"]:
        return "not found"
    version = tool["version"] or ("version unknown" if tool["error"] else "version not probed")
    text = f"{version}  {tool['path']}"
    return f"{text}  ({tool['error']})" if tool["error"] else text


def write_table(info: dict[str, Any], file: IO[str], use_rich: bool | None = None) -> None:
    """Print the human table; ``use_rich=None`` uses rich when it is importable."""
    table_rows = rows(info)
    if use_rich is not False:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            if use_rich:
                raise
        else:
            table = Table(title="rankgate env-check", show_lines=False)
            table.add_column("section", no_wrap=True)
            table.add_column("item", no_wrap=True)
            table.add_column("value", overflow="fold")
            previous = None
            for section, item, value in table_rows:
                if previous is not None and section != previous:
                    table.add_section()
                table.add_row(section if section != previous else "", item, value)
                previous = section
            Console(file=file).print(table)
            return
    width = max(len(item) for _, item, _ in table_rows)
    previous = None
    for section, item, value in table_rows:
        if section != previous:
            file.write(f"{section}\n")
            previous = section
        file.write(f"  {item:<{width}}  {value}\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    info = collect()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        write_table(info, sys.stdout)
    return 0
