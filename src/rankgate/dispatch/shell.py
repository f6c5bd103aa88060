"""Every command of the dispatch package, local or through ``ssh host``.

One :class:`Shell` runs commands either on this machine or on a login node over
ssh (through :func:`rankgate.proc.command.finish`); the SLURM target never starts a
process itself, so the two variants differ only in the ``Shell`` they are given. A
command that fails raises :class:`~rankgate.proc.command.CommandFailed`, which carries
the command, its return code and its output verbatim (sbatch's own words are the most
useful error a user can get).
"""

from __future__ import annotations

import io
import shlex
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rankgate.dispatch.archive import safe_extract
from rankgate.proc.command import CommandFailed, finish


@dataclass(frozen=True, slots=True)
class Output:
    """What a finished command printed."""

    stdout: str
    stderr: str
    returncode: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Shell:
    """Runs commands here (``host=None``) or on ``host`` through ssh.

    ``ssh_options`` go between ``ssh`` and the host (``-o BatchMode=yes`` is always
    added so a missing key fails at once instead of waiting for a password).
    """

    host: str | None = None
    """Login node for the ssh variant; None runs commands on this machine."""
    ssh_options: tuple[str, ...] = field(default_factory=tuple)
    """Extra ssh arguments, such as ``("-p", "2222", "-i", "~/.ssh/cluster")``."""
    timeout: float = 60.0
    """Seconds any single command may take."""

    def argv(self, command: Sequence[str]) -> list[str]:
        """The argv actually executed for ``command`` (ssh-wrapped when remote)."""
        if self.host is None:
            return list(command)
        return ["ssh", "-o", "BatchMode=yes", *self.ssh_options, self.host, shlex.join(command)]

    def run(
        self, command: Sequence[str], *, input: str | bytes | None = None, check: bool = True
    ) -> Output:
        """Run ``command``; raise :class:`CommandFailed` on failure when ``check``.

        A command that cannot start or gives no answer within ``timeout`` fails whatever
        ``check`` says."""
        argv = self.argv(command)
        done = finish(argv, input=input, timeout=self.timeout)
        if done.timed_out:
            said = f"no answer within {self.timeout:g} s"
            raise CommandFailed(argv, 124, said, stderr=said)
        stdout, stderr = _text(done.stdout), _text(done.stderr)
        if check and done.returncode != 0:
            raise CommandFailed(argv, done.returncode, stdout=stdout, stderr=stderr)
        return Output(stdout, stderr, done.returncode)

    def write_file(self, path: str, content: str, *, mode: int = 0o644) -> None:
        """Create ``path`` (and its parent folders) holding ``content``."""
        if self.host is None:
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            target.chmod(mode)
            return
        parent = str(Path(path).parent)
        script = (
            f"mkdir -p {shlex.quote(parent)} && cat > {shlex.quote(path)}"
            f" && chmod {mode:o} {shlex.quote(path)}"
        )
        self.run(["sh", "-c", script], input=content)

    def fetch_dir(self, remote: str, local: Path) -> Path:
        """Bring folder ``remote`` to ``local``; for a local shell it is already there."""
        if self.host is None:
            return Path(remote)
        argv = self.argv(["tar", "-C", remote, "-cf", "-", "."])
        done = finish(argv, timeout=self.timeout * 5, binary=True)
        if done.timed_out:
            raise CommandFailed(argv, 124, "copying results timed out", stderr="timed out")
        if done.returncode != 0:
            raise CommandFailed(argv, done.returncode, stderr=_text(done.stderr))
        local.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
            safe_extract(archive, local)
        return local


def _text(said: str | bytes) -> str:
    return said if isinstance(said, str) else said.decode(errors="replace")
