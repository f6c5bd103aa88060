"""The ledger's wrapper: what one recorded call leaves behind (no process group needed)."""

from __future__ import annotations

import inspect
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from rankgate.harness import ledger

pytestmark = pytest.mark.unit

WORLD = object()
SUB = object()


def _like(function) -> inspect.Signature:
    """A stand-in's parameters: the wrapper takes torch's function's own."""
    return inspect.signature(function)


PARAMS = _like(lambda tensor, op=torch.distributed.ReduceOp.SUM, group=None, async_op=False: 0)
BARRIER = _like(lambda group=None, async_op=False: 0)


@pytest.fixture
def recorded(monkeypatch):
    """A fresh ledger whose default group is WORLD, and groups named without torch."""
    monkeypatch.setattr(ledger, "_group_member", SimpleNamespace(WORLD=WORLD))
    monkeypatch.setattr(ledger, "_LIBRARIES", ("/nowhere/torch/",))
    monkeypatch.setattr(ledger, "_file_kinds", {})  # per caller's file, as _c10d_file says now
    monkeypatch.setattr(
        ledger,
        "_describe_group",
        lambda g: ("world", (0, 1)) if g is None else ("sub", (0,)),
    )
    ledger.begin_test()
    yield
    ledger.begin_test()


class Work:
    """torch's Work as the ledger reads it: done or not, and its future's error."""

    def __init__(self, done: bool, error: Exception | None = None) -> None:
        self.done, self.error = done, error

    def is_completed(self) -> bool:
        return self.done

    def get_future(self):
        return self

    def value(self):
        if self.error is not None:
            raise self.error


def test_each_call_is_numbered_per_group_with_its_call_site(recorded):
    all_reduce = ledger._wrap("all_reduce", lambda *a, **k: None, PARAMS)
    t = torch.ones(4)
    all_reduce(t)
    line = sys._getframe().f_lineno - 1
    all_reduce(t, group=SUB)
    all_reduce(t, group=WORLD)  # the default group named: the same count as unnamed
    records = ledger.snapshot()
    assert [(r["group"], r["seq"]) for r in records] == [("world", 1), ("sub", 1), ("world", 2)]
    assert records[0] == {
        "group": "world",
        "ranks": [0, 1],
        "seq": 1,
        "op": "all_reduce",
        "arg": "float32[4]",
        "file": __file__,
        "line": line,
        "state": "completed",
        "reduce": "SUM",
        "root": "",
    }


def test_the_reduce_op_is_recorded_as_given_or_torchs_default(recorded):
    all_reduce = ledger._wrap("all_reduce", lambda *a, **k: None, PARAMS)
    barrier = ledger._wrap("barrier", lambda *a, **k: None, BARRIER)
    all_reduce(torch.ones(4), torch.distributed.ReduceOp.MAX)
    all_reduce(torch.ones(4), op=torch.distributed.ReduceOp.MIN)
    all_reduce(torch.ones(4))
    barrier()
    assert [r["reduce"] for r in ledger.snapshot()] == ["MAX", "MIN", "SUM", ""]


def _digest_of(calls, monkeypatch):
    monkeypatch.setattr(ledger, "_installed", True)
    ledger.begin_test()
    all_reduce = ledger._wrap("all_reduce", lambda *a, **k: None, PARAMS)
    send = ledger._wrap("send", lambda *a, **k: None, _like(lambda tensor, dst=None, group=None: 0))
    for tensor, kwargs in calls:
        all_reduce(tensor, **kwargs)
    send(torch.ones(1), 1)  # point-to-point: never compared
    return ledger.digest()


def test_the_digest_changes_with_dtype_shape_reduce_op_and_count(recorded, monkeypatch):
    base = [(torch.ones(4), {}), (torch.ones(4), {"group": SUB})]
    digest = _digest_of(base, monkeypatch)
    assert sorted(digest) == ["sub", "world"]
    assert digest["world"][:2] == [[0, 1], 1]
    assert _digest_of(base, monkeypatch) == digest  # the same calls, the same digest
    changed = [
        [(torch.ones(4, dtype=torch.float64), {}), base[1]],
        [(torch.ones(8), {}), base[1]],
        [(torch.ones(4), {"op": torch.distributed.ReduceOp.MAX}), base[1]],
        [*base, (torch.ones(4), {})],
    ]
    for calls in changed:
        assert _digest_of(calls, monkeypatch)["world"] != digest["world"]
        assert _digest_of(calls, monkeypatch)["sub"] == digest["sub"]


