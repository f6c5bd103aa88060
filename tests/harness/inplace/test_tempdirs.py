import pytest

from rankgate.harness.inplace.tempdirs import split_temp_dirs
from rankgate.harness.rankstate import SEND_FD_HINT, hint_for

pytestmark = pytest.mark.unit


def test_one_temp_dir_per_host_is_fine():
    assert split_temp_dirs([("a", "/tmp"), ("a", "/tmp"), ("b", "/scratch")]) is None


def test_a_host_whose_ranks_differ_is_named_with_its_ranks_and_dirs():
    text = split_temp_dirs([("a", "/t/0"), ("a", "/t/1"), ("b", "/tmp"), ("a", "/t/1")])
    assert text.startswith(
        "rankgate: ranks on one host have different temp dirs (on a: rank 0 /t/0, ranks 1, 3 /t/1)"
    )
    assert "on b" not in text
    assert "torch's symmetric memory" in text and "file-based stores" in text


def test_failed_to_send_fd_gets_the_temp_dir_hint_also_when_wrapped():
    error = RuntimeError("Failed to send fd: No such file or directory")
    assert hint_for(error) == SEND_FD_HINT
    try:
        try:
            raise error
        except RuntimeError as exc:
            raise ValueError("backend could not start") from exc
    except ValueError as wrapped:
        assert hint_for(wrapped) == SEND_FD_HINT
    assert hint_for(RuntimeError("something else")) == ""
