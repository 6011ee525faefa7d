"""A minimal HTTP/1.1 server on asyncio: the upstream APIs plus the control API.

Upstreams (GET only; see simulator.responses):
    /vehicles/v1/nearby  /routing/v1/eta  /promotions/v1/active
Control (same port):
    GET  /healthz
    GET  /_control/upstreams              current settings of every upstream
    GET  /_control/upstreams/<name>       one upstream's settings
    PUT  /_control/upstreams/<name>       partial JSON update (404 name, 400 JSON, 422 value)
    POST /_control/reset                  back to the settings the process started with
    GET  /_control/stats                  uptime_s, cpu_s (user+sys), requests and errors
                                          per upstream (errors: every answer that was not
                                          a normal 200: injected status, fault, bad query)
    GET  /_control/records?upstream=&since_ns=&limit=
                                          the latest per-request records (received_ns >=
                                          since_ns), oldest first; sent_ns is taken just
                                          before the first reply byte is written

Cost per request matters more than features here (the simulator shares a small
machine with what it benchmarks), so the hot path is plain code on bytes:

- one asyncio.BufferedProtocol per connection, all reading into one shared
  buffer; keep-alive; Content-Length bodies only (no chunked requests); requests
  that arrive while one is pending wait in the buffer and are served in order;
- an upstream answer depends only on its query string, so whole responses
  (status line, headers, body) are cached per raw query and written with one
  `transport.write`;
- delays are `loop.call_later` timers, never sleeps, so they block nothing;
- a record is a tuple appended to a bounded deque; it becomes JSON only when
  the control API asks for it.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Final

from simulator.model import UPSTREAMS, SettingsError, SimulatorConfig, UpstreamSettings
from simulator.responses import (
    BadQuery,
    Builder,
    parse_query,
    promotions_active,
    routing_eta,
    vehicles_nearby,
)
from toolkit import contract

#: The simulator's own health check (the stack waits for it).
HEALTH_PATH: Final = "/healthz"
MAX_HEAD_BYTES: Final = 64 * 1024
MAX_BODY_BYTES: Final = 1024 * 1024
RECORDS_MAX: Final = 50_000
CACHE_MAX: Final = 10_000  # cached responses per upstream; the cache is dropped when full
MAX_RECORDS_LIMIT: Final = RECORDS_MAX

PROBLEM_JSON: Final = contract.PROBLEM_JSON.encode()
APP_JSON: Final = contract.JSON.encode()
PROBLEM_BASE: Final = "urn:pricingservice:simulator:problem:"

_HEALTH_PATH: Final = HEALTH_PATH.encode()
_OK_HEAD: Final = (
    b"HTTP/1.1 200 OK\r\nContent-Type: " + APP_JSON + b"\r\nContent-Length: %d\r\n\r\n"
)
_LINGER_RST: Final = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST

# What to do with an upstream request once its delay has passed.
NORMAL: Final = 0
ERROR: Final = 1
RESET: Final = 2
MALFORMED: Final = 3
TRICKLE: Final = 4
CLOSE: Final = 5
HANG: Final = 6
_FAULT_KIND: Final[dict[str, int]] = {
    "reset": RESET,
    "malformed": MALFORMED,
    "trickle": TRICKLE,
    "close": CLOSE,
    "hang": HANG,
}

# A cached answer: (status, full response bytes, length of the head in bytes).
Entry = tuple[int, bytes, int]
# A record: upstream, received_ns, sent_ns, delay_ms, status, traceparent, fault.
Record = tuple[str, int, int | None, float, int | None, bytes | None, str | None]


_REASONS: Final[dict[int, str]] = {int(s): s.phrase for s in HTTPStatus}


def reason(status: int) -> str:
    return _REASONS.get(status, "Error")


def response(
    status: int,
    body: bytes,
    content_type: bytes = APP_JSON,
    *,
    close: bool = False,
    extra: bytes = b"",
) -> bytes:
    """Status line, headers and body as one bytes object. `extra`: more header lines."""
    return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s%s\r\n%s" % (
        status,
        reason(status).encode(),
        content_type,
        len(body),
        extra,
        b"Connection: close\r\n" if close else b"",
        body,
    )


def problem_body(status: int, slug: str, title: str, detail: str, **extra: Any) -> bytes:
    """An RFC 9457 problem document."""
    doc = {"type": PROBLEM_BASE + slug, "title": title, "status": status, "detail": detail}
    doc.update(extra)
    return json.dumps(doc).encode()


def problem(
    status: int, slug: str, title: str, detail: str, *, close: bool = False, **extra: Any
) -> bytes:
    return response(
        status, problem_body(status, slug, title, detail, **extra), PROBLEM_JSON, close=close
    )


def _with_close(data: bytes, head_len: int) -> bytes:
    """A cached response with `Connection: close` added to its headers."""
    return data[: head_len - 2] + b"Connection: close\r\n\r\n" + data[head_len:]


def _entry(status: int, data: bytes) -> Entry:
    return (status, data, data.index(b"\r\n\r\n") + 4)


class Simulator:
    """Settings, counters and records, shared by every connection of one process."""

    def __init__(self, config: SimulatorConfig, rng: random.Random | None = None) -> None:
        self.config = config
        self.settings: dict[str, UpstreamSettings] = dict(config.upstreams)
        self.rng = rng or random.Random(config.seed)
        self.started_ns = time.monotonic_ns()
        self.requests: dict[str, int] = dict.fromkeys(UPSTREAMS, 0)
        self.errors: dict[str, int] = dict.fromkeys(UPSTREAMS, 0)
        self.records: deque[Record] = deque(maxlen=RECORDS_MAX)
        self.connections: set[HttpProtocol] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._error_cache: dict[tuple[str, int], Entry] = {}
        routes: dict[bytes, tuple[str, Builder]] = {
            b"/vehicles/v1/nearby": ("vehicles", vehicles_nearby),
            b"/routing/v1/eta": ("routing", routing_eta),
            b"/promotions/v1/active": ("promotions", promotions_active),
        }
        # path -> (upstream name, body builder, response cache)
        self.routes: dict[bytes, tuple[str, Builder, dict[bytes, Entry]]] = {
            path: (name, build, {}) for path, (name, build) in routes.items()
        }

    # --- network ---------------------------------------------------------------------

    async def listen(self, host: str, port: int) -> asyncio.Server:
        """Start accepting connections. OSError if the address cannot be bound."""
        self.loop = asyncio.get_running_loop()
        return await self.loop.create_server(
            lambda: HttpProtocol(self), host, port, backlog=2048, reuse_address=True
        )

    def close_connections(self) -> None:
        for conn in list(self.connections):
            conn.abort()

    # --- dispatch --------------------------------------------------------------------

    def handle(
        self,
        conn: HttpProtocol,
        method: bytes,
        target: bytes,
        body: bytes,
        traceparent: bytes | None,
        close: bool,
    ) -> None:
        path, _, query = target.partition(b"?")
        route = self.routes.get(path)
        if route is not None:
            if method == b"GET":
                self._upstream(conn, route, query, traceparent, close)
            else:
                conn.send(self._method_not_allowed(method, b"GET", close), close)
            return
        if path == _HEALTH_PATH:
            conn.send(response(200, b'{"status":"ok"}', close=close), close)
        elif path.startswith(b"/_control/"):
            conn.send(self._control(method, path, query, body, close), close)
        else:
            detail = f"no such path: {path.decode('latin-1')[:200]}"
            conn.send(problem(404, "not-found", "Not Found", detail, close=close), close)

    def _method_not_allowed(self, method: bytes, allow: bytes, close: bool) -> bytes:
        detail = f"{method.decode('latin-1')[:16]} is not allowed here; use {allow.decode()}"
        body = problem_body(405, "method-not-allowed", "Method Not Allowed", detail)
        return response(405, body, PROBLEM_JSON, close=close, extra=b"Allow: %s\r\n" % allow)

    # --- upstreams (the hot path) ------------------------------------------------------

    def _upstream(
        self,
        conn: HttpProtocol,
        route: tuple[str, Builder, dict[bytes, Entry]],
        query: bytes,
        traceparent: bytes | None,
        close: bool,
    ) -> None:
        received_ns = time.time_ns()
        name, build, cache = route
        self.requests[name] += 1
        entry = cache.get(query)
        if entry is None:
            entry = self._build(name, build, query)
            if len(cache) >= CACHE_MAX:
                cache.clear()
            cache[query] = entry
        settings = self.settings[name]
        kind = NORMAL
        if settings.fault != "none" and (
            settings.fault_rate >= 1.0 or self.rng.random() < settings.fault_rate
        ):
            kind = _FAULT_KIND[settings.fault]
        if kind == NORMAL and settings.error_rate and self.rng.random() < settings.error_rate:
            kind = ERROR
        if kind == HANG:  # never answer; the connection stays open until the client goes
            conn.hung = True
            self.errors[name] += 1
            self.records.append((name, received_ns, None, 0.0, None, traceparent, "hang"))
            return
        delay_ms = settings.latency.sample_ms(self.rng)
        args = (conn, name, kind, entry, settings, received_ns, delay_ms, traceparent, close)
        if delay_ms <= 0.0:
            self._reply(*args)
            return
        assert self.loop is not None
        conn.timer = self.loop.call_later(delay_ms / 1000.0, self._reply, *args)

    def _build(self, name: str, build: Builder, query: bytes) -> Entry:
        try:
            body = build(parse_query(query))
        except BadQuery as exc:
            data = problem(
                400, "invalid-query", "Invalid query parameter", str(exc), field=exc.field
            )
            return _entry(400, data)
        head = _OK_HEAD % len(body)
        return (200, head + body, len(head))

    def _reply(
        self,
        conn: HttpProtocol,
        name: str,
        kind: int,
        entry: Entry,
        settings: UpstreamSettings,
        received_ns: int,
        delay_ms: float,
        traceparent: bytes | None,
        close: bool,
    ) -> None:
        conn.timer = None
        transport = conn.transport
        if transport is None:
            return
        status, data, head_len = entry
        if kind == NORMAL:
            if close:
                data = _with_close(data, head_len)
            sent_ns = time.time_ns()
            transport.write(data)
            self.records.append((name, received_ns, sent_ns, delay_ms, status, traceparent, None))
            if status != 200:
                self.errors[name] += 1
            conn.done(close)
            return
        self.errors[name] += 1
        if kind == ERROR:
            status = settings.error_status
            data = self._error_response(name, status)
            if close:
                data = _with_close(data, data.index(b"\r\n\r\n") + 4)
            sent_ns = time.time_ns()
            transport.write(data)
            self.records.append((name, received_ns, sent_ns, delay_ms, status, traceparent, None))
            conn.done(close)
        elif kind == MALFORMED:
            body = data[head_len:]
            data = response(status, body[: len(body) // 2] or b"{", close=close)
            sent_ns = time.time_ns()
            transport.write(data)
            self.records.append(
                (name, received_ns, sent_ns, delay_ms, status, traceparent, "malformed")
            )
            conn.done(close)
        elif kind == RESET:
            # Headers and half the body, then RST: the client sees a reset mid-response.
            sent_ns = time.time_ns()
            transport.write(data[: head_len + (len(data) - head_len) // 2])
            self.records.append(
                (name, received_ns, sent_ns, delay_ms, status, traceparent, "reset")
            )
            conn.reset()
        elif kind == CLOSE:
            self.records.append((name, received_ns, None, delay_ms, None, traceparent, "close"))
            conn.busy = True
            transport.close()
        elif kind == TRICKLE:
            if close:
                data = _with_close(data, head_len)
                head_len += len(b"Connection: close\r\n")
            sent_ns = time.time_ns()
            transport.write(data[:head_len])
            self.records.append(
                (name, received_ns, sent_ns, delay_ms, status, traceparent, "trickle")
            )
            self._trickle(conn, data, head_len, settings.trickle_ms / 1000.0, close)

    def _trickle(
        self, conn: HttpProtocol, data: bytes, pos: int, gap_s: float, close: bool
    ) -> None:
        conn.timer = None
        transport = conn.transport
        if transport is None:
            return
        if pos >= len(data):
            conn.done(close)
            return
        transport.write(data[pos : pos + 1])
        assert self.loop is not None
        conn.timer = self.loop.call_later(gap_s, self._trickle, conn, data, pos + 1, gap_s, close)

    def _error_response(self, name: str, status: int) -> bytes:
        key = (name, status)
        entry = self._error_cache.get(key)
        if entry is None:
            detail = f"{name} is failing on purpose (error_rate)"
            entry = _entry(status, problem(status, "injected-error", reason(status), detail))
            self._error_cache[key] = entry
        return entry[1]

    # --- control API ------------------------------------------------------------------

    def _control(self, method: bytes, path: bytes, query: bytes, body: bytes, close: bool) -> bytes:
        route = path[len(b"/_control/") :].decode("latin-1")
        handler: Callable[[], tuple[int, Any]]
        if route == "upstreams":
            allow, handler = b"GET", self._get_upstreams
        elif route.startswith("upstreams/"):
            name = route[len("upstreams/") :]
            if method == b"PUT":
                return self._put_upstream(name, body, close)
            allow, handler = b"GET, PUT", lambda: self._get_upstream(name, close)
        elif route == "reset":
            allow, handler = b"POST", self._reset
        elif route == "stats":
            allow, handler = b"GET", self._stats
        elif route == "records":
            if method != b"GET":
                return self._method_not_allowed(method, b"GET", close)
            return self._records(query, close)
        else:
            detail = f"no such control path: /_control/{route[:100]}"
            return problem(404, "not-found", "Not Found", detail, close=close)
        if method not in allow.split(b", "):
            return self._method_not_allowed(method, allow, close)
        status, doc = handler()
        if isinstance(doc, bytes):
            return doc
        return response(status, json.dumps(doc).encode(), close=close)

    def _get_upstreams(self) -> tuple[int, Any]:
        return 200, {"upstreams": {n: self.settings[n].to_dict() for n in UPSTREAMS}}

    def _get_upstream(self, name: str, close: bool) -> tuple[int, Any]:
        if name not in self.settings:
            return 404, self._unknown_upstream(name, close)
        return 200, {"upstream": name, **self.settings[name].to_dict()}

    def _unknown_upstream(self, name: str, close: bool = False) -> bytes:
        detail = f"no upstream named {name[:64]!r} (known: {', '.join(UPSTREAMS)})"
        return problem(404, "unknown-upstream", "Unknown upstream", detail, close=close)

    def _put_upstream(self, name: str, body: bytes, close: bool) -> bytes:
        if name not in self.settings:
            return self._unknown_upstream(name, close)
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            return problem(
                400, "invalid-json", "Invalid JSON", f"body is not JSON: {exc}", close=close
            )
        try:
            new = self.settings[name].updated(data)
        except SettingsError as exc:
            return problem(
                422,
                "invalid-settings",
                "Invalid upstream settings",
                str(exc),
                close=close,
                field=exc.field,
            )
        self.settings[name] = new
        doc = {"upstream": name, **new.to_dict()}
        return response(200, json.dumps(doc).encode(), close=close)

    def _reset(self) -> tuple[int, Any]:
        self.settings = dict(self.config.upstreams)
        return self._get_upstreams()

    def _stats(self) -> tuple[int, Any]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return 200, {
            "uptime_s": round((time.monotonic_ns() - self.started_ns) / 1e9, 3),
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "cpu_user_s": usage.ru_utime,
            "cpu_sys_s": usage.ru_stime,
            "requests": dict(self.requests),
            "errors": dict(self.errors),
            "connections": len(self.connections),
            "records": len(self.records),
        }

    def _records(self, query: bytes, close: bool) -> bytes:
        params = parse_query(query)
        upstream = params.get("upstream")
        try:
            if upstream is not None and upstream not in self.settings:
                raise BadQuery("upstream", f"must be one of {', '.join(UPSTREAMS)}")
            since_ns = _int_param(params, "since_ns", 0, 0, 2**63)
            limit = _int_param(params, "limit", 1000, 1, MAX_RECORDS_LIMIT)
        except BadQuery as exc:
            return problem(
                400,
                "invalid-query",
                "Invalid query parameter",
                str(exc),
                close=close,
                field=exc.field,
            )
        picked: list[Record] = []
        for rec in reversed(self.records):  # newest first, so `limit` keeps the latest
            if rec[1] >= since_ns and (upstream is None or rec[0] == upstream):
                picked.append(rec)
                if len(picked) >= limit:
                    break
        picked.reverse()
        # Written with a template: json.dumps of 50,000 dicts would hold the event
        # loop (and every pending reply) for most of a second.
        body = '{"records":[' + ",".join([_record_json(rec) for rec in picked]) + "]}"
        return response(200, body.encode(), close=close)


def _int_param(params: dict[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or not lo <= int(raw) <= hi:
        raise BadQuery(name, f"must be an integer between {lo} and {hi}")
    return int(raw)


def _record_json(rec: Record) -> str:
    """{"upstream", "received_ns", "sent_ns", "delay_ms", "status", "traceparent", "fault"}"""
    name, received_ns, sent_ns, delay_ms, status, traceparent, fault = rec
    tp = "null" if traceparent is None else json.dumps(traceparent.decode("latin-1"))
    fault_json = "null" if fault is None else f'"{fault}"'
    return (
        f'{{"upstream":"{name}","received_ns":{received_ns},'
        f'"sent_ns":{"null" if sent_ns is None else sent_ns},"delay_ms":{round(delay_ms, 3)},'
        f'"status":{"null" if status is None else status},"traceparent":{tp},'
        f'"fault":{fault_json}}}'
    )


# One receive buffer for every connection: asyncio reads into it (recv_into) and
# buffer_updated copies the bytes out at once, before any other read can happen.
# (A plain Protocol makes asyncio call recv(256 KiB), which allocates, maps and
# unmaps a fresh 256 KiB buffer per read: several microseconds per request.)
_RECV_VIEW: Final = memoryview(bytearray(256 * 1024))


class HttpProtocol(asyncio.BufferedProtocol):
    """One client connection: parse a request, hand it to the Simulator, repeat.

    `busy` is set while a request is being answered; bytes that arrive meanwhile
    wait in `buf`. `timer` is the pending delayed reply, or the next byte of a
    trickled one (cancelled if the client goes away).
    """

    __slots__ = (
        "buf",
        "busy",
        "continued",
        "eof",
        "hung",
        "processing",
        "sim",
        "timer",
        "transport",
    )

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.busy = False
        self.processing = False
        self.continued = False
        self.eof = False  # the client half-closed; close once its requests are answered
        self.hung = False  # a "hang" fault: nothing will ever be answered here
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.sim.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.sim.connections.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.transport = None
        self.busy = True

    def get_buffer(self, sizehint: int) -> memoryview:
        return _RECV_VIEW

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(_RECV_VIEW[:nbytes].tobytes())

    def data_received(self, data: bytes) -> None:
        if self.buf:
            self.buf += data
            if len(self.buf) > MAX_HEAD_BYTES + MAX_BODY_BYTES:
                self.abort()
                return
        else:
            self.buf = data
        if not self.busy:
            self.process()

    # --- replies (called by the Simulator) -----------------------------------------

    def send(self, data: bytes, close: bool) -> None:
        if self.transport is not None:
            self.transport.write(data)
            self.done(close)

    def done(self, close: bool) -> None:
        """The current response is written; close, or serve what is buffered."""
        if close:
            self.close()
            return
        self.busy = False
        if not self.processing:
            if self.buf:
                self.process()
            elif self.eof:
                self.close()

    def eof_received(self) -> bool | None:
        if self.hung:
            return None  # nothing will be answered: the client went, so close (no CLOSE_WAIT)
        if self.busy or self.buf:
            self.eof = True
            return True  # keep the write side open for the answers still owed
        return None  # nothing owed: let asyncio close the connection

    def close(self) -> None:
        self.busy = True
        if self.transport is not None:
            self.transport.close()

    def reset(self) -> None:
        """Abort with RST (SO_LINGER 0) instead of FIN."""
        self.busy = True
        if self.transport is None:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
        self.transport.abort()

    def abort(self) -> None:
        self.busy = True
        if self.transport is not None:
            self.transport.abort()

    # --- parsing ---------------------------------------------------------------------

    def process(self) -> None:
        self.processing = True
        try:
            while not self.busy and self.buf and self._next_request():
                pass
        finally:
            self.processing = False
        if self.eof and not self.busy:
            self.close()

    def _next_request(self) -> bool:
        """Parse one request from `buf` and dispatch it; False if it is not complete yet."""
        buf = self.buf
        if buf[:2] == b"\r\n":  # stray empty lines between requests are allowed
            buf = self.buf = buf.lstrip(b"\r\n")
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                self._fail(431, "Request Header Fields Too Large", "headers exceed 64 KiB")
            return False
        # Header lookups are substring searches in a lowercased copy of the head (C
        # speed); values are cut from the original at the same offsets.
        head = buf[: end + 2]  # ends with CRLF, so every header line does
        low = head.lower()
        first = head.find(b"\r\n")
        parts = head[:first].split(b" ")
        if len(parts) != 3:
            self._fail(400, "Bad Request", "malformed request line")
            return False
        method, target, version = parts
        if version == b"HTTP/1.1":
            close = False
        elif version == b"HTTP/1.0":
            close = True
        else:
            self._fail(505, "HTTP Version Not Supported", "only HTTP/1.1 and HTTP/1.0")
            return False
        traceparent = None
        i = low.find(b"\r\ntraceparent:", first)
        if i >= 0:
            traceparent = head[i + 14 : head.find(b"\r\n", i + 14)].strip()
        length = 0
        i = low.find(b"\r\ncontent-length:", first)
        if i >= 0:
            value = head[i + 17 : head.find(b"\r\n", i + 17)].strip()
            if not value.isdigit():
                self._fail(400, "Bad Request", "invalid Content-Length")
                return False
            length = int(value)
        if b"\r\ntransfer-encoding:" in low:
            self._fail(501, "Not Implemented", "Transfer-Encoding is not supported")
            return False
        i = low.find(b"\r\nconnection:", first)
        if i >= 0:
            value = low[i + 13 : low.find(b"\r\n", i + 13)]
            if b"close" in value:
                close = True
            elif b"keep-alive" in value:
                close = False
        total = end + 4 + length
        if length:
            if length > MAX_BODY_BYTES:
                self._fail(413, "Content Too Large", "body exceeds 1 MiB")
                return False
            if len(buf) < total:
                if (
                    not self.continued
                    and self.transport is not None
                    and b"\r\nexpect:" in low
                    and b"100-continue" in low
                ):
                    self.continued = True
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return False
            body = buf[end + 4 : total]
        else:
            body = b""
        self.buf = buf[total:]
        self.continued = False
        self.busy = True
        self.sim.handle(self, method, target, body, traceparent, close)
        return True

    def _fail(self, status: int, title: str, detail: str) -> None:
        """Answer a request we cannot parse, then close: the byte stream is out of sync."""
        self.busy = True
        self.buf = b""
        if self.transport is not None:
            slug = title.lower().replace(" ", "-")
            self.transport.write(problem(status, slug, title, detail, close=True))
            self.transport.close()
