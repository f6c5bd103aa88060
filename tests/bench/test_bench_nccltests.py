"""``rankgate bench comm --nccl-tests DIR``: parsing nccl-tests' output, running its binaries,
and its figures beside every backend's.

The outputs are nccl-tests 2.19.6 runs on 2 x H200 (benchmarks/reference/nvidia-h200-x2/
nccl-tests-runs/). nccl-tests needs GPUs, so here its binaries are stand-in scripts that
print those saved outputs (the section matching their -d and -G) and log their argv.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rankgate.bench import nccltests
from rankgate.bench.commoptions import CommOptions

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "benchmarks" / "reference" / "nvidia-h200-x2" / "nccl-tests-runs"
TURN3 = RUNS / "nccl-tests_h200x2_turn3.txt"
TURN2 = RUNS / "nccl-tests_h200x2_fp32-bf16-graph_turn2.txt"

STAND_IN = """#!{python}
# Prints the section of a saved nccl-tests output that matches -d and -G; logs its argv.
import sys
args = sys.argv[1:]
opt = dict(zip(args[::2], args[1::2]))
with open({log!r}, "a") as log:
    log.write(" ".join(sys.argv) + "\\n")
text = open({saved!r}).read()
for section in text.split("\\n\\n"):
    graph = "graph: " + ("1" if opt["-G"] != "0" else "0")
    if graph in section and " " + opt["-d"] + " " in section:
        print(section)
        break
"""


def stand_in(folder: Path, name: str, saved: Path = TURN3, body: str | None = None) -> Path:
    """An executable named like an nccl-tests binary."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    text = body or STAND_IN.format(python=sys.executable, log=str(folder / "argv.log"),
                                   saved=str(saved))  # fmt: skip
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def options(**kw) -> CommOptions:
    base = dict(world=2, on_gpu=True, backends=("nccl", "auto"), collectives=("all_reduce",),
                dtype="fp32", sizes=(1024, 2048, 4096), iters=20, warmup=5,
                graph_max=64 << 20)  # fmt: skip
    return CommOptions(**{**base, **kw})


# --- parsing ---------------------------------------------------------------------------


@pytest.mark.unit
def test_sections_keep_both_time_columns_and_the_graph_flag():
    sections = nccltests.parse_sections(TURN3.read_text())
    assert [(s["collective"], s["graph"], s["rows"][0]["type"]) for s in sections] == [
        ("all_reduce", False, "float"), ("all_reduce", True, "float"),
        ("all_reduce", True, "bfloat16"), ("all_reduce", False, "float"),
    ]  # fmt: skip
    first = sections[1]["rows"][0]
    assert (first["bytes"], first["count"], first["redop"], first["root"]) == (1024, 256, "sum", -1)
    assert (first["time_us"], first["busbw"], first["wrong"]) == (10.52, 0.10, 0)
    assert (first["in_place_time_us"], first["in_place_busbw"], first["in_place_wrong"]) == (
        10.08, 0.10, 0
    )  # fmt: skip
    assert [len(s["rows"]) for s in sections] == [15, 17, 17, 17]
    assert all(s["time_column"] == "time" for s in sections)


@pytest.mark.unit
def test_a_host_time_section_is_marked_as_such():
    sections = nccltests.parse_sections(TURN2.read_text())
    marked = [(s["graph"], s["time_column"]) for s in sections]
    assert (True, "cputime") in marked and marked.count((False, "time")) == len(marked) - 1
    broadcast = next(s for s in sections if s["collective"] == "broadcast")
    assert broadcast["rows"][-1]["root"] == 0 and broadcast["rows"][-1]["in_place_busbw"] == 370.10


@pytest.mark.unit
def test_references_leave_graph_and_host_time_sections_out(tmp_path):
    from rankgate.bench.commreport import load_references

    refs = load_references([str(TURN3), str(TURN2)])
    # eager fp32 of turn 2 (read last) at 2 KiB, not a graph's ~10 us or a cputime
    assert refs["all_reduce"][2048]["time_us"] == 13.12
    assert refs["broadcast"][2147483648]["busbw"] == 365.98


@pytest.mark.unit
def test_the_command_follows_the_runs_options(tmp_path):
    opts = options(sizes=(8, 32, 128, 512), dtype="bf16", iters=30, warmup=3, graph_max=128)
    eager = nccltests.command(tmp_path / "all_reduce_perf", opts, graph=False)
    assert eager[1:] == ["-b", "8", "-e", "512", "-f", "4", "-g", "2", "-d", "bfloat16",
                         "-n", "30", "-w", "3", "-G", "0", "-c", "1"]  # fmt: skip
    graph = nccltests.command(tmp_path / "all_reduce_perf", opts, graph=True)
    assert graph[graph.index("-e") + 1] == "128" and graph[graph.index("-G") + 1] == "1"


# --- running and attaching -----------------------------------------------------------


