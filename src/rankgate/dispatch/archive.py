"""Results through the logs: a compressed base64 archive between two marker lines.

interLink has no file API, so the pod's last act is to print its results folder
(every rank's JUnit file and log) as a gzip'd tar, base64-encoded in 76-column
lines, between a BEGIN line and an END line that carries the archive's sha256.
:func:`unpack` finds the block in the fetched logs, checks it, and extracts it.

Inside the pod: ``python -m rankgate.dispatch.archive pack DIR``. :func:`safe_extract`
also unpacks the tar stream that brings a job folder back over ssh.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import sys
import tarfile
from pathlib import Path

from rankgate.errors import RankgateError

BEGIN = "=====RANKGATE-RESULTS-BEGIN====="
END = "=====RANKGATE-RESULTS-END sha256={digest}====="
_END = re.compile(r"^=====RANKGATE-RESULTS-END sha256=([0-9a-f]{64})=====$")
LINE = 76
MAX_BYTES = 32 * 1024 * 1024
"""Refuse to print archives larger than this (pod logs are not meant for bulk data)."""


class ArchiveError(RankgateError, ValueError):
    """No archive in the logs, or one that is cut short or corrupt."""


def pack(folder: Path) -> str:
    """The marker block for ``folder``'s files (folder-relative names)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(folder)))
    data = buffer.getvalue()
    if len(data) > MAX_BYTES:
        raise ArchiveError(f"results archive is {len(data)} bytes, above {MAX_BYTES}")
    text = base64.b64encode(data).decode()
    body = [text[i : i + LINE] for i in range(0, len(text), LINE)]
    return "\n".join([BEGIN, *body, END.format(digest=hashlib.sha256(data).hexdigest())]) + "\n"


def extract_block(logs: str) -> bytes:
    """The archive bytes of the last complete block in ``logs``."""
    lines = [line.strip() for line in logs.splitlines()]
    starts = [i for i, line in enumerate(lines) if line.endswith(BEGIN)]
    if not starts:
        raise ArchiveError("no results archive in the logs (the pod ended before printing it)")
    start = starts[-1]
    for i in range(start + 1, len(lines)):
        match = _END.match(lines[i])
        if match:
            data = base64.b64decode("".join(lines[start + 1 : i]), validate=True)
            if hashlib.sha256(data).hexdigest() != match.group(1):
                raise ArchiveError("results archive is corrupt (sha256 differs)")
            return data
    raise ArchiveError("results archive is cut short (no END line): logs truncated?")


def unpack(logs: str, dest: Path) -> list[str]:
    """Extract the archive found in ``logs`` into ``dest``; returns the member names."""
    data = extract_block(logs)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = tar.getnames()
        safe_extract(tar, dest)
    return names


def safe_extract(tar: tarfile.TarFile, dest: Path) -> None:
    """Extract regular files only, never outside ``dest`` (the data filter where it exists)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    root = dest.resolve()
    for member in tar.getmembers():
        target = (dest / member.name).resolve()
        inside = target == root or root in target.parents
        if not (member.isfile() or member.isdir()) or not inside:
            raise ArchiveError(f"refusing archive member {member.name!r}")
    tar.extractall(dest)  # checked above; Pythons without filters


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "pack":
        print("usage: python -m rankgate.dispatch.archive pack DIR", file=sys.stderr)
        return 2
    sys.stdout.write(pack(Path(args[1])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
