"""Fixtures for the tracing tests: an instrumentor that always cleans up, a delayed
upstream in a subprocess (its send time must not depend on our GIL or hub), and a check
that no test leaks a measurement into the next one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from greenlet import getcurrent

from tests.unit.support.timing import timing_path
from tracing.timing import call_state, hook_errors
from tracing.timing.instrumentor import GeventTimingInstrumentor
from tracing.timing.labels import TAG_ATTR

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _no_leaked_measurements() -> Iterator[None]:
    hook_errors.reset()
    yield
    tag = getattr(getcurrent(), TAG_ATTR, None)
    leaked = call_state.measuring[0]
    call_state.measuring[0] = 0
    if tag is not None:
        tag.call = None
        tag.label = None
    assert leaked == 0, "a test left a call measurement in progress"


@pytest.fixture
def python_reference() -> Iterator[None]:
    """Hooks installed during the test are the Python reference, not the compiled path
    (list it before ``instrumentor``)."""
    with timing_path(False):
        yield


@pytest.fixture
def instrumentor() -> Iterator[GeventTimingInstrumentor]:
    """Socket hooks + switch tracer; no gauge and no watcher thread unless a test asks."""
    inst = GeventTimingInstrumentor(loop_lag_interval_s=None, hub_block_threshold_s=None)
    inst.instrument()
    try:
        yield inst
    finally:
        inst.uninstrument()


@pytest.fixture(scope="module")
def upstream_port() -> Iterator[int]:
    """Port of a TCP upstream that answers each line ``<delay_ms>`` after that delay with
    ``<CLOCK_REALTIME ns just before its send>``."""
    yield from _delayed_upstream()


@pytest.fixture(scope="module")
def tls_upstream_port(tls_cert: tuple[str, str]) -> Iterator[int]:
    """The same upstream over TLS, with the certificate of `tls_cert`."""
    yield from _delayed_upstream(*tls_cert)


def _delayed_upstream(*args: str) -> Iterator[int]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "delayed_upstream.py"), *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()
