"""HTTP/1.1 responses framed from bytes, without I/O: the project's one response reader.

`pricing.upstream.httpclient` feeds it what its gevent socket receives for an upstream call;
the benchmark's load generator (`bench.loadgen`) feeds it from its epoll loop. A
response is framed by Content-Length, chunked encoding (trailers skipped) or the end
of the connection, by the rules of RFC 9112 section 6.3: a reply to HEAD, a 1xx, 204 or
304 has no body whatever its headers say (interim 1xx responses are skipped); chunked
wins over Content-Length; only a reply with neither is read until the close. Not
http.client: its header parsing goes through the `email` package, the largest CPU cost
per upstream call in the io pool's profiles, and it cannot be fed from a non-blocking
loop.
"""

from __future__ import annotations

from typing import Final

#: Default bound on a response head (bytes).
MAX_HEAD_BYTES: Final = 64 * 1024

# What the parser waits for next.
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _UNTIL_CLOSE, _DONE = range(8)
_NO_BODY_STATUSES: Final = frozenset({204, 304})
_HEX_DIGITS: Final = b"0123456789abcdefABCDEF"


class ProtocolError(Exception):
    """The bytes are not an HTTP/1.1 response we can frame; the message says why."""


class ResponseParser:
    """Feed it bytes as they arrive; ``done`` once one whole response is framed.

    Mutable on purpose: one parser per response. ``status``, ``headers`` (lower-case
    names) and ``keep_alive`` are set once the head is read; ``body`` holds the body
    unless ``keep_body`` is False; ``rest`` holds bytes received after the response's
    end (a server that sends them cannot be trusted with the connection).
    """

    __slots__ = (
        "_buf",
        "_head_request",
        "_keep_body",
        "_max_body",
        "_max_head",
        "_remaining",
        "_state",
        "body",
        "headers",
        "keep_alive",
        "rest",
        "status",
    )

    def __init__(
        self,
        *,
        max_head_bytes: int = MAX_HEAD_BYTES,
        max_body_bytes: int | None = None,
        keep_body: bool = True,
        head_request: bool = False,
    ) -> None:
        self._max_head = max_head_bytes
        self._max_body = max_body_bytes
        self._keep_body = keep_body
        self._head_request = head_request
        self._buf = bytearray()
        self._state = _HEAD
        self._remaining = 0  # body bytes (Content-Length) or chunk bytes still to come
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.body = bytearray()
        self.rest = b""

    @property
    def done(self) -> bool:
        return self._state == _DONE

    def feed(self, data: bytes) -> None:
        if self._state == _DONE:
            self.rest += data
            return
        self._buf += data
        while self._step():
            pass
        if self._state == _DONE and self._buf:
            self.rest += bytes(self._buf)
            self._buf.clear()

    def eof(self) -> None:
        """The server closed the connection."""
        if self._state == _DONE:
            return
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
            self.keep_alive = False
        elif self._state == _HEAD:
            raise ProtocolError("connection closed before the response head")
        else:
            raise ProtocolError("connection closed in the middle of the response body")

    # -- one step of framing: True when it made progress and may make more ------------

    def _step(self) -> bool:
        state, buf = self._state, self._buf
        if state == _HEAD:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > self._max_head:
                    raise ProtocolError("response head too large")
                return False
            head = bytes(buf[:end])
            del buf[: end + 4]
            self._parse_head(head)
            return True
        if state in (_LENGTH, _CHUNK_DATA):
            take = min(self._remaining, len(buf))
            if take == 0:
                return False
            if self._keep_body:
                self.body += buf[:take]
            del buf[:take]
            self._remaining -= take
            if self._remaining == 0:
                self._state = _DONE if state == _LENGTH else _CHUNK_END
            return True
        if state == _CHUNK_END:
            if len(buf) < 2:
                return False
            if buf[:2] != b"\r\n":
                raise ProtocolError("malformed chunk: no CRLF after its data")
            del buf[:2]
            self._state = _CHUNK_SIZE
            return True
        if state in (_CHUNK_SIZE, _TRAILERS):
            end = buf.find(b"\r\n")
            if end < 0:
                if len(buf) > self._max_head:
                    raise ProtocolError("malformed chunk size")
                return False
            line = bytes(buf[:end])
            del buf[: end + 2]
            if state == _TRAILERS:
                if not line:  # the blank line after the (ignored) trailers
                    self._state = _DONE
                return True
            self._start_chunk(line)
            return True
        if state == _UNTIL_CLOSE:
            if not buf:
                return False
            self._add_body(len(buf), "body too large")
            if self._keep_body:
                self.body += buf
            buf.clear()
            return False
        return False

    def _parse_head(self, head: bytes) -> None:
        text = head.decode("latin-1")
        lines = text.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"malformed status line {lines[0][:80]!r}")
        status = int(parts[1])
        if status == 101:
            raise ProtocolError("101 Switching Protocols to a request that asked for no upgrade")
        if 100 <= status < 200:
            return  # interim response (we never send Expect): the real one follows
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ProtocolError(f"malformed header line {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        self.status, self.headers = status, headers
        tokens = {t.strip() for t in headers.get("connection", "").lower().split(",")}
        if parts[0] == "HTTP/1.1":
            self.keep_alive = "close" not in tokens
        else:
            self.keep_alive = "keep-alive" in tokens
        coding = headers.get("transfer-encoding")
        if self._head_request or status in _NO_BODY_STATUSES:
            self._state = _DONE
        elif coding is not None:
            if coding.lower().rsplit(",", 1)[-1].strip() != "chunked":
                # A coding that is not chunked last: the body ends with the connection.
                self._state = _UNTIL_CLOSE
                self.keep_alive = False
                return
            self._state = _CHUNK_SIZE
            if "content-length" in headers:
                # Both: chunked wins, and the connection is not to be trusted again.
                self.keep_alive = False
        elif "content-length" in headers:
            length = _content_length(headers["content-length"])
            if self._max_body is not None and length > self._max_body:
                raise ProtocolError(f"content-length {length} out of bounds")
            self._remaining = length
            self._state = _LENGTH if length else _DONE
        else:
            self._state = _UNTIL_CLOSE
            self.keep_alive = False

    def _start_chunk(self, line: bytes) -> None:
        size_text = line.split(b";", 1)[0].strip()
        if not size_text or size_text.strip(_HEX_DIGITS):
            raise ProtocolError(f"malformed chunk size {line[:20]!r}")
        size = int(size_text, 16)
        if size == 0:
            self._state = _TRAILERS
            return
        self._add_body(size, "chunked body too large")
        self._remaining = size
        self._state = _CHUNK_DATA

    def _add_body(self, size: int, message: str) -> None:
        """Count *size* more body bytes against the bound (even when not kept)."""
        if self._max_body is not None:
            self._max_body -= size
            if self._max_body < 0:
                raise ProtocolError(message)


def _content_length(raw: str) -> int:
    """The value of a Content-Length field; a list of identical values (a proxy that
    merged repeated fields) counts once, differing ones are an error (RFC 9110 8.6)."""
    values = {v.strip() for v in raw.split(",")}
    if len(values) != 1:
        raise ProtocolError("malformed content-length: differing values")
    value = values.pop()
    if not (value.isascii() and value.isdigit()):
        raise ProtocolError("malformed content-length")
    return int(value)
