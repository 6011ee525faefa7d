"""The last lines of a log or of a command's output, for an error message."""

from __future__ import annotations

from pathlib import Path


def tail(text: str, lines: int = 30) -> str:
    """The last `lines` lines of `text` ("(no output)" when it has none)."""
    return "\n".join(text.strip().splitlines()[-lines:]) or "(no output)"


def tail_file(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of the file at `path` ("(no log)" when it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return tail(text, lines)