def test_a_reduce_op_object_reads_as_its_type_on_every_rank(recorded, monkeypatch):
    # dist.ReduceOp(SUM) objects (a comm layer's) print their address, different on every
    # rank: the digest and the records word them by the type they equal.
    ops = [torch.distributed.ReduceOp(torch.distributed.ReduceOp.SUM) for _ in range(2)]
    digests = [_digest_of([(torch.ones(4), {"op": op})], monkeypatch) for op in ops]
    assert digests[0] == digests[1]
    assert digests[0] == _digest_of([(torch.ones(4), {})], monkeypatch)  # torch's SUM
    assert ledger.snapshot()[0]["reduce"] == "SUM"


def test_a_group_where_a_call_raised_has_no_crc(recorded, monkeypatch):
    # The test saw it fail (a timeout it provoked and caught): not a silent disagreement.
    def timing_out(*args, **kwargs):
        raise RuntimeError("timed out")

    monkeypatch.setattr(ledger, "_installed", True)
    ledger.begin_test()
    all_reduce = ledger._wrap("all_reduce", timing_out, PARAMS)
    with pytest.raises(RuntimeError):
        all_reduce(torch.ones(8), group=SUB)
    assert ledger.digest()["sub"][1:] == [1, None]


def test_no_digest_without_a_ledger(monkeypatch):
    monkeypatch.setattr(ledger, "_installed", False)
    assert ledger.digest() is None


def test_states_follow_the_call(recorded):
    def raising(*args, **kwargs):
        raise RuntimeError("gloo says no")

    failing = ledger._wrap("all_reduce", raising, PARAMS)
    pending = ledger._wrap("all_reduce", lambda *a, **k: Work(False), PARAMS)
    finished = ledger._wrap("all_reduce", lambda *a, **k: Work(True), PARAMS)
    timed_out = ledger._wrap(
        "all_reduce", lambda *a, **k: Work(True, RuntimeError("timed out")), PARAMS
    )
    with pytest.raises(RuntimeError):
        failing(torch.ones(1))
    pending(torch.ones(1), async_op=True)
    finished(torch.ones(1), async_op=True)
    timed_out(torch.ones(1), async_op=True)  # its wait() raised in the caller's code
    states = [r["state"] for r in ledger.snapshot()]
    assert states == ["failed", "issued", "completed", "failed"]


def test_lists_of_tensors_and_no_tensor(recorded):
    all_gather = ledger._wrap(
        "all_gather",
        lambda *a, **k: None,
        _like(lambda tensor_list, tensor, group=None, async_op=False: 0),
    )
    barrier = ledger._wrap("barrier", lambda *a, **k: None, BARRIER)
    all_gather([torch.zeros(2, 3, dtype=torch.bfloat16)] * 2, torch.zeros(2, 3))
    barrier()
    assert [r["arg"] for r in ledger.snapshot()] == ["2x bfloat16[2, 3]", ""]


def test_a_new_test_starts_empty_and_counts_from_one(recorded):
    all_reduce = ledger._wrap("all_reduce", lambda *a, **k: None, PARAMS)
    all_reduce(torch.ones(1))
    ledger.begin_test()
    all_reduce(torch.ones(1))
    assert [r["seq"] for r in ledger.snapshot()] == [1]


def test_the_ledger_keeps_the_newest_entries(recorded):
    all_reduce = ledger._wrap("all_reduce", lambda *a, **k: None, PARAMS)
    for _ in range(ledger.CAPACITY + 5):
        all_reduce(torch.ones(1))
    seqs = [r["seq"] for r in ledger.snapshot()]
    assert len(seqs) == ledger.CAPACITY
    assert seqs[0] == 6 and seqs[-1] == ledger.CAPACITY + 5


