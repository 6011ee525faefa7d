"""The pools' gunicorn worker: gevent's, with two changes for clients that reach a pool
past Envoy (or an Envoy that misbehaves).

- A connection's first request must arrive within READ_TIMEOUT_S, or the connection is
  closed. gunicorn bounds the wait for a request only with keep-alive on (then by the
  keep-alive, for every request); the cpu pool runs without it (one greenlet per
  process), where two connections that never send a byte held both processes forever.
- The errors gunicorn answers itself (a bad request line, headers it refuses, a line
  over limit_request_line) are RFC 9457 problem+json like every other answer, with a
  fixed detail; gunicorn's own wording (which quotes the request) stays in its log.
- A worker whose master died (SIGKILL, OOM) serves on, rather than exiting at once
  as gevent's worker does (its `notify` calls sys.exit on a changed parent, cutting
  every request in flight): the pool's listening socket outlives the master (the
  launcher holds it, as systemd's socket activation does), so a supervisor starts a
  new master on it while the orphans still answer, then stops them (SIGTERM: they
  finish what they hold). With nobody to stop it, an orphan stops gracefully by
  itself after ORPHAN_SERVE_S.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from typing import Any

import gevent
from gunicorn import util
from gunicorn.workers.base import Worker
from gunicorn.workers.ggevent import GeventWorker

from routing.gunicorn import ORPHAN_SERVE_S, READ_TIMEOUT_S
from toolkit.contract import PROBLEM_JSON


def problem_bytes(status: int, reason: str) -> bytes:
    """A whole HTTP/1.1 response: a problem+json body and Connection: close."""
    body = json.dumps(
        {
            "type": "about:blank",
            "title": reason,
            "status": status,
            "detail": "the pool could not read this request as HTTP",
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\n"
        f"Content-Type: {PROBLEM_JSON}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def write_problem(sock: Any, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn.util.write_error's signature; `mesg` (gunicorn's wording) is not sent."""
    util.write_nonblock(sock, problem_bytes(status_int, reason))


class PoolWorker(GeventWorker):
    def init_process(self) -> None:
        # gunicorn's workers answer their own errors through this one function (its
        # HTML page); replaced in this worker process only.
        util.write_error = write_problem
        # Connection (id of its socket) -> the greenlet that drops it if no request
        # has arrived on it by then.
        self._droppers: dict[int, gevent.Greenlet] = {}
        # When this worker saw its master gone (monotonic seconds); None: it has one.
        self._orphaned_at: float | None = None
        super().init_process()

    def notify(self) -> None:
        """The heartbeat, about once a second (gevent's worker loop). gevent's own
        notify exits the process on a changed parent; this one keeps serving, for at
        most ORPHAN_SERVE_S, then leaves gracefully (docs/private-apis.md)."""
        Worker.notify(self)
        if self.ppid == os.getppid():
            return
        now = time.monotonic()
        if self._orphaned_at is None:
            self._orphaned_at = now
            self.log.warning(
                "worker %s: master %s gone; serving on until stopped (at most %s s)",
                self.pid,
                self.ppid,
                ORPHAN_SERVE_S,
            )
        elif self.alive and now - self._orphaned_at >= ORPHAN_SERVE_S:  # type: ignore[has-type]
            self.log.warning("worker %s: no master for %s s; stopping", self.pid, ORPHAN_SERVE_S)
            self.alive = False

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        # A socket timeout would not do: the timing instrumentation waits on the socket
        # itself. Shutting the socket down wakes any reader with an end of file, which
        # gunicorn takes as a client that left.
        self._droppers[id(client)] = gevent.spawn_later(READ_TIMEOUT_S, _drop, client)
        try:
            super().handle(listener, client, addr)
        finally:
            self._request_arrived(client)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> Any:
        self._request_arrived(sock)
        return super().handle_request(listener_name, req, sock, addr)

    def _request_arrived(self, sock: Any) -> None:
        dropper = self._droppers.pop(id(sock), None)
        if dropper is not None:
            dropper.kill(block=False)


def _drop(sock: Any) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
