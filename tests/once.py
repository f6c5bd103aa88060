"""A fixture's result computed once per test run, whatever the number of xdist workers.

pytest-xdist hands a file's tests to every worker, and each worker sets a module or session
fixture up again: one that starts processes (an inner pytest session, torchrun on a planted
project) starts them once per worker. ``once_per_run`` computes the value in the first worker
that asks, under a lock in the run's shared temp dir, and writes it there as JSON; the other
workers wait for the lock and read it. Alone (no xdist), the fixture just computes it.

The value goes through JSON in every case, so a fixture sees the same types with and
without xdist: paths and finished processes (``subprocess.CompletedProcess``) come back as
such, a tuple comes back a list (it unpacks the same). Folders the computation made stay in
the computing worker's temp dir, which every worker can read: tests that share one must not
change it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock


def once_per_run(request: pytest.FixtureRequest, compute: Callable[[], Any], part: str = "") -> Any:
    """``compute()`` (JSON, paths, finished processes) once per run, for the fixture that
    ``request`` sets up.

    Keyed by the fixture's name, its scope's node (the test file of a module fixture), its
    parameter and ``part`` (one key per value, for a fixture that computes several): two
    fixtures never share a value. A failure of the computation fails every worker's setup
    with its traceback, and is not run again; a skip skips them all.
    """
    if not hasattr(request.config, "workerinput"):
        return _loads(_dumps(compute()))
    workerinput = request.config.workerinput
    # The run's temp dir, above each worker's own; the run's id guards against a
    # --basetemp that an earlier run used too.
    shared = request.getfixturevalue("tmp_path_factory").getbasetemp().parent
    param = request.param if hasattr(request, "param") else None
    key = (
        f"{workerinput['testrunuid']}|{request.node.nodeid}|{request.fixturename}|{param!r}|{part}"
    )
    path = shared / f"once-{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"
    with FileLock(f"{path}.lock"):
        if not path.exists():
            return _compute_and_write(compute, path)
        outcome = _loads(path.read_text())
    if "skip" in outcome:
        pytest.skip(outcome["skip"])
    if "error" in outcome:
        pytest.fail(f"{request.fixturename}, computed once for the run, failed in "
                    f"{outcome['worker']}:\n{outcome['error']}", pytrace=False)  # fmt: skip
    return outcome["value"]


def _compute_and_write(compute: Callable[[], Any], path: Path) -> Any:
    """The first worker's part: its own failure shows as it is; the others read it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "a worker")
    try:
        value = _loads(_dumps(compute()))
    except pytest.skip.Exception as skip:
        path.write_text(json.dumps({"skip": skip.msg}))
        raise
    except Exception:
        path.write_text(json.dumps({"error": traceback.format_exc(), "worker": worker}))
        raise
    path.write_text(_dumps({"value": value}))
    return value


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_encode)


def _loads(text: str) -> Any:
    return json.loads(text, object_hook=_decode)


def _encode(value: Any) -> dict[str, Any]:
    if isinstance(value, Path):
        return {"__path__": str(value)}
    if isinstance(value, subprocess.CompletedProcess):
        return {"__completed__": [value.args, value.returncode, value.stdout, value.stderr]}
    raise TypeError(f"once_per_run: a {type(value).__name__} cannot be shared through JSON")


def _decode(value: dict[str, Any]) -> Any:
    if "__path__" in value:
        return Path(value["__path__"])
    if "__completed__" in value:
        return subprocess.CompletedProcess(*value["__completed__"])
    return value
