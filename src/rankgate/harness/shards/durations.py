"""The durations file: one JSON object, pytest node id -> seconds the test took.

Written by ``--rankgate-store-durations FILE`` (each test's setup, call and teardown
together) and read by ``--rankgate-shard`` and ``rankgate dispatch`` with shards. New
times are merged into what the file holds, under a lock beside it, so the shards of one
dispatch, each storing its own tests, never lose each other's times.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import tempfile
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

from rankgate.errors import RankgateError


class DurationsError(RankgateError, ValueError):
    """A durations file that cannot be used; the message names the file and the fix."""


def read_durations(path: str | Path) -> dict[str, float]:
    """The times stored in ``path``; raises :class:`DurationsError` naming what is wrong."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DurationsError(
            f"durations file {path} does not exist; write one first with "
            f"--rankgate-store-durations {path}"
        ) from None
    except IsADirectoryError:
        raise DurationsError(f"durations file {path} is a folder, not a JSON file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DurationsError(f"durations file {path}: cannot read it ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DurationsError(f"durations file {path} is not JSON: {exc}") from None
    return checked(data, str(path))


def checked(data: object, where: str) -> dict[str, float]:
    """``data`` as node id -> seconds, or a :class:`DurationsError` naming the first bad entry."""
    if not isinstance(data, dict):
        raise DurationsError(
            f"durations file {where} holds a {type(data).__name__}; expected a JSON object "
            '{"node id": seconds, ...}'
        )
    for key, value in data.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0:
            raise DurationsError(
                f"durations file {where}: {key!r} has {value!r}; each value must be a "
                "number of seconds >= 0"
            )
    return {key: float(value) for key, value in data.items()}


@contextmanager
def _locked(path: Path):
    lock = path.with_name(path.name + ".lock")
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def store_durations(path: str | Path, new: Mapping[str, float]) -> dict[str, float]:
    """Merge ``new`` into the file at ``path`` (created when absent) and return what it
    holds now. The file is replaced whole (write, then rename): a reader never sees half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        merged = read_durations(path) if path.exists() else {}
        merged.update({key: round(float(value), 4) for key, value in new.items()})
        text = json.dumps(dict(sorted(merged.items())), indent=1) + "\n"
        # mkstemp makes it private (0600): keep the file's own mode, else a shared one
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(temp, mode)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
    return merged
