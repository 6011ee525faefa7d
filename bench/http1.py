"""Just enough HTTP/1.1 for the load generator: build requests, frame responses.

The load generator shares a 2-core machine with what it measures, so it does not
use http.client (header parsing through the email package costs more CPU per
request than everything else the generator does). Requests are prebuilt bytes;
a response is framed by Content-Length or chunked encoding, and only the status
code and whether the connection stays open are kept. Bodies are discarded.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEAD_BYTES = 64 * 1024


class ProtocolError(Exception):
    """The server sent something that is not an HTTP/1.1 response we can frame."""


def build_request(
    method: str,
    target: str,
    host: str,
    *,
    body: bytes = b"",
    content_type: str | None = None,
    extra_headers: tuple[tuple[str, str], ...] = (),
) -> bytes:
    """One request as bytes, ready to send on a keep-alive connection."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    lines.extend(f"{k}: {v}" for k, v in extra_headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass(slots=True)
class ResponseReader:
    """Feed it bytes as they arrive; `done` once one whole response has been read.

    Mutable on purpose: one reader per response, fed from the receive loop.
    """

    status: int = 0
    keep_alive: bool = True
    done: bool = False
    _buf: bytes = b""
    _head_done: bool = False
    _remaining: int = -1  # body bytes still to come (Content-Length framing)
    _chunked: bool = False
    _until_close: bool = False

    def feed(self, data: bytes) -> None:
        if self.done:
            raise ProtocolError("bytes after the end of the response")
        self._buf += data
        while not self._head_done:  # more than once only after an interim (1xx) head
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD_BYTES:
                    raise ProtocolError("response head larger than 64 KiB")
                return
            self._parse_head(self._buf[:end])
            self._buf = self._buf[end + 4 :]
        if self.done:
            return
        if self._chunked:
            self._feed_chunked()
        elif self._until_close:
            self._buf = b""
        else:
            self._remaining -= len(self._buf)
            self._buf = b""
            if self._remaining <= 0:
                if self._remaining < 0:
                    raise ProtocolError("more body bytes than Content-Length")
                self.done = True

    def eof(self) -> None:
        """The server closed the connection."""
        if self._head_done and self._until_close:
            self.done = True
            self.keep_alive = False
            return
        raise ProtocolError("connection closed before the response was complete")

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"bad status line {lines[0][:80]!r}")
        status = int(parts[1])
        if 100 <= status < 200:
            # Interim response (we never send Expect, but be safe): skip it.
            return
        self.status = status
        self._head_done = True
        if parts[0] == b"HTTP/1.0":
            self.keep_alive = False
        length = -1
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                value = value.strip()
                if not value.isdigit():
                    raise ProtocolError("bad Content-Length")
                length = int(value)
            elif name == b"transfer-encoding":
                self._chunked = b"chunked" in value.lower()
            elif name == b"connection":
                value = value.lower()
                if b"close" in value:
                    self.keep_alive = False
                elif b"keep-alive" in value:
                    self.keep_alive = True
        if status in (204, 304):
            self.done = True
        elif self._chunked:
            self._remaining = 0
        elif length >= 0:
            self._remaining = length
            if length == 0:
                self.done = True
        else:
            self._until_close = True
            self.keep_alive = False

    def _feed_chunked(self) -> None:
        buf = self._buf
        while True:
            if self._remaining > 0:  # inside a chunk's data (plus its CRLF)
                take = min(self._remaining, len(buf))
                buf = buf[take:]
                self._remaining -= take
                if self._remaining > 0:
                    break
                continue
            end = buf.find(b"\r\n")
            if end < 0:
                break
            size_text = buf[:end].split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size {size_text[:20]!r}") from None
            if size == 0:
                # Last chunk: no trailers expected; wait for the final CRLF.
                if buf[end + 2 : end + 4] == b"\r\n":
                    self.done = True
                    buf = buf[end + 4 :]
                break
            buf = buf[end + 2 :]
            self._remaining = size + 2  # data + CRLF
        self._buf = buf
        if self.done and self._buf:
            raise ProtocolError("bytes after the end of the response")