def test_a_call_from_inside_torch_is_not_recorded_twice(recorded, monkeypatch):
    irecv = ledger._wrap("irecv", lambda *a, **k: None, _like(lambda tensor, src=None: 0))
    scope: dict = {"irecv": irecv}
    torch_recv = "def recv(tensor, src=None):\n    return irecv(tensor)\n"
    exec(compile(torch_recv, "/torch/c10d.py", "exec"), scope)
    monkeypatch.setattr(ledger, "_c10d_file", "/torch/c10d.py")
    recv = ledger._wrap("recv", scope["recv"])
    recv(torch.ones(1))
    assert [(r["op"], r["group"]) for r in ledger.snapshot()] == [("recv", "p2p:world")]


def test_turned_off_it_wraps_nothing(monkeypatch):
    monkeypatch.setenv(ledger.ENV, "0")
    monkeypatch.setattr(ledger, "_installed", False)
    import torch.distributed as dist

    before = dist.all_reduce
    assert ledger.install() is False
    assert dist.all_reduce is before
    assert ledger.now() is None


@pytest.mark.parametrize(
    ("setting", "backend", "records"),
    [
        (None, "gloo", True),
        (None, "nccl", True),  # where the stacks name the wrong rank without it
        (None, "cpu:gloo,cuda:nccl", True),  # in place on GPUs
        (None, "", True),  # the ledger's own benchmark: no group yet
        ("1", "nccl", True),
        ("0", "gloo", False),
        ("0", "nccl", False),
    ],
)
def test_unasked_it_records_on_every_backend(monkeypatch, setting, backend, records):
    if setting is None:
        monkeypatch.delenv(ledger.ENV, raising=False)
    else:
        monkeypatch.setenv(ledger.ENV, setting)
    assert ledger.enabled(backend) is records
    assert ledger.setting_problem() is None


def test_follow_puts_the_wrappers_on_and_takes_them_off(monkeypatch):
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    monkeypatch.delenv(ledger.ENV, raising=False)
    was_installed = ledger.installed()
    ledger.uninstall()
    own = dist.all_reduce
    try:
        assert ledger.follow("gloo") is True and ledger.installed()
        wrapped = dist.all_reduce
        assert wrapped is not own and wrapped.__wrapped__ is own and c10d.all_reduce is wrapped
        assert ledger.follow("cpu:gloo,cuda:nccl") is True and dist.all_reduce is wrapped
        monkeypatch.setenv(ledger.ENV, "0")
        assert ledger.follow("gloo") is False and not ledger.installed()
        assert dist.all_reduce is own and c10d.all_reduce is own
        assert ledger.now() is None
        monkeypatch.delenv(ledger.ENV)
        assert ledger.follow("nccl") is True and dist.all_reduce is wrapped  # the same wrapper
    finally:
        ledger.uninstall()
        assert dist.all_reduce is own
        if was_installed:
            ledger.install()


def test_a_setting_other_than_0_or_1_names_the_variable(monkeypatch):
    monkeypatch.setenv(ledger.ENV, "on")
    assert ledger.setting_problem() == (
        "RANKGATE_LEDGER='on': set 1 to record collectives on every backend, 0 on none"
    )


def test_odd_arguments_never_break_the_call(recorded):
    called = []
    all_reduce = ledger._wrap("all_reduce", lambda *a, **k: called.append(a), PARAMS)
    all_reduce(torch.ones(1), None, [])  # an unhashable "group": torch's to reject, not ours
    assert called and ledger.snapshot() == []


def _raise_in_collective(recorded_call) -> RuntimeError:
    try:
        recorded_call(torch.ones(4))
    except RuntimeError as exc:
        return exc
    raise AssertionError("the collective did not raise")


def test_a_failures_traceback_in_the_pool_leaves_out_the_wrapper(recorded):
    from rankgate.harness.pool import worker

    def broken(*args, **kwargs):
        raise RuntimeError("Connection reset by peer")

    exc = _raise_in_collective(ledger._wrap("barrier", broken, PARAMS))
    shown = worker._format(exc)
    assert "rankgate/harness/ledger.py" not in shown and "in barrier" not in shown
    assert f'File "{__file__}"' in shown  # the test's own frame and torch's are kept
    assert "in broken" in shown
    assert shown.endswith("RuntimeError: Connection reset by peer\n")


