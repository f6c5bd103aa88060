"""Benchmark results as samples: (metric, size) -> the values of every repetition.

:func:`load` reads what the benchmarks write and what ``rankgate bench compare
--write-baseline`` records, into one :class:`Samples` shape:

- ``rankgate bench harness --json`` output: one JSON line per repetition (tables and log
  lines between them are ignored); sizes are ``world N backend``;
- ``rankgate bench comm --json`` (or its comm.json): sizes are ``collective backend dtype
  bytes``; a row's per-round times (``*_rounds_us``) are its repetitions;
- a baseline file (``"format": "rankgate.baseline/1"``), which also carries each
  metric's direction, threshold and statistic and the machine it was recorded on.

:data:`METRICS` holds each benchmark's metrics and their defaults; a baseline file may
override a metric's threshold and statistic.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from rankgate.errors import RankgateError
from rankgate.proc.contention import PROBE_KEY

BASELINE_FORMAT = "rankgate.baseline/1"
BUSBW_MIN_BYTES = 16 << 20
"""comm's busbw metric covers sizes from here up, where bandwidth, not launch, bounds a call."""


class ResultsError(RankgateError):
    """A file that is not a benchmark result rankgate can compare."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Metric:
    """How one measured quantity is judged."""

    name: str
    unit: str
    better: Literal["lower", "higher"] = "lower"
    threshold: float | None = None
    """Worse by more than this fraction (0.15 = 15%) is a regression; None: reported only."""
    statistic: Literal["median", "min", "max"] = "median"
    """How a size's repetitions become one number. ``min`` (best of) suits times on a
    shared machine, where load only ever slows a run down."""
    load_sensitive: bool = False
    """A CPU timing: not judged when the run's probes show a contended machine."""

    def __post_init__(self) -> None:
        if self.better not in ("lower", "higher"):
            raise ValueError(f"metric {self.name}: better={self.better!r}; use lower or higher")
        if self.statistic not in ("median", "min", "max"):
            raise ValueError(
                f"metric {self.name}: statistic={self.statistic!r}; use median, min or max"
            )
        if self.threshold is not None and not 0 < self.threshold < 10:
            raise ValueError(
                f"metric {self.name}: threshold {self.threshold} is a fraction (0.15 = 15%)"
            )

    def summarize(self, values: list[float]) -> float:
        if self.statistic == "min":
            return min(values)
        if self.statistic == "max":
            return max(values)
        return statistics.median(values)

    def to_json(self) -> dict:
        return {"unit": self.unit, "better": self.better, "threshold": self.threshold,
                "statistic": self.statistic, "load_sensitive": self.load_sensitive}  # fmt: skip


POOL_OVER_PLAIN = "pool_over_plain"
"""A pool test's median over a plain test's median in the same session (``bench harness``
rows carry both): the machine's speed divides out, a per-test spawn, a sleep or a lost
pool does not."""

# The defaults; thresholds of committed baselines come from repeated measurements
# (benchmarks/baselines/README.md says which).
METRICS: dict[str, dict[str, Metric]] = {
    "harness": {
        m.name: m
        for m in (
            # Milliseconds move with the machine's speed (a shared 2-core box: a plain
            # test 1.16 ms, then 2.19 ms an hour later): reported. What is judged is the
            # pool's cost in plain tests of the same session (benchmarks/baselines/README.md).
            Metric(name="pool_median_ms", unit="ms", statistic="min", load_sensitive=True),
            Metric(name="pool_ms_per_test", unit="ms", statistic="min", load_sensitive=True),
            Metric(name=POOL_OVER_PLAIN, unit="plain tests", threshold=1.5, statistic="min",
                   load_sensitive=True),
            Metric(name="pool_start_s", unit="s", statistic="min", load_sensitive=True),
            Metric(name="spawn_ms_per_test", unit="ms", statistic="min", load_sensitive=True),
        )
    },
    "comm": {
        m.name: m
        for m in (
            # On 2xH200, run 7 against run 8: graph times moved 5.5% at p90, 12% at most.
            Metric(name="graph_us", unit="us", threshold=0.15),
            # Eager small calls are bound by the host's launch: run 7 against run 8 moved
            # up to 108% at 64 KiB, so eager times are reported, never judged ...
            Metric(name="eager_us", unit="us"),
            # ... except where bandwidth bounds them (>= 16 MiB: 1.5% at most between
            # runs, 5% between rounds of one run).
            Metric(name="busbw", unit="GB/s", better="higher", threshold=0.08),
        )
    },
}


@dataclass(slots=True)
class Samples:
    """One benchmark's results: every repetition of every (metric, size)."""

    benchmark: str
    values: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    metrics: dict[str, Metric] = field(default_factory=dict)
    machine: dict = field(default_factory=dict)
    """Where it ran (kind, cpus, gpu): a baseline records it; results may not know."""
    probes: list[dict] = field(default_factory=list)
    """Contention probes taken around each run (rankgate.proc.contention)."""
    sources: list[str] = field(default_factory=list)
    """A baseline's committed result files (paths from the repository root)."""
    source: str = ""

    def add(self, metric: str, size: str, value: float | None) -> None:
        if value is not None:
            self.values.setdefault((metric, size), []).append(float(value))

    def merged(self, other: Samples) -> Samples:
        if other.benchmark != self.benchmark:
            raise ResultsError(
                f"{other.source} holds {other.benchmark} results, {self.source} {self.benchmark}"
            )
        values = {k: list(v) for k, v in self.values.items()}
        for key, vals in other.values.items():
            values.setdefault(key, []).extend(vals)
        return replace(self, values=values, probes=[*self.probes, *other.probes])


