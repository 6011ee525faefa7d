"""`pricingctl bench log-cost`: what the pool's access line costs per request
(gunicorn_conf.json_logs): written directly (gunicorn's own stream or file handler, the
default), through ``logging`` (what any other handler set-up takes), and turned off
(``PRICING_ACCESS_LOG=off``).

    pricingctl bench log-cost [--n 20000]

Prints microseconds per request line (best of 5 runs), written to a file in a
temporary directory; ``log_cost.json`` in ``--out``.
"""

from __future__ import annotations

import datetime
import logging
import tempfile
import timeit
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def _measure(directory: Path, n: int) -> dict[str, float]:
    from gunicorn.config import Config

    from gunicorn_conf.json_logs import JsonLogger
    from tracing.logs import ENVIRON_KEY, RequestIds

    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/v1/offers/bike",
        "HTTP_X_REQUEST_ID": "0b9d6a3e-5f1c-4a7e-9a51-3c2d1e0f4b6a",
        ENVIRON_KEY: RequestIds(
            "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "GET /v1/offers/bike"
        ),
    }
    resp, took = SimpleNamespace(status_code=200), datetime.timedelta(seconds=0.11)
    cfg = Config()
    cfg.set("accesslog", str(directory / "access.log"))
    cfg.set("errorlog", str(directory / "error.log"))
    logger = JsonLogger(cfg)

    def line() -> None:
        logger.access(resp, None, environ, took)

    def best_us() -> float:
        return min(timeit.repeat(line, number=n, repeat=5)) / n * 1e6

    out = {"access line, direct (default)": best_us()}
    logger.access_log.addFilter(lambda record: True)  # any filter: through logging
    logger.setup(cfg)
    out["access line, through logging"] = best_us()
    cfg.set("accesslog", None)
    logger.setup(cfg)
    out["access line off"] = best_us()
    for log in (logger.access_log, logger.error_log):
        for handler in list(log.handlers):
            handler.close()
            log.removeHandler(handler)
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_pricing_json", False):  # the JsonLogger's, nobody else's
            root.removeHandler(handler)
    return out


SCHEMA = "pricingservice.bench.log-cost/1"


def run_log_cost(n: int) -> dict[str, Any]:
    """Microseconds per access line, each path the best of 5 runs of *n* lines."""
    with tempfile.TemporaryDirectory() as directory:
        costs = _measure(Path(directory), n)
    return {"schema": SCHEMA, "settings": {"lines": n, "runs": 5}, "us": costs}


def write_log_cost(doc: dict[str, Any], out: Path) -> str:
    """log_cost.json; returns the summary to print (a `<label> <value> us` line each)."""
    from bench.report import write_json

    write_json(out / "log_cost.json", doc)
    lines = [f"{name:<32} {us:6.2f} us" for name, us in doc["us"].items()]
    return "\n".join([*lines, f"wrote {out / 'log_cost.json'}"])
