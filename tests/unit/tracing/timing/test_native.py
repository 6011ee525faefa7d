"""The compiled hot path (``_native``) against its Python reference: the same recorded
switch and socket-wait sequences through both, every number compared.

The sequences are replayed by calling the trace function and the ``_wait`` hook
directly, on a fake clock, with fake greenlets (anything that carries a tag); the
socket is a real one with a queued, kernel-stamped byte, so both peek the same stamp.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import socket
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import greenlet
import pytest
from greenlet import getcurrent

from tracing.timing import call_state, kernel_rx, labels, native, socket_hooks
from tracing.timing.call_state import CallState
from tracing.timing.labels import HUB_LABEL, TAG_ATTR, GreenletTag, tag_of
from tracing.timing.request_state import InboundWatch, RequestState
from tracing.timing.route_cpu import RouteCpu
from tracing.timing.runqueue import RunQueueClock
from tracing.timing.server_timing import watching
from tracing.timing.switch_tracer import SwitchTracer
from tracing.timing.switchlog import SwitchLog

compiled = native.module
needs_compiled = pytest.mark.skipif(compiled is None, reason=native.reason or "not built")

LABELS = ["GET /v1/offers/bike", "POST /v1/offers/rideshare", None, "<hub>"]
US = 1_000


class FakeGreenlet:
    """What the tracer reads of a greenlet: a tag, and a frame (None: blocked)."""

    gr_frame = None

    def __init__(self, label: str | None) -> None:
        setattr(self, TAG_ATTR, GreenletTag(label))


class Clock:
    def __init__(self) -> None:
        self.now = 10_000_000_000

    def __call__(self) -> int:
        return self.now


@contextlib.contextmanager
def _path(use_compiled: bool, clock: Clock) -> Iterator[None]:
    """The compiled path (on *clock*, through ``set_clock``) or the reference, for a
    replay; what was running before, afterwards."""
    previous = native.use(use_compiled)
    if use_compiled:
        compiled.set_clock(clock)
    try:
        yield
    finally:
        native.use(previous)
        if use_compiled:
            compiled.set_clock(None)


@pytest.fixture
def stamped_socket() -> Iterator[socket.socket]:
    """A TCP socket with one byte queued and its kernel receive stamp.

    The kernel turns receive stamping on for the whole host a moment after the first
    socket asks (deferred work): a byte that arrives in between has no stamp, and never
    gets one. So a fresh connection is tried until its byte comes stamped."""
    kernel_rx.hold_timestamping()
    for _ in range(50):
        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        listener.close()
        kernel_rx.enable_rx_timestamps(client)
        server.sendall(b"x")
        client.setblocking(False)
        for _ in range(20):
            if kernel_rx.peek_arrival_ns(client) is not None:
                break
            time.sleep(0.005)
        if kernel_rx.peek_arrival_ns(client) is not None:
            break
        client.close()
        server.close()
    yield client
    client.close()
    server.close()


def _events(seed: int, greenlets: int, steps: int) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    out: list[tuple[Any, ...]] = []
    current = 0
    for _ in range(steps):
        dt = rng.choice([1, 5, 40, 300, 1500, 4000]) * US  # some past the culprit threshold
        kind = rng.random()
        if kind < 0.1:
            out.append(("relabel", dt, rng.randrange(greenlets), rng.choice(LABELS)))
        elif kind < 0.2:
            out.append(("measure", dt, rng.randrange(greenlets), rng.random() < 0.5))
        elif kind < 0.25:
            out.append(("done", dt, rng.randrange(greenlets)))
        else:
            target = rng.randrange(greenlets)
            if target != current:
                out.append(("switch", dt, current, target))
                current = target
    return out


def _replay_switches(
    use_compiled: bool, events: list[tuple[Any, ...]], schedstat: Path | None = None
) -> dict[str, Any]:
    clock = Clock()
    sampler = None
    if schedstat is not None:
        # A run-queue clock on a fake schedstat whose wait grows with every read.
        sampler = RunQueueClock(sample_interval_ns=700 * US, path=str(schedstat))
    greenlets = [FakeGreenlet(LABELS[i % len(LABELS)]) for i in range(6)]
    if use_compiled:
        log: Any = compiled.SwitchLog(128)
        compiled.set_clock(clock)
    else:
        log = SwitchLog(128)
    route_cpu = RouteCpu(long_ns=2_000_000, block_ns=3_000_000)
    route_cpu.since[0] = clock.now
    tracer = SwitchTracer(log, clock=clock)
    previous = native.use(use_compiled)
    call_state.configure(log, 0.001)
    measuring = call_state.measuring[0]
    try:
        tracer.install(sampler, route_cpu=route_cpu)
        trace = tracer._trace
        assert trace is not None
        assert (type(trace) is compiled.Tracer) == use_compiled
        for step, event in enumerate(events):
            clock.now += event[1]
            if schedstat is not None:
                schedstat.write_text(f"{step * 7} {step * 1000 + 5} {step}\n")
            if event[0] == "switch":
                trace("switch", (greenlets[event[2]], greenlets[event[3]]))
            elif event[0] == "relabel":
                getattr(greenlets[event[2]], TAG_ATTR).label = event[3]
                if event[2] % 2 == 0:
                    # As set_greenlet_label tells the tracer when the running one relabels.
                    listener = labels.current_label_listener
                    assert listener is not None
                    listener(event[3])
            elif event[0] == "measure":
                tag = getattr(greenlets[event[2]], TAG_ATTR)
                if tag.call is None:
                    tag.call = CallState()
                    call_state.measuring[0] += 1
                    # A thread-pool wait whose work finished: its switch-in is a delay.
                    tag.call.pending_done = [clock.now + 100 * US] if event[3] else None
                if tag.request is None:
                    tag.request = RequestState(clock.now)
            else:
                tag = getattr(greenlets[event[2]], TAG_ATTR)
                if tag.call is not None:
                    call_state.measuring[0] -= 1
                tag.call = None
    finally:
        tracer.uninstall()
        native.use(previous)
        call_state.configure(None, call_state.CULPRIT_THRESHOLD_S)
        call_state.measuring[0] = measuring
        compiled.set_clock(None)
    calls = []
    for g in greenlets:
        tag = getattr(g, TAG_ATTR)
        state = tag.call
        request = tag.request
        calls.append(
            (
                None
                if state is None
                else (
                    state.network_ns,
                    state.delay_ns,
                    state.blocked_ns,
                    state.cpu_wait_ns,
                    dict(state.culprits_ns),
                    state.last_in_ns,
                    state.out_ns,
                ),
                None
                if request is None
                else (request.running_ns, request.in_ns, request.out_ns, list(request.waits)),
            )
        )
    if sampler is not None:
        sampler.close()
    return {
        "log": log.entries(),
        "route_cpu": dict(route_cpu.current()),
        "blocks": dict(route_cpu.blocks),
        "since": list(route_cpu.since),
        "calls": calls,
        "runqueue": None if sampler is None else (list(sampler._samples), sampler.due_ns[0]),
    }


@needs_compiled
@pytest.mark.parametrize("seed", range(12))
def test_the_switch_tracer_gives_the_reference_numbers(seed: int, tmp_path: Path) -> None:
    events = _events(seed, greenlets=6, steps=600)
    schedstat = tmp_path / "schedstat" if seed % 2 else None
    if schedstat is not None:
        schedstat.write_text("0 0 0\n")
    reference = _replay_switches(False, events, schedstat)
    if schedstat is not None:
        assert len(reference["runqueue"][0]) > 10, "the run-queue clock was never sampled"
    assert any(c[0] is not None for c in reference["calls"]), "the sequence measured nothing"
    assert any(c[0] is not None and c[0][1] + c[0][2] > 0 for c in reference["calls"])
    assert any(c[1] is not None and c[1][3] for c in reference["calls"]), "no request waits"
    assert reference["blocks"], "no run was long enough to count as a hub block"
    if schedstat is not None:
        schedstat.write_text("0 0 0\n")
    assert _replay_switches(True, events, schedstat) == reference


@needs_compiled
def test_the_switch_tracer_gives_the_reference_numbers_over_many_labels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More labels than the compiled tracer holds runs for (the rest go to the dict), and
    labels equal but not the same string object: the same CPU per label."""
    many: list[str | None] = [f"GET /v1/r{i}" for i in range(90)]
    many += ["".join(["GET /v1/r", str(i)]) for i in range(10)]  # equal, not identical
    monkeypatch.setattr(sys.modules[__name__], "LABELS", [*many, None, "<hub>"])
    events = _events(7, greenlets=6, steps=3000)
    reference = _replay_switches(False, events)
    assert len(reference["route_cpu"]) > 40
    assert _replay_switches(True, events) == reference


