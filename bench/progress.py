"""Progress on stderr: a redrawn bar on a terminal, plain lines otherwise (CI logs).

Progress is time-based: the driver knows each step's planned length (stack start,
warm-up, measurement), so no counters have to cross process boundaries.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_BAR_CHARS = 30
# Plain-line mode: at most one line per this many seconds within a step, so CI logs
# stay short but a stuck run is still visible.
_PLAIN_EVERY_S = 15.0


def _mmss(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    """Mutable on purpose: it tracks what has been drawn."""

    def __init__(
        self, total_s: float, stream: TextIO | None = None, tty: bool | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.total_s = max(total_s, 1e-9)
        self.done_s = 0.0  # planned seconds of finished steps
        self.started = time.monotonic()
        self._step = ""
        self._step_s = 0.0
        self._step_started = self.started
        self._last_plain = 0.0

    def step(self, label: str, planned_s: float) -> None:
        """A new step begins (the previous one counts as finished)."""
        if self._step:
            self.done_s += self._step_s
        self._step, self._step_s = label, planned_s
        self._step_started = time.monotonic()
        if self.tty:
            self.update()
        else:
            self._line(f"{self._percent():3.0f}% {label}")
            self._last_plain = self._step_started

    def update(self) -> None:
        now = time.monotonic()
        if not self.tty:
            if now - self._last_plain >= _PLAIN_EVERY_S:
                elapsed = now - self._step_started
                self._line(f"{self._percent():3.0f}% {self._step} ({elapsed:.0f} s)")
                self._last_plain = now
            return
        pct = self._percent()
        filled = int(_BAR_CHARS * pct / 100)
        bar = "#" * filled + "-" * (_BAR_CHARS - filled)
        elapsed = now - self.started
        eta = elapsed / (pct / 100) - elapsed if pct > 1 else float("nan")
        eta_text = _mmss(eta) if eta == eta else "?"
        self.stream.write(
            f"\r\x1b[K[{bar}] {pct:3.0f}% {self._step}  elapsed {_mmss(elapsed)} eta {eta_text}"
        )
        self.stream.flush()

    def note(self, text: str) -> None:
        """A message that must stay visible (the bar is redrawn after it)."""
        if self.tty:
            self.stream.write("\r\x1b[K")
        self._line(text)
        if self.tty:
            self.update()

    def finish(self) -> None:
        if self._step:
            self.done_s += self._step_s
            self._step, self._step_s = "done", 0.0
        if self.tty:
            self.update()
            self.stream.write("\n")
            self.stream.flush()
        else:
            self._line(f"100% done in {_mmss(time.monotonic() - self.started)}")

    def _percent(self) -> float:
        in_step = min(time.monotonic() - self._step_started, self._step_s)
        return min(100.0, 100.0 * (self.done_s + in_step) / self.total_s)

    def _line(self, text: str) -> None:
        self.stream.write(f"bench: {text}\n")
        self.stream.flush()
