"""`pricingctl bench instructions`: what tracing adds to an offer, counted in
instructions. Two runs of the same tree differ by ~0.3 % in instructions, against
several % in CPU time on a shared machine, so this is the figure that resolves a change
of a few microseconds an offer (what `tracing-overhead` at 80 % of capacity cannot).

In one process, warm: the io pool's app (``pricing.create_app``) behind Flask's test
client, its upstream calls real (HTTP to a simulator on loopback whose upstreams answer
in 2 ms), eight greenlets at once, every request unsampled (Envoy's traceparent, flag
00; ``--sampled``: every traced request sampled, flag 01, as at 100 % sampling), the
worker's tracing set up as a pool's is (``tracing.server.setup_worker``). Each
run is a child interpreter under ``valgrind --tool=callgrind``, counting only the
measured offers (``callgrind_control -i on|off`` around them, after a warm-up; the span
exporter's thread is flushed before each switch, so a sampled offer's export counts). Valgrind
runs the worker ~50 x slower while the upstreams keep their 2 ms, so the culprit
threshold, the long-run bound and the delay that draws wait spans (``tracing.wait_spans``)
are raised 1000 x: delays that only valgrind's slowness makes are neither explained nor
drawn, and the routes' deadlines, the slow-trace threshold (a slow
request is exported whatever its sampling) and the optional upstream's wait cap are
lifted: an offer valgrind slows must still be the same offer, traced the same way. Modes
off and full run side by side (a count does not depend on the CPU a child gets),
``--repeats`` times; the figure is the mean of each repeat's (full - off) per offer.
``instructions.json`` in ``--out``.

No Envoy, no gunicorn, no inbound socket: what is left is the tracing an offer pays for
once its request is parsed, without the cold caches of a real worker. The results file
records the load average: a machine so busy that delays pass even the raised thresholds
would count their explanation too.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolkit.contract import UPSTREAM_URL_ENV, upstream_env

SCHEMA = "pricingservice.bench.instructions/1"
MODES = ("off", "full")
BIKE = "/v1/offers/bike?origin=37.7749,-122.4194&destination=37.7849,-122.4094&user_id=u-1"
UNSAMPLED = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}
SAMPLED = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
CONCURRENCY = 8
UPSTREAM_MS = 2
#: How much slower valgrind makes the worker: the timing core's bounds are raised as much.
SLOWER = 1000
#: Under valgrind: no optional upstream is dropped for its wait, no route times out.
NO_WAIT_CAP = {upstream_env("promotions", "MAX_WAIT_MS"): "0"}
ROUTE_TIMEOUT_MS = 60_000
#: Each counted run: a child interpreter, never a command.
CHILD = "import sys; from bench.instructions import child; child(*sys.argv[1:])"
_TOTAL = re.compile(rb"^totals:\s*(\d+)", re.MULTILINE)


def run_instructions(
    *, offers: int, warmup: int, repeats: int, sampled: bool = False
) -> dict[str, Any]:
    """Per mode and repeat, instructions per counted offer; and what tracing adds.
    *sampled*: the traced mode's requests are all sampled by Envoy."""
    from bench.run import BenchError

    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if valgrind is None or control is None:
        raise BenchError("instructions: valgrind (with callgrind_control) is not installed")
    per_offer: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp, _simulator(Path(tmp)) as upstream_url:
        env = {**os.environ, UPSTREAM_URL_ENV: upstream_url, **NO_WAIT_CAP}
        argv_tail = [str(offers), str(warmup), "sampled" if sampled else ""]
        for repeat in range(repeats):
            for mode, total in _count_both(valgrind, Path(tmp), repeat, env, argv_tail).items():
                per_offer[mode].append(total / offers)
    adds = [full - off for off, full in zip(per_offer["off"], per_offer["full"], strict=True)]
    return {
        "schema": SCHEMA,
        "settings": {"offers": offers, "warmup": warmup, "repeats": repeats, "sampled": sampled},
        "per_offer": {m: [round(v) for v in vs] for m, vs in per_offer.items()},
        "tracing_adds_per_offer": round(statistics.fmean(adds)),
        "tracing_adds_by_repeat": [round(a) for a in adds],
    }


def _count_both(
    valgrind: str, tmp: Path, repeat: int, env: dict[str, str], argv_tail: list[str]
) -> dict[str, int]:
    """Each mode's instructions in one repeat, both children under callgrind at once: a
    count does not depend on the CPU a child gets, and the pair takes the time of one."""
    from bench.run import BenchError

    children: dict[str, tuple[subprocess.Popen[bytes], Path, Path]] = {}
    try:
        for mode in MODES:
            out, err = tmp / f"callgrind.{mode}.{repeat}", tmp / f"stderr.{mode}.{repeat}"
            argv = [valgrind, "--tool=callgrind", "--instr-atstart=no"]
            argv += [f"--callgrind-out-file={out}", sys.executable, "-c", CHILD, mode]
            with err.open("wb") as stderr:
                proc = subprocess.Popen(
                    [*argv, *argv_tail], env=env, stdout=subprocess.DEVNULL, stderr=stderr
                )
            children[mode] = (proc, out, err)
        for mode, (proc, _, err) in children.items():
            if proc.wait() != 0:
                lines = err.read_text(errors="replace").strip().splitlines()
                raise BenchError(
                    f"instructions, {mode}: {(lines or [f'exit {proc.returncode}'])[-1]}"
                )
        return {mode: _total(out) for mode, (_, out, _) in children.items()}
    finally:
        for proc, _, _ in children.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _total(path: Path) -> int:
    """The instructions callgrind counted (its ``totals:`` line; its ``summary:`` line
    stays 0 when counting starts switched off)."""
    match = _TOTAL.search(path.read_bytes())
    if match is None:
        raise ValueError(f"{path}: no totals line")
    return int(match.group(1))


