"""What a run was: the machine, the commit, the command, the stages it meant to run.

The executor calls :func:`begin` when a gate or a stage starts and
:func:`stage_started` before each stage runs; together they let a report tell a
finished run from one that was interrupted:

- ``out/run.json`` (:data:`RUN_FORMAT`): when it started, the command, the commit, the
  machine (:func:`describe_machine`) and the stages it planned;
- ``out/stages/<name>.json`` reads ``"status": "running"`` until the stage's outcome
  replaces it. A marker still there means the stage was interrupted; a planned stage
  without a file never ran.

A stage's earlier products (its JUnit, its benchmark files) are removed when it starts,
so a report never shows an earlier run's results as this run's.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import shlex
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path

from rankgate import __version__
from rankgate.proc.command import CommandFailed, finish

RUN_FORMAT = "rankgate.run/1"
RUNNING = "running"
"""The status a stage's file has while it runs."""
_TOPOLOGY_LINK = re.compile(r"^(NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")


def begin(
    out_dir: Path, planned: list[str], argv: list[str] | None = None, *, gate: bool = False
) -> Path:
    """Start a run: write run.json, and drop what an earlier run left of the planned stages
    (their outcomes; a gate's, its table): a stage this run never reaches reads "never
    ran", not the last run's verdict."""
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = command_line() if argv is None else list(argv)
    doc = {
        "format": RUN_FORMAT,
        "started": now(),
        "command": shlex.join(argv),
        "cwd": os.getcwd(),
        "commit": git_commit(),
        "planned": planned,
        "machine": describe_machine(),
    }
    path = out_dir / "run.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    for name in planned:
        (out_dir / "stages" / f"{name}.json").unlink(missing_ok=True)
    if gate:
        (out_dir / "gate.json").unlink(missing_ok=True)
    return path


def stage_started(out_dir: Path, stage: str, products: tuple[str, ...] = ()) -> None:
    """Mark ``stage`` running and remove what its last run left (its products)."""
    for product in products:
        (out_dir / product).unlink(missing_ok=True)
    marker = {"stage": stage, "status": RUNNING, "started": now()}
    write_stage_file(out_dir, stage, marker)


def write_stage_file(out_dir: Path, stage: str, doc: dict) -> None:
    """``stages/<stage>.json``, replaced whole: the gate's background stages refresh the
    report (which reads every stage's file) while another stage writes its own."""
    folder = out_dir / "stages"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stage}.json"
    part = folder / f"{stage}.json.{os.getpid()}.{threading.get_native_id()}"
    part.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(part, path)


def command_line() -> list[str]:
    """The command that started this process, as a user typed it (programs by name)."""
    orig = list(getattr(sys, "orig_argv", []))
    if len(orig) > 2 and orig[1] == "-m":  # python -m rankgate.cli ...
        return ["python", *orig[1:]]
    if len(orig) > 2 and orig[1] == "-c":
        return ["python", "-c", "…"]
    argv = list(sys.argv)
    if argv:
        argv[0] = Path(argv[0]).name  # nox, rankgate: not the virtualenv's full path
    return argv


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def git_commit(cwd: Path | None = None) -> str:
    """``HEAD``'s hash, with ``+dirty`` when the tree has changes; "" outside git."""
    try:
        head = finish(["git", "rev-parse", "HEAD"], cwd=cwd, timeout=10)
        if head.returncode != 0:
            return ""
        dirty = finish(["git", "status", "--porcelain", "--untracked-files=no"],
                       cwd=cwd, timeout=30)  # fmt: skip
    except CommandFailed:
        return ""
    if dirty.timed_out:
        return ""
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


@functools.cache
def describe_machine() -> dict:
    """Host, Python, torch, CUDA, NCCL, GPUs, driver and GPU topology (once per process)."""
    from rankgate import envcheck

    build = envcheck.torch_build()
    if build is not None and not build["cuda_build"] and not build["hip_build"]:
        # A CPU-only torch sees no GPU: importing it would take seconds (each `nox -s`
        # paid them before its pytest started) and tell nothing more.
        torch, cuda_build, nccl, gpus = build["version"], None, None, []
    else:
        found = envcheck.torch_and_gpus()
        about = found["torch"]
        torch = about["version"] or f"not importable ({about['error']})"
        cuda_build, nccl, gpus = about["cuda_build"], found["cuda"]["nccl"], found["gpus"]
    launchers = envcheck.launchers()
    driver, topology = _nvidia_smi()
    return {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "rankgate": __version__,
        "torch": torch,
        "cuda": cuda_build,
        "nccl": nccl,
        "driver": driver,
        "gpus": [g.get("name", "?") for g in gpus],
        "gpu_memory_gib": [round(g.get("memory_bytes", 0) / 2**30, 1) for g in gpus],
        "topology": topology,
        "launchers": {n: t.get("version") or "found" for n, t in launchers.items() if t["found"]},
    }


def gpu_summary(machine: dict) -> str:
    """``2 x NVIDIA H200 (139.8 GiB)``, or ``none``."""
    gpus = machine.get("gpus") or []
    if not gpus:
        return "none"
    names = list(dict.fromkeys(gpus))
    memory = machine.get("gpu_memory_gib") or []
    size = f" ({memory[0]} GiB)" if memory and len(names) == 1 else ""
    return ", ".join(f"{gpus.count(n)} x {n}" for n in names) + size


def _nvidia_smi() -> tuple[str | None, str | None]:
    """(driver version, topology summary) from nvidia-smi; (None, None) without it."""
    try:
        query = finish(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                       timeout=20)  # fmt: skip
        topo = finish(["nvidia-smi", "topo", "-m"], timeout=20)
    except CommandFailed:
        return None, None
    if query.timed_out or topo.timed_out:
        return None, None
    lines = query.stdout.strip().splitlines() if query.returncode == 0 else []
    driver = lines[0].strip() if lines else None
    return driver, summarize_topology(topo.stdout) if topo.returncode == 0 else None


def summarize_topology(matrix: str) -> str | None:
    """One line from ``nvidia-smi topo -m``: how each pair of GPUs is connected.

    ``NV18 between every pair of 4 GPUs``, or the pairs by link
    (``NV18: GPU0-GPU1; SYS: GPU0-GPU2 ...``) when they differ.
    """
    rows = [line.split() for line in matrix.splitlines()]
    gpu = re.compile(r"GPU\d+")
    # A GPU's row starts with its name and holds an X (itself); the header has no X.
    gpu_rows = [r for r in rows if r and gpu.fullmatch(r[0]) and "X" in r]
    if len(gpu_rows) < 2:
        return "one GPU" if gpu_rows else None
    n = len(gpu_rows)
    links: dict[str, list[str]] = {}
    for i, row in enumerate(gpu_rows):
        for j in range(i + 1, n):
            cell = row[1 + j] if len(row) > 1 + j else "?"
            if not _TOPOLOGY_LINK.match(cell):
                cell = "?"
            links.setdefault(cell, []).append(f"GPU{i}-GPU{j}")
    if len(links) == 1:
        (link,) = links
        return f"{link} between every pair of {n} GPUs"
    return "; ".join(f"{link}: {', '.join(pairs)}" for link, pairs in sorted(links.items()))
