"""What tracing costs an offer warm, in one process: the io app behind Flask's test client,
its upstream calls real (HTTP to a simulator on loopback), eight greenlets at once, all
requests unsampled (Envoy's traceparent, flag 00). From the tree, with a simulator whose
upstreams answer in 2 ms:

    .venv/bin/python -m simulator --bind 127.0.0.1:8299 \\
        --config docs/benchmarks/parts/issue-20/session14/simulator-2ms.toml &
    export PRICING_UPSTREAM_URL=http://127.0.0.1:8299
    .venv/bin/python docs/benchmarks/parts/issue-20/session14/inprocess.py offer off|full
    .venv/bin/python docs/benchmarks/parts/issue-20/session14/inprocess.py hooks spans|full
    .venv/bin/python docs/benchmarks/parts/issue-20/session14/inprocess.py call off|full
    .venv/bin/python docs/benchmarks/parts/issue-20/session14/inprocess.py spawn off|full

- ``offer``: CPU per offer (process time), min / 2nd / median of 7 runs of 2000 offers;
- ``hooks``: the server side's two Flask hooks (``_begin``, ``_end``) and the request's
  measurement, called in a loop inside one request context;
- ``call``: the call observer around an upstream call with no I/O (``NullObserver`` off);
- ``spawn``: an offer's fan-out in greenlets: three spawned in a copy of the context (as
  ``pricing.upstream.gateway.spawn_in_context``) with nothing to do, and joined (``hooks``,
  ``call`` and ``spawn`` need no simulator);
- ``instructions``: 400 offers after 200 of warm-up, counted by callgrind, which is
  switched on for those only (instructions do not depend on what else the machine runs:
  the counts of two runs differ by ~0.3 %). Valgrind runs the worker ~50 x slower while
  the upstreams keep their 2 ms, so the culprit threshold and the long-run bound are
  raised 1000 x: delays that only valgrind's slowness makes are not explained. Under
  valgrind, the simulator as above::

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=cg.off \
        .venv/bin/python docs/benchmarks/parts/issue-20/session14/inprocess.py instructions off
    (the same with ``full``; ``callgrind_annotate cg.off`` gives the total and where)

No Envoy, no gunicorn, no inbound socket: what is left is the tracing an offer pays for
once its request is parsed, without the cold caches of a real worker.
"""

import gevent.monkey

gevent.monkey.patch_all()

import contextvars  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, ".")

import gevent  # noqa: E402

import tracing.server  # noqa: E402
from pricing import create_app  # noqa: E402
from routing.load import load_routes  # noqa: E402
from tracing.settings import Mode, TracingSettings  # noqa: E402

BIKE = "/v1/offers/bike?origin=37.7749,-122.4194&destination=37.7849,-122.4094&user_id=u-1"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
UNSAMPLED = {"traceparent": TRACEPARENT}
CONCURRENCY = 8


def setup(mode: str) -> None:
    if mode != "off":
        settings = TracingSettings(
            mode=Mode(mode), otlp_endpoint=None, span_file="/tmp/inprocess-spans.jsonl"
        )
        tracing.server.setup_worker("io", settings, tracing.server.Sampling(ratio=0.01))


