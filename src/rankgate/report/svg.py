"""Small inline SVG pictures for the HTML report (no script, no external file).

:func:`stage_bars`: one horizontal bar per stage, its length the stage's time, its
colour the stage's result. :func:`trend_line`: one metric over runs.
"""

from __future__ import annotations

from html import escape

COLOURS = {
    "passed": "#1e7e34", "failed": "#b02a37", "skipped": "#c69500", "incomplete": "#6f42c1",
    "running": "#6f42c1", "never ran": "#8a8f98",
}  # fmt: skip


def stage_bars(stages: list[dict], width: int = 720) -> str:
    """Stage durations as bars, the longest taking the full width."""
    if not stages:
        return ""
    label_w, row_h, pad = 110, 22, 70
    longest = max(float(s.get("seconds") or 0) for s in stages) or 1.0
    bar_w = width - label_w - pad
    rows = []
    for i, s in enumerate(stages):
        seconds = float(s.get("seconds") or 0)
        y = i * row_h + 4
        length = max(2.0, bar_w * seconds / longest)
        colour = COLOURS.get(s["status"], "#8a8f98")
        rows.append(
            f'<text x="{label_w - 8}" y="{y + 14}" text-anchor="end">{escape(s["stage"])}</text>'
            f'<rect x="{label_w}" y="{y}" width="{length:.1f}" height="{row_h - 6}" '
            f'fill="{colour}"><title>{escape(s["stage"])}: {escape(s["status"])}, '
            f"{seconds:.1f} s</title></rect>"
            f'<text x="{label_w + length + 6:.1f}" y="{y + 14}">{seconds:.1f} s</text>'
        )
    height = len(stages) * row_h + 8
    return (
        f'<svg class="bars" role="img" aria-label="stage durations" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" font-size="12" '
        f'font-family="system-ui,sans-serif">{"".join(rows)}</svg>'
    )


def trend_line(name: str, values: list[float | None], labels: list[str],
               width: int = 340, height: int = 120) -> str:  # fmt: skip
    """One metric over runs: a line with a dot per run, the last run's dot larger."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    left, right, top, bottom = 44, 10, 18, 22
    lo, hi = min(known), max(known)
    if hi == lo:
        lo, hi = lo - 1, hi + 1
    step = (width - left - right) / max(1, len(values) - 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        y = top + (height - top - bottom) * (hi - v) / (hi - lo)
        return left + i * step, y

    points = [(i, v) for i, v in enumerate(values) if v is not None]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, v) for i, v in points))
    dots = "".join(
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{4 if i == len(values) - 1 else 2.5}">'
        f"<title>{escape(labels[i])}: {v:g}</title></circle>"
        for i, v in points
        for x, y in [xy(i, v)]
    )
    return (
        f'<svg class="trend" role="img" aria-label="{escape(name)}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" font-size="11" '
        f'font-family="system-ui,sans-serif">'
        f'<text x="{left}" y="12" font-weight="600">{escape(name)}</text>'
        f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{hi:g}</text>'
        f'<text x="{left - 4}" y="{height - bottom}" text-anchor="end">{lo:g}</text>'
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" '
        f'stroke="#d0d4d9"/>'
        f'<polyline points="{path}" fill="none" stroke="#2f6fb0" stroke-width="2"/>'
        f'<g fill="#2f6fb0">{dots}</g>'
        f'<text x="{left}" y="{height - 6}">{escape(labels[0])}</text>'
        f'<text x="{width - right}" y="{height - 6}" text-anchor="end">this run</text></svg>'
    )
