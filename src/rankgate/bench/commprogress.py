"""``rankgate bench comm``'s progress: one line on stderr per size and backend.

A sweep of minutes printed nothing until its table; now rank 0 says what it has just
measured and how long the run has taken so far, e.g.
``comm: all_reduce 64 KiB  backend 3/5 (nccl)  12.3 s``. The calibrating sweep (the
single backends, whose crossovers choose auto's sizes) says ``comm calibration:``, and
with ``--rounds`` above 1 each line names its round. stdout (the table, the JSON) is
untouched.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def size_text(nbytes: int) -> str:
    """64 KiB, 2 MiB, 1 GiB; bytes where no binary unit divides."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit} {name}"
    return f"{nbytes} B"


class SweepProgress:
    """Lines for one rank's sweeps; silent unless ``enabled`` (rank 0 only)."""

    def __init__(self, enabled: bool, rounds: int, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.rounds = rounds
        self.stream = stream or sys.stderr
        self.start = time.monotonic()

    def measured(
        self, stage: str, index: int, collective: str, nbytes: int, step: int, of: int, name: str
    ) -> None:
        """Backend ``name``, ``step`` of ``of`` at this size, has been measured."""
        if not self.enabled:
            return
        head = "comm:" if stage == "final" else f"comm {stage}:"
        turn = f"round {index + 1}/{self.rounds}  " if self.rounds > 1 else ""
        elapsed = time.monotonic() - self.start
        print(f"{head} {turn}{collective} {size_text(nbytes)}  backend {step}/{of} ({name})  "
              f"{elapsed:.1f} s", file=self.stream, flush=True)  # fmt: skip
