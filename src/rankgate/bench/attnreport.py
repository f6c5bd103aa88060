"""Reporting ``rankgate bench attention``: per-rank rows combined, the table, the plots."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

GIB = 2**30


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys against xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def _per_rank(rows: list[dict], key: str, scale: float = 1.0) -> list | None:
    values = [r.get(key) for r in sorted(rows, key=lambda r: r["rank"])]
    return None if any(v is None for v in values) else [v * scale for v in values]


def combine(rows: list[dict], opts: dict) -> dict:
    """One result per (method, world, seq) from every rank's rows; fits per (method, world)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    fits: dict[tuple, list[dict]] = defaultdict(list)
    results = []
    for r in rows:
        if r.get("fit"):
            fits[(r["method"], r["world"])].append(r)
        elif r.get("skipped"):
            results.append({k: r[k] for k in ("method", "world", "seq", "skipped")})
        else:
            groups[(r["method"], r["world"], r["seq"])].append(r)
    timed = {}
    for (method, world, seq), rs in groups.items():
        out = {"method": method, "world": world, "seq": seq}
        errors = [r["error"] for r in rs if r.get("error")]
        if errors:
            out["error"] = errors[0]
            results.append(out)
            continue
        reps = list(zip(*(r["rep_s"] for r in rs)))  # per repetition, every rank
        slowest = [max(rep) for rep in reps]
        time_s = statistics.median(slowest)
        out |= {
            "time_ms": time_s * 1e3,
            "rep_ms": [t * 1e3 for t in slowest],
            "iters": rs[0]["iters"],
            "tokens_per_s": opts["batch"] * seq / time_s,
            "peak_gib": max(r["peak_bytes"] for r in rs) / GIB if rs[0].get("peak_bytes") else None,
            "peak_gib_per_rank": _per_rank(rs, "peak_bytes", 1 / GIB),
            "time_ms_per_rank": [
                statistics.median(r["rep_s"]) * 1e3 for r in sorted(rs, key=lambda r: r["rank"])
            ],
            "comm_kernel_ms_per_rank": _per_rank(rs, "comm_kernel_s", 1e3),
            "compute_kernel_ms_per_rank": _per_rank(rs, "compute_kernel_s", 1e3),
            "exposed_comm_ms_per_rank": _per_rank(rs, "exposed_comm_s", 1e3),
            "sent_mib_per_rank": _per_rank(rs, "bytes_sent", 1 / 2**20),
            "note": rs[0].get("note", ""),
        }
        timed[(method, world, seq)] = time_s
        results.append(out)
    for out in results:
        base = timed.get(("single", 1, out["seq"]))
        mine = timed.get((out["method"], out["world"], out["seq"]))
        if base and mine:
            out["speedup"] = base / mine
            out["efficiency"] = base / mine / out["world"]
    order = {m: i for i, m in enumerate(("single", "ring", "torch-cp"))}
    results.sort(key=lambda r: (r["world"], order.get(r["method"], 9), r["seq"] or 0))
    return {"results": results, "fit": [_fit(rs) for rs in fits.values()]}


def _fit(rs: list[dict]) -> dict:
    first = min(rs, key=lambda r: r["rank"])
    out = {k: first[k] for k in ("method", "world", "cap_bytes", "device_bytes",
                                 "intercept_bytes", "bytes_per_token", "projected_seq_cap",
                                 "projected_seq_device")}  # fmt: skip
    checks = []
    for i, check in enumerate(first["checks"]):
        every = [r["checks"][i] for r in rs]
        peaks = [c["peak_bytes"] for c in every if c.get("peak_bytes")]
        checks.append({"probe": check["probe"], "seq": check["seq"],
                       "ran": all(c["ran"] for c in every),
                       "peak_gib": max(peaks) / GIB if peaks else None,
                       "error": next((c["error"] for c in every if c["error"]), "")})  # fmt: skip
    out["checks"] = checks
    return out


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def _ranks(values, spec: str) -> str:
    return "-" if not values else "/".join(format(v, spec) for v in values)


