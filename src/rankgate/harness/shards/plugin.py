"""The pytest side of shards: ``--rankgate-shard K/N`` and ``--rankgate-store-durations``.

Shard K keeps its tests and deselects the others (pytest counts them as deselected), after
every other selection (``-m``, ``-k``, a conftest's own), so N shards of one selection
together run exactly that selection. Durations are each test's setup, call and
teardown: in the pool a world test's call is its wall time over all its ranks; in place
every rank runs it side by side and rank 0, the one that writes, waits for the others.
Under pytest-xdist only the controller writes (it sees every worker's reports).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from rankgate.harness.shards.durations import DurationsError, read_durations, store_durations
from rankgate.harness.shards.split import ShardSpecError, Split, parse_shard, split

SHARD_PLUGIN = "rankgate-shards"


class ShardPlugin:
    """Picks this run's shard and records the tests' times (see the module docstring)."""

    def __init__(
        self,
        *,
        shard: tuple[int, int] | None,
        durations: dict[str, float],
        read_from: Path | None,
        store_to: Path | None,
        records: bool = False,
    ) -> None:
        self.shard = shard
        self.durations = durations
        self.read_from = read_from
        self.store_to = store_to
        self.records = records or store_to is not None
        """Times are recorded: by the writer, and in place by every rank (rank 0 learns
        at the end the times of the tests other ranks ran, ``inplace/ending.py``)."""
        self.times: dict[str, float] = defaultdict(float)
        self.split: Split | None = None
        self.kept = 0
        self.stored: str = ""

    @classmethod
    def from_config(cls, config: pytest.Config, *, writes: bool) -> ShardPlugin:
        """The options read and checked now: bad input is a usage error before collection.

        ``writes``: this process writes the durations file (not an xdist worker, not a
        rank above 0 in place).
        """
        spec = config.getoption("rankgate_shard")
        store = config.getoption("rankgate_store_durations")
        given = config.getoption("rankgate_durations")
        try:
            shard = parse_shard(spec) if spec is not None else None
            durations, read_from = _durations(given, store, shard is not None)
        except (ShardSpecError, DurationsError) as exc:
            raise pytest.UsageError(str(exc)) from None
        store_to = Path(store) if store and writes else None
        return cls(
            shard=shard,
            durations=durations,
            read_from=read_from,
            store_to=store_to,
            records=bool(store),
        )

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]):
        # Outermost: after -m, -k and every conftest have chosen the run's tests.
        result = yield
        if self.shard is not None:
            k, n = self.shard
            self.split = split([item.nodeid for item in items], self.durations, n)
            keep = set(self.split.members(k))
            others = [item for i, item in enumerate(items) if i not in keep]
            items[:] = [item for i, item in enumerate(items) if i in keep]
            self.kept = len(items)
            if others:
                config.hook.pytest_deselected(items=others)
        return result

    def pytest_report_collectionfinish(self, config: pytest.Config) -> str | None:
        if self.split is None or self.shard is None:
            return None
        k, n = self.shard
        plan = ", ".join(f"{s:.1f}" for s in self.split.predicted_s)
        source = f"times from {self.read_from}" if self.read_from else "no stored times"
        unknown = (
            f"; {self.split.unknown} without a stored time counted at {self.split.fallback_s:.2f} s"
            if self.split.unknown
            else ""
        )
        return (
            f"rankgate shard {k}/{n}: {self.kept} of {len(self.split.shard_of)} tests, "
            f"predicted {self.split.predicted_s[k - 1]:.1f} s (shards: {plan} s; {source}{unknown})"
        )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.records and report.when in ("setup", "call", "teardown"):
            self.times[report.nodeid] += report.duration

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.store_to is None or not self.times:
            return
        try:
            store_durations(self.store_to, self.times)
        except (DurationsError, OSError) as exc:
            # The run's verdict stands; the times of this run are what is lost, said loudly.
            self.stored = f"rankgate: durations NOT stored in {self.store_to}: {exc}"
        else:
            self.stored = f"rankgate: stored {len(self.times)} tests' durations in {self.store_to}"

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.stored:
            terminalreporter.write_line(self.stored)


def _durations(
    given: str | None, store: str | None, sharding: bool
) -> tuple[dict[str, float], Path | None]:
    """The times to split by, and where they came from.

    ``--rankgate-durations FILE`` must exist. Without it the store file is read when it
    exists (its first run finds none: every test then counts the same).
    """
    if given is not None:
        return read_durations(given), Path(given)
    if sharding and store and Path(store).exists():
        return read_durations(store), Path(store)
    if store and Path(store).exists():
        read_durations(store)  # a file it would merge into must be one it can read
    return {}, None
