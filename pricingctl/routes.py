"""`pricingctl routes ...`: render envoy.yaml, check the config against the app, and
suggest where each endpoint should run from what the pools measured."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from pricingctl import argtypes
from routing.envoy import CDS_FILE, DEFAULT_XDS_DIR, LDS_FILE, render_envoy, render_xds
from routing.load import DEFAULT_ROUTES_PATH, load_routes
from routing.model import Layout, RouteConfig
from routing.suggest import Thresholds, render_diff
from stack.launch import DEFAULT_RUN_DIR
from tracing.settings import DEFAULT_SPAN_FILE

if TYPE_CHECKING:
    from routing.suggest import Suggestion
    from tracing.readback.usage import RouteUsage

DEFAULT_ENVOY_PATH = DEFAULT_ROUTES_PATH.parent / "envoy.yaml"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    routes = subparsers.add_parser("routes", help="render and check the route config")
    # After the action like every other sub-command (`routes check --config F`); still
    # accepted before it. SUPPRESS: an action without the flag keeps the parent's value.
    argtypes.add_config_flag(routes, None)
    sub = routes.add_subparsers(dest="routes_command", required=True)

    render = sub.add_parser("render", help="write envoy.yaml from the route config")
    argtypes.add_config_flag(render, argparse.SUPPRESS)
    render.add_argument("--layout", choices=[x.value for x in Layout], default="split")
    render.add_argument(
        "--out", type=argtypes.output, default=None, help="the file to write (default: envoy.yaml)"
    )
    render.add_argument(
        "--check", action="store_true", help="exit 1 if the file differs from a fresh render"
    )
    render.add_argument(
        "--xds-dir",
        type=argtypes.path,
        default=None,
        help="also write the listeners and clusters (lds.yaml, cds.yaml) the bootstrap "
        f"reads, e.g. {DEFAULT_XDS_DIR} (`pricingctl up` renders its own)",
    )
    render.set_defaults(handler=_render)

    check = sub.add_parser("check", help="check the route config against the Flask endpoints")
    argtypes.add_config_flag(check, argparse.SUPPRESS)
    check.set_defaults(handler=_check)

    apply = sub.add_parser(
        "apply", help="apply the route config to the running stack, without failing a request"
    )
    apply.add_argument(
        "--config",
        type=argtypes.routes_file,
        default=argparse.SUPPRESS,
        help="route config (default: the one the running stack was started with)",
    )
    apply.add_argument(
        "--run-dir", type=argtypes.path, default=DEFAULT_RUN_DIR, help="the running stack's run dir"
    )
    apply.set_defaults(handler=_apply)

    _add_suggest(sub)

    synth = sub.add_parser(
        "synth",
        help="write a synthetic service of N routes (routes.toml, its endpoints' spec, a "
        "Zipf load profile) for the benchmark and the tests",
    )
    argtypes.add_config_flag(synth, argparse.SUPPRESS)
    synth.add_argument(
        "--routes", type=argtypes.whole(4, 5000), required=True, help="how many routes (4-5000)"
    )
    synth.add_argument(
        "--seed", type=argtypes.seed, default=1, help="the same seed, the same service"
    )
    synth.add_argument("--out", type=argtypes.output, required=True, help="directory to write into")
    synth.set_defaults(handler=_synth)


def _add_suggest(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    suggest = sub.add_parser(
        "suggest",
        help="propose each endpoint's pool and each pool's size from measurements; "
        "exit 0: no change, 1: a change is proposed",
    )
    argtypes.add_config_flag(suggest, argparse.SUPPRESS)
    source = suggest.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--from-metrics",
        nargs="+",
        type=argtypes.metrics_url,
        metavar="URL",
        help="the pools' /metrics URLs (e.g. http://127.0.0.1:8102/metrics), scraped "
        "twice, --window apart",
    )
    source.add_argument(
        "--from-jaeger", type=argtypes.jaeger_url, metavar="URL", help="Jaeger's query API"
    )
    source.add_argument(
        "--from-spans",
        type=argtypes.span_file,
        nargs="?",
        const=DEFAULT_SPAN_FILE,
        metavar="FILE",
        help=f"an OTLP JSON-lines span file (default {DEFAULT_SPAN_FILE})",
    )
    suggest.add_argument(
        "--window",
        type=argtypes.number("seconds", 0.0, 86_400.0, above=True),
        default=15.0,
        help="seconds between two scrapes (default 15)",
    )
    suggest.add_argument(
        "--lookback",
        type=argtypes.lookback,
        default="15m",
        help="how far back Jaeger looks (default 15m)",
    )
    suggest.add_argument(
        "--limit",
        type=argtypes.limit,
        default=2000,
        help="traces to read from Jaeger (default 2000)",
    )
    suggest.add_argument(
        "--sample-percent",
        type=argtypes.number("percent", 0.0, 100.0, above=True),
        default=None,
        help="share of requests the spans cover (default: the config's [tracing])",
    )
    suggest.add_argument(
        "--rates",
        type=argtypes.rates(),
        default={},
        metavar="ENDPOINT=RPS,...",
        help="size for these rates instead of the measured ones (offers.rideshare=40,...)",
    )
    _threshold_flags(suggest)
    suggest.add_argument(
        "--write", action="store_true", help="write the suggested config to --config"
    )
    suggest.add_argument(
        "--json", action="store_true", help="the evidence, sizing and diff as one JSON document"
    )
    suggest.set_defaults(handler=_suggest)


def _threshold_flags(suggest: argparse.ArgumentParser) -> None:
    """What makes a route CPU-heavy, and how busy the sizing keeps a pool."""
    defaults = Thresholds()
    suggest.add_argument(
        "--cpu-heavy-ms",
        type=argtypes.number("milliseconds", 0.0, 60_000.0, above=True),
        default=defaults.cpu_heavy_ms,
        help=f"CPU per request that makes a route CPU-heavy (default {defaults.cpu_heavy_ms:g})",
    )
    suggest.add_argument(
        "--target-utilisation",
        type=argtypes.number("a share of capacity", 0.0, 1.0, above=True),
        default=defaults.target_utilisation,
        help=f"share of capacity to keep busy (default {defaults.target_utilisation:g})",
    )
    suggest.add_argument(
        "--min-requests",
        type=argtypes.whole(1, 10**9),
        default=defaults.min_requests,
        help=f"fewer requests measured: the route stays (default {defaults.min_requests})",
    )


def _load(args: argparse.Namespace) -> RouteConfig:
    return load_routes(args.config)


def _render(args: argparse.Namespace) -> int:
    config = _load(args)
    layout = Layout(args.layout)
    default_out = (
        DEFAULT_ENVOY_PATH
        if layout is Layout.SPLIT
        else (DEFAULT_ENVOY_PATH.with_name("envoy.shared.yaml"))
    )
    output: Path = args.out or default_out
    text = render_envoy(config, layout)
    if args.check:
        try:
            current = output.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = None
        if current != text:
            print(
                f"pricingctl: {output} is stale; run `pricingctl routes render` to regenerate it",
                file=sys.stderr,
            )
            return 1
        print(f"{output} is up to date")
        return 0
    output.write_text(text, encoding="utf-8")
    print(f"wrote {output} ({layout.value} layout, {len(config.routes)} routes)")
    if args.xds_dir is not None:
        from stack.envoy import write_xds

        write_xds(args.xds_dir, render_xds(config, layout))
        print(f"wrote {args.xds_dir / LDS_FILE} and {args.xds_dir / CDS_FILE}")
    return 0


def _endpoint_problems(config: RouteConfig) -> list[str]:
    # The app's endpoints are handed down: routing is pure data and imports no app.
    from pricing.web.views import ENDPOINTS, META_VIEWS
    from routing.check import check_endpoints
    from tracing import metrics

    return check_endpoints(config, set(ENDPOINTS), {*META_VIEWS, metrics.ENDPOINT})


def _check(args: argparse.Namespace) -> int:
    config = _load(args)
    problems = _endpoint_problems(config)
    for problem in problems:
        print(f"pricingctl: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"{len(config.routes)} routes, {len(config.pools)} pools: every endpoint has one pool")
    return 0


def _apply(args: argparse.Namespace) -> int:
    """Refused in one line, before anything changes, when the config is invalid (the
    loader, the app's endpoints, Envoy's validate mode); otherwise applied live."""
    from pricingctl.reload import running_stack
    from stack.ops import OpsError, apply_routes, exclusive

    running = running_stack(args.run_dir)
    if running is None:
        return 1
    # The file the stack was started from, unless told otherwise: `up --config X` then
    # `routes apply` applies X (edited), not routes.toml.
    source = args.config if args.config is not None else running.source_config
    config = load_routes(source)  # a broken file is one line from main (RouteConfigError)
    problems = _endpoint_problems(config)
    if problems:
        print(f"pricingctl: routes apply: {problems[0]}; nothing changed", file=sys.stderr)
        return 1
    print(f"routes apply: {config.source}", flush=True)
    try:
        with exclusive(running, "routes apply"):
            plan = apply_routes(running, config, lambda line: print(line, flush=True))
    except OpsError as exc:
        print(f"pricingctl: {exc}", file=sys.stderr)
        return 1
    moved = ", ".join(f"{e} {a} -> {b}" for e, (a, b) in plan.moved.items()) or "no endpoint moved"
    print(f"routes applied ({moved})")
    return 0


def _synth(args: argparse.Namespace) -> int:
    from bench.synth import synthesize

    try:
        made = synthesize(args.routes, args.seed, args.out, _load(args))
    except ValueError as exc:
        print(f"pricingctl: {exc}", file=sys.stderr)
        return 1
    kinds = [body["kind"] for body in made.spec["endpoints"].values()]
    print(
        f"wrote {made.routes_path}, {made.spec_path.name} and {made.profile_path.name} in "
        f"{args.out}: {kinds.count('io')} I/O-heavy and {kinds.count('cpu')} CPU-heavy routes, "
        f"{len(made.misplaced)} of them in the io pool on purpose"
    )
    print(
        "its endpoints are the benchmark's (bench.pool_app serves them): "
        "`pricingctl bench routes-scale` starts and measures such a service"
    )
    return 0


# Exit codes of `suggest`: CI fails a build on 1 (a change is proposed), and must not
# mistake "could not measure" for it.
NO_CHANGE, CHANGE, CANNOT_MEASURE = 0, 1, 2


def _measure(args: argparse.Namespace, config: RouteConfig) -> tuple[list[RouteUsage], str]:
    """What the pools measured, from the source the flags name, and that source in
    words. SpanSourceError / UsageSourceError when it cannot be read."""
    from tracing.readback.spans import from_file, from_jaeger
    from tracing.readback.usage import usage_from_scrapes, usage_from_spans

    sample = (
        args.sample_percent if args.sample_percent is not None else config.tracing.sample_percent
    ) / 100
    if args.from_metrics:
        print(
            f"scraping {len(args.from_metrics)} pool(s) twice, {args.window:g} s apart ...",
            file=sys.stderr,
        )
        measured = usage_from_scrapes(args.from_metrics, args.window)
        return measured, f"/metrics of {', '.join(args.from_metrics)} over {args.window:g} s"
    if args.from_jaeger:
        spans = from_jaeger(args.from_jaeger, limit=args.limit, lookback=args.lookback)
        source = f"spans from Jaeger at {args.from_jaeger} ({100 * sample:g} % sampled)"
        return usage_from_spans(spans, sample), source
    source = f"spans in {args.from_spans} ({100 * sample:g} % sampled)"
    return usage_from_spans(from_file(args.from_spans), sample), source


def _suggestion_as_dict(suggestion: Suggestion, source: str) -> dict[str, object]:
    """`routes suggest --json`: the evidence, the sizing and the diff the text shows."""
    return {
        "measured": source,
        "config": str(suggestion.config.source),
        "changed": suggestion.changed,
        "routes": [{**asdict(e), "moves": e.moves} for e in suggestion.routes],
        "pools": [asdict(p) for p in suggestion.pools],
        "diff": render_diff(suggestion, Path(suggestion.config.source).name),
    }


def _suggest(args: argparse.Namespace) -> int:
    from routing.suggest import WRITTEN_HEADER, render_evidence, render_sizing
    from routing.suggest import suggest as place
    from routing.write import write_routes
    from tracing.readback.spans import SpanSourceError
    from tracing.readback.usage import UsageSourceError

    config = _load(args)
    thresholds = Thresholds(
        cpu_heavy_ms=args.cpu_heavy_ms,
        target_utilisation=args.target_utilisation,
        min_requests=args.min_requests,
    )
    try:
        measured, source = _measure(args, config)
    except (UsageSourceError, SpanSourceError) as exc:
        print(f"pricingctl: {exc}", file=sys.stderr)
        return CANNOT_MEASURE
    if not measured:
        print(f"pricingctl: no requests measured in {source}", file=sys.stderr)
        return CANNOT_MEASURE
    try:
        suggestion = place(config, measured, thresholds, args.rates)
    except ValueError as exc:
        print(f"pricingctl: {exc}", file=sys.stderr)
        return CANNOT_MEASURE
    moves = ", ".join(f"{e.endpoint} {e.pool} -> {e.proposed_pool}" for e in suggestion.moves)
    summary = f"moves: {moves}" if moves else "no moves, pool sizes only"
    target = Path(config.source)
    if args.write and suggestion.changed:
        write_routes(suggestion.proposed, target, WRITTEN_HEADER)
    if args.json:
        doc = _suggestion_as_dict(suggestion, source)
        doc["written"] = str(target) if args.write and suggestion.changed else None
        print(json.dumps(doc, indent=1))
        return CHANGE if suggestion.changed else NO_CHANGE
    print(f"measured: {source}")
    print(render_evidence(suggestion))
    print()
    print(render_sizing(suggestion))
    print()
    if not suggestion.changed:
        print(f"no change proposed to {config.source}")
        return NO_CHANGE
    print(render_diff(suggestion, target.name), end="")
    if args.write:
        print(
            f"wrote {target} ({summary}); next: `pricingctl routes render` for envoy.yaml, "
            "then restart the stack (or `routes apply`)"
        )
    else:
        print(f"change proposed ({summary}); --write writes it to {config.source}")
    return CHANGE
