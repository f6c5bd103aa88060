"""The whole test tree, collected once in a subprocess: node ID -> marker names (and each
test's fixtures).

tests/pipeline's session fixture ``collected_tree`` uses it (stage paths, lost tests), and
tests/dispatch/test_dispatch_cli.py (what a cluster's ranks would run): one collection
for both (:func:`collect_once_for_run`).
Run as a script, it prints the tests each stage of .ci/run selects, one
``stage<TAB>node ID`` line each; that is how ci-tests-before.txt was made:

    python tests/pipeline/tree_collection.py > tests/pipeline/ci-tests-before.txt
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LONG_ID = 100
"""pytest 9.2 writes a parametrized value longer than this as its argument's name and
index (``expected16``); older pytests wrote the value itself. Such an id depends on the
pytest that collects it, so it needs an explicit ``ids=``."""

_DUMP_PLUGIN = """
import json, os

LONG_ID = int(os.environ["RANKGATE_LONG_ID"])
long_values = []

def pytest_make_parametrize_id(config, val, argname):
    # called for each value pytest makes an id of itself (no ids= for it)
    if isinstance(val, (str, bytes)) and len(val) > LONG_ID:
        long_values.append(f"{argname}={val[:60]!r}...")

def pytest_collection_finish(session):
    found = {item.nodeid: sorted({m.name for m in item.iter_markers()}) for item in session.items}
    fixtures = {item.nodeid: list(getattr(item, "fixturenames", ())) for item in session.items}
    with open(os.environ["RANKGATE_MARKER_DUMP"], "w") as f:
        json.dump({"markers": found, "fixtures": fixtures, "long_values": long_values}, f)
"""


class Tree(dict):
    """node ID -> marker names, as collected; ``fixtures``: node ID -> the names of the
    fixtures the test uses; ``long_values``: the parametrized values whose id would depend
    on pytest's version (see :data:`LONG_ID`)."""

    fixtures: dict[str, list[str]]
    long_values: list[str]


class _Markers(dict):
    """Marker names as variables of a marker expression: an absent marker is False."""

    def __missing__(self, key: str) -> bool:
        return False


def selects(expression: str, names: list[str]) -> bool:
    """Does the marker expression select a test carrying ``names``?"""
    # Marker expressions are and/or/not over names: Python evaluates them the same way.
    return bool(eval(expression, {"__builtins__": {}}, _Markers.fromkeys(names, True)))


def collect(root: Path = ROOT) -> Tree:
    """Every test pytest collects under ``root`` (no -m): node ID -> its marker names."""
    with tempfile.TemporaryDirectory(prefix="rankgate-tree-") as tmp:
        dump = Path(tmp) / "markers.json"
        _dump(root, dump)
        return _load(dump)


def collect_once(shared: Path, root: Path = ROOT) -> Tree:
    """:func:`collect`, done by the first of the processes that pass the same ``shared``
    folder (xdist's workers pass their common temp dir) and read by the others: each
    collection of the tree imports every test module again (8 s on 2 cores). Called from
    tests, so its pytest starts through their warm python (tests/warmstart.py)."""
    from tests.warmstart import WARM_PYTHON

    dump = shared / "tree-collection.json"
    with open(shared / "tree-collection.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait for the first one's dump
        if not dump.is_file():
            _dump(root, dump, WARM_PYTHON.executable())
    return _load(dump)


def collect_once_for_run(tmp_path_factory) -> Tree:
    """:func:`collect_once` in this run's shared folder: the common temp dir of xdist's
    workers, or this process's own."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return collect_once(tmp_path_factory.getbasetemp().parent)
    return collect_once(tmp_path_factory.getbasetemp())


def _dump(root: Path, dump: Path, python: str = sys.executable) -> None:
    with tempfile.TemporaryDirectory(prefix="rankgate-tree-") as tmp:
        (Path(tmp) / "rankgate_marker_dump.py").write_text(_DUMP_PLUGIN)
        env = {
            **os.environ,
            "RANKGATE_MARKER_DUMP": str(dump),
            "RANKGATE_LONG_ID": str(LONG_ID),
            "PYTHONPATH": os.pathsep.join([tmp, os.environ.get("PYTHONPATH", "")]),
        }
        done = subprocess.run(
            [python, "-m", "pytest", "--collect-only", "-q", "-p", "rankgate_marker_dump",
             "-p", "no:cacheprovider"],
            cwd=root, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if not dump.is_file():
            raise RuntimeError(
                "collection wrote no dump:\n" + done.stdout[-3000:] + done.stderr[-3000:]
            )


def _load(dump: Path) -> Tree:
    dumped = json.loads(dump.read_text())
    tree = Tree(dumped["markers"])
    tree.fixtures = dumped["fixtures"]
    tree.long_values = dumped["long_values"]
    return tree


def _ci_nox_words(root: Path) -> list[str]:
    """The words after ``nox -s`` on .ci/run's last line that has them."""
    lines = [line for line in (root / ".ci" / "run").read_text().splitlines() if "nox -s " in line]
    return lines[-1].split("nox -s ", 1)[1].split()


def _gate_options(words: list[str]):
    from rankgate.pipeline.executor import Options

    posargs = words[words.index("--") + 1 :] if "--" in words else []
    return Options.from_args(posargs, quick=True)  # as noxfile.py's gate session reads them


def ci_stages(root: Path = ROOT) -> list[str]:
    """The stages .ci/run runs: its last ``nox -s`` line's sessions, or the gate's
    ``--only`` list there."""
    words = _ci_nox_words(root)
    if words[0] != "gate":
        return words
    from rankgate.pipeline import stages

    return list(_gate_options(words).only or stages.get("gate").includes)


def ci_gate_is_quick(root: Path = ROOT) -> bool:
    """Whether .ci/run runs the quick gate (which leaves out the tests marked slow)."""
    words = _ci_nox_words(root)
    return words[0] == "gate" and _gate_options(words).quick


def by_stage(collected: dict[str, list[str]], markers: dict[str, str]) -> dict[str, set[str]]:
    """stage -> the node IDs its marker expression selects (stages without one select none)."""
    return {
        stage: {
            node for node, names in collected.items() if expression and selects(expression, names)
        }
        for stage, expression in markers.items()
    }


def read_list(path: Path) -> dict[str, set[str]]:
    """A ``stage<TAB>node ID`` file as stage -> node IDs."""
    found: dict[str, set[str]] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            stage, node = line.split("\t", 1)
            found.setdefault(stage, set()).add(node)
    return found


def lost(before: dict[str, set[str]], after: dict[str, set[str]]) -> set[str]:
    """Node IDs some stage ran before that no stage runs after (moving between stages is fine)."""
    ran_after = set().union(*after.values()) if after else set()
    return set().union(*before.values()) - ran_after if before else set()


def main() -> int:
    from rankgate.pipeline import stages

    chosen = {name: stages.get(name).markers for name in ci_stages()}
    selected = by_stage(collect(), chosen)
    print(
        "# stage<TAB>node ID: the tests .ci/run's stages collect (tests/pipeline/tree_collection.py)"
    )
    for stage, nodes in selected.items():
        for node in sorted(nodes):
            print(f"{stage}\t{node}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
