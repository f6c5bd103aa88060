import pickle

import pytest

from rankgate.harness.pool import messages

pytestmark = pytest.mark.unit


def test_round_trip_each_direction():
    data = messages.encode(messages.RUN, seed=3)
    assert messages.decode_for_rank(data) == ("run", {"seed": 3})
    data = messages.encode(messages.RESULT, outcome="passed")
    assert messages.decode_for_controller(data) == ("result", {"outcome": "passed"})


def test_unknown_message_is_an_error():
    with pytest.raises(messages.UnknownMessage, match="unexpected message 'result'"):
        messages.decode_for_rank(messages.encode(messages.RESULT))
    with pytest.raises(messages.UnknownMessage, match="unexpected message 'bogus'"):
        messages.decode_for_controller(messages.encode("bogus"))


def test_rank_value_pickles_and_refuses_use():
    value = pickle.loads(pickle.dumps(messages.RankValue("rank")))
    assert value.name == "rank"
    uses = (lambda v: v + 1, lambda v: v == 0, lambda v: [1, 2][v], int, bool, str)
    uses += (lambda v: f"shard-{v}", lambda v: f"{v:>3}", lambda v: format(v, ""))
    for use in uses:
        with pytest.raises(RuntimeError, match="the 'rank' fixture has no value outside a rank"):
            use(value)
    assert repr(value) == "<rank: known only inside a rank>"


def test_task_is_a_frozen_record_that_crosses_the_pipe():
    task = messages.TestTask(
        test_id="a.py::t",
        kwargs=b"",
        module="a",
        module_file="/x/a.py",
        rewrite=True,
        qualname="t",
        sys_path=("/x",),
        seed=7,
    )
    name, kwargs = messages.decode_for_rank(messages.encode(messages.RUN, task=task))
    assert (name, kwargs["task"]) == ("run", task)
    with pytest.raises(AttributeError):
        task.seed = 8
