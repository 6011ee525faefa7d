"""Measure the accuracy and the cost of the per-call timing; the figures in
docs/scheduling-delay.md come from here.

    python -m tracing._measure accuracy [--calls 300] [--hogs 2] [--reply-ms 20]
    python -m tracing._measure cost

``accuracy`` runs an upstream in a subprocess that logs, per request, the kernel's
timestamp of the request landing and its own clock just before and after ``sendall`` of
the reply; and a gevent client (monkey-patched, urllib3 keep-alive pool) whose calls run
next to CPU-hog greenlets labelled ``POST /v1/offers/rideshare``, in load phases from idle
to the ``sleep(0)`` worst case. It compares the measured kernel arrival with the upstream's
send window, the network time with the true one (request landed -> reply sent) and the
reply's scheduling delay with the true one (greenlet resume - upstream send). ``cost``
runs microbenchmarks (CPU time, best of several interleaved runs).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HOG_LABEL = "POST /v1/offers/rideshare"
CLIENT_LABEL = "GET /v1/offers/bike"


# -- upstream (a plain-threads process: its timing must not depend on our hub) ----------


def run_upstream(log_path: str) -> None:
    import socket
    import struct
    import threading

    from tracing.timing.kernel_rx import SO_TIMESTAMPNS

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Inherited by accepted sockets: the kernel dates when each request landed.
    listener.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    print(listener.getsockname()[1], flush=True)
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    lock = threading.Lock()

    def serve(conn: socket.socket) -> None:
        buffer = b""
        landed = 0
        while True:
            chunk, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(16))
            if not chunk:
                return
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and not buffer:
                    seconds, nanoseconds = struct.unpack("@ll", payload[:16])
                    landed = seconds * 1_000_000_000 + nanoseconds
            buffer += chunk
            while b"\r\n\r\n" in buffer:
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                # GET /reply/<ms>/<call id> HTTP/1.1
                _, reply_ms, call_id = head.split(b" ", 2)[1].split(b"/")[1:4]
                time.sleep(int(reply_ms) / 1000)
                body = b"ok"
                response = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                before = time.time_ns()
                conn.sendall(response)
                after = time.time_ns()
                with lock:
                    log.write(f"{call_id.decode()} {landed} {before} {after}\n")

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


# -- accuracy ---------------------------------------------------------------------------


def _percentiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return (
        f"min {ordered[0]:.3f}  median {at(0.5):.3f}  p99 {at(0.99):.3f}  "
        f"max {ordered[-1]:.3f}  mean {statistics.fmean(ordered):.3f}"
    )


def run_accuracy(args: argparse.Namespace) -> None:
    from gevent import monkey

    monkey.patch_all()
    import gevent
    import urllib3

    from tracing.timing.call_state import CallState
    from tracing.timing.call_timing import measure_call
    from tracing.timing.instrumentor import GeventTimingInstrumentor
    from tracing.timing.labels import set_greenlet_label

    # Spy on the raw pieces of each call (inside the measured greenlet, so the current
    # call's record is the last one opened by that greenlet).
    raw: dict[int, dict[str, Any]] = {}
    current: dict[Any, dict[str, Any]] = {}
    on_socket_wait = CallState.on_socket_wait
    on_send = CallState.on_send

    def spy_wait(self: CallState, started_ns: int, resumed_ns: int, ready_ns: int | None) -> None:
        record = current.get(gevent.getcurrent())
        if record is not None:
            record["waits"].append((started_ns, resumed_ns, ready_ns, self.realtime_offset_ns))
        on_socket_wait(self, started_ns, resumed_ns, ready_ns)

    def spy_send(self: CallState, started_ns: int, now_ns: int) -> None:
        on_send(self, started_ns, now_ns)
        record = current.get(gevent.getcurrent())
        if record is not None:
            record["sent"] = self.sent_ns + self.realtime_offset_ns

    CallState.on_socket_wait = spy_wait  # type: ignore[method-assign]
    CallState.on_send = spy_send  # type: ignore[method-assign]

    log_fd, log_path = tempfile.mkstemp(suffix=".log")
    os.close(log_fd)
    upstream = subprocess.Popen(
        [sys.executable, "-m", "tracing._measure", "upstream", "--log", log_path],
        stdout=subprocess.PIPE,
        text=True,
    )
    port = int(upstream.stdout.readline())  # type: ignore[union-attr]
    instrumentor = GeventTimingInstrumentor()
    instrumentor.instrument()
    pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=args.concurrency, block=True)
    rng = random.Random(args.seed)
    stop = False

    # Load phases, the next one every --phase-calls calls, so the delay of a call spreads
    # from nearly nothing to seconds: (CPU slice range in ms, pause after a slice in ms;
    # 0 = sleep(0), the worst case because of gevent's CALLBACK_CHECK_COUNT).
    phases = [(0.0, 0.0, 50.0), (0.5, 3.0, 5.0), (1.0, 5.0, 0.0), (1.0, 20.0, 0.0)]

    def hog() -> None:
        set_greenlet_label(HOG_LABEL)
        while not stop:
            low_ms, high_ms, pause_ms = phases[len(raw) // args.phase_calls % len(phases)]
            burn_until = time.perf_counter() + rng.uniform(low_ms, high_ms) / 1e3
            while time.perf_counter() < burn_until:
                pass
            gevent.sleep(pause_ms / 1e3)

    next_id = iter(range(10**9))

    def client() -> None:
        set_greenlet_label(CLIENT_LABEL)
        while len(raw) < args.calls:
            call_id = next(next_id)
            record: dict[str, Any] = {"waits": []}
            current[gevent.getcurrent()] = record
            with measure_call() as measurement:
                pool.request("GET", f"/reply/{args.reply_ms}/{call_id}")
            del current[gevent.getcurrent()]
            record["timing"] = measurement.timing
            raw[call_id] = record
            gevent.sleep(rng.uniform(0, args.pause_ms) / 1e3)

    hogs = [gevent.spawn(hog) for _ in range(args.hogs)]
    clients = [gevent.spawn(client) for _ in range(args.concurrency)]
    gevent.joinall(clients)
    stop = True
    gevent.joinall(hogs)
    instrumentor.uninstrument()
    upstream.kill()
    sent_window = {}
    with open(log_path) as lines:
        for line in lines:
            call_id, landed, before, after = map(int, line.split())
            sent_window[call_id] = (landed, before, after)
    os.unlink(log_path)
    report(args, raw, sent_window)


def report(
    args: argparse.Namespace,
    raw: dict[int, dict[str, Any]],
    sent: dict[int, tuple[int, int, int]],
) -> None:
    in_window = 0
    arrival_us, network_ms, delay_err_ms, truth_delay, residual_ms = [], [], [], [], []
    duration, total_delay, culprit_share = [], [], []
    compared = 0
    landing_us: list[float] = []
    delay_total = [0.0]
    blamed: dict[str, float] = {}
    pre_send_ms: list[float] = []
    odd_blame: list[str] = []
    outliers: list[str] = []
    buckets: dict[float, list[float]] = {1.0: [], 10.0: [], 100.0: [], 1000.0: [], 1e9: []}
    for call_id, record in raw.items():
        timing = record["timing"]
        duration.append(timing.duration_s * 1e3)
        total_delay.append(timing.scheduling_delay_s * 1e3)
        residual_ms.append(timing.running_s * 1e3)
        if timing.scheduling_delay_s > 0.010:
            hog = timing.culprits.get(HOG_LABEL, 0.0)
            culprit_share.append(hog / timing.scheduling_delay_s)
            if hog < 0.5 * timing.scheduling_delay_s and len(odd_blame) < 3:
                blame = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in timing.top_culprits(3))
                odd_blame.append(
                    f"  call {call_id}: delay {timing.scheduling_delay_s * 1e3:.1f} ms in "
                    f"{timing.socket_waits} socket waits; culprits: {blame or 'none named'}"
                )
            delay_total[0] += timing.scheduling_delay_s
            for label, seconds in timing.culprits.items():
                blamed[label] = blamed.get(label, 0.0) + seconds
        waits = record["waits"]
        if call_id not in sent or not waits or "sent" not in record:
            continue
        # The reply's wait: the last read wait (keep-alive calls have exactly one).
        _started, resumed, ready, offset = waits[-1]
        if ready is None:
            continue
        compared += 1
        landed, before, after = sent[call_id]
        if landed:
            landing_us.append((landed - record["sent"]) / 1e3)
        arrival = ready + offset
        in_window += before <= arrival <= after
        arrival_us.append((arrival - before) / 1e3)
        true_reply_delay = (resumed + offset - before) / 1e6
        if len(waits) == 1 and landed:
            true_network = (before - landed) / 1e6
            network_ms.append(timing.network_s * 1e3 - true_network)
            if abs(network_ms[-1]) > 1.0:
                outliers.append(
                    f"  call {call_id}: network_s {timing.network_s * 1e3:.3f} ms, true "
                    f"{true_network:.3f} ms; our send -> request landed "
                    f"{(landed - record['sent']) / 1e6:.3f} ms"
                )
        truth_delay.append(true_reply_delay)
        if len(waits) == 1:
            pre_send_ms.append(timing.scheduling_delay_s * 1e3 - (resumed - ready) / 1e6)
        delay_err_ms.append((resumed - ready) / 1e6 - true_reply_delay)
        for bound in buckets:
            if true_reply_delay < bound:
                buckets[bound].append(delay_err_ms[-1])
                break
    print(
        f"calls {len(raw)}, hogs {args.hogs} (load phases of {args.phase_calls} calls), "
        f"concurrency {args.concurrency}, upstream reply after {args.reply_ms} ms"
    )
    print(f"call duration (ms):              {_percentiles(duration)}")
    print(f"scheduling delay per call (ms):  {_percentiles(total_delay)}")
    print(f"running residual per call (ms):  {_percentiles(residual_ms)}")
    print(f"reply arrival in send window:    {in_window}/{compared}")
    print(f"arrival - upstream send (us):    {_percentiles(arrival_us)}")
    print(f"request landed - our send (us):  {_percentiles(landing_us)}")
    print(f"network_s - true network (ms):   {_percentiles(network_ms)}  (n={len(network_ms)})")
    print(f"true reply delay (ms):           {_percentiles(truth_delay)}")
    print(f"delay before the send (ms):      {_percentiles(pre_send_ms)}")
    print(f"reply delay error (ms):          {_percentiles(delay_err_ms)}")
    low = 0.0
    for bound, errors in buckets.items():
        if errors:
            print(
                f"  true delay {low:g}-{bound:g} ms: n={len(errors)}, error max "
                f"{max(abs(e) for e in errors):.3f} ms"
            )
        low = bound
    if outliers:
        print("network outliers (> 1 ms):")
        print("\n".join(outliers))
    if culprit_share:
        print(
            f"calls with delay > 10 ms: {len(culprit_share)}; share blamed on the hogs per call "
            f"(%): {_percentiles([s * 100 for s in culprit_share])}"
        )
        shares = ", ".join(
            f"{label} {seconds / delay_total[0] * 100:.2f} %"
            for label, seconds in sorted(blamed.items(), key=lambda item: -item[1])
        )
        print(f"  all their delay: {shares}")
    if odd_blame:
        print("calls with delay > 10 ms where the hogs got less than half (first 3):")
        print("\n".join(odd_blame))


# -- cost -------------------------------------------------------------------------------


def _interleaved_best(configs: dict[str, Any], repeat: int) -> dict[str, float]:
    """Run each config *repeat* times, round-robin, and keep each one's best result: the
    machine is shared, and the best run is the one least disturbed by others."""
    best = {name: float("inf") for name in configs}
    for _ in range(repeat):
        for name, run in configs.items():
            best[name] = min(best[name], run())
    return best


def run_cost(args: argparse.Namespace) -> None:
    import socket

    import gevent
    import greenlet
    from gevent import socket as gsocket

    from tracing.timing import call_state, kernel_rx, socket_hooks
    from tracing.timing.call_timing import begin_call
    from tracing.timing.instrumentor import GeventTimingInstrumentor
    from tracing.timing.labels import set_greenlet_label
    from tracing.timing.switch_tracer import SwitchTracer
    from tracing.timing.switchlog import SwitchLog

    rounds = args.rounds
    clock = time.thread_time  # CPU time of this thread: other processes' load drops out
    print(f"CPU time per operation, best of {args.repeat} interleaved runs (us)")

    # 1. Raw greenlet switches: bare, traced, traced while a measurement is in progress.
    def switch_us() -> float:
        def ping() -> None:
            for _ in range(rounds):
                pong_g.switch()

        def pong() -> None:
            while True:
                ping_g.switch()

        ping_g, pong_g = greenlet.greenlet(ping), greenlet.greenlet(pong)
        start = clock()
        ping_g.switch()
        return (clock() - start) / (2 * rounds) * 1e6

    tracer = SwitchTracer(SwitchLog())

    def traced(measuring: bool) -> Any:
        def run() -> float:
            tracer.install()
            call_state.measuring[0] += measuring
            try:
                return switch_us()
            finally:
                call_state.measuring[0] -= measuring
                tracer.uninstall()

        return run

    switch = _interleaved_best(
        {"bare": switch_us, "traced": traced(False), "busy": traced(True)}, args.repeat
    )
    print(
        f"greenlet switch: {switch['bare']:.3f} bare; switch tracer adds "
        f"{switch['traced'] - switch['bare']:.3f}, or {switch['busy'] - switch['bare']:.3f} "
        "while a measurement is in progress somewhere"
    )

    # 2. Socket waits through the hub: ping-pong over a socketpair, every recv waits.
    def pingpong_us(measure: bool) -> float:
        a, b = gsocket.socketpair()
        exchanges = rounds // 10

        def side(sock: Any, first: bool) -> None:
            measurement = begin_call() if measure else None
            if first:
                sock.sendall(b"x")
            for _ in range(exchanges):
                sock.recv(1)
                sock.sendall(b"x")
            if measurement is not None:
                measurement.finish()

        start = clock()
        gevent.joinall([gevent.spawn(side, a, True), gevent.spawn(side, b, False)])
        elapsed = clock() - start
        a.close()
        b.close()
        return elapsed / (2 * exchanges) * 1e6  # per exchange = send + read wait

    instrumentor = GeventTimingInstrumentor(loop_lag_interval_s=None, hub_block_threshold_s=None)

    def instrumented(measure: bool, elsewhere: bool = False) -> Any:
        def run() -> float:
            instrumentor.instrument()
            call_state.measuring[0] += elsewhere
            try:
                return pingpong_us(measure)
            finally:
                call_state.measuring[0] -= elsewhere
                instrumentor.uninstrument()

        return run

    def hooks_only() -> float:
        socket_hooks.install()
        try:
            return pingpong_us(False)
        finally:
            socket_hooks.uninstall()

    pingpong = _interleaved_best(
        {
            "plain": lambda: pingpong_us(False),
            "hooks": hooks_only,
            "idle": instrumented(False),
            "elsewhere": instrumented(False, elsewhere=True),
            "measured": instrumented(True),
        },
        args.repeat,
    )
    plain = pingpong["plain"]
    print(
        f"send + read wait via the hub (2 greenlet switches): {plain:.2f} uninstrumented; "
        f"socket hooks alone add {pingpong['hooks'] - plain:.2f}; all instrumentation adds "
        f"{pingpong['idle'] - plain:.2f} with no measurement in progress, "
        f"{pingpong['elsewhere'] - plain:.2f} with one in progress elsewhere, "
        f"{pingpong['measured'] - plain:.2f} when measured"
    )

    # 3. Pieces.
    a, b = socket.socketpair()
    kernel_rx.enable_rx_timestamps(b)
    a.send(b"x")

    def per_call(fn: Any) -> Any:
        def run() -> float:
            start = clock()
            for _ in range(rounds):
                fn()
            return (clock() - start) / rounds * 1e6

        return run

    log = SwitchLog()
    for i in range(8192):
        log.append((i * 10_000, HOG_LABEL if i % 2 else None))  # a switch every 10 us
    end_ns = 8191 * 10_000
    into: dict[str, int] = {}

    def begin_finish() -> None:
        begin_call().finish()

    pieces = _interleaved_best(
        {
            "peek": per_call(lambda: kernel_rx.peek_arrival_ns(b)),
            "begin": per_call(begin_finish),
            "walk": per_call(lambda: log.attribute(end_ns - 1_000_000, end_ns, into)),
            "label": per_call(lambda: set_greenlet_label(HOG_LABEL)),
        },
        args.repeat,
    )
    print(
        f"peek of a receive timestamp {pieces['peek']:.2f}; begin_call() + finish() "
        f"{pieces['begin']:.2f}; naming the culprits of a 1 ms delay with 100 switches in "
        f"it {pieces['walk']:.2f}; set_greenlet_label() {pieces['label']:.2f}"
    )
    a.close()
    b.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tracing._measure", description=__doc__)
    sub = parser.add_subparsers(dest="mode", required=True)
    accuracy = sub.add_parser("accuracy")
    accuracy.add_argument("--calls", type=int, default=300)
    accuracy.add_argument("--hogs", type=int, default=2)
    accuracy.add_argument("--phase-calls", type=int, default=25)
    accuracy.add_argument("--reply-ms", type=int, default=20)
    accuracy.add_argument("--concurrency", type=int, default=4)
    accuracy.add_argument("--pause-ms", type=float, default=10.0)
    accuracy.add_argument("--seed", type=int, default=1)
    cost = sub.add_parser("cost")
    cost.add_argument("--rounds", type=int, default=50_000)
    cost.add_argument("--repeat", type=int, default=15)
    upstream = sub.add_parser("upstream")
    upstream.add_argument("--log", required=True)
    args = parser.parse_args(argv)
    if args.mode == "accuracy":
        run_accuracy(args)
    elif args.mode == "cost":
        run_cost(args)
    else:
        run_upstream(args.log)


if __name__ == "__main__":
    main()
