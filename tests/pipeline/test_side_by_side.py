"""Stages the gate runs side by side: really at the same time, each with its own log,
shown in pipeline order with its verdict; the gate's table keeps pipeline order."""

from __future__ import annotations

import json
import signal
import sys
import time

import pytest

from rankgate.pipeline import executor, process, side_by_side, stages
from rankgate.pipeline.executor import Options
from rankgate.pipeline.progress import Progress
from rankgate.pipeline.stages import Command, Stage

pytestmark = pytest.mark.unit

# Each stage writes its own flag file, then waits (up to argv[3] seconds) for the
# other's: both pass only when they run at the same time.
_MEET = (
    "import pathlib, sys, time\n"
    "me, other = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])\n"
    "print('out of', me.name); print('err of', me.name, file=sys.stderr)\n"
    "me.touch()\n"
    "end = time.monotonic() + float(sys.argv[3])\n"
    "while not other.exists():\n"
    "    if time.monotonic() > end: sys.exit(f'{me.name}: {other.name} never came')\n"
    "    time.sleep(0.05)\n"
)


class Machine:
    def missing(self, need: str) -> None:
        return None


def _stage(name: str, tmp_path, other: str, wait: float = 20) -> Stage:
    meet = (sys.executable, "-c", _MEET, str(tmp_path / name), str(tmp_path / other), str(wait))
    return Stage(
        name=name, description=name, where=("local",), paths=("x",), beside=True,
        commands=(Command(argv=meet),), dagger=name, workflow=f"ci.yml:{name}",
    )  # fmt: skip


def test_stages_run_at_the_same_time_each_into_its_own_log(tmp_path, capsys):
    options = Options(out_dir=tmp_path / "out")
    numbered = [(5, _stage("alpha", tmp_path, "beta")), (7, _stage("beta", tmp_path, "alpha"))]
    outcomes = side_by_side.run(
        numbered,
        lambda stage, log: executor.run_stage(stage, options, Machine(), None, log),
        options.out_dir,
        Progress(total=8, what="gate"),
    )
    assert {name: o.status for name, o in outcomes.items()} == {"alpha": "passed", "beta": "passed"}
    for name, other in (("alpha", "beta"), ("beta", "alpha")):
        log = (options.out_dir / "logs" / f"{name}.log").read_text()
        assert f"out of {name}" in log and f"err of {name}" in log
        assert f"of {other}" not in log
    shown = capsys.readouterr()
    # Shown after both ended, one log after the other, in pipeline order.
    assert (
        shown.out.index("out of alpha")
        < shown.out.index("err of alpha")
        < shown.out.index("out of beta")
    )
    assert "[5/8] passed" in shown.err and "[7/8] passed" in shown.err


def test_a_stage_run_alone_cannot_meet_its_partner(tmp_path):
    """The check above is real: one stage alone waits in vain and fails."""
    options = Options(out_dir=tmp_path / "out")
    alone = _stage("alpha", tmp_path, "beta", wait=1)
    outcome = executor.run_stage(alone, options, Machine(), None, options.out_dir / "alpha.log")
    assert outcome.status == "failed"
    assert "alpha: beta never came" in (options.out_dir / "alpha.log").read_text()


def test_the_gate_runs_hpc_and_container_together_and_keeps_pipeline_order(tmp_path, monkeypatch):
    started: list[str] = []

    def fake_run_stage(stage, options, machine=None, decision=None, log=None, *, in_gate=False):
        started.append(f"{stage.name} log={log.name if log else None}")
        return executor.Outcome(stage=stage.name, status="passed")

    monkeypatch.setattr(executor, "run_stage", fake_run_stage)
    monkeypatch.setattr(executor, "gate_checks", lambda options, progress: [])
    options = Options(out_dir=tmp_path / "out")
    outcomes = executor.run_gate(options, Machine(), include=("unit", "hpc", "bench", "container"))
    assert [o.stage for o in outcomes] == ["unit", "hpc", "bench", "container"]
    saved = json.loads((options.out_dir / "gate.json").read_text())
    assert [row["stage"] for row in saved] == ["unit", "hpc", "bench", "container"]
    # hpc and container together where hpc stands, each with a log; bench after them.
    assert started[0] == "unit log=None"
    assert sorted(started[1:3]) == ["container log=container.log", "hpc log=hpc.log"]
    assert started[3] == "bench log=None"


def test_only_hpc_and_container_are_run_side_by_side():
    assert [s.name for s in stages.all_stages() if s.beside] == ["hpc", "container"]


def _late(name: str, tmp_path) -> Stage:
    """A stage that writes its file after 20 s."""
    late = "import pathlib, sys, time; time.sleep(20); pathlib.Path(sys.argv[1]).touch()"
    return Stage(
        name=name, description=name, where=("local",), paths=("x",), beside=True,
        commands=(Command(argv=(sys.executable, "-c", late, str(tmp_path / name))),),
        dagger=name, workflow=f"ci.yml:{name}",
    )  # fmt: skip


def test_an_interrupt_stops_every_stage_running_side_by_side(tmp_path):
    """Ctrl-C reaches only the main thread; the stages' commands must end with it."""
    options = Options(out_dir=tmp_path / "out")
    numbered = [(1, _late("alpha", tmp_path)), (2, _late("beta", tmp_path))]

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            side_by_side.run(
                numbered,
                lambda stage, log: executor.run_stage(stage, options, Machine(), None, log),
                options.out_dir,
                Progress(total=2, what="gate"),
            )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    # Had the commands lived on, each would write its file after 20 s.
    time.sleep(0.5)
    assert not (tmp_path / "alpha").exists() and not (tmp_path / "beta").exists()
    assert not process._running
