"""What an offer's fan-out costs in greenlets, warm: three greenlets spawned in a copy of
the context (as ``pricing.upstream.gateway.spawn_in_context``) and joined, with nothing
to do, tracing off and at its default. From the tree:

    .venv/bin/python docs/benchmarks/parts/issue-20/session14/spawn.py off|full
"""

import gevent.monkey

gevent.monkey.patch_all()

import contextvars  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, ".")

import gevent  # noqa: E402

import tracing.server  # noqa: E402
from tracing.settings import Mode, TracingSettings  # noqa: E402


def nothing() -> int:
    return 1


def measure(mode: str) -> None:
    def loop(n: int) -> float:
        started = time.process_time()
        for _ in range(n):
            greenlets = [gevent.spawn(contextvars.copy_context().run, nothing) for _ in range(3)]
            gevent.joinall(greenlets)
        return (time.process_time() - started) / n * 1e6

    loop(2000)
    print(mode, f"3 greenlets spawned and joined: {min(loop(5000) for _ in range(5)):.2f} us")


def main() -> None:
    mode = sys.argv[1]
    if mode != "off":
        settings = TracingSettings(
            mode=Mode(mode), otlp_endpoint=None, span_file="/tmp/spawn.jsonl"
        )
        tracing.server.setup_worker("io", settings, tracing.server.Sampling(ratio=0.01))
    gevent.spawn(measure, mode).join()


if __name__ == "__main__":
    main()
