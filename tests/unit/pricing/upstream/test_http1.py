"""Response framing (pricing.upstream.http1), fed in arbitrary pieces: the one reader behind the
io pool's upstream client and the benchmark's load generator."""

from __future__ import annotations

import pytest

from bench.traffic import build_request
from pricing.upstream.http1 import ProtocolError, ResponseParser


def feed_in_pieces(data: bytes, size: int, **kw: object) -> ResponseParser:
    parser = ResponseParser(**kw)  # type: ignore[arg-type]
    for i in range(0, len(data), size):
        assert not parser.done
        parser.feed(data[i : i + size])
    return parser


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_content_length_response(size: int) -> None:
    data = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'
    parser = feed_in_pieces(data, size)
    assert (parser.done, parser.status, parser.keep_alive) == (True, 200, True)
    assert parser.headers["content-type"] == "application/json"
    assert parser.body == b'{"a":1}'


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_chunked_response(size: int) -> None:
    data = (
        b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4\r\nabcd\r\n3;x=y\r\nefg\r\n0\r\n\r\n"
    )
    parser = feed_in_pieces(data, size)
    assert (parser.done, parser.status, parser.body) == (True, 503, b"abcdefg")


def test_chunked_trailers_are_skipped() -> None:
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nT: 1\r\n\r\n"
    parser = feed_in_pieces(data, 1000)
    assert (parser.done, parser.body, parser.rest) == (True, b"x", b"")


def test_body_discarded_when_not_kept() -> None:
    parser = feed_in_pieces(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", 2, keep_body=False)
    assert parser.done and parser.body == b""


def test_connection_close_and_http10_are_not_kept_alive() -> None:
    r = feed_in_pieces(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 100)
    assert r.done and not r.keep_alive
    r = feed_in_pieces(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", 100)
    assert r.done and not r.keep_alive
    r = feed_in_pieces(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", 9)
    assert r.done and r.keep_alive


def test_body_until_close() -> None:
    parser = feed_in_pieces(b"HTTP/1.1 200 OK\r\n\r\npartial", 5)
    assert not parser.done
    parser.eof()
    assert parser.done and not parser.keep_alive and parser.status == 200
    assert parser.body == b"partial"


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",  # the GET's length
        b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    ],
)
def test_no_body_statuses_end_at_their_head_and_keep_alive(head: bytes) -> None:
    """RFC 9112 6.3: 1xx, 204 and 304 never have a body; not read until the close."""
    parser = feed_in_pieces(head, 7)
    assert parser.done and parser.keep_alive and parser.body == b"" and parser.rest == b""


def test_a_reply_to_head_has_no_body() -> None:
    parser = ResponseParser(head_request=True)
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
    assert parser.done and parser.keep_alive and parser.headers["content-length"] == "5"
    parser = ResponseParser(head_request=True)
    parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert parser.done and parser.keep_alive


def test_chunked_wins_over_content_length_and_the_connection_is_not_reused() -> None:
    data = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n"
    parser = feed_in_pieces(data + b"2\r\nab\r\n0\r\n\r\n", 5)
    assert parser.done and parser.body == b"ab" and not parser.keep_alive


def test_a_coding_not_ending_in_chunked_is_read_until_the_close() -> None:
    parser = feed_in_pieces(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzz", 5)
    assert not parser.done
    parser.eof()
    assert parser.body == b"zz" and not parser.keep_alive


def test_repeated_identical_content_lengths_count_once() -> None:
    parser = feed_in_pieces(b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nab", 5)
    assert parser.done and parser.body == b"ab"


def test_interim_response_is_skipped() -> None:
    data = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx"
    parser = feed_in_pieces(data, 1000)
    assert (parser.done, parser.status) == (True, 201)


def test_bytes_after_the_end_are_kept_apart() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxy")
    assert (parser.done, parser.body, parser.rest) == (True, b"x", b"y")
    parser.feed(b"z")
    assert parser.rest == b"yz"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"SPDY/3 200 OK\r\n\r\n", "malformed status line"),
        (b"HTTP/1.1 abc OK\r\n\r\n", "malformed status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "malformed content-length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "malformed content-length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\n", "differing values"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "asked for no upgrade"),
        (b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x1\r\n", "malformed chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxyz", "no CRLF"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000, "response head too large"),
    ],
)
def test_garbage_is_a_protocol_error(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        ResponseParser().feed(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", "content-length 11 out of bounds"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nb\r\n", "chunked body too large"),
        (b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 11, "body too large"),
    ],
)
def test_body_bound(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        ResponseParser(max_body_bytes=10).feed(data)


def test_eof_before_the_end_is_a_protocol_error() -> None:
    parser = ResponseParser()
    with pytest.raises(ProtocolError, match="before the response head"):
        parser.eof()
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    with pytest.raises(ProtocolError, match="in the middle of the response body"):
        parser.eof()


def test_build_request() -> None:
    raw = build_request("POST", "/v1/x", "h:1", body=b"{}", content_type="application/json")
    assert raw == (
        b"POST /v1/x HTTP/1.1\r\nHost: h:1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    )
    assert build_request("GET", "/", "h") == b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
