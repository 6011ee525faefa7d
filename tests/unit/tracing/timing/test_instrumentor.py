"""instrument()/uninstrument(): idempotent, and everything goes back exactly."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import gevent
import greenlet
import pytest
from gevent._socketcommon import SocketMixin
from gevent.ssl import SSLSocket
from gevent.threadpool import ThreadPool

from tracing.timing import hub_block, loop_lag, socket_hooks
from tracing.timing.instrumentor import GeventTimingInstrumentor
from tracing.timing.patching import is_patch

PATCHED = [
    (SocketMixin, "_wait"),
    (SocketMixin, "_internal_connect"),
    (SocketMixin, "sendall"),
    (SocketMixin, "recv"),
    (SocketMixin, "recv_into"),
    (SSLSocket, "read"),
    (ThreadPool, "apply"),
]


def own_attributes() -> list[Any]:
    return [cls.__dict__.get(name) for cls, name in PATCHED]


class RecordingTracer:
    def __init__(self) -> None:
        self.events: list[str] = []

    def __call__(self, event: str, args: Any) -> None:
        self.events.append(event)


@pytest.fixture
def previous_tracer() -> Any:
    tracer = RecordingTracer()
    before = greenlet.settrace(tracer)
    yield tracer
    greenlet.settrace(before)


def quiet() -> GeventTimingInstrumentor:
    return GeventTimingInstrumentor(loop_lag_interval_s=None, hub_block_threshold_s=None)


def test_uninstrument_restores_methods_and_the_previous_tracer(
    previous_tracer: RecordingTracer,
) -> None:
    originals = own_attributes()
    assert SocketMixin.__dict__["_wait"].__name__ == "wait_on_socket"
    inst = quiet()
    inst.instrument()
    try:
        assert all(is_patch(getattr(cls, name)) for cls, name in PATCHED)
        assert greenlet.gettrace() is not previous_tracer
        gevent.sleep(0)  # switches: our tracer logs them and chains to the previous one
        assert len(inst.switch_log) > 0
        assert "switch" in previous_tracer.events
    finally:
        inst.uninstrument()
    assert all(now is before for now, before in zip(own_attributes(), originals, strict=True))
    assert ThreadPool.__dict__.get("apply") is None  # inherited again, not copied
    assert greenlet.gettrace() is previous_tracer


def test_instrument_twice_is_harmless() -> None:
    inst = quiet()
    inst.instrument()
    try:
        patched, tracer = own_attributes(), greenlet.gettrace()
        inst.instrument()
        assert own_attributes() == patched
        assert greenlet.gettrace() is tracer
    finally:
        inst.uninstrument()
        inst.uninstrument()
    assert greenlet.gettrace() is None
    assert not any(is_patch(getattr(cls, name)) for cls, name in PATCHED)


def test_a_second_instrumentor_does_nothing(caplog: pytest.LogCaptureFixture) -> None:
    first, second = quiet(), quiet()
    first.instrument()
    try:
        with caplog.at_level(logging.WARNING, logger="tracing"):
            second.instrument()
        assert not second.is_instrumented
        assert "another GeventTimingInstrumentor" in caplog.text
        second.uninstrument()
        assert first.is_instrumented and socket_hooks.is_installed()
    finally:
        first.uninstrument()


def test_a_tracer_installed_on_top_keeps_ours_disabled_in_its_chain(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inst = quiet()
    inst.instrument()
    on_top = RecordingTracer()
    ours = greenlet.settrace(on_top)
    try:
        with caplog.at_level(logging.WARNING, logger="tracing"):
            inst.uninstrument()
        assert "stays in its chain" in caplog.text
        before = len(inst.switch_log)
        ours("switch", (greenlet.getcurrent(), gevent.get_hub()))  # on_top would chain
        assert len(inst.switch_log) == before
    finally:
        greenlet.settrace(None)


def test_starts_and_stops_the_gauge_and_the_watcher_thread() -> None:
    inst = GeventTimingInstrumentor(loop_lag_interval_s=0.01, hub_block_threshold_s=0.1)
    inst.instrument()
    try:
        gauge, detector = inst.loop_lag, inst.hub_block
        assert gauge is not None and gauge.running
        assert detector is not None and detector.running
        gevent.sleep(0.05)
        assert gauge.ticks >= 2
    finally:
        inst.uninstrument()
    assert not gauge.running and not detector.running
    assert inst.loop_lag is None and inst.hub_block is None


def test_rejects_settings_that_cannot_work() -> None:
    with pytest.raises(ValueError, match="heartbeat"):
        GeventTimingInstrumentor(loop_lag_interval_s=None, hub_block_threshold_s=0.1)


@pytest.mark.parametrize("kernel_says", [True, False])
def test_an_idle_hub_is_told_from_a_blocked_one_with_a_slow_gauge(
    kernel_says: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gauge slower than the threshold: where the kernel says where the hub sleeps, an
    idle hub is seen parked and never reported; where it does not, the gauge ticks
    faster, as the heartbeat."""
    if not kernel_says:
        monkeypatch.setattr(hub_block, "parked_probe", lambda tid: None)
    elif hub_block.parked_probe(threading.get_native_id()) is None:
        pytest.skip("this kernel does not say where threads sleep (wchan)")
    inst = GeventTimingInstrumentor(
        loop_lag_interval_s=0.5, hub_block_threshold_s=0.06, hub_block_watch_s=None
    )
    inst.instrument()
    try:
        gauge, detector = inst.loop_lag, inst.hub_block
        assert gauge is not None and detector is not None
        events: list[hub_block.HubBlocked] = []
        detector.register(events.append)
        assert (detector.parked is not None) == kernel_says
        assert gauge.interval_s == (0.5 if kernel_says else hub_block_fallback(0.06))
        gevent.sleep(0.4)  # idle: silent for far longer than the threshold
        assert events == []
        end = time.monotonic() + 0.25  # now a real block: CPU on the hub
        while time.monotonic() < end:
            pass
        gevent.sleep(0.1)
        assert [event.ongoing for event in events][:1] == [True]
    finally:
        inst.uninstrument()


def hub_block_fallback(threshold_s: float) -> float:
    return min(loop_lag.HEARTBEAT_INTERVAL_S, threshold_s / 2)
