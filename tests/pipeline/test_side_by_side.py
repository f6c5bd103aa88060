"""Stages the gate runs in the background: really at the same time as the others, each
with its own log, shown in pipeline order with its verdict; the table keeps that order."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from rankgate.pipeline import executor, side_by_side, stages
from rankgate.pipeline.executor import Options
from rankgate.pipeline.stages import Command, Stage
from rankgate.proc import command as process
from rankgate.proc.progress import Progress

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


def test_the_gate_starts_hpc_and_container_first_and_keeps_pipeline_order(tmp_path, monkeypatch):
    started: list[str] = []

    def fake_run_stage(
        stage, options, machine=None, decision=None, log=None, *, in_gate=False, before_measuring=None
    ):
        started.append(f"{stage.name} log={log.name if log else None}")
        return executor.Outcome(stage=stage.name, status="passed")

    monkeypatch.setattr(executor, "run_stage", fake_run_stage)
    monkeypatch.setattr(executor, "gate_checks", lambda options, progress: [])
    options = Options(out_dir=tmp_path / "out")
    outcomes = executor.run_gate(options, Machine(), include=("unit", "hpc", "bench", "container"))
    assert [o.stage for o in outcomes] == ["unit", "hpc", "bench", "container"]
    saved = json.loads((options.out_dir / "gate.json").read_text())
    assert [row["stage"] for row in saved] == ["unit", "hpc", "bench", "container"]
    # hpc and container in the background, each with a log; unit and bench in order.
    assert sorted(started) == [
        "bench log=None", "container log=container.log", "hpc log=hpc.log", "unit log=None"
    ]
    assert [s for s in started if "log=None" in s] == ["unit log=None", "bench log=None"]


def _registered(monkeypatch, *made: Stage) -> tuple[str, ...]:
    for stage in made:
        monkeypatch.setitem(stages._STAGES, stage.name, stage)
    return tuple(stage.name for stage in made)


def test_a_background_stage_runs_while_the_others_do(tmp_path, monkeypatch, capfd):
    """alpha (beside) and beta (not) each wait for the other's file: the gate passes only
    if alpha runs while beta does; alpha's log is shown after beta, under its own step."""
    monkeypatch.setattr(executor, "gate_checks", lambda options, progress: [])
    alpha = _stage("alpha", tmp_path, "beta")
    beta = dataclasses.replace(_stage("beta", tmp_path, "alpha"), beside=False)
    options = Options(out_dir=tmp_path / "out")
    outcomes = executor.run_gate(options, Machine(), include=_registered(monkeypatch, alpha, beta))
    assert [(o.stage, o.status) for o in outcomes] == [("alpha", "passed"), ("beta", "passed")]
    shown = capfd.readouterr()
    alpha_log = (options.out_dir / "logs" / "alpha.log").read_text()
    assert "out of alpha" in alpha_log
    assert shown.out.index("out of beta") < shown.out.index("out of alpha")
    assert "gate runs alpha in the background" in shown.err
    # alpha's command line, verdict and report line go to its log, shown after beta's
    # output: never amid it.
    for line in ("rankgate > ", "rankgate: stage alpha PASSED", "rankgate: report: "):
        assert line in alpha_log
    assert "stage alpha PASSED" not in shown.err and "stage beta PASSED" in shown.err
    assert shown.out.index("out of beta") < shown.out.index("rankgate: stage alpha PASSED")


def test_dist_package_hpc_and_container_run_in_the_background_and_bench_alone():
    assert [s.name for s in stages.all_stages() if s.beside] == [
        "dist", "package", "hpc", "container"
    ]  # fmt: skip
    assert [s.name for s in stages.all_stages() if s.alone] == ["bench"]


def _late(name: str, tmp_path, seconds: float = 20) -> Stage:
    """A stage that writes its file after ``seconds`` (20 s)."""
    late = "import pathlib, sys, time; time.sleep(float(sys.argv[2])); pathlib.Path(sys.argv[1]).touch()"
    return Stage(
        name=name, description=name, where=("local",), paths=("x",), beside=True,
        commands=(Command(argv=(sys.executable, "-c", late, str(tmp_path / name), str(seconds))),),
        dagger=name, workflow=f"ci.yml:{name}",
    )  # fmt: skip


def test_a_stage_that_measures_starts_once_the_background_has_ended(tmp_path, monkeypatch, capfd):
    """beta (alone) passes only if alpha (in the background, done after 2 s) has ended
    when beta starts; alpha's step is shown once, before beta's."""
    monkeypatch.setattr(executor, "gate_checks", lambda options, progress: [])
    background = _late("alpha", tmp_path, seconds=2)
    ended = "import pathlib, sys; sys.exit(0 if pathlib.Path(sys.argv[1]).exists() else 'alpha ran on')"
    measures = Stage(
        name="beta", description="beta", where=("local",), paths=("x",),
        commands=(Command(argv=(sys.executable, "-c", ended, str(tmp_path / "alpha")), measures=True),),
        dagger="beta", workflow="ci.yml:beta",
    )  # fmt: skip
    options = Options(out_dir=tmp_path / "out")
    outcomes = executor.run_gate(
        options, Machine(), include=_registered(monkeypatch, background, measures)
    )
    assert [(o.stage, o.status) for o in outcomes] == [("alpha", "passed"), ("beta", "passed")]
    shown = capfd.readouterr().err
    assert shown.count("alpha started: ran in the background") == 1


