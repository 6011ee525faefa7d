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
``main(["measure", ...])`` in a child process the part starts (``CHILD``), which starts
``main(["upstream", ...])`` in one more.
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tracing.readback.report import percentile

SCHEMA = "pricingservice.bench.timing-accuracy/1"
HOG_LABEL = "POST /v1/offers/rideshare"
CLIENT_LABEL = "GET /v1/offers/bike"
#: The measurement's and the upstream's processes: children of the part, never commands.
CHILD = "from bench.timing_accuracy import main; main()"


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
        "-c",
        CHILD,
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
    import urllib3

    from tracing.timing.instrumentor import GeventTimingInstrumentor

    # Per call id, the raw pieces the spies saw and the call's own timing.
    raw: dict[int, dict[str, Any]] = {}
    current = _spy_on_calls()
    upstream, port, log_path = _start_upstream()
    instrumentor = GeventTimingInstrumentor()
    instrumentor.instrument()
    pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=args.concurrency, block=True)
    try:
        _drive(args, pool, current, raw)
    finally:
        instrumentor.uninstrument()
        upstream.kill()
    sent_window = {}
    with open(log_path) as lines:
        for line in lines:
            call_id, landed, before, after = map(int, line.split())
            sent_window[call_id] = (landed, before, after)
    os.unlink(log_path)
    return summarize(args, raw, sent_window)


def _spy_on_calls() -> dict[Any, dict[str, Any]]:
    """Spy on the raw pieces of each call (inside the measured greenlet, so the current
    call's record is the last one opened by that greenlet); returns greenlet -> the
    record of the call it is making, which the client fills in."""
    import gevent

    from tracing.timing import native
    from tracing.timing.call_state import CallState

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
    if native.compiled_runs():
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

        native.module.set_observer(observer)
    return current


def _start_upstream() -> tuple[subprocess.Popen[str], int, str]:
    """The ground-truth upstream's process, its port, and the log it writes."""
    log_fd, log_path = tempfile.mkstemp(suffix=".log")
    os.close(log_fd)
    upstream = subprocess.Popen(
        [sys.executable, "-c", CHILD, "upstream", "--log", log_path],
        stdout=subprocess.PIPE,
        text=True,
    )
    port = int(upstream.stdout.readline())  # type: ignore[union-attr]
    return upstream, port, log_path


# Load phases, the next one every --phase-calls calls, so the delay of a call spreads
# from nearly nothing to seconds: (CPU slice range in ms, pause after a slice in ms;
# 0 = sleep(0), the worst case because of gevent's CALLBACK_CHECK_COUNT).
PHASES = ((0.0, 0.0, 50.0), (0.5, 3.0, 5.0), (1.0, 5.0, 0.0), (1.0, 20.0, 0.0))


def _drive(
    args: argparse.Namespace,
    pool: Any,
    current: dict[Any, dict[str, Any]],
    raw: dict[int, dict[str, Any]],
) -> None:
    """The client greenlets' calls, next to the CPU hogs, until *raw* holds --calls."""
    import gevent

    from tracing.timing.call_timing import measure_call
    from tracing.timing.labels import set_greenlet_label

    rng = random.Random(args.seed)
    stop = False

    def hog() -> None:
        set_greenlet_label(HOG_LABEL)
        while not stop:
            low_ms, high_ms, pause_ms = PHASES[len(raw) // args.phase_calls % len(PHASES)]
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


@dataclass(frozen=True)
class CallFigures:
    """What one spied call measured of itself (ms, the delay in s)."""

    duration_ms: float
    delay_s: float
    residual_ms: float
    # Calls delayed over 10 ms: the hogs' share of the delay, who got the blame (s),
    # and a note when the hogs got less than half of it.
    hog_share: float | None = None
    culprits: dict[str, float] = field(default_factory=dict)
    odd_blame: str | None = None


@dataclass(frozen=True)
class ReplyFigures:
    """One call's reply wait against the upstream's send log: the ground truth."""

    arrival_in_window: bool
    arrival_us: float  # the measured kernel arrival minus the upstream's send
    landing_us: float | None  # the request landing minus our send
    network_error_ms: float | None  # calls with one wait: network_s minus the true one
    network_outlier: str | None
    true_delay_ms: float
    pre_send_ms: float | None  # calls with one wait: delay before the send
    delay_error_ms: float


def _call_figures(call_id: int, timing: Any) -> CallFigures:
    figures = CallFigures(
        timing.duration_s * 1e3, timing.scheduling_delay_s, timing.running_s * 1e3
    )
    if timing.scheduling_delay_s <= 0.010:
        return figures
    hog = timing.culprits.get(HOG_LABEL, 0.0)
    odd_blame = None
    if hog < 0.5 * timing.scheduling_delay_s:
        blame = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in timing.top_culprits(3))
        odd_blame = (
            f"  call {call_id}: delay {timing.scheduling_delay_s * 1e3:.1f} ms in "
            f"{timing.socket_waits} socket waits; culprits: {blame or 'none named'}"
        )
    return replace(
        figures,
        hog_share=hog / timing.scheduling_delay_s,
        culprits=dict(timing.culprits),
        odd_blame=odd_blame,
    )


