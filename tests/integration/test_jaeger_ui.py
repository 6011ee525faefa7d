"""Jaeger's real web UI, in a real browser: a bike offer delayed by rideshare quotes
in the shared layout, seen the way a person sees it.

Needs the UI built (deploy/jaeger/build-ui.sh: Node and a source; skipped with the
reason otherwise) and Debian's `chromium` (installed by .ci/run; skipped with the
reason when no browser can be found). Screenshots go under the test's tmp_path;
their paths are printed (`pytest -s` shows them).
"""

from __future__ import annotations

import contextlib
import json
import random
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from routing.model import Layout, RouteConfig
from stack import jaeger
from stack.launch import Stack
from tests.integration.support import jaeger_api
from tests.integration.support.browser import Browser, BrowserError, find_chromium
from tests.integration.support.http import fixed_latency
from tests.integration.support.load import D_MS, HOG_ROUTE, Hogs, offer_request, open_loop
from tests.samples import BIKE_ROUTE, OFFER_QUERY
from toolkit.fetch import fetch
from toolkit.wait import wait_for
from tracing import attributes
from tracing.readback.report import parse_culprits
from tracing.readback.spans import Span, from_jaeger, jaeger_trace_url

pytestmark = pytest.mark.integration

OFFER_OPERATION = BIKE_ROUTE
# Rideshare quotes posted in parallel: enough to delay offers in the shared pool,
# few enough that most are still answered within their deadline.
HOG_THREADS = 4
UPSTREAM_CALLS = ["GET /promotions/v1/active", "GET /routing/v1/eta", "GET /vehicles/v1/nearby"]
# The children that draw a delayed call's wait (tracing.wait_spans), past the
# threshold (PRICING_TRACE_WAIT_SPANS_MS).
WAIT_SPANS = (attributes.SPAN_NETWORK, attributes.SPAN_LOOP_WAIT)


def _drawn_wait(span: Span) -> bool:
    return span.kind == "internal" and span.name in WAIT_SPANS


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip(
            "no Chromium found (chromium, chromium-browser or google-chrome on PATH): "
            "install Debian's `chromium` package (bash .ci/run does, as root)"
        )
    return path


@pytest.fixture(scope="module")
def ui_built() -> Path:
    """Jaeger and its UI built (or cached). No Node or no source: skip, saying which."""
    try:
        jaeger.build()
    except jaeger.JaegerBuildError as exc:
        pytest.fail(f"could not build Jaeger {jaeger.JAEGER_VERSION}: {exc}", pytrace=False)
    try:
        return jaeger.build_ui()
    except jaeger.JaegerUIUnavailable as exc:
        pytest.skip(f"Jaeger's web UI is not built here: {exc}")
    except jaeger.JaegerBuildError as exc:
        pytest.fail(f"building Jaeger's web UI failed: {exc}", pytrace=False)


