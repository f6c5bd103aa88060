"""Every test that .ci/run's stages ran before the CI was made faster still runs in one
of them: ci-tests-before.txt (the node IDs they collected, from tree_collection.py)
against what they collect now. A test may move to another stage; none may vanish."""

from __future__ import annotations

from pathlib import Path

import pytest
from tree_collection import by_stage, ci_stages, lost, read_list

from rankgate.pipeline import stages

pytestmark = pytest.mark.unit

BEFORE = Path(__file__).with_name("ci-tests-before.txt")


def test_no_test_that_ci_ran_before_is_lost(collected_tree):
    now = by_stage(collected_tree, {name: stages.get(name).markers for name in ci_stages()})
    missing = sorted(lost(read_list(BEFORE), now))
    assert not missing, (
        f"{len(missing)} test(s) that .ci/run's stages ran before run in none of them now "
        f"(stages: {', '.join(ci_stages())}); run them in a stage again, or, for a test "
        f"deliberately renamed or removed, take its line out of {BEFORE.name}: "
        + "; ".join(missing[:20])
    )


def test_a_test_moved_to_another_stage_is_not_lost():
    before = {"unit": {"t.py::a", "t.py::b"}, "container": {"c.py::x"}}
    after = {"unit": {"t.py::a"}, "dist": {"t.py::b", "c.py::x"}, "container": set()}
    assert lost(before, after) == set()


def test_a_test_no_stage_selects_any_more_is_lost():
    before = {"unit": {"t.py::a", "t.py::b[1]", "t.py::b[2]"}, "hpc": {"h.py::h"}}
    after = {"unit": {"t.py::a", "t.py::b[1]"}, "hpc": set(), "dist": {"h.py::h2"}}
    assert lost(before, after) == {"t.py::b[2]", "h.py::h"}


def test_the_before_list_names_only_ci_stages_and_is_not_empty():
    before = read_list(BEFORE)
    assert set(before) <= set(ci_stages())
    assert all(before[stage] for stage in ("unit", "dist", "hpc", "container"))
