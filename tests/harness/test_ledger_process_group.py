"""The ledger records collectives called on ProcessGroup objects (``pg.allreduce([t])
.wait()``, as torch's own tests and its newer group API call them): a hang in one names
the rank that never issued it, in the pool and in place. rankgate's own collectives (an
adopted test's port agreement) never count as the test's.

Before, such a call left the ledger empty and the verdict read the stacks only: the
rank waiting in ``.wait()`` (a C++ call, no torch.distributed frame) was named first,
"in user code", and the rank that never came was named after it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from jobs import run_torchrun_pytest

pytestmark = pytest.mark.dist

HANG = """
import time
import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2, backend="gloo", timeout=TIMEOUT)
def test_hangs(rank):
    pg = dist.group.WORLD
    t = torch.ones(1)
    pg.allreduce([t]).wait()
    if rank == 0:
        pg.allreduce([t]).wait()  # rank 1 never joins
    else:
        time.sleep(1000)
"""

CAUSE = (
    "likely cause: rank 1 never issued all_reduce #2 (float32[1]) that rank 0 issued at "
    "test_{file}.py:13; rank 1's last: all_reduce #1 at test_{file}.py:11 (now in user code "
    "at test_{file}.py:15)"
)


def test_a_hang_in_a_process_group_call_names_the_rank_that_never_came(inner):
    result = inner(HANG.replace("TIMEOUT", "4"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"ranks 0, 1 hung; {CAUSE.format(file='inner')} (world 2, backend gloo)"]
    )


@pytest.mark.torch_dist
def test_in_place_the_same_hang_names_the_same_rank(tmp_path):
    (tmp_path / "test_suite.py").write_text(HANG.replace("TIMEOUT", "6").lstrip())
    (tmp_path / "pytest.ini").write_text("[pytest]\nrankgate_rendezvous_timeout = 2\n")
    proc = run_torchrun_pytest(
        tmp_path, "-p", "no:randomly", "-q", "--junitxml=out/junit.xml", "test_suite.py",
        timeout=180,
    )  # fmt: skip
    assert proc.returncode != 0
    written = sorted((tmp_path / "out").glob("junit.rank*.xml"))
    assert len(written) == 2, proc.stdout + proc.stderr
    for path in written:
        rank = path.name.split(".")[1].removeprefix("rank")
        (case,) = ET.parse(path).getroot().iter("testcase")
        message = case.find("failure").get("message")
        assert message.startswith(f"rank {rank} hung ("), message
        assert message.endswith(CAUSE.format(file="suite")), message


PORT_AGREED = """
import time
import torch
import torch.distributed as dist
from portproj.common import DistributedTest


class TestPort(DistributedTest):
    def test_hangs_after_the_port_is_agreed(self):
        import os
        assert os.environ["PROJECT_PORT"].isdigit()
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(1))  # rank 1 never joins
        else:
            time.sleep(1000)
"""


def test_the_port_agreement_is_not_the_tests_collective(pytester, monkeypatch, auto_backend):
    # env=PROJECT_PORT={master_port}: in the pool no launcher set MASTER_PORT, so the
    # ranks agree on one with a broadcast_object_list of rankgate's own. Before, it was
    # the test's collective #1 and the test's all_reduce read as #2.
    pkg = pytester.mkpydir("portproj")
    (pkg / "common.py").write_text("class DistributedTest:\n    world_size = 2\n")
    pytester.makepyfile(test_planted=PORT_AGREED)
    # Asked for, though the default records on every backend (cpu:gloo,cuda:nccl on a
    # GPU host included): a caller's RANKGATE_LEDGER=0 would take the cause away.
    monkeypatch.setenv("RANKGATE_LEDGER", "1")
    pytester.makeini(
        "[pytest]\nrankgate_world_classes =\n"
        "    portproj.common:DistributedTest env=PROJECT_PORT={master_port}\n"
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "--rankgate-timeout=4"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "ranks 0, 1 hung; likely cause: rank 1 never issued all_reduce #1 (float32[[]1]) "
            "that rank 0 issued at test_planted.py:12; rank 1 issued no collective (now in "
            f"user code at test_planted.py:14) (world 2, backend {auto_backend})"
        ]
    )


DIST2_HANG = """
import os
import socket
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.distributed._dist2 as dist2


