"""The run id: one per launch of an in-place run, the same on every rank, written into
every per-rank file (JUnit, results, ledger).

A folder can hold several runs' files: an earlier run's JUnit files beside the results
files of a later run into the same folder that was killed before it wrote its own.
merge-junit and the report read one run's files only (:mod:`rankgate.report.runs`);
this id is what tells the runs apart.

Rank 0 makes the id and hands it to the others through the run's store, which every
launcher's ranks share (torchrun's TCP store, or the FileStore of srun's and mpirun's
ranks) and in which each run has its own generation of keys. The launchers' own job ids
are no substitute: torchrun without ``--rdzv-id`` names every job ``none`` and an elastic
restart keeps its id, mpirun's differ by version, and a plain ``srun`` step repeats inside
one allocation's script. ``RANKGATE_RUN_ID`` (rank 0's) names a run where CI has a better
name. A made id starts with the UTC time, so ids sort by start. Standard library only.
"""

from __future__ import annotations

import os
import re
import secrets
import time

ENV = "RANKGATE_RUN_ID"
_USABLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]{0,99}")


def new() -> str:
    """``$RANKGATE_RUN_ID`` when set, else ``<UTC time>-<6 hex digits>``; ValueError for
    a name that cannot be one (a file name's characters, at most 100)."""
    given = os.environ.get(ENV, "")
    if given and not _USABLE.fullmatch(given):
        raise ValueError(
            f"{ENV}={given!r} cannot name a run: use letters, digits and . _ : + - "
            "(at most 100), or unset it"
        )
    if given:
        return given
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def agree(control) -> str:
    """Rank 0's new id, on every rank (``control``: the run's ControlChannel)."""
    return control.broadcast("run_id", new() if control.rank == 0 else None)