def _ui_stack(
    routes: RouteConfig, layout: Layout, factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    run_dir = factory.mktemp(f"jaeger-ui-{layout.value}")
    with Stack.on_free_ports(routes, layout, run_dir, with_jaeger=True) as stack:
        assert stack.jaeger_ui is not None, "Jaeger started without its UI"
        fixed_latency(stack, D_MS)
        yield stack


@pytest.fixture(scope="module")
def shared_ui(
    ui_built: Path, hogged_routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    yield from _ui_stack(hogged_routes, Layout.SHARED, tmp_path_factory)


@pytest.fixture(scope="module")
def split_ui(
    ui_built: Path, all_traced_routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    yield from _ui_stack(all_traced_routes, Layout.SPLIT, tmp_path_factory)


@pytest.fixture
def page(chromium: str, tmp_path: Path) -> Iterator[Browser]:
    with Browser(chromium, tmp_path / "chromium-profile") as browser:
        yield browser


# --- traces ------------------------------------------------------------------------


def _complete_offer_traces(stack: Stack, since_us: int) -> dict[str, list[Span]]:
    """Bike-offer traces since since_us with all five spans in Jaeger (Envoy's, the
    pool's server span, three upstream calls; the children drawing a wait aside)."""
    assert stack.jaeger_url is not None
    traces = jaeger_api.by_trace(from_jaeger(stack.jaeger_url, limit=100, lookback="15m"))
    return {
        trace_id: spans
        for trace_id, spans in traces.items()
        if sum(not _drawn_wait(s) for s in spans) == 5
        and min(s.start_us for s in spans) >= since_us
        and any(s.service == "envoy" and s.name == OFFER_OPERATION for s in spans)
    }


def _delay_s(span: Span) -> float:
    value = span.attributes.get(attributes.SCHEDULING_DELAY)
    return float(value) if isinstance(value, int | float) else 0.0


def _hog_delay_s(span: Span) -> float:
    culprits = parse_culprits(span.attributes.get(attributes.SCHEDULING_CULPRITS))
    return sum(seconds for label, seconds in culprits if label == HOG_ROUTE)


# Bike offers to be traced, sent open loop (each on its own connection, at this rate,
# whatever the answers; under the hogs some time out, which is not checked here). Sent
# one at a time, each would take the upstream connection Envoy last freed, and all could
# go to one worker no quote held (a run beside a benchmark once read 72 offers, none
# delayed): offers in flight together need as many connections, on as many workers.
OFFERS_PER_ROUND = 12
OFFER_RATE = 40.0


def _errored(spans: list[Span]) -> bool:
    return any(s.attributes.get("error") is True for s in spans)


def offer_trace(
    stack: Stack, *, hog_threads: int = HOG_THREADS, rounds: int = 6
) -> tuple[str, Span]:
    """Send bike offers while rideshare quotes hog the CPU; return a trace and its call
    to look at. Shared layout: a trace flagged `pricing.delayed` whose call the hogs
    delayed most. Split layout (where the hogs delay no offer): the slowest call.

    Envoy's keep-alive affinity decides which worker of the shared pool an offer meets,
    and a round may find every offer on a worker no quote held (beside a benchmark, three
    rounds in a row once did): rounds repeat until one offer was held."""
    most_s = 0.0
    seen = 0
    hogs_answered: Counter[int | str] = Counter()
    for _ in range(rounds):
        since_us = time.time_ns() // 1000
        with Hogs(stack.url, hog_threads) as hogs:
            open_loop(stack.url, offer_request, rate_per_s=OFFER_RATE, count=OFFERS_PER_ROUND)
        hogs_answered += hogs.outcomes
        # Spans leave the pools' exporter threads every 0.5 s: read at once, the round's
        # first offers are in and its last (the ones the hogs held up longest) are not,
        # and eight complete traces end the wait (the fresh-clone CI failure).
        time.sleep(0.7)
        traces = wait_for(
            lambda since_us=since_us: _complete_offer_traces(stack, since_us),
            10,
            0.7,
            until=lambda traces: len(traces) >= 8,
        )
        seen += len(traces)
        calls = [
            (trace_id, s) for trace_id, spans in traces.items() for s in spans if s.kind == "client"
        ]
        if stack.layout is Layout.SPLIT and calls:
            return max(calls, key=lambda c: c[1].duration_us)
        drawn = {s.parent_id for spans in traces.values() for s in spans if _drawn_wait(s)}
        slow = {
            trace_id
            for trace_id, spans in traces.items()
            if any(
                s.kind == "server" and s.attributes.get(attributes.DELAYED) is True for s in spans
            )
        }
        # Delayed past the threshold, its wait drawn as child spans (a call that timed
        # out has no reply stamp to draw them from).
        delayed = [
            c
            for c in calls
            if c[0] in slow and _hog_delay_s(c[1]) > 0.005 and c[1].span_id in drawn
        ]
        most_s = max([most_s, *(_hog_delay_s(s) for _, s in calls)])
        # An offer that was answered in time, if there is one: that is the picture.
        answered = [c for c in delayed if not _errored(traces[c[0]])]
        if answered or delayed:
            return max(answered or delayed, key=lambda c: _hog_delay_s(c[1]))
    pytest.fail(
        f"no bike offer flagged {attributes.DELAYED} and delayed by {HOG_ROUTE} after {rounds} "
        f"rounds ({seen} complete offer traces read; largest delay it caused: "
        f"{most_s * 1000:.1f} ms; the quotes were answered {dict(hogs_answered)})"
    )


# --- the pages ---------------------------------------------------------------------

SPAN_ROWS_JS = """[...document.querySelectorAll('.span-row .span-name')].map(a => ({
    service: a.querySelector('.span-svc-name').innerText.trim(),
    operation: a.querySelector('.endpoint-name').innerText.trim()}))"""

DETAIL_JS = """[...document.querySelectorAll('.detail-row')].map(e => e.innerText).join('\\n')"""


def open_trace(
    page: Browser, stack: Stack, trace_id: str, call: Span, min_rows: int = 5
) -> list[dict[str, str]]:
    """Open the trace page with the delayed call highlighted and its tags expanded;
    return the timeline's rows (service, operation)."""
    assert stack.jaeger_url is not None
    page.goto(jaeger_trace_url(stack.jaeger_url, trace_id, call.span_id))
    page.wait_for(
        f"document.querySelectorAll('.span-row .span-name').length >= {min_rows}",
        what=f"the trace timeline with {min_rows} spans",
    )
    rows: list[dict[str, str]] = page.evaluate(SPAN_ROWS_JS)
    # uiFind highlights the call's row and opens its span detail; open it if not.
    page.evaluate(
        """(() => { const name = document.querySelector('.span-row.is-matching-filter .span-name');
                   if (!name.classList.contains('is-detail-expanded')) { name.click(); }
                   return true; })()"""
    )
    page.wait_for(f"({DETAIL_JS}).includes('Tags')", what="the span detail")
    page.evaluate(
        """(() => { for (const h of document.querySelectorAll(
                        '.detail-row .AccordianKeyValues--header')) {
                      if (h.innerText.trim().startsWith('Tags')) { h.click(); } }
                   return true; })()"""
    )
    page.wait_for(
        "document.querySelector('.detail-row .KeyValueTable') !== null",
        what="the span's tag table",
    )
    return rows


def test_search_page_finds_offers_flagged_slow(
    shared_ui: Stack, page: Browser, tmp_path: Path
) -> None:
    slow_id, _ = offer_trace(shared_ui)
    assert shared_ui.jaeger_url is not None
    query = urllib.parse.urlencode(
        {
            "service": "pricingservice",
            "operation": OFFER_OPERATION,
            "tags": json.dumps({attributes.DELAYED: "true"}),
            "lookback": "1h",
            "limit": "20",
        }
    )
    # Envoy exports its spans in batches, seconds after the pools: a trace found before
    # its Envoy span arrived is listed by the pool's span (CI saw one). Search again until
    # every result has its root, or the wait ends (and the assertion below says which).
    deadline = time.monotonic() + 20
    while True:
        page.goto(f"{shared_ui.jaeger_url}/search?{query}")
        titles = page.wait_for(
            "[...document.querySelectorAll('.ResultItem')].map(e => e.innerText)",
            what="search results for pricing.delayed=true",
        )
        if all(f"envoy: {OFFER_OPERATION}" in t for t in titles) or time.monotonic() > deadline:
            break
        time.sleep(1)
    # (for the screenshot: the duration plot draws its points after the list)
    with contextlib.suppress(BrowserError):
        page.wait_for("document.querySelector('.recharts-scatter-symbol')", timeout_s=5)
        time.sleep(1)
    path = page.screenshot(tmp_path / "jaeger-ui-search.png")
    print(f"\nsearch page screenshot: {path}")
    # Bike offers, listed by their root span (Envoy's), the slow one among them ...
    assert all(f"envoy: {OFFER_OPERATION}" in title for title in titles), titles
    hits = page.evaluate(
        "[...document.querySelectorAll('.ResultItem a[href*=\"/trace/\"]')]"
        ".map(a => a.getAttribute('href').split('/trace/')[1].split('?')[0])"
    )
    assert slow_id in hits, (slow_id, hits)
    # ... and only offers the hub held up.
    for hit_id in set(hits):
        spans = from_jaeger(shared_ui.jaeger_url, trace_id=hit_id)
        (server,) = [s for s in spans if s.service == "pricingservice" and s.kind == "server"]
        assert server.attributes[attributes.DELAYED] is True


def test_trace_page_shows_the_split_and_the_culprit(
    shared_ui: Stack, split_ui: Stack, chromium: str, tmp_path: Path
) -> None:
    trace_id, call = offer_trace(shared_ui)
    with Browser(chromium, tmp_path / "profile-shared") as page:
        rows = open_trace(page, shared_ui, trace_id, call)
        detail = page.evaluate(DETAIL_JS)
        shared_png = page.screenshot(tmp_path / "jaeger-ui-shared.png")
        # The call's wait as a span of its own, opened (Jaeger opens the path to it):
        # who held the loop meanwhile.
        assert shared_ui.jaeger_url is not None
        (wait,) = [
            s
            for s in from_jaeger(shared_ui.jaeger_url, trace_id=trace_id)
            if s.parent_id == call.span_id and s.name == attributes.SPAN_LOOP_WAIT
        ]
        wait_rows = open_trace(page, shared_ui, trace_id, wait)
        wait_detail = page.evaluate(DETAIL_JS)
        wait_png = page.screenshot(tmp_path / "jaeger-ui-wait-spans.png")
    print(f"\nshared-layout trace screenshot: {shared_png}")
    print(f"the wait drawn as child spans: {wait_png}")

    # The timeline: Envoy's span, the pool's server span, the three upstream calls ...
    assert rows[0] == {"service": "envoy", "operation": OFFER_OPERATION}, rows
    assert rows[1] == {"service": "pricingservice", "operation": OFFER_OPERATION}, rows
    calls = [r["operation"] for r in rows[2:] if r["operation"] not in WAIT_SPANS]
    assert sorted(calls) == UPSTREAM_CALLS, rows
    assert {r["service"] for r in rows[2:]} == {"pricingservice"}, rows
    # ... the delayed call's wait drawn right under it: the network, then the loop,
    # which names who held the loop.
    at = [r["operation"] for r in wait_rows].index(call.name)
    assert [r["operation"] for r in wait_rows[at + 1 : at + 3]] == list(WAIT_SPANS), wait_rows
    assert attributes.SCHEDULING_CULPRITS in wait_detail and HOG_ROUTE in wait_detail
    # The span detail: the delay and who caused it.
    assert call.name in detail
    assert attributes.SCHEDULING_DELAY in detail
    assert attributes.NETWORK_DURATION in detail
    assert HOG_ROUTE in detail, detail

    # The same offer in the split layout, under the same hogs, for the side-by-side.
    split_id, split_call = offer_trace(split_ui)
    with Browser(chromium, tmp_path / "profile-split") as page:
        split_rows = open_trace(page, split_ui, split_id, split_call)
        split_detail = page.evaluate(DETAIL_JS)
        split_png = page.screenshot(tmp_path / "jaeger-ui-split.png")
    assert sum(r["operation"] not in WAIT_SPANS for r in split_rows) == 5, split_rows
    assert attributes.SCHEDULING_DELAY in split_detail
    assert HOG_ROUTE not in split_detail  # the io pool runs no rideshare quote

    both = stacked(
        [
            (
                shared_png,
                f"shared layout: {caption(shared_ui, trace_id, call)}, caused by {HOG_ROUTE}",
            ),
            (split_png, f"split layout: {caption(split_ui, split_id, split_call)}"),
        ],
        tmp_path / "jaeger-ui-shared-vs-split.png",
    )
    print(f"shared vs split screenshot: {both}")


def test_a_slow_kept_trace_opens_without_warnings(
    shared_ui: Stack, page: Browser, tmp_path: Path
) -> None:
    """A request Envoy did not sample, kept because it was slow: its trace has no Envoy
    span, and Jaeger shows it whole (no missing parent), saying why it was kept."""
    assert shared_ui.jaeger_url is not None
    trace_id = f"{random.getrandbits(128):032x}"
    # Sent to the pool as Envoy forwards an unsampled request, slower than the offer's
    # slow threshold (half its 500 ms timeout) by the upstreams' latency.
    fixed_latency(shared_ui, 300)
    try:
        fetch(
            f"{shared_ui.pool_url('shared')}/v1/offers/bike?{OFFER_QUERY}",
            headers={"traceparent": f"00-{trace_id}-{random.getrandbits(64):016x}-00"},
            timeout_s=10,
        )
    finally:
        fixed_latency(shared_ui, D_MS)
    spans = jaeger_api.wait_for_spans(
        shared_ui.jaeger_url,
        lambda spans: any(s.kind == "server" for s in spans),
        15,
        trace_id=trace_id,
    )
    (server,) = [s for s in spans if s.kind == "server"]
    assert server.attributes[attributes.TRACE_REASON] == "slow"
    assert server.parent_id is None  # the root: Envoy's span was never exported
    # What Jaeger's UI reads: no warning on any span ...
    (trace,) = jaeger_api.v1(shared_ui.jaeger_url, f"/api/traces/{trace_id}")
    assert [s.get("warnings") for s in trace["spans"] if s.get("warnings")] == []
    # ... and what it shows: the server span as the root, its detail without "Warnings".
    rows = open_trace(page, shared_ui, trace_id, server, min_rows=1)
    assert rows[0] == {"service": "pricingservice", "operation": OFFER_OPERATION}, rows
    detail = page.evaluate(DETAIL_JS)
    path = page.screenshot(tmp_path / "jaeger-ui-slow-kept.png")
    print(f"\nslow-kept trace screenshot: {path}")
    assert "Warnings" not in detail, detail
    assert "Warnings" not in page.evaluate("document.body.innerText")


def caption(stack: Stack, trace_id: str, call: Span) -> str:
    assert stack.jaeger_url is not None
    spans = from_jaeger(stack.jaeger_url, trace_id=trace_id)
    offer_ms = max(s.duration_us for s in spans) / 1000
    network_ms = float(call.attributes[attributes.NETWORK_DURATION]) * 1000
    return (
        f"the offer took {offer_ms:.0f} ms; its call {call.name} {network_ms:.0f} ms on the "
        f"network, then {_delay_s(call) * 1000:.1f} ms waiting for the hub"
    )


def stacked(images: list[tuple[Path, str]], out: Path) -> Path:
    """The screenshots one above the other, each under a caption (readable at the
    width a README is shown at)."""
    from PIL import Image, ImageDraw

    opened = [(Image.open(path).convert("RGB"), caption) for path, caption in images]
    caption_px, gap_px = 34, 10
    width = max(img.width for img, _ in opened)
    height = sum(img.height + caption_px + gap_px for img, _ in opened) - gap_px
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    y = 0
    for img, caption in opened:
        draw.text((10, y + 7), caption, fill="black", font_size=20)
        canvas.paste(img, (0, y + caption_px))
        y += img.height + caption_px + gap_px
    canvas.save(out)
    return out