def test_route_cpu_is_read_up_to_date_while_the_tracer_runs() -> None:
    """The compiled tracer holds short runs until pulled: ``current()`` pulls them."""
    clock = Clock()
    route_cpu = RouteCpu()
    route_cpu.since[:] = [clock.now, HUB_LABEL]
    tracer = SwitchTracer(compiled.SwitchLog(16) if compiled else SwitchLog(16), clock=clock)
    hub, bike = FakeGreenlet(HUB_LABEL), FakeGreenlet(LABELS[0])
    with _path(compiled is not None, clock):
        tracer.install(route_cpu=route_cpu)
        try:
            trace = tracer._trace
            assert trace is not None
            clock.now += 300 * US
            trace("switch", (hub, bike))
            clock.now += 200 * US
            trace("switch", (bike, hub))
            assert route_cpu.current() == {HUB_LABEL: 300 * US, LABELS[0]: 200 * US}
            assert route_cpu.since == [clock.now, HUB_LABEL]
            clock.now += 100 * US
            trace("switch", (hub, bike))
            assert route_cpu.current()[HUB_LABEL] == 400 * US
        finally:
            tracer.uninstall()
    assert route_cpu.pull is None
    assert route_cpu.by_label_ns == {HUB_LABEL: 400 * US, LABELS[0]: 200 * US}


def test_the_recorded_switch_sequences_contain_culprits_of_delays() -> None:
    """The sequences above are worth comparing: they name culprits."""
    culprits = [
        c[0][4]
        for seed in range(12)
        for c in _replay_switches(False, _events(seed, greenlets=6, steps=600))["calls"]
        if c[0] is not None
    ]
    assert any(culprits)


@needs_compiled
@pytest.mark.parametrize("size", [2, 7, 64, 300])
def test_the_switch_log_attributes_as_the_reference(size: int) -> None:
    """Appends and attributions interleaved; sometimes so many appends in between that
    the counters must start again from what the log still holds."""
    rng = random.Random(size)
    python_log, c_log = SwitchLog(size), compiled.SwitchLog(size)
    t = 0
    for _ in range(400):
        for _ in range(rng.choice([1, 3, 20, 70, 2 * size])):
            t += rng.randrange(1, 50) * US
            entry = (t, rng.choice(LABELS))
            python_log.append(entry)
            c_log.append(entry)
        assert python_log.last() == c_log.last()
        assert len(python_log) == len(c_log)
        start = t - rng.randrange(0, 6000) * US
        end = start + rng.randrange(0, 6000) * US
        expected: dict[str, int] = {}
        got: dict[str, int] = {}
        python_log.attribute(start, end, expected)
        c_log.attribute(start, end, got)
        assert got == expected
    assert c_log.entries() == python_log.entries()


