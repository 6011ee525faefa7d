"""The pools' gunicorn worker: gevent's, with two changes for clients that reach a pool
past Envoy (or an Envoy that misbehaves).

- Every read on a connection waits at most the pool's keep-alive plus READ_TIMEOUT_S.
  gunicorn bounds the wait for a request only with keep-alive on; the cpu pool runs
  without it (one greenlet per process), where two connections that never send a byte
  would hold both processes forever.
- The errors gunicorn answers itself (a bad request line, headers it refuses, a line
  over limit_request_line) are RFC 9457 problem+json like every other answer, with a
  fixed detail; gunicorn's own wording (which quotes the request) stays in its log.
"""

from __future__ import annotations

import json
from typing import Any

from gunicorn import util
from gunicorn.workers.ggevent import GeventWorker

from routing.gunicorn import READ_TIMEOUT_S

PROBLEM_JSON = "application/problem+json"


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


class PoolWorker(GeventWorker):  # type: ignore[misc]
    def init_process(self) -> None:
        # gunicorn's workers answer their own errors through this one function (its
        # HTML page); replaced in this worker process only.
        util.write_error = write_problem
        super().init_process()

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        # Per blocking call: an idle or stalled client is dropped, a slow but moving
        # one is not. Above the keep-alive, so gunicorn's own keep-alive timer (which
        # Envoy's upstream idle timeout is set below) still closes idle connections.
        client.settimeout(self.cfg.keepalive + READ_TIMEOUT_S)
        super().handle(listener, client, addr)
