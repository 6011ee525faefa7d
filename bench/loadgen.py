"""The open-loop load generator: one epoll loop, raw keep-alive sockets, its own process.

Open loop: every request has a due time fixed in advance (`bench.schedule`), and
its latency is measured from that due time, not from when it was actually sent.
If the generator falls behind (or the server stalls and connections pile up), the
late start is counted as latency; the request rate never drops to what the server
can take. A closed loop (send, wait, send) would hide exactly the tail latency this
benchmark is about (coordinated omission).

Why this shape:
- its own process, so its CPU is measured on its own and its loop never competes
  with the benchmark driver;
- one single-threaded epoll loop: the next due time and the next request deadline
  set the wait, and one wake-up serves every socket that is ready. gevent (one
  greenlet per request) was the first version; on the 2-core benchmark VM a
  gevent loop wake-up cost ~100-140 us of CPU against ~50 us for a bare epoll
  wait, and the generator used 5-6 % of a core at 130 requests/s. The generator
  must stay at a few % of a core, and lower still at the io-capacity rates;
- one pool of idle keep-alive connections per target; a new connection only when
  every open one is busy (an open loop needs one connection per in-flight request:
  HTTP/1.1 without pipelining). Idle connections stay watched, so one the server
  closed is dropped before it is reused; a reused connection that still dies
  before any byte of the answer is retried once on a fresh one;
- prebuilt request bytes (`bench.traffic`) and the project's response parser
  (`pricing.upstream.http1`), bodies discarded.

Timing: epoll waits in whole milliseconds (rounded up), so a request may leave up
to ~1 ms after its due time; that lateness is recorded per request (`lag_s`) and,
like every other delay, counted in its latency.

Run by the driver as a child process (`bench.run.LoadgenProcess`: `main` with PLAN.json
OUT.json): it prints
`ready` once the schedule is built, reads the start time (time.monotonic(), which
is CLOCK_MONOTONIC and so the same clock in every process) from stdin, runs,
writes OUT.json and exits. SIGUSR1 ends the run early: what was sent finishes, and
the samples cover what was sent.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import json
import math
import random
import select
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.schedule import Arrival, Polls, load_schedule
from bench.traffic import Target
from pricing.upstream.http1 import ProtocolError, ResponseParser

# Status codes for requests that got no HTTP status.
TIMEOUT = 0  # no complete response before the request's deadline
CONNECTION_ERROR = -1  # connect failed, reset, or closed mid-response
PROTOCOL_ERROR = -2  # the response could not be framed
OVERLOAD = -3  # not sent: the generator's in-flight cap was reached
FAILURE_NAMES: Mapping[int, str] = {
    TIMEOUT: "timeout",
    CONNECTION_ERROR: "connection_error",
    PROTOCOL_ERROR: "protocol_error",
    OVERLOAD: "generator_overload",
}

_RECV_BYTES = 65536
_IN = select.EPOLLIN | select.EPOLLRDHUP
_OUT = select.EPOLLOUT
_ERR = select.EPOLLERR | select.EPOLLHUP

# connect(target) -> a non-blocking socket, connected or connecting. Injectable so
# the unit tests can serve the generator over socketpairs (no network).
Connect = Callable[[Target], socket.socket]
Clock = Callable[[], float]
# Asked to end the run early? (the driver's SIGUSR1, in `main`)
Ending = Callable[[], bool]


def tcp_connect(target: Target) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    code = sock.connect_ex((target.host, target.port))
    if code not in (0, errno.EINPROGRESS):
        sock.close()
        raise ConnectionRefusedError(code, f"connect to {target.host}:{target.port} failed")
    return sock


@dataclass(frozen=True)
class Plan:
    """Everything the generator process needs to know, as JSON."""

    targets: tuple[Target, ...]
    rates_rps: Mapping[str, float]
    duration_s: float
    seed: int
    timeout_s: float
    max_in_flight: int = 4000
    # Send a W3C traceparent (fresh trace id per request) so spans and simulator
    # records can be joined to the generator's samples.
    trace: bool = False
    # App clients polling for offers on top of the Poisson arrivals (`bench.schedule`).
    polls: Polls | None = None
    # Of those traceparents, the percentage whose sampled flag is set (decided by the
    # trace id, as a parent-based sampler downstream keeps it): 1 is Envoy's default.
    sampled_pct: float = 100.0

    def to_json(self) -> dict[str, object]:
        return {
            "polls": None if self.polls is None else self.polls.to_json(),
            "targets": [t.to_json() for t in self.targets],
            "rates_rps": dict(self.rates_rps),
            "duration_s": self.duration_s,
            "seed": self.seed,
            "timeout_s": self.timeout_s,
            "max_in_flight": self.max_in_flight,
            "trace": self.trace,
            "sampled_pct": self.sampled_pct,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Plan:
        targets = data["targets"]
        rates = data["rates_rps"]
        polls = data.get("polls")
        assert isinstance(targets, list) and isinstance(rates, dict)
        return cls(
            targets=tuple(Target.from_json(t) for t in targets),
            rates_rps={str(k): float(v) for k, v in rates.items()},
            duration_s=float(str(data["duration_s"])),
            seed=int(str(data["seed"])),
            timeout_s=float(str(data["timeout_s"])),
            max_in_flight=int(str(data["max_in_flight"])),
            trace=bool(data["trace"]),
            polls=Polls.from_json(polls) if isinstance(polls, dict) else None,
            sampled_pct=float(str(data.get("sampled_pct", 100.0))),
        )


def plan_schedule(plan: Plan) -> list[Arrival]:
    """The plan's arrivals, as the generator sends them (a driver rebuilds them to know
    which client each sample was)."""
    return load_schedule(plan.rates_rps, plan.duration_s, plan.seed, plan.polls)


@dataclass(frozen=True)
class Samples:
    """One row per scheduled request, as columns (cheap to build and to write as JSON).

    scheduled_s: due time, from the start of the run
    lag_s:       how late the generator actually started sending it
    latency_s:   from the due time to the end of the response (or the failure)
    status:      HTTP status, or one of the failure codes above (<= 0)
    """

    kinds: tuple[str, ...]
    kind: list[int] = field(default_factory=list)
    scheduled_s: list[float] = field(default_factory=list)
    lag_s: list[float] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)
    status: list[int] = field(default_factory=list)
    trace_id: list[str] = field(default_factory=list)  # empty unless the plan traces

    def __len__(self) -> int:
        return len(self.status)

    def to_json(self) -> dict[str, object]:
        return {
            "kinds": list(self.kinds),
            "kind": self.kind,
            "scheduled_s": [round(x, 6) for x in self.scheduled_s],
            "lag_s": [round(x, 6) for x in self.lag_s],
            "latency_s": [round(x, 6) for x in self.latency_s],
            "status": self.status,
            "trace_id": self.trace_id,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Samples:
        def floats(key: str) -> list[float]:
            raw = data[key]
            assert isinstance(raw, list)
            return [float(x) for x in raw]

        def ints(key: str) -> list[int]:
            raw = data[key]
            assert isinstance(raw, list)
            return [int(x) for x in raw]

        kinds = data["kinds"]
        trace_ids = data.get("trace_id") or []
        assert isinstance(kinds, list) and isinstance(trace_ids, list)
        return cls(
            kinds=tuple(str(k) for k in kinds),
            kind=ints("kind"),
            scheduled_s=floats("scheduled_s"),
            lag_s=floats("lag_s"),
            latency_s=floats("latency_s"),
            status=ints("status"),
            trace_id=[str(t) for t in trace_ids],
        )


class _Conn:
    """One connection: idle (exchange None) or carrying one request."""

    __slots__ = ("closed", "connected", "exchange", "fd", "key", "sock", "uses")

    def __init__(self, sock: socket.socket, key: str) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.key = key
        self.exchange: _Exchange | None = None
        self.connected = False  # first writable event seen (connect finished)
        self.closed = False
        self.uses = 0


class _Exchange:
    """One request on its way: bytes still to send, the response so far."""

    __slots__ = ("conn", "data", "got_bytes", "index", "reader", "retried")

    def __init__(self, index: int, data: bytes) -> None:
        self.index = index
        self.data = data
        self.conn: _Conn | None = None
        self.reader = ResponseParser(keep_body=False)
        self.got_bytes = False
        self.retried = False


class OpenLoop:
    """Runs one schedule to completion. Mutable: it owns sockets and an epoll set."""

    def __init__(
        self,
        schedule: Sequence[Arrival],
        targets: Sequence[Target],
        start_at: float,
        timeout_s: float,
        *,
        max_in_flight: int = 4000,
        trace: bool = False,
        sampled_pct: float = 100.0,
        connect: Connect = tcp_connect,
        clock: Clock = time.monotonic,
        ending: Ending = lambda: False,
    ) -> None:
        self.schedule = schedule
        self.ending = ending
        self.targets = {t.kind: t for t in targets}
        self.start_at = start_at
        self.timeout_s = timeout_s
        self.max_in_flight = max_in_flight
        self.trace = trace
        # A trace id is sampled when its last 32 bits, scaled to [0, 100), fall below this.
        self._sampled_below = int(sampled_pct / 100.0 * 2**32)
        # Trace ids must be unique across runs (the report pools the spans of several
        # runs), so they come from the OS, not from the schedule's seed.
        self.rng = random.Random()
        self.connect = connect
        self.clock = clock
        n = len(schedule)
        self.lag = [0.0] * n
        self.latency = [0.0] * n
        self.status = [TIMEOUT] * n
        self.trace_ids = [""] * n if trace else []
        self.connections_opened = 0
        self._ep = select.epoll()
        self._conns: dict[int, _Conn] = {}
        self._idle: dict[str, list[_Conn]] = {}
        self._active: dict[int, _Exchange] = {}
        self._deadlines: list[tuple[float, int]] = []

    # --- the loop --------------------------------------------------------------------

    def run(self) -> Samples:
        schedule, clock, start_at = self.schedule, self.clock, self.start_at
        n, i = len(schedule), 0
        try:
            while i < n or self._active:
                if i < n and self.ending():
                    n = i  # nothing more is sent; what is in flight finishes
                now = clock()
                while i < n and start_at + schedule[i].at_s <= now:
                    self._fire(i, now)
                    i += 1
                self._expire(now)
                wake = start_at + schedule[i].at_s if i < n else math.inf
                if self._deadlines:
                    wake = min(wake, self._deadlines[0][0])
                if wake == math.inf:
                    break
                for fd, events in self._ep.poll(max(0.0, wake - clock())):
                    conn = self._conns.get(fd)
                    if conn is not None:
                        self._on_event(conn, events)
        finally:
            for conn in list(self._conns.values()):
                self._close(conn)
            self._ep.close()
        kinds = tuple(sorted({a.kind for a in schedule}))
        index = {k: j for j, k in enumerate(kinds)}
        sent = schedule[:n]
        return Samples(
            kinds=kinds,
            kind=[index[a.kind] for a in sent],
            scheduled_s=[a.at_s for a in sent],
            lag_s=self.lag[:n],
            latency_s=self.latency[:n],
            status=self.status[:n],
            trace_id=self.trace_ids[:n],
        )

    def _fire(self, i: int, now: float) -> None:
        due = self.start_at + self.schedule[i].at_s
        self.lag[i] = now - due
        if len(self._active) >= self.max_in_flight:
            self.latency[i] = self.timeout_s
            self.status[i] = OVERLOAD
            return
        arrival = self.schedule[i]
        target = self.targets[arrival.kind]
        request = target.requests[arrival.variant % len(target.requests)]
        extra = b""
        if self.trace:
            trace_id = f"{self.rng.getrandbits(128):032x}"
            self.trace_ids[i] = trace_id
            extra = (
                f"traceparent: 00-{trace_id}-{self.rng.getrandbits(64) | 1:016x}-"
                f"{self._flags(trace_id)}\r\n".encode()
            )
        ex = _Exchange(i, request.wire(extra))
        self._active[i] = ex
        heapq.heappush(self._deadlines, (due + self.timeout_s, i))
        self._attach(ex, target, reuse=True)

    def _attach(self, ex: _Exchange, target: Target, *, reuse: bool) -> None:
        """Put `ex` on an idle connection (if `reuse`) or a new one, and start sending."""
        key = f"{target.host}:{target.port}"
        conn = None
        idle = self._idle.setdefault(key, [])
        while reuse and idle:
            candidate = idle.pop()
            if not candidate.closed:
                conn = candidate
                break
        if conn is None:
            try:
                sock = self.connect(target)
            except OSError:
                self._finish(ex, CONNECTION_ERROR)
                return
            conn = _Conn(sock, key)
            self._conns[conn.fd] = conn
            self.connections_opened += 1
            self._ep.register(conn.fd, _OUT | _IN)
        conn.exchange = ex
        conn.uses += 1
        ex.conn = conn
        if conn.connected:
            self._send(conn)

    def _expire(self, now: float) -> None:
        """Time out what is past its deadline; drop the entries of finished requests
        from the top of the heap, so they never cause a wake-up of their own."""
        deadlines, active = self._deadlines, self._active
        while deadlines and (deadlines[0][0] <= now or deadlines[0][1] not in active):
            _, i = heapq.heappop(deadlines)
            ex = active.get(i)
            if ex is not None:
                self._finish(ex, TIMEOUT)

    # --- events ----------------------------------------------------------------------

    def _on_event(self, conn: _Conn, events: int) -> None:
        ex = conn.exchange
        if ex is None:
            # Idle and readable or hung up: the server closed it (or sent garbage).
            self._close(conn)
            return
        if events & _OUT and not conn.connected:
            err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._finish(ex, CONNECTION_ERROR)
                return
            conn.connected = True
            self._send(conn)
            if conn.exchange is not ex:
                return
        elif events & _OUT:
            self._send(conn)
            if conn.exchange is not ex:
                return
        if events & (_IN | _ERR):
            self._receive(conn, ex)

    def _send(self, conn: _Conn) -> None:
        ex = conn.exchange
        assert ex is not None
        try:
            sent = conn.sock.send(ex.data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._dead_connection(conn, ex)
            return
        ex.data = ex.data[sent:]
        # Watch for writability only while bytes are left to send.
        self._ep.modify(conn.fd, _IN | _OUT if ex.data else _IN)

    def _receive(self, conn: _Conn, ex: _Exchange) -> None:
        reader = ex.reader
        while True:
            try:
                chunk = conn.sock.recv(_RECV_BYTES)
            except BlockingIOError:
                return
            except OSError:
                self._dead_connection(conn, ex)
                return
            if not chunk:
                if not ex.got_bytes:
                    self._dead_connection(conn, ex)
                    return
                try:
                    reader.eof()
                except ProtocolError:
                    self._finish(ex, CONNECTION_ERROR)
                    return
                self._finish(ex, reader.status)
                return
            ex.got_bytes = True
            try:
                reader.feed(chunk)
            except ProtocolError:
                self._finish(ex, PROTOCOL_ERROR)
                return
            if reader.rest:  # bytes after the end: the stream is out of sync
                self._finish(ex, PROTOCOL_ERROR)
                return
            if reader.done:
                self._finish(ex, reader.status, keep=reader.keep_alive)
                return

    def _dead_connection(self, conn: _Conn, ex: _Exchange) -> None:
        """The connection died before any byte of the answer arrived."""
        if conn.uses > 1 and not ex.retried and not ex.got_bytes:
            # A keep-alive connection the server closed while we were reusing it:
            # retry once on a fresh connection (the lost time still counts).
            self._close(conn)
            ex.retried = True
            ex.data = self._fresh_bytes(ex)
            ex.reader = ResponseParser(keep_body=False)
            arrival = self.schedule[ex.index]
            self._attach(ex, self.targets[arrival.kind], reuse=False)
            return
        self._finish(ex, CONNECTION_ERROR)

    def _flags(self, trace_id: str) -> str:
        return "01" if int(trace_id[24:], 16) < self._sampled_below else "00"

    def _fresh_bytes(self, ex: _Exchange) -> bytes:
        arrival = self.schedule[ex.index]
        target = self.targets[arrival.kind]
        request = target.requests[arrival.variant % len(target.requests)]
        extra = b""
        if self.trace:
            trace_id = self.trace_ids[ex.index]
            extra = (
                f"traceparent: 00-{trace_id}-{self.rng.getrandbits(64) | 1:016x}-"
                f"{self._flags(trace_id)}\r\n".encode()
            )
        return request.wire(extra)

    def _finish(self, ex: _Exchange, status: int, *, keep: bool = False) -> None:
        i = ex.index
        due = self.start_at + self.schedule[i].at_s
        self.latency[i] = self.clock() - due
        self.status[i] = status
        del self._active[i]
        conn = ex.conn
        if conn is None:
            return
        conn.exchange = None
        if keep and status > 0:
            self._idle.setdefault(conn.key, []).append(conn)
        else:
            # After a failure the byte stream is out of sync: never reuse it.
            self._close(conn)

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._conns.pop(conn.fd, None)
        with contextlib.suppress(OSError, ValueError):
            self._ep.unregister(conn.fd)
        conn.sock.close()


def run_open_loop(
    schedule: Sequence[Arrival],
    targets: Sequence[Target],
    start_at: float,
    timeout_s: float,
    *,
    max_in_flight: int = 4000,
    trace: bool = False,
    sampled_pct: float = 100.0,
    connect: Connect = tcp_connect,
    clock: Clock = time.monotonic,
    ending: Ending = lambda: False,
) -> tuple[Samples, int]:
    """Fire each arrival at `start_at + at_s` (clock seconds), whatever the server does.

    Every request has its own deadline, `timeout_s` after its due time. Returns one
    sample per arrival sent, in schedule order, and the number of connections opened:
    every arrival, unless `ending()` turns true first (then the rest are never sent).
    """
    loop = OpenLoop(
        schedule,
        targets,
        start_at,
        timeout_s,
        max_in_flight=max_in_flight,
        trace=trace,
        sampled_pct=sampled_pct,
        connect=connect,
        clock=clock,
        ending=ending,
    )
    samples = loop.run()
    return samples, loop.connections_opened


def run_plan(
    plan: Plan, schedule: Sequence[Arrival], start_at: float, ending: Ending = lambda: False
) -> dict[str, object]:
    samples, opened = run_open_loop(
        schedule,
        plan.targets,
        start_at,
        plan.timeout_s,
        max_in_flight=plan.max_in_flight,
        trace=plan.trace,
        ending=ending,
        sampled_pct=plan.sampled_pct,
    )
    return {
        "samples": samples.to_json(),
        "connections_opened": opened,
        "scheduled": len(schedule),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: loadgen PLAN.json OUT.json", file=sys.stderr)
        return 2
    plan = Plan.from_json(json.loads(Path(args[0]).read_text(encoding="utf-8")))
    # The whole schedule is built before `ready`: nothing is left to prepare once the
    # start time arrives.
    schedule = plan_schedule(plan)
    # SIGUSR1 ends the run early (a driver whose window ends on an event, not a clock):
    # nothing more is sent, what is in flight finishes, the samples are written.
    asked: list[int] = []
    signal.signal(signal.SIGUSR1, lambda signum, _frame: asked.append(signum))
    print("ready", flush=True)
    line = sys.stdin.readline()
    try:
        start_at = float(line)
    except ValueError:
        print(f"loadgen: expected a start time on stdin, got {line!r}", file=sys.stderr)
        return 2
    if not math.isfinite(start_at):
        return 2
    result = run_plan(plan, schedule, start_at, ending=lambda: bool(asked))
    Path(args[1]).write_text(json.dumps(result), encoding="utf-8")
    print("done", flush=True)
    return 0
