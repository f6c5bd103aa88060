"""``rankgate bench compare``: per-size ratios against a baseline, and a verdict that
accounts for noise.

Each (metric, size) side is summarised over its repetitions with the metric's
statistic (median, or best of for times on a shared machine); ``change`` is how much
worse NEW is (+0.20 = 20% slower, or 20% less bandwidth); a change past the metric's
threshold is a regression. The baseline's own spread ((max - min) / statistic) is
shown as ``noise``; where it exceeds the threshold, a change within it is
``inconclusive`` (not "same"), since its verdict would be a coin flip.

Usage::

    rankgate bench compare BASE NEW             # two files (results or baselines)
    rankgate bench compare --kind auto [NEW...] # each NEW against benchmarks/baselines/<kind>/
    rankgate bench compare --committed          # each baseline against its committed runs
    rankgate bench compare --write-baseline benchmarks/baselines/cpu/harness.json RUN...

``--committed`` compares each baseline under ``--baselines`` with the committed result
files it names (``sources``, under benchmarks/results/<kind>/): a baseline edited
away from its results, or results replaced by a slower run, fail wherever the gate
runs, GPU kinds included. Without NEW files, ``--kind`` compares every ``*.json`` under
``$RANKGATE_OUT/bench``
(``out/bench``) and writes compare.json and compare.png there, as the bench stage does.
Exit 0: no regression; 1: a regression; 2: bad input. ``--json FILE`` writes the
comparison for ``rankgate report``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from rankgate.bench.benchargs import metric_fraction
from rankgate.bench.kind import machine_description, machine_kind
from rankgate.bench.samples import (
    METRICS,
    Metric,
    ResultsError,
    Samples,
    baseline_json,
    load,
)
from rankgate.cliargs import UsageError
from rankgate.proc.contention import contended

COMPARE_FORMAT = "rankgate.compare/1"
DEFAULT_BASELINES = Path("benchmarks/baselines")


@dataclass(frozen=True, slots=True)
class Row:
    """One (metric, size): both sides' statistic, the change and the verdict."""

    metric: str
    size: str
    unit: str
    base: float | None
    new: float | None
    base_n: int
    new_n: int
    change: float | None
    """How much worse NEW is, as a fraction (negative: better)."""
    threshold: float | None
    noise: float | None
    verdict: str
    """regressed, improved, same, info (no threshold), missing (no NEW), new (no BASE),
    noisy (past the threshold, but a CPU timing taken on a contended machine), or
    inconclusive (not past the threshold, but the baseline's own spread is: "same" or
    "improved" would be a coin flip)."""

    @property
    def ratio(self) -> float | None:
        return None if not self.base or self.new is None else self.new / self.base

    def describe(self) -> str:
        """One line for a regression: which size, by how much, against what."""
        worse = "slower" if self.unit in ("ms", "us", "s") else "worse"
        threshold = 100 * (self.threshold or 0)
        return (
            f"{self.metric} at {self.size}: {100 * (self.change or 0):.0f}% {worse} "
            f"({self.new:.4g} vs {self.base:.4g} {self.unit}; threshold {threshold:.0f}%)"
        )

    def to_json(self) -> dict:
        return {**{k: getattr(self, k) for k in self.__slots__}, "ratio": self.ratio}


@dataclass(frozen=True, slots=True)
class Comparison:
    """Every row of one BASE/NEW pair."""

    benchmark: str
    base: str
    new: str
    rows: tuple[Row, ...]
    notes: tuple[str, ...] = ()

    @property
    def regressions(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.verdict == "regressed")

    def to_json(self) -> dict:
        return {
            "format": COMPARE_FORMAT,
            "benchmark": self.benchmark,
            "base": self.base,
            "new": self.new,
            "ok": not self.regressions,
            "regressions": [r.describe() for r in self.regressions],
            "notes": list(self.notes),
            "rows": [r.to_json() for r in self.rows],
        }


