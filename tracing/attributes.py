"""Span attribute names set from a :class:`tracing.call_timing.CallTiming`.

Durations follow the OpenTelemetry convention: seconds as floats.
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

#: On the server span: ``True`` when the request's upstream calls together waited at
#: least :data:`SLOW_SCHEDULING_DELAY_S` for the hub, else ``False``. Jaeger's search
#: matches tags as text (it cannot do ``gevent.scheduling.delay>0.05``): searching for
#: ``pricing.slow=true`` finds the requests the hub held up.
SLOW: Final = "pricing.slow"

#: The threshold of :data:`SLOW` (seconds of summed scheduling delay).
SLOW_SCHEDULING_DELAY_S: Final = 0.05
