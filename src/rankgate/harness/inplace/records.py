"""What one in-place rank writes of each test: its JUnit file, its results file, its
terminal, and the count of failed tests that -x and --maxfail read.

A rank's own reports go into its files (``log_own``); its terminal shows the test's
verdict across ranks, or a report the rank made itself (hung, not run: ``log_both``).
Failures are counted from what the terminal shows, which is the same on every rank, so
-x and --maxfail stop every rank after the same test.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rankgate.harness import crashrecord, verdict_lines
from rankgate.harness.failure_repr import item_report, not_run_report
from rankgate.harness.inplace.verdict import failure_message, junit_outcome, own_result
from rankgate.harness.item_settings import world_spec
from rankgate.harness.output import JUNIT_LIMIT, clipped, plain_report
from rankgate.harness.rankfiles import (
    RUN_ID_PROPERTY,
    ResultsWriter,
    append_ledger,
    ledger_path,
    plan_path,
    rank_junit_path,
    results_path,
    write_plan,
)
from rankgate.harness.verdict_lines import (
    BACKEND_PROPERTY,
    INTERRUPTED_PROPERTY,
    INTERRUPTED_TEST_PROPERTY,
    NODE_ID_PROPERTY,
    NOT_RUN_PREFIX,
    OUTCOME_PROPERTY,
    RANKS_PROPERTY,
    WORLD_PROPERTY,
)
from rankgate.launch.env import LaunchEnv


def _csv(ranks) -> str:
    return ",".join(str(r) for r in ranks)


def _not_run(report: pytest.TestReport) -> bool:
    """A report of a test the run never started (``not_run_report``)."""
    return report.when == "setup" and str(report.longrepr).startswith(NOT_RUN_PREFIX)


def junit_names(nodeid: str) -> tuple[str, str]:
    """The classname and name pytest's JUnit writer gives this test."""
    from _pytest.junitxml import mangle_test_address

    names = mangle_test_address(nodeid)
    return ".".join(names[:-1]), names[-1]


def per_rank_files(config: pytest.Config, rank: int) -> Path:
    """Rank-suffixed JUnit path (``--junitxml`` rewritten); the terminal of ranks > 0 goes
    to ``pytest.rank<r>.log``. Returns the directory of both."""
    xmlpath = config.option.xmlpath
    out_dir = (Path(xmlpath).parent if xmlpath else Path.cwd()).resolve()
    if xmlpath:
        config.option.xmlpath = str(rank_junit_path(xmlpath, rank))
    if rank != 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        # Runs before the terminal reporter is created, which binds to sys.stdout.
        sys.stdout = open(out_dir / f"pytest.rank{rank}.log", "w", buffering=1)  # noqa: SIM115
    return out_dir


