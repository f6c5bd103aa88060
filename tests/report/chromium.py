"""A real headless Chromium driven over the DevTools protocol on a pipe (no ports, no extra
packages): open a page, evaluate JavaScript in it, take a screenshot.

Chromium reads commands from fd 3 and writes replies to fd 4, each a JSON message
ended by a NUL byte (``--remote-debugging-pipe``).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip


def find_chromium() -> str | None:
    for name in CHROMIUM_CANDIDATES:
        path = name if os.path.isabs(name) and os.access(name, os.X_OK) else shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One Chromium process with one page; use as a context manager."""

    def __init__(self, binary: str, profile: Path, width: int = 1280, height: int = 1600) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def as_fd_3_and_4() -> None:  # in the child, before exec
            # Out of the way first (a pipe may itself be fd 3 or 4, and dup2 onto the same
            # number would keep its close-on-exec flag), then onto 3 and 4, inheritable.
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_chrome_r, from_chrome_w)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=as_fd_3_and_4, start_new_session=True,
        )  # fmt: skip
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.session = ""

    def __enter__(self) -> Browser:
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)

    def call(self, method: str, session: bool = False, timeout: float = 60.0, **params) -> dict:
        """Send one command and return its result (raises on a protocol error)."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
        raise TimeoutError(f"{method}: no reply in {timeout} s")

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise TimeoutError(f"chromium stopped answering (exit {self.proc.poll()})")
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium closed its pipe (exit {self.proc.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def open(self, url: str, timeout: float = 60.0) -> None:
        """Navigate and wait until the page has loaded."""
        self.call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + timeout
        while self.evaluate("document.readyState") != "complete":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not finish loading in {timeout} s")
            time.sleep(0.1)

    def evaluate(self, expression: str):
        """The JSON value of a JavaScript expression in the page."""
        result = self.call(
            "Runtime.evaluate", session=True, expression=expression, returnByValue=True,
            awaitPromise=True,
        )  # fmt: skip
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """The page as rendered (full height), as a PNG."""
        data = self.call("Page.captureScreenshot", session=True, format="png",
                         captureBeyondViewport=True)["data"]  # fmt: skip
        path.write_bytes(base64.b64decode(data))
        return path
