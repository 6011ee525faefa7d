"""The timing core in tests: which path its hooks take (compiled or the Python reference),
and the slots a class carries (what the compiled side's tables are checked against)."""

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


def slots_of(cls: type) -> set[str]:
    """Every name in ``__slots__`` along the class's MRO (what its instances carry)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        declared = klass.__dict__.get("__slots__", ())
        names |= {declared} if isinstance(declared, str) else set(declared)
    return names - {"__weakref__", "__dict__"}
