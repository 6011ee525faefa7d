"""Per-route usage read back from /metrics text (several workers, two scrapes) and from
spans: the numbers `pricingctl routes suggest` places routes by."""

from __future__ import annotations

from tests.samples import BIKE_ROUTE, RIDE_ROUTE
from tracing import attributes
from tracing import metric_families as families
from tracing.readback.spans import Span
from tracing.readback.usage import (
    bucket_quantile,
    delta,
    parse_text,
    scrape,
    usage_from_metrics,
    usage_from_scrapes,
    usage_from_spans,
)


def exposition(pid: int, rides: int, bikes: int) -> str:
    """What one io worker says after serving `rides` quotes (30 ms CPU each) and `bikes`
    offers (2 ms CPU, 100 ms network, 40 ms waiting for the hub, 30 of it for quotes)."""
    base = f'pool="io",pid="{pid}"'
    return "\n".join(
        [
            f"# TYPE {families.HANDLER} histogram",
            f'{families.HANDLER}_sum{{{base},route="{RIDE_ROUTE}"}} {rides * 0.031}',
            f'{families.HANDLER}_count{{{base},route="{RIDE_ROUTE}"}} {rides}',
            f'{families.HANDLER}_sum{{{base},route="{BIKE_ROUTE}"}} {bikes * 0.142}',
            f'{families.HANDLER}_count{{{base},route="{BIKE_ROUTE}"}} {bikes}',
            f'{families.ROUTE_CPU}{{{base},route="{RIDE_ROUTE}"}} {rides * 0.030}',
            f'{families.ROUTE_CPU}{{{base},route="{BIKE_ROUTE}"}} {bikes * 0.002}',
            f'{families.ROUTE_CPU}{{{base},route="<hub>"}} 9.5',
            f'{families.ROUTE_NETWORK}{{{base},route="{BIKE_ROUTE}"}} {bikes * 0.100}',
            f'{families.ROUTE_HUB_WAIT}_bucket{{{base},route="{BIKE_ROUTE}",le="0.025"}} 0',
            f'{families.ROUTE_HUB_WAIT}_bucket{{{base},route="{BIKE_ROUTE}",le="0.05"}} {bikes}',
            f'{families.ROUTE_HUB_WAIT}_bucket{{{base},route="{BIKE_ROUTE}",le="+Inf"}} {bikes}',
            f'{families.ROUTE_HUB_WAIT}_sum{{{base},route="{BIKE_ROUTE}"}} {bikes * 0.040}',
            f'{families.ROUTE_CULPRIT}{{{base},route="{RIDE_ROUTE}"'
            f',victim="{BIKE_ROUTE}"}} {bikes * 0.03}',
            f'{families.ROUTE_CULPRIT}{{{base},route="{RIDE_ROUTE}"'
            f',victim="{RIDE_ROUTE}"}} {rides * 0.01}',
        ]
    )


def test_two_scrapes_of_two_workers_give_the_pools_deltas() -> None:
    before = {**parse_text(exposition(11, 10, 100)), **parse_text(exposition(12, 0, 0))}
    after = {**parse_text(exposition(11, 40, 300)), **parse_text(exposition(12, 30, 200))}
    by_route = {u.route: u for u in usage_from_metrics(delta(before, after), 10.0)}
    assert set(by_route) == {RIDE_ROUTE, BIKE_ROUTE}  # <hub> is a culprit, never a route
    ride, bike = by_route[RIDE_ROUTE], by_route[BIKE_ROUTE]
    assert ride.requests == 60 and bike.requests == 400
    assert abs(ride.cpu_s / ride.requests - 0.030) < 1e-9
    assert abs(bike.network_s / bike.wall_s - 0.100 / 0.142) < 1e-9
    # Delay caused to others only: the quotes delaying each other does not count.
    assert abs(ride.caused_s - 400 * 0.03) < 1e-9 and ride.victims == {BIKE_ROUTE: ride.caused_s}
    assert bike.hub_wait_p99_s == 0.05


