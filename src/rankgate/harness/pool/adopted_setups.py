"""An adopted class's ``setup=`` (say a C++ op build) in the pool: it runs once on each
pool's ranks, as a step of its own under its own start timeout, before the first test
that needs it there (and again on the fresh pool of a rerun)."""

from __future__ import annotations

import dataclasses

from rankgate.harness.adopt.config import DEFAULT_SETUP_TIMEOUT_S
from rankgate.harness.pool.pool import Pool
from rankgate.harness.pool.tell_pytest import RankFailure
from rankgate.harness.pool.worldrun import WorldRun
from rankgate.harness.verdict import judge


class AdoptedSetups:
    """The set-ups each pool of one session has run."""

    def __init__(self) -> None:
        self._done: dict[int, tuple[Pool, set[str]]] = {}

    def ready(self, pool: Pool, run: WorldRun, test_id: str) -> Pool:
        """``pool``, once the set-up of ``run``'s task ran there; raises RankFailure
        naming the set-up when it failed (``run`` holds its outcomes and verdict)."""
        prelude = run.task.prelude or {}
        setup = prelude.get("setup")
        done = self._done.setdefault(id(pool), (pool, set()))
        if done[0] is not pool:  # a new pool under a reused id
            done = self._done[id(pool)] = (pool, set())
        if not setup or setup in done[1]:
            return pool
        seconds = prelude.get("setup_timeout") or DEFAULT_SETUP_TIMEOUT_S
        step = dataclasses.replace(run.task, prelude={**prelude, "setup_only": True})
        what = f"the start timeout of the adoption's setup={setup}"
        outcomes = pool.run(step, seconds, what=what)
        verdict = judge(outcomes, run.world, run.backend, test_id=test_id)
        if verdict.status == "passed":
            done[1].add(setup)
            return pool
        run.outcomes = outcomes
        summary = f"setup={setup} (the adoption's set-up, before the test): {verdict.summary}"
        run.verdict = dataclasses.replace(
            verdict,
            status="failed",
            summary=summary,
            text=verdict.text.replace(verdict.summary, summary, 1),
        )
        raise RankFailure(summary)
