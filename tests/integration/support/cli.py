"""The command line as a user runs it: `python -m pricingctl` in a subprocess."""

from __future__ import annotations

import subprocess
import sys

from stack.launch import PROJECT_ROOT


def pricingctl(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """`pricingctl ARGS` from the project's root, its output captured; a non-zero exit
    is the caller's to check."""
    return subprocess.run(
        [sys.executable, "-m", "pricingctl", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
