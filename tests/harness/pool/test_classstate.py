"""What a test class's set-up changed, as the ranks receive it."""

from __future__ import annotations

import threading
import unittest

import pytest

from rankgate.harness import rankstate, verdict_lines
from rankgate.harness.pool import classstate

pytestmark = pytest.mark.unit


def test_only_what_set_up_added_replaced_or_filled_is_sent():
    class Fresh:
        shared: list = []
        limit = 3
        lock = threading.Lock()  # made at import: the rank's import makes its own

        def helper(self):
            return self.limit

    baseline = classstate.class_baseline(Fresh)
    assert classstate.class_changes(Fresh, baseline) == {}
    Fresh.shared.append(1)  # filled in place
    Fresh.base = 10  # added
    Fresh.lock = threading.Lock()  # replaced: sent, and its pickling then names it
    changes = classstate.class_changes(Fresh, baseline)
    assert set(changes) == {"shared", "base", "lock"}
    assert changes["shared"] == [1] and changes["base"] == 10


def test_a_testcase_instance_sends_the_attributes_its_set_up_gave_it_only():
    class Case(unittest.TestCase):
        def test_it(self):
            pass

    case = Case("test_it")
    case.x = 7
    case.test_it = lambda: None  # what pytest binds while the test runs
    assert classstate.instance_attributes(case, "test_it") == {"x": 7}
    assert classstate.instance_attributes(None, "test_it") == {}


def test_hypothesis_tests_get_the_tests_seed_unless_they_chose_their_own():
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    @hypothesis.given(st.integers())
    def drawn(n):
        pass

    @hypothesis.seed(5)
    @hypothesis.given(st.integers())
    def own_seed(n):
        pass

    rankstate.same_examples_on_every_rank(drawn, 11)
    assert drawn._hypothesis_internal_use_seed == 11
    rankstate.same_examples_on_every_rank(drawn, 12)  # the next test's (a parameter's) seed
    assert drawn._hypothesis_internal_use_seed == 12
    rankstate.same_examples_on_every_rank(own_seed, 11)
    assert own_seed._hypothesis_internal_use_seed == 5
    rankstate.same_examples_on_every_rank(lambda: None, 11)  # not Hypothesis: untouched


@pytest.mark.parametrize(
    ("text", "strict_pass"),
    [
        ("[XPASS(strict)] fixed", True),
        ("Unexpected success", True),
        ("Failed: Unexpected success", True),  # JUnit's message
        ("AssertionError: Unexpected success", False),
        ("assert 1 == 2", False),
    ],
)
def test_a_strict_pass_reads_the_same_from_a_marker_and_from_unittest(text, strict_pass):
    assert verdict_lines.is_strict_xpass(text) is strict_pass
