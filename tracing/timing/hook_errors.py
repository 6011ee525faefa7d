"""Swallow errors raised inside tracing hooks, and log them without flooding the log.

A hook runs inside someone else's socket read or greenlet switch; letting its exception
escape would turn a tracing bug into a failed request.
"""

from __future__ import annotations

import logging
import time

logger = logging.getLogger("tracing")

#: Minimum time between two log records for the same hook (seconds).
LOG_INTERVAL_S = 60.0

# where -> (monotonic time of the last record, errors suppressed since)
_last_logged: dict[str, tuple[float, int]] = {}


def swallow(where: str, exc: BaseException) -> None:
    """Record that the hook *where* failed with *exc*; log at most once per interval."""
    try:
        now = time.monotonic()
        last, suppressed = _last_logged.get(where, (None, 0))
        if last is not None and now - last < LOG_INTERVAL_S:
            _last_logged[where] = (last, suppressed + 1)
            return
        _last_logged[where] = (now, 0)
        logger.warning(
            "tracing hook %s failed (%d similar errors suppressed); the call carries on unmeasured",
            where,
            suppressed,
            exc_info=exc,
        )
    except Exception:  # logging itself failed; there is nothing safer to do
        pass


def reset() -> None:
    """Forget what was logged (for tests)."""
    _last_logged.clear()
