"""The `pricingctl traces` report: percentiles, culprits, the table and the waterfall."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracing import attributes
from tracing.readback import breakdown as breakdown_module
from tracing.readback.breakdown import breakdown
from tracing.readback.report import (
    Example,
    Row,
    parse_culprits,
    percentile,
    render_examples,
    render_table,
    summarize,
    trace_as_dicts,
    waterfall,
)
from tracing.readback.spans import Span

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
_ids = iter(range(1, 1_000_000))


def span(
    name: str,
    kind: str,
    *,
    duration_ms: float = 10.0,
    start_ms: float = 0.0,
    service: str = "pricingservice",
    span_id: str | None = None,
    parent_id: str | None = None,
    net: float | None = None,
    sched: float | None = None,
    culprits: list[str] | None = None,
    trace_id: str = TRACE,
    **extra: Any,
) -> Span:
    attrs: dict[str, Any] = dict(extra)
    if net is not None:
        attrs[attributes.NETWORK_DURATION] = net
    if sched is not None:
        attrs[attributes.SCHEDULING_DELAY] = sched
    if culprits is not None:
        attrs[attributes.SCHEDULING_CULPRITS] = culprits
    return Span(
        trace_id=trace_id,
        span_id=span_id or format(next(_ids), "016x"),
        parent_id=parent_id,
        service=service,
        name=name,
        kind=kind,
        start_us=int(1_700_000_000_000_000 + start_ms * 1000),
        duration_us=int(duration_ms * 1000),
        attributes=attrs,
    )


# --- percentile --------------------------------------------------------------------


def test_percentile_of_nothing_or_out_of_range_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0], 101)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([7.0], 50, 7.0),
        ([7.0], 99, 7.0),
        ([10.0, 20.0], 50, 10.0),  # nearest rank: ceil(0.5 * 2) = 1st
        ([20.0, 10.0], 50, 10.0),  # order of the input does not matter
        ([10.0, 20.0], 51, 20.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
        ([float(v) for v in range(1, 11)], 90, 9.0),
        ([float(v) for v in range(1, 101)], 99, 99.0),  # p99 of 100 calls is not the max
        ([float(v) for v in range(1, 101)], 50, 50.0),
        ([float(v) for v in range(1, 101)], 100, 100.0),
        ([5.0, 1.0, 3.0], 0, 1.0),
    ],
)
def test_percentile_is_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


@given(
    st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=200),
    st.integers(min_value=1, max_value=100),
)
def test_percentile_matches_the_nearest_rank_definition(values: list[float], q: int) -> None:
    ordered = sorted(values)
    result = percentile(values, q)
    # The smallest value with at least q% of the values at or below it.
    at_or_below = len([v for v in ordered if v <= result])
    assert result in values
    assert at_or_below * 100 >= q * len(values)
    smaller = [v for v in ordered if v < result]
    assert len(smaller) * 100 < q * len(values)


# --- parse_culprits ----------------------------------------------------------------


def test_parse_culprits_reads_label_and_seconds() -> None:
    assert parse_culprits(["POST /v1/offers/rideshare=0.2728", "<hub>=0.001"]) == [
        ("POST /v1/offers/rideshare", 0.2728),
        ("<hub>", 0.001),
    ]


def test_parse_culprits_splits_at_the_last_equals_sign() -> None:
    assert parse_culprits(["GET /v1/x?a=b=0.5"]) == [("GET /v1/x?a=b", 0.5)]


def test_parse_culprits_ignores_malformed_items() -> None:
    raw = ["no separator", "label=not-a-number", None, 42, "ok=1.5", "trailing="]
    assert parse_culprits(raw) == [("ok", 1.5)]


@pytest.mark.parametrize("raw", [None, [], ()])
def test_parse_culprits_of_nothing_is_empty(raw: Any) -> None:
    assert parse_culprits(raw) == []


# --- summarize ---------------------------------------------------------------------


def sample() -> list[Span]:
    return [
        span("GET /v1/offers/bike", "server", duration_ms=400),
        span("GET /v1/offers/bike", "server", duration_ms=100),
        span("POST /v1/offers/rideshare", "server", duration_ms=50),
        span(
            "GET /vehicles/v1/nearby",
            "client",
            duration_ms=383,
            net=0.110,
            sched=0.273,
            culprits=["POST /v1/offers/rideshare=0.2", "<hub>=0.05"],
        ),
        span(
            "GET /vehicles/v1/nearby",
            "client",
            duration_ms=60,
            net=0.050,
            sched=0.010,
            culprits=["<hub>=0.3", "GET /v1/offers/scooter=0.01"],
        ),
        span("GET /routing/v1/route", "client", duration_ms=20, net=0.02, sched=0.0),
        span("ingress", "server", service="envoy", duration_ms=999),
        span("GET /v1/offers/bike", "server", service="envoy", duration_ms=999),
        span("compute surge", "internal"),
    ]


def test_summarize_groups_endpoints_and_upstreams_and_skips_envoy() -> None:
    rows = {(r.kind, r.name): r for r in summarize(sample())}
    assert set(rows) == {
        ("endpoint", "GET /v1/offers/bike"),
        ("endpoint", "POST /v1/offers/rideshare"),
        ("upstream", "GET /vehicles/v1/nearby"),
        ("upstream", "GET /routing/v1/route"),
    }
    bike = rows[("endpoint", "GET /v1/offers/bike")]
    assert bike.count == 2  # Envoy's span of the same request is not counted
    assert bike.duration_p50_ms == 100.0
    assert bike.duration_p99_ms == 400.0
    assert bike.network_p50_ms is None  # no split on server spans without upstream calls
    vehicles = rows[("upstream", "GET /vehicles/v1/nearby")]
    assert vehicles.count == 2
    assert vehicles.network_p50_ms == pytest.approx(50.0)
    assert vehicles.network_p99_ms == pytest.approx(110.0)
    assert vehicles.delay_p50_ms == pytest.approx(10.0)
    assert vehicles.delay_p99_ms == pytest.approx(273.0)


def parallel_calls() -> list[Span]:
    """One request whose handler made two 45 ms calls at once: its server span's
    ``gevent.network.duration`` is their sum (90 ms, more than the request's 50), the
    ``gevent.critical.*`` attributes the call it waited for last."""
    server = span(
        "GET /v1/offers/bike",
        "server",
        duration_ms=50,
        span_id="00000000000000aa",
        net=0.090,
        sched=0.007,
        **{
            attributes.SCHEDULING_CPU_WAIT: 0.007,
            attributes.CRITICAL_UPSTREAM: "vehicles",
            attributes.CRITICAL_NETWORK: 0.044,
            attributes.CRITICAL_SCHEDULING_DELAY: 0.004,
            attributes.CRITICAL_CPU_WAIT: 0.001,
        },
    )
    calls = [
        span(
            name,
            "client",
            duration_ms=46,
            start_ms=1,
            parent_id=server.span_id,
            net=net,
            sched=sched,
            **{attributes.SCHEDULING_CPU_WAIT: cpu, attributes.UPSTREAM: upstream},
        )
        for name, upstream, net, sched, cpu in (
            ("GET /vehicles/v1/nearby", "vehicles", 0.044, 0.004, 0.001),
            ("GET /promotions/v1/active", "promotions", 0.046, 0.003, 0.006),
        )
    ]
    return [server, *calls]


def test_endpoint_row_shows_its_critical_calls_network_and_delay_not_the_sum() -> None:
    rows = {r.name: r for r in summarize(parallel_calls())}
    bike = rows["GET /v1/offers/bike"]
    assert bike.network_p50_ms == pytest.approx(44.0)  # not 90: the calls overlapped
    assert bike.network_p99_ms == pytest.approx(44.0)
    assert bike.delay_p50_ms == pytest.approx(4.0)  # not 7
    assert bike.delay_cpu_wait_pct == pytest.approx(25.0)  # 1 of 4, not 7 of 7
    assert bike.duration_p50_ms is not None and bike.network_p50_ms <= bike.duration_p50_ms
    line = next(x for x in render_table(list(rows.values())).splitlines() if "bike" in x)
    cols = cells(line, "bike")
    assert (cols["net50"], cols["sched50"], cols["cpu"]) == ("44.0", "4.0", "25")
    server_line = next(x for x in waterfall(parallel_calls()).splitlines() if "[server]" in x)
    assert "net 44.0 / sched 4.0 (cpu wait 1.0)" in server_line


def test_summarize_lists_endpoints_before_upstreams() -> None:
    kinds = [r.kind for r in summarize(sample())]
    assert kinds == sorted(kinds)
    assert kinds[0] == "endpoint" and kinds[-1] == "upstream"


def test_summarize_sums_culprits_across_calls_largest_first() -> None:
    rows = {r.name: r for r in summarize(sample())}
    culprits = rows["GET /vehicles/v1/nearby"].top_culprits
    assert [label for label, _ in culprits] == [
        "<hub>",
        "POST /v1/offers/rideshare",
        "GET /v1/offers/scooter",
    ]
    assert [s for _, s in culprits] == pytest.approx([0.35, 0.2, 0.01])
    assert rows["GET /routing/v1/route"].top_culprits == ()


def test_summarize_keeps_only_the_top_culprits() -> None:
    rows = summarize(sample(), top=1)
    vehicles = next(r for r in rows if r.name == "GET /vehicles/v1/nearby")
    assert [label for label, _ in vehicles.top_culprits] == ["<hub>"]


def test_summarize_ignores_non_numeric_timing_attributes() -> None:
    (row,) = summarize([span("GET /x", "client", net="fast", sched=None)])  # type: ignore[arg-type]
    assert row.network_p50_ms is None and row.delay_p50_ms is None


def measured() -> list[Span]:
    """Spans with the inbound delay and the CPU-wait split (seconds, as exported)."""
    return [
        span(
            "GET /v1/offers/bike",
            "server",
            duration_ms=300,
            sched=0.300,  # the sum over its two calls; the critical one's below
            **{
                attributes.SCHEDULING_CPU_WAIT: 0.100,
                attributes.CRITICAL_SCHEDULING_DELAY: 0.200,
                attributes.CRITICAL_CPU_WAIT: 0.050,
                attributes.INBOUND_DELAY: 0.040,
                attributes.INBOUND_CPU_WAIT: 0.010,
                attributes.INBOUND_CULPRITS: ["POST /v1/offers/rideshare=0.03", "<hub>=0.001"],
            },
        ),
        span(
            "GET /v1/offers/bike",
            "server",
            duration_ms=100,
            sched=0.0,
            **{
                attributes.SCHEDULING_CPU_WAIT: 0.0,
                attributes.CRITICAL_SCHEDULING_DELAY: 0.0,
                attributes.CRITICAL_CPU_WAIT: 0.0,
                attributes.INBOUND_DELAY: 0.002,
                attributes.INBOUND_CPU_WAIT: 0.002,
                attributes.INBOUND_CULPRITS: ["POST /v1/offers/rideshare=0.02"],
            },
        ),
        span(
            "GET /vehicles/v1/nearby",
            "client",
            net=0.1,
            sched=0.080,
            culprits=["POST /v1/offers/rideshare=0.07"],
            **{attributes.SCHEDULING_CPU_WAIT: 0.020},
        ),
        span(
            "GET /vehicles/v1/nearby",
            "client",
            net=0.1,
            sched=0.020,
            **{attributes.SCHEDULING_CPU_WAIT: 0.030},  # more than its delay: capped
        ),
    ]


def test_summarize_endpoints_inbound_delay_its_cpu_share_and_culprits() -> None:
    rows = {r.name: r for r in summarize(measured())}
    bike = rows["GET /v1/offers/bike"]
    assert bike.inbound_delay_p50_ms == pytest.approx(2.0)
    assert bike.inbound_delay_p99_ms == pytest.approx(40.0)
    assert bike.inbound_cpu_wait_pct == pytest.approx(100 * 0.012 / 0.042)  # of all spans
    assert bike.top_inbound_culprits == (
        ("POST /v1/offers/rideshare", pytest.approx(0.05)),
        ("<hub>", pytest.approx(0.001)),
    )
    assert bike.delay_cpu_wait_pct == pytest.approx(25.0)  # the critical calls': 0.05 / 0.2
    assert bike.top_culprits == ()  # server spans carry the inbound culprits only


def test_summarize_upstreams_cpu_share_of_their_scheduling_delay() -> None:
    rows = {r.name: r for r in summarize(measured())}
    vehicles = rows["GET /vehicles/v1/nearby"]
    assert vehicles.delay_cpu_wait_pct == pytest.approx(100 * (0.020 + 0.020) / 0.100)
    assert vehicles.inbound_delay_p50_ms is None
    assert vehicles.inbound_cpu_wait_pct is None
    assert vehicles.top_inbound_culprits == ()


def test_summarize_spans_from_before_the_split_have_no_new_figures() -> None:
    rows = {r.name: r for r in summarize(sample())}
    assert "GET /vehicles/v1/nearby" in rows and len(rows) >= 2, rows  # the loop runs
    for row in rows.values():
        assert row.delay_cpu_wait_pct is None
        assert row.inbound_delay_p50_ms is None and row.inbound_delay_p99_ms is None
        assert row.inbound_cpu_wait_pct is None
        assert row.top_inbound_culprits == ()


def test_summarize_share_of_no_delay_at_all_is_unknown() -> None:
    (row,) = summarize([span("GET /r", "client", sched=0.0, **{attributes.SCHEDULING_CPU_WAIT: 0})])
    assert row.delay_cpu_wait_pct is None


def test_row_as_dict_names_the_new_fields_after_their_attributes() -> None:
    rows = {r.name: r.as_dict() for r in summarize(measured())}
    bike = rows["GET /v1/offers/bike"]
    assert bike["inbound_delay_p50_ms"] == pytest.approx(2.0)
    assert bike["inbound_delay_p99_ms"] == pytest.approx(40.0)
    assert bike["inbound_cpu_wait_pct"] == pytest.approx(100 * 0.012 / 0.042)
    assert bike["delay_cpu_wait_pct"] == pytest.approx(25.0)
    assert bike["top_inbound_culprits"][0] == {
        "label": "POST /v1/offers/rideshare",
        "seconds": pytest.approx(0.05),
    }
    old = summarize(sample())[0].as_dict()
    assert old["inbound_delay_p50_ms"] is None and old["top_inbound_culprits"] == []


def test_summarize_of_nothing_is_empty() -> None:
    assert summarize([]) == []


def test_row_as_dict_is_json_shaped() -> None:
    row = next(r for r in summarize(sample()) if r.name == "GET /vehicles/v1/nearby")
    d = row.as_dict()
    assert d["kind"] == "upstream" and d["count"] == 2
    assert d["top_culprits"][0] == {"label": "<hub>", "seconds": pytest.approx(0.35)}


def test_summarize_keeps_the_slowest_span_of_each_trace_slowest_first() -> None:
    spans = [
        span("GET /x", "server", duration_ms=30, trace_id="t1", span_id="a"),
        span("GET /x", "server", duration_ms=90, trace_id="t2", span_id="b"),
        span("GET /x", "server", duration_ms=80, trace_id="t2", span_id="c"),  # same trace
        span("GET /x", "server", duration_ms=10, trace_id="t3", span_id="d"),
        span("GET /x", "server", duration_ms=50, trace_id="t4", span_id="e"),
    ]
    (row,) = summarize(spans, examples=3)
    assert row.slowest == (
        Example("t2", "b", 90.0),
        Example("t4", "e", 50.0),
        Example("t1", "a", 30.0),
    )


def test_row_as_dict_links_its_slowest_spans() -> None:
    (row,) = summarize([span("GET /x", "server", duration_ms=5, trace_id="t1", span_id="a")])
    assert row.as_dict()["slowest"] == [{"trace_id": "t1", "span_id": "a", "duration_ms": 5.0}]
    linked = row.as_dict(lambda t, s: f"ui/{t}/{s}")["slowest"]
    assert linked == [{"trace_id": "t1", "span_id": "a", "duration_ms": 5.0, "url": "ui/t1/a"}]


def test_render_examples_puts_the_slowest_row_first_with_its_link() -> None:
    rows = summarize(
        [
            span("GET /fast", "server", duration_ms=5, trace_id="t1", span_id="a"),
            span("GET /slow", "server", duration_ms=500, trace_id="t2", span_id="b"),
            span("GET /up", "client", duration_ms=50, trace_id="t2", span_id="c"),
        ]
    )
    text = render_examples(rows, lambda t, s: f"http://ui/trace/{t}?uiFind={s}", "heading:")
    lines = text.splitlines()
    assert lines[0] == "heading:"
    assert [line.split()[2] for line in lines[1:]] == ["/slow", "/up", "/fast"]
    assert lines[1].split()[0] == "endpoint"
    assert lines[1].endswith("500.0 ms  http://ui/trace/t2?uiFind=b")


def test_render_examples_of_nothing_is_empty() -> None:
    assert render_examples([], lambda t, s: t, "heading:") == ""


# --- render_table ------------------------------------------------------------------


def test_render_table_without_spans_says_so() -> None:
    assert render_table([]) == "no spans of pricingservice yet: send some traffic first"


def test_render_table_shows_each_row_with_its_numbers() -> None:
    text = render_table(summarize(sample()))
    lines = text.splitlines()
    assert "top culprits" in lines[0]
    vehicles = next(line for line in lines if "GET /vehicles/v1/nearby" in line)
    assert vehicles.startswith("upstream")
    assert "<hub>=0.350" in vehicles
    assert "POST /v1/offers/rideshare=0.200" in vehicles
    assert "273.0" in vehicles and "110.0" in vehicles
    bike = next(line for line in lines if "GET /v1/offers/bike" in line)
    assert bike.startswith("endpoint")
    assert " - " in bike  # no network split for an endpoint without one
    footer = lines[-4:]
    assert footer[0].startswith("times in ms")
    assert footer[1].startswith("endpoint net / sched: its critical call's")
    assert footer[2].startswith("inb = inbound delay")
    assert footer[3].startswith("cpu% = ")


# The numeric columns after the count, in order.
COLUMNS: tuple[str, ...] = ("dur50", "dur99", "net50", "net99", "sched50", "sched99", "cpu")
COLUMNS += ("inb50", "inb99", "icpu")


def cells(line: str, name: str) -> dict[str, str]:
    """The numeric columns of a table row, by meaning, and the culprits after them."""
    words = line[line.index(name) + len(name) :].split(maxsplit=len(COLUMNS) + 1)
    return {"count": words[0], **dict(zip(COLUMNS, words[1:], strict=False))} | {
        "culprits": words[len(COLUMNS) + 1] if len(words) > len(COLUMNS) + 1 else ""
    }


def test_render_table_shows_inbound_delay_and_the_cpu_wait_shares() -> None:
    lines = render_table(summarize(measured())).splitlines()
    assert "inb p50" in lines[0] and lines[0].count("cpu%") == 2
    bike = cells(next(line for line in lines if "GET /v1/offers/bike" in line), "bike")
    assert bike["count"] == "2"
    assert (bike["sched50"], bike["sched99"], bike["cpu"]) == ("0.0", "200.0", "25")
    assert (bike["inb50"], bike["inb99"], bike["icpu"]) == ("2.0", "40.0", "29")
    assert bike["culprits"] == "inbound: POST /v1/offers/rideshare=0.050, <hub>=0.001"
    vehicles = cells(next(line for line in lines if "nearby" in line), "nearby")
    assert (vehicles["sched99"], vehicles["cpu"]) == ("80.0", "40")
    assert (vehicles["inb50"], vehicles["inb99"], vehicles["icpu"]) == ("-", "-", "-")
    assert vehicles["culprits"] == "POST /v1/offers/rideshare=0.070"


def test_render_table_shows_a_dash_for_spans_from_before_the_split() -> None:
    lines = render_table(summarize(sample())).splitlines()
    bike = cells(next(line for line in lines if "GET /v1/offers/bike" in line), "bike")
    assert [bike[c] for c in ("cpu", "inb50", "inb99", "icpu")] == ["-"] * 4
    assert bike["culprits"] == "-"
    vehicles = cells(next(line for line in lines if "nearby" in line), "nearby")
    assert vehicles["sched99"] == "273.0" and vehicles["cpu"] == "-"


def test_render_table_fixed_columns_fit_in_120_characters() -> None:
    rows = [
        Row("endpoint", "POST /v1/offers/rideshare", 99999, *[9999.9] * 6, ()),
        Row("upstream", "GET /vehicles/v1/nearby", 1, *[1.0] * 6, (("x", 1.0),)),
    ]
    lines = render_table(rows).splitlines()
    assert lines[0].index("top culprits") <= 121
    assert len(lines) >= 4, lines  # a header, a rule, the two rows
    for line in lines[2:4]:
        assert line.endswith("  -") or line.endswith("  x=1.000")
        assert len(line.rsplit("  ", 1)[0]) <= 120
    assert all(len(line) <= 120 for line in lines[-2:])  # the lines this table added


def test_render_table_cuts_long_names_and_keeps_columns_aligned() -> None:
    rows = [
        Row("endpoint", "GET /" + "x" * 60, 1, 1.0, 1.0, None, None, None, None, ()),
        Row("upstream", "GET /y", 12345, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, ()),
    ]
    lines = render_table(rows).splitlines()
    assert len(lines[2]) == len(lines[3])


# --- waterfall ---------------------------------------------------------------------


def trace_spans() -> list[Span]:
    return [
        span(
            "GET /vehicles/v1/nearby",
            "client",
            span_id="c1",
            parent_id="s1",
            start_ms=2,
            duration_ms=383,
            net=0.110,
            sched=0.2728,
            culprits=["POST /v1/offers/rideshare=0.2728"],
        ),
        span("ingress", "server", service="envoy", span_id="e1", start_ms=0, duration_ms=410),
        span("GET /v1/offers/bike", "server", span_id="s1", parent_id="e1", start_ms=1),
        span("GET /routing/v1/route", "client", span_id="c2", parent_id="s1", start_ms=3),
    ]


def test_waterfall_indents_children_under_their_parent_in_start_order() -> None:
    lines = waterfall(trace_spans()).splitlines()
    assert lines[0].startswith(f"trace {TRACE}  (4 spans")
    body = lines[1 : lines.index("")]  # the tree; the breakdown follows
    assert len(body) == 4
    # Roots first, then each span's children in start order, whatever the input order.
    expected = [
        "envoy: ingress [server]",
        "pricingservice: GET /v1/offers/bike [server]",
        "pricingservice: GET /vehicles/v1/nearby [client]",
        "pricingservice: GET /routing/v1/route [client]",
    ]
    columns = []
    for line, text in zip(body, expected, strict=True):
        assert text in line
        columns.append(line.index(text))
    root, server, vehicles, routing = columns
    assert server == root + 2
    assert vehicles == routing == server + 2


def test_waterfall_shows_offsets_and_the_split_of_client_calls() -> None:
    lines = waterfall(trace_spans()).splitlines()
    vehicles = next(line for line in lines if "GET /vehicles/v1/nearby" in line)
    assert vehicles.split()[:2] == ["2.0", "383.0"]  # ms after the trace began, duration
    assert "net 110.0 / sched 272.8" in vehicles
    assert "<- POST /v1/offers/rideshare 272.8" in vehicles
    server = next(line for line in lines if "GET /v1/offers/bike" in line)
    assert "net" not in server and "<-" not in server


def test_waterfall_puts_spans_with_a_missing_parent_at_the_root() -> None:
    orphan = span("GET /x", "client", span_id="o1", parent_id="not-in-trace", start_ms=5)
    lines = waterfall([*trace_spans(), orphan]).splitlines()
    line = next(line for line in lines if "GET /x" in line)
    root = next(line for line in lines if "envoy: ingress" in line)
    assert line.index("pricingservice:") == root.index("envoy:")


def test_waterfall_of_nothing() -> None:
    assert waterfall([]) == "empty trace"


def measured_trace() -> list[Span]:
    """Envoy's 410 ms span, the pool's server span with the full breakdown, its call."""
    server = span(
        "GET /v1/offers/bike",
        "server",
        span_id="s1",
        parent_id="e1",
        start_ms=12,
        duration_ms=391,
        net=0.100,
        sched=0.250,
        **{
            attributes.SCHEDULING_CPU_WAIT: 0.050,
            attributes.ENVOY_BEFORE_POOL: 0.002,
            attributes.INBOUND_DELAY: 0.010,
            attributes.INBOUND_CPU_WAIT: 0.004,
            attributes.INBOUND_CULPRITS: ["POST /v1/offers/rideshare=0.006"],
            attributes.HANDLER_DURATION: 0.390,
            attributes.HANDLER_RUNNING: 0.006,
            attributes.CRITICAL_OVERLAP: 0.001,
            attributes.CRITICAL_PRESEND_DELAY: 0.001,
            attributes.CRITICAL_NETWORK: 0.100,
            attributes.CRITICAL_SCHEDULING_DELAY: 0.250,
            attributes.CRITICAL_CPU_WAIT: 0.050,
            attributes.CRITICAL_RUNNING: 0.020,
            attributes.CRITICAL_WAKE_DELAY: 0.004,
        },
    )
    return [
        span("GET /v1/offers/bike", "server", service="envoy", span_id="e1", duration_ms=410),
        server,
        span(
            "GET /vehicles/v1/nearby",
            "client",
            span_id="c1",
            parent_id="s1",
            start_ms=19,
            duration_ms=370,
            net=0.100,
            sched=0.250,
            culprits=["POST /v1/offers/rideshare=0.2"],
            **{attributes.SCHEDULING_CPU_WAIT: 0.050},
        ),
    ]


def test_waterfall_shows_cpu_wait_of_calls_and_the_inbound_delay() -> None:
    lines = waterfall(measured_trace()).splitlines()
    vehicles = next(line for line in lines if "GET /vehicles/v1/nearby" in line)
    assert "net 100.0 / sched 250.0 (cpu wait 50.0)  <- POST /v1/offers/rideshare 200.0" in (
        vehicles
    )
    server = next(line for line in lines if "pricingservice: GET /v1/offers/bike" in line)
    assert "inbound 10.0 (cpu wait 4.0)  <- POST /v1/offers/rideshare 6.0" in server


def test_waterfall_ends_with_the_server_spans_breakdown_in_tiling_order() -> None:
    spans = measured_trace()
    lines = waterfall(spans).splitlines()
    heading = lines.index("")
    assert lines[heading + 1].startswith("where the 410.0 ms of GET /v1/offers/bike went")
    assert "Envoy's span" in lines[heading + 1]
    rows = [line.split(None, 2) for line in lines[heading + 2 :]]
    expected = breakdown(spans[1], spans[0])
    assert expected is not None
    assert [name for _, _, name in rows] == [*breakdown_module.PARTS, "unexplained"]
    assert [float(ms) for ms, _, _ in rows] == pytest.approx(
        [round(s * 1000, 1) for s in expected.parts.values()] + [10.0]
    )
    by_name = {name: (float(ms), share) for ms, share, name in rows}
    assert by_name["envoy before pool"] == (2.0, "0%")
    assert by_name["inbound cpu wait"] == (4.0, "1%")
    assert by_name["inbound hub busy"] == (6.0, "1%")
    assert by_name["delay hub busy"] == (200.0, "49%")
    assert by_name["response + envoy after"] == (7.0, "2%")


def test_waterfall_without_envoys_span_totals_the_server_span_and_inbound() -> None:
    spans = measured_trace()[1:]
    lines = waterfall(spans).splitlines()
    heading = lines[lines.index("") + 1]
    assert heading.startswith("where the 401.0 ms of GET /v1/offers/bike went (no Envoy span")
    names = [line.split(None, 2)[2] for line in lines[lines.index("") + 2 :]]
    assert "envoy before pool" not in names and names[-1] == "unexplained"


def test_waterfall_of_spans_from_before_the_split_shows_dashes() -> None:
    lines = waterfall(trace_spans()).splitlines()
    server = next(line for line in lines if "pricingservice: GET /v1/offers/bike" in line)
    assert server.endswith("inbound - (cpu wait -)")
    vehicles = next(line for line in lines if "GET /vehicles/v1/nearby" in line)
    assert "net 110.0 / sched 272.8 (cpu wait -)" in vehicles
    assert lines[-1] == (
        "where the time of GET /v1/offers/bike went: - (no gevent measurement on its span)"
    )


def test_trace_as_dicts_gives_the_server_span_its_breakdown_in_ms() -> None:
    spans = measured_trace()
    envoy, server, client = trace_as_dicts(spans)
    assert "breakdown" not in envoy and "breakdown" not in client
    assert server["span_id"] == "s1"
    assert server["attributes"][attributes.INBOUND_DELAY] == 0.010
    result = server["breakdown"]
    assert result["total_ms"] == pytest.approx(410.0)
    assert list(result["parts_ms"]) == [*breakdown_module.PARTS, "unexplained"]
    assert result["parts_ms"]["inbound cpu wait"] == pytest.approx(4.0)
    assert result["parts_ms"]["unexplained"] == pytest.approx(10.0)
    assert result["adds_up"] is True  # 10 ms of 410: within 3 %
    (old,) = (d for d in trace_as_dicts(trace_spans()) if d.get("span_id") == "s1")
    assert old["breakdown"] is None
