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

With no measurement in progress anywhere each hook costs a call and one check; with one
in progress elsewhere, one ``getattr`` on the current greenlet more.
Errors inside a hook are swallowed: the socket call always runs, exactly once.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from greenlet import getcurrent

from tracing.timing import kernel_rx, native
from tracing.timing.call_state import CallState, measuring
from tracing.timing.hook_errors import swallow
from tracing.timing.labels import TAG_ATTR
from tracing.timing.patching import Factory, Patches, is_patch
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


def _account_wait(
    call: CallState, sock: Any, started_ns: int, is_read: bool, succeeded: bool
) -> None:
    try:
        call.in_socket_wait = False
        resumed = call.last_in_ns
        if resumed <= started_ns:  # no switch tracer (or no switch): date it now
            resumed = time.monotonic_ns()
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


def _make_wait(original: Callable[..., Any]) -> Callable[..., Any]:
    compiled = native.active()
    if compiled is not None:
        # The same, compiled (_native.c: WaitHook_call); this function is its reference.
        return compiled.Hook(original, "wait")

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
    compiled = native.active()
    if compiled is not None:
        return compiled.Hook(original, "sendall")  # _native.c: sendall_call

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
    call.awaiting_first_read = False
    try:
        arrival = native.peek_arrival_ns(sock._sock)
        now = time.monotonic_ns()
        if arrival is not None:
            call.reply_arrived_unix_ns = arrival
        call.on_first_read(
            None if arrival is None else call.monotonic_from_realtime_ns(arrival), now
        )
    except Exception as exc:
        swallow("first read after send", exc)


def _make_read(original: Callable[..., Any]) -> Callable[..., Any]:
    compiled = native.active()
    if compiled is not None:
        # _native.c: read_call (and stamp_arrival, compiled)
        hook = compiled.Hook(original, "read", watching, _check_queued_reply)
        functools.update_wrapper(hook, original)
        return hook

    @functools.wraps(original)
    def read(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not measuring[0] and not watching[0]:
            return original(self, *args, **kwargs)
        tag = getattr(getcurrent(), TAG_ATTR, None)
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
                    # (and nothing was recorded since the send). Saves a 1.5 us peek.
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
        (SocketMixin, "recv", _make_read),
        (SocketMixin, "recv_into", _make_read),
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
