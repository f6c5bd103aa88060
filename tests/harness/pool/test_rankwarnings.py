"""rankwarnings: the controller's filters on a rank, and the ranks' warnings warned again."""

from __future__ import annotations

import warnings

import pytest

from rankgate.harness.pool import rankwarnings

pytestmark = pytest.mark.unit


class NeedsTwoArguments(UserWarning):
    """A project's warning whose constructor pickle cannot call again (two arguments)."""

    def __init__(self, what: str, where: int) -> None:
        super().__init__(f"{what} at {where}")


def test_an_error_filter_travels_and_fails_the_body_where_it_warned():
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        filters = rankwarnings.current_filters()
    with pytest.raises(FutureWarning, match="old"), rankwarnings.recording(filters):
        warnings.warn("old", FutureWarning, stacklevel=1)


def test_a_category_that_cannot_be_pickled_is_left_out_and_the_rest_travel():
    class Local(UserWarning):  # defined in a function: pickle cannot name it
        pass

    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("ignore", Local)
        filters = rankwarnings.current_filters()
    assert len(filters) == 1
    with rankwarnings.recording(filters) as log:
        warnings.warn("kept", Local, stacklevel=1)
    assert [str(w.message) for w in log] == ["kept"]


def test_what_a_rank_recorded_is_warned_once_where_it_was_raised():
    with rankwarnings.recording(()) as log:
        warnings.simplefilter("always")
        warnings.warn("shared", UserWarning, stacklevel=1)
        warnings.warn(NeedsTwoArguments("custom", 3), stacklevel=1)
    sent = rankwarnings.records(log)
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("error")  # the ranks judged them: never an error here
        rankwarnings.warn_again([sent, sent])  # two ranks, the same warnings
    assert [(type(w.message), str(w.message)) for w in again] == [
        (UserWarning, "shared"),
        (UserWarning, f"{__name__}.NeedsTwoArguments: custom at 3"),
    ]
    assert {(w.filename, w.lineno) for w in again} == {(r["filename"], r["lineno"]) for r in sent}
    assert all(w.filename == __file__ for w in again)


def test_without_filters_the_ranks_own_stay():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning), rankwarnings.recording(()):
            warnings.warn("the rank's own filter", UserWarning, stacklevel=1)


def test_a_filter_is_pickled_once_and_still_comes_as_it_is_now():
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.simplefilter("error", FutureWarning)
        first = rankwarnings.current_filters()
        assert rankwarnings.current_filters() == first  # from the memo: the same bytes
        warnings.simplefilter("ignore", DeprecationWarning)  # a new entry travels too
        second = rankwarnings.current_filters()
    assert len(first) == 1 and len(second) == 2 and second[1] == first[0]
    with rankwarnings.recording(second) as log:
        warnings.warn("ignored", DeprecationWarning, stacklevel=1)
    assert log == []


def test_a_category_made_anew_under_an_old_name_is_pickled_anew():
    def make():
        class Local(UserWarning):  # a new class at each call: never pickled, never memoised
            pass

        return Local

    for _ in range(2):
        with warnings.catch_warnings():
            warnings.resetwarnings()
            warnings.simplefilter("ignore", make())
            warnings.simplefilter("error", FutureWarning)
            assert len(rankwarnings.current_filters()) == 1
