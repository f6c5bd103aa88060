"""``rankgate bench comm`` says what it has measured as it goes: one stderr line per size
and backend, in the order they ran, while stdout keeps the table and the JSON."""

from __future__ import annotations

import io
import json
import re
import subprocess

import pytest

from rankgate.bench.commprogress import SweepProgress, size_text
from tests.warmstart import WARM_PYTHON

LINE = re.compile(r"(comm(?: calibration)?:) (?:round (\d)/2  )?(\w+) (\d+ KiB)  "
                  r"backend (\d)/(\d) \((\w+)\)  (\d+\.\d) s")  # fmt: skip


@pytest.mark.dist
@pytest.mark.launches  # bench comm starts gloo ranks of its own
def test_one_line_per_size_and_backend_in_the_order_they_ran():
    cmd = [WARM_PYTHON.executable(), "-m", "rankgate.cli", "bench", "comm", "--cpu",
           "--backends", "gloo,auto", "--collectives", "all_reduce,send_recv",
           "-b", "1K", "-e", "4K", "-f", "4", "--iters", "1", "--warmup", "0", "--reps", "1",
           "--rounds", "2", "--json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # (auto's own notes, "comm backend auto: not nccl ...", are not progress)
    progress = [line for line in done.stderr.splitlines()
                if line.startswith(("comm:", "comm calibration:"))]  # fmt: skip
    lines = [LINE.fullmatch(line) for line in progress]
    assert all(lines), done.stderr
    got = [(m[1], m[2], m[3], m[4], f"{m[5]}/{m[6]}", m[7]) for m in lines]
    sizes = [("all_reduce", "1 KiB"), ("all_reduce", "4 KiB"), ("send_recv", "1 KiB"),
             ("send_recv", "4 KiB")]  # fmt: skip
    # auto's sizes come from a calibrating sweep of the single backends (gloo here);
    # then every backend at each size, the order turned around every size and round
    calibration = [("comm calibration:", r, c, s, "1/1", "gloo") for r in "12" for c, s in sizes]
    final = [
        ("comm:", r, c, s, f"{i}/2", name)
        for r in "12"
        for step, (c, s) in enumerate(sizes)
        for i, name in enumerate(
            ("gloo", "auto") if (int(r) - 1 + step % 2) % 2 == 0 else ("auto", "gloo"), 1
        )
    ]
    assert got == calibration + final
    elapsed = [float(m[8]) for m in lines]
    assert elapsed == sorted(elapsed)  # time since the sweep began
    # stdout is the table and the JSON, as before: no progress there
    assert not [line for line in done.stdout.splitlines()
                if line.startswith(("comm:", "comm calibration:"))]  # fmt: skip
    result = json.loads(done.stdout.strip().splitlines()[-1])
    order = [(r["collective"], r["backend"], r["bytes"]) for r in result["results"]]
    assert order == [("all_reduce", "gloo", 1024), ("all_reduce", "auto", 1024),
                     ("all_reduce", "auto", 4096), ("all_reduce", "gloo", 4096),
                     ("send_recv", "gloo", 1024), ("send_recv", "auto", 1024),
                     ("send_recv", "auto", 4096), ("send_recv", "gloo", 4096)]  # fmt: skip
    assert all(r["wrong"] == 0 for r in result["results"]), result["results"]


@pytest.mark.unit
def test_a_line_names_the_stage_round_size_and_backend():
    out = io.StringIO()
    progress = SweepProgress(True, rounds=3, stream=out)
    progress.measured("final", 1, "all_reduce", 64 << 10, 3, 5, "nccl")
    progress.measured("calibration", 0, "all_gather", 1020, 1, 4, "p2p-push")
    SweepProgress(False, rounds=1, stream=out).measured("final", 0, "broadcast", 8, 1, 1, "gloo")
    first, second = out.getvalue().splitlines()
    assert re.fullmatch(r"comm: round 2/3  all_reduce 64 KiB  backend 3/5 \(nccl\)  \d+\.\d s",
                        first)  # fmt: skip
    assert second.startswith("comm calibration: round 1/3  all_gather 1020 B  backend 1/4 ")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("nbytes", "text"),
    [(8, "8 B"), (1020, "1020 B"), (1024, "1 KiB"), (1536, "1536 B"), (64 << 20, "64 MiB"),
     (2 << 30, "2 GiB"), (3 << 19, "1536 KiB")],
)  # fmt: skip
def test_size_text(nbytes, text):
    assert size_text(nbytes) == text
