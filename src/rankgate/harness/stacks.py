"""Where a hung rank's Python stack says it is waiting: in a collective, or in user code.

Reads faulthandler's dump (``File "x.py", line 12 in f`` lines, most recent call
first). A rank waiting inside a torch.distributed call is usually a consequence; a
rank whose stack is outside every collective (a sleep, a loop, a lock) is usually the
cause. Standard library only: reports of every mode read stacks through here.
"""

from __future__ import annotations

import importlib.util
import re
import sysconfig
from dataclasses import dataclass
from pathlib import PurePath

FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_COLLECTIVE_DIR = "/torch/distributed/"
_WRAPPERS = frozenset({"wrapper", "inner", "_wrapper", "decorated"})
_STDLIB = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")})
_INSTALLED = ("/site-packages/", "/dist-packages/")
_RUNNERS = ("pytest", "_pytest", "pluggy")
"""pytest's own packages: its entry point and hooks are under every test, never its cause."""


def _runner_dirs() -> tuple[str, ...]:
    """Where pytest and pluggy are installed here (a source checkout, a venv, a user
    site), found without importing them."""
    dirs = []
    for name in _RUNNERS:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            dirs.append(location.replace("\\", "/").rstrip("/") + "/")
    return tuple(dirs)


_LIBRARIES = (
    "/torch/",
    "/rankgate/harness/",
    *(f"{d}{name}/" for d in _INSTALLED for name in _RUNNERS),  # a dump from another host
    "/_pytest/",
    "/pluggy/",
    *_runner_dirs(),
)
_ANY_STDLIB = re.compile(r"/lib/python3\.\d+/")
"""Another interpreter's standard library (a stack dumped on another machine)."""


@dataclass(frozen=True, slots=True)
class Frame:
    file: str
    line: int
    func: str

    @property
    def place(self) -> str:
        return f"{PurePath(self.file).name}:{self.line}"


@dataclass(frozen=True, slots=True)
class Where:
    """Where one rank's test thread was when its stacks were dumped."""

    collective: str | None
    """The torch.distributed function it waits in, or None (outside every collective)."""
    frame: Frame | None
    """The innermost frame of code outside torch and the harness (the caller)."""

    def __str__(self) -> str:
        at = f" at {self.frame.place}" if self.frame else ""
        if self.collective:
            return f"waiting in {self.collective}{at}"
        return f"in user code{at}"


def thread_blocks(dump: str) -> list[list[Frame]]:
    """Each thread's frames, most recent call first."""
    blocks: list[list[Frame]] = []
    for line in dump.splitlines():
        match = FRAME.match(line)
        header = line.lstrip().startswith(("Thread 0x", "Current thread 0x"))
        if not match and (header or not blocks):
            blocks.append([])
            continue
        if match:
            blocks[-1].append(Frame(match["file"], int(match["line"]), match["func"]))
    return [b for b in blocks if b]


def where(dump: str, test_file: str | None = None) -> Where | None:
    """Where the thread running the test waits; None when the dump holds no frames.

    The test's thread is the one with a frame in ``test_file``, else the one with
    the most frames of user code.
    """
    blocks = thread_blocks(dump)
    if not blocks:
        return None
    name = PurePath(test_file).name if test_file else None
    with_test = [b for b in blocks if name and any(PurePath(f.file).name == name for f in b)]
    block = (with_test or sorted(blocks, key=lambda b: -sum(map(_is_user, b))))[0]
    collective = None
    for frame in block:  # innermost first: the outermost torch.distributed frame is the call
        if _is_user(frame):
            break
        if _COLLECTIVE_DIR in frame.file and frame.func not in _WRAPPERS:
            collective = frame.func
    caller = next((f for f in block if _is_user(f)), None)
    return Where(collective, caller)


def _is_user(frame: Frame) -> bool:
    """Code of the project under test: not the standard library, torch, pytest or rankgate
    (an installed package under test, say deepspeed, counts as user code)."""
    path = frame.file.replace("\\", "/")
    if path.startswith("<") or any(lib in path for lib in _LIBRARIES):
        return False
    if any(d in path for d in _INSTALLED):
        return True
    return not (path.startswith(_STDLIB) or _ANY_STDLIB.search(path))
