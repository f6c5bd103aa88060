"""Reading a pool rank's collective ledger whenever the controller needs it, even while
the rank's test is stuck in a collective.

Each rank runs one daemon thread that waits on a named pipe in the pool's directory
(``rank<r>.ledger-ask``, made by the controller). The controller writes a byte to it;
the thread writes the ledger of the test just run (or still running) as JSON to
``rank<r>.ledger.json``. A collective that waits releases the GIL, so the thread runs
while the main thread is stuck; a rank that holds the GIL for ever, or has died,
gives no ledger, and the verdict falls back to the stacks.

Standard library only on the rank side (and the ledger module, imported lazily).
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path

ANSWER_WAIT_S = 1.0
"""How long the controller waits for the ranks' ledgers (they answer in milliseconds)."""


def paths(directory: Path, rank: int) -> tuple[Path, Path]:
    """The named pipe a rank listens on, and the file it answers in."""
    return directory / f"rank{rank}.ledger-ask", directory / f"rank{rank}.ledger.json"


def make_pipe(directory: Path, rank: int) -> None:
    """In the controller, before the rank starts."""
    ask, answer = paths(directory, rank)
    ask.unlink(missing_ok=True)
    answer.unlink(missing_ok=True)
    os.mkfifo(ask, 0o600)


def serve(directory: Path, rank: int) -> None:
    """In a rank: answer every request from a daemon thread."""
    ask, answer = paths(directory, rank)
    if not ask.exists():
        return
    threading.Thread(
        target=_answer_forever, args=(ask, answer), name="rankgate-ledger", daemon=True
    ).start()


def _answer_forever(ask: Path, answer: Path) -> None:
    from rankgate.harness import ledger

    # Plain strings: from the answer's os.replace back to the blocking open, the thread
    # calls no Python function (a Path would), so a stack dump that follows the answer
    # never finds this thread's frames changing under it.
    ask_at, answer_at = os.fspath(ask), os.fspath(answer)
    tmp_at = os.fspath(answer.with_suffix(".tmp"))
    while True:
        try:
            with open(ask_at, "rb") as pipe:  # blocks until the controller writes
                pipe.read()
            with open(tmp_at, "w") as tmp:
                tmp.write(json.dumps(ledger.now()))
            os.replace(tmp_at, answer_at)  # the controller never reads half a file
        except OSError:
            return  # the pool's directory is gone: the pool is over


def ask(directory: Path, ranks: list[int]) -> None:
    """In the controller: ask each of ``ranks`` for its ledger (no waiting here)."""
    for rank in ranks:
        pipe, answer = paths(directory, rank)
        answer.unlink(missing_ok=True)
        deadline = time.monotonic() + 0.2
        while True:
            try:
                fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                # ENXIO: the rank's thread is between two requests (or not listening).
                if exc.errno == errno.ENXIO and time.monotonic() < deadline:
                    time.sleep(0.005)
                    continue
                break
            try:
                os.write(fd, b"?")
            finally:
                os.close(fd)
            break


def collect(directory: Path, ranks: list[int], wait: float = ANSWER_WAIT_S) -> dict[int, list]:
    """The ledgers of ``ranks`` that answered within ``wait`` seconds."""
    found: dict[int, list] = {}
    deadline = time.monotonic() + wait
    while True:
        for rank in ranks:
            if rank in found:
                continue
            answer = paths(directory, rank)[1]
            try:
                found[rank] = json.loads(answer.read_text())
            except (OSError, ValueError):
                continue
        if len(found) == len(ranks) or time.monotonic() >= deadline:
            return found
        time.sleep(0.01)
