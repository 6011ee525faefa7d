"""The OTLP/HTTP receiver every arm of ``pricingctl bench baseline`` exports to (and
``tracing-overhead``'s ``100-otlp`` mode): it accepts each batch (an empty
``ExportTraceServiceResponse``, 200) and counts them, so every arm pays the same for
export and none waits on a real backend. ``GET /count`` says how many batches and bytes
arrived (the smoke tests read it).

Run as a child of the part (``running_sink``), never a command of its own."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from toolkit.contract import JSON

COUNT_PATH = "/count"
#: The sink's process: ``python -c SINK_CHILD PORT``.
SINK_CHILD = "import sys; from bench.baseline.sink import main; sys.exit(main())"


class _Handler(BaseHTTPRequestHandler):
    batches = 0
    received_bytes = 0

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        type(self).batches += 1
        type(self).received_bytes += length
        self._reply(200, b"", "application/x-protobuf")

    def do_GET(self) -> None:
        if self.path != COUNT_PATH:
            self._reply(404, b"", "text/plain")
            return
        doc = {"batches": type(self).batches, "bytes": type(self).received_bytes}
        self._reply(200, json.dumps(doc).encode(), JSON)

    def _reply(self, status: int, body: bytes, media_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", media_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


_START_TIMEOUT_S = 30.0


@contextlib.contextmanager
def running_sink(run_dir: Path) -> Iterator[str]:
    """The sink on a free loopback port (its base URL), stopped when the block ends; its
    log in *run_dir*/logs."""
    from stack.launch import PROJECT_ROOT
    from stack.procs import Proc, free_port, port_in_use

    port = free_port()
    argv = [sys.executable, "-c", SINK_CHILD, str(port)]
    proc = Proc("otlp-sink", argv, run_dir / "logs" / "otlp-sink.log", cwd=PROJECT_ROOT).start()
    try:
        proc.wait_ready(lambda: port_in_use("127.0.0.1", port), _START_TIMEOUT_S, "serving")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def main() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), _Handler)
    server.serve_forever()
    return 0
