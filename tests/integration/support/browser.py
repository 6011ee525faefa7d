"""Headless Chromium driven over the DevTools protocol through a pipe: standard library only.

`--remote-debugging-pipe` makes Chromium read protocol messages (JSON, each ended
by a NUL byte) on its fd 3 and answer on its fd 4, so no debugging port is opened
and no client library (Selenium, Playwright and their browser downloads) is
needed: Debian's `chromium` package is enough.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from toolkit.logs import tail_file

# Without the background-networking flags Chromium keeps trying to reach Google's
# hosts, which these machines refuse (and CI machines may not reach).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


class BrowserError(RuntimeError):
    """The browser answered with an error, died, or a page condition never held."""


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One Chromium process with one page; `with Browser(...) as page:`."""

    def __init__(
        self, executable: str, profile_dir: Path, width: int = 1500, height: int = 1000
    ) -> None:
        self.width, self.height = width, height
        profile_dir.mkdir(parents=True, exist_ok=True)
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # A fresh profile per run; bash puts the pipe ends on fds 3 and 4 (not sh:
        # dash only redirects single-digit fds, and in a long test run ours are not).
        argv = [
            shutil.which("bash") or "/bin/bash",
            "-c",
            f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w}',
            "bash",
            executable,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile_dir}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self._log = (profile_dir / "chromium.log").open("wb")
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            pass_fds=(to_browser_r, from_browser_w),
            start_new_session=True,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._log_path = profile_dir / "chromium.log"
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None

    # --- the protocol ------------------------------------------------------------

    def send(self, method: str, timeout_s: float = 30.0, **params: Any) -> dict[str, Any]:
        """Send one command (to the page once attached) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self._session is not None and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self._session
        try:
            os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise BrowserError(f"Chromium is gone; log:\n{self.log_tail()}") from None
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") != self._next_id:
                continue  # an event, or the answer to a command we gave up on
            if "error" in reply:
                raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
            result: dict[str, Any] = reply.get("result", {})
            return result

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no answer from Chromium in time; log:\n{self.log_tail()}")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium closed its pipe; log:\n{self.log_tail()}")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message: dict[str, Any] = json.loads(raw)
        return message

    def log_tail(self, lines: int = 20) -> str:
        return tail_file(self._log_path, lines)

    # --- the page ------------------------------------------------------------------

    def __enter__(self) -> Browser:
        try:
            target = self.send("Target.createTarget", url="about:blank")["targetId"]
            self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
                "sessionId"
            ]
            self.send(
                "Emulation.setDeviceMetricsOverride",
                width=self.width,
                height=self.height,
                deviceScaleFactor=1,
                mobile=False,
            )
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def goto(self, url: str) -> None:
        result = self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"{url}: {result['errorText']}")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited if a promise)."""
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"{expression[:80]}...: {text}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout_s: float = 20.0, what: str = "") -> Any:
        """Poll until the expression is truthy; return its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                text = self.evaluate("document.body ? document.body.innerText.slice(0, 2000) : ''")
                raise BrowserError(
                    f"{what or expression} did not happen in {timeout_s:.0f} s; page text:\n{text}"
                )
            time.sleep(0.2)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        if self._proc.poll() is None:
            self._session = None
            with contextlib.suppress(BrowserError, OSError):
                self.send("Browser.close", timeout_s=5)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
        # Renderer and GPU helpers live in the same session: take them all.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._log.close()
