"""``python -m rankgate.bench.claims``: the docs' measured figures, rendered from committed results.

Each claim is a block of Markdown between ``<!-- claims:NAME -->`` and
``<!-- /claims:NAME -->`` in README.md, a docs page or a results .md, written by one renderer
below from the result files it names (a run's JSON, a saved nccl-tests output). Edit
the results or the renderer, never the numbers in the block: ``--check`` (and
``tests/bench/test_bench_claims.py``) fails where a block differs from what its files
say, and where a measured figure is typed outside any block in the sections
``TYPED_CHECKED`` names (the README's figures, the benchmarks page's comm and attention).
The block format itself (find, render again, typed figures) is :mod:`.claim_blocks`.

Usage::

    python -m rankgate.bench.claims           # rewrite every block from its files
    python -m rankgate.bench.claims --check   # exit 1 naming each stale block
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from rankgate.bench.claim_blocks import Claim, Loader, file_loader, render_doc, typed_figures
from rankgate.bench.commreport import KERNEL_BACKEND, crossovers

X2 = "benchmarks/results/nvidia-h200-x2"
RERUN = f"{X2}/rerun-graph-fp32/comm.json"
RUN10 = f"{X2}/run10-graph-defaults"
RUN7 = f"{X2}/run7-merged"
ATTENTION_RUN3 = f"{X2}/attention/run3/attention.json"
ATTENTION = f"{X2}/two-gpus/attention/attention.json"
"""The newest attention run: the memory figures (README, benchmarks page)."""
NCCL_TESTS_GRAPH = "benchmarks/reference/nvidia-h200-x2/nccl-tests-runs/nccl-tests_h200x2_turn3.txt"
NCCL_TESTS = "benchmarks/reference/nvidia-h200-x2"
EAGER_PUSH = "benchmarks/results/nvidia-h100-x2/two-gpus-2026-11-26/comm-oneshot-eager/comm.json"
X4 = "benchmarks/results/nvidia-h100-x4/gpu-pool-and-attention-2026-11-26"
X4_ATTENTION = f"{X4}/lease3/attention/attention.json"
"""The newest attention run (ring's head chunks by length): the README's and bench page's."""
X4_COMM = f"{X4}/lease3/comm/comm.json"
"""The newest comm run, nccl-tests built beside it against torch's NCCL."""
X2_INTERLEAVED = "benchmarks/results/nvidia-h100-x2/comm-interleaved-2026-11-26"
X2_INTERLEAVED_COMM = f"{X2_INTERLEAVED}/comm.json"
"""The first comm run with the backends timed in turn at each size."""
X2_LEDGER_LEASE = "benchmarks/results/nvidia-h100-x2/ledger-and-comm-2026-11-26"
X2_LEDGER_LEASE_COMM = f"{X2_LEDGER_LEASE}/comm/comm.json"
"""The second, on another host (the lease that measured the ledger's cost on NCCL)."""
X4_SELECTION = "benchmarks/results/nvidia-h100-x4/pool-selection-2026-11-27"
X4_EAGER_COMM = f"{X4_SELECTION}/comm/comm.json"
"""The newest eager sweep of auto against every single backend (7 rounds): the benchmarks page's."""
BENCH_PAGE = "docs/bench.md"
"""The benchmarks page of the documentation site: the comm and attention figures."""
TIMES, DASH = "\u00d7", "\u2013"  # as the docs write them: 1.21x, 1\u20132 us
BACKEND_NAMES = {"p2p-push": "push", "p2p-oneshot": "one-shot", "p2p-twoshot": "two-shot",
                 "nccl": "NCCL"}  # fmt: skip
KiB = 1 << 10
MiB = 1 << 20

# --- helpers -----------------------------------------------------------------------------


def _rows(result: dict, collective: str = "all_reduce") -> dict[tuple[str, int], dict]:
    return {(r["backend"], r["bytes"]): r
            for r in result["results"] if r["collective"] == collective}  # fmt: skip


def _span(values, fmt: str = ".1f") -> str:
    values = list(values)
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}{DASH}{hi}"


