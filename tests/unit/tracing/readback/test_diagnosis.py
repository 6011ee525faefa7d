"""Why offers missed their cap, from their traces alone: the late ones, their split
into network and waiting for the event loop, the routes they waited behind, and the
seed's sentence."""

from __future__ import annotations

from typing import Any

from tracing import attributes as a
from tracing.readback.diagnosis import diagnose, duration, tell
from tracing.readback.spans import Span

RIDESHARE = "POST /v1/offers/rideshare"
BATCH = "POST /v1/quotes/batch"
BIKE = "GET /v1/offers/bike"


def _span(trace: str, span_id: str, name: str, kind: str, ms: float, **attrs: Any) -> Span:
    parent = attrs.pop("parent", None)
    return Span(trace, span_id, parent, "pricingservice", name, kind, 0, int(ms * 1000), attrs)


def offer(
    trace: str,
    ms: float,
    *,
    inbound: float = 0.0,
    delay: float = 0.0,
    network: float = 0.112,
    cpu_wait: float = 0.0,
    inbound_culprits: list[str] | None = None,
    call_culprits: list[str] | None = None,
    name: str = BIKE,
) -> list[Span]:
    """A bike offer's server span (the critical call to routing) and its client span."""
    server = _span(
        trace,
        f"{trace}-s",
        name,
        "server",
        ms,
        **{
            a.HANDLER_RUNNING: 0.002,
            a.HANDLER_DURATION: ms / 1000,
            a.INBOUND_DELAY: inbound,
            a.INBOUND_CULPRITS: inbound_culprits or [],
            a.CRITICAL_UPSTREAM: "routing",
            a.CRITICAL_NETWORK: network,
            a.CRITICAL_SCHEDULING_DELAY: delay,
            a.CRITICAL_CPU_WAIT: cpu_wait,
        },
    )
    call = _span(
        trace,
        f"{trace}-c",
        "GET /routing/v1/route",
        "client",
        (network + delay) * 1000,
        parent=server.span_id,
        **{a.UPSTREAM: "routing", a.SCHEDULING_CULPRITS: call_culprits or []},
    )
    other = _span(
        trace,
        f"{trace}-v",
        "GET /vehicles/v1/nearby",
        "client",
        100,
        parent=server.span_id,
        **{a.UPSTREAM: "vehicles", a.SCHEDULING_CULPRITS: [f"{BATCH}=9.0"]},
    )
    return [server, call, other]


def spans() -> list[Span]:
    return [
        *offer("t1", 120),  # on time
        *offer(
            "t2",
            1200,  # + its inbound delay: 1.3 s (no Envoy span: a slow-kept trace)
            inbound=0.1,
            delay=1.07,
            inbound_culprits=[f"{RIDESHARE}=0.1"],
            call_culprits=[f"{RIDESHARE}=1.0", "<hub>=0.07"],
        ),
        *offer("t3", 700, delay=0.55, call_culprits=[f"{BATCH}=0.3", f"{RIDESHARE}=0.2"]),
        *offer(
            "t4",
            600,
            delay=0.4,
            cpu_wait=0.3,
            call_culprits=[f"{RIDESHARE}=0.1"],
            name="GET /v1/offers/scooter",
        ),
        _span("t5", "t5-s", RIDESHARE, "server", 2000, **{a.HANDLER_RUNNING: 1.9}),
    ]


def test_the_late_offers_are_found_with_their_split_and_culprits() -> None:
    found = diagnose(spans(), {BIKE, "GET /v1/offers/scooter"}, cap_s=0.5)
    assert found.traced == 4  # the rideshare quote is not watched
    assert [x.trace_id for x in found.late] == ["t2", "t3", "t4"]  # slowest first
    assert found.by_endpoint == {BIKE: 2, "GET /v1/offers/scooter": 1}
    slowest = found.late[0]
    assert slowest.upstream == "routing" and slowest.network_s == 0.112
    assert abs(slowest.wait_s - 1.17) < 1e-9  # inbound + the critical call's delay
    # The critical call's culprits and the inbound ones; never another call's.
    assert slowest.culprits == {RIDESHARE: 1.1, "<hub>": 0.07}
    assert found.culprit == RIDESHARE
    assert found.culprits[0][0] == RIDESHARE
    assert BATCH in dict(found.culprits) and dict(found.culprits)[BATCH] == 0.3


def test_the_seed_s_sentence() -> None:
    found = diagnose(spans(), {BIKE}, cap_s=0.5)
    example = found.example()
    assert example is not None and example.trace_id == "t2"
    assert tell(example) == (
        "routing answered in 112 ms; the offer took 1.3 s: 1.17 s waiting for the event "
        f"loop, 94 % of it behind {RIDESHARE}"
    )
    cpu = diagnose(spans(), {"GET /v1/offers/scooter"}, cap_s=0.5).late[0]
    assert tell(cpu).endswith("(300 ms of it the process waited for a CPU)")


def test_nothing_late_is_said_so() -> None:
    found = diagnose(spans(), {BIKE}, cap_s=5.0)
    assert found.late == () and found.culprit is None and found.example() is None
    assert found.median("wait_s") is None


def test_durations_read_as_the_seed_writes_them() -> None:
    assert duration(0.1124) == "112 ms"
    assert duration(1.17) == "1.17 s"
    assert duration(1.3) == "1.3 s"
