"""urllib3 under gevent monkey patching, measured: run as a subprocess by
test_urllib3_scenario.py (monkey patching would poison the pytest process).

Usage: python urllib3_scenario.py <upstream port>. Prints one JSON object.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import greenlet  # noqa: E402
import urllib3  # noqa: E402
from gevent._socketcommon import SocketMixin  # noqa: E402

from tests.samples import RIDE_ROUTE  # noqa: E402
from tracing.timing.call_timing import measure_call  # noqa: E402
from tracing.timing.instrumentor import GeventTimingInstrumentor  # noqa: E402
from tracing.timing.labels import set_greenlet_label  # noqa: E402

HOG = RIDE_ROUTE
REPLY_MS = 30


def main(port: int) -> None:
    original_wait = SocketMixin.__dict__["_wait"]
    instrumentor = GeventTimingInstrumentor(loop_lag_interval_s=0.01, hub_block_threshold_s=0.5)
    instrumentor.instrument()
    pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=1)
    stop = False

    def hog() -> None:
        set_greenlet_label(HOG)
        while not stop:
            end = time.perf_counter() + 0.005
            while time.perf_counter() < end:
                pass
            gevent.sleep(0)

    def client() -> list[dict[str, object]]:
        set_greenlet_label("GET /v1/offers/bike")
        calls = []
        for _ in range(4):
            with measure_call() as measurement:
                response = pool.request("GET", f"/{REPLY_MS}")
            landed, sent = map(int, response.data.split())
            timing = measurement.timing
            assert timing is not None
            calls.append(
                {
                    "true_network_s": (sent - landed) / 1e9,
                    "duration_s": timing.duration_s,
                    "network_s": timing.network_s,
                    "scheduling_delay_s": timing.scheduling_delay_s,
                    "blocked_s": timing.blocked_s,
                    "running_s": timing.running_s,
                    "socket_waits": timing.socket_waits,
                    "top_culprit": timing.top_culprits(1)[0][0] if timing.culprits else None,
                }
            )
        return calls

    hogs = [gevent.spawn(hog) for _ in range(2)]
    calls = gevent.spawn(client).get(timeout=20)
    stop = True
    gevent.joinall(hogs)
    instrumentor.uninstrument()
    print(
        json.dumps(
            {
                "calls": calls,
                "restored": SocketMixin.__dict__["_wait"] is original_wait
                and greenlet.gettrace() is None,
            }
        )
    )


if __name__ == "__main__":
    main(int(sys.argv[1]))
