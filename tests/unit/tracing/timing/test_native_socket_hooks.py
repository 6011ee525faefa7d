"""The compiled hot path against its Python reference: the ``_wait``, send and read hooks
around socket waits, the reads that take their own stamp, and the compiled peek.
"""

from __future__ import annotations

import socket
import types
from collections.abc import Callable
from typing import Any

import pytest
from greenlet import getcurrent

from tests.unit.tracing.timing.replay import (
    compiled,
    needs_compiled,
    read_events,
    replay_reads,
    replay_waits,
    wait_events,
)
from tracing.timing import call_state, kernel_rx
from tracing.timing.call_state import CallState
from tracing.timing.labels import tag_of


@needs_compiled
@pytest.mark.parametrize("seed", range(8))
def test_the_socket_hooks_give_the_reference_numbers(
    seed: int, stamped_socket: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = wait_events(seed, steps=150)
    reference = replay_waits(False, events, stamped_socket, monkeypatch)
    waits = [w for w in reference["waits"] if w[0] != "inbound"]
    assert waits[-1][2] > 0, "the sequence had no scheduling delay"
    assert waits[-1][-1], "no delay was long enough to name its culprits"
    assert {w[0] for w in waits} == {"ok", "timeout"}
    inbound = [w for w in reference["waits"] if w[0] == "inbound"]
    assert inbound and all(w[1] is False and w[2] is not None for w in inbound)
    assert replay_waits(True, events, stamped_socket, monkeypatch) == reference


@needs_compiled
def test_the_compiled_peek_reads_the_same_stamp(stamped_socket: socket.socket) -> None:
    assert compiled.peek_arrival_ns(stamped_socket) == kernel_rx.peek_arrival_ns(stamped_socket)


@needs_compiled
@pytest.mark.parametrize("seed", range(6))
def test_stamped_reads_give_the_reference_numbers_without_a_peek(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = read_events(seed, steps=80)
    peeks: list[Any] = []
    monkeypatch.setattr(kernel_rx, "peek_arrival_ns", peeks.append)
    reference = replay_reads(False, events, monkeypatch)
    before = compiled.peeks()
    assert replay_reads(True, events, monkeypatch) == reference
    # The stamps came with the reads: neither path peeked.
    assert peeks == []
    assert compiled.peeks() == before
    reads = reference["reads"]
    results = {r[0] if isinstance(r[0], str) else "data" for r in reads}
    assert results == {"data", "timeout", "eagain"}
    assert any(r[5] is True for r in reads), "no reply was stamped by its read"
    assert any(r[2] > 0 for r in reads), "the sequence had no scheduling delay"
    watched = [r[-1] for r in reads if r[-1] is not None and r[0] not in ("timeout", "eagain")]
    assert watched and all(w == (False, True) for w in watched)


@needs_compiled
def test_a_bad_state_in_the_wait_hook_is_counted_and_the_wait_still_runs() -> None:
    me = getcurrent()
    tag = tag_of(me)
    state = CallState()
    tag.call = state
    call_state.measuring[0] += 1
    calls: list[Any] = []

    def original(self: Any, watcher: Any, timeout_exc: Any = None) -> str:
        calls.append(watcher)
        return "ok"

    hook: Callable[..., Any] = compiled.Hook(original, "wait")
    before = compiled.bad_states()
    try:
        # No _read_event: the start fails; no _sock: readiness fails. The wait runs once.
        assert hook(types.SimpleNamespace(), "w") == "ok"
        sock = types.SimpleNamespace(_read_event="r", _sock="not a socket")
        assert hook(sock, "r") == "ok"
    finally:
        tag.call = None
        call_state.measuring[0] -= 1
    assert calls == ["w", "r"]
    assert compiled.bad_states() == before + 2
    assert state.socket_waits == 1  # the second wait is counted, undivided
    assert state.in_socket_wait is False
