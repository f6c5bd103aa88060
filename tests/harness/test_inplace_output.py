"""In place, long output is cut as the pool cuts it: each rank's stream keeps its first
and last bytes around one marker line, in rank 0's terminal (``TERMINAL_LIMIT``), in each
rank's JUnit file and so in merge-junit's file (``JUNIT_LIMIT``). Runs pytest on 2 gloo
ranks under torchrun, for real.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest
from jobs import run_torchrun_pytest

from rankgate.harness.output import JUNIT_LIMIT, TERMINAL_LIMIT, clip_text

# slow: starts torchrun, and pytest on every rank
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

LINES = 50_000
"""Of 104 bytes each: 5.2 MB a rank."""

LOUD = f"""
import pytest

@pytest.mark.world(2)
def test_loud(rank):
    for i in range({LINES}):
        print(f"rank {{rank}} line {{i:06d}} " + "x" * 84)
    assert rank < 0, "fails on every rank, so the terminal shows their output"
"""


def _output(rank: int) -> str:
    return "".join(f"rank {rank} line {i:06d} " + "x" * 84 + "\n" for i in range(LINES))


def test_in_place_output_is_cut_as_the_pools(tmp_path):
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(LOUD))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = run_torchrun_pytest(
        tmp_path, "-q", "--color=no", "--junitxml=out/junit.xml", "test_suite.py", timeout=180
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert len(_output(0)) == 5_200_000
    # Rank 0's terminal: each rank's stream as the pool's terminal shows it.
    for rank in (0, 1):
        assert clip_text(_output(rank), TERMINAL_LIMIT) in proc.stdout
    assert len(proc.stdout.encode()) < 2 * TERMINAL_LIMIT + 20_000
    # Each rank's JUnit file: its stream as the pool's JUnit property holds it.
    for rank in (0, 1):
        path = tmp_path / "out" / f"junit.rank{rank}.xml"
        (out,) = [e.text for e in ET.parse(path).getroot().iter("system-out")]
        cut = clip_text(_output(rank), JUNIT_LIMIT)
        assert cut in out, out[-500:]
        assert path.stat().st_size < JUNIT_LIMIT + 20_000
    merged = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "merge-junit", "out", "-o", "merged.xml"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert (tmp_path / "merged.xml").stat().st_size < 2 * JUNIT_LIMIT + 40_000
    assert (tmp_path / "merged.xml").read_text().count("bytes of this output cut here") == 2