def _reply_figures(
    call_id: int, record: dict[str, Any], sent: dict[int, tuple[int, int, int]]
) -> ReplyFigures | None:
    """None when the call cannot be compared (no send logged, no wait, no ready stamp)."""
    timing, waits = record["timing"], record["waits"]
    if call_id not in sent or not waits or "sent" not in record:
        return None
    # The reply's wait: the last read wait (keep-alive calls have exactly one).
    _started, resumed, ready, offset = waits[-1]
    if ready is None:
        return None
    landed, before, after = sent[call_id]
    arrival = ready + offset
    true_reply_delay = (resumed + offset - before) / 1e6
    network_error = outlier = None
    if len(waits) == 1 and landed:
        true_network = (before - landed) / 1e6
        network_error = timing.network_s * 1e3 - true_network
        if abs(network_error) > 1.0:
            outlier = (
                f"  call {call_id}: network_s {timing.network_s * 1e3:.3f} ms, true "
                f"{true_network:.3f} ms; our send -> request landed "
                f"{(landed - record['sent']) / 1e6:.3f} ms"
            )
    return ReplyFigures(
        arrival_in_window=before <= arrival <= after,
        arrival_us=(arrival - before) / 1e3,
        landing_us=(landed - record["sent"]) / 1e3 if landed else None,
        network_error_ms=network_error,
        network_outlier=outlier,
        true_delay_ms=true_reply_delay,
        pre_send_ms=(
            timing.scheduling_delay_s * 1e3 - (resumed - ready) / 1e6 if len(waits) == 1 else None
        ),
        delay_error_ms=(resumed - ready) / 1e6 - true_reply_delay,
    )


def _error_by_true_delay(replies: Sequence[ReplyFigures]) -> list[dict[str, Any]]:
    """The largest reply-delay error per decade of true delay (1, 10, 100, 1000 ms, more)."""
    buckets: dict[float, list[float]] = {1.0: [], 10.0: [], 100.0: [], 1000.0: [], 1e9: []}
    for reply in replies:
        bound = next(b for b in buckets if reply.true_delay_ms < b)
        buckets[bound].append(reply.delay_error_ms)
    out = []
    low = 0.0
    for bound, errors in buckets.items():
        if errors:
            out.append(
                {
                    "from_ms": low,
                    "to_ms": bound,
                    "n": len(errors),
                    "max_abs_error_ms": round(max(abs(e) for e in errors), 3),
                }
            )
        low = bound
    return out


def _shares_of_all_delay(calls: Sequence[CallFigures]) -> dict[str, float]:
    """Each culprit's share of the delay of all calls delayed over 10 ms (%)."""
    delayed = [c for c in calls if c.hog_share is not None]
    delay_total = sum(c.delay_s for c in delayed)
    blamed: dict[str, float] = {}
    for call in delayed:
        for label, seconds in call.culprits.items():
            blamed[label] = blamed.get(label, 0.0) + seconds
    return {
        label: round(seconds / delay_total * 100, 2)
        for label, seconds in sorted(blamed.items(), key=lambda item: -item[1])
    }


def summarize(
    args: argparse.Namespace,
    raw: dict[int, dict[str, Any]],
    sent: dict[int, tuple[int, int, int]],
) -> dict[str, Any]:
    """The figures of docs/scheduling-delay.md from the spied calls and the upstream's
    send log (times in ms unless the key says us)."""
    calls = [_call_figures(call_id, record["timing"]) for call_id, record in raw.items()]
    replies = [
        reply
        for call_id, record in raw.items()
        if (reply := _reply_figures(call_id, record, sent)) is not None
    ]
    shares = [c.hog_share for c in calls if c.hog_share is not None]

    def some(values: Sequence[float | None]) -> list[float]:
        return [v for v in values if v is not None]

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
        "call_duration_ms": _stats([c.duration_ms for c in calls]),
        "scheduling_delay_per_call_ms": _stats([c.delay_s * 1e3 for c in calls]),
        "running_residual_per_call_ms": _stats([c.residual_ms for c in calls]),
        "reply_arrival_in_send_window": {
            "in": sum(r.arrival_in_window for r in replies),
            "of": len(replies),
        },
        "arrival_minus_upstream_send_us": _stats([r.arrival_us for r in replies]),
        "request_landed_minus_our_send_us": _stats(some([r.landing_us for r in replies])),
        "network_minus_true_network_ms": _stats(some([r.network_error_ms for r in replies])),
        "true_reply_delay_ms": _stats([r.true_delay_ms for r in replies]),
        "delay_before_the_send_ms": _stats(some([r.pre_send_ms for r in replies])),
        "reply_delay_error_ms": _stats([r.delay_error_ms for r in replies]),
        "reply_delay_error_by_true_delay": _error_by_true_delay(replies),
        "network_outliers_over_1ms": [r.network_outlier for r in replies if r.network_outlier],
        "calls_with_delay_over_10ms": len(shares),
        "hog_share_of_delay_per_call_pct": _stats([s * 100 for s in shares]),
        "share_of_all_delay_pct": _shares_of_all_delay(calls),
        "calls_where_hogs_got_less_than_half": [c.odd_blame for c in calls if c.odd_blame][:3],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.timing_accuracy")
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
