"""What a failing Ray run's report carries from its workers' log files."""

from __future__ import annotations

import pytest

from rankgate.workloads.trainer.strategies.ray import worker_logs

pytestmark = pytest.mark.unit


def test_each_worker_log_once_and_a_vanished_one_skipped(tmp_path):
    logs = tmp_path / "ray" / "session_2026-11-27_07-00-00_1" / "logs"
    logs.mkdir(parents=True)
    (tmp_path / "ray" / "session_latest").symlink_to(logs.parent.name)  # as Ray links it
    (logs / "worker-a-1.err").write_text("RuntimeError: worker 1 disagrees\n")
    (logs / "worker-b-2.out").write_text("token of worker 0\n")
    (logs / "worker-c-3.log").write_text("not a stdout or stderr file\n")
    (logs / "worker-d-4.err").write_text("")
    # listed, then gone before it is read (CI saw Ray's file go between the two)
    (logs / "worker-e-5.err").symlink_to(logs / "worker-e-5-deleted.err")

    report = worker_logs(tmp_path)

    assert report == (
        "--- worker-a-1.err ---\nRuntimeError: worker 1 disagrees\n"
        "--- worker-b-2.out ---\ntoken of worker 0"
    )


def test_no_worker_log_says_so(tmp_path):
    assert worker_logs(tmp_path) == "(no Ray worker wrote a log)"
