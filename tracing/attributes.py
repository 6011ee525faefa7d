"""Span and resource attribute names of pricingservice's own (never string literals
elsewhere). The standard ones (HTTP, server, URL) come from ``opentelemetry.semconv``.

Durations follow the OpenTelemetry convention: seconds as floats. The ``gevent.*``
names carry a :class:`tracing.timing.call_timing.CallTiming`.
"""

from __future__ import annotations

from typing import Final

#: Time the upstream call spent waiting for the network: from the start of a socket wait
#: (or the request send) until the reply bytes arrived in the kernel (seconds).
NETWORK_DURATION: Final = "gevent.network.duration"

#: Time the calling greenlet was ready to run but waited for the hub: reply bytes sat in
#: the kernel, or a zero-timeout yield waited for its turn (seconds).
SCHEDULING_DELAY: Final = "gevent.scheduling.delay"

#: Who ran while the call waited: a list of ``"<label>=<seconds>"`` strings, largest
#: first. Labels are route names (``"POST /v1/offers/rideshare"``), ``"<hub>"`` or
#: ``"<unknown>"``.
SCHEDULING_CULPRITS: Final = "gevent.scheduling.culprits"

#: Time switched out for other reasons: locks, pool queues, DNS on the thread pool, timers
#: that had not expired yet (seconds). Neither network nor scheduling delay.
BLOCKED_DURATION: Final = "gevent.blocked.duration"

#: Server span: how many upstream calls the request made (its sums cover these).
UPSTREAM_CALLS: Final = "pricing.upstream_calls"

#: Client span: the upstream's name (``vehicles``, ``routing``, ``promotions``).
UPSTREAM: Final = "pricing.upstream"

#: Resource: the pool the worker process serves (``io``, ``cpu``, ``shared``).
POOL: Final = "pricing.pool"