def compare(base: Samples, new: Samples) -> Comparison:
    """Compare NEW with BASE, with BASE's metric settings (a baseline's thresholds)."""
    if base.benchmark != new.benchmark:
        raise ResultsError(
            f"{base.source} holds {base.benchmark} results but {new.source} {new.benchmark}"
        )
    metrics = {**METRICS[base.benchmark], **base.metrics}
    busy = contended(new.probes)
    keys = list(dict.fromkeys([*base.values, *new.values]))
    rows = [_row(metrics[m], size, base.values.get((m, size)), new.values.get((m, size)), busy)
            for m, size in keys if m in metrics]  # fmt: skip
    rows.sort(key=lambda r: (list(metrics).index(r.metric), _size_key(r.size)))
    notes = []
    if any(r.verdict == "noisy" for r in rows):
        notes.append(
            f"{new.source} was measured on a contended machine ({busy}): its CPU timings "
            "past their threshold are marked noisy, not regressed; rerun on a quiet machine"
        )
    for metric in metrics.values():
        noisy = [r for r in rows if r.metric == metric.name and r.noise and metric.threshold
                 and r.noise > metric.threshold]  # fmt: skip
        if noisy:
            worst = max(noisy, key=lambda r: r.noise or 0)
            notes.append(
                f"{metric.name}: the baseline's own spread reaches {100 * (worst.noise or 0):.0f}% "
                f"({worst.size}), above its {100 * metric.threshold:.0f}% threshold; more "
                "repetitions or a quieter machine would make its verdicts trustworthy"
            )
    return Comparison(base.benchmark, base.source, new.source, tuple(rows), tuple(notes))


def _row(
    metric: Metric, size: str, base: list[float] | None, new: list[float] | None, busy: str
) -> Row:
    b = metric.summarize(base) if base else None
    n = metric.summarize(new) if new else None
    change = None
    if b and n:
        change = n / b - 1 if metric.better == "lower" else b / n - 1
    noise = (max(base) - min(base)) / b if base and len(base) > 1 and b else None
    if b is None:
        verdict = "new"
    elif n is None:
        verdict = "missing"
    elif metric.threshold is None or change is None:
        verdict = "info"
    elif change > metric.threshold:
        verdict = "noisy" if busy and metric.load_sensitive else "regressed"
    elif noise is not None and noise > metric.threshold:
        verdict = "inconclusive"  # within the baseline's own spread: no verdict either way
    elif change < -metric.threshold:
        verdict = "improved"
    else:
        verdict = "same"
    return Row(
        metric=metric.name, size=size, unit=metric.unit, base=b, new=n,
        base_n=len(base or ()), new_n=len(new or ()), change=change,
        threshold=metric.threshold, noise=noise, verdict=verdict,
    )  # fmt: skip


