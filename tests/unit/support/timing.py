"""Which path the timing hooks take in a test: the compiled one or the Python reference."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tracing.timing import native


@contextmanager
def timing_path(compiled: bool) -> Iterator[None]:
    """What is installed or made inside runs the compiled path (skipped where it was not
    built) or the Python reference; the path before is restored after."""
    if compiled and native.module is None:
        pytest.skip(native.reason or "the compiled path is not built")
    previous = native.use(compiled)
    try:
        yield
    finally:
        native.use(previous)
