"""Hooks on gevent's socket class: time every socket wait of a measured greenlet.

Every blocking read, write, connect and TLS step of a gevent socket (requests, urllib3,
http.client, ``gevent.ssl``) waits in one method, ``gevent._socketcommon.SocketMixin._wait``
(a private name, stable since 2020; gevent is pinned and :func:`verify` checks it at
start-up). Replacing it splits each wait of a measured greenlet at the moment the socket
became ready. Around it:

- ``_internal_connect`` switches kernel receive timestamps on before any byte can arrive;
- ``sendall`` notes when a request was handed to the kernel;
- ``recv``/``recv_into``/SSL ``read`` check, on the first read after a send, for a reply
  that was already queued (a read that never waits is invisible to ``_wait``); on a
  watched server connection (``server_timing``), the first read of each request notes
  when its first bytes reached the kernel.

The receive stamp of a plain socket's ``recv``/``recv_into`` comes with the read itself:
for a measured call or a watched connection the hook runs gevent's read loop with
``recvmsg`` in place of ``recv`` (``_stamped_read``), timing its waits, so a reply costs
no syscall more than untraced. For TCP a read's stamp is the newest segment it took; a
reply in one segment, or read as it arrives, is dated as a peek would date it. An SSL
``read`` (the bytes go through OpenSSL) and a read with flags or keywords still peek,
with ``recvmsg(MSG_PEEK)``, after the wait or before the read.

With no measurement in progress anywhere each hook costs a call and one check; with one
in progress elsewhere, one ``getattr`` on the current greenlet more.
Errors inside a hook are swallowed: the read runs exactly once (the original, or the
stamped read in its place).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import Any

from greenlet import getcurrent

from tracing.timing import kernel_rx, native
from tracing.timing.call_state import CallState, measuring
from tracing.timing.hook_errors import swallow
from tracing.timing.labels import TAG_ATTR
from tracing.timing.patching import Factory, Patches, is_patch
from tracing.timing.request_state import InboundWatch
from tracing.timing.server_timing import stamp_arrival, watching

_patches = Patches()


def _ready_ns(call: CallState, sock: Any, is_read: bool, resumed_ns: int) -> int | None:
    """When the socket became ready: the data's kernel arrival for a read, the last ACK
    for a write or connect (rounded so that the delay is never overstated)."""
    raw = sock._sock
    if is_read:
        arrival = kernel_rx.peek_arrival_ns(raw)
        if arrival is None:
            return None
        call.reply_arrived_unix_ns = arrival
        return arrival - call.realtime_offset_ns
    age = kernel_rx.last_ack_age_ns(raw)
    if age is None:
        return None
    age_at_resume = age - (time.monotonic_ns() - resumed_ns)
    if age_at_resume <= kernel_rx.TCP_INFO_RESOLUTION_NS:
        return None
    return resumed_ns - (age_at_resume - kernel_rx.TCP_INFO_RESOLUTION_NS)


def _wait_ended(call: CallState, started_ns: int) -> int:
    """The greenlet is back from a socket wait begun at *started_ns*: when it resumed."""
    call.in_socket_wait = False
    resumed = call.last_in_ns
    if resumed <= started_ns:  # no switch tracer (or no switch): date it now
        resumed = time.monotonic_ns()
    return resumed


def _account_wait(
    call: CallState, sock: Any, started_ns: int, is_read: bool, succeeded: bool
) -> None:
    try:
        resumed = _wait_ended(call, started_ns)
        ready: int | None = None
        if succeeded:
            try:
                ready = _ready_ns(call, sock, is_read, resumed)
            except Exception as exc:
                # Still count the wait, undivided (as network).
                swallow("socket readiness", exc)
        call.on_socket_wait(started_ns, resumed, ready)
    except Exception as exc:
        swallow("socket wait accounting", exc)


def _account_read_wait(call: CallState, started_ns: int, arrival: int | None) -> None:
    """A read wait whose data came with its stamp (*arrival*, CLOCK_REALTIME ns, or None),
    read by :func:`_stamped_read` itself: no peek."""
    try:
        resumed = _wait_ended(call, started_ns)
        ready = None
        if arrival is not None:
            call.reply_arrived_unix_ns = arrival
            ready = arrival - call.realtime_offset_ns
        call.on_socket_wait(started_ns, resumed, ready)
    except Exception as exc:
        swallow("socket wait accounting", exc)


# SocketMixin._wait as gevent defines it (set when the hook is made): the stamped read
# times its waits itself and calls this, so no wait is timed twice.
_unhooked: dict[str, Callable[..., Any]] = {}


def _make_wait(original: Callable[..., Any]) -> Callable[..., Any]:
    _unhooked["wait"] = original

    def _wait(self: Any, watcher: Any, timeout_exc: Any = None) -> Any:
        if not measuring[0]:
            return original(self, watcher, timeout_exc)
        tag = getattr(getcurrent(), TAG_ATTR, None)
        call = None if tag is None else tag.call
        if call is None:
            return original(self, watcher, timeout_exc)
        try:
            is_read = watcher is self._read_event
            started = call.wait_start_ns(time.monotonic_ns(), is_read)
            call.in_socket_wait = True
        except Exception as exc:
            swallow("socket wait start", exc)
            call.in_socket_wait = False
            return original(self, watcher, timeout_exc)
        try:
            result = original(self, watcher, timeout_exc)
        except BaseException:
            # Timeout, cancel_wait, GreenletExit: the wait never saw its data.
            _account_wait(call, self, started, is_read, succeeded=False)
            raise
        _account_wait(call, self, started, is_read, succeeded=True)
        return result

    return _wait


def _make_connect(original: Callable[..., Any]) -> Callable[..., Any]:
    def _internal_connect(self: Any, address: Any) -> Any:
        # Before connecting: receive stamps only exist for bytes that arrive after this.
        try:
            kernel_rx.enable_rx_timestamps(self._sock)
        except Exception as exc:
            swallow("enable receive timestamps", exc)
        return original(self, address)

    return _internal_connect


def _make_sendall(original: Callable[..., Any]) -> Callable[..., Any]:
    def sendall(self: Any, data: Any, flags: int = 0) -> Any:
        if not measuring[0]:
            return original(self, data, flags)
        # Dated before the syscall: handing bytes to a local receiver often wakes it and
        # preempts us on the way out, which would make the send look milliseconds late.
        started = time.monotonic_ns()
        result = original(self, data, flags)
        tag = getattr(getcurrent(), TAG_ATTR, None)
        if tag is not None and tag.call is not None:
            try:
                tag.call.on_send(started, time.monotonic_ns())
            except Exception as exc:
                swallow("note request send", exc)
        return result

    return sendall


def _check_queued_reply(call: CallState, sock: Any) -> None:
    """The first read after a send, about to run: a peek says whether (and since when) the
    reply was queued. The SSL read's; a plain socket's read stamps itself (`_first_read`)."""
    call.awaiting_first_read = False
    try:
        _queued_reply(call, native.peek_arrival_ns(sock._sock))
    except Exception as exc:
        swallow("first read after send", exc)


def _queued_reply(call: CallState, arrival: int | None) -> None:
    now = time.monotonic_ns()
    if arrival is not None:
        call.reply_arrived_unix_ns = arrival
    call.on_first_read(None if arrival is None else call.monotonic_from_realtime_ns(arrival), now)


def _first_read(call: CallState, arrival: int | None) -> None:
    """The first read after a send, done by :func:`_stamped_read` (*arrival*: the stamp of
    what it read, None when nothing was queued)."""
    try:
        if not call.awaiting_first_read:
            return
        call.awaiting_first_read = False
        if call.out_since_send:
            _queued_reply(call, arrival)
        # else: ran without pause since the send, no delay to find.
    except Exception as exc:
        swallow("first read after send", exc)


def _stamped_read(
    sock: Any, into: bool, args: tuple[Any, ...], watch: InboundWatch | None, call: CallState | None
) -> Any:
    """gevent's recv / recv_into loop (read; on EAGAIN wait for the socket, read again),
    each read asking for its receive stamp itself (``kernel_rx.recv_stamped``) in place of
    a peek before it: the stamp of a watched connection's first bytes (*watch*) and of a
    call's reply (*call*: its wait split at it, or its first read after the send). *args*
    are the read's, already known to be the plain ones (no flags)."""
    raw = sock._sock
    first, waited = True, False
    started = 0
    result: int | bytes
    while True:
        try:
            if into:
                result, ancillary = kernel_rx.recv_into_stamped(raw, args[0], args[1])
            else:
                result, ancillary = kernel_rx.recv_stamped(raw, args[0])
        except BlockingIOError:
            if call is not None:
                if waited:
                    _account_read_wait(call, started, None)  # woke to nothing: undivided
                elif first:
                    _first_read(call, None)
            waited = first = False
            if sock.timeout == 0.0:
                raise
            if call is None:
                sock._wait(sock._read_event)
                continue
            try:
                started = call.wait_start_ns(time.monotonic_ns(), True)
                call.in_socket_wait = True
            except Exception as exc:
                swallow("socket wait start", exc)
                call.in_socket_wait = False
                sock._wait(sock._read_event)
                continue
            raw_wait = _unhooked.get("wait")
            try:
                if raw_wait is None:  # no hook on _wait: the socket's own
                    sock._wait(sock._read_event)
                else:
                    raw_wait(sock, sock._read_event)
            except BaseException:
                # Timeout, cancel_wait, GreenletExit: the wait never saw its data.
                _account_wait(call, sock, started, True, succeeded=False)
                raise
            waited = True
            continue
        except BaseException:  # the read failed: the connection's error
            if call is not None:
                if waited:
                    _account_read_wait(call, started, None)
                elif first:
                    _first_read(call, None)
            raise
        arrival = None
        try:
            arrival = kernel_rx.stamp_of(raw, bool(result), ancillary)
        except Exception as exc:
            swallow("receive stamp", exc)  # the wait still counts, undivided (network)
        if call is not None:
            if waited:
                _account_read_wait(call, started, arrival)
            elif first:
                _first_read(call, arrival)
        if watch is not None:
            watch.armed = False
            watch.arrival_unix_ns = arrival
        return result


