"""Each LEDGER_VARIANT of scripts/ledger/pool_variant installs what its docstring says
(scripts/ledger/check_variant.py on gloo): a timing of a variant on a GPU host is only
worth its name if the variant isolates what it claims to.

One variant runs as scripts/gpu/ledger-ab.sh runs each (its folder on PYTHONPATH: Python
imports the sitecustomize as it starts, a cold interpreter importing torch); the others
through the warm python (tests/warmstart.py), which runs the same file first, by its path:
it patches the ledger module before the check installs it, as a rank's start does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.once import once_per_run
from tests.warmstart import WARM_PYTHON

ROOT = Path(__file__).resolve().parents[2]
VARIANT_DIR = ROOT / "scripts" / "ledger" / "pool_variant"
CHECK = ROOT / "scripts" / "ledger" / "check_variant.py"

pytestmark = pytest.mark.dist  # each case starts a Python process with a gloo group

# The check's test: dist.all_reduce(t), dist.all_reduce(t, async_op=True).wait(),
# pg.allreduce([t]).wait(): three entries, the last two holding their Work.
EXPECTED = {
    # variant: (install, functions, c10d, methods, entries, works, last number or None)
    "none": (True, True, True, True, 3, 2, 3),
    "passthrough": (True, True, True, True, 1, 1, 1),
    "dist-only": (True, True, False, True, 3, 2, 3),
    "functions-only": (True, True, True, False, 2, 1, 2),
    "forward-only": (True, True, True, True, 0, 0, None),
    "no-work": (True, True, True, True, 3, 0, 3),
    "no-digest": (True, True, True, True, 3, 2, None),
    "nothing": (False, False, False, False, 0, 0, None),
}


@pytest.fixture(scope="module")
def check(request) -> Callable[[str], subprocess.CompletedProcess]:
    """``check(variant)``: the check run on ``variant``, once per run (tests/once.py): the
    digest test reads the runs of "none" and "no-work" that the variant tests made."""
    done: dict[str, subprocess.CompletedProcess] = {}

    def run(variant: str) -> subprocess.CompletedProcess:
        if variant not in done:
            done[variant] = once_per_run(request, lambda: _run(variant), part=variant)
        return done[variant]

    return run


AS_THE_SCRIPT_RUNS = "passthrough"
"""The variant run with its folder on PYTHONPATH (cold), as scripts/gpu/ledger-ab.sh does."""

# The variant's file, then the check, in one warm program.
VARIANT_THEN_CHECK = """
import runpy, sys
runpy.run_path(sys.argv[1])
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _run(variant: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LEDGER_VARIANT": variant, "RANKGATE_LEDGER": "1"}
    if variant == AS_THE_SCRIPT_RUNS or variant not in EXPECTED:
        env["PYTHONPATH"] = os.pathsep.join([str(VARIANT_DIR), os.environ.get("PYTHONPATH", "")])
        argv = [sys.executable, str(CHECK)]
    else:
        site = str(VARIANT_DIR / "sitecustomize.py")
        argv = [WARM_PYTHON.executable(), "-c", VARIANT_THEN_CHECK, site, str(CHECK)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("variant", list(EXPECTED))
def test_each_variant_installs_what_it_says(check, variant):
    proc = check(variant)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    install, functions, c10d, methods, entries, works, last = EXPECTED[variant]
    got = (
        report["install"],
        report["functions"],
        report["c10d"],
        report["methods"],
        report["entries"],
        report["works"],
        None if report["digest"] is None else report["digest"]["world"][1],
    )
    assert got == (install, functions, c10d, methods, entries, works, last)
    assert report["variant"] == variant


def test_no_work_digest_matches_the_ledgers(check):
    # Only the Work is dropped: the entries compare the same across ranks as before.
    assert check("no-work").stdout == check("none").stdout.replace('"none"', '"no-work"').replace(
        '"works": 2', '"works": 0'
    )


def test_an_unknown_variant_stops_with_one_line_and_exit_2():
    proc = _run("bogus")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "LEDGER_VARIANT='bogus': use one of passthrough, dist-only, functions-only, "
        "forward-only, no-work, no-digest, nothing (or none)"
    ]