def _wrap(text: str) -> str:
    return textwrap.fill(text, 90, break_on_hyphens=False, break_long_words=False)


def _size(nbytes: int) -> str:
    return f"{nbytes // MiB} MiB" if nbytes >= MiB else f"{nbytes // KiB} KiB"


def _tokens(seq: int) -> str:
    return f"{seq // 1024}K"


# --- comm -------------------------------------------------------------------------------


BIG = 2 << 30
SMALL = [KiB << i for i in range(7)]  # 1 KiB .. 64 KiB


def _busbw_at_2g(load: Loader, collective: str) -> tuple[float, float]:
    """NCCL's busbw at 2 GiB through torch (run 7) and nccl-tests' (its reference run)."""
    from rankgate.bench.nccltests import parse_sections

    run = load(f"{RUN7}/bench_{'ar' if collective == 'all_reduce' else 'coll'}/comm.json")
    nt = {r["bytes"]: r for s in parse_sections(load(f"{NCCL_TESTS}/nccl_{collective}.txt"))
          for r in s["rows"]}  # fmt: skip
    return _rows(run, collective)[("nccl", BIG)]["eager_busbw"], nt[BIG]["busbw"]


def _graph_small(load: Loader) -> tuple[list[float], list[float], list[float]]:
    """fp32 all_reduce 1-64 KiB in a CUDA graph (the rerun): push's us, NCCL's through
    torch, and nccl-tests' own graph mode (in place)."""
    from rankgate.bench.nccltests import parse_sections

    rows = _rows(load(RERUN))
    graph_sections = [s for s in parse_sections(load(NCCL_TESTS_GRAPH))
                      if s["graph"] and s["rows"][0]["type"] == "float"]  # fmt: skip
    nt_graph = {r["bytes"]: r["in_place_time_us"] for r in graph_sections[0]["rows"]}
    push = [rows[("p2p-push", s)]["graph_us"] for s in SMALL]
    return push, [rows[("nccl", s)]["graph_us"] for s in SMALL], [nt_graph[s] for s in SMALL]


