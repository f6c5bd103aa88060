"""CPU seconds of a pytest session forked from rankgate's fork server, for two checkouts
side by side (the fork server freezing its heap after the preload, and the commit before):

    python forked-session.py LABEL=CHECKOUT LABEL=CHECKOUT [ROUNDS]

run from a folder holding one trivial test, test_t.py:

    import torch
    def test_a():
        assert torch.ones(1).item() == 1

Each measurement starts a fork server from CHECKOUT (`RunForkServer`, PYTHONPATH naming
that checkout's src), waits for its preload, then launches through its launcher, one
after another, 5 programs: `python -m pytest -q -p no:cacheprovider -p no:randomly
test_t.py`, or `python -c pass` for the baseline. The CPU of the whole tree comes from a
cpuacct cgroup; a session's figure is (pytest round - baseline round) / 5. The checkouts
alternate, ROUNDS (default 3) times.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

SESSIONS = 5
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "test_t.py"]
CLIENT = """
import os, subprocess, sys, tempfile
from pathlib import Path
from rankgate.harness.pool.forkclient import RunForkServer
s = RunForkServer(Path(tempfile.mkdtemp()), os.getpid())
py = s.python(); s.ready()
for argv in {programs!r}:
    subprocess.run([py, *argv], check=True, capture_output=True)
s.stop()
"""


def measure(checkout: Path, programs: list[list[str]]) -> tuple[float, float]:
    """(CPU-s, wall s) of a fresh fork server and the programs launched through it."""
    cg = Path(f"/sys/fs/cgroup/cpuacct/forked-session-{os.getpid()}-{time.monotonic_ns()}")
    cg.mkdir()
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", CLIENT.format(programs=programs)], env=env,
        preexec_fn=lambda: (cg / "tasks").write_text(str(os.getpid())),
    )
    assert proc.wait() == 0
    wall = time.monotonic() - start
    time.sleep(1.0)  # the server ends once its owner has
    cpu = int((cg / "cpuacct.usage").read_text()) / 1e9
    cg.rmdir()
    return cpu, wall


checkouts = [(arg.split("=", 1)[0], Path(arg.split("=", 1)[1])) for arg in sys.argv[1:3]]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
for r in range(rounds):
    for label, checkout in checkouts:
        base, _ = measure(checkout, [["-c", "pass"]] * SESSIONS)
        cpu, wall = measure(checkout, [PYTEST] * SESSIONS)
        print(f"round {r + 1} {label}: {(cpu - base) / SESSIONS:.3f} CPU-s a session "
              f"({cpu:.2f} with the server, baseline {base:.2f}); wall {wall:.2f} s", flush=True)