def offer_batches(mode: str) -> Callable[[int], None]:
    """Serves *n* offers, CONCURRENCY at a time, on an io app set up for *mode*."""
    setup(mode)
    app = create_app("io", config=load_routes())
    logging.disable(logging.CRITICAL)

    def worker(n: int) -> None:
        client = app.test_client()
        for _ in range(n):
            assert client.get(BIKE, headers=UNSAMPLED).status_code == 200

    def batch(n: int) -> None:
        gevent.joinall(
            [gevent.spawn(worker, n // CONCURRENCY) for _ in range(CONCURRENCY)],
            raise_error=True,
        )

    return batch


def offers(mode: str) -> None:
    batch = offer_batches(mode)

    def run(n: int) -> float:
        started = time.process_time()
        batch(n)
        return (time.process_time() - started) / n * 1e6

    run(1000)
    r = sorted(run(2000) for _ in range(7))
    print(mode, f"{r[0]:.1f} {r[1]:.1f} {r[3]:.1f} us an offer (min, 2nd, median)")


def instructions(mode: str, n: int = 400, slower: int = 1000) -> None:
    from tracing.timing import call_state, route_cpu

    reference_init = route_cpu.RouteCpu.__init__

    def slower_runs(
        self: route_cpu.RouteCpu,
        runqueue: Any = None,
        long_ns: int = route_cpu.LONG_RUN_NS,
        block_ns: int = route_cpu.NO_BLOCKS_NS,
    ) -> None:
        reference_init(self, runqueue, long_ns * slower, max(block_ns, long_ns * slower))

    route_cpu.RouteCpu.__init__ = slower_runs  # type: ignore[method-assign]
    batch = offer_batches(mode)
    call_state._culprit_threshold_ns *= slower
    batch(200)
    switch = ["callgrind_control", "-i", "on", str(os.getpid())]
    subprocess.run(switch, capture_output=True, check=False)
    batch(n)
    switch[2] = "off"
    subprocess.run(switch, capture_output=True, check=False)
    print(mode, f"{n} offers counted")


def best_us(fn: object, n: int = 20000) -> float:
    def loop() -> float:
        started = time.perf_counter()
        for _ in range(n):
            fn()  # type: ignore[operator]
        return (time.perf_counter() - started) / n * 1e6

    loop()
    return min(loop() for _ in range(5))


def hooks(mode: str) -> None:
    from tests.unit.pricing.conftest import FakeGateway
    from tracing.timing import server_timing

    setup(mode)
    app = create_app("io", config=load_routes(), gateway=FakeGateway())
    logging.disable(logging.CRITICAL)
    begin = next(f for f in app.before_request_funcs[None] if f.__name__ == "_begin")
    end = next(f for f in app.teardown_request_funcs[None] if f.__name__ == "_end")
    begin_request, _ = server_timing.bound_requests()
    with app.test_request_context(BIKE, headers=UNSAMPLED) as ctx:
        ctx.match_request()
        environ = ctx.request.environ

        def both() -> None:
            if mode == "full":
                environ[tracing.server._ENVIRON_MEASUREMENT] = begin_request()
            begin()
            end(None)

        print(mode, f"begin + end of a request: {best_us(both):.2f} us")


def calls(mode: str) -> None:
    from flask import Flask

    from pricing.upstream.httpclient import NullObserver
    from tracing.client import RequestTotals, request_totals

    setup(mode)
    observer = tracing.server.init_app(Flask("x")) if mode != "off" else NullObserver()
    logging.disable(logging.CRITICAL)
    if mode != "off":
        request_totals.set(RequestTotals(TRACEPARENT, 0))

    def one() -> None:
        with observer.call("vehicles", "GET", "127.0.0.1", 9000, "/v1/vehicles?x=1") as o:
            o.status = 200
        if mode != "off":
            totals = request_totals.get()
            assert totals is not None
            totals.records.clear()

    print(mode, f"an upstream call's observer: {best_us(one):.2f} us")


def spawns(mode: str) -> None:
    setup(mode)

    def nothing() -> int:
        return 1

    def fan_out() -> None:
        greenlets = [gevent.spawn(contextvars.copy_context().run, nothing) for _ in range(3)]
        gevent.joinall(greenlets)

    print(mode, f"3 greenlets spawned and joined: {best_us(fan_out, 5000):.2f} us")


def main() -> None:
    what, mode = sys.argv[1], sys.argv[2]
    run = {
        "offer": offers,
        "hooks": hooks,
        "call": calls,
        "spawn": spawns,
        "instructions": instructions,
    }[what]
    gevent.spawn(run, mode).join()


if __name__ == "__main__":
    main()
