"""The per-route families routes suggest reads: one request's critical path, its
network time and who delayed it, observed as tracing.usage expects them."""

from __future__ import annotations

from types import MappingProxyType

from prometheus_client import CollectorRegistry

from tracing.metrics import PoolMetrics
from tracing.timing.call_state import CallTiming
from tracing.timing.server_timing import RequestTiming

RIDE, BIKE = "POST /v1/offers/rideshare", "GET /v1/offers/bike"


def offer_delayed_by_quotes() -> RequestTiming:
    call = CallTiming(
        duration_s=0.140,
        network_s=0.100,
        scheduling_delay_s=0.030,
        blocked_s=0.0,
        culprits=MappingProxyType({RIDE: 0.025, "<hub>": 0.005}),
    )
    return RequestTiming(
        arrival_unix_ns=1,
        start_unix_ns=2,
        end_unix_ns=3,
        inbound_delay_s=0.020,
        inbound_cpu_wait_s=0.0,
        inbound_culprits=MappingProxyType({RIDE: 0.020}),
        duration_s=0.150,
        running_s=0.002,
        waiting_s=0.148,
        critical=call,
        critical_upstream="vehicles",
        presend_delay_s=0.001,
        wake_delay_s=0.002,
    )


def test_one_offer_delayed_by_quotes() -> None:
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry)
    timing = offer_delayed_by_quotes()
    metrics.observe_timing(BIKE, timing)
    labels = {"route": BIKE}
    assert registry.get_sample_value("pricing_route_hub_wait_seconds_count", labels) == 1
    # inbound 20 + presend 1 + the critical call's 30 + wake 2 ms
    hub_wait = registry.get_sample_value("pricing_route_hub_wait_seconds_sum", labels)
    assert abs(hub_wait - 0.053) < 1e-9 and abs(timing.hub_wait_s - 0.053) < 1e-9  # type: ignore[operator]
    # The counters are plain totals until synced (once a second, off the request path).
    assert metrics.route_network_s == {BIKE: 0.100}
    assert metrics.culprit_s == {(RIDE, BIKE): 0.045, ("<hub>", BIKE): 0.005}
    seen: dict[object, float] = {}
    metrics.sync(metrics.route_culprit, (RIDE, BIKE), metrics.culprit_s[(RIDE, BIKE)], seen)
    culprit = {"route": RIDE, "victim": BIKE}
    assert registry.get_sample_value("pricing_route_culprit_seconds_total", culprit) == 0.045
