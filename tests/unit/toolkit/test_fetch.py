from __future__ import annotations

import functools
import socket
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stack.procs import free_port
from toolkit.fetch import HTTPStatusError, fetch, http_ok


@pytest.fixture
def files(tmp_path: Path) -> Iterator[str]:
    """tmp_path served on loopback: its files answer 200, anything else 404."""
    (tmp_path / "doc.json").write_text('{"a": 1}')
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None  # type: ignore[assignment,method-assign]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_json_answer_reads_back(files: str) -> None:
    reply = fetch(f"{files}/doc.json")
    assert reply.ok and reply.status == 200 and reply.json() == {"a": 1}
    assert reply.headers["content-type"] == "application/json"  # names in lower case
    assert reply.expect_ok() is reply and reply.elapsed_s >= 0


def test_an_http_error_is_a_reply_and_expect_ok_raises_it(files: str) -> None:
    reply = fetch(f"{files}/missing")
    assert reply.status == 404 and not reply.ok and reply.body
    with pytest.raises(HTTPStatusError) as info:
        reply.expect_ok()
    assert info.value.status == 404 and isinstance(info.value, OSError)
    assert str(info.value) == f"{files}/missing answered HTTP 404"


def test_a_body_that_is_not_bytes_goes_out_as_json() -> None:
    got: list[bytes] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def answer_once() -> None:
            conn, _ = listener.accept()
            with conn:
                while b'"a": 1}' not in b"".join(got):
                    got.append(conn.recv(65536))
                conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")

        thread = threading.Thread(target=answer_once, daemon=True)
        thread.start()
        reply = fetch(
            f"http://127.0.0.1:{listener.getsockname()[1]}/x", method="PUT", body={"a": 1}
        )
        thread.join(5)
    request = b"".join(got).decode().lower()
    assert request.startswith("put /x http/1.1")
    assert "content-type: application/json" in request and request.endswith('{"a": 1}')
    assert (reply.status, reply.body) == (201, b"ok")


def test_nothing_listening_raises_and_http_ok_says_false(files: str) -> None:
    with pytest.raises(OSError):
        fetch(f"http://127.0.0.1:{free_port()}/readyz", timeout_s=0.5)
    assert not http_ok(f"http://127.0.0.1:{free_port()}/readyz", timeout_s=0.5)
    assert http_ok(f"{files}/doc.json") and not http_ok(f"{files}/missing")
