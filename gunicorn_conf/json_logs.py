"""gunicorn's logger, writing JSON lines (``tracing.logs.JsonFormatter``): its error
log, its access log (one line per request, with the request's trace id) and, through
the root logger, every log line of the app."""

from __future__ import annotations

import logging
import os
from typing import Any

from gunicorn import glogging

from routing.env import POOL_ENV
from tracing.logs import ENVIRON_KEY, JsonFormatter


class JsonLogger(glogging.Logger):
    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        formatter = JsonFormatter(os.environ.get(POOL_ENV))
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(formatter)
        # The app's loggers (pricing.*, tracing.*) propagate to the root: same stream,
        # same shape as gunicorn's own lines.
        root = logging.getLogger()
        for handler in list(root.handlers):
            if getattr(handler, "_pricing_json", False):
                root.removeHandler(handler)
        handler = logging.StreamHandler()
        handler.setFormatter(formatter)
        handler._pricing_json = True  # type: ignore[attr-defined]
        root.addHandler(handler)
        root.setLevel(logging.INFO)

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        if not self.access_log_enabled:
            return
        status = getattr(resp, "status_code", None)
        method, path = environ.get("REQUEST_METHOD"), environ.get("PATH_INFO")
        self.access_log.info(
            "%s %s %s",
            method,
            path,
            status,
            extra={
                "request_ids": environ.get(ENVIRON_KEY),
                "fields": {
                    "http.request.method": method,
                    "url.path": path,
                    "http.response.status_code": status,
                    "duration_s": request_time.total_seconds(),
                    "request_id": environ.get("HTTP_X_REQUEST_ID"),
                },
            },
        )
