"""Response framing for the load generator, fed in arbitrary pieces."""

from __future__ import annotations

import pytest

from bench.http1 import ProtocolError, ResponseReader, build_request


def feed_in_pieces(data: bytes, size: int) -> ResponseReader:
    reader = ResponseReader()
    for i in range(0, len(data), size):
        assert not reader.done
        reader.feed(data[i : i + size])
    return reader


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_content_length_response(size: int) -> None:
    data = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'
    reader = feed_in_pieces(data, size)
    assert (reader.done, reader.status, reader.keep_alive) == (True, 200, True)


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_chunked_response(size: int) -> None:
    data = (
        b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4\r\nabcd\r\n3;x=y\r\nefg\r\n0\r\n\r\n"
    )
    reader = feed_in_pieces(data, size)
    assert (reader.done, reader.status) == (True, 503)


def test_connection_close_and_http10_are_not_kept_alive() -> None:
    r = feed_in_pieces(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 100)
    assert r.done and not r.keep_alive
    r = feed_in_pieces(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", 100)
    assert r.done and not r.keep_alive


def test_body_until_close() -> None:
    reader = feed_in_pieces(b"HTTP/1.1 200 OK\r\n\r\npartial", 5)
    assert not reader.done
    reader.eof()
    assert reader.done and not reader.keep_alive and reader.status == 200


def test_no_body_statuses() -> None:
    assert feed_in_pieces(b"HTTP/1.1 204 No Content\r\n\r\n", 100).done


def test_interim_response_is_skipped() -> None:
    data = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx"
    reader = feed_in_pieces(data, 1000)
    assert (reader.done, reader.status) == (True, 201)


@pytest.mark.parametrize(
    "data",
    [
        b"SPDY/3 200 OK\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxy",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_garbage_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        ResponseReader().feed(data)


def test_eof_before_the_end_is_a_protocol_error() -> None:
    reader = ResponseReader()
    reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    with pytest.raises(ProtocolError):
        reader.eof()


def test_build_request() -> None:
    raw = build_request("POST", "/v1/x", "h:1", body=b"{}", content_type="application/json")
    assert raw == (
        b"POST /v1/x HTTP/1.1\r\nHost: h:1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    )
    assert build_request("GET", "/", "h") == b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