def bench_comm(load: Loader) -> str:
    """The benchmarks page's paragraph of 2 x H200 comm figures."""
    ar_bus, nt_ar_bus = _busbw_at_2g(load, "all_reduce")
    bc_bus, nt_bc_bus = _busbw_at_2g(load, "broadcast")

    rerun = load(RERUN)
    rows = _rows(rerun)
    upto_1m = [KiB << i for i in range(11)]  # 1 KiB .. 1 MiB
    push, nccl_graph, nt_graph = _graph_small(load)
    faster = [nt / p for nt, p in zip(nt_graph, push)]

    cross = rerun["crossovers"]
    # the graph path is not in a table read back: its choice comes from the printed summary
    printed = rerun["meta"].get("printed_choice_worst_1K_1G", {})
    choice = max(cross[m]["choice_worst_1K_1G"] or printed[m] for m in ("eager", "graph"))
    worst = {}
    for mode in ("graph", "eager"):
        ratios = {int(k): v for k, v in cross[mode]["auto_ratio"].items()}
        at = max(ratios, key=ratios.get)
        worst[mode] = (ratios[at], at)
    e_1k = rows[("auto", KiB)]["eager_us"] / rows[("p2p-oneshot", KiB)]["eager_us"]
    oneshot = [rows[("p2p-oneshot", s)]["eager_us"] for s in upto_1m]
    nccl_eager = [rows[("nccl", s)]["eager_us"] for s in upto_1m]
    push_eager = [rows[("p2p-push", s)]["eager_us"] for s in SMALL]
    h100 = _rows(load(EAGER_PUSH))
    push_sizes = [2 * KiB << i for i in range(8)]  # 2 KiB .. 256 KiB
    h100_push = [h100[("p2p-push", s)]["eager_us"] for s in push_sizes]
    h100_one = [h100[("p2p-oneshot", s)]["eager_us"] for s in push_sizes]
    return _wrap(
        f"On 2{TIMES}H200 (`{X2}/COMM.md`): NCCL all_reduce busbw {ar_bus:.1f} GB/s at 2 GiB "
        f"against nccl-tests' {nt_ar_bus:.1f}, broadcast {bc_bus:.1f} against "
        f"{nt_bc_bus:.1f} (run 7). In a CUDA graph the push kernel takes "
        f"{_span(push)} us per fp32 all_reduce from 1 to 64 KiB against NCCL's "
        f"{_span(nccl_graph)} us through torch and {_span(nt_graph)} us in "
        f"nccl-tests' own graph mode (`-G 1`, GPU time, in place): {_span(faster)}{TIMES} faster "
        f"(latest rerun, `rerun-graph-fp32/`; nccl-tests from the same kind of machine, "
        f"`nccl-tests-runs/`). `auto` runs the fastest single backend's kernel at every "
        f"size from 1 KiB to 64 MiB (its choice at worst {choice:.3f}{TIMES} the fastest), but in "
        f"that rerun its own time was not yet the kernel's: up to {worst['graph'][0]:.2f}{TIMES} "
        f"the fastest in a graph ({_size(worst['graph'][1])}) and up to "
        f"{worst['eager'][0]:.2f}{TIMES} eagerly ({_size(worst['eager'][1])}; "
        f"{e_1k:.2f}{TIMES} at 1 KiB, "
        f"{rows[('auto', KiB)]['eager_us']:.1f} us against forced one-shot's "
        f"{rows[('p2p-oneshot', KiB)]['eager_us']:.1f}). Since then auto's per-call path is "
        "routed once per kind of payload, and a CPU test bounds what it adds over the "
        f"kernel it runs at 0.5 us; no 2{TIMES}H200 run has measured that yet. Eager small "
        f"all-reduces are bound by the host's launch: one-shot takes {_span(oneshot, '.0f')} "
        f"us (fp32, 1 KiB{DASH}1 MiB) against NCCL's {_span(nccl_eager, '.0f')}, and the push "
        f"kernel's launch through ctypes took {_span(push_eager, '.0f')} us. A later run on "
        f"2{TIMES}H100 (`nvidia-h100-x2/two-gpus-2026-11-26/comm-oneshot-eager/`) had push "
        f"the fastest eager backend from 2 to 256 KiB ({_span(h100_push)} us against "
        f"one-shot's {_span(h100_one)}), so eager calls now push up to 256 KiB by default. "
        + _auto_eager_now(load(X4_EAGER_COMM))
    )


def _auto_eager_now(run: dict) -> str:
    """The newest eager sweep: auto's kernel, its time by both ratios, and where it missed."""
    cross = run["crossovers"]["eager"]
    rows = _rows(run)
    sizes = sorted(int(k) for k in cross["auto_ratio"])
    kernel = {s: KERNEL_BACKEND.get(rows[("auto", s)]["path"] or "nccl") for s in sizes}
    other = [s for s in sizes if kernel[s] != cross["fastest"][str(s)]]
    over = [s for s in sizes if cross["auto_ratio"][str(s)] > 1.05]
    worst = max(sizes, key=lambda s: cross["auto_ratio"][str(s)])
    paired = crossovers(run["results"])["eager"]
    others = "; ".join(
        f"at {_size(s)} {BACKEND_NAMES[kernel[s]]}, whose own time was "
        f"{cross['choice_ratio'][str(s)]:.3f}{TIMES} {BACKEND_NAMES[cross['fastest'][str(s)]]}'s"
        for s in other
    )  # fmt: skip
    return (
        f"The latest eager sweep (2{TIMES}H100, `{X4_SELECTION}/`, "
        f"{run['meta']['options']['rounds']} rounds, {_size(sizes[0])}{DASH}{_size(sizes[-1])}): "
        f"auto ran the fastest single backend's kernel at {len(sizes) - len(other)} of "
        f"{len(sizes)} sizes{f' ({others})' if other else ''}, and its median time was within "
        f"1.05{TIMES} of the fastest at {len(sizes) - len(over)} of {len(sizes)} sizes (worst "
        f"{cross['auto_ratio'][str(worst)]:.3f}{TIMES} at {_size(worst)}"
        f"{', the same kernel' if worst not in other else ''}); the median of its ratio within "
        f"each round, which the host's drift between rounds leaves out, was at worst "
        f"{paired['auto_paired_worst_1K_1G']:.3f}{TIMES}."
    )


