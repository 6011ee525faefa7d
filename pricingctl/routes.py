"""`pricingctl routes ...`: render envoy.yaml and check the config against the app."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from routing.envoy import CDS_FILE, DEFAULT_XDS_DIR, LDS_FILE, render_envoy, render_xds
from routing.load import DEFAULT_ROUTES_PATH, load_routes
from routing.model import Layout, RouteConfig
from stack.launch import DEFAULT_RUN_DIR

DEFAULT_ENVOY_PATH = DEFAULT_ROUTES_PATH.parent / "envoy.yaml"


def _config_flag(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument(
        "--config", type=Path, default=default, help="route config (default: routes.toml)"
    )


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    routes = subparsers.add_parser("routes", help="render and check the route config")
    # After the action like every other sub-command (`routes check --config F`); still
    # accepted before it. SUPPRESS: an action without the flag keeps the parent's value.
    _config_flag(routes, None)
    sub = routes.add_subparsers(dest="routes_command", required=True)

    render = sub.add_parser("render", help="write envoy.yaml from the route config")
    _config_flag(render, argparse.SUPPRESS)
    render.add_argument("--layout", choices=[x.value for x in Layout], default="split")
    render.add_argument("--output", "-o", type=Path, default=None, help="default: envoy.yaml")
    render.add_argument(
        "--check", action="store_true", help="exit 1 if the file differs from a fresh render"
    )
    render.add_argument(
        "--xds-dir",
        type=Path,
        default=None,
        help="also write the listeners and clusters (lds.yaml, cds.yaml) the bootstrap "
        f"reads, e.g. {DEFAULT_XDS_DIR} (`pricingctl up` renders its own)",
    )
    render.set_defaults(handler=_render)

    check = sub.add_parser("check", help="check the route config against the Flask endpoints")
    _config_flag(check, argparse.SUPPRESS)
    check.set_defaults(handler=_check)

    apply = sub.add_parser(
        "apply", help="apply the route config to the running stack, without failing a request"
    )
    apply.add_argument(
        "--run-dir", type=Path, default=DEFAULT_RUN_DIR, help="the running stack's run dir"
    )
    apply.set_defaults(handler=_apply)


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
    output: Path = args.output or default_out
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
    from pricing.views import ENDPOINTS, META_VIEWS
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
    from stack.ops import OpsError, apply_routes

    config = _load(args)  # a broken file is one line from main (RouteConfigError)
    problems = _endpoint_problems(config)
    if problems:
        print(f"pricingctl: routes apply: {problems[0]}; nothing changed", file=sys.stderr)
        return 2
    running = running_stack(args.run_dir)
    if running is None:
        return 1
    try:
        plan = apply_routes(running, config, lambda line: print(line, flush=True))
    except OpsError as exc:
        print(f"pricingctl: {exc}", file=sys.stderr)
        return 1
    moved = ", ".join(f"{e} {a} -> {b}" for e, (a, b) in plan.moved.items()) or "no endpoint moved"
    print(f"routes applied ({moved})")
    return 0