def test_the_commands_before_a_measuring_one_run_beside_the_background(tmp_path, monkeypatch, capfd):
    """alpha (in the background) ends only after beta's first command has run; beta's
    second command measures and passes only once alpha has ended. Had beta waited for the
    background before its first command, alpha would have failed after 60 s."""
    monkeypatch.setattr(executor, "gate_checks", lambda options, progress: [])
    go, alpha_ended = tmp_path / "go", tmp_path / "alpha"
    waits_for_go = (
        "import pathlib, sys, time\n"
        "deadline = time.monotonic() + 60\n"
        "while not pathlib.Path(sys.argv[1]).exists():\n"
        "    if time.monotonic() > deadline: sys.exit('beta never started beside alpha')\n"
        "    time.sleep(0.05)\n"
        "time.sleep(0.5)\n"
        "pathlib.Path(sys.argv[2]).touch()\n"
    )
    background = Stage(
        name="alpha", description="alpha", where=("local",), paths=("x",), beside=True,
        commands=(Command(argv=(sys.executable, "-c", waits_for_go, str(go), str(alpha_ended))),),
        dagger="alpha", workflow="ci.yml:alpha",
    )  # fmt: skip
    touch = "import pathlib, sys; pathlib.Path(sys.argv[1]).touch()"
    ended = "import pathlib, sys; sys.exit(0 if pathlib.Path(sys.argv[1]).exists() else 'alpha ran on')"
    beta = Stage(
        name="beta", description="beta", where=("local",), paths=("x",),
        commands=(
            Command(argv=(sys.executable, "-c", touch, str(go))),
            Command(argv=(sys.executable, "-c", ended, str(alpha_ended)), measures=True),
        ),
        dagger="beta", workflow="ci.yml:beta",
    )  # fmt: skip
    assert beta.alone and not background.alone
    options = Options(out_dir=tmp_path / "out")
    outcomes = executor.run_gate(options, Machine(), include=_registered(monkeypatch, background, beta))
    assert [(o.stage, o.status) for o in outcomes] == [("alpha", "passed"), ("beta", "passed")]
    assert capfd.readouterr().err.count("alpha started: ran in the background") == 1


def test_a_stage_in_the_background_cannot_measure():
    with pytest.raises(ValueError, match="stage gamma: a stage in the background cannot measure"):
        Stage(
            name="gamma", description="gamma", where=("local",), paths=("x",), beside=True,
            commands=(Command(argv=("true",), measures=True),), dagger="gamma", workflow="ci.yml:gamma",
        )  # fmt: skip


@contextlib.contextmanager
def ctrl_c_after(seconds: float):
    """KeyboardInterrupt in the main thread after ``seconds``, as Ctrl-C raises it."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_interrupt_stops_every_stage_running_side_by_side(tmp_path):
    """Ctrl-C reaches only the main thread; the stages' commands must end with it."""
    options = Options(out_dir=tmp_path / "out")
    numbered = [(1, _late("alpha", tmp_path)), (2, _late("beta", tmp_path))]
    with ctrl_c_after(1.5), pytest.raises(KeyboardInterrupt):
        side_by_side.run(
            numbered,
            lambda stage, log: executor.run_stage(stage, options, Machine(), None, log),
            options.out_dir,
            Progress(total=2, what="gate"),
        )
    # Had the commands lived on, each would write its file after 20 s.
    time.sleep(0.5)
    assert not (tmp_path / "alpha").exists() and not (tmp_path / "beta").exists()
    assert not process._running


def test_an_interrupt_in_a_foreground_stage_stops_the_background_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(executor, "gate_checks", lambda options, progress: [])
    background = _late("alpha", tmp_path)
    foreground = dataclasses.replace(_late("beta", tmp_path), beside=False)
    options = Options(out_dir=tmp_path / "out")
    with ctrl_c_after(1.5), pytest.raises(KeyboardInterrupt):
        executor.run_gate(
            options, Machine(), include=_registered(monkeypatch, background, foreground)
        )
    # Had either command lived on, it would write its file after 20 s.
    time.sleep(0.5)
    assert not (tmp_path / "alpha").exists() and not (tmp_path / "beta").exists()
    assert not process._running