def _size_key(size: str) -> tuple:
    """Sort sizes by their text, numbers as numbers (1024 after 8)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in size.split())


def format_table(comparison: Comparison) -> str:
    lines = [
        f"# {comparison.benchmark}: {comparison.new} against {comparison.base}",
        f"{'metric':<18} {'size':<28} {'base':>10} {'new':>10} {'ratio':>6} {'change':>7} "
        f"{'noise':>6} {'thresh':>6}  verdict",
    ]
    for r in comparison.rows:
        lines.append(
            f"{r.metric:<18} {r.size:<28} {_num(r.base):>10} {_num(r.new):>10} "
            f"{_num(r.ratio, '.3f'):>6} {_pct(r.change):>7} {_pct(r.noise):>6} "
            f"{_pct(r.threshold):>6}  {r.verdict}"
        )
    lines += [f"note: {n}" for n in comparison.notes]
    return "\n".join(lines)


def _num(value: float | None, fmt: str = ".4g") -> str:
    return "-" if value is None else format(value, fmt)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.0f}%"


# --------------------------------------------------------------------------- command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    # the module's docstring, less its reST markup (a terminal shows it as is)
    parser.epilog = __doc__.split("\n\n", 1)[1].replace("``", "").replace("::\n", ":\n")
    parser.add_argument("files", nargs="*", metavar="FILE", help="BASE NEW, or NEW... with --kind")
    parser.add_argument(
        "--kind", metavar="KIND",
        help="compare each file with the baseline of this machine kind ('auto': detect it; "
        "default: compare two files, BASE NEW)",
    )
    parser.add_argument(
        "--baselines", type=Path, default=DEFAULT_BASELINES, metavar="DIR",
        help=f"where baselines live, one folder per kind (default {DEFAULT_BASELINES})",
    )
    parser.add_argument(
        "--committed", action="store_true",
        help="compare every baseline with the committed results it was recorded from",
    )  # fmt: skip
    parser.add_argument(
        "--json", dest="json_out", metavar="FILE",
        help="write the comparison as JSON here (default: with --kind and no NEW files, "
        "$RANKGATE_OUT/bench/compare.json; with --committed, compare-committed.json there; "
        "else none)",
    )  # fmt: skip
    parser.add_argument(
        "--plot", metavar="PNG",
        help="plot NEW/BASE per size here, with matplotlib (default: with --kind and no NEW "
        "files, $RANKGATE_OUT/bench/compare.png; else none)",
    )  # fmt: skip
    parser.add_argument(
        "--write-baseline", metavar="FILE",
        help="record the given runs (their repetitions together) as a baseline file "
        "(default: compare, record nothing)",
    )
    parser.add_argument(
        "--threshold", type=metric_fraction, action="append", default=[],
        metavar="METRIC=FRACTION",
        help="with --write-baseline: a metric's threshold, e.g. pool_median_ms=0.15; "
        "repeatable (default: each metric's built-in threshold)",
    )
    parser.add_argument(
        "--note", default="", help="with --write-baseline: how it was measured (default: none)"
    )


KIND_NAME = re.compile(r"cpu|nvidia-[a-z0-9]+(?:-[a-z0-9]+)*-x[1-9][0-9]*")
"""A machine kind as ``rankgate.bench.kind`` names one: cpu, nvidia-h200-x2, ..."""


def validate(args: argparse.Namespace) -> None:
    """A --kind that is no machine kind compares nothing: say so before any work. A kind
    without baselines yet is fine (a note, so a gate on a new machine passes)."""
    if args.kind and args.kind != "auto" and not KIND_NAME.fullmatch(args.kind):
        kinds = sorted(p.name for p in args.baselines.glob("*") if p.is_dir())
        raise UsageError(
            f"--kind {args.kind}: not a machine kind (auto, cpu or nvidia-<gpu>-x<count>; "
            f"baselines exist for: {', '.join(kinds) or 'none'})"
        )


def run(args: argparse.Namespace) -> int:
    folder = Path(os.environ.get("RANKGATE_OUT", "out")) / "bench"
    if args.kind and not args.files and not args.write_baseline:
        # The bench stage's call: its results in, its comparison and plot out.
        args.json_out = args.json_out or str(folder / "compare.json")
        args.plot = args.plot or str(folder / "compare.png")
    if args.committed:
        args.json_out = args.json_out or str(folder / "compare-committed.json")
    try:
        if args.write_baseline:
            return _write_baseline(args)
        comparisons, notes = _comparisons(args)
    except ResultsError as exc:
        print(f"rankgate bench compare: error: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"rankgate bench compare: {note}", file=sys.stderr)
    for c in comparisons:
        print(format_table(c))
    regressions = [r for c in comparisons for r in c.regressions]
    if args.json_out:
        doc = {"format": COMPARE_FORMAT, "ok": not regressions, "notes": notes,
               "comparisons": [c.to_json() for c in comparisons]}  # fmt: skip
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(doc, indent=1) + "\n")
    if args.plot and comparisons:
        from rankgate.bench.compareplot import plot_ratios

        plot_ratios(comparisons, Path(args.plot))
    for r in regressions:
        print(f"rankgate bench compare: REGRESSION {r.describe()}", file=sys.stderr)
    if not regressions:
        print(f"rankgate bench compare: {no_regression_line(comparisons)}", file=sys.stderr)
    return 1 if regressions else 0


def no_regression_line(comparisons: list[Comparison]) -> str:
    """'no regression in N comparisons', or, where rows are inconclusive (the baseline's
    spread exceeds the threshold), 'inconclusive: ...' saying how many."""
    unsure = sum(r.verdict == "inconclusive" for c in comparisons for r in c.rows)
    if unsure:
        return (
            f"inconclusive: no regression past a threshold in {len(comparisons)} comparisons, "
            f"but {unsure} row(s) lie within a baseline spread wider than their threshold"
        )
    return f"no regression in {len(comparisons)} comparisons"


def _comparisons(args: argparse.Namespace) -> tuple[list[Comparison], list[str]]:
    if args.committed:
        return _committed(args.baselines)
    if not args.kind:
        if len(args.files) != 2:
            raise ResultsError("give BASE and NEW, or --kind KIND and the NEW files")
        return [compare(load(args.files[0]), load(args.files[1]))], []
    kind = machine_kind() if args.kind == "auto" else args.kind
    here = machine_description()
    news = [Path(f) for f in args.files] or _stage_results()
    comparisons, notes = [], []
    for path in news:
        new = load(path)
        base_path = args.baselines / kind / f"{new.benchmark}.json"
        if not base_path.is_file():
            notes.append(f"{path}: no {new.benchmark} baseline for kind {kind} ({base_path}); "
                         "record one with --write-baseline")  # fmt: skip
            continue
        base = load(base_path)
        # CPU figures depend on the cores and their model; a GPU kind names its GPUs.
        recorded = (base.machine.get("cpus"), base.machine.get("cpu"))
        if kind == "cpu" and recorded[0] and recorded != (here.get("cpus"), here.get("cpu")):
            notes.append(
                f"{path}: the {kind} baseline was recorded on {recorded[0]} CPUs ({recorded[1]}), "
                f"this machine has {here.get('cpus')} ({here.get('cpu')}): not comparable, "
                "not compared"
            )
            continue
        comparisons.append(compare(base, new))
    return comparisons, notes


def _committed(baselines: Path) -> tuple[list[Comparison], list[str]]:
    """Each baseline against the committed results it names (paths from the repository)."""
    comparisons, notes = [], []
    root = baselines.resolve().parents[1]  # benchmarks/baselines -> the repository
    for path in sorted(baselines.glob("*/*.json")):
        base = load(path)
        if not base.sources:
            notes.append(f"{path}: names no committed results (sources); not checked")
            continue
        missing = [s for s in base.sources if not (root / s).is_file()]
        if missing:
            raise ResultsError(
                f"{path}: its sources {', '.join(missing)} are not in the repository; "
                "record the baseline again from committed runs"
            )
        runs = [load(root / s) for s in base.sources]
        new = runs[0]
        for more in runs[1:]:
            new = new.merged(more)
        new.source = f"{len(runs)} committed runs of {path.parent.name}"
        # Data against data: how busy the machine was is already in the baseline's figures.
        new.probes = []
        comparisons.append(compare(base, new))
    if not comparisons and not notes:
        raise ResultsError(f"no baselines under {baselines}")
    return comparisons, notes


def _stage_results() -> list[Path]:
    """The bench stage's results: every JSON under $RANKGATE_OUT/bench but comparisons."""
    folder = Path(os.environ.get("RANKGATE_OUT", "out")) / "bench"
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            head = json.loads(path.read_text())
        except (json.JSONDecodeError, OSError):
            head = None  # a saved --json run: not one JSON document, but a result
        if not (isinstance(head, dict) and head.get("format") == COMPARE_FORMAT):
            found.append(path)
    if not found:
        raise ResultsError(f"no benchmark results under {folder}; run the benchmarks first")
    return found


