"""What both modes know about one test item: its world spec, its seed, its timeout
and the collectives' timeout that follows from it.

Plugin hooks, pool mode and in-place mode all read a test's spec, seed and timeout
from here, so the rules (marker timeout, else the default; a seed per test id) are
written once.
"""

from __future__ import annotations

import zlib

import pytest

from rankgate.harness import timeout_bridge
from rankgate.harness.spec import WorldSpec

SPEC_KEY = pytest.StashKey[WorldSpec]()
"""The parsed world marker of a world test (absent on plain tests)."""

PRELUDE_KEY = pytest.StashKey[dict]()
"""What each rank does before an adopted test (``rankgate.harness.adopt.prelude``)."""

NOT_ADOPTED_KEY = pytest.StashKey[tuple]()
"""(adoption target, why) of a test the adoption lines leave to the project's own way."""

MARKERS_SEEN_KEY = pytest.StashKey[list]()
"""The world markers the spec was read from: a later change is reported, never ignored."""


def world_spec(item: pytest.Item) -> WorldSpec | None:
    return item.stash.get(SPEC_KEY, None)


def seed_for_test(base_seed: int, nodeid: str) -> int:
    """Each test's seed: stable across runs and machines, different per test."""
    return (base_seed + zlib.crc32(nodeid.encode())) % 2**31


def test_timeout(item: pytest.Item, default: float) -> float:
    """Seconds before the test counts as hung: its world marker's timeout, else its
    pytest-timeout marker's (``timeout_bridge``), else ``default``."""
    spec = world_spec(item)
    return (spec.timeout if spec else None) or timeout_bridge.marker_seconds(item) or default


# A collective's own timeout ends a hang as a plain error, without stacks and with
# the process group left broken. Each test's collectives therefore get longer than
# the test's timeout, so the harness's timeout is always the one that fires.
COLLECTIVE_MARGIN_S = 60.0


def collective_timeout(test_timeout: float) -> float:
    """The process group's operation timeout while a test with this timeout runs."""
    return test_timeout + COLLECTIVE_MARGIN_S


EVERY_RANK_WITHOUT_LAUNCHER = (
    "@pytest.mark.every_rank runs on every rank a launcher started (torchrun, srun, mpirun), "
    "with the launcher's process group; this run has no launcher: run it under one, or "
    "mark it @pytest.mark.world(n) to run it on n ranks here"
)
"""Why a pool run (and each -n worker) skips an every_rank test: it has no launched ranks
to run it on, as a launched run skips world(k) with k above its size."""


def skip_at_test(reason: str) -> None:
    """Skip, reported at the test's location rather than the plugin's."""
    raise pytest.skip.Exception(reason, _use_item_location=True)
