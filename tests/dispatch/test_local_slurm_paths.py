"""scripts/slurm/local-slurm.sh: each checkout and each user gets its own cluster folder and port.

Two checkouts (or two users) that shared /tmp/rankgate-slurm-0 and port 16817 stopped
each other's clusters mid-run. ``paths`` prints what ``start`` would use, without
starting anything, so this needs bash only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm" / "local-slurm.sh"


def _checkout(root: Path) -> Path:
    """A copy of the scripts folder (the script sources leases.sh beside it) where a
    checkout at ``root`` would have it; the script's path in it."""
    shutil.copytree(SCRIPT.parent, root / "scripts" / "slurm")
    return root / "scripts" / "slurm" / SCRIPT.name


def _paths(script: Path, *, user: list[str] | None = None, **env: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RANKGATE_SLURM_")}
    done = subprocess.run(
        [*(user or []), "bash", str(script), "paths"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**clean, "TMPDIR": "/tmp", **env},
        check=True,
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def test_two_checkouts_get_their_own_folder_and_port(tmp_path):
    a, b = _checkout(tmp_path / "a"), _checkout(tmp_path / "b")
    first, second = _paths(a), _paths(b)
    assert first["dir"] != second["dir"] and first["port"] != second["port"]
    assert _paths(a) == first  # the same checkout always finds its own cluster again
    for found in (first, second):
        assert found["dir"].startswith(f"/tmp/rankgate-slurm-{os.getuid()}-")
        port = int(found["port"])
        # Even, below the ephemeral range, slurmd on the next port.
        assert port % 2 == 0 and 20000 <= port <= 32766


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_two_users_of_one_checkout_get_their_own_folder_and_port():
    # Outside pytest's own 0700 temp folder, so the other user can read the script.
    with tempfile.TemporaryDirectory() as shared:
        Path(shared).chmod(0o755)
        script = _checkout(Path(shared) / "checkout")
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        other, mine = _paths(script, user=nobody), _paths(script)
    assert other["dir"].startswith("/tmp/rankgate-slurm-65534-")
    assert other["dir"] != mine["dir"] and other["port"] != mine["port"]


def test_the_environment_overrides_both(tmp_path):
    script = _checkout(tmp_path / "a")
    found = _paths(script, RANKGATE_SLURM_DIR=str(tmp_path / "mine"), RANKGATE_SLURM_PORT="24242")
    assert found == {"dir": str(tmp_path / "mine"), "port": "24242"}