def _write_baseline(args: argparse.Namespace) -> int:
    if not args.files:
        raise ResultsError("--write-baseline needs the runs to record")
    runs = [load(f) for f in args.files]
    samples = runs[0]
    for more in runs[1:]:
        samples = samples.merged(more)
    metrics = {**METRICS[samples.benchmark], **samples.metrics}
    for item in args.threshold:
        name, _, value = item.partition("=")
        if name not in metrics:
            raise ResultsError(f"--threshold {item}: {samples.benchmark} has no metric {name!r} "
                               f"(it has {', '.join(metrics)})")  # fmt: skip
        try:
            metrics[name] = Metric(**{**metrics[name].to_json(), "name": name,
                                      "threshold": float(value)})  # fmt: skip
        except ValueError as exc:
            raise ResultsError(f"--threshold {item}: {exc}") from None
    samples.metrics = metrics
    here = machine_description()
    if args.kind and args.kind not in ("auto", here["kind"]):
        # Results measured elsewhere (committed GPU runs): only what they say themselves.
        samples.machine = {"kind": args.kind, **samples.machine}
    else:
        samples.machine = {**here, **samples.machine}
    # Every option that shaped the file, so the command in it records the file again.
    kind = ["--kind", args.kind] if args.kind else []
    thresholds = [part for item in args.threshold for part in ("--threshold", item)]
    command = "rankgate bench compare --write-baseline " + shlex.join(
        [args.write_baseline, *kind, *thresholds, *args.files])
    doc = baseline_json(samples, command=command, note=args.note, sources=list(args.files))
    Path(args.write_baseline).parent.mkdir(parents=True, exist_ok=True)
    Path(args.write_baseline).write_text(json.dumps(doc, indent=1) + "\n")
    n = sum(len(v) for v in samples.values.values())
    print(f"rankgate bench compare: wrote {args.write_baseline} ({n} values, "
          f"{len(args.files)} runs)", file=sys.stderr)  # fmt: skip
    return 0