@needs_compiled
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_delay_is_explained_as_the_reference_does(seed: int, tmp_path: Path) -> None:
    """Culprits and run-queue wait of delay pieces: the compiled explanation (its own read
    of the clock, its binary search over the samples) against ``call_state.explain_delay``,
    each with its own clock on the same recorded schedstat readings."""
    rng = random.Random(seed)
    log = compiled.SwitchLog(64)
    t = 0
    for _ in range(300):
        t += rng.randrange(1, 900) * US
        log.append((t, rng.choice(LABELS)))
    schedstat = tmp_path / "schedstat"
    schedstat.write_text("1000 0 5\n")
    clocks = {
        use: RunQueueClock(sample_interval_ns=700 * US, path=str(schedstat))
        for use in (True, False)
    }
    waited = 0
    explained = 0
    try:
        for step in range(200):
            # Samples in between (as the switch tracer takes them), and the wait growing.
            at = rng.randrange(0, t)
            waited += rng.randrange(0, 400) * US
            schedstat.write_text(f"1000 {waited} 5\n")
            if step % 3 == 0:
                for clock in clocks.values():
                    clock.sample(t - 300_000 * US + step * 1_000 * US)
            start = at - rng.choice([0, 500, 1_500, 40_000]) * US
            end = start + rng.choice([200, 999, 1_000, 3_000, 90_000]) * US
            results = {}
            for use, clock in clocks.items():
                call_state.configure(log, 0.001, clock)
                culprits: dict[str, int] = {}
                explain = compiled.explain_delay if use else call_state.explain_delay
                results[use] = (explain(start, end, culprits), culprits)
            assert results[True] == results[False]
            explained += bool(results[True][0])
        assert list(clocks[True]._samples) == list(clocks[False]._samples)
        assert clocks[True].due_ns == clocks[False].due_ns
        assert explained > 20  # the sequence does exercise the run-queue wait
    finally:
        call_state.configure(None, call_state.CULPRIT_THRESHOLD_S)
        for clock in clocks.values():
            clock.close()


# -- socket waits ---------------------------------------------------------------------------