def _plain_read_args(
    into: bool, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...] | None:
    """The stamped read's arguments (bufsize, or buffer and nbytes) when the read's are
    the plain ones it handles; None otherwise (flags, keywords, bad values: the original
    runs and says what they mean)."""
    if kwargs or not args:
        return None
    flags_at = 2 if into else 1
    if len(args) > flags_at + 1 or (len(args) == flags_at + 1 and args[flags_at] != 0):
        return None
    if not into:
        bufsize = args[0]
        return (bufsize,) if type(bufsize) is int and bufsize > 0 else None
    try:
        buffer = memoryview(args[0]).cast("B")
    except (TypeError, ValueError):
        return None
    nbytes = args[1] if len(args) > 1 else 0
    if buffer.readonly or type(nbytes) is not int or not 0 <= nbytes <= len(buffer):
        return None
    if not (nbytes or len(buffer)):
        return None
    return (buffer, nbytes)


def _make_read(original: Callable[..., Any], kind: str = "read") -> Callable[..., Any]:
    """The hook on a read: SSL ``read`` (*kind* "read": peeks for the stamps), or a plain
    socket's ``recv`` / ``recv_into`` (whose reads take their stamps themselves)."""
    stamped = kind != "read"
    into = kind == "recv_into"

    @functools.wraps(original)
    def read(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not measuring[0] and not watching[0]:
            return original(self, *args, **kwargs)
        tag = getattr(getcurrent(), TAG_ATTR, None)
        if tag is not None and stamped:
            watch = tag.inbound
            if watch is not None and not (watch.armed and watch.sock is self):
                watch = None
            call = tag.call
            plain = None if watch is None and call is None else _plain_read_args(into, args, kwargs)
            if plain is not None:
                return _stamped_read(self, into, plain, watch, call)
        if tag is not None:
            watch = tag.inbound
            if watch is not None and watch.armed and watch.sock is self:
                try:
                    stamp_arrival(watch, self)
                except TimeoutError:
                    raise  # the socket's own timeout: the read would have raised it
                except OSError:
                    watch.armed = False  # the read itself reports the failure
                except Exception as exc:
                    watch.armed = False
                    swallow("stamp request arrival", exc)
            call = tag.call
            if call is not None and call.awaiting_first_read:
                if call.out_since_send:
                    _check_queued_reply(call, self)
                else:
                    # The greenlet ran without pause since the send: a reply already
                    # queued arrived while it was busy, so there is no delay to find
                    # (and nothing was recorded since the send). Saves a peek
                    # (``pricingctl bench timing-cost``: peek of a receive timestamp).
                    call.awaiting_first_read = False
        return original(self, *args, **kwargs)

    return read


def _targets() -> list[tuple[type, str, Factory]]:
    from gevent._socketcommon import SocketMixin
    from gevent.ssl import SSLSocket

    return [
        (SocketMixin, "_wait", _make_wait),
        (SocketMixin, "_internal_connect", _make_connect),
        (SocketMixin, "sendall", _make_sendall),
        (SocketMixin, "recv", functools.partial(_make_read, kind="recv")),
        (SocketMixin, "recv_into", functools.partial(_make_read, kind="recv_into")),
        # SSLSocket.recv/recv_into call read() once TLS is up, SocketMixin's before.
        (SSLSocket, "read", _make_read),
    ]


def install() -> None:
    """Install the hooks (idempotent)."""
    if _patches:
        return
    for cls, name, factory in _targets():
        _patches.apply(cls, name, factory)


def uninstall() -> None:
    """Restore exactly what :func:`install` replaced (idempotent)."""
    _patches.restore()


def is_installed() -> bool:
    return bool(_patches)


def verify() -> list[str]:
    """Return problems that would make the hooks miss waits (empty when all is well)."""
    import gevent.socket
    import gevent.ssl

    problems = []
    for cls in (gevent.socket.socket, gevent.ssl.SSLSocket):
        if not is_patch(getattr(cls, "_wait", None)):
            problems.append(f"{cls.__module__}.{cls.__qualname__}._wait is not hooked")
    return problems


def _compiled(extension: Any) -> dict[str, Any]:
    """The hooks' makers, compiled (``Hook``: the wait, the send, the reads with their
    stamps); the functions above are their reference."""

    def make_wait(original: Callable[..., Any]) -> Callable[..., Any]:
        _unhooked["wait"] = original
        return extension.Hook(original, "wait")

    def make_sendall(original: Callable[..., Any]) -> Callable[..., Any]:
        return extension.Hook(original, "sendall")

    def make_read(original: Callable[..., Any], kind: str = "read") -> Callable[..., Any]:
        hook = extension.Hook(original, kind, watching, _check_queued_reply)
        functools.update_wrapper(hook, original)
        return hook

    return {"_make_wait": make_wait, "_make_sendall": make_sendall, "_make_read": make_read}


native.accelerate(sys.modules[__name__], _compiled)
