"""Every test that .ci/run's stages ran before the CI was made faster still runs in one
of them: ci-tests-before.txt (the node IDs they collected, from tree_collection.py)
against what they collect now. A test may move to another stage; none may vanish."""

from __future__ import annotations

from pathlib import Path

import pytest
from tree_collection import LONG_ID, by_stage, ci_gate_is_quick, ci_stages, collect, lost, read_list

from rankgate.pipeline import stages

pytestmark = pytest.mark.unit

BEFORE = Path(__file__).with_name("ci-tests-before.txt")

# Tests that only re-ran other tests, and why what they ran still runs: each of these
# must be gone from the tree (a stale entry fails test_retired_tests_were_run_before_and_are_gone).
RETIRED = {
    "tests/containers/test_container.py::test_unit_suites_pass_inside": (
        "ran every unit test again inside the image; the unit stage runs them on the host"
    ),
    "tests/containers/test_container.py::test_distributed_cpu_suites_pass_inside": (
        "ran the comm and harness dist tests again inside the image; the dist stage runs "
        "them on the host, and the image's launchers are proven by "
        "test_torchrun_and_mpirun_run_tests_in_place_inside"
    ),
}


def test_no_test_that_ci_ran_before_is_lost(collected_tree):
    now = by_stage(collected_tree, {name: stages.get(name).markers for name in ci_stages()})
    missing = sorted(lost(read_list(BEFORE), now) - set(RETIRED))
    assert not missing, (
        f"{len(missing)} test(s) that .ci/run's stages ran before run in none of them now "
        f"(stages: {', '.join(ci_stages())}); run them in a stage again, or, for a test "
        f"deliberately renamed or removed, take its line out of {BEFORE.name}: "
        + "; ".join(missing[:20])
    )


def test_every_id_of_the_list_is_collected_today(collected_tree):
    # Each id as this pytest writes it: a test renamed, or an id another pytest writes
    # differently, shows here by name (the test above says only that CI lost it).
    listed = set().union(*read_list(BEFORE).values()) - set(RETIRED)
    absent = sorted(listed - set(collected_tree))
    assert not absent, (
        f"{len(absent)} id(s) of {BEFORE.name} are not collected: for a test renamed, "
        "write its new id in place of the old one; " + "; ".join(absent[:20])
    )


def test_no_id_depends_on_the_pytest_that_collects_it(collected_tree):
    assert not collected_tree.long_values, (
        f"parametrized values over {LONG_ID} characters without ids=: pytest 9.2 names "
        "them by argument and index, older pytests by the value, so the ids (and "
        f"{BEFORE.name}) depend on pytest's version; give them explicit ids=: "
        + "; ".join(collected_tree.long_values[:10])
    )


def test_a_long_parametrized_value_without_ids_is_found(tmp_path):
    message = "m" * (LONG_ID + 1)
    (tmp_path / "test_long.py").write_text(
        "import pytest\n"
        f"@pytest.mark.parametrize('message', [{message!r}, 'short'])\n"
        "def test_a(message): pass\n"
        f"@pytest.mark.parametrize('message', [{message!r}], ids=['named'])\n"
        "def test_b(message): pass\n"
    )
    tree = collect(tmp_path)
    assert len(tree) == 3
    assert tree.long_values == [f"message={message[:60]!r}..."]


def test_ci_runs_the_gate_in_full():
    # The quick gate leaves the slow tests out: every test above counts only if CI's
    # gate runs them.
    assert not ci_gate_is_quick(), ".ci/run's gate must run with --full"


def test_every_test_of_the_tree_runs_in_some_stage(collected_tree):
    # A new test without a stage's marker ran nowhere, and nothing said so.
    selected = by_stage(collected_tree, {stage.name: stage.markers for stage in stages.all_stages()})
    orphans = sorted(set(collected_tree) - set().union(*selected.values()))
    assert not orphans, (
        f"{len(orphans)} test(s) that no stage selects: mark them for one "
        f"({', '.join(f'{s.name}: {s.markers}' for s in stages.all_stages() if s.markers)}); "
        + "; ".join(orphans[:20])
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


def test_retired_tests_were_run_before_and_are_gone(collected_tree):
    before = set().union(*read_list(BEFORE).values())
    for node in RETIRED:
        assert node in before, f"{node} is not in {BEFORE.name}: nothing to retire"
        assert node not in collected_tree, f"{node} still exists: take it out of RETIRED"
