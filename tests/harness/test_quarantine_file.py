"""The quarantine file and its history, read and checked without a pytest run."""

from __future__ import annotations

import json

import pytest

from rankgate.harness.quarantine import (
    DEFAULT_PASSES_TO_LEAVE,
    QuarantineError,
    load,
    next_streak,
    read_history,
    stale,
    streak_text,
    write_history,
)

pytestmark = pytest.mark.unit

ENTRY = '[[test]]\nid = "t.py::test_a"\nreason = "slow runner"\nissue = "https://x/1"\n'


def test_a_listed_test_covers_its_parametrized_cases(tmp_path):
    path = tmp_path / "q.toml"
    path.write_text(ENTRY)
    listed = load(path)
    assert listed.passes_to_leave == DEFAULT_PASSES_TO_LEAVE
    assert listed.history_path == tmp_path / "q.history.json"
    assert listed.entry_for("t.py::test_a").reason == "slow runner"
    assert listed.entry_for("t.py::test_a[2-gloo]").issue == "https://x/1"
    assert listed.entry_for("t.py::test_ab") is None


def test_the_history_path_is_relative_to_the_file(tmp_path):
    path = tmp_path / "q.toml"
    path.write_text('history = "state/h.json"\npasses_to_leave = 3\n' + ENTRY)
    listed = load(path)
    assert (listed.history_path, listed.passes_to_leave) == (tmp_path / "state/h.json", 3)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[[test]]\nid = "a"\nreason = "r"\nissue = ""\n', "has no issue"),
        ('[[test]]\nid = "a"\nreason = "r"\nissue = "i"\nowner = "me"\n', "['owner']"),
        ("passes_to_leave = true\n", "passes_to_leave = True must be a whole number"),
        ('history = ""\n', "history = '' is not a path"),
        ('test = "a"\n', "'test' must be [[test]] tables"),
    ],
)
def test_bad_files_name_the_problem(tmp_path, text, problem):
    path = tmp_path / "q.toml"
    path.write_text(text)
    with pytest.raises(QuarantineError) as raised:
        load(path)
    assert str(raised.value).startswith(f"quarantine file {path}: ")
    assert problem in str(raised.value)


def test_passes_in_a_row():
    assert next_streak(2, "passed") == 3
    assert next_streak(2, "skipped") == 2
    assert next_streak(2, "failed") == 0
    assert next_streak(2, "flaky") == 0  # a pass only on a rerun is no clean pass
    assert streak_text(3, 5) == "3 of 5"
    assert streak_text(5, 5) == "5 of 5: ready to leave the list"


def test_history_round_trip_and_a_foreign_file_is_refused(tmp_path):
    path = tmp_path / "h.json"
    assert read_history(path) == {}
    write_history(path, {"t.py::b": 0, "t.py::a": 2})
    assert read_history(path) == {"t.py::a": 2, "t.py::b": 0}
    assert list(json.loads(path.read_text())["tests"]) == ["t.py::a", "t.py::b"]
    for foreign in ('{"something": "else"}', "[1, 2]"):
        path.write_text(foreign)
        with pytest.raises(QuarantineError) as raised:
            read_history(path)
        assert "not a rankgate.quarantine-history/1 file" in str(raised.value)


def test_an_entry_that_matches_no_test_is_named_with_its_file(tmp_path):
    (tmp_path / "t.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.parametrize('x', [1])\ndef test_a(x):\n    pass\n\n"
        "class TestK:\n    def test_m(self):\n        pass\n"
    )
    path = tmp_path / "q.toml"
    ids = ["t.py::test_a", "t.py::test_a[1]", "t.py::TestK::test_m", "t.py::test_renamed",
           "t.py::TestK::test_gone", "gone.py::test_a"]  # fmt: skip
    path.write_text("".join(ENTRY.replace("t.py::test_a", i) for i in ids))
    assert stale(load(path), tmp_path) == [
        f"quarantine entry 't.py::test_renamed' in {path} matches no test (t.py defines no "
        "test_renamed): remove it from the list, or correct its id",
        f"quarantine entry 't.py::TestK::test_gone' in {path} matches no test (t.py defines "
        "no TestK::test_gone): remove it from the list, or correct its id",
        f"quarantine entry 'gone.py::test_a' in {path} matches no test (no file gone.py under "
        f"{tmp_path}): remove it from the list, or correct its id",
    ]