def test_pytest_hides_the_wrapper_frame(recorded):
    def broken(*args, **kwargs):
        raise RuntimeError("peer gone")

    exc = _raise_in_collective(ledger._wrap("barrier", broken, PARAMS))
    tb = exc.__traceback__
    hidden = []
    while tb is not None:  # pytest drops every frame whose locals say so
        if tb.tb_frame.f_locals.get("__tracebackhide__"):
            hidden.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    assert hidden == [ledger.__file__]


def test_a_wrapper_file_is_known_by_its_path_tail():
    assert ledger.is_wrapper_file("/venv/lib/python3.12/site-packages/rankgate/harness/ledger.py")
    assert ledger.is_wrapper_file(ledger.__file__)
    assert not ledger.is_wrapper_file("/proj/tests/ledger.py")


def test_a_group_is_named_as_it_was_when_called(recorded, monkeypatch):
    # A test that destroys its group before the verdict reads the ledger: its entries
    # still name the group they were issued on (before, "ranks []").
    all_reduce = ledger._wrap("all_reduce", lambda *a, **k: None, PARAMS)
    all_reduce(torch.ones(1))
    monkeypatch.setattr(ledger, "_describe_group", lambda g: ("unknown", ()))
    (record,) = ledger.snapshot()
    assert (record["group"], record["ranks"]) == ("world", [0, 1])


def test_a_tests_destroy_of_the_default_group_is_recorded_where_it_was_called(
    recorded, monkeypatch
):
    member = SimpleNamespace(WORLD=WORLD)
    monkeypatch.setattr(ledger, "_group_member", member)
    all_reduce = ledger._wrap("all_reduce", lambda *a, **k: None, PARAMS)

    def destroy(group=None):
        member.WORLD = None

    destroy_process_group = ledger._wrap_destroy(destroy)
    all_reduce(torch.ones(1))
    destroy_process_group()
    line = sys._getframe().f_lineno - 1
    records = ledger.snapshot()
    assert [(r["group"], r["ranks"], r["seq"], r["op"]) for r in records] == [
        ("world", [0, 1], 1, "all_reduce"),
        ("world", [0, 1], 2, "destroy_process_group"),
    ]
    assert (records[1]["file"], records[1]["line"], records[1]["state"]) == (
        __file__,
        line,
        "completed",
    )


def test_a_destroy_that_ends_nothing_is_not_recorded(recorded):
    # An adopted torch test's destroy is redirected and leaves rankgate's group in place.
    ledger._wrap_destroy(lambda group=None: None)()
    assert ledger.snapshot() == []


def test_the_harness_own_destroy_is_not_recorded(recorded, monkeypatch):
    # Between tests (in place, a new group) and at a pool's end, called from rankgate
    # under pytest's or multiprocessing's frames, which are outside torch and rankgate.
    member = SimpleNamespace(WORLD=WORLD)
    monkeypatch.setattr(ledger, "_group_member", member)
    monkeypatch.setattr(ledger, "_LIBRARIES", ("/nowhere/torch/", "/nowhere/rankgate/"))

    def destroy(group=None):
        member.WORLD = None

    scope: dict = {"destroy_process_group": ledger._wrap_destroy(destroy)}
    harness = "def renew():\n    destroy_process_group()\n"
    exec(compile(harness, "/nowhere/rankgate/harness/group.py", "exec"), scope)
    scope["renew"]()
    assert ledger.snapshot() == []


def test_a_process_group_method_is_recorded_as_the_same_collective(recorded):
    # pg.allreduce([t]) is dist.all_reduce(t); its Work is the state until it finishes
    work = Work(done=False)
    allreduce = ledger._wrap_method("all_reduce", lambda self, *a, **k: work)
    barrier = ledger._wrap_method("barrier", lambda self, *a, **k: Work(done=True))
    send = ledger._wrap_method("send", lambda self, *a, **k: None)
    t = torch.ones(2)
    allreduce(WORLD, [t])
    barrier(SUB)
    send(WORLD, [t], 1, 0)
    records = ledger.snapshot()
    assert [(r["group"], r["seq"], r["op"], r["arg"], r["state"]) for r in records] == [
        ("world", 1, "all_reduce", "float32[2]", "issued"),  # a rank stuck in .wait()
        ("sub", 1, "barrier", "", "completed"),
        ("p2p:world", 1, "send", "float32[2]", "completed"),
    ]
    assert records[0]["file"] == __file__
    work.done = True
    assert ledger.snapshot()[0]["state"] == "completed"


