"""`pricingctl bench timing-accuracy`: how close the per-call split (network time vs
scheduling delay) comes to ground truth; the accuracy figures in
docs/scheduling-delay.md come from here.

An upstream in a subprocess (plain threads: its timing must not depend on our hub)
logs, per request, the kernel's timestamp of the request landing and its own clock
just before and after ``sendall`` of the reply. A gevent client (monkey-patched,
urllib3 keep-alive pool: a generic gevent program, whose pooled-connection check is
the ``poll(0)`` yield the switch tracer must date) calls it next to CPU-hog greenlets
labelled ``POST /v1/offers/rideshare``, in load phases from idle to the ``sleep(0)``
worst case. Compared: the measured kernel arrival with the upstream's send window, the
network time with the true one (request landed -> reply sent), the reply's scheduling
delay with the true one (greenlet resume - upstream send), and who got the blame.

The measurement monkey-patches, so it runs in its own process:
``python -m bench.timing_accuracy measure`` (the part starts it), which starts
``python -m bench.timing_accuracy upstream``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracing.readback.report import percentile

SCHEMA = "pricingservice.bench.timing-accuracy/1"
HOG_LABEL = "POST /v1/offers/rideshare"
CLIENT_LABEL = "GET /v1/offers/bike"


def run_timing_accuracy(
    *,
    calls: int,
    hogs: int,
    phase_calls: int,
    reply_ms: int,
    concurrency: int,
    pause_ms: float,
    seed: int,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Run the measurement in its own process and return its figures."""
    argv = [
        sys.executable,
        "-m",
        "bench.timing_accuracy",
        "measure",
        *("--calls", str(calls), "--hogs", str(hogs), "--phase-calls", str(phase_calls)),
        *("--reply-ms", str(reply_ms), "--concurrency", str(concurrency)),
        *("--pause-ms", str(pause_ms), "--seed", str(seed)),
    ]
    from bench.run import BenchError

    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise BenchError(f"the timing-accuracy run took more than {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise BenchError(f"the timing-accuracy run failed:\n{done.stderr[-3000:]}")
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def write_timing_accuracy(doc: dict[str, Any], out: Path) -> str:
    """timing_accuracy.json; returns the summary to print."""
    from bench.report import write_json

    write_json(out / "timing_accuracy.json", doc)
    return f"{render(doc)}\nwrote {out / 'timing_accuracy.json'}"


def _stats(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "n": len(values),
        "min": min(values),
        "median": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values),
        "mean": statistics.fmean(values),
    }


def _fmt(stats: dict[str, float] | None) -> str:
    if stats is None:
        return "n/a"
    return (
        f"min {stats['min']:.3f}  median {stats['median']:.3f}  p99 {stats['p99']:.3f}  "
        f"max {stats['max']:.3f}  mean {stats['mean']:.3f}"
    )


def render(doc: dict[str, Any]) -> str:
    s = doc["settings"]
    window = doc["reply_arrival_in_send_window"]
    network = doc["network_minus_true_network_ms"]
    lines = [
        f"calls {doc['calls']}, hogs {s['hogs']} (load phases of {s['phase_calls']} calls), "
        f"concurrency {s['concurrency']}, upstream reply after {s['reply_ms']} ms",
        f"call duration (ms):              {_fmt(doc['call_duration_ms'])}",
        f"scheduling delay per call (ms):  {_fmt(doc['scheduling_delay_per_call_ms'])}",
        f"running residual per call (ms):  {_fmt(doc['running_residual_per_call_ms'])}",
        f"reply arrival in send window:    {window['in']}/{window['of']}",
        f"arrival - upstream send (us):    {_fmt(doc['arrival_minus_upstream_send_us'])}",
        f"request landed - our send (us):  {_fmt(doc['request_landed_minus_our_send_us'])}",
        f"network_s - true network (ms):   {_fmt(network)}  (n={network['n'] if network else 0})",
        f"true reply delay (ms):           {_fmt(doc['true_reply_delay_ms'])}",
        f"delay before the send (ms):      {_fmt(doc['delay_before_the_send_ms'])}",
        f"reply delay error (ms):          {_fmt(doc['reply_delay_error_ms'])}",
    ]
    for b in doc["reply_delay_error_by_true_delay"]:
        lines.append(
            f"  true delay {b['from_ms']:g}-{b['to_ms']:g} ms: n={b['n']}, error max "
            f"{b['max_abs_error_ms']:.3f} ms"
        )
    if doc["network_outliers_over_1ms"]:
        lines += ["network outliers (> 1 ms):", *doc["network_outliers_over_1ms"]]
    if doc["calls_with_delay_over_10ms"]:
        lines.append(
            f"calls with delay > 10 ms: {doc['calls_with_delay_over_10ms']}; share blamed on "
            f"the hogs per call (%): {_fmt(doc['hog_share_of_delay_per_call_pct'])}"
        )
        shares = ", ".join(f"{k} {v:.2f} %" for k, v in doc["share_of_all_delay_pct"].items())
        lines.append(f"  all their delay: {shares}")
    if doc["calls_where_hogs_got_less_than_half"]:
        lines += [
            "calls with delay > 10 ms where the hogs got less than half (first 3):",
            *doc["calls_where_hogs_got_less_than_half"],
        ]
    return "\n".join(lines)


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


