"""The first collective where the ranks' ledgers diverge, and its wording."""

from __future__ import annotations

import textwrap

import pytest

from rankgate.harness import divergence, ledger_waits

pytestmark = pytest.mark.unit

SOURCE = """\
def test_x(rank):
    t = torch.ones(4)
    dist.broadcast(t, src=0)
    if rank == 0:
        dist.all_reduce(t)
    dist.barrier()
    if rank == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, src=1)
"""


@pytest.fixture
def test_file(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text(textwrap.dedent(SOURCE))
    return str(path)


def entry(seq, op, line, file, *, arg="float32[4]", state="completed", group="world", ranks=(0, 1)):
    return {
        "group": group,
        "ranks": list(ranks),
        "seq": seq,
        "op": op,
        "arg": arg,
        "file": file,
        "line": line,
        "state": state,
    }


def test_agreeing_ledgers_blame_no_one(test_file):
    same = [entry(1, "broadcast", 3, test_file), entry(2, "barrier", 6, test_file, arg="")]
    assert divergence.find({0: same, 1: list(same)}) is None


def test_a_rank_that_stopped_short_never_issued_the_next_one(test_file):
    found = divergence.find(
        {
            0: [
                entry(1, "broadcast", 3, test_file),
                entry(2, "all_reduce", 5, test_file, state="issued"),
            ],
            1: [entry(1, "broadcast", 3, test_file)],
        }
    )
    assert found.text == (
        "rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at test_x.py:5; "
        "rank 1's last: broadcast #1 at test_x.py:3"
    )
    assert found.cause == (1,)


def test_a_skipped_call_is_named_from_the_line_order(test_file):
    found = divergence.find(
        {
            0: [
                entry(1, "broadcast", 3, test_file),
                entry(2, "all_reduce", 5, test_file, state="issued"),
            ],
            1: [
                entry(1, "broadcast", 3, test_file),
                entry(2, "barrier", 6, test_file, arg="", state="issued"),
            ],
        }
    )
    assert found.text == (
        "rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at test_x.py:5; "
        "rank 1 issued barrier #2 at test_x.py:6 instead"
    )
    assert found.cause == (1,)


def test_the_same_op_from_a_later_line_is_a_skip_too(test_file):
    # Rank 0's extra all_reduce pairs with rank 1's next one; the lines tell.
    found = divergence.find(
        {
            0: [
                entry(1, "all_reduce", 5, test_file),
                entry(2, "all_reduce", 8, test_file, state="issued"),
            ],
            1: [entry(1, "all_reduce", 8, test_file)],
        }
    )
    assert found.text == (
        "rank 1 never issued all_reduce #1 (float32[4]) that rank 0 issued at test_x.py:5; "
        "rank 1 issued all_reduce #1 at test_x.py:8 instead"
    )


def test_the_two_branches_of_one_if_disagree(test_file):
    found = divergence.find(
        {
            0: [entry(1, "all_reduce", 8, test_file, state="issued")],
            1: [entry(1, "broadcast", 10, test_file, state="issued")],
        }
    )
    assert found.text == (
        "ranks disagree at #1: rank 0 issued all_reduce float32[4] at test_x.py:8, "
        "rank 1 issued broadcast float32[4] at test_x.py:10"
    )
    assert found.cause == ()


def test_different_shapes_disagree_and_the_odd_rank_is_the_cause(test_file):
    found = divergence.find(
        {
            0: [entry(1, "all_reduce", 5, test_file, ranks=(0, 1, 2))],
            1: [entry(1, "all_reduce", 5, test_file, ranks=(0, 1, 2))],
            2: [entry(1, "all_reduce", 5, test_file, arg="float32[8]", ranks=(0, 1, 2))],
        }
    )
    assert found.text == (
        "ranks disagree at #1: rank 2 issued float32[8] where ranks 0, 1 issued float32[4] "
        "(all_reduce #1 at test_x.py:5)"
    )
    assert found.cause == (2,)


def test_a_subgroup_only_some_ranks_join(test_file):
    sub = {"group": "1", "ranks": (0, 1)}
    found = divergence.find(
        {
            0: [entry(1, "all_reduce", 5, test_file, state="issued", **sub)],
            1: [entry(1, "barrier", 6, test_file, arg="", state="issued")],
            2: [entry(1, "barrier", 6, test_file, arg="", state="issued", ranks=(0, 1, 2))],
        }
    )
    assert found.text.startswith(
        "rank 1 never issued all_reduce #1 on ranks [0, 1] (float32[4]) that rank 0 issued at "
        "test_x.py:5; rank 1's last: barrier #1 at test_x.py:6"
    )


def test_a_group_torch_distributed_does_not_register_is_named_by_its_name(test_file):
    # torch's newer group API (_dist2.new_group) makes groups with no global ranks known
    sub = {"group": "unregistered group 1", "ranks": ()}
    found = divergence.find(
        {
            0: [
                entry(1, "all_reduce", 5, test_file, **sub),
                entry(2, "all_reduce", 7, test_file, state="issued", **sub),
            ],
            1: [entry(1, "all_reduce", 5, test_file, **sub)],
        }
    )
    assert found.text.startswith(
        "rank 1 never issued all_reduce #2 on group 'unregistered group 1' (float32[4]) that "
        "rank 0 issued at test_x.py:7; rank 1's last: all_reduce #1 on group "
        "'unregistered group 1' at test_x.py:5"
    ), found.text


def test_an_unreadable_source_claims_no_order():
    found = divergence.find(
        {
            0: [entry(1, "all_reduce", 5, "/nowhere/test_x.py", state="issued")],
            1: [entry(1, "barrier", 6, "/nowhere/test_x.py", arg="", state="issued")],
        }
    )
    assert found.text.startswith(
        "ranks disagree at #1: rank 0 issued all_reduce float32[4] at test_x.py:5, "
        "rank 1 issued barrier at test_x.py:6"
    )


def test_one_ledger_or_none_compares_nothing(test_file):
    assert divergence.find({0: [entry(1, "all_reduce", 5, test_file)], 1: None}) is None


def test_a_full_ledger_is_compared_where_every_rank_has_entries(test_file):
    # Rank 0's ring dropped #1: its first kept entry is #2, and #1 is not a divergence.
    found = divergence.find(
        {
            0: [entry(2, "barrier", 6, test_file, arg="")],
            1: [entry(1, "broadcast", 3, test_file), entry(2, "barrier", 6, test_file, arg="")],
        }
    )
    assert found is None


def test_under_a_crash_names_the_peers_collective(test_file):
    text = ledger_waits.under_crash(
        {0: "in all_reduce at test_x.py:5"},
        {0: None, 1: [entry(1, "all_reduce", 5, test_file, arg="float64[4]", state="failed")]},
    )
    assert text == (
        "rank 0 crashed in all_reduce at test_x.py:5; "
        "rank 1 was in all_reduce #1 (float64[4]) issued at test_x.py:5"
    )
    assert ledger_waits.under_crash({0: ""}, {1: [entry(1, "all_reduce", 5, test_file)]}) == ""


def test_side_by_side_marks_the_divergence(test_file):
    ledgers = {
        0: [
            entry(1, "broadcast", 3, test_file),
            entry(2, "all_reduce", 5, test_file, state="issued"),
        ],
        1: [entry(1, "broadcast", 3, test_file)],
    }
    table = divergence.side_by_side(ledgers, divergence.find(ledgers))
    assert table.splitlines() == [
        "Collectives issued around the divergence:",
        "     rank 0                                      rank 1",
        " #1  broadcast float32[4] test_x.py:3 completed  broadcast float32[4] test_x.py:3 completed",
        ">#2  all_reduce float32[4] test_x.py:5 issued    -",
    ]


def test_a_rank_that_never_issued_it_is_placed_by_its_stack(test_file):
    found = divergence.find(
        {0: [entry(1, "barrier", 6, test_file, arg="", state="issued")], 1: []},
        now={1: "in user code at test_x.py:5"},
    )
    assert found.text == (
        "rank 1 never issued barrier #1 that rank 0 issued at test_x.py:6; "
        "rank 1 issued no collective (now in user code at test_x.py:5)"
    )


def test_a_destroyed_default_group_is_the_cause(test_file):
    destroyed = entry(2, "destroy_process_group", 7, test_file, arg="")
    ledgers = {
        0: [
            entry(1, "broadcast", 3, test_file),
            entry(2, "barrier", 6, test_file, arg="", state="failed"),
        ],
        1: [entry(1, "broadcast", 3, test_file), destroyed],
    }
    found = divergence.find(ledgers)
    assert found.text == (
        "rank 1 destroyed the default process group at test_x.py:7; "
        "rank 0 was in barrier #2 issued at test_x.py:6"
    )
    assert found.cause == (1,)
    assert divergence.blamed_in(f"rank 1 failed; likely cause: {found.text}") == (1,)
    assert divergence.side_by_side(ledgers, found).splitlines()[-1] == (
        ">#2  barrier test_x.py:6 failed"
        "                   destroy_process_group test_x.py:7 completed"
    )


def test_a_default_group_made_again_after_a_destroy_is_not_the_cause(test_file):
    again = [
        entry(1, "destroy_process_group", 7, test_file, arg=""),
        entry(2, "broadcast", 3, test_file),
    ]
    assert divergence.find({0: again, 1: list(again)}) is None


def test_a_call_under_a_group_read_too_late_is_not_one_never_issued(test_file):
    # A ledger written before groups were named at call time: rank 1's entry reads
    # "unknown" with no ranks. Its own entry shows it issued the call.
    unnamed = entry(1, "all_reduce", 5, test_file, group="unknown", ranks=())
    ledgers = {0: [entry(1, "all_reduce", 5, test_file)], 1: [unnamed]}
    assert divergence.find(ledgers) is None


def test_a_dtype_mismatch_names_the_odd_rank_out(test_file):
    three = {"ranks": (0, 1, 2)}
    found = divergence.find(
        {
            0: [entry(1, "broadcast", 3, test_file, **three), entry(2, "all_reduce", 5, test_file, **three)],
            1: [entry(1, "broadcast", 3, test_file, **three), entry(2, "all_reduce", 5, test_file, arg="float64[4]", **three)],
            2: [entry(1, "broadcast", 3, test_file, **three), entry(2, "all_reduce", 5, test_file, **three)],
        }
    )  # fmt: skip
    assert found.text == (
        "ranks disagree at #2: rank 1 issued float64[4] where ranks 0, 2 issued float32[4] "
        "(all_reduce #2 at test_x.py:5)"
    )
    assert found.cause == (1,)
    assert divergence.blamed_in(f"rank 0 hung; likely cause: {found.text}") == (1,)


def test_a_reduce_op_mismatch_between_two_ranks_blames_neither(test_file):
    found = divergence.find(
        {
            0: [{**entry(1, "all_reduce", 5, test_file), "reduce": "SUM"}],
            1: [{**entry(1, "all_reduce", 5, test_file), "reduce": "MAX"}],
        }
    )
    assert found.text == (
        "ranks disagree at #1: rank 0 issued ReduceOp.SUM, rank 1 issued ReduceOp.MAX "
        "(all_reduce #1 at test_x.py:5)"
    )
    assert found.cause == ()


def test_digests_differ_where_a_groups_ranks_hold_different_calls():
    world = {"world": [[0, 1, 2], 2, 111]}
    sub = {"7": [[0, 1], 1, 5]}
    same = {0: {**world, **sub}, 1: {**world, **sub}, 2: dict(world)}  # 2 is not in group 7
    assert not divergence.digests_differ(same)
    assert divergence.digests_differ({**same, 2: {"world": [[0, 1, 2], 2, 112]}})
    assert divergence.digests_differ({**same, 1: dict(world)})  # rank 1 never joined group 7
    assert not divergence.digests_differ({**same, 1: None})  # no ledger there: left out
    # rank 0's call on group 7 raised (no CRC) and rank 1 never issued it: the test saw it
    raised = {0: {**world, "7": [[0, 1], 1, None]}, 1: dict(world), 2: dict(world)}
    assert not divergence.digests_differ(raised)


def test_a_sub_worlds_ledger_names_global_ranks():
    entries = [{"group": "world", "ranks": [0, 1], "seq": 1, "op": "barrier"}]
    assert divergence.renumbered(entries, (2, 3))[0]["ranks"] == [2, 3]
    assert divergence.renumbered(entries, (0, 1)) is entries
    digest = {"world": [[0, 1], 1, 9]}
    assert divergence.renumbered_digest(digest, (2, 3)) == {"world": [[2, 3], 1, 9]}


def test_undecided_the_cause_says_so_and_where_each_rank_waits(test_file):
    ledgers = {
        0: [entry(1, "all_reduce", 8, test_file, state="issued")],
        1: [entry(1, "broadcast", 10, test_file, state="failed")],
    }
    found = divergence.find(ledgers)
    assert divergence.cause_of(found, ledgers) == (
        "the ledgers cannot tell which rank is wrong: ranks disagree at #1: "
        "rank 0 issued all_reduce float32[4] at test_x.py:8, "
        "rank 1 issued broadcast float32[4] at test_x.py:10; "
        "rank 0 waits in all_reduce #1 (float32[4]) issued at test_x.py:8; "
        "rank 1 was in broadcast #1 (float32[4]) issued at test_x.py:10"
    )
    assert divergence.worded({0: "hung", 1: "passed"}, found) == {0: "hung", 1: "diverged"}


def test_a_rank_the_ledgers_single_out_is_diverged_never_passed(test_file):
    found = divergence.find(
        {
            0: [entry(1, "all_reduce", 5, test_file, state="issued")],
            1: [],
        }
    )
    assert found.cause == (1,)
    assert divergence.cause_of(found).startswith("likely cause: rank 1 never issued")
    assert divergence.worded({0: "hung", 1: "passed"}, found) == {0: "hung", 1: "diverged"}
    assert divergence.worded({0: "hung", 1: "passed"}, None) == {0: "hung", 1: "passed"}


def test_a_rank_waiting_in_another_groups_collective_is_not_the_cause(test_file):
    # Rank 2 never joins the [1, 2] all_reduce rank 1 waits in; rank 0 waits in a world
    # all_reduce that ranks 1 and 2 never issued. Rank 1 only waits: rank 2 is the cause.
    pair = {"group": "5", "ranks": (1, 2)}
    three = {"ranks": (0, 1, 2)}
    found = divergence.find(
        {
            0: [entry(1, "all_reduce", 5, test_file, state="issued", **three)],
            1: [entry(1, "all_reduce", 8, test_file, state="issued", **pair)],
            2: [],
        }
    )
    assert found.cause == (2,)
    assert found.text == (
        "rank 2 never issued all_reduce #1 on ranks [1, 2] (float32[4]) that rank 1 issued "
        "at test_x.py:8; rank 2 issued no collective"
    )