def meet_over_env():
    # _dist2.new_group meets over env://: a launcher's (a sub-world's) MASTER_PORT, else
    # one rank 0 finds free (the pool sets none)
    if "MASTER_PORT" not in os.environ:
        port = [None]
        if dist.get_rank() == 0:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = [s.getsockname()[1]]
        dist.broadcast_object_list(port)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port[0]))


@pytest.mark.world(2, backend="gloo")
def test_first():  # in place at 4 ranks, ranks 0, 1 run it and ranks 2, 3 the next
    pass


@pytest.mark.world(2, backend="gloo", timeout=TIMEOUT)
def test_hangs(rank):
    meet_over_env()
    pg = dist2.new_group("gloo", timedelta(seconds=60), "cpu")
    t = torch.ones(1)
    if rank == 0:
        pg.allreduce(t, timeout=timedelta(seconds=60)).wait()  # rank 1 never reaches it
    else:
        time.sleep(1000)
"""

DIST2_CAUSE = (
    "likely cause: rank {late} never issued all_reduce #1 on ranks [{ranks}] (float32[1]) "
    "that rank {early} issued at test_{file}.py:{at}; {last} (now in user code at "
    "test_{file}.py:{now})"
)


def test_a_hang_on_a_dist2_group_names_the_rank_that_never_came(inner):
    # A group torch.distributed never registered: its ranks are every rank's (as large
    # as the default group). Before, its ranks were unknown, nobody was missing from
    # it, and the stacks named rank 0 (waiting in .wait(), a C++ call) first.
    result = inner(DIST2_HANG.replace("TIMEOUT", "4"))
    result.assert_outcomes(passed=1, failed=1)
    last = "rank 1's last: broadcast_object_list #1 at test_inner.py:21"
    cause = DIST2_CAUSE.format(
        late=1, early=0, ranks="0, 1", file="inner", last=last, at=36, now=38
    )
    result.stdout.fnmatch_lines([f"ranks 0, 1 hung; {cause} (world 2, backend gloo)"])


@pytest.mark.torch_dist
@pytest.mark.parametrize("launched", [2, 4])
def test_in_place_a_dist2_group_hang_names_the_rank_that_never_came(tmp_path, launched):
    (tmp_path / "test_suite.py").write_text(DIST2_HANG.replace("TIMEOUT", "6").lstrip())
    (tmp_path / "pytest.ini").write_text("[pytest]\nrankgate_rendezvous_timeout = 2\n")
    proc = run_torchrun_pytest(
        tmp_path, "-p", "no:randomly", "-q", "--junitxml=out/junit.xml", "test_suite.py",
        ranks=launched, timeout=180,
    )  # fmt: skip
    assert proc.returncode != 0
    late, early = (1, 0) if launched == 2 else (3, 2)
    last = f"rank {late} issued no collective"  # a launcher's MASTER_PORT: no agreement
    cause = DIST2_CAUSE.format(
        late=late, early=early, ranks=f"{early}, {late}", file="suite", last=last, at=36, now=38
    )
    for rank in (early, late):
        (case,) = [
            c for c in ET.parse(tmp_path / "out" / f"junit.rank{rank}.xml").getroot().iter("testcase")
            if c.get("name") == "test_hangs"
        ]  # fmt: skip
        message = case.find("failure").get("message")
        assert message.startswith(f"rank {rank} hung ("), message
        assert message.endswith(cause), message


SMALLER_GROUP_HANG = """
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store


@pytest.mark.world(3, backend="gloo", timeout=4)
def test_hangs(rank):
    if rank == 2:
        return  # not in the group
    store = dist.PrefixStore("pair", _get_default_store())
    pg = dist.ProcessGroupGloo(store, rank, 2, timedelta(seconds=60))  # ranks unknown
    if rank == 0:
        pg.allreduce([torch.ones(1)]).wait()  # rank 1 never reaches it
    else:
        time.sleep(1000)
"""


def test_a_rank_that_only_waits_is_never_named_first(inner):
    # A group of a backend's constructor, smaller than the world: the ledger cannot say
    # who is in it, so the stacks decide; rank 0's stack reads "in user code" (Work.wait()
    # is C++), and its ledger says it waits in all_reduce there. Before, rank 0 came first.
    result = inner(SMALLER_GROUP_HANG)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "ranks 0, 1 hung; rank 2 passed; likely cause: rank 1 in user code at "
            "test_inner.py:19; rank 0 waiting in all_reduce at test_inner.py:17 (world 3, "
            "backend gloo)"
        ]
    )
