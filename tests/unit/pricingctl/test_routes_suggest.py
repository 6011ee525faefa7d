"""`pricingctl routes suggest --from-metrics` against a loopback server that answers
like an io pool hosting the quotes: the evidence table, the diff, the exit codes, and
--write through the one writer."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pricingctl.main import main
from routing.load import load_routes
from routing.write import write_routes
from tests.samples import BIKE_ROUTE, RIDE_ROUTE
from tracing import metric_families as families


class FakePool:
    """Serves 15 quotes/s (30 ms CPU each) and 100 offers/s, since it started."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def text(self) -> str:
        elapsed = time.monotonic() - self.started
        rides, bikes = 15 * elapsed, 100 * elapsed
        base = 'pool="io",pid="4242"'
        return "\n".join(
            [
                f'{families.HANDLER}_count{{{base},route="{RIDE_ROUTE}"}} {rides}',
                f'{families.HANDLER}_sum{{{base},route="{RIDE_ROUTE}"}} {rides * 0.05}',
                f'{families.ROUTE_CPU}{{{base},route="{RIDE_ROUTE}"}} {rides * 0.03}',
                f'{families.HANDLER}_count{{{base},route="{BIKE_ROUTE}"}} {bikes}',
                f'{families.HANDLER}_sum{{{base},route="{BIKE_ROUTE}"}} {bikes * 0.2}',
                f'{families.ROUTE_CPU}{{{base},route="{BIKE_ROUTE}"}} {bikes * 0.002}',
                f'{families.ROUTE_NETWORK}{{{base},route="{BIKE_ROUTE}"}} {bikes * 0.1}',
                f'{families.ROUTE_CULPRIT}{{{base},route="{RIDE_ROUTE}"'
                f',victim="{BIKE_ROUTE}"}} {bikes * 0.05}',
            ]
        )


@pytest.fixture
def pool_url() -> Iterator[str]:
    pool = FakePool()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pool.text().encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def wrong_config(tmp_path: Path) -> Path:
    """The quotes in the io pool; the cpu pool keeps only the API description (a pool
    must serve some route)."""
    config = load_routes()
    moved = tuple(
        replace(r, pool="cpu" if r.endpoint == "meta.openapi" else "io") for r in config.routes
    )
    write_routes(replace(config, routes=moved), tmp_path / "routes.toml")
    return tmp_path / "routes.toml"


def suggest(*argv: str) -> list[str]:
    return ["routes", "suggest", *argv, "--window", "0.5", "--min-requests", "3"]


def test_a_cpu_heavy_route_next_to_the_offers_is_moved_exit_1(
    pool_url: str, wrong_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = wrong_config.read_text()
    assert main(suggest("--from-metrics", pool_url, "--config", str(wrong_config))) == 1
    out = capsys.readouterr().out
    ride = next(line for line in out.splitlines() if line.startswith("offers.rideshare"))
    assert "30.00" in ride and "cpu (move)" in ride  # CPU ms per request
    assert '+pool = "cpu"' in out and "--write writes it" in out
    assert wrong_config.read_text() == before  # nothing changed without --write


def test_write_writes_the_suggestion_and_then_nothing_more_is_proposed(
    pool_url: str, wrong_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = suggest("--from-metrics", pool_url, "--config", str(wrong_config))
    assert main([*argv, "--write"]) == 1
    assert load_routes(wrong_config).route_for_endpoint("offers.rideshare").pool == "cpu"  # type: ignore[union-attr]
    capsys.readouterr()
    assert main(argv) == 0
    assert "no change proposed" in capsys.readouterr().out


def test_an_unreachable_pool_is_exit_2_not_a_proposal(
    wrong_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stack.procs import free_port

    url = f"http://127.0.0.1:{free_port()}/metrics"
    assert main(suggest("--from-metrics", url, "--config", str(wrong_config))) == 2
    assert "cannot scrape" in capsys.readouterr().err


def test_from_spans_reads_the_span_file_the_pools_write(
    wrong_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Server spans as the pools export them (the real exporter): quotes running 30 ms
    on the hub each, offers 2 ms; every request traced."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind

    from tracing import attributes
    from tracing.export import JsonLinesFileExporter

    span_file = tmp_path / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesFileExporter(span_file)))
    tracer = provider.get_tracer("test")
    start = time.time_ns()
    for i in range(40):
        route, running = (RIDE_ROUTE, 0.030) if i % 2 else (BIKE_ROUTE, 0.002)
        span = tracer.start_span(route, kind=SpanKind.SERVER, start_time=start + i * 50_000_000)
        span.set_attributes(
            {
                attributes.TRACE_REASON: "sampled",
                attributes.HANDLER_DURATION: running + 0.1,
                attributes.HANDLER_RUNNING: running,
                attributes.INBOUND_DELAY: 0.001,
            }
        )
        span.end(end_time=start + i * 50_000_000 + int((running + 0.1) * 1e9))
    provider.shutdown()
    argv = ["routes", "suggest", "--config", str(wrong_config), "--from-spans", str(span_file)]
    assert main([*argv, "--sample-percent", "100"]) == 1
    out = capsys.readouterr().out
    ride = next(line for line in out.splitlines() if line.startswith("offers.rideshare"))
    assert "30.00" in ride and "cpu (move)" in ride
    assert "(100 % sampled)" in out


def test_the_benchmark_reads_the_moves_and_hub_waits_from_the_evidence_table(
    pool_url: str, wrong_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pricingctl bench suggest` and tests/integration/test_suggest.py parse this
    table (bench.suggest): a change of its columns must fail here, not there."""
    from bench.suggest import hub_wait_p99_ms, moves

    main(suggest("--from-metrics", pool_url, "--config", str(wrong_config)))
    out = capsys.readouterr().out
    assert moves(out) == {"offers.rideshare": "cpu"}
    # The hub-wait figure is the 7th field, right-aligned under its heading.
    lines = out.splitlines()
    heading = next(line for line in lines if line.startswith("route "))
    end = heading.index("hub wait p99 ms") + len("hub wait p99 ms")
    bike = next(line for line in lines if line.startswith("offers.bike "))
    assert bike[:end].split()[-1] == bike.split()[6] == "-"  # no hub-wait histogram served
    assert hub_wait_p99_ms(out, "offers.bike") is None
    assert hub_wait_p99_ms(out, "offers.nowhere") is None


def test_json_is_one_document_with_the_moves_the_sizing_and_the_diff(
    pool_url: str, wrong_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    argv = suggest("--from-metrics", pool_url, "--config", str(wrong_config), "--json")
    assert main(argv) == 1  # the same exit codes as the text
    doc = json.loads(capsys.readouterr().out)
    routes = {r["endpoint"]: r for r in doc["routes"]}
    assert routes["offers.rideshare"]["proposed_pool"] == "cpu"
    assert routes["offers.rideshare"]["moves"] is True
    assert routes["offers.rideshare"]["cpu_ms"] == pytest.approx(30.0, rel=0.2)
    assert {p["pool"] for p in doc["pools"]} >= {"io", "cpu"}
    assert doc["changed"] is True and '+pool = "cpu"' in doc["diff"]
    assert doc["written"] is None and doc["measured"].startswith("/metrics of ")
