"""The record of every attempt of a rerun test: its JSON form, its lines, flaky or not."""

from __future__ import annotations

import pytest

from rankgate.harness.attempts import (
    ERROR_CHARS,
    Attempt,
    attempts_line,
    attempts_text,
    decode,
    encode,
    flaky_summary,
    is_flaky,
)

pytestmark = pytest.mark.unit

FAILED = Attempt(
    number=1,
    verdict="failed",
    summary="rank 1 failed; rank 0 passed (world 2, backend gloo)",
    ranks={0: "passed", 1: "failed"},
    errors={1: "AssertionError: first"},
)
PASSED = Attempt(number=2, verdict="passed", ranks={0: "passed", 1: "passed"})


def test_attempts_cross_files_as_json_and_come_back_equal():
    assert decode(encode([FAILED, PASSED])) == [FAILED, PASSED]


@pytest.mark.parametrize("junk", ["", "not json", "{}", '[{"verdict": "x"}]', "[1]"])
def test_a_property_that_is_not_a_record_of_attempts_reads_as_none(junk):
    assert decode(junk) == []


def test_a_long_error_keeps_its_end_in_the_property():
    long = Attempt(number=1, verdict="failed", errors={0: "x" * ERROR_CHARS + "THE END"})
    (back,) = decode(encode([long]))
    assert len(back.errors[0]) == ERROR_CHARS and back.errors[0].endswith("THE END")


def test_flaky_is_failed_then_passed():
    assert is_flaky([FAILED, PASSED])
    assert not is_flaky([FAILED, FAILED]) and not is_flaky([PASSED]) and not is_flaky([])


def test_lines_say_every_attempt():
    assert attempts_line([FAILED, PASSED]) == "attempt 1 failed, attempt 2 passed"
    assert FAILED.line() == (
        "attempt 1 failed: rank 1 failed; rank 0 passed (world 2, backend gloo)"
    )
    assert PASSED.line() == "attempt 2 passed"
    text = attempts_text([FAILED, PASSED])
    assert text.index("attempt 1 failed") < text.index("AssertionError: first")
    assert text.index("AssertionError: first") < text.index("attempt 2 passed")
    assert flaky_summary([FAILED, PASSED], "pass") == (
        "flaky: attempt 1 failed, attempt 2 passed; counted as flaky"
    )
    assert flaky_summary([FAILED, PASSED], "fail").endswith("fails the run (--rankgate-flaky=fail)")
