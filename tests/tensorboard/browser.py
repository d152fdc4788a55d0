"""A real headless Chromium driven through the DevTools protocol over a pipe (no extra Python package).

Chromium's ``--remote-debugging-pipe`` reads protocol commands on file descriptor 3
and writes replies on 4, each a JSON message ended by a NUL byte. :class:`Browser`
starts it, opens one page and evaluates JavaScript in it; ``close`` ends the
process (also on failure: use it as a context manager).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-pipe",
)
NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    """The first Chromium (or Chrome) on PATH, ``None`` when there is none."""
    return next((found for name in NAMES if (found := shutil.which(name))), None)


def _high(fds: tuple[int, int]) -> tuple[int, int]:
    """The pipe's ends moved to descriptors >= 10, clear of the 3 and 4 the child needs."""
    moved = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in fds)
    for fd in fds:
        os.close(fd)
    return moved  # type: ignore[return-value]


class Browser:
    """One headless Chromium process with one page, driven over the DevTools pipe."""

    def __init__(self, executable: str, width: int = 1400, height: int = 1000) -> None:
        self._profile = tempfile.mkdtemp(prefix="tfdevices-chromium-")
        to_child_r, self._to_child = _high(os.pipe())
        self._from_child, from_child_w = _high(os.pipe())
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self._log = open(os.path.join(self._profile, "stderr.log"), "wb")

        # bash (dash takes one-digit descriptors only) puts the pipe ends on fds 3 and 4, where Chromium reads.
        wiring = f'exec "$@" 3<&{to_child_r} 4>&{from_child_w} {to_child_r}<&- {from_child_w}>&-'
        self.proc = subprocess.Popen(
            [
                shutil.which("bash") or "/bin/bash",
                "-c",
                wiring,
                "bash",
                executable,
                *FLAGS,
                f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            pass_fds=(to_child_r, from_child_w),
        )
        os.close(to_child_r)
        os.close(from_child_w)
        try:
            target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            self.send("Page.enable", session=True)
            self.send("Runtime.enable", session=True)
            self.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                session=True,
            )
        except BaseException:
            self.close()
            raise

    # -- protocol

    def send(
        self, method: str, params: dict[str, Any] | None = None, *, session: bool = False, timeout: float = 60.0
    ) -> dict[str, Any]:
        """Sends one command and returns its result.

        Raises:
            RuntimeError: the browser answered with an error, exited, or did not answer in ``timeout`` s.
        """
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_child], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium exited: {self.stderr_tail()}")
                self._buffer += chunk
            elif self.proc.poll() is not None:
                raise RuntimeError(f"Chromium exited {self.proc.returncode}: {self.stderr_tail()}")
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def stderr_tail(self) -> str:
        """The end of what Chromium printed."""
        with open(self._log.name, "rb") as f:
            return f.read().decode(errors="replace")[-2000:]

    # -- page

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url}, session=True)

    def evaluate(self, expression: str, timeout: float = 60.0) -> Any:
        """The value of a JavaScript expression in the page (promises are awaited).

        Raises:
            RuntimeError: the expression threw.
        """
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
            session=True,
            timeout=timeout,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise RuntimeError(f"JavaScript threw: {details.get('exception', {}).get('description') or details}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        """Polls ``expression`` until it is truthy and returns its value.

        Raises:
            AssertionError: still falsy after ``timeout`` seconds (the message names the expression).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"the page never satisfied: {expression}")

    def screenshot(self, path: str) -> str:
        """Saves a PNG of the whole page to ``path``."""
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=True)[
            "data"
        ]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    # -- end

    def close(self) -> None:
        """Ends Chromium (politely, then by force) and removes its profile."""
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", timeout=5)
                except (RuntimeError, OSError):
                    pass
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            for fd in (self._to_child, self._from_child):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._log.close()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