def test_the_harness_own_collectives_are_not_recorded(recorded, monkeypatch):
    # an adopted test's port agreement (adopt/prelude.py) is rankgate's, not the test's #1
    all_reduce = ledger._wrap("all_reduce", lambda *a, **k: None, PARAMS)
    harness_call = compile("all_reduce(t)", ledger._HARNESS + "adopt/prelude.py", "exec")
    exec(harness_call, {"all_reduce": all_reduce, "t": torch.ones(1)})
    assert ledger.snapshot() == []
    all_reduce(torch.ones(1))
    assert [(r["seq"], r["op"]) for r in ledger.snapshot()] == [(1, "all_reduce")]


def test_the_method_torch_calls_inside_a_recorded_call_passes_and_another_threads_does_not(
    recorded,
):
    # dist.all_reduce calls group.allreduce: one entry. A thread of the test calling a
    # group's method meanwhile is the test's own call, recorded.
    import threading

    allreduce = ledger._wrap_method("all_reduce", lambda self, *a, **k: Work(done=True))

    def torch_all_reduce(tensor, op=None, group=None, async_op=False):
        allreduce(WORLD, [tensor])  # torch's own call
        other = threading.Thread(target=lambda: allreduce(SUB, [tensor]))
        other.start()
        other.join()

    all_reduce = ledger._wrap("all_reduce", torch_all_reduce, PARAMS)
    all_reduce(torch.ones(2))
    assert [(r["group"], r["seq"], r["op"], r["state"]) for r in ledger.snapshot()] == [
        ("world", 1, "all_reduce", "completed"),
        ("sub", 1, "all_reduce", "completed"),
    ]
    assert ledger._inside == 0  # left as found
    allreduce(WORLD, [torch.ones(2)])  # after it, the test's own call again
    assert [r["seq"] for r in ledger.snapshot() if r["group"] == "world"] == [1, 2]


def test_a_call_site_deep_in_a_long_test_reads_its_own_line(recorded):
    # The line is read from the code object and offset when the ledger is read.
    all_reduce = ledger._wrap("all_reduce", lambda *a, **k: None, PARAMS)
    lines = []
    for _ in range(3):
        all_reduce(torch.ones(1))
        lines.append(sys._getframe().f_lineno - 1)
    all_reduce(
        torch.ones(1),
    )
    assert [r["line"] for r in ledger.snapshot()] == [*lines, sys._getframe().f_lineno - 3]


def test_a_rooted_collective_records_its_root_in_either_form(recorded):
    broadcast = ledger._wrap(
        "broadcast",
        lambda *a, **k: None,
        inspect.signature(lambda tensor, src=None, group=None, async_op=False, group_src=None: 0),
    )
    t = torch.ones(2)
    broadcast(t, src=1)
    broadcast(t, group_src=0)
    record = ledger._wrap_method("broadcast", lambda self, *a, **k: None)
    record(SUB, t, 1)  # pg.broadcast(t, root)
    options = dist.BroadcastOptions()
    options.rootRank = 0
    record(SUB, [t], options)  # pg.broadcast([t], opts)
    assert [r["root"] for r in ledger.snapshot()] == [
        "src 1", "src group rank 0", "src 1", "src 0",
    ]  # fmt: skip


def test_a_methods_reduce_op_is_read_from_either_form(recorded):
    allreduce = ledger._wrap_method("all_reduce", lambda self, *a, **k: None)
    t = torch.ones(2)
    allreduce(SUB, t, dist.ReduceOp.MAX)  # pg.allreduce(t, op)
    allreduce(SUB, t, op=dist.ReduceOp.MIN, timeout=None)
    allreduce(SUB, [t])
    assert [r["reduce"] for r in ledger.snapshot()] == ["MAX", "MIN", "SUM"]