@pytest.mark.unit
def test_eager_and_graph_runs_go_beside_each_row_in_place_for_all_reduce(tmp_path):
    stand_in(tmp_path, "all_reduce_perf")
    found = nccltests.run_all(tmp_path, options())
    assert found["errors"] == []
    assert [(r["mode"], r["rows"][0]["type"]) for r in found["runs"]] == [
        ("eager", "float"), ("graph", "float")
    ]  # fmt: skip
    logged = (tmp_path / "argv.log").read_text().splitlines()
    assert [line.split()[-3] for line in logged] == ["0", "1"]  # -G 0, then -G 1
    for run in found["runs"]:
        assert run["started"] <= run["finished"]
    results = [{"collective": "all_reduce", "backend": "auto", "bytes": 2048},
               {"collective": "all_reduce", "backend": "auto", "bytes": 3000}]  # fmt: skip
    nccltests.attach(results, found)
    beside = results[0]["nccl_tests"]
    assert beside["eager"] == {"us": 18.03, "busbw": 0.11, "out_of_place_us": 17.17,
                               "in_place_us": 18.03, "placement": "in place"}  # fmt: skip
    assert beside["graph"]["us"] == 10.37 and beside["graph"]["out_of_place_us"] == 9.70
    assert "nccl_tests" not in results[1]  # a size nccl-tests did not run


@pytest.mark.unit
def test_out_of_place_collectives_get_the_out_of_place_column():
    found = {"runs": [{"collective": "all_gather", "mode": "eager", "rows": [
        {"bytes": 64, "time_us": 9.0, "busbw": 1.0, "in_place_time_us": 8.0,
         "in_place_busbw": 2.0}]}]}  # fmt: skip
    results = [{"collective": "all_gather", "bytes": 64}]
    nccltests.attach(results, found)
    assert results[0]["nccl_tests"]["eager"]["us"] == 9.0


@pytest.mark.unit
def test_missing_failing_and_silent_binaries_are_errors_of_their_own(tmp_path):
    stand_in(tmp_path, "all_reduce_perf")
    stand_in(tmp_path, "all_gather_perf",
             body="#!/bin/sh\necho 'NCCL failure common.cu:1030 unhandled cuda error' >&2\nexit 3\n")
    stand_in(tmp_path, "reduce_scatter_perf", body="#!/bin/sh\necho '# nothing measured'\n")
    opts = options(collectives=("all_reduce", "all_gather", "reduce_scatter", "broadcast"),
                   graph_max=0)  # fmt: skip
    found = nccltests.run_all(tmp_path, opts)
    assert [r["collective"] for r in found["runs"]] == ["all_reduce"]
    gather_perf = tmp_path / "all_gather_perf"
    assert found["errors"] == [
        f"all_gather eager: {gather_perf} -b 1024 -e 4096 -f 2 -g 2 -d float -n 20 -w 5 -G 0 "
        "-c 1: NCCL failure common.cu:1030 unhandled cuda error",
        "reduce_scatter eager: reduce_scatter_perf printed no result rows",
        f"broadcast: {tmp_path / 'broadcast_perf'} not found (build nccl-tests there)",
    ]


# --- the command, end to end on gloo ranks ------------------------------------------------


def bench(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rankgate.cli", "bench", "comm", "--cpu", "-b", "8", "-e", "2K",
           "--iters", "2", "--warmup", "1", "--reps", "2", "--out", str(out), "--json",
           *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)


@pytest.mark.dist
@pytest.mark.slow  # a rankgate bench run of its own
@pytest.mark.launches  # its gloo ranks would rendezvous on the launcher's variables
def test_bench_puts_nccl_tests_beside_gloo_in_every_output(tmp_path):
    stand_in(tmp_path / "nt", "all_reduce_perf")
    done = bench(tmp_path, "--nccl-tests", str(tmp_path / "nt"))
    assert done.returncode == 0, done.stderr[-3000:]
    text = (tmp_path / "out" / "comm.txt").read_text()
    assert "nt time" in text and "# nccl-tests from" in text
    row_2k = next(line for line in text.splitlines() if line.split()[:1] == ["2048"])
    assert row_2k.split()[-4] == "18.03"  # in-place eager time at 2 KiB (turn 3)
    saved = json.loads((tmp_path / "out" / "comm.json").read_text())
    by_size = {r["bytes"]: r for r in saved["results"]}
    assert by_size[8]["nccl_tests"]["eager"]["us"] == 16.93
    assert by_size[2048]["nccl_tests"]["eager"]["out_of_place_us"] == 17.17
    assert saved["nccl_tests"]["errors"] == []
    window = saved["meta"]["window"]
    assert window["ranks_started"] < window["ranks_finished"] <= saved["nccl_tests"]["runs"][0][
        "started"]  # fmt: skip
    assert (tmp_path / "out" / "comm_all_reduce.png").stat().st_size > 0


@pytest.mark.dist
@pytest.mark.slow  # a rankgate bench run of its own
@pytest.mark.launches  # its gloo ranks would rendezvous on the launcher's variables
def test_a_missing_binary_fails_the_command_but_the_bench_is_written(tmp_path):
    (tmp_path / "empty").mkdir()
    done = bench(tmp_path, "--nccl-tests", str(tmp_path / "empty"))
    assert done.returncode == 1
    missing = f"all_reduce: {tmp_path / 'empty' / 'all_reduce_perf'} not found"
    assert f"rankgate bench comm: nccl-tests: {missing}" in done.stderr
    text = (tmp_path / "out" / "comm.txt").read_text()
    assert f"# nccl-tests ERROR: {missing}" in text and "# all_reduce  backend gloo" in text
    saved = json.loads((tmp_path / "out" / "comm.json").read_text())
    assert len(saved["results"]) == 5 and all(r["wrong"] == 0 for r in saved["results"])


@pytest.mark.unit
def test_a_folder_that_is_not_there_is_bad_input(tmp_path):
    done = bench(tmp_path, "--nccl-tests", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        f"rankgate bench: error: --nccl-tests {tmp_path / 'nowhere'}: not a folder (give "
        "the one holding all_reduce_perf and the other nccl-tests binaries)"
    ]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
