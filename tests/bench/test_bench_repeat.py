"""``rankgate bench --repeat N harness --json``: N runs, each with its contention probe,
read back by ``bench compare`` as N repetitions (the bench stage's command, small)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from rankgate.bench.samples import load
from tests.warmstart import WARM_PYTHON

pytestmark = pytest.mark.perf


def test_repeated_runs_become_repetitions(tmp_path):
    done = subprocess.run(
        [WARM_PYTHON.executable(), "-m", "rankgate.cli", "bench", "--repeat", "2", "harness",
         "--json", "--k", "3", "--spawn-k", "1", "--worlds", "2"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "CI": "true"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    progress = [line for line in done.stderr.splitlines() if line.startswith("rankgate: bench")]
    assert [line.split(" in ")[0] for line in progress] == [
        "rankgate: bench harness [1/2] run started",
        "rankgate: bench harness [1/2] passed",
        "rankgate: bench harness [2/2] run started",
        "rankgate: bench harness [2/2] passed",
    ]
    saved = tmp_path / "harness.json"
    saved.write_text(done.stdout)
    samples = load(saved)
    assert len(samples.values[("pool_median_ms", "world 2 gloo")]) == 2
    # the spawn-per-test reference is spawned in the first run alone
    runs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    assert [(r[0]["spawn_ms_per_test"] is None, r[0]["k_spawn"]) for r in runs] == [
        (False, 1), (True, 0),
    ]  # fmt: skip
    assert len(samples.values[("spawn_ms_per_test", "world 2 gloo")]) == 1
    assert len(samples.probes) == 2
    for probe in samples.probes:
        assert probe["cpus"] == os.cpu_count() and 0 <= probe["others_share"] <= 1
    probes = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [list(p) for p in probes] == [["rankgate_contention"]] * 2
