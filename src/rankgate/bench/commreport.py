"""Reporting ``rankgate bench comm`` results: the table, crossovers, reference curves, plots.

The table follows nccl-tests' columns (size, count, type, redop, root, then time,
algbw, busbw, #wrong), with the eager and the CUDA-graph measurements side by side
where nccl-tests puts out-of-place and in-place, and, when an nccl-tests output for
the collective was given, its time and busbw at the same size and our ratio to it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from statistics import median

from rankgate.bench.nccltests import IN_PLACE, parse_sections

_TYPES = {"fp32": "float", "bf16": "bfloat16", "fp16": "half", "int32": "int32"}
_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum"}
_ROOT = {"broadcast": 0, "gather": 0}
SINGLE = ("nccl", "p2p-push", "p2p-oneshot", "p2p-twoshot")
KERNEL_BACKEND = {"nccl": "nccl", "push": "p2p-push", "oneshot": "p2p-oneshot",
                  "twoshot": "p2p-twoshot"}  # fmt: skip
"""The single backend that runs each p2p path (a row's ``path``) on its own."""


def load_references(paths: list[str]) -> dict[str, dict[int, dict]]:
    """{collective: {bytes: nccl-tests row}} from files or folders of nccl-tests output.

    Only eager sections measured on the GPU count (a ``-G`` section is a CUDA graph's
    time, a ``cputime`` one the host's); a row's ``time_us`` is the out-of-place time.
    """
    found: dict[str, dict[int, dict]] = {}
    for entry in paths:
        path = Path(entry)
        if not path.exists():
            print(f"# reference {path} not found; skipped")
            continue
        files = sorted(path.glob("*.txt")) if path.is_dir() else [path]
        for file in files:
            for section in parse_sections(file.read_text(errors="replace")):
                if section["graph"] or section["time_column"] != "time":
                    continue
                rows = {row["bytes"]: dict(row, file=str(file)) for row in section["rows"]}
                found.setdefault(section["collective"], {}).update(rows)
    return found


def crossovers(results: list[dict]) -> dict:
    """For all_reduce, per mode: the fastest single backend at each size, and auto's gap.

    Single backends are nccl and the forced p2p kernels; a forced kernel's row whose
    path is nccl measured NCCL (the payload was beyond the kernel), so it is left out.
    ``auto_ratio`` is auto's time over the fastest single backend's at the same size
    and mode (1.0 = as fast). ``choice_ratio`` judges auto's choice without its own
    timing noise: the time of the single backend running the kernel auto chose, over
    the fastest's (1.0 = auto chose the fastest kernel). ``auto_paired_ratio`` (runs of
    several rounds only): the median over rounds of auto's time over the fastest's in the
    same round; a round times every backend back to back, so the host's drift between
    rounds, which moves both times alike, leaves the ratio.
    """
    table, per_round, chosen = _all_reduce_times(results)
    out: dict = {}
    for mode, by_size in table.items():
        best, ratio, paired, choice, ranges = {}, {}, {}, {}, []
        for size in sorted(by_size):
            times = by_size[size]
            singles = {b: t for b, t in times.items() if b in SINGLE}
            if not singles:
                continue
            name = min(singles, key=singles.get)
            best[size] = name
            if "auto" in times:
                ratio[size] = times["auto"] / singles[name]
            rounds = per_round[mode][size]
            if "auto" in rounds and name in rounds:
                paired[size] = median(a / b for a, b in zip(rounds["auto"], rounds[name]))
            if chosen[mode].get(size) in singles:
                choice[size] = singles[chosen[mode][size]] / singles[name]
            if ranges and ranges[-1]["backend"] == name:
                ranges[-1]["to_bytes"] = size
            else:
                ranges.append({"backend": name, "from_bytes": size, "to_bytes": size})
        out[mode] = {
            "fastest": {str(k): v for k, v in best.items()},
            "ranges": ranges,
            "auto_ratio": {str(k): round(v, 3) for k, v in ratio.items()},
            "auto_worst_1K_1G": _worst_1k_1g(ratio),
            "auto_paired_ratio": {str(k): round(v, 3) for k, v in paired.items()},
            "auto_paired_worst_1K_1G": _worst_1k_1g(paired),
            "choice_ratio": {str(k): round(v, 3) for k, v in choice.items()},
            "choice_worst_1K_1G": _worst_1k_1g(choice),
        }
    return out


def _all_reduce_times(results: list[dict]) -> tuple[dict, dict, dict]:
    """The all_reduce rows read for :func:`crossovers`, per mode and size: each backend's
    time, each backend's per-round times (runs of several rounds), and the single
    backend running the kernel auto chose."""
    table: dict[str, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    per_round: dict[str, dict[int, dict[str, list]]] = defaultdict(lambda: defaultdict(dict))
    chosen: dict[str, dict[int, str]] = defaultdict(dict)
    for r in results:
        if r["collective"] != "all_reduce":
            continue
        if r["backend"] in SINGLE[1:] and r.get("path") == "nccl":
            continue
        for mode in ("eager", "graph"):
            if r[f"{mode}_us"] is not None:
                table[mode][r["bytes"]][r["backend"]] = r[f"{mode}_us"]
            if len(r.get(f"{mode}_rounds_us") or []) > 1:
                per_round[mode][r["bytes"]][r["backend"]] = r[f"{mode}_rounds_us"]
            if r["backend"] == "auto":
                path = r.get("path") if mode == "eager" else r.get("graph_path")
                if path is not None:  # None: not known (a table read back shows no graph path)
                    chosen[mode][r["bytes"]] = KERNEL_BACKEND.get(path or "nccl", "")
    return table, per_round, chosen


def _worst_1k_1g(ratios: dict[int, float]) -> float | None:
    return max((v for k, v in ratios.items() if (1 << 10) <= k <= (1 << 30)), default=None)


def _cell(value, width, fmt):
    return f"{'-':>{width}}" if value is None else f"{value:>{width}{fmt}}"


def table(result: dict, references: dict) -> str:
    """The nccl-tests-style text: a header, one block per (collective, backend), the
    crossovers."""
    meta = result["meta"]
    lines = [
        f"# rankgate bench comm: world {meta['world']}, {meta.get('gpu', 'CPU')}, "
        f"torch {meta['torch']}, NCCL {meta.get('nccl', '-')}",
        f"# iters {meta['options']['iters']}, warmup {meta['options']['warmup']}, "
        f"median of {meta['options']['reps']} repetitions; time averaged over ranks",
    ]
    rounds = meta["options"].get("rounds", 1)
    if rounds > 1:
        lines.append(f"# median over {rounds} rounds")
    live = result.get("nccl_tests")
    if live:
        lines += nccl_tests_header(live)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in result["results"]:
        groups[(r["collective"], r["backend"])].append(r)
    for (collective, backend), rows in groups.items():
        lines += _block(collective, backend, rows, references.get(collective, {}))
    return "\n".join(lines + _crossover_lines(result.get("crossovers") or {}))


def _block(collective: str, backend: str, rows: list[dict], ref: dict) -> list[str]:
    """One (collective, backend) block of the table: its two header lines, then a line
    per size, with the reference and the nccl-tests run beside it when there are some."""
    beside = any("nccl_tests" in r for r in rows)
    lines = [
        "#",
        f"# {collective}  backend {backend}",
        f"#{'size':>11} {'count':>12} {'type':>9} {'redop':>6} {'root':>5}"
        f" {'path':>8} | {'time':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6}"
        f" | {'graph':>9} {'algbw':>7} {'busbw':>7}"
        + (f" | {'ref time':>9} {'ref bus':>7} {'t/ref':>6}" if ref else "")
        + (f" | {'nt time':>9} {'t/nt':>6} {'nt graph':>9} {'g/nt':>6}" if beside else ""),
        f"#{'(B)':>11} {'(elements)':>12} {'':>9} {'':>6} {'':>5} {'':>8}"
        f" | {'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6}"
        f" | {'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7}"
        + (f" | {'(us)':>9} {'(GB/s)':>7} {'':>6}" if ref else "")
        + (f" | {'(us)':>9} {'':>6} {'(us)':>9} {'':>6}" if beside else ""),
    ]
    for r in rows:
        line = (
            f" {r['bytes']:>11} {r['count']:>12} {_TYPES.get(r['dtype'], r['dtype']):>9}"
            f" {_REDOP.get(collective, 'none'):>6} {_ROOT.get(collective, -1):>5}"
            f" {r['path'] or '-':>8} | {_cell(r['eager_us'], 9, '.2f')}"
            f" {_cell(r['eager_algbw'], 7, '.2f')} {_cell(r['eager_busbw'], 7, '.2f')}"
            f" {_cell(r['wrong'], 6, 'd')} | {_cell(r['graph_us'], 9, '.2f')}"
            f" {_cell(r['graph_algbw'], 7, '.2f')} {_cell(r['graph_busbw'], 7, '.2f')}"
        )
        if ref:
            row = ref.get(r["bytes"])
            ratio = r["eager_us"] / row["time_us"] if row and row["time_us"] else None
            line += (
                f" | {_cell(row and row['time_us'], 9, '.2f')}"
                f" {_cell(row and row['busbw'], 7, '.2f')} {_cell(ratio, 6, '.2f')}"
            )
        if beside:
            line += " |" + nccl_tests_cells(r)
        lines.append(line)
    return lines


def _crossover_lines(cross: dict) -> list[str]:
    """The table's last lines: per mode, the fastest single backend's ranges and auto's gap."""
    lines = []
    for mode, info in cross.items():
        if not info["ranges"]:
            continue
        spans = ", ".join(
            f"{c['backend']} {c['from_bytes']}..{c['to_bytes']} B" for c in info["ranges"]
        )
        lines.append(f"# all_reduce fastest single backend ({mode}): {spans}")
        if info["auto_worst_1K_1G"] is not None:
            lines.append(
                f"# auto / fastest ({mode}), worst over 1 KiB..1 GiB: "
                f"{info['auto_worst_1K_1G']:.3f}"
            )
        if info.get("auto_paired_worst_1K_1G") is not None:
            lines.append(
                f"# auto / fastest ({mode}), median over rounds of the ratio within a round, "
                f"worst over 1 KiB..1 GiB: {info['auto_paired_worst_1K_1G']:.3f}"
            )
        if info.get("choice_worst_1K_1G") is not None:
            lines.append(
                f"# auto's choice / fastest ({mode}, single backends' own times), worst over "
                f"1 KiB..1 GiB: {info['choice_worst_1K_1G']:.3f}"
            )
    return lines


def nccl_tests_header(live: dict) -> list[str]:
    """The table's lines on the nccl-tests run beside the bench: where, which column, errors."""
    lines = [
        f"# nccl-tests from {live['dir']}, run by this command after the ranks: 'nt time' and "
        "'nt graph' are its time per call",
        "# (in place for all_reduce and broadcast, out of place otherwise; graph: -G 1), "
        "'t/nt' and 'g/nt' rankgate's time over it",
    ]
    for run in live["runs"]:
        if run["time_column"] != "time":
            lines.append(f"# nccl-tests {run['collective']} {run['mode']}: the "
                         f"{run['time_column']} column (host time, not GPU time)")  # fmt: skip
    lines += [f"# nccl-tests ERROR: {error}" for error in live["errors"]]
    return lines


def nccl_tests_cells(r: dict) -> str:
    """nccl-tests' eager and graph time beside one row, and rankgate's ratio to each."""
    cells = []
    for mode in ("eager", "graph"):
        theirs = (r.get("nccl_tests") or {}).get(mode, {}).get("us")
        ours = r[f"{mode}_us"]
        ratio = ours / theirs if ours is not None and theirs else None
        cells.append(f" {_cell(theirs, 9, '.2f')} {_cell(ratio, 6, '.2f')}")
    return "".join(cells)


def plots(result: dict, references: dict, out: Path) -> list[Path]:
    """One PNG per collective: busbw and time per call against size. Needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("# plots skipped: matplotlib is not installed")
        return []
    series: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in result["results"]:
        for mode in ("eager", "graph"):
            if r[f"{mode}_us"] is not None:
                series[r["collective"]][f"{r['backend']} {mode}"].append(
                    (r["bytes"], r[f"{mode}_busbw"], r[f"{mode}_us"])
                )
    paths = []
    for collective, curves in series.items():
        fig = _figure(plt, collective, curves, result, references.get(collective))
        path = out / f"comm_{collective}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _figure(plt, collective: str, curves: dict, result: dict, ref: dict | None):
    """One collective's figure: each backend's curves, the nccl-tests run beside the bench
    and the reference nccl-tests output, busbw on the left and time on the right."""
    fig, (bw, lat) = plt.subplots(1, 2, figsize=(13, 5))
    for label, points in sorted(curves.items()):
        xs, bus, us = zip(*sorted(points))
        style = "--" if label.endswith("graph") else "-"
        bw.plot(xs, bus, style, marker=".", label=label)
        lat.plot(xs, us, style, marker=".", label=label)
    for run in (result.get("nccl_tests") or {}).get("runs", []):
        if run["collective"] != collective:
            continue
        prefix = "in_place_" if collective in IN_PLACE else ""
        points = sorted((p["bytes"], p[f"{prefix}busbw"], p[f"{prefix}time_us"])
                        for p in run["rows"] if p[f"{prefix}time_us"])  # fmt: skip
        if points:
            xs, bus, us = zip(*points)
            style = "k--" if run["mode"] == "graph" else "k-"
            label = f"nccl-tests {run['mode']} (this run)"
            bw.plot(xs, bus, style, lw=1.5, alpha=0.7, label=label)
            lat.plot(xs, us, style, lw=1.5, alpha=0.7, label=label)
    if ref:
        xs = sorted(ref)
        bw.plot(xs, [ref[x]["busbw"] for x in xs], "k:", lw=2, label="nccl-tests (reference)")
        lat.plot(xs, [ref[x]["time_us"] for x in xs], "k:", lw=2, label="nccl-tests (reference)")
    for ax, ylabel in ((bw, "busbw (GB/s)"), (lat, "time per call (us)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    lat.set_yscale("log")
    bw.legend(fontsize=7)
    meta = result["meta"]
    fig.suptitle(
        f"{collective}: world {meta['world']}, {meta.get('gpu', 'CPU')}, "
        f"torch {meta['torch']}, NCCL {meta.get('nccl', '-')}"
    )
    fig.tight_layout()
    return fig


def parse_table(text: str) -> dict:
    """A ``comm.txt`` read back: ``{"meta", "results"}`` with each row's figures as printed.

    For runs whose JSON was not kept: times and bandwidths carry the table's two
    decimals, ``meta`` holds only what the header and the summary lines say, and
    ``graph_path`` is None (the table does not print it).
    """
    meta: dict = {"parsed_from_table": True}
    head = re.match(r"# rankgate bench comm: world (\d+), (.*?), torch (\S+), NCCL (\S+)", text)
    if head:
        meta.update(world=int(head.group(1)), gpu=head.group(2), torch=head.group(3),
                    nccl=head.group(4))  # fmt: skip
    printed = re.findall(r"# auto's choice / fastest \((\w+),.*?: ([\d.]+)", text)
    meta["printed_choice_worst_1K_1G"] = {mode: float(value) for mode, value in printed}
    rounds = re.search(r"# median over (\d+) rounds", text)
    meta["options"] = {"rounds": int(rounds.group(1)) if rounds else 1}
    types = {v: k for k, v in _TYPES.items()}
    results, collective, backend = [], None, None
    for line in text.splitlines():
        block = re.match(r"# (\w+)  backend (\S+)", line)
        if block:
            collective, backend = block.groups()
            continue
        cells = line.replace("|", " ").split()
        if line.startswith("#") or len(cells) < 13 or not cells[0].isdigit():
            continue

        def num(cell):
            return None if cell == "-" else float(cell)

        results.append({
            "collective": collective, "backend": backend, "bytes": int(cells[0]),
            "count": int(cells[1]), "dtype": types.get(cells[2], cells[2]),
            "path": "" if cells[5] == "-" else cells[5], "graph_path": None,
            "eager_us": num(cells[6]), "eager_algbw": num(cells[7]), "eager_busbw": num(cells[8]),
            "wrong": None if cells[9] == "-" else int(cells[9]),
            "graph_us": num(cells[10]), "graph_algbw": num(cells[11]),
            "graph_busbw": num(cells[12]),
        })  # fmt: skip
    return {"meta": meta, "results": results}