class RankRecords:
    """One rank's records of the session's tests, in the order the tests ran."""

    def __init__(
        self,
        config: pytest.Config,
        launch: LaunchEnv,
        skip_reason: Callable[[pytest.Item], str | None],
        run_id: str = "",
    ) -> None:
        self.config = config
        self.launch = launch
        self.run_id = run_id
        """The launch's id (:mod:`.run_id`), in every file this rank writes."""
        self._skip_reason = skip_reason
        self.items: list[pytest.Item] = []
        """The session's tests, in the order every rank runs them."""
        self.last_index = -1
        """The index in ``items`` of the last test recorded: later ones were not run."""
        self.log_shown = None
        """pytest_runtest_logreport of every plugin but JUnit's (the terminal's, say)."""
        self._results: ResultsWriter | None = None
        self._crash = crashrecord.CrashRecord(
            self.crash_path(launch.rank), launch.rank, run_id
        )  # where this rank's fatal error goes, for its peers and merge-junit to read
        self._ranks_of: Callable[[str], tuple[int, ...]] | None = None
        self._backend_of: Callable[[str], str] | None = None
        self._tests_failed = 0  # on any rank: what -x and --maxfail count, alike on every rank

    def xml(self):
        """pytest's JUnit writer, when this run writes a JUnit file."""
        from _pytest.junitxml import xml_key

        return self.config.stash.get(xml_key, None)

    def start(self, session: pytest.Session) -> None:
        """At the session's start: the JUnit file's rank properties, the results file."""
        xml = self.xml()
        others = [session]  # -x/--maxfail count the verdicts, alike on every rank (below)
        if xml is not None:  # merge-junit reads these: a missing rank is then a failure
            xml.add_global_property("rank", str(self.launch.rank))
            xml.add_global_property("world_size", str(self.launch.world_size))
            if self.run_id:
                xml.add_global_property(RUN_ID_PROPERTY, self.run_id)
            if self._junit_logging_unset():
                xml.logging = "out-err"  # every rank's output in its file, as pool mode does
            self._results = ResultsWriter(
                results_path(self.config.option.xmlpath),
                self.launch.rank,
                self.launch.world_size,
                self.run_id,
            )
            others.append(xml)
        self.log_shown = self.config.pluginmanager.subset_hook_caller(
            "pytest_runtest_logreport", remove_plugins=others
        )
        self._crash.start()

    def crash_path(self, rank: int) -> Path:
        """Rank ``rank``'s crash record: beside its JUnit file, else in the run's folder."""
        xmlpath = self.config.option.xmlpath  # this rank's, junit.rank<r>.xml by now
        if not xmlpath:
            return Path.cwd() / f"pytest.rank{rank}{crashrecord.SUFFIX}"
        path = Path(xmlpath)
        stem = path.stem.removesuffix(f".rank{self.launch.rank}")
        return crashrecord.crash_path(path.with_name(f"{stem}.rank{rank}{path.suffix}"))

    def crashes(self, ranks, test_file: str) -> dict[int, crashrecord.Crash]:
        """What the records of ``ranks`` (peers that died) say of their deaths, where
        this rank can read them (they ran on this host, or share its folder)."""
        found = {}
        for rank in ranks:
            crash = crashrecord.read(self.crash_path(rank), self.run_id, test_file)
            if crash is not None:
                found[rank] = crash
        return found

    def _junit_logging_unset(self) -> bool:
        # pytest's default ("no"), from the ini file, -o or nowhere alike: pytest has no
        # public way to tell them apart (config.inicfg is deprecated since pytest 9.2)
        return self.config.getini("junit_logging") == "no"

    def collected(
        self,
        items: list[pytest.Item],
        ranks_of: Callable[[str], tuple[int, ...]],
        backend_of: Callable[[str], str] | None = None,
        planned: list[tuple[pytest.Item, object]] | None = None,
    ) -> None:
        """This rank's share of the run's tests, in the results file: a rank killed
        mid-run leaves the tests after the one it died in "not run", not unmentioned.
        ``ranks_of``: the global ranks that run a test (named in both files);
        ``backend_of``: the backend a world test's body runs on, from the one it asks for
        (its JUnit properties, as the pool's); ``planned``: every rank's tests (each with
        its share), into the plan file (a test whose ranks left no file is still merged)."""
        self.items = list(items)
        self._ranks_of = ranks_of
        self._backend_of = backend_of
        if self._results is not None:
            self._results.collected([self._named(i) for i in self.items])
        xmlpath = self.config.option.xmlpath
        if planned is not None and xmlpath:
            tests = [self._named(item) for item, _ in planned]
            try:
                write_plan(plan_path(xmlpath), self.run_id, self.launch.world_size, tests)
            except OSError:
                pass  # the JUnit file says the same of this rank's own share

    def _named(self, item: pytest.Item) -> dict:
        classname, name = junit_names(item.nodeid)
        ranks = list(self._ranks_of(item.nodeid)) if self._ranks_of else []
        return {"classname": classname, "name": name, "nodeid": item.nodeid, "ranks": ranks}

    def reached(self, item: pytest.Item) -> None:
        """``item`` is recorded (or being recorded): the tests after it were not run."""
        for position in range(self.last_index + 1, len(self.items)):
            if self.items[position] is item:
                self.last_index = position
                return

    def log_ledger(self, item: pytest.Item, entries: list[dict] | None) -> None:
        """This rank's ledger of ``item`` (a test that went wrong), beside its results
        file, for merge-junit to compare with the other ranks'."""
        xmlpath = self.config.option.xmlpath
        if entries is None or not xmlpath:
            return
        classname, name = junit_names(item.nodeid)
        try:
            append_ledger(ledger_path(xmlpath), classname, name, entries, self.run_id)
        except OSError:
            pass  # the verdicts shown here carry the divergence all the same

    def begin(self, item: pytest.Item) -> None:
        """The test starts: a rank that dies now leaves its name in the results file."""
        if self._results is not None:
            self._results.begin(*junit_names(item.nodeid))

    def log_own(
        self,
        item: pytest.Item,
        reports: list[pytest.TestReport],
        properties: list[tuple[str, str]] = (),
        *,
        junit: bool = True,
        results: bool = True,
    ) -> None:
        """This rank's own reports: into its JUnit file (with ``properties``, say every
        attempt of a rerun test) and its results file (``junit``/``results``: only one)."""
        # Each stream cut as the pool cuts a rank's in its JUnit (harness.output).
        reports = clipped([plain_report(item, r) for r in reports], JUNIT_LIMIT)
        # What the verdict makes of them, once; the files below only write it down.
        mine = own_result(reports)
        outcome, message = junit_outcome(mine), failure_message(reports)
        xml = self.xml() if junit else None
        if xml is not None:
            self._log_junit(xml, reports, self._named_properties(item, outcome), properties)
        if self._results is not None and results:
            self._results.end(
                {
                    **self._named(item),  # ranks [] where no plan names them: none
                    "outcome": outcome,  # as the JUnit file says it
                    "message": message,
                    "text": mine.text,
                    "time": sum(r.duration for r in reports),
                    # The last phase's report carries every phase's captured output.
                    "stdout": reports[-1].capstdout if reports else "",
                    "stderr": reports[-1].capstderr if reports else "",
                }
            )

    def _named_properties(self, item: pytest.Item, outcome: str) -> list[tuple[str, str]]:
        """The properties merge-junit reads of a test: its node id as pytest names it
        (JUnit mangles it), its ranks, its world and backend as the pool's, xpassed."""
        named = [(NODE_ID_PROPERTY, item.nodeid)]
        if self._ranks_of is not None:
            named.append((RANKS_PROPERTY, _csv(self._ranks_of(item.nodeid))))
        spec = world_spec(item)
        if spec is not None and self._backend_of is not None:
            named.append((WORLD_PROPERTY, str(spec.size)))
            named.append((BACKEND_PROPERTY, self._backend_of(spec.backend)))
        if outcome == "xpassed":
            named.append((OUTCOME_PROPERTY, "xpassed"))
        return named

    @staticmethod
    def _log_junit(xml, reports: list, named: list, properties: list) -> None:
        """``reports`` into the JUnit file; the test's ``named`` properties once (a
        test recorded twice, say hung after its own result, is named once), then
        ``properties`` (say every attempt of a rerun test)."""
        if reports:
            node = xml.node_reporter(reports[0])
            for prop in named:
                if prop not in node.properties:
                    node.add_property(*prop)
            for prop in properties:
                node.add_property(*prop)
        for report in reports:
            xml.pytest_runtest_logreport(report=report)

    def log_both(
        self,
        item: pytest.Item,
        reports: list[pytest.TestReport],
        shown: list[pytest.TestReport] | None = None,
        *,
        results: bool = True,
    ) -> None:
        """A report this rank makes for itself (not run, hung): its files (``results``:
        False when the results file has this rank's own result already), and its terminal
        (``shown`` there instead, when given)."""
        self.log_own(item, reports, results=results)
        shown = reports if shown is None else shown
        for report in shown:
            self.log_shown(report=report)
        self.count_failure(item, shown)

    def count_failure(self, item: pytest.Item, shown: list[pytest.TestReport]) -> None:
        """-x and --maxfail count tests failed on any rank, so every rank stops together
        (a test not run is no failure of its own)."""
        if not any(r.failed and not hasattr(r, "wasxfail") and not _not_run(r) for r in shown):
            return
        self._tests_failed += 1
        item.session.testsfailed += 1
        maxfail = self.config.getoption("maxfail")
        if maxfail and self._tests_failed >= maxfail:
            item.session.shouldfail = (
                f"stopping after {self._tests_failed} failures (counted on every rank)"
            )

    def report_not_run(self, reason: str) -> str:
        """Every test after the last one started: "not run" saying why (a known skip stays).
        Returns how many of each, as merge-junit counts them ("12 later tests not run, 1
        skipped")."""
        rest = self.items[self.last_index + 1 :]
        skipped = 0
        for item in rest:
            skip = self._known_skip(item)
            if skip is None:
                report = not_run_report(item, reason)
            else:
                path, lineno, _ = item.location
                skipped_at = (path, (lineno or 0) + 1, f"Skipped: {skip}")
                report = item_report(item, outcome="skipped", longrepr=skipped_at, when="setup")
            self.log_both(item, [report])
            skipped += skip is not None
        self.last_index = len(self.items) - 1
        words = f"{verdict_lines.count(len(rest) - skipped, 'later test')} not run"
        return words + (f", {skipped} skipped" if skipped else "")

    def _known_skip(self, item: pytest.Item) -> str | None:
        """The skip a test not run would have had, where it is known without running it."""
        from _pytest.skipping import evaluate_skip_marks

        try:
            marked = evaluate_skip_marks(item)
        except Exception:  # a skipif condition that raises: running it would say so
            return None
        return marked.reason if marked is not None else self._skip_reason(item)

    def write_now(self, interrupted: tuple[str, pytest.Item | None] | None) -> None:
        """A stopping rank writes its JUnit file itself (its session never finishes),
        marked interrupted with why and the running test, when a signal cut the run short."""
        xml = self.xml()
        if xml is None:
            return
        if interrupted is not None:
            why, running = interrupted
            xml.add_global_property(INTERRUPTED_PROPERTY, why)
            if running is not None:
                test = "::".join(junit_names(running.nodeid))
                xml.add_global_property(INTERRUPTED_TEST_PROPERTY, test)
        xml.pytest_sessionfinish()
        self.close_results()

    def close_results(self) -> None:
        """The JUnit file holds everything now: the results file can go (and this rank's
        crash record: it did not crash)."""
        self._crash.close()
        if self._results is not None:
            self._results.close(remove=True)
            self._results = None
