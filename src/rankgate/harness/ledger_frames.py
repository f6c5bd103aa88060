"""The ledger's wrapper frames, left out of what a verdict shows: the wrapper of each
recorded collective (:mod:`rankgate.harness.ledger`) sits between torch's frame and the
test's in every stack and traceback of a collective; the stacks and tracebacks shown
leave it out (pytest's own through the wrapper's ``__tracebackhide__``), as they leave
out the harness's. Standard library only."""

from __future__ import annotations

import os
from pathlib import Path

WRAPPER_FILE = "/".join((*Path(__file__).parts[-3:-1], "ledger.py"))
"""The wrappers' module as a stack names it ("rankgate/harness/ledger.py")."""


def is_wrapper_file(filename: str) -> bool:
    """Whether a traceback entry's file is the wrappers' module (its frames are theirs)."""
    return filename.replace(os.sep, "/").endswith(WRAPPER_FILE)


def without_wrapper_frames(lines: list[str]) -> list[str]:
    """A stack's lines without the wrapper's frame: a hung test reads as torch's
    collective called from the test's own line, as it would without the ledger."""
    return [line for line in lines if not (line.startswith('  File "') and WRAPPER_FILE in line)]
