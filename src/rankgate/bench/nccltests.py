"""``rankgate bench comm --nccl-tests DIR``: the user's nccl-tests binaries, run beside the bench.

Once the benchmark's ranks are done (the GPUs free again, same machine, same command),
for each collective measured: ``DIR/<collective>_perf`` (``sendrecv_perf`` for
send_recv) with the run's sizes, dtype, iterations and warm-up, one process driving all
``world`` GPUs (``-g``), eagerly (``-G 0``) and, where the run times CUDA graphs, captured
in one (``-G 1``, sizes up to ``--graph-max-bytes``). Both time columns of every row are
kept (out of place, in place); beside each backend's figure goes the one that matches
rankgate's call: in place for all_reduce and broadcast, out of place for the others.

A binary that is missing, fails, times out or prints no rows is an error of its own,
named in the results (``nccl_tests.errors``) and the table; the rest of the bench is
written as usual and the command exits 1.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from rankgate.proc.command import CommandFailed, output

BINARIES = {
    "all_reduce": "all_reduce_perf",
    "all_gather": "all_gather_perf",
    "reduce_scatter": "reduce_scatter_perf",
    "broadcast": "broadcast_perf",
    "send_recv": "sendrecv_perf",
    "gather": "gather_perf",
}
COLLECTIVES = {binary: name for name, binary in BINARIES.items()}
IN_PLACE = ("all_reduce", "broadcast")
"""Collectives rankgate runs in place (its figure is compared with nccl-tests' in-place time)."""
DTYPES = {"fp32": "float", "bf16": "bfloat16", "fp16": "half", "int32": "int32"}
TIMEOUT_S = 1800.0
"""One binary's limit (a 2 GiB sweep of all_reduce takes about a minute on 2 x H200)."""

Runner = Callable[[list[str]], str]
"""Runs a command and returns its stdout; raises CommandFailed (``command.output``)."""


def command(binary: Path, opts, *, graph: bool) -> list[str]:
    """nccl-tests' command line for the run ``opts`` (a CommOptions), eager or in a graph."""
    sizes = opts.sizes if not graph else [s for s in opts.sizes if s <= opts.graph_max]
    factor = sizes[1] // sizes[0] if len(sizes) > 1 else 2
    return [
        str(binary), "-b", str(sizes[0]), "-e", str(sizes[-1]), "-f", str(factor),
        "-g", str(opts.world), "-d", DTYPES[opts.dtype], "-n", str(opts.iters),
        "-w", str(opts.warmup), "-G", "1" if graph else "0", "-c", "1",
    ]  # fmt: skip


def parse_sections(text: str) -> list[dict]:
    """Every test section of an nccl-tests output, in order.

    Each: ``collective`` (rankgate's name), ``graph`` (the header's ``graph:`` flag),
    ``time_column`` (``time``, or ``cputime`` under ``-C 1``: host time, not GPU time)
    and ``rows``: bytes, count, type, redop, root, then out-of-place ``time_us``,
    ``algbw``, ``busbw``, ``wrong`` and in-place ``in_place_time_us``, ``in_place_algbw``,
    ``in_place_busbw``, ``in_place_wrong`` (None where nccl-tests printed N/A).
    """
    sections: list[dict] = []
    current: dict | None = None
    for line in text.splitlines():
        start = re.search(r"Collective test starting: (\w+)", line)
        if start:
            name = start.group(1)
            current = {"collective": COLLECTIVES.get(name, name), "graph": False,
                       "time_column": "time", "rows": []}  # fmt: skip
            sections.append(current)
            continue
        if current is None:
            continue
        flag = re.search(r"\bgraph: (\d+)", line)
        if flag:
            current["graph"] = int(flag.group(1)) > 0
        if re.match(r"#\s+size\s+count", line):
            current["time_column"] = "cputime" if "cputime" in line else "time"
        row = _row(line)
        if row is not None:
            current["rows"].append(row)
    return sections


def _row(line: str) -> dict | None:
    parts = line.split()
    if len(parts) < 9 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    row = {"bytes": int(parts[0]), "count": int(parts[1]), "type": parts[2],
           "redop": parts[3], "root": _number(parts[4], int)}  # fmt: skip
    for prefix, cells in (("", parts[5:9]), ("in_place_", parts[9:13])):
        cells = cells + ["N/A"] * (4 - len(cells))
        row[f"{prefix}time_us"] = _number(cells[0], float)
        row[f"{prefix}algbw"] = _number(cells[1], float)
        row[f"{prefix}busbw"] = _number(cells[2], float)
        row[f"{prefix}wrong"] = _number(cells[3], int)
    return row if row["time_us"] is not None else None


def _number(text: str, kind):
    try:
        return kind(text)
    except ValueError:
        return None


def run_all(folder: str | Path, opts, runner: Runner | None = None) -> dict:
    """Run the binaries for ``opts``' collectives, eager and (where timed) in a graph.

    Returns ``{"dir", "runs": [{collective, mode, command, started, finished,
    time_column, rows}], "errors": [one line each]}``; never raises for a binary.
    """
    runner = runner or (lambda argv: output(argv, timeout=TIMEOUT_S))
    folder = Path(folder)
    modes = [("eager", False)] + ([("graph", True)] if opts.graph_max else [])
    found: dict = {"dir": str(folder), "runs": [], "errors": []}
    for collective in opts.collectives:
        binary = folder / BINARIES[collective]
        if not binary.is_file():
            found["errors"].append(f"{collective}: {binary} not found (build nccl-tests there)")
            continue
        for mode, graph in modes:
            if graph and not any(s <= opts.graph_max for s in opts.sizes):
                continue
            argv = command(binary, opts, graph=graph)
            started = time.time()
            try:
                text = runner(argv)
            except CommandFailed as exc:
                found["errors"].append(f"{collective} {mode}: {exc}")
                continue
            sections = [s for s in parse_sections(text) if s["rows"]]
            if not sections:
                found["errors"].append(
                    f"{collective} {mode}: {binary.name} printed no result rows"
                )
                continue
            found["runs"].append({
                "collective": collective, "mode": mode, "command": argv,
                "started": started, "finished": time.time(),
                "time_column": sections[-1]["time_column"], "rows": sections[-1]["rows"],
            })  # fmt: skip
    return found


def attach(results: list[dict], found: dict) -> None:
    """Put nccl-tests' time beside each result row of the same collective and size.

    ``row["nccl_tests"] = {"eager": {...}, "graph": {...}}``: per mode, both time
    columns, the busbw of the matching one, and ``us``, the matching time itself.
    """
    by_key = {(run["collective"], run["mode"], r["bytes"]): r
              for run in found["runs"] for r in run["rows"]}  # fmt: skip
    for result in results:
        entry = {}
        for mode in ("eager", "graph"):
            ref = by_key.get((result["collective"], mode, result["bytes"]))
            if ref is None:
                continue
            prefix = "in_place_" if result["collective"] in IN_PLACE else ""
            entry[mode] = {
                "us": ref[f"{prefix}time_us"],
                "busbw": ref[f"{prefix}busbw"],
                "out_of_place_us": ref["time_us"],
                "in_place_us": ref["in_place_time_us"],
                "placement": "in place" if prefix else "out of place",
            }
        if entry:
            result["nccl_tests"] = entry
