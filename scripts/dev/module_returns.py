"""How often one in-place test's path goes back to a rankgate module it already left
(issue 61 part 4: "fewer times than today's 24").

Runs one passing world(2) test in place (``torchrun --standalone --nproc-per-node=2 -m
pytest``) on the rankgate tree under ``--src``, and on rank 0's main thread follows the
calls (``sys.setprofile``) from rankgate's ``pytest_runtest_protocol`` (the in-place hook
that starts the test) to its return (the verdict written: terminal, JUnit, results file).
Only frames of rankgate's modules count; pytest's, torch's and the test's own are looked
through. Two readings of the path, each over every rankgate module and over the in-place
wing's only (``rankgate.harness.inplace``; the rest looked through):

- calls: the module of each rankgate function called, in order, repeats merged;
- transitions: the same with the returns too (B returning into A is a step back to A).

A *return* is a step onto a module already left earlier in that sequence (A -> B -> A
counts 1). Prints both sequences and their counts, and which module pairs (from -> back
to) make the returns.

    python scripts/dev/module_returns.py --src src
    git archive 5fca43e src | tar -x -C /tmp/old
    python scripts/dev/module_returns.py --src /tmp/old/src
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

SUITE = """
import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2)
def test_one(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
"""

TRACER = """
import json
import os
import sys

HOOK = "pytest_runtest_protocol"
OUT = os.environ.get("MODULE_RETURNS_OUT")
calls, steps, state = [], [], {"frame": None}


def _module(frame):
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name if name == "rankgate" or name.startswith("rankgate.") else None


def _add(seq, module):
    if module is not None and (not seq or seq[-1] != module):
        seq.append(module)


def _profile(frame, event, arg):
    if event not in ("call", "return"):
        return
    if state["frame"] is None:  # waiting for the in-place hook
        if event == "call" and frame.f_code.co_name == HOOK and _module(frame):
            state["frame"] = frame
            _add(calls, _module(frame))
            _add(steps, _module(frame))
        return
    if event == "call":
        _add(calls, _module(frame))
        _add(steps, _module(frame))
        return
    if frame is state["frame"]:  # the hook returns: the verdict is written
        sys.setprofile(None)
        with open(OUT, "w") as f:
            json.dump({"calls": calls, "transitions": steps}, f)
        return
    _add(steps, _module(frame.f_back))


def pytest_configure(config):
    if OUT and os.environ.get("RANK") == "0":
        sys.setprofile(_profile)
"""


def returns(sequence: list[str]) -> tuple[int, collections.Counter]:
    """Steps onto a module already left, and the (from, back to) pairs that make them."""
    seen, count, pairs = set(), 0, collections.Counter()
    for i, module in enumerate(sequence):
        if module in seen:
            count += 1
            pairs[(sequence[i - 1], module)] += 1
        seen.add(module)
    return count, pairs


WING = "rankgate.harness.inplace"
"""The in-place wing's modules: the second scope, the rest of rankgate looked through."""


def merged(sequence: list[str]) -> list[str]:
    """Repeats merged: a path that left a module only for one outside the scope stays."""
    return [m for i, m in enumerate(sequence) if i == 0 or sequence[i - 1] != m]


def short(module: str) -> str:
    return module.removeprefix("rankgate.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default="src", help="the rankgate tree's src folder")
    parser.add_argument("--keep", help="write the raw sequences (JSON) to this file")
    args = parser.parse_args()
    src = Path(args.src).resolve()
    if not (src / "rankgate" / "__init__.py").is_file():
        print(f"module_returns: {src} holds no rankgate package: pass --src <tree>/src",
              file=sys.stderr)  # fmt: skip
        return 2
    with tempfile.TemporaryDirectory(prefix="module-returns-") as tmp:
        folder = Path(tmp)
        (folder / "test_one.py").write_text(textwrap.dedent(SUITE))
        (folder / "conftest.py").write_text(TRACER)
        (folder / "pytest.ini").write_text("[pytest]\n")
        out = folder / "path.json"
        env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{folder}",
               "MODULE_RETURNS_OUT": str(out)}  # fmt: skip
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", "-m", "pytest", "-p", "no:cacheprovider",
               "-p", "no:randomly", "-q", "--color=no", "test_one.py"]  # fmt: skip
        proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not out.is_file():
            print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
            print(f"module_returns: the run failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        path = json.loads(out.read_text())
        if args.keep:
            Path(args.keep).write_text(json.dumps(path))
    print(f"rankgate tree: {src}")
    print("one in-place world(2) test at 2 ranks, rank 0, rankgate's pytest_runtest_protocol "
          "to its return")  # fmt: skip
    for reading in ("calls", "transitions"):
        for scope, prefix in (("rankgate", "rankgate"), ("in-place wing", WING)):
            sequence = merged([m for m in path[reading] if m.startswith(prefix)])
            count, pairs = returns(sequence)
            print(f"\n{reading}, {scope} modules: {len(sequence)} steps, "
                  f"{len(set(sequence))} modules, {count} returns to a module already left "
                  f"({len(pairs)} distinct pairs)")  # fmt: skip
            print("  " + " -> ".join(short(m) for m in sequence))
            print("  returns by (from -> back to):")
            for (before, module), n in pairs.most_common():
                print(f"    {n:3d}  {short(before)} -> {short(module)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
