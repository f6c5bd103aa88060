"""One PNG of a comparison: NEW / BASE per size, one panel per metric, the threshold drawn."""

from __future__ import annotations

from pathlib import Path


def plot_ratios(comparisons: list, out: Path) -> Path | None:
    """Plot every gated metric of ``comparisons`` (compare.Comparison); None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("# plot skipped: matplotlib is not installed (pip install matplotlib)")
        return None
    panels = [
        (c, metric)
        for c in comparisons
        for metric in dict.fromkeys(r.metric for r in c.rows if r.threshold is not None)
    ]
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.6 * len(panels)), squeeze=False)
    for ax, (comparison, metric) in zip(axes[:, 0], panels):
        rows = [r for r in comparison.rows if r.metric == metric and r.ratio is not None]
        ratios = [r.ratio for r in rows]
        colours = [{"regressed": "#c0392b", "improved": "#27ae60"}.get(r.verdict, "#34495e")
                   for r in rows]  # fmt: skip
        ax.bar(range(len(rows)), ratios, color=colours)
        ax.axhline(1.0, color="black", linewidth=0.8)
        threshold = rows[0].threshold if rows else None
        if threshold is not None:
            # "worse" is above 1 for times, below 1 for bandwidths (ratio is NEW/BASE)
            ax.axhline(1 + threshold, color="#c0392b", linestyle="--", linewidth=0.8)
            ax.axhline(1 / (1 + threshold), color="#c0392b", linestyle="--", linewidth=0.8)
        ax.set_xticks(range(len(rows)), [r.size for r in rows], rotation=30, ha="right",
                      fontsize=7)  # fmt: skip
        ax.set_ylabel("new / base")
        ax.set_title(f"{comparison.benchmark}: {metric}", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