def save_run(out: str | Path, name: str, result: dict, table: str) -> Path:
    """Write a run as OUT/NAME.json and its table as OUT/NAME.txt; the folder, for plots."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (folder / f"{name}.txt").write_text(table + "\n")
    return folder


def load(path: str | Path) -> Samples:
    """Read a benchmark result or a baseline file (see the module docstring)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror})") from None
    docs = _json_documents(text)
    if not docs:
        raise ResultsError(f"{path}: no JSON in it (a benchmark's --json output, or a baseline)")
    first = docs[0]
    if isinstance(first, dict) and first.get("format") == BASELINE_FORMAT:
        return _from_baseline(path, first)
    if isinstance(first, dict) and isinstance(first.get("results"), list):
        return _from_comm(path, docs)
    if isinstance(first, list) and first and all("pool_ms_per_test" in r for r in first):
        return _from_harness(path, docs)
    raise ResultsError(
        f"{path}: not a result rankgate bench compare knows (bench harness --json, bench comm "
        "--json, or a baseline written by rankgate bench compare --write-baseline)"
    )


def baseline_json(
    samples: Samples, *, command: str, note: str = "", sources: list[str] | None = None
) -> dict:
    """A baseline file's content: the samples, the metrics' settings, the machine, and
    the committed result files it was recorded from (``sources``)."""
    by_metric: dict[str, dict[str, list[float]]] = {}
    for (metric, size), vals in sorted(samples.values.items()):
        by_metric.setdefault(metric, {})[size] = [round(v, 6) for v in vals]
    return {
        "format": BASELINE_FORMAT,
        "benchmark": samples.benchmark,
        "machine": samples.machine,
        "command": command,
        "note": note,
        "sources": list(sources or []),
        "metrics": {name: m.to_json() for name, m in samples.metrics.items()},
        "probes": samples.probes,
        "samples": by_metric,
    }


def _from_baseline(path: Path, doc: dict) -> Samples:
    benchmark = doc.get("benchmark", "")
    if benchmark not in METRICS:
        raise ResultsError(f"{path}: baseline of unknown benchmark {benchmark!r}")
    metrics = dict(METRICS[benchmark])
    for name, settings in (doc.get("metrics") or {}).items():
        try:
            metrics[name] = Metric(name=name, **settings)
        except (TypeError, ValueError) as exc:
            raise ResultsError(f"{path}: metric {name}: {exc}") from None
    samples = Samples(benchmark=benchmark, metrics=metrics, machine=doc.get("machine") or {},
                      probes=list(doc.get("probes") or []), source=str(path),
                      sources=list(doc.get("sources") or []))  # fmt: skip
    for metric, sizes in (doc.get("samples") or {}).items():
        for size, vals in sizes.items():
            for v in vals:
                samples.add(metric, size, v)
    return samples


def _from_harness(path: Path, docs: list) -> Samples:
    samples = Samples(benchmark="harness", metrics=dict(METRICS["harness"]), source=str(path))
    for doc in docs:
        if isinstance(doc, dict) and PROBE_KEY in doc:
            samples.probes.extend(doc[PROBE_KEY])
        if not isinstance(doc, list):
            continue
        for row in doc:
            size = f"world {row['world']} {row.get('backend', 'gloo')}"
            pool, plain = row.get("pool_median_ms"), row.get("plain_median_ms")
            row = {**row, POOL_OVER_PLAIN: pool / plain if pool and plain else None}
            for metric in samples.metrics:
                samples.add(metric, size, row.get(metric))
    return samples


def _from_comm(path: Path, docs: list) -> Samples:
    samples = Samples(benchmark="comm", metrics=dict(METRICS["comm"]), source=str(path))
    for doc in docs:
        meta = doc.get("meta") or {}
        if meta.get("gpu"):
            samples.machine = {"gpu": meta["gpu"], "world": meta.get("world")}
        for row in doc.get("results") or []:
            if row.get("wrong"):
                continue  # a wrong result's time means nothing
            size = f"{row['collective']} {row['backend']} {row['dtype']} {row['bytes']}"
            for mode in ("graph", "eager"):
                rounds = row.get(f"{mode}_rounds_us") or [row.get(f"{mode}_us")]
                for value in rounds:
                    samples.add(f"{mode}_us", size, value)
            busbw, eager_us = row.get("eager_busbw"), row.get("eager_us")
            if busbw and eager_us and row["bytes"] >= BUSBW_MIN_BYTES:
                # busbw is bytes over time: each round's time gives that round's busbw
                for value in row.get("eager_rounds_us") or [eager_us]:
                    samples.add("busbw", size, busbw * eager_us / value)
    return samples


def _json_documents(text: str) -> list:
    """The whole text as JSON, else every line that is JSON (a saved --json run)."""
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    docs = []
    for line in text.splitlines():
        line = line.strip()
        if line[:1] in ("[", "{"):
            try:
                docs.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return docs
