"""In place: the ranks on one host must share a temp dir.

torch's symmetric memory passes file descriptors between the ranks of a host over a
Unix socket under TMPDIR, and file-based stores are looked for in the temp dir: ranks
with different temp dirs (a per-process TMPDIR, as some test set-ups give) cannot
reach each other there, and fail with "Failed to send fd" or wait for each other.
"""

from __future__ import annotations

import socket
import tempfile
from collections import defaultdict

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