def test_a_failing_background_stage_fails_the_gate_and_the_others_still_run(
    tmp_path, monkeypatch, capfd
):
    monkeypatch.setattr(executor, "gate_checks", lambda options, progress: [])
    fails = "import sys; print('background says why'); sys.exit(3)"
    background = Stage(
        name="alpha", description="alpha", where=("local",), paths=("x",), beside=True,
        commands=(Command(argv=(sys.executable, "-c", fails)),),
        dagger="alpha", workflow="ci.yml:alpha",
    )  # fmt: skip
    foreground = dataclasses.replace(_stage("beta", tmp_path, "beta"), beside=False)
    options = Options(out_dir=tmp_path / "out")
    outcomes = executor.run_gate(
        options, Machine(), include=_registered(monkeypatch, background, foreground)
    )
    assert [(o.stage, o.status) for o in outcomes] == [("alpha", "failed"), ("beta", "passed")]
    assert outcomes[0].reason.startswith(f"{sys.executable}: exit code 3 ("), outcomes[0].reason
    assert executor.verdict(outcomes, allow_skipped=True) == [f"alpha failed: {outcomes[0].reason}"]
    saved = json.loads((options.out_dir / "gate.json").read_text())
    assert [(row["stage"], row["status"]) for row in saved] == [
        ("alpha", "failed"), ("beta", "passed")
    ]
    assert "background says why" in capfd.readouterr().out


def test_an_interrupted_gate_marks_every_running_stage_incomplete(tmp_path, monkeypatch, capfd):
    """Stopped while a background stage and a foreground one ran, both read INCOMPLETE
    with the same words: the background one's command ended by the stop (exit -15) is
    never its failure."""
    monkeypatch.setattr(executor, "gate_checks", lambda options, progress: [])
    background = _late("alpha", tmp_path)
    foreground = dataclasses.replace(_late("beta", tmp_path), beside=False)
    options = Options(out_dir=tmp_path / "out")
    with ctrl_c_after(1.5), pytest.raises(KeyboardInterrupt):
        executor.run_gate(
            options, Machine(), include=_registered(monkeypatch, background, foreground)
        )
    saved = json.loads((options.out_dir / "gate.json").read_text())
    reason = "stopped by SIGINT while it ran: no test ended"
    assert [(row["stage"], row["status"], row["reason"]) for row in saved] == [
        ("alpha", "incomplete", reason), ("beta", "incomplete", reason),
    ]  # fmt: skip
    shown = capfd.readouterr()
    assert "gate INCOMPLETE — stopped by SIGINT while alpha, beta ran" in shown.out
    summary = json.loads((options.out_dir / "report.json").read_text())
    assert summary["verdict"] == "incomplete"
    assert summary["incomplete"]["stages"] == [f"alpha: {reason}", f"beta: {reason}"]
    assert "FAILED" not in (options.out_dir / "summary.md").read_text()


_GATE_OF_TWO = """
import dataclasses, sys
from pathlib import Path
from rankgate.pipeline import executor, stages
from rankgate.pipeline.stages import Command, Stage

late = "import pathlib, sys, time; pathlib.Path(sys.argv[1] + '.began').touch(); time.sleep(60)"
def stage(name, beside):
    argv = (sys.executable, "-c", late, name)
    return Stage(
        name=name, description=name, where=("local",), paths=("x",), beside=beside,
        commands=(Command(argv=argv),), dagger=name, workflow=f"ci.yml:{name}",
    )
for made in (stage("alpha", True), stage("beta", False)):
    stages._STAGES[made.name] = made
executor.gate_checks = lambda options, progress: []
executor.run_gate(executor.Options(out_dir=Path("out")), include=("alpha", "beta"))
"""


def test_a_gate_stopped_by_sigterm_marks_its_background_stage_incomplete(tmp_path):
    """SIGTERM reaches the foreground stage's command, which ends every tree and dies
    from there: the background stage's outcome must still read INCOMPLETE."""
    gate = subprocess.Popen(
        [sys.executable, "-c", _GATE_OF_TWO], cwd=tmp_path, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not ((tmp_path / "alpha.began").exists() and (tmp_path / "beta.began").exists()):
            assert gate.poll() is None, gate.communicate()
            assert time.monotonic() < deadline, "the stages never began"
            time.sleep(0.05)
        os.kill(gate.pid, signal.SIGTERM)
        stdout, stderr = gate.communicate(timeout=60)
    finally:
        if gate.poll() is None:
            gate.kill()
            gate.wait()
    assert gate.returncode == -signal.SIGTERM, stderr[-3000:]
    saved = json.loads((tmp_path / "out" / "gate.json").read_text())
    reason = "stopped by SIGTERM while it ran: no test ended"
    assert [(row["stage"], row["status"], row["reason"]) for row in saved] == [
        ("alpha", "incomplete", reason), ("beta", "incomplete", reason),
    ]  # fmt: skip
    assert "gate INCOMPLETE — stopped by SIGTERM while alpha, beta ran" in stdout
    summary = json.loads((tmp_path / "out" / "report.json").read_text())
    assert summary["incomplete"]["stages"] == [f"alpha: {reason}", f"beta: {reason}"]
