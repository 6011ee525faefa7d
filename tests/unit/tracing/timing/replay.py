"""The replay harness of the compiled hot path's parity tests (``test_native_*.py``):
recorded (or generated) switch, socket-wait, read, call and request sequences replayed
through the compiled path (``_native``) or its Python reference, each replay returning
every number it produced so a test compares the two.

The trace function and the hooks are called directly, on a fake clock, with fake
greenlets (anything that carries a tag); a socket is a real one with a queued, kernel-
stamped byte, so both paths peek the same stamp.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import socket
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from greenlet import getcurrent

from tracing.timing import call_state, kernel_rx, labels, native, socket_hooks
from tracing.timing.call_state import CallState
from tracing.timing.labels import TAG_ATTR, GreenletTag, tag_of
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
def on_path(use_compiled: bool, clock: Clock) -> Iterator[None]:
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


def switch_events(seed: int, greenlets: int, steps: int) -> list[tuple[Any, ...]]:
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


def replay_switches(
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
            if event[0] in ("switch", "throw"):  # a throw switches as a switch does
                trace(event[0], (greenlets[event[2]], greenlets[event[3]]))
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


def wait_events(seed: int, steps: int) -> list[dict[str, Any]]:
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


class ReplayTimeout(Exception):
    pass


@dataclasses.dataclass
class Rig:
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
def rigged(use_compiled: bool, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
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
    with on_path(use_compiled, clock):
        try:
            tracer.install(route_cpu=route_cpu)
            yield Rig(clock, me, FakeGreenlet("<hub>"), log, route_cpu, tracer, tag, CallState())
        finally:
            tracer.uninstall()
            tag.call = None
            tag.label = saved_label
            call_state.measuring[0] -= 1
            call_state.configure(None, call_state.CULPRIT_THRESHOLD_S)
            socket_hooks._unhooked.clear()


def replay_waits(
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
    with (
        rigged(use_compiled, monkeypatch) as rig,
        contextlib.closing(unix),
        contextlib.closing(peer),
    ):
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
                raise ReplayTimeout()
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
            except ReplayTimeout:
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


def read_events(seed: int, steps: int) -> list[dict[str, Any]]:
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
own_peek = kernel_rx.peek_arrival_ns


def stamped_pair() -> tuple[socket.socket, socket.socket]:
    """A connected TCP pair whose reader (non-blocking) gets kernel receive stamps."""
    kernel_rx.hold_timestamping()
    listener = socket.create_server(("127.0.0.1", 0))
    reader = socket.create_connection(listener.getsockname())
    writer, _ = listener.accept()
    listener.close()
    kernel_rx.enable_rx_timestamps(reader)
    reader.setblocking(False)
    return reader, writer


def deliver(reader: socket.socket, writer: socket.socket) -> int:
    """Send one byte to *reader*; its receive stamp, once it is queued with one."""
    writer.sendall(b"x")
    for _ in range(400):
        arrival = own_peek(reader)
        if arrival is not None:
            return arrival
        time.sleep(0.001)
    raise AssertionError("no stamped byte arrived")


def replay_reads(
    use_compiled: bool, events: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The read hooks of a plain socket (recv, recv_into) over *events*, on a fake clock:
    what each read returned or raised, the call's numbers, and the watch's stamp. Real
    bytes go through a real TCP pair; each stamp is used relative to its own byte, so the
    two replays compare although their bytes arrived at different times."""
    raw, peer = stamped_pair()
    event: dict[str, Any] = {}
    arrival = [0]  # the stamp of the byte the event sent
    wakes = [0]
    reads = []
    with (
        rigged(use_compiled, monkeypatch) as rig,
        contextlib.closing(raw),
        contextlib.closing(peer),
    ):
        clock, state, tag = rig.clock, rig.state, rig.tag

        def wait(self: Any, watcher: Any, timeout_exc: Any = None) -> str:
            assert watcher is self._read_event
            began = clock.now
            rig.switched_out(event["out"], event["switches"])
            if event["fails"]:
                raise ReplayTimeout()
            wakes[0] += 1
            if not (event["spurious"] and wakes[0] == 1):
                arrival[0] = deliver(raw, peer)
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
                arrival[0] = deliver(raw, peer)
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
            except ReplayTimeout:
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


class Exploding:
    """A tag whose every attribute read raises."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"{name} exploded")


def call_events(seed: int, steps: int) -> list[tuple[Any, ...]]:
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


def replay_calls(
    use_compiled: bool, events: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    from tracing.timing import call_timing

    clock = Clock()
    fake_time = types.SimpleNamespace(monotonic_ns=clock, time_ns=time.time_ns)
    monkeypatch.setattr(call_state, "time", fake_time)
    monkeypatch.setattr(call_timing, "time", fake_time)
    # Realtime offsets sampled for a call that brings none: on the fake clock as well.
    monkeypatch.setattr(call_state, "realtime_offset_ns", lambda: (7 * 10**18, clock.now))
    with on_path(use_compiled, clock):
        return replay_calls_on(events, clock)


def replay_calls_on(events: list[tuple[Any, ...]], clock: Clock) -> list[Any]:
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


def request_events(seed: int, steps: int) -> list[tuple[Any, ...]]:
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


def replay_requests(
    use_compiled: bool, events: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    from tracing.timing import server_timing

    clock = Clock()
    offset = 7 * 10**18
    monkeypatch.setattr(server_timing, "time", types.SimpleNamespace(monotonic_ns=clock))
    monkeypatch.setattr(server_timing, "realtime_offset_ns", lambda: (offset, clock.now))
    monkeypatch.setattr(call_state, "realtime_offset_ns", lambda: (offset, clock.now))
    with on_path(use_compiled, clock):
        return replay_requests_on(events, clock, offset)


def replay_requests_on(events: list[tuple[Any, ...]], clock: Clock, offset: int) -> list[Any]:
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