def test_a_worker_one_scrape_missed_counts_as_busy_as_its_siblings() -> None:
    before = {**parse_text(exposition(11, 10, 100)), **parse_text(exposition(12, 0, 0))}
    after = parse_text(exposition(11, 40, 300))  # 12 busy: did not answer
    by_route = {u.route: u for u in usage_from_metrics(delta(before, after), 10.0)}
    assert by_route[RIDE_ROUTE].requests == 2 * 30


def test_scrape_keeps_going_until_no_new_worker_shows_up() -> None:
    answers = iter([exposition(11, 1, 1)] * 3 + [exposition(12, 2, 2)] + [exposition(11, 3, 3)] * 9)
    calls = []

    def fetch(url: str, timeout_s: float) -> str:
        calls.append(url)
        return next(answers)

    samples = scrape("http://pool/metrics", fetch=fetch, settle=6)
    assert set(samples) == {"11", "12"}
    assert len(calls) == 10  # the new worker at try 4, then 6 quiet tries
    assert samples["11"][(families.ROUTE_CPU, (("pool", "io"), ("route", RIDE_ROUTE)))] == 0.09


def test_usage_from_scrapes_waits_the_window_between_them() -> None:
    state = {"rides": 0}

    def fetch(url: str, timeout_s: float) -> str:
        return exposition(11, state["rides"], 0)

    def sleep(seconds: float) -> None:
        assert seconds == 5.0
        state["rides"] = 20

    (ride,) = usage_from_scrapes(["http://pool/metrics"], 5.0, sleep=sleep, fetch=fetch)
    assert ride.requests == 20


def test_bucket_quantile_is_the_upper_bound_of_the_bucket() -> None:
    assert bucket_quantile([(0.01, 98), (0.05, 99), (float("inf"), 100)], 0.99) == 0.05
    assert bucket_quantile([(0.01, 0), (float("inf"), 0)], 0.99) is None


def server(span_id: str, name: str, start_us: int, **attrs: object) -> Span:
    return Span(
        "t" + span_id, span_id, None, "pricingservice", name, "server", start_us, 1000, attrs
    )


def test_spans_give_the_same_shape_scaled_by_the_sampling() -> None:
    bike = server(
        "b1",
        BIKE_ROUTE,
        0,
        **{
            attributes.HANDLER_DURATION: 0.140,
            attributes.HANDLER_RUNNING: 0.002,
            attributes.INBOUND_DELAY: 0.030,
            attributes.INBOUND_CULPRITS: [f"{RIDE_ROUTE}=0.03"],
            attributes.CRITICAL_UPSTREAM: "vehicles",
            attributes.CRITICAL_NETWORK: 0.100,
            attributes.CRITICAL_SCHEDULING_DELAY: 0.010,
        },
    )
    call = Span(
        "tb1",
        "c1",
        "b1",
        "pricingservice",
        "GET /vehicles",
        "client",
        10,
        500,
        {attributes.UPSTREAM: "vehicles", attributes.SCHEDULING_CULPRITS: [f"{RIDE_ROUTE}=0.01"]},
    )
    ride = server(
        "r1",
        RIDE_ROUTE,
        2_000_000,
        **{attributes.HANDLER_DURATION: 0.03, attributes.HANDLER_RUNNING: 0.03},
    )
    slow = server(
        "s1",
        RIDE_ROUTE,
        1_000_000,
        **{attributes.HANDLER_DURATION: 2.0, attributes.TRACE_REASON: "slow"},
    )
    by_route = {u.route: u for u in usage_from_spans([bike, call, ride, slow], 0.5)}
    assert (
        by_route[BIKE_ROUTE].requests == 2 and by_route[RIDE_ROUTE].requests == 2
    )  # slow left out
    assert abs(by_route[RIDE_ROUTE].caused_s - 2 * 0.04) < 1e-9
    assert abs(by_route[BIKE_ROUTE].hub_wait_s - 2 * 0.040) < 1e-9
    assert by_route[BIKE_ROUTE].hub_wait_p99_s == 0.040
    assert by_route[RIDE_ROUTE].window_s == 2.001