# -- the measurement (its own process, monkey-patched) ----------------------------------


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    """Runs in its own monkey-patched process (see `main`); returns the figures."""
    from gevent import monkey

    monkey.patch_all()
    import gevent
    import urllib3

    from tracing.timing import native
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
    compiled = native.active()
    if compiled is not None:
        # The compiled hooks account waits and sends without those methods: they tell
        # an observer instead, with the same pieces.
        def observer(kind: str, call: CallState, a: int, b: int, ready: int | None) -> None:
            record = current.get(gevent.getcurrent())
            if record is None:
                return
            if kind == "wait":
                record["waits"].append((a, b, ready, call.realtime_offset_ns))
            else:
                record["sent"] = call.sent_ns + call.realtime_offset_ns

        compiled.set_observer(observer)

    log_fd, log_path = tempfile.mkstemp(suffix=".log")
    os.close(log_fd)
    upstream = subprocess.Popen(
        [sys.executable, "-m", "bench.timing_accuracy", "upstream", "--log", log_path],
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
    return summarize(args, raw, sent_window)


def summarize(
    args: argparse.Namespace,
    raw: dict[int, dict[str, Any]],
    sent: dict[int, tuple[int, int, int]],
) -> dict[str, Any]:
    """The figures of docs/scheduling-delay.md from the spied calls and the upstream's
    send log (times in ms unless the key says us)."""
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
    by_true_delay = []
    low = 0.0
    for bound, errors in buckets.items():
        if errors:
            by_true_delay.append(
                {
                    "from_ms": low,
                    "to_ms": bound,
                    "n": len(errors),
                    "max_abs_error_ms": round(max(abs(e) for e in errors), 3),
                }
            )
        low = bound
    shares = {
        label: round(seconds / delay_total[0] * 100, 2)
        for label, seconds in sorted(blamed.items(), key=lambda item: -item[1])
    }
    return {
        "schema": SCHEMA,
        "settings": {
            "calls": args.calls,
            "hogs": args.hogs,
            "phase_calls": args.phase_calls,
            "reply_ms": args.reply_ms,
            "concurrency": args.concurrency,
            "pause_ms": args.pause_ms,
            "seed": args.seed,
            "client": "urllib3 HTTPConnectionPool (keep-alive), gevent monkey patching",
        },
        "calls": len(raw),
        "call_duration_ms": _stats(duration),
        "scheduling_delay_per_call_ms": _stats(total_delay),
        "running_residual_per_call_ms": _stats(residual_ms),
        "reply_arrival_in_send_window": {"in": in_window, "of": compared},
        "arrival_minus_upstream_send_us": _stats(arrival_us),
        "request_landed_minus_our_send_us": _stats(landing_us),
        "network_minus_true_network_ms": _stats(network_ms),
        "true_reply_delay_ms": _stats(truth_delay),
        "delay_before_the_send_ms": _stats(pre_send_ms),
        "reply_delay_error_ms": _stats(delay_err_ms),
        "reply_delay_error_by_true_delay": by_true_delay,
        "network_outliers_over_1ms": outliers,
        "calls_with_delay_over_10ms": len(culprit_share),
        "hog_share_of_delay_per_call_pct": _stats([s * 100 for s in culprit_share]),
        "share_of_all_delay_pct": shares,
        "calls_where_hogs_got_less_than_half": odd_blame,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.timing_accuracy")
    sub = parser.add_subparsers(dest="mode", required=True)
    measure = sub.add_parser("measure", help="measure; print the figures as JSON")
    measure.add_argument("--calls", type=int, default=300)
    measure.add_argument("--hogs", type=int, default=2)
    measure.add_argument("--phase-calls", type=int, default=25)
    measure.add_argument("--reply-ms", type=int, default=20)
    measure.add_argument("--concurrency", type=int, default=4)
    measure.add_argument("--pause-ms", type=float, default=10.0)
    measure.add_argument("--seed", type=int, default=1)
    upstream = sub.add_parser("upstream", help="the ground-truth upstream")
    upstream.add_argument("--log", required=True)
    args = parser.parse_args(argv)
    if args.mode == "measure":
        print(json.dumps(_measure(args)))
    else:
        run_upstream(args.log)


if __name__ == "__main__":
    main()
