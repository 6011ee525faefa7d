"""`pricingctl traces`: where each upstream call's time went, from Jaeger or the span file."""

from __future__ import annotations

import argparse
import json
import sys

from pricingctl import argtypes
from tracing.readback.report import (
    Linker,
    render_examples,
    render_table,
    summarize,
    trace_as_dicts,
    waterfall,
)
from tracing.readback.spans import SpanSourceError, from_file, from_jaeger, jaeger_trace_url
from tracing.settings import DEFAULT_SPAN_FILE

DEFAULT_JAEGER_URL = "http://127.0.0.1:16686"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    traces = subparsers.add_parser(
        "traces",
        help="per endpoint and upstream: network time, scheduling and inbound delay, "
        "their CPU-wait share, culprits",
    )
    source = traces.add_mutually_exclusive_group()
    # A URL here; `up --jaeger` is a mode (auto, on, off). The same source flags as
    # `routes suggest` (--from-jaeger, --from-spans).
    source.add_argument(
        "--from-jaeger",
        type=argtypes.jaeger_url,
        default=DEFAULT_JAEGER_URL,
        metavar="URL",
        help=f"Jaeger query URL to read traces from (default {DEFAULT_JAEGER_URL})",
    )
    source.add_argument(
        "--from-spans",
        type=argtypes.span_file,
        nargs="?",
        const=DEFAULT_SPAN_FILE,
        default=None,
        metavar="FILE",
        help=f"read the OTLP JSON-lines span file instead (default {DEFAULT_SPAN_FILE})",
    )
    traces.add_argument(
        "--trace-id",
        type=argtypes.trace_id,
        help="print one trace as a waterfall, and where its offer's time went",
    )
    traces.add_argument(
        "--service",
        type=argtypes.name,
        help="service.name to read from Jaeger (default: the pools' own, from "
        "OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES, else pricingservice)",
    )
    traces.add_argument(
        "--limit", type=argtypes.limit, default=200, help="traces to read from Jaeger"
    )
    traces.add_argument(
        "--lookback",
        type=argtypes.lookback,
        default="1h",
        help="how far back Jaeger looks (e.g. 15m, 2h)",
    )
    traces.add_argument("--json", action="store_true", help="machine-readable output")
    traces.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.from_spans is not None:
            spans = from_file(args.from_spans, trace_id=args.trace_id)
        else:
            spans = from_jaeger(
                args.from_jaeger,
                service=args.service,
                limit=args.limit,
                lookback=args.lookback,
                trace_id=args.trace_id,
            )
    except SpanSourceError as exc:
        hint = (
            ""
            if args.from_spans is not None
            else " (start it with `pricingctl up`, or use --from-spans)"
        )
        print(f"pricingctl: {exc}{hint}", file=sys.stderr)
        return 1
    link: Linker
    if args.from_spans is not None:
        heading = "slowest trace of each row, slowest first (as a waterfall):"

        def link(trace_id: str, _span_id: str) -> str:
            return f"pricingctl traces --from-spans {args.from_spans} --trace-id {trace_id}"

    else:
        heading = "slowest trace of each row, slowest first (open in Jaeger's UI):"

        def link(trace_id: str, span_id: str) -> str:
            return jaeger_trace_url(args.from_jaeger, trace_id, span_id)

    if args.trace_id:
        if args.json:
            print(json.dumps(trace_as_dicts(spans), indent=1))
        else:
            print(waterfall(spans))
            if args.from_spans is None:
                print(f"in Jaeger's UI: {jaeger_trace_url(args.from_jaeger, args.trace_id)}")
        return 0
    rows = summarize(spans)
    if args.json:
        print(json.dumps({"rows": [r.as_dict(link) for r in rows]}, indent=1))
    else:
        print(render_table(rows))
        examples = render_examples(rows, link, heading)
        if examples:
            print(f"\n{examples}")
    return 0