@contextlib.contextmanager
def _simulator(directory: Path) -> Iterator[str]:
    """The simulator, every upstream fixed at UPSTREAM_MS, on a free port: its URL."""
    from simulator.server import HEALTH_PATH
    from stack.launch import PROJECT_ROOT
    from stack.procs import Proc, free_port
    from toolkit.fetch import http_ok

    config = directory / "simulator.toml"
    config.write_text(
        "".join(
            f'[upstreams.{name}]\nlatency = {{ dist = "fixed", ms = {UPSTREAM_MS} }}\n'
            for name in ("vehicles", "routing", "promotions")
        ),
        encoding="utf-8",
    )
    bind = f"127.0.0.1:{free_port()}"
    argv = [sys.executable, "-m", "simulator", "--bind", bind, "--config", str(config)]
    proc = Proc("simulator", argv, directory / "simulator.log", cwd=PROJECT_ROOT).start()
    try:
        proc.wait_ready(lambda: http_ok(f"http://{bind}{HEALTH_PATH}"), 30.0, "serving")
        yield f"http://{bind}"
    finally:
        proc.stop()


# --- in the child interpreter, under valgrind -------------------------------------------


def child(mode: str, offers: str, warmup: str, sampled: str = "") -> None:
    """Serve *warmup* offers, then *offers* counted by callgrind, on an io app whose
    tracing is *mode*; *sampled* ("sampled"): each request sampled by Envoy."""
    from gevent import monkey

    monkey.patch_all()
    import gevent

    gevent.spawn(_count, mode, int(offers), int(warmup), sampled == "sampled").get()


def _count(mode: str, offers: int, warmup: int, sampled: bool) -> None:
    import logging
    from dataclasses import replace

    import gevent

    import tracing.server
    from pricing import create_app
    from routing.load import load_routes
    from tracing.settings import DEFAULT_WAIT_SPANS_MS, Mode, TracingSettings
    from tracing.timing import call_state, route_cpu

    reference_init = route_cpu.RouteCpu.__init__

    def slower_runs(
        self: route_cpu.RouteCpu,
        runqueue: Any = None,
        long_ns: int = route_cpu.LONG_RUN_NS,
        block_ns: int = route_cpu.NO_BLOCKS_NS,
    ) -> None:
        reference_init(self, runqueue, long_ns * SLOWER, max(block_ns, long_ns * SLOWER))

    route_cpu.RouteCpu.__init__ = slower_runs  # type: ignore[method-assign]
    if mode != "off":
        span_file = Path(tempfile.mkdtemp()) / "spans.jsonl"
        settings = TracingSettings(
            mode=Mode(mode),
            otlp_endpoint=None,
            span_file=span_file,
            wait_spans_s=DEFAULT_WAIT_SPANS_MS / 1000 * SLOWER,
        )
        # Lifted like the deadlines: valgrind's pace makes offers "slow", and a slow
        # request is exported whatever its sampling decision.
        sampling = tracing.server.Sampling(ratio=0.01, default_slow_s=ROUTE_TIMEOUT_MS / 1e3)
        tracing.server.setup_worker("io", settings, sampling)
    config = load_routes()
    slow = tuple(replace(r, timeout_ms=ROUTE_TIMEOUT_MS) for r in config.routes)
    app = create_app("io", config=replace(config, routes=slow))
    logging.disable(logging.CRITICAL)
    call_state._culprit_threshold_ns *= SLOWER

    def worker(n: int) -> None:
        client = app.test_client()
        for _ in range(n):
            answer = client.get(BIKE, headers=headers)
            assert answer.status_code == 200, (answer.status_code, answer.get_data()[:300])

    def batch(n: int) -> None:
        each = max(1, n // CONCURRENCY)
        gevent.joinall([gevent.spawn(worker, each) for _ in range(CONCURRENCY)], raise_error=True)

    headers = SAMPLED if sampled and mode != "off" else UNSAMPLED
    worker_tracing = tracing.server.current()

    def flush() -> None:
        if worker_tracing is not None:
            worker_tracing.processor.force_flush(60_000)

    batch(warmup)
    flush()
    switch = ["callgrind_control", "-i", "on", str(os.getpid())]
    subprocess.run(switch, capture_output=True, check=False)
    batch(offers)
    flush()
    switch[2] = "off"
    subprocess.run(switch, capture_output=True, check=False)


def write_instructions(doc: dict[str, Any], out: Path) -> str:
    """instructions.json; returns the summary to print."""
    from bench.report import write_json

    write_json(out / "instructions.json", doc)
    per = doc["per_offer"]
    return "\n".join(
        [
            f"instructions an offer (callgrind, {doc['settings']['offers']} warm offers in "
            f"process, {doc['settings']['repeats']} repeat(s)"
            + (", traced ones all sampled" if doc["settings"].get("sampled") else "")
            + "): off "
            + ", ".join(f"{v / 1e6:.3f} M" for v in per["off"])
            + "; traced "
            + ", ".join(f"{v / 1e6:.3f} M" for v in per["full"]),
            f"tracing adds {doc['tracing_adds_per_offer'] / 1e3:.1f} k instructions an offer "
            "(by repeat: "
            + ", ".join(f"{a / 1e3:.1f} k" for a in doc["tracing_adds_by_repeat"])
            + ")",
            f"wrote {out / 'instructions.json'}",
        ]
    )