def _wait_events(seed: int, steps: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(steps):
        out.append(
            {
                "read": rng.random() < 0.8,
                "before": rng.choice([0, 10, 200]) * US,  # ran before the wait
                "out": rng.choice([50, 900, 5000]) * US,  # switched out for this long
                # where readiness falls, relative to the wait: before it, inside, after
                "ready_at": rng.choice([-0.5, 0.1, 0.5, 0.9, 1.5]),
                "reply_pending": rng.random() < 0.3,
                "out_since_send": rng.random() < 0.5,
                "awaiting_first_read": rng.random() < 0.2,
                "switches": rng.random() < 0.9,  # False: no tracer saw the wait
                "fails": rng.random() < 0.1,
                "send": rng.random() < 0.5,  # a sendall before the wait
                "send_waits": rng.random() < 0.3,  # ... that switched out inside
                "read_first": rng.random() < 0.6,  # a read before the wait
                "inbound": rng.random() < 0.15,  # a watched connection's first read
            }
        )
    return out


class _Timeout(Exception):
    pass


@dataclasses.dataclass
class _Rig:
    """A replay's set-up: a fake clock, the current greenlet measured under a label with a
    fresh CallState, a hub, and the switch tracer installed (compiled or reference)."""

    clock: Clock
    me: Any
    hub: FakeGreenlet
    log: Any
    route_cpu: RouteCpu
    tracer: SwitchTracer
    tag: GreenletTag
    state: CallState

    def switched_out(self, out_ns: int, seen: bool = True) -> None:
        """The greenlet leaves for the hub for *out_ns* (the tracer sees it when *seen*)."""
        trace = self.tracer._trace
        assert trace is not None
        if seen:
            trace("switch", (self.me, self.hub))
        self.clock.now += out_ns
        if seen:
            trace("switch", (self.hub, self.me))

    def numbers(self) -> dict[str, Any]:
        return {"log": self.log.entries(), "route_cpu": dict(self.route_cpu.current())}


@contextlib.contextmanager
def _rig(use_compiled: bool, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Rig]:
    clock = Clock()
    log: Any = compiled.SwitchLog(256) if use_compiled else SwitchLog(256)
    route_cpu = RouteCpu()
    route_cpu.since[0] = clock.now
    tracer = SwitchTracer(log, clock=clock)
    monkeypatch.setattr(socket_hooks, "time", types.SimpleNamespace(monotonic_ns=clock))
    me = getcurrent()
    tag = tag_of(me)
    saved_label, tag.label = tag.label, "GET /v1/offers/bike"
    call_state.configure(log, 0.001)
    call_state.measuring[0] += 1
    with _path(use_compiled, clock):
        try:
            tracer.install(route_cpu=route_cpu)
            yield _Rig(clock, me, FakeGreenlet("<hub>"), log, route_cpu, tracer, tag, CallState())
        finally:
            tracer.uninstall()
            tag.call = None
            tag.label = saved_label
            call_state.measuring[0] -= 1
            call_state.configure(None, call_state.CULPRIT_THRESHOLD_S)
            socket_hooks._unhooked.clear()


def _replay_waits(
    use_compiled: bool,
    events: list[dict[str, Any]],
    stamped: socket.socket,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    arrival = kernel_rx.peek_arrival_ns(stamped)
    assert arrival is not None
    reader = types.SimpleNamespace(_read_event=object(), _sock=stamped)
    # Writes on a Unix socket: no TCP_INFO, so readiness is unknown in both (a TCP
    # socket's ACK age would move between the two replays).
    unix, peer = socket.socketpair()
    writer = types.SimpleNamespace(_read_event=object(), _sock=unix)
    event: dict[str, Any] = {}
    waits: list[Any] = []
    with _rig(use_compiled, monkeypatch) as rig, contextlib.closing(unix), contextlib.closing(peer):
        clock, state, tag = rig.clock, rig.state, rig.tag
        tag.call = state

        def original_send(self: Any, data: bytes, flags: int = 0) -> None:
            if event["send_waits"]:
                rig.switched_out(70 * US)
            clock.now += 2 * US

        def original_read(self: Any, *args: Any) -> bytes:
            return b"data"

        def original(self: Any, watcher: Any, timeout_exc: Any = None) -> str:
            rig.switched_out(event["out"], event["switches"])
            if event["fails"]:
                raise _Timeout()
            return "ok"

        hook = socket_hooks._make_wait(original)
        sendall = socket_hooks._make_sendall(original_send)
        read = socket_hooks._make_read(original_read)
        assert (type(hook) is compiled.Hook) == use_compiled
        assert (type(sendall) is compiled.Hook) == use_compiled
        assert (type(read) is compiled.Hook) == use_compiled
        for event in events:
            clock.now += event["before"]
            state.reply_pending = event["reply_pending"]
            state.out_since_send = event["out_since_send"]
            state.awaiting_first_read = event["awaiting_first_read"]
            state.sent_ns = clock.now - 30 * US
            # ready (monotonic) = arrival - offset: place readiness where the event says
            ready = clock.now + int(event["ready_at"] * event["out"])
            state.realtime_offset_ns = arrival - ready
            if event["send"]:
                sendall(reader, b"x")
            watch = None
            if event["inbound"]:
                watch = InboundWatch(reader)
                tag.inbound = watch
                watching[0] += 1
            if event["read_first"] or watch is not None:
                assert read(reader, 64) == b"data"
            if watch is not None:
                tag.inbound = None
                watching[0] -= 1
                waits.append(("inbound", watch.armed, watch.arrival_unix_ns))
            sock = reader if event["read"] else writer
            watcher = reader._read_event if event["read"] else object()
            try:
                result = hook(sock, watcher)
            except _Timeout:
                result = "timeout"
            waits.append(
                (
                    result,
                    state.network_ns,
                    state.delay_ns,
                    state.blocked_ns,
                    state.socket_waits,
                    state.reply_arrived_unix_ns,
                    state.reply_pending,
                    state.in_socket_wait,
                    state.sent_ns,
                    state.awaiting_first_read,
                    state.out_since_send,
                    list(state.since_send),
                    dict(state.culprits_ns),
                )
            )
    return {"waits": waits, **rig.numbers()}


@needs_compiled
@pytest.mark.parametrize("seed", range(8))
def test_the_socket_hooks_give_the_reference_numbers(
    seed: int, stamped_socket: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _wait_events(seed, steps=150)
    reference = _replay_waits(False, events, stamped_socket, monkeypatch)
    waits = [w for w in reference["waits"] if w[0] != "inbound"]
    assert waits[-1][2] > 0, "the sequence had no scheduling delay"
    assert waits[-1][-1], "no delay was long enough to name its culprits"
    assert {w[0] for w in waits} == {"ok", "timeout"}
    inbound = [w for w in reference["waits"] if w[0] == "inbound"]
    assert inbound and all(w[1] is False and w[2] is not None for w in inbound)
    assert _replay_waits(True, events, stamped_socket, monkeypatch) == reference


@needs_compiled
def test_the_compiled_peek_reads_the_same_stamp(stamped_socket: socket.socket) -> None:
    assert compiled.peek_arrival_ns(stamped_socket) == kernel_rx.peek_arrival_ns(stamped_socket)


# -- reads that take their own stamp -----------------------------------------------------------


def _read_events(seed: int, steps: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "into": rng.random() < 0.5,  # recv_into, else recv
            "queued": rng.random() < 0.3,  # the reply is there at the read: no wait
            "spurious": rng.random() < 0.15,  # the first wake-up finds nothing
            "out": rng.choice([50, 900, 5000]) * US,
            "ready_at": rng.choice([-0.5, 0.1, 0.5, 0.9, 1.5]),
            "reply_pending": rng.random() < 0.3,
            "out_since_send": rng.random() < 0.5,
            "awaiting_first_read": rng.random() < 0.3,
            "switches": rng.random() < 0.9,
            "fails": rng.random() < 0.1,
            "inbound": rng.random() < 0.2,  # a watched connection's read
            "call": rng.random() < 0.9,  # a measured call's (else only the watch)
            "nonblocking": rng.random() < 0.05,
            "flags_arg": rng.random() < 0.2,  # flags=0 passed: still the plain read
        }
        for _ in range(steps)
    ]


# The test's own peek, kept before a test replaces kernel_rx's to catch the hooks peeking.
_peek = kernel_rx.peek_arrival_ns


def _stamped_pair() -> tuple[socket.socket, socket.socket]:
    """A connected TCP pair whose reader (non-blocking) gets kernel receive stamps."""
    kernel_rx.hold_timestamping()
    listener = socket.create_server(("127.0.0.1", 0))
    reader = socket.create_connection(listener.getsockname())
    writer, _ = listener.accept()
    listener.close()
    kernel_rx.enable_rx_timestamps(reader)
    reader.setblocking(False)
    return reader, writer


def _deliver(reader: socket.socket, writer: socket.socket) -> int:
    """Send one byte to *reader*; its receive stamp, once it is queued with one."""
    writer.sendall(b"x")
    for _ in range(400):
        arrival = _peek(reader)
        if arrival is not None:
            return arrival
        time.sleep(0.001)
    raise AssertionError("no stamped byte arrived")


def _replay_reads(
    use_compiled: bool, events: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The read hooks of a plain socket (recv, recv_into) over *events*, on a fake clock:
    what each read returned or raised, the call's numbers, and the watch's stamp. Real
    bytes go through a real TCP pair; each stamp is used relative to its own byte, so the
    two replays compare although their bytes arrived at different times."""
    raw, peer = _stamped_pair()
    event: dict[str, Any] = {}
    arrival = [0]  # the stamp of the byte the event sent
    wakes = [0]
    reads = []
    with _rig(use_compiled, monkeypatch) as rig, contextlib.closing(raw), contextlib.closing(peer):
        clock, state, tag = rig.clock, rig.state, rig.tag

        def wait(self: Any, watcher: Any, timeout_exc: Any = None) -> str:
            assert watcher is self._read_event
            began = clock.now
            rig.switched_out(event["out"], event["switches"])
            if event["fails"]:
                raise _Timeout()
            wakes[0] += 1
            if not (event["spurious"] and wakes[0] == 1):
                arrival[0] = _deliver(raw, peer)
                # Readiness (monotonic) = arrival - offset: where the event places it.
                state.realtime_offset_ns = arrival[0] - (
                    began + int(event["ready_at"] * event["out"])
                )
            return "ok"

        sock = types.SimpleNamespace(_read_event=object(), _sock=raw, timeout=None)
        sock._wait = lambda watcher: wait(sock, watcher)

        def original(self: Any, *args: Any) -> Any:
            raise AssertionError("the plain read never falls back to the original here")

        socket_hooks._make_wait(wait)  # the hook's original: what the stamped read waits in
        recv = socket_hooks._make_read(original, kind="recv")
        recv_into = socket_hooks._make_read(original, kind="recv_into")
        assert (type(recv) is compiled.Hook) == use_compiled
        for event in events:
            wakes[0] = 0
            arrival[0] = 0
            tag.call = state if event["call"] else None
            sock.timeout = 0.0 if event["nonblocking"] else None
            state.reply_pending = event["reply_pending"]
            state.out_since_send = event["out_since_send"]
            state.awaiting_first_read = event["awaiting_first_read"]
            state.sent_ns = clock.now - 30 * US
            state.reply_arrived_unix_ns = None
            if event["queued"]:
                arrival[0] = _deliver(raw, peer)
                state.realtime_offset_ns = arrival[0] - (clock.now - 10 * US)
            watch = None
            if event["inbound"] or not event["call"]:
                watch = InboundWatch(sock)
                tag.inbound = watch
                watching[0] += 1
            buffer = bytearray(64)
            flags = (0,) if event["flags_arg"] else ()
            try:
                if event["into"]:
                    result: Any = recv_into(sock, buffer, 0, *flags)
                    result = (result, bytes(buffer[:result]))
                else:
                    result = recv(sock, 64, *flags)
            except _Timeout:
                result = "timeout"
            except BlockingIOError:
                result = "eagain"
            finally:
                if watch is not None:
                    tag.inbound = None
                    watching[0] -= 1
            stamp = state.reply_arrived_unix_ns
            reads.append(
                (
                    result,
                    state.network_ns,
                    state.delay_ns,
                    state.blocked_ns,
                    state.socket_waits,
                    None if stamp is None else stamp == arrival[0],
                    state.reply_pending,
                    state.in_socket_wait,
                    state.awaiting_first_read,
                    list(state.since_send),
                    dict(state.culprits_ns),
                    None
                    if watch is None
                    else (
                        watch.armed,
                        None
                        if watch.arrival_unix_ns is None
                        else watch.arrival_unix_ns == arrival[0],
                    ),
                )
            )
            clock.now += 100 * US
            with contextlib.suppress(BlockingIOError):  # a byte a failed wait left behind
                while raw.recv(64):
                    pass
    return {"reads": reads, **rig.numbers()}


@needs_compiled
@pytest.mark.parametrize("seed", range(6))
def test_stamped_reads_give_the_reference_numbers_without_a_peek(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _read_events(seed, steps=80)
    peeks: list[Any] = []
    monkeypatch.setattr(kernel_rx, "peek_arrival_ns", peeks.append)
    reference = _replay_reads(False, events, monkeypatch)
    before = compiled.peeks()
    assert _replay_reads(True, events, monkeypatch) == reference
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


# -- never raise ------------------------------------------------------------------------------


class _Exploding:
    """A tag whose every attribute read raises."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"{name} exploded")


@needs_compiled
def test_a_bad_state_in_the_tracer_is_counted_and_dropped() -> None:
    log = compiled.SwitchLog(16)
    route_cpu = RouteCpu()
    forwarded: list[str] = []
    tracer = compiled.Tracer(log, lambda event, args: forwarded.append(event), route_cpu)
    bad = types.SimpleNamespace(**{TAG_ATTR: _Exploding()})
    good = FakeGreenlet("GET /v1/offers/bike")
    before = compiled.bad_states()
    assert tracer("switch", (good, bad)) is None
    assert tracer("switch", "not a pair") is None
    assert compiled.bad_states() == before + 2
    assert forwarded == ["switch", "switch"]  # the chained tracer still sees every event
    tracer("switch", (bad, good))
    assert log.last()[1] == "GET /v1/offers/bike"


@needs_compiled
def test_the_tracer_reads_a_tag_alike_through_its_slots_or_its_dict() -> None:
    """The compiled path reads the timing core's __slots__ classes at the slot's offset
    (found once per type and name); any other object through getattr. Both say the same,
    in any order, and a slot never set is a bad state, not a crash."""

    class SlotTag:
        __slots__ = ("call", "inbound", "label", "request")

    class DictTag:
        pass

    log = compiled.SwitchLog(16)
    tracer = compiled.Tracer(log, None, RouteCpu())
    hub = FakeGreenlet("<hub>")
    for cls in (SlotTag, DictTag, SlotTag, DictTag):
        tag = cls()
        tag.label, tag.call, tag.request, tag.inbound = f"GET /{cls.__name__}", None, None, None
        tracer("switch", (hub, types.SimpleNamespace(**{TAG_ATTR: tag})))
        assert log.last()[1] == f"GET /{cls.__name__}"
    before = compiled.bad_states()
    tracer("switch", (hub, types.SimpleNamespace(**{TAG_ATTR: SlotTag()})))  # no label set
    assert compiled.bad_states() == before + 1
    # A class changed after its slot was found is looked at again: its slot still holds
    # a value, but the name now means something else.
    tag = SlotTag()
    tag.label, tag.call, tag.request, tag.inbound = "GET /SlotTag", None, None, None
    SlotTag.label = property(lambda self: "GET /patched")  # type: ignore[assignment,misc]
    tracer("switch", (hub, types.SimpleNamespace(**{TAG_ATTR: tag})))
    assert log.last()[1] == "GET /patched"


@needs_compiled
def test_the_tracer_finds_a_greenlets_tag_as_getattr_does() -> None:
    """The compiled path reads a greenlet's tag from its instance dict when its type has
    nothing of that name (checked once per type and call site); otherwise, or once the
    class changed, through getattr: a property or ``__getattr__`` is obeyed."""

    def tagged(label: str) -> GreenletTag:
        return GreenletTag(label)

    class Plain:
        pass

    class Computed:
        def __getattr__(self, name: str) -> Any:
            if name == TAG_ATTR:
                return tagged("GET /computed")
            raise AttributeError(name)

    log = compiled.SwitchLog(16)
    tracer = compiled.Tracer(log, None, RouteCpu())
    hub = FakeGreenlet("<hub>")
    real = greenlet.greenlet(lambda: None)
    setattr(real, TAG_ATTR, tagged("GET /real"))
    plain = Plain()
    setattr(plain, TAG_ATTR, tagged("GET /plain"))
    for target, label in [
        (real, "GET /real"),
        (plain, "GET /plain"),
        (Computed(), "GET /computed"),
    ] * 2:
        tracer("switch", (hub, target))
        assert log.last()[1] == label
    # A class that gains a property of that name after it was seen: the property wins.
    setattr(Plain, TAG_ATTR, property(lambda self: tagged("GET /property")))
    for _ in range(3):
        tracer("switch", (hub, plain))
        assert log.last()[1] == "GET /property"
    delattr(Plain, TAG_ATTR)
    for _ in range(3):
        tracer("switch", (hub, plain))
        assert log.last()[1] == "GET /plain"
    # No tag yet: the tracer makes one (labels.tag_of), as getattr(..., None) finds none.
    fresh = Plain()
    tracer("switch", (hub, fresh))
    assert isinstance(getattr(fresh, TAG_ATTR), GreenletTag)


@needs_compiled
def test_the_tracer_gives_a_spawned_greenlet_its_spawners_label_as_the_reference() -> None:
    """A greenlet gevent spawned gets its tag from the compiled tracer when its spawner has
    one; otherwise labels.tag_of makes both tags. The same labels either way."""
    import gevent

    def spawned_from(spawner_label: str | None) -> tuple[Any, Any]:
        def spawner() -> Any:
            if spawner_label is not None:
                tag_of(getcurrent()).label = spawner_label
            return gevent.spawn(lambda: None)

        parent = gevent.spawn(spawner)
        parent.join()
        return parent, parent.value

    log = compiled.SwitchLog(16)
    tracer = compiled.Tracer(log, None, RouteCpu())
    hub = FakeGreenlet("<hub>")
    for spawner_label in ("POST /v1/offers/rideshare", None):  # None: the spawner has no tag
        parent, child = spawned_from(spawner_label)
        assert getattr(child, TAG_ATTR, None) is None
        tracer("switch", (hub, child))
        tag = getattr(child, TAG_ATTR)
        assert type(tag) is GreenletTag
        assert tag.label == getattr(parent, TAG_ATTR).label == log.last()[1]
        if spawner_label is not None:
            assert tag.label == spawner_label
        child.kill()


@needs_compiled
def test_the_tracer_makes_a_spawned_greenlets_tag_without_running_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tag a new greenlet gets on its first switch is built in C, slot by slot, without
    running GreenletTag.__init__ (a Python frame inside the tracer, once per greenlet).
    It holds what GreenletTag(label) holds."""
    import gevent

    inits: list[object] = []
    reference_init = GreenletTag.__init__

    def counted_init(self: GreenletTag, label: str | None) -> None:
        inits.append(label)
        reference_init(self, label)

    def spawner() -> Any:
        tag_of(getcurrent()).label = "GET /v1/offers/bike"
        return gevent.spawn(lambda: None)

    parent = gevent.spawn(spawner)
    parent.join()
    child = parent.value
    tracer, hub = compiled.Tracer(compiled.SwitchLog(16), None, RouteCpu()), FakeGreenlet("<hub>")
    monkeypatch.setattr(GreenletTag, "__init__", counted_init)
    tracer("switch", (hub, child))
    assert inits == []
    tag, reference = getattr(child, TAG_ATTR), GreenletTag("GET /v1/offers/bike")
    assert inits == ["GET /v1/offers/bike"]  # the reference does run it
    assert type(tag) is GreenletTag
    assert {name: getattr(tag, name) for name in GreenletTag.__slots__} == {
        name: getattr(reference, name) for name in GreenletTag.__slots__
    }
    child.kill()


@needs_compiled
def test_a_tag_type_with_other_slots_is_refused_by_configure() -> None:
    """The compiled tracer fills exactly GreenletTag's four slots: a type with more (or
    fewer) would be left half set, so configure says so instead."""

    class Wider:
        __slots__ = ("call", "extra", "inbound", "label", "request")

    class Narrower:
        __slots__ = ("call", "label", "request")

    for tag_type in (Wider, Narrower):
        with pytest.raises(TypeError):
            native.module.configure(
                getcurrent=getcurrent,
                measuring=[0],
                tag_of=tag_of,
                tag_type=tag_type,
                call_state=None,
                request_type=GreenletTag,
                max_waits=1,
            )


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


# -- a call's measurement begun and finished ---------------------------------------------------


def _call_events(seed: int, steps: int) -> list[tuple[Any, ...]]:
    """Begins (nesting past MAX_NESTING too), numbers fed as the hooks would, and finishes
    in and out of order."""
    rng = random.Random(seed)
    out: list[tuple[Any, ...]] = []
    begun = 0
    for _ in range(steps):
        dt = rng.randrange(0, 3_000) * US
        roll = rng.random()
        if roll < 0.35 or begun == 0:
            out.append(
                ("begin", dt, rng.choice([None, 1_700_000_000 * 10**9 + rng.randrange(10**9)]))
            )
            begun += 1
        elif roll < 0.75:
            out.append(
                ("feed", dt, rng.randrange(begun), rng.randrange(1, 5_000) * US, rng.random())
            )
        else:
            out.append(("finish", dt, rng.randrange(begun)))
    return out


def _replay_calls(
    use_compiled: bool, events: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    from tracing.timing import call_timing

    clock = Clock()
    fake_time = types.SimpleNamespace(monotonic_ns=clock, time_ns=time.time_ns)
    monkeypatch.setattr(call_state, "time", fake_time)
    monkeypatch.setattr(call_timing, "time", fake_time)
    # Realtime offsets sampled for a call that brings none: on the fake clock as well.
    monkeypatch.setattr(call_state, "realtime_offset_ns", lambda: (7 * 10**18, clock.now))
    with _path(use_compiled, clock):
        return _replay_calls_on(events, clock)


def _replay_calls_on(events: list[tuple[Any, ...]], clock: Clock) -> list[Any]:
    from tracing.timing import call_timing

    tag = tag_of(getcurrent())
    measuring = call_state.measuring[0]
    measurements: list[Any] = []
    out: list[Any] = []

    def chain() -> list[tuple[int, int]]:
        links, node = [], tag.call
        while node is not None:
            links.append((node.depth, node.start_ns))
            node = node.previous
        return links

    try:
        for event in events:
            clock.now += event[1]
            if event[0] == "begin":
                measurements.append(call_timing.begin_call(event[2]))
                state = measurements[-1]._state
                out.append(("begin", state.depth, state.start_ns, state.realtime_offset_ns))
            elif event[0] == "feed":
                _, _, index, ns, roll = event
                state = measurements[index]._state
                state.socket_waits += 1
                state.network_ns += ns
                state.delay_ns += ns // 3 if roll < 0.8 else -ns  # a negative sum is clamped
                state.blocked_ns += ns // 7
                state.cpu_wait_ns += ns // 2 if roll < 0.5 else ns  # and so is a CPU wait
                if roll < 0.6:
                    label = LABELS[int(roll * 10) % len(LABELS)]
                    state.culprits_ns[label] = state.culprits_ns.get(label, 0) + ns // 5
                if roll > 0.3:
                    state.reply_arrived_unix_ns = clock.now + 5
            else:
                measurement = measurements[event[2]]
                timing = measurement.finish()
                assert measurement.finish() is timing  # idempotent
                out.append(
                    (
                        "finish",
                        event[2],
                        tuple(timing[:4]),
                        dict(timing.culprits),
                        tuple(timing[5:]),
                    )
                )
            out.append((chain(), call_state.measuring[0] - measuring))
    finally:
        for measurement in measurements:
            measurement.finish()
        tag.call = None
        call_state.measuring[0] = measuring
    return out


@needs_compiled
@pytest.mark.parametrize("seed", range(10))
def test_calls_are_begun_and_finished_as_the_reference_does(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _call_events(seed, steps=160)
    reference = _replay_calls(False, events, monkeypatch)
    depths = [step[1] for step in reference if step[0] == "begin"]
    assert max(depths) == 8, "the sequence never nested to MAX_NESTING"
    finished = [step for step in reference if step[0] == "finish"]
    assert any(step[3] for step in finished), "no call had culprits"
    compiled_steps = _replay_calls(True, events, monkeypatch)
    assert compiled_steps == reference


@needs_compiled
def test_a_compiled_measurement_is_a_reference_measurement() -> None:
    """The compiled begin makes the reference's types: a CallMeasurement whose CallState
    the Python hooks (and the reference's finish) can carry on with."""
    from tracing.timing import call_timing

    measurement = call_timing.begin_call(123)
    try:
        assert type(measurement) is call_timing.CallMeasurement
        state = measurement._state
        assert type(state) is CallState and state.realtime_offset_ns == 123
        assert getattr(getcurrent(), TAG_ATTR).call is state
        state.add_network(state.start_ns, state.start_ns + 5_000)
    finally:
        timing = measurement.finish()
    assert type(timing) is call_state.CallTiming and timing.network_s == 5e-6
    assert getattr(getcurrent(), TAG_ATTR).call is None


# -- a request's measurement begun and finished ----------------------------------------------


def _request_events(seed: int, steps: int) -> list[tuple[Any, ...]]:
    """Requests begun (with an inbound arrival stamped before, after or not at all), the
    handler switched out and in, and finished with calls that did or did not overlap its
    waits, at a given end or the clock's."""
    rng = random.Random(seed)
    out: list[tuple[Any, ...]] = []
    for _ in range(steps):
        arrival = rng.choice([None, -rng.randrange(0, 20_000) * US, rng.randrange(1, 50) * US])
        out.append(("begin", rng.randrange(0, 3_000) * US, arrival))
        for _ in range(rng.randrange(0, 6)):
            out.append(("out", rng.randrange(0, 2_000) * US))
            out.append(("in", rng.randrange(0, 5_000) * US))
        calls = []
        for k in range(rng.randrange(0, 4)):
            start = rng.randrange(0, 12_000) * US
            calls.append((f"upstream-{k}", start, start + rng.randrange(0, 8_000) * US))
        out.append(("finish", rng.randrange(0, 2_000) * US, calls, rng.random() < 0.3))
    return out


def _replay_requests(
    use_compiled: bool, events: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    from tracing.timing import server_timing

    clock = Clock()
    offset = 7 * 10**18
    monkeypatch.setattr(server_timing, "time", types.SimpleNamespace(monotonic_ns=clock))
    monkeypatch.setattr(server_timing, "realtime_offset_ns", lambda: (offset, clock.now))
    monkeypatch.setattr(call_state, "realtime_offset_ns", lambda: (offset, clock.now))
    with _path(use_compiled, clock):
        return _replay_requests_on(events, clock, offset)


def _replay_requests_on(events: list[tuple[Any, ...]], clock: Clock, offset: int) -> list[Any]:
    from tracing.timing import server_timing

    log = SwitchLog(64)
    call_state.configure(log, call_state.CULPRIT_THRESHOLD_S)
    tag = tag_of(getcurrent())
    watch = InboundWatch(None)
    tag.inbound = watch
    measuring = call_state.measuring[0]
    out: list[Any] = []
    measurement: Any = None
    try:
        for event in events:
            clock.now += event[1]
            log.append((clock.now, LABELS[(clock.now // US) % len(LABELS)]))
            if event[0] == "begin":
                watch.armed = False
                watch.arrival_unix_ns = None if event[2] is None else clock.now + offset + event[2]
                measurement = server_timing.begin_request()
                state = measurement._state
                out.append(
                    (
                        "begin",
                        type(measurement).__name__,
                        type(state).__name__,
                        measurement.start_ns,
                        measurement.offset_ns,
                        measurement.arrival_unix_ns,
                        dict(measurement.inbound_culprits_ns),
                        measurement.inbound_cpu_wait_ns,
                        watch.arrival_unix_ns,
                        tag.request is state,
                    )
                )
            elif event[0] == "out":
                measurement._state.on_switch_out(clock.now)
            elif event[0] == "in":
                measurement._state.on_switch_in(clock.now)
            else:
                _, _, calls, given_end = event
                begun = measurement.start_ns
                timed = [
                    (
                        name,
                        call_state.CallTiming(
                            duration_s=(end - start) / 1e9,
                            network_s=0.0,
                            scheduling_delay_s=0.0,
                            blocked_s=0.0,
                            start_ns=begun + start,
                            end_ns=begun + end,
                        ),
                    )
                    for name, start, end in calls
                ]
                timing = measurement.finish(timed, clock.now - 5 if given_end else None)
                assert measurement.finish() is timing  # idempotent
                assert type(timing) is server_timing.RequestTiming
                out.append(("finish", tuple(timing), watch.armed, tag.request))
            out.append(call_state.measuring[0] - measuring)
    finally:
        call_state.configure(None, call_state.CULPRIT_THRESHOLD_S)
        tag.inbound = None
        tag.request = None
        call_state.measuring[0] = measuring
    return out


@needs_compiled
@pytest.mark.parametrize("seed", range(8))
def test_requests_are_begun_and_finished_as_the_reference_does(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _request_events(seed, steps=60)
    reference = _replay_requests(False, events, monkeypatch)
    finished = [step for step in reference if isinstance(step, tuple) and step[0] == "finish"]
    assert any(step[1][9] is not None and step[1][11] > 0 for step in finished), (
        "no critical call had a pre-send wait"
    )
    assert any(step[1][13] > 0 for step in finished), "no critical call overlapped a run"
    begun = [step for step in reference if isinstance(step, tuple) and step[0] == "begin"]
    assert any(step[6] for step in begun), "no inbound delay had culprits"
    bad = compiled.bad_states()
    compiled_steps = _replay_requests(True, events, monkeypatch)
    assert compiled.bad_states() == bad, "the compiled path dropped a state"
    assert compiled_steps == reference


# -- histograms --------------------------------------------------------------------------------


@needs_compiled
@pytest.mark.parametrize("seed", range(4))
def test_a_histogram_counts_as_the_reference_does(seed: int) -> None:
    from tracing.timing.histogram import Histogram

    rng = random.Random(seed)
    bounds = sorted({round(rng.uniform(0.0001, 2.0), 4) for _ in range(rng.randrange(1, 20))})
    reference, fast = Histogram(bounds), compiled.Histogram(bounds)
    values: list[float] = [*bounds, 0.0, -1.0, 5.0, 1 + 2**-40, 3]  # on each bound, ints
    values += [rng.uniform(-0.1, 2.5) for _ in range(500)]
    for value in values:
        reference.observe(value)
        fast.observe(value)
    assert fast.bounds == reference.bounds
    assert fast.counts == reference.counts and fast.count == reference.count == len(values)
    assert fast.sum == reference.sum
    assert fast.cumulative() == reference.cumulative()


@needs_compiled
@pytest.mark.parametrize("bounds", [[], [1.0, 1.0], [2.0, 1.0]])
def test_a_histogram_refuses_the_bounds_the_reference_refuses(bounds: list[Any]) -> None:
    from tracing.timing.histogram import Histogram

    with pytest.raises(ValueError):
        Histogram(bounds)
    with pytest.raises(ValueError, match="distinct and increasing"):
        compiled.Histogram(bounds)


# -- which path runs --------------------------------------------------------------------------


def test_the_compiled_path_is_what_runs_where_it_could_be_built() -> None:
    """A machine with a C compiler and Python's headers (CI's) tests the compiled path:
    a build that failed quietly (setup.py's extension is optional) would fail here."""
    import os
    import shutil
    import sysconfig

    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which("cc") is None or not headers.exists():
        pytest.skip("no compiler or no Python headers: the reference runs, by design")
    assert native.module is not None, native.reason
    if os.environ.get(native.ENV, "1") not in ("0", "off", "false", "no"):
        assert native.compiled_runs()


@needs_compiled
@pytest.mark.parametrize("use_compiled", [True, False], ids=["compiled", "reference"])
def test_what_the_hooks_bind_once_is_the_path_that_runs(use_compiled: bool) -> None:
    """The server's hooks and the call observer bind begin and finish once per process:
    the compiled functions where the compiled path runs, the reference's otherwise."""
    from tracing.timing import call_timing, server_timing

    with _path(use_compiled, Clock()):
        begin_request, finish_request = server_timing.bound_requests()
        begin_call, finish_call = call_timing.bound_calls()
        if use_compiled:
            assert (begin_request, finish_request) == (
                compiled.begin_request,
                compiled.finish_request,
            )
            assert (begin_call, finish_call) == (compiled.begin_call, compiled.finish_call)
        else:
            assert begin_request.__module__ == server_timing.__name__
            assert finish_request.__module__ == server_timing.__name__
            assert begin_call.__module__ == call_timing.__name__
            assert finish_call.__module__ == call_timing.__name__


def test_one_place_decides_which_path_runs() -> None:
    """Every hot-path module hands ``native.accelerate`` its names; none asks which path
    runs (``native.reason``, ``native.module``) or imports the extension itself."""
    import re

    import tracing

    asks = re.compile(r"native\.(reason|module|compiled_runs)\b|import _native\b")
    root = Path(tracing.__file__).parent
    found = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        if path != root / "timing" / "native.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if asks.search(line)
    ]
    assert found == []


@needs_compiled
def test_switching_the_path_swaps_every_registered_name_back_and_forth() -> None:
    from tracing.timing import call_timing, histogram, server_timing, switchlog

    before = (call_timing.begin_call, server_timing.finish_request, histogram.new_histogram)
    previous = native.use(True)
    try:
        assert call_timing.begin_call is compiled.begin_call
        assert server_timing.finish_request is compiled.finish_request
        assert histogram.new_histogram is compiled.Histogram
        assert type(switchlog.new_log(8)) is compiled.SwitchLog
        native.use(False)
        assert call_timing.begin_call.__module__ == call_timing.__name__
        assert server_timing.finish_request.__module__ == server_timing.__name__
        assert type(histogram.new_histogram([1.0])) is histogram.Histogram
        assert type(switchlog.new_log(8)) is SwitchLog
        native.use(True)
        assert call_timing.begin_call is compiled.begin_call
    finally:
        native.use(previous)
    assert before == (
        call_timing.begin_call,
        server_timing.finish_request,
        histogram.new_histogram,
    )


def test_the_reference_is_announced_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    logger = logging.getLogger("tracing")
    monkeypatch.setattr(native, "reason", "the compiled extension is not built (no module)")
    with caplog.at_level(logging.INFO, logger="tracing"):
        native.announce(logger)
    (record,) = caplog.records
    assert "Python reference" in record.getMessage() and "not built" in record.getMessage()
    monkeypatch.setattr(native, "reason", None)
    caplog.clear()
    native.announce(logger)
    assert caplog.records == []


@needs_compiled
def test_a_tracer_given_a_bad_since_is_refused_with_a_clear_error() -> None:
    route_cpu = RouteCpu()
    route_cpu.since[0] = "not a time"
    with pytest.raises(TypeError, match="integer"):
        compiled.Tracer(compiled.SwitchLog(8), None, route_cpu, hub_label=HUB_LABEL)
