"""A TCP upstream for the tracing tests, run as a subprocess (plain threads, no gevent).

Prints its port, then per line ``<delay_ms>\\n`` received: sleeps that long and replies
``<request landed ns> <reply sent ns>\\n``: the kernel's receive timestamp of the request
and CLOCK_REALTIME just before the send. Their difference is the true network time of the
exchange, whatever happened to the client process meanwhile.

It also speaks just enough HTTP/1.1 for urllib3: ``GET /<delay_ms> HTTP/1.1`` gets a
keep-alive ``200`` whose body is the same line.

With ``<cert.pem> <key.pem>`` as arguments it speaks TLS; the request's landing time is
then taken when its first bytes were decrypted (a TLS socket gives no kernel stamp).
"""

from __future__ import annotations

import socket
import ssl
import struct
import sys
import threading
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def serve(conn: socket.socket) -> None:
    buffer = b""
    landed = 0
    with conn:
        while True:
            if isinstance(conn, ssl.SSLSocket):
                data, ancillary = conn.recv(4096), []
            else:
                data, ancillary, _, _ = conn.recvmsg(4096, socket.CMSG_SPACE(16))
            if not data:
                return
            if not buffer:
                landed = time.time_ns()  # only if the kernel gave no stamp (it should)
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and not buffer:
                    seconds, nanoseconds = struct.unpack("@ll", payload[:16])
                    landed = seconds * 1_000_000_000 + nanoseconds
            buffer += data
            while True:
                if buffer.startswith(b"GET "):
                    if b"\r\n\r\n" not in buffer:
                        break
                    head, buffer = buffer.split(b"\r\n\r\n", 1)
                    delay_ms = int(head.split(b" ", 2)[1].strip(b"/"))
                    http = True
                elif b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    delay_ms = int(line)
                    http = False
                else:
                    break
                time.sleep(delay_ms / 1000)
                body = b"%d %d\n" % (landed, time.time_ns())
                if http:
                    body = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                conn.sendall(body)


def main() -> None:
    listener = socket.socket()
    # On the listener, so that accepted sockets stamp the very first request too.
    listener.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    tls = None
    if len(sys.argv) == 3:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(sys.argv[1], sys.argv[2])
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            conn = tls.wrap_socket(conn, server_side=True)
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
