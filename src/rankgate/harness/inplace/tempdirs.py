"""In place: the ranks on one host must share a temp dir, and each test's shared
directory is the same on every rank.

torch's symmetric memory passes file descriptors between the ranks of a host over a
Unix socket under TMPDIR, and file-based stores are looked for in the temp dir: ranks
with different temp dirs (a per-process TMPDIR, as some test set-ups give) cannot
reach each other there, and fail with "Failed to send fd" or wait for each other.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

from rankgate.harness.verdict_lines import ranks


def this_rank() -> tuple[str, str]:
    """(host, temp dir), a plain tuple: it crosses the store pickled."""
    return (socket.gethostname(), tempfile.gettempdir())


def split_temp_dirs(everyone: list[tuple[str, str]]) -> str | None:
    """A warning naming the hosts whose ranks have different temp dirs, or None."""
    dirs_by_host: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for rank, (host, temp_dir) in enumerate(everyone):
        dirs_by_host[host][temp_dir].append(rank)
    split = {host: dirs for host, dirs in dirs_by_host.items() if len(dirs) > 1}
    if not split:
        return None
    where = "; ".join(
        f"on {host}: "
        + ", ".join(f"{ranks(numbers)} {temp_dir}" for temp_dir, numbers in sorted(dirs.items()))
        for host, dirs in sorted(split.items())
    )
    return (
        f"rankgate: ranks on one host have different temp dirs ({where}). torch's symmetric "
        "memory (file descriptors sent over a socket under TMPDIR: 'Failed to send fd') and "
        "file-based stores in the temp dir fail between them. Give every rank on a host the "
        "same TMPDIR."
    )


def warn_if_split(config, control) -> None:
    """One warning, on every rank before any test, when ranks on one host have different
    temp dirs (``control``: the ranks' channel, to gather each one's)."""
    split = split_temp_dirs(control.all_gather("tempdir", this_rank()))
    if split:
        config.issue_config_time_warning(pytest.PytestWarning(split), stacklevel=2)


PYTEST_TEMP_ROOT = "PYTEST_DEBUG_TEMPROOT"
"""pytest's root of its temp dirs (``pytest-of-<user>/pytest-<N>``), read when a test
first asks for one."""


def own_pytest_temp_root(config, rank: int) -> None:
    """Ranks above 0 keep pytest's temp dirs (a plain test's ``tmp_path``) apart from
    rank 0's: under ``<temp dir>/pytest-rank<R>``, or in ``<--basetemp>-rank<R>``.

    Each pytest process, at its first ``tmp_path``, removes old numbered dirs of its
    root (or the whole ``--basetemp``): the ranks of one run do it at the same moment,
    and remove the same dirs under each other ("PytestWarning: (rm_rf) error removing
    ... Directory not empty"). A root the user chose (``PYTEST_DEBUG_TEMPROOT``) stays.
    Called before pytest makes its temp dir factory (this plugin's configure runs first).
    """
    if rank == 0:
        return
    if config.option.basetemp:
        config.option.basetemp = f"{config.option.basetemp}-rank{rank}"
    elif PYTEST_TEMP_ROOT not in os.environ:
        root = Path(tempfile.gettempdir()) / f"pytest-rank{rank}"
        root.mkdir(mode=0o700, exist_ok=True)
        os.environ[PYTEST_TEMP_ROOT] = str(root)


class SharedDirs:
    """Each test's empty directory (``dist_tmp_path``, and a world test's ``tmp_path``),
    the same on every rank that runs the test: one per test under a directory named
    after the run (its id), made by the first rank that needs it."""

    def __init__(self, root: Path, rank: int, control, run_id: str = "") -> None:
        self.root = root
        self.rank = rank
        self.control = control
        # Unique per run, so files an earlier run (or job) left in the shared root never
        # show up in a test's dist_tmp_path; no rank has to say its name to the others.
        self.run_dir = root / f"rankgate-dist-tmp-{run_id or os.getpid()}"
        self._made = False
        self._dirs: dict[str, Path] = {}  # dist_tmp_path and tmp_path: one per test

    def get(self, nodeid: str, index: int | None, ranks=None) -> Path:
        """The directory of test ``nodeid`` (``index`` in the run; ``ranks``: the global
        ranks that run it, the first of which empties it), empty when first asked."""
        if nodeid in self._dirs:  # tmp_path and dist_tmp_path: one directory
            return self._dirs[nodeid]
        first = 0 if not ranks else ranks[0]
        path = self.run_dir / hashlib.sha1(nodeid.encode()).hexdigest()[:16]
        if self.rank == first:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._made = True
            shutil.rmtree(path, ignore_errors=True)  # a rerun of the same test
            path.mkdir()
        # Nobody looks before the first rank made it.
        self.control.broadcast(f"t{index}/tmp", True, src=first, test_index=index, scope=ranks)
        self._dirs[nodeid] = path
        return path

    def remove(self) -> None:
        """At the end of the run, on rank 0 once every rank has left."""
        shutil.rmtree(self.run_dir, ignore_errors=True)