def test_a_scrape_that_times_out_is_a_quiet_try_not_the_end() -> None:
    """A starved pool (the incident) may not answer every scrape in time."""
    from tracing.readback.usage import UsageSourceError

    answers: list[str | None] = [exposition(11, 1, 1), None, None, exposition(12, 1, 1)]

    def fetch(url: str, timeout_s: float) -> str:
        answer = answers.pop(0) if answers else exposition(11, 2, 2)
        if answer is None:
            raise UsageSourceError(f"cannot scrape {url}: timed out")
        return answer

    assert set(scrape("http://pool/metrics", fetch=fetch)) == {"11", "12"}


def test_requests_of_a_route_past_the_timing_cap_come_from_the_red_summary() -> None:
    """A worker names only its busiest routes in the timing histograms and the RED
    histogram (the rest in ``<other>``): a route named by one worker and folded by
    another must not look like fewer requests for the same CPU (a CPU-heavy verdict
    from a partial count). The RED summary keeps every route; the histogram's named
    part is not counted on top of it."""
    red_labels = (
        'http_request_method="GET",http_route="/v1/offers/bike",'
        'http_response_status_code="200",pool="io"'
    )
    red = f"{families.ROUTE_REQUESTS}_count{{{red_labels}}}"
    red_sum = red.replace("_count{", "_sum{")
    histogram = f"{families.HTTP_SERVER_DURATION}_count{{{red_labels}}}"
    folded = histogram.replace('http_route="/v1/offers/bike"', 'http_route="<other>"')
    base = 'pool="io"'

    def text(bikes: int, named: int) -> str:
        return "\n".join(
            [
                f"# TYPE {families.HTTP_SERVER_DURATION} histogram",
                f"{histogram} {named}",
                f"{folded} {bikes - named}",
                f"# TYPE {families.ROUTE_REQUESTS} summary",
                f"{red} {bikes}",
                f"{red_sum} {bikes * 0.1}",
                f"# TYPE {families.HANDLER} histogram",
                f'{families.HANDLER}_count{{{base},route="{BIKE_ROUTE}"}} {named}',
                f'{families.HANDLER}_sum{{{base},route="{BIKE_ROUTE}"}} {named * 0.142}',
                f'{families.HANDLER}_count{{{base},route="<other>"}} {bikes - named}',
                f'{families.ROUTE_CPU}{{{base},route="{BIKE_ROUTE}"}} {bikes * 0.002}',
            ]
        )

    counts = delta(parse_text(text(0, 0)), parse_text(text(100, 40)))
    (bike,) = usage_from_metrics(counts, 10.0)
    assert bike.route == BIKE_ROUTE and bike.requests == 100
    assert abs(bike.cpu_s / bike.requests - 0.002) < 1e-9
    assert abs(bike.wall_s - 100 * 0.1) < 1e-9  # the RED time, not 40 handlers' worth


def test_the_spans_hub_wait_is_the_timing_cores() -> None:
    """`routes suggest`'s hub wait from spans adds up what the server span carries: the
    same number as ``RequestTiming.hub_wait_s``, which ``pricing.delayed`` and the
    metrics' hub wait use (one definition; not the calls' delays summed)."""
    from types import MappingProxyType

    from tracing.request_spans import request_attributes
    from tracing.timing.call_state import CallTiming
    from tracing.timing.server_timing import RequestTiming

    call = CallTiming(duration_s=0.1, network_s=0.06, scheduling_delay_s=0.03, blocked_s=0.0)
    timing = RequestTiming(
        arrival_unix_ns=1,
        start_unix_ns=2,
        end_unix_ns=3,
        inbound_delay_s=0.011,
        inbound_cpu_wait_s=0.0,
        inbound_culprits=MappingProxyType({}),
        duration_s=0.12,
        running_s=0.01,
        waiting_s=0.11,
        critical=call,
        critical_upstream="vehicles",
        presend_delay_s=0.003,
        wake_delay_s=0.002,
    )
    span = server("h1", BIKE_ROUTE, 0, **request_attributes(BIKE_ROUTE, timing, None))
    (usage,) = usage_from_spans([span])
    assert abs(usage.hub_wait_s - timing.hub_wait_s) < 1e-12
    assert abs(timing.hub_wait_s - 0.046) < 1e-12
