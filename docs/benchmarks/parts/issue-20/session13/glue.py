"""The server side's traced glue per request, warm: a Flask test client on the io app
(``FakeGateway``: no upstream calls), tracing off / spans / full, the best of five runs
of 3000 unsampled offers (Envoy's traceparent, flag 00). From the tree:

    .venv/bin/python docs/benchmarks/parts/issue-20/session13/glue.py off|spans|full [prof]

``prof`` also writes a cProfile of one run to /tmp/glue-prof-MODE.
"""

import gevent.monkey

gevent.monkey.patch_all()

import cProfile  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, ".")

import tracing.server  # noqa: E402
from pricing import create_app  # noqa: E402
from routing.load import load_routes  # noqa: E402
from tests.unit.pricing.conftest import FakeGateway  # noqa: E402
from tracing.settings import Mode, TracingSettings  # noqa: E402

BIKE = "/v1/offers/bike?origin=37.7749,-122.4194&destination=37.7849,-122.4094&user_id=u-1"
UNSAMPLED = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}


def main() -> None:
    mode = sys.argv[1]
    if mode != "off":
        settings = TracingSettings(
            mode=Mode(mode), otlp_endpoint=None, span_file="/tmp/glue-spans.jsonl"
        )
        tracing.server.setup_worker("io", settings, tracing.server.Sampling(ratio=0.01))
    client = create_app("io", config=load_routes(), gateway=FakeGateway()).test_client()
    logging.disable(logging.CRITICAL)

    def run(n: int) -> float:
        started = time.process_time()
        for _ in range(n):
            client.get(BIKE, headers=UNSAMPLED)
        return (time.process_time() - started) / n * 1e6

    def measure() -> None:
        run(2000)
        print(mode, f"{min(run(3000) for _ in range(5)):.1f} us a request")
        if len(sys.argv) > 2:
            profile = cProfile.Profile()
            profile.enable()
            run(3000)
            profile.disable()
            profile.dump_stats(f"/tmp/glue-prof-{mode}")

    gevent.spawn(measure).join()


if __name__ == "__main__":
    main()