def table(result: dict) -> str:
    meta = result["meta"]
    o = meta["options"]
    lines = [
        f"# rankgate bench attention  {meta.get('gpu', meta['device'])}  torch {meta['torch']}"
        f"  nccl {meta.get('nccl', '-')}  {meta['time']}",
        f"# {'causal' if o['causal'] else 'full'} attention, fwd+bwd, {o['dtype']}, batch "
        f"{o['batch']}, heads {o['heads']}/{o['kv_heads']} (q/kv), head_dim {o['head_dim']}; "
        f"ring head chunks {meta.get('ring_head_chunks', o['head_chunks'])}, ring kernel "
        f"{meta.get('ring_kernel', 'math')}",
        "# time: median over repetitions of the slowest rank; speedup over `single` at the "
        "same length; comm: NCCL kernel time (profiler) and exposed wait (CUDA events), per rank",
        f"{'method':>9} {'world':>5} {'seq':>8} {'ms/iter':>10} {'tokens/s':>11} {'speedup':>7} "
        f"{'effic':>6} {'peak GiB/GPU':>13} {'nccl ms/rank':>15} {'exposed ms/rank':>16}",
    ]
    for r in result["results"]:
        head = f"{r['method']:>9} {r['world']:>5} {_fmt(r['seq'], 'd'):>8}"
        if r.get("skipped"):
            lines.append(f"{head}  skipped: {r['skipped']}")
            continue
        if r.get("error"):
            lines.append(f"{head}  ERROR {r['error']}")
            continue
        lines.append(
            f"{head} {r['time_ms']:>10.2f} {r['tokens_per_s']:>11.4g} "
            f"{_fmt(r.get('speedup'), '.3f'):>7} {_fmt(r.get('efficiency'), '.1%'):>6} "
            f"{_ranks(r['peak_gib_per_rank'], '.2f'):>13} "
            f"{_ranks(r['comm_kernel_ms_per_rank'], '.2f'):>15} "
            f"{_ranks(r['exposed_comm_ms_per_rank'], '.2f'):>16}"
            + (f"  ({r['note']})" if r.get("note") else "")
        )
    if result.get("fit"):
        lines.append("# longest sequence that fits: peak memory fitted as a + b*seq over the two "
                     "longest timed lengths (fullest rank); checked under the cap")  # fmt: skip
        for f in result["fit"]:
            checks = "; ".join(
                f"{c['probe']} {c['seq']}: {'ran' if c['ran'] else 'did not fit'}"
                + (f" (peak {c['peak_gib']:.2f} GiB)" if c.get("peak_gib") else "")
                for c in f["checks"]
            )
            lines.append(
                f"{f['method']:>9} {f['world']:>5}  {f['bytes_per_token'] / 1024:.1f} KiB/token/GPU"
                f" + {f['intercept_bytes'] / GIB:.2f} GiB; fits {f['projected_seq_cap']} tokens in "
                f"{f['cap_bytes'] / GIB:.0f} GiB, {f['projected_seq_device']} in the whole GPU "
                f"({f['device_bytes'] / GIB:.0f} GiB); {checks}"
            )
    return "\n".join(lines)


def plots(result: dict, out: Path) -> list[Path]:
    """Throughput, scaling (speedup and efficiency) and memory against sequence length."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("# plots skipped: matplotlib is not installed")
        return []
    series: dict[tuple, list[dict]] = defaultdict(list)
    for r in result["results"]:
        if r.get("time_ms") is not None:
            series[(r["method"], r["world"])].append(r)
    figures = [
        ("attention_throughput.png", "tokens/s (fwd+bwd)", lambda r: r["tokens_per_s"], False),
        ("attention_speedup.png", "speedup over one GPU", lambda r: r.get("speedup"), True),
        ("attention_memory.png", "peak GiB per GPU", lambda r: r.get("peak_gib"), False),
    ]
    written = []
    for name, label, value, ideal in figures:
        lines = {}
        for (method, world), rs in sorted(series.items()):
            pts = [(r["seq"], value(r)) for r in rs if value(r) is not None]
            if pts:
                lines[f"{method} x{world}"] = pts
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label_text, pts in lines.items():
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", label=label_text)
        if ideal:
            for world in sorted({w for _, w in series if w > 1}):
                ax.axhline(world, linestyle=":", color="grey")
                ax.axhline(0.9 * world, linestyle="--", color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel(label)
        ax.set_title(f"{label}: {result['meta'].get('gpu', result['meta']['device'])}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        path = out / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
