"""One rule for the whole command line: a usage error is one line naming the option and
what it accepts, exit 2, and nothing has started (no output, no "run started")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rankgate import cli

pytestmark = pytest.mark.unit

CASES = [
    # bench: values
    (["bench", "--repeat", "0", "comm"],
     "rankgate bench: error: argument --repeat: must be an integer >= 1, got 0"),
    (["bench", "comm", "--world", "0"],
     "rankgate bench comm: error: argument --world: must be an integer >= 2, got 0"),
    (["bench", "comm", "--world", "two"],
     "rankgate bench comm: error: argument --world: 'two' is not an integer"),
    (["bench", "comm", "--iters", "0"],
     "rankgate bench comm: error: argument --iters: must be an integer >= 1, got 0"),
    (["bench", "comm", "--reps", "0"],
     "rankgate bench comm: error: argument --reps: must be an integer >= 1, got 0"),
    (["bench", "comm", "--rounds", "0"],
     "rankgate bench comm: error: argument --rounds: must be an integer >= 1, got 0"),
    (["bench", "comm", "--warmup", "-1"],
     "rankgate bench comm: error: argument --warmup: must be an integer >= 0, got -1"),
    (["bench", "comm", "-f", "1"],
     "rankgate bench comm: error: argument -f/--factor: must be an integer >= 2, got 1"),
    (["bench", "comm", "-b", "-8"],
     "rankgate bench comm: error: argument -b/--min-bytes: '-8' is not a size (e.g. 8, 64K, 2G)"),
    (["bench", "comm", "-e", "0"],
     "rankgate bench comm: error: argument -e/--max-bytes: must be a size >= 1 byte "
     "(e.g. 8, 64K, 2G), got 0"),
    (["bench", "comm", "--buffer-bytes", "lots"],
     "rankgate bench comm: error: argument --buffer-bytes: 'lots' is not a size "
     "(e.g. 8, 64K, 2G)"),
    (["bench", "comm", "--dtype", "fp64"],
     "rankgate bench comm: error: argument --dtype: invalid choice: 'fp64' "
     "(choose from fp32, bf16, fp16, int32)"),
    (["bench", "harness", "--k", "0"],
     "rankgate bench harness: error: argument --k: must be an integer >= 1, got 0"),
    (["bench", "harness", "--spawn-k", "0"],
     "rankgate bench harness: error: argument --spawn-k: must be an integer >= 1, got 0"),
    (["bench", "harness", "--worlds", "0"],
     "rankgate bench harness: error: argument --worlds: must be an integer >= 1, got 0"),
    # bench: results that could not be saved (checked before the ranks start)
    (["bench", "comm", "--out", "/dev/null"],
     "rankgate bench: error: --out /dev/null: not a folder"),
    (["bench", "comm", "--out", "/dev/null/comm"],
     "rankgate bench: error: --out /dev/null/comm: cannot make the folder (Not a directory)"),
    (["bench", "attention", "--out", "/dev/null"],
     "rankgate bench: error: --out /dev/null: not a folder"),
    # bench: runs this machine cannot do (no GPU here)
    (["bench", "comm", "--cpu", "--backends", "nccl", "-b", "8", "-e", "8"],
     "rankgate bench: error: --backends nccl needs one GPU per rank and this run is on the CPU "
     "(2 ranks); use --backends gloo, or run where 2 GPUs are visible without --cpu"),
    (["bench", "harness", "--k", "2", "--spawn-k", "1", "--worlds", "2", "--backend", "nccl"],
     "rankgate bench: error: --backend nccl needs 2 GPUs for --worlds 2; 0 visible. "
     "Use --backend gloo"),
    # dispatch: waiting
    *[
        (["dispatch", "--profile", "site.toml", option, value],
         f"rankgate dispatch: error: argument {option}: must be a number of seconds > 0, "
         f"got {value}")
        for option in ("--deadline", "--queue-timeout", "--run-timeout", "--poll")
        for value in ("-5", "0", "nan", "inf")
    ],
    (["dispatch", "--profile", "site.toml", "--deadline", "soon"],
     "rankgate dispatch: error: argument --deadline: 'soon' is not a number of seconds"),
    (["dispatch", "--stage", "gpu"],
     "rankgate dispatch: error: the following arguments are required: --profile"),
    # run: a profile the dispatched stages could not read, before the local stages
    (["run", "--profile", "/nonexistent/site.toml", "--stage", "unit"],
     "rankgate run: error: --profile /nonexistent/site.toml: /nonexistent/site.toml: "
     "no such file"),
    # run: options checked before any stage starts
    (["run", "--parallel", "abc"],
     "rankgate run: error: argument --parallel: 'abc' is not a number of workers "
     "(a whole number, auto or logical)"),
    (["run", "--unit", "--file", "tests/no_such_test.py"],
     "rankgate run: error: --file tests/no_such_test.py: no such file or directory"),
    (["run", "--file", "tests/no_such_test.py::test_x"],
     "rankgate run: error: --file tests/no_such_test.py::test_x: no such file or directory"),
    # report
    (["report", "--plot", "/nonexistent.png"],
     "rankgate report: error: argument --plot: /nonexistent.png: no such file"),
    (["report", "--bench", "/nonexistent.json"],
     "rankgate report: error: argument --bench: /nonexistent.json: no such file"),
    # merge-junit
    (["merge-junit", "--world", "0", "out"],
     "rankgate merge-junit: error: argument --world: must be an integer >= 1, got 0"),
    (["merge-junit", "--world", "x", "out"],
     "rankgate merge-junit: error: argument --world: 'x' is not an integer"),
    (["merge-junit"], "rankgate merge-junit: error: no JUnit files given"),
    # env-check
    (["env-check", "--jsn"], "rankgate: error: unrecognized arguments: --jsn"),
    (["no-such-command"],
     "rankgate: error: argument COMMAND: invalid choice: 'no-such-command' (choose from "
     "env-check, run, bench, dispatch, merge-junit, report)"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_usage_error_is_one_line_and_exit_2_before_any_work(argv, line, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["rankgate"])  # cli.main rewrites sys.argv
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    # Python versions differ in quoting argparse's choices, not in anything else.
    assert (code, out, unquoted(err)) == (2, "", unquoted(line) + "\n")


# Inputs that are files: each case runs in a folder holding them (see ``inputs``).
FILE_CASES = [
    (["dispatch", "--profile", "folder", "--stage", "gpu", "--dry-run"],
     "rankgate dispatch: error: folder: a folder, not a TOML file"),
    (["dispatch", "--profile", "latin1.toml", "--stage", "gpu", "--dry-run"],
     "rankgate dispatch: error: latin1.toml: not UTF-8 text (byte 0xe9 at offset 12); "
     "save it as UTF-8"),
    (["dispatch", "--profile", "huge.toml", "--stage", "gpu", "--dry-run"],
     "rankgate dispatch: error: huge.toml: nodes = 99999999999999999999999: must be 1 to "
     "1000000"),
    (["report", "x.xml", "--plot", "plot.json"],
     "rankgate report: error: argument --plot: plot.json: not a PNG image"),
    (["run", "--markers", "((("],
     "rankgate run: error: --markers (((: not a marker expression (expected not OR left "
     "parenthesis OR identifier; got end of input at column 4)"),
    (["bench", "compare", "--kind", "nonsense"],
     "rankgate bench: error: --kind nonsense: not a machine kind (auto, cpu or "
     "nvidia-<gpu>-x<count>; baselines exist for: cpu)"),
]  # fmt: skip


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    """A folder holding the files FILE_CASES name, as the working directory."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "latin1.toml").write_bytes('target = "sl\u00e9"\n'.encode("latin-1"))
    (tmp_path / "huge.toml").write_text('target = "slurm"\nnodes = 99999999999999999999999\n')
    (tmp_path / "plot.json").write_text("{}\n")
    (tmp_path / "benchmarks" / "baselines" / "cpu").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(("argv", "line"), FILE_CASES, ids=[" ".join(a) for a, _ in FILE_CASES])
def test_a_bad_input_file_is_one_line_and_exit_2(argv, line, inputs, monkeypatch, capsys):
    test_a_usage_error_is_one_line_and_exit_2_before_any_work(argv, line, monkeypatch, capsys)
    assert not Path("out").exists()  # nothing ran, nothing was written


def test_bench_help_names_every_benchmark(monkeypatch, capsys):
    from rankgate.bench.bench_command import _BENCHMARKS

    monkeypatch.setattr(sys, "argv", ["rankgate"])
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    description = capsys.readouterr().out.split("\n\n")[1]
    assert all(name in description for name in _BENCHMARKS), description


def unquoted(text: str) -> str:
    return text.replace("'", "")
