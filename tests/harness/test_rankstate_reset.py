"""What a rank resets between tests: its environment, and the collectives' timeout
(checked each test, set only when a test changed it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from rankgate.harness.rankstate import EnvironmentSnapshot
from tests.warmstart import WARM_PYTHON

pytestmark = pytest.mark.unit


def test_a_snapshot_sees_and_undoes_every_kind_of_change(monkeypatch):
    monkeypatch.setenv("RANKGATE_KEPT", "same")
    monkeypatch.setenv("RANKGATE_CHANGED", "before")
    monkeypatch.setenv("RANKGATE_REMOVED", "here")
    monkeypatch.delenv("RANKGATE_ADDED", raising=False)
    before = dict(os.environ)
    snapshot = EnvironmentSnapshot()
    assert not snapshot.changed()

    os.environ["RANKGATE_CHANGED"] = "after, é"
    del os.environ["RANKGATE_REMOVED"]
    os.environ["RANKGATE_ADDED"] = "new"
    assert snapshot.changed()
    snapshot.restore()

    assert not snapshot.changed()
    assert dict(os.environ) == before
    # Restored through os.environ, so a child process sees the old values too.
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('RANKGATE_CHANGED'), "
         "os.environ.get('RANKGATE_REMOVED'), os.environ.get('RANKGATE_ADDED'))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert child.stdout.split() == ["before", "here", "None"]


def test_a_value_set_back_to_what_it_was_is_no_change(monkeypatch):
    monkeypatch.setenv("RANKGATE_CHANGED", "before")
    snapshot = EnvironmentSnapshot()
    os.environ["RANKGATE_CHANGED"] = "after"
    os.environ["RANKGATE_CHANGED"] = "before"
    assert not snapshot.changed()


_TIMEOUT_SCRIPT = textwrap.dedent(
    """
    import sys
    from datetime import timedelta
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    from rankgate.harness import rankstate

    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    calls = []
    real = c10d._set_pg_timeout
    c10d._set_pg_timeout = lambda *a, **k: (calls.append(a[0]), real(*a, **k))

    rankstate.set_collective_timeout(5)          # first test: set
    rankstate.set_collective_timeout(5)          # unchanged: not set again
    real(timedelta(seconds=1))                   # a test shortens it
    rankstate.set_collective_timeout(5)          # the next test gets 5 s back
    print(calls, rankstate._collective_timeouts())
    dist.destroy_process_group()
    """
)


def test_the_timeout_is_set_again_only_after_a_test_changed_it(tmp_path):
    done = subprocess.run(
        [WARM_PYTHON.executable(), "-c", _TIMEOUT_SCRIPT, str(tmp_path / "store")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    five = "datetime.timedelta(seconds=5)"
    assert done.stdout.strip() == f"[{five}, {five}] {{{five}}}"