def comm_run10_table(load: Loader) -> str:
    """COMM.md's run-10 table: auto as shipped against the fastest single backend, in a graph."""
    names = BACKEND_NAMES
    runs = {d: load(f"{RUN10}/graph_{d}/comm.json") for d in ("fp32", "bf16")}
    lines = [
        "| bytes | fp32 fastest single (us) | fp32 auto: kernel, us, ratio "
        "| bf16 fastest single (us) | bf16 auto: kernel, us, ratio |",
        "|---:|---|---|---|---|",
    ]
    sizes = [KiB, 4 * KiB, 16 * KiB, 64 * KiB, 128 * KiB, 256 * KiB, 512 * KiB, MiB,
             2 * MiB, 4 * MiB, 16 * MiB, 32 * MiB, 64 * MiB]  # fmt: skip
    for size in sizes:
        cells = [_size(size)]
        for run in runs.values():
            rows, cross = _rows(run), run["crossovers"]["graph"]
            best = cross["fastest"][str(size)]
            fastest = f"{names[best]} {rows[(best, size)]['graph_us']:.2f}"
            if best == "nccl" and ("p2p-twoshot", size) in rows:
                two = rows[("p2p-twoshot", size)]
                if two.get("path") != "nccl":
                    fastest += f" (two-shot {two['graph_us']:.2f})"
            auto = rows[("auto", size)]
            kernel = names[{"push": "p2p-push", "oneshot": "p2p-oneshot",
                            "twoshot": "p2p-twoshot"}.get(auto["graph_path"], "nccl")]  # fmt: skip
            ratio = cross["auto_ratio"][str(size)]
            shown = f"**{ratio:.3f}**" if ratio > 1.05 else f"{ratio:.3f}"
            cells += [fastest, f"{kernel} {auto['graph_us']:.2f}, {shown}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def comm_auto_against_fastest(path: str) -> Callable[[Loader], str]:
    """One run's table: auto against the fastest single backend, eagerly and in a graph
    (where the run timed graphs), with nccl-tests' in-place time beside it where it ran.
    'ratio' is of the medians over rounds, 'paired' the median of the ratios within a round."""
    names = BACKEND_NAMES

    def ratio_cell(ratio: float | None) -> str:
        return "-" if ratio is None else f"**{ratio:.3f}**" if ratio > 1.05 else f"{ratio:.3f}"

    def render(load: Loader) -> str:
        run = load(path)
        rows, cross = _rows(run), run["crossovers"]
        # runs from before the paired ratio was kept: it comes from their rounds' own times
        paired = crossovers(run["results"])
        modes = [m for m in ("eager", "graph") if cross.get(m, {}).get("auto_ratio")]
        beside = any("nccl_tests" in r for r in run["results"])
        head, align = ["bytes"], ["---:"]
        for mode in modes:
            head += [f"auto {mode} us (kernel)", f"fastest {mode}", "ratio", "paired"]
            align += ["---", "---", "---:", "---:"]
        if beside:
            head.append("nccl-tests eager / graph us")
            align.append("---")
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
        for size in sorted({b for (name, b) in rows if name == "auto"}):
            auto = rows[("auto", size)]
            cells = [_size(size)]
            for mode in modes:
                best = cross[mode]["fastest"][str(size)]
                kernel = auto["path"] if mode == "eager" else auto["graph_path"]
                cells += [f"{auto[mode + '_us']:.2f} ({kernel})",
                          f"{names[best]} {rows[(best, size)][mode + '_us']:.2f}",
                          ratio_cell(cross[mode]["auto_ratio"][str(size)]),
                          ratio_cell(paired[mode]["auto_paired_ratio"].get(str(size)))]  # fmt: skip
            if beside:
                nt = auto.get("nccl_tests") or {}
                cells.append(" / ".join(f"{nt[m]['us']:.2f}" if m in nt else "-"
                                        for m in ("eager", "graph")))  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    return render


# --- attention ---------------------------------------------------------------------------


def _attention(load: Loader, path: str = ATTENTION) -> tuple[dict, list[int], dict]:
    result = load(path)
    by = {(r["method"], r["seq"]): r for r in result["results"]}
    seqs = sorted({r["seq"] for r in result["results"]})
    fits = {f["method"]: f for f in result["fit"]}
    return by, seqs, fits


def bench_attention_table(load: Loader) -> str:
    by, seqs, _ = _attention(load, X4_ATTENTION)
    lines = ["| tokens | one GPU ms | ring x2 ms (speedup) | torch-cp x2 ms (speedup) |",
             "|---:|---:|---:|---:|"]  # fmt: skip
    for seq in seqs:
        single, ring, cp = by[("single", seq)], by[("ring", seq)], by[("torch-cp", seq)]
        lines.append(
            f"| {_tokens(seq)} | {single['time_ms']:.2f} | {ring['time_ms']:.2f} "
            f"({ring['speedup']:.2f}) | {cp['time_ms']:.2f} ({cp['speedup']:.2f}) |"
        )
    return "\n".join(lines)


def bench_attention_summary(load: Loader) -> str:
    by, seqs, _ = _attention(load, X4_ATTENTION)
    _, _, fits = _attention(load, ATTENTION)  # memory: the last run whose fit checks all ran
    long = [s for s in seqs if s >= 64 * 1024]
    effic = [100 * by[("ring", s)]["efficiency"] for s in long]
    ahead = [100 * (by[("torch-cp", s)]["time_ms"] / by[("ring", s)]["time_ms"] - 1) for s in seqs]
    per_token = {m: fits[m]["bytes_per_token"] / 1024 for m in ("ring", "single", "torch-cp")}
    ran = {m: max(c["seq"] for c in fits[m]["checks"] if c["ran"]) for m in ("ring", "single")}
    cap = fits["ring"]["cap_bytes"] / (1 << 30)
    return _wrap(
        f"The ring is {'ahead of' if min(ahead) > 0 else 'not always ahead of'} PyTorch's "
        f"context parallel at every length from {_tokens(seqs[0])} to {_tokens(seqs[-1])} "
        f"({_span(ahead)}%), and from {_tokens(long[0])} at {_span(effic)}% efficiency. "
        f"Memory (2{TIMES}H200, run 4): {per_token['ring']:.1f} KiB per token per GPU for the "
        f"ring against {per_token['single']:.1f} for one GPU and {per_token['torch-cp']:.1f} "
        f"for torch-cp, so under an {cap:.0f} GiB cap {ran['ring']:,} tokens ran on the ring "
        f"against {ran['single']:,} on one GPU ({ran['ring'] / ran['single']:.1f}x)."
    )


def attention_table(path: str) -> Callable[[Loader], str]:
    """One run's table for ATTENTION.md."""

    def render(load: Loader) -> str:
        by, seqs, _ = _attention(load, path)
        lines = ["| seq | single ms | ring x2 ms | speedup | effic. | torch-cp x2 ms | speedup "
                 "| effic. |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for seq in seqs:
            ring, cp = by[("ring", seq)], by[("torch-cp", seq)]
            lines.append(
                f"| {_tokens(seq)} | {by[('single', seq)]['time_ms']:.2f} "
                f"| {ring['time_ms']:.2f} | {ring['speedup']:.3f} "
                f"| {100 * ring['efficiency']:.1f}% | {cp['time_ms']:.2f} "
                f"| {cp['speedup']:.3f} | {100 * cp['efficiency']:.1f}% |"
            )
        return "\n".join(lines)

    return render


# --- the README's table ----------------------------------------------------------------

HARNESS_CPU = "benchmarks/results/cpu/harness_gloo-2026-11-29.txt"
HARNESS_NCCL = f"{X2}/two-gpus/harness/nccl.txt"


def _harness_world2(load: Loader, path: str) -> dict:
    """The world-2 row of a saved ``rankgate bench harness --json`` output."""
    line = next(x for x in load(path).splitlines() if x.startswith("[{"))
    return next(r for r in json.loads(line) if r["world"] == 2)


def readme_figures(load: Loader) -> str:
    """The README's few figures, one line each, with the file they come from."""
    cpu, nccl = _harness_world2(load, HARNESS_CPU), _harness_world2(load, HARNESS_NCCL)
    ar_bus, nt_ar_bus = _busbw_at_2g(load, "all_reduce")
    push, nccl_graph, nt_graph = _graph_small(load)
    by, seqs, _ = _attention(load, X4_ATTENTION)
    _, _, fits = _attention(load, ATTENTION)
    longest = seqs[-1]
    ring, single, cp = (by[(m, longest)] for m in ("ring", "single", "torch-cp"))
    ran = {m: max(c["seq"] for c in fits[m]["checks"] if c["ran"]) for m in ("ring", "single")}
    cap = fits["ring"]["cap_bytes"] / (1 << 30)

    def link(path: str) -> str:
        return f"[{path.rsplit('/', 1)[-1]}]({path})"

    rows = [
        ("pool, world(2), gloo, 2 CPU cores", f"{cpu['pool_ms_per_test']:.2f} ms/test",
         f"spawning: {cpu['spawn_ms_per_test']:,.0f} ms", link(HARNESS_CPU)),
        (f"pool, world(2), NCCL, 2{TIMES}H200", f"{nccl['pool_ms_per_test']:.2f} ms/test",
         f"spawning: {nccl['spawn_ms_per_test']:,.0f} ms", link(HARNESS_NCCL)),
        (f"all_reduce busbw, 2 GiB, 2{TIMES}H200", f"NCCL {ar_bus:.1f} GB/s",
         f"nccl-tests: {nt_ar_bus:.1f}", link(f"{X2}/COMM.md")),
        (f"fp32 all_reduce 1{DASH}64 KiB, CUDA graph, 2{TIMES}H200", f"push {_span(push)} us",
         f"NCCL {_span(nccl_graph)}, nccl-tests {_span(nt_graph)}", link(f"{X2}/COMM.md")),
        (f"attention fwd+bwd, {_tokens(longest)} tokens, 2{TIMES}H100",
         f"ring {ring['time_ms']:.0f} ms ({ring['speedup']:.2f}{TIMES})",
         f"torch-cp {cp['time_ms']:.0f} ({cp['speedup']:.2f}{TIMES}), "
         f"one GPU {single['time_ms']:.0f}",
         link(f"{X2}/attention/ATTENTION.md")),
        (f"tokens under {cap:.0f} GiB per GPU, 2{TIMES}H200", f"ring {ran['ring']:,}",
         f"one GPU: {ran['single']:,}", link(f"{X2}/attention/ATTENTION.md")),
    ]  # fmt: skip
    lines = ["| measured | rankgate | against | file |", "|---|---|---|---|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


CLAIMS = (
    Claim("readme-figures", "README.md",
          (HARNESS_CPU, HARNESS_NCCL, RERUN, f"{RUN7}/bench_ar/comm.json",
           f"{NCCL_TESTS}/nccl_all_reduce.txt", NCCL_TESTS_GRAPH, X4_ATTENTION, ATTENTION),
          readme_figures),
    Claim("bench-comm", BENCH_PAGE,
          (RERUN, f"{RUN7}/bench_ar/comm.json", f"{RUN7}/bench_coll/comm.json",
           NCCL_TESTS_GRAPH, f"{NCCL_TESTS}/nccl_all_reduce.txt",
           f"{NCCL_TESTS}/nccl_broadcast.txt", EAGER_PUSH, X4_EAGER_COMM), bench_comm),
    Claim("bench-attention-table", BENCH_PAGE, (X4_ATTENTION,), bench_attention_table),
    Claim("bench-attention-summary", BENCH_PAGE, (X4_ATTENTION, ATTENTION),
          bench_attention_summary),
    Claim("comm-run10-graph", f"{X2}/COMM.md",
          (f"{RUN10}/graph_fp32/comm.json", f"{RUN10}/graph_bf16/comm.json"), comm_run10_table),
    Claim("attention-run3", f"{X2}/attention/ATTENTION.md", (ATTENTION_RUN3,),
          attention_table(ATTENTION_RUN3)),
    Claim("attention-two-gpus", f"{X2}/attention/ATTENTION.md", (ATTENTION,),
          attention_table(ATTENTION)),
    Claim("attention-h100x4", f"{X2}/attention/ATTENTION.md", (X4_ATTENTION,),
          attention_table(X4_ATTENTION)),
    Claim("comm-h100x4", f"{X4}/README.md", (X4_COMM,), comm_auto_against_fastest(X4_COMM)),
    Claim("comm-h100x2-interleaved", f"{X2_INTERLEAVED}/README.md", (X2_INTERLEAVED_COMM,),
          comm_auto_against_fastest(X2_INTERLEAVED_COMM)),
    Claim("comm-h100x2-second-run", f"{X2_LEDGER_LEASE}/README.md", (X2_LEDGER_LEASE_COMM,),
          comm_auto_against_fastest(X2_LEDGER_LEASE_COMM)),
    Claim("comm-h100x4-eager", f"{X4_SELECTION}/README.md", (X4_EAGER_COMM,),
          comm_auto_against_fastest(X4_EAGER_COMM)),
)  # fmt: skip
"""Every rendered block, in the order the command writes them."""

TYPED_CHECKED = {
    "README.md": ("## Figures", "## Ways to run it"),
    BENCH_PAGE: ("## The communication layer", "## `rankgate bench attention`"),
}
"""Sections of a doc where a measured figure outside any block is an error."""


def check(root: Path, load: Loader | None = None, texts: dict[str, str] | None = None) -> list[str]:
    """Every problem with the committed docs under ``root`` (empty: all agree)."""
    load = load or file_loader(root)
    problems = []
    for doc in dict.fromkeys(c.doc for c in CLAIMS):
        text = texts[doc] if texts and doc in texts else (root / doc).read_text()
        problems += render_doc(text, doc, load, CLAIMS)[1]
        problems += typed_figures(text, doc, TYPED_CHECKED.get(doc, ()))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rankgate.bench.claims",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--check", action="store_true", help="exit 1 if a block is stale")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.root)
        for problem in problems:
            print(f"rankgate claims: {problem}", file=sys.stderr)
        return 1 if problems else 0
    load = file_loader(args.root)
    for doc in dict.fromkeys(c.doc for c in CLAIMS):
        path = args.root / doc
        text, problems = render_doc(path.read_text(), doc, load, CLAIMS)
        missing = [p for p in problems if p.endswith("is missing")]
        for problem in missing:
            print(f"rankgate claims: {problem}", file=sys.stderr)
        path.write_text(text)
        print(f"rankgate claims: {doc}: {len(problems) - len(missing)} block(s) rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
