"""The names the layers share, each written once: media types, header names,
environment variables, metric names the manifests read, log field names.

Every layer may import this module (the gevent timing core excepted, which stays
usable on its own); no other module writes these values out again.
"""

from __future__ import annotations

from typing import Final

#: RFC 9457 problem details: every error body, the app's, Envoy's, the pools' and
#: the simulator's.
PROBLEM_JSON: Final = "application/problem+json"

#: The request id Envoy sets (or keeps) and the app echoes in its responses.
REQUEST_ID_HEADER: Final = "x-request-id"

#: The pools' loop-lag histogram, read by the io pool's HPA through prometheus-adapter.
LOOP_LAG_SERIES: Final = "pricing_loop_lag_seconds"
