"""gunicorn's logger, writing JSON lines (``tracing.logs.JsonFormatter``): its error
log, its access log (one line per request, with the request's trace id) and, through
the root logger, every log line of the app.

The access line is on the path of every request: through ``logging`` it cost ~30 us
(a LogRecord, the caller's frame looked up, handler locks; measured by
``pricingctl bench log-cost``), so when the access log's handlers are gunicorn's own stream or
file handlers the line is formatted and written directly (~10 us). Anything else
configured (syslog, a ``logconfig_dict``, filters) goes through ``logging`` as usual.
``PRICING_ACCESS_LOG=off`` turns the line off (Envoy's access log has one per request
too, with the same trace id).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from gunicorn import glogging

from toolkit import contract
from toolkit.contract import POOL_ENV
from tracing.logs import ENVIRON_KEY, JsonFormatter

_REQUEST_ID_KEY = contract.wsgi_key(contract.REQUEST_ID_HEADER)


class JsonLogger(glogging.Logger):
    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        formatter = self.formatter = JsonFormatter(os.environ.get(POOL_ENV))
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
        self.direct_access = _direct_handlers(self.access_log, formatter)

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        if not self.access_log_enabled:
            return
        status = getattr(resp, "status_code", None)
        method, path = environ.get("REQUEST_METHOD"), environ.get("PATH_INFO")
        ids = environ.get(ENVIRON_KEY)
        # The names and units of Envoy's access line (toolkit.contract).
        fields = {
            contract.LOG_HTTP_METHOD: method,
            contract.LOG_URL_PATH: path,
            contract.LOG_HTTP_STATUS: status,
            contract.LOG_DURATION_MS: round(request_time.total_seconds() * 1000, 3),
            contract.LOG_REQUEST_ID: environ.get(_REQUEST_ID_KEY),
        }
        message = f"{method} {path} {status}"
        handlers = self.direct_access
        if handlers is None or any(h.stream is None for h in handlers):
            self.access_log.info(message, extra={"request_ids": ids, "fields": fields})
            return
        line = self.formatter.line(
            time.time(), "INFO", self.access_log.name, message, os.getpid(), ids, fields
        )
        line += "\n"
        for handler in handlers:
            handler.acquire()  # the stream may be reopened (USR1) meanwhile
            try:
                handler.stream.write(line)
                handler.stream.flush()
            except Exception:  # as logging does: a log line never fails a request
                pass
            finally:
                handler.release()


def _direct_handlers(
    log: logging.Logger, formatter: logging.Formatter
) -> list[logging.StreamHandler[Any]] | None:
    """*log*'s handlers if each one only writes our JSON lines to a stream (gunicorn's
    own handlers for ``-`` and for a file): the access line may then skip ``logging``.
    None when anything else is configured (syslog, a logconfig, filters, levels)."""
    handlers = list(log.handlers)
    if not handlers or log.filters or not log.isEnabledFor(logging.INFO):
        return None
    for handler in handlers:
        if (
            type(handler) not in (logging.StreamHandler, logging.FileHandler)
            or handler.filters
            or handler.level > logging.INFO
            or handler.formatter is not formatter
        ):
            return None
    return handlers  # type: ignore[return-value]
