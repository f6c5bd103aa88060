"""Every subprocess call of the dispatch package, local or through ``ssh host``.

One :class:`Shell` runs commands either on this machine or on a login node over
ssh; the SLURM target never calls :mod:`subprocess` itself, so the two variants
differ only in the ``Shell`` they are given. A command that fails raises
:class:`CommandError`, which carries the command, its return code and its output
verbatim (sbatch's own words are the most useful error a user can get).
"""

from __future__ import annotations

import io
import shlex
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rankgate.dispatch.archive import safe_extract


class CommandError(RuntimeError):
    """A command exited non-zero, could not be started, or ran out of time."""

    def __init__(
        self, argv: Sequence[str], returncode: int | None, stdout: str = "", stderr: str = ""
    ) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        status = "timed out" if returncode is None else f"exited {returncode}"
        detail = (stderr or stdout).strip()
        super().__init__(f"`{shlex.join(self.argv)}` {status}" + (f": {detail}" if detail else ""))


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
        """Run ``command``; raise :class:`CommandError` on failure when ``check``."""
        argv = self.argv(command)
        text = not isinstance(input, bytes)
        try:
            done = subprocess.run(
                argv, input=input, capture_output=True, text=text, timeout=self.timeout
            )
        except FileNotFoundError as exc:
            raise CommandError(argv, 127, stderr=f"{argv[0]}: not found ({exc})") from None
        except subprocess.TimeoutExpired as exc:
            raise CommandError(argv, None, stderr=f"no answer within {self.timeout:g} s") from exc
        stdout = done.stdout if text else done.stdout.decode(errors="replace")
        stderr = done.stderr if text else done.stderr.decode(errors="replace")
        if check and done.returncode != 0:
            raise CommandError(argv, done.returncode, stdout, stderr)
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
        try:
            done = subprocess.run(argv, capture_output=True, timeout=self.timeout * 5)
        except subprocess.TimeoutExpired as exc:
            raise CommandError(argv, None, stderr="copying results timed out") from exc
        if done.returncode != 0:
            raise CommandError(argv, done.returncode, stderr=done.stderr.decode(errors="replace"))
        local.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
            safe_extract(archive, local)
        return local
