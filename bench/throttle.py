"""A slow collector for `pricingctl bench faults`: a TCP proxy in front of Jaeger's OTLP
port that, once throttled, passes bytes at a trickle (both ways) instead of refusing
them. A frozen collector (SIGSTOP) and a refused one (SIGKILL) are the matrix's other
collector faults; this one accepts every connection and then takes its time, the
collector that is slow rather than down.

Real OS threads in the driver process, one pair per connection: the proxy carries a
few exports a second, and the driver otherwise sleeps.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

_CHUNK = 16384
# Time slice of the throttle: a throttled pump sends at most rate x slice bytes, then
# sleeps the rest of the slice.
_SLICE_S = 0.1


class ThrottleProxy:
    """127.0.0.1:`port` -> `upstream`; `rate_bps` None passes bytes as they come, a number
    limits each direction of each connection to that many bytes a second. Mutable."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.rate_bps: float | None = None
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closing = False
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="throttle-accept", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5.0)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._conns += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                rate = self.rate_bps
                size = _CHUNK if rate is None else max(1, int(rate * _SLICE_S))
                began = time.monotonic()
                data = src.recv(size)
                if not data:
                    break
                dst.sendall(data)
                if rate is not None:
                    time.sleep(max(0.0, len(data) / rate - (time.monotonic() - began)))
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closing = True
        self._listener.close()
        with self._lock:
            for sock in self._conns:
                with contextlib.suppress(OSError):
                    sock.close()
            self._conns.clear()

    def __enter__(self) -> ThrottleProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
