"""`pricingctl deploy ...`: render the compose file and the Kubernetes manifests from the
route config, and size each pool's replicas for a target traffic."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pricingctl import argtypes
from routing.compose import JAEGER_FILE, render_compose
from routing.container import JAEGER_OTLP_GRPC_PORT, JAEGER_OTLP_HTTP_PORT, JAEGER_UI_PORT
from routing.kubernetes import (
    ENVOY_REPLICAS,
    envoy_limits_in_cluster,
    max_replicas,
    render_kubernetes,
)
from routing.load import DEFAULT_ROUTES_PATH, load_routes
from routing.model import RouteConfig
from routing.sizing import TARGET_UTILISATION, Traffic, pool_rates, size
from routing.write import write_atomic

DEPLOY_DIR = DEFAULT_ROUTES_PATH.parent / "deploy"
TARGETS = {"compose": DEPLOY_DIR / "compose", "kubernetes": DEPLOY_DIR / "kubernetes"}
JAEGER_QUERY_GRPC_PORT = 16685


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    deploy = subparsers.add_parser(
        "deploy", help="compose file and Kubernetes manifests from the route config"
    )
    # After the action like `routes` (`deploy size --config F`); still accepted before
    # it. SUPPRESS: an action without the flag keeps the parent's value.
    argtypes.add_config_flag(deploy, None)
    sub = deploy.add_subparsers(dest="deploy_command", required=True)

    render = sub.add_parser("render", help="write deploy/compose or deploy/kubernetes")
    argtypes.add_config_flag(render, argparse.SUPPRESS)
    render.add_argument("target", choices=sorted(TARGETS))
    render.add_argument(
        "--out", type=argtypes.output, default=None, help="directory (default: deploy/TARGET)"
    )
    render.add_argument(
        "--check", action="store_true", help="exit 1 if the folder differs from a fresh render"
    )
    render.add_argument(
        "--upstream-url",
        type=argtypes.url,
        default=None,
        help="real upstreams instead of the simulator",
    )
    _traffic_flags(render)
    render.set_defaults(handler=_render)

    sizing = sub.add_parser("size", help="replicas of each pool for a target traffic")
    argtypes.add_config_flag(sizing, argparse.SUPPRESS)
    _traffic_flags(sizing, required=True)
    sizing.add_argument(
        "--json", action="store_true", help="each pool's rate, replicas and Envoy limits as JSON"
    )
    sizing.set_defaults(handler=_size)


def _traffic_flags(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    parser.add_argument(
        "--offers-per-s",
        type=argtypes.rate,
        default=None,
        required=required,
        help="target offers/s; replicas are sized from each pool's measured worker_rps "
        "(default: the hosts routes.toml lists, at least 2)",
    )
    parser.add_argument(
        "--quotes-per-s",
        type=argtypes.rate_or_zero,
        default=None,
        help="target rideshare quotes/s (default: 10 %% of the offers)",
    )


def _traffic(args: argparse.Namespace) -> Traffic | None:
    if args.offers_per_s is None:
        return None
    quotes = args.quotes_per_s if args.quotes_per_s is not None else args.offers_per_s * 0.1
    return Traffic(args.offers_per_s, quotes)


def jaeger_config() -> str:
    """Jaeger's config inside a container: every port on 0.0.0.0 (its own network)."""
    from stack import jaeger

    return jaeger.config_yaml(
        JAEGER_OTLP_GRPC_PORT,
        JAEGER_OTLP_HTTP_PORT,
        JAEGER_UI_PORT,
        JAEGER_QUERY_GRPC_PORT,
        host="0.0.0.0",
    )


def rendered(
    target: str, config: RouteConfig, traffic: Traffic | None, upstream_url: str | None
) -> dict[str, str]:
    replicas = size(config, traffic)
    if target == "compose":
        files = render_compose(config, replicas, upstream_url)
        files[JAEGER_FILE] = jaeger_config()
        return files
    return render_kubernetes(config, replicas, jaeger_config(), upstream_url)


def _render(args: argparse.Namespace) -> int:
    config = load_routes(args.config)
    files = rendered(args.target, config, _traffic(args), args.upstream_url)
    output: Path = args.out or TARGETS[args.target]
    if args.check:
        current = (
            {p.name: p.read_text(encoding="utf-8") for p in output.iterdir() if p.is_file()}
            if output.is_dir()
            else {}
        )
        if current != files:
            stale = sorted(n for n in {*files, *current} if files.get(n) != current.get(n))
            print(
                f"pricingctl: {output} is stale ({', '.join(stale)}); run "
                f"`pricingctl deploy render {args.target}` to regenerate it",
                file=sys.stderr,
            )
            return 1
        print(f"{output} is up to date")
        return 0
    foreign = _foreign_files(output, files)
    if foreign:
        print(
            f"pricingctl: {output} holds files `pricingctl deploy render` did not write "
            f"({', '.join(foreign)}); nothing was written (give an empty or new directory)",
            file=sys.stderr,
        )
        return 1
    output.mkdir(parents=True, exist_ok=True)
    for old in output.iterdir():
        if old.is_file() and old.name not in files:
            old.unlink()  # a rendering of ours that this config no longer makes
    for name, text in files.items():
        write_atomic(output / name, text)
    print(f"wrote {output} ({len(files)} files)")
    return 0


#: The first line of every file a render writes that it may later remove.
GENERATED_MARK = "# GENERATED by `pricingctl deploy render"


def _foreign_files(output: Path, files: dict[str, str]) -> list[str]:
    """Entries of `output` a render would not own: neither a file it writes now nor one
    it wrote before (marked GENERATED_MARK). A render never deletes those."""
    if not output.is_dir():
        return []
    foreign = []
    for entry in sorted(output.iterdir()):
        if entry.name in files and entry.is_file():
            continue
        try:
            ours = entry.is_file() and entry.read_text(encoding="utf-8").startswith(GENERATED_MARK)
        except (OSError, UnicodeDecodeError):
            ours = False
        if not ours:
            foreign.append(entry.name)
    return foreign


def _pool_sizes(config: RouteConfig, traffic: Traffic) -> list[dict[str, Any]]:
    """Each pool's share of `traffic`, its replicas, and what each Envoy lets through."""
    rates = pool_rates(config, traffic)
    replicas = size(config, traffic)
    out = []
    for pool in config.pools:
        low = replicas[pool.name]
        high = max_replicas(low)
        limits = envoy_limits_in_cluster(pool, low)
        per_host = limits.per_host_in_flight or 0
        out.append(
            {
                "pool": pool.name,
                "rate_per_s": rates[pool.name],
                "worker_rps": pool.worker_rps,
                "workers": pool.workers,
                "replicas": low,
                "max_replicas": high,
                "envoy": {
                    "replicas": ENVOY_REPLICAS,
                    "in_flight_per_pod": per_host,
                    "in_flight_per_pool": limits.in_flight,
                    "pending": limits.pending,
                    "all_in_flight_at_min": ENVOY_REPLICAS * per_host * low,
                    "all_in_flight_at_max": ENVOY_REPLICAS * min(limits.in_flight, per_host * high),
                },
            }
        )
    return out


def _size(args: argparse.Namespace) -> int:
    config = load_routes(args.config)
    traffic = _traffic(args)
    assert traffic is not None
    pools = _pool_sizes(config, traffic)
    if args.json:
        doc = {
            "offers_per_s": traffic.offers_per_s,
            "quotes_per_s": traffic.quotes_per_s,
            "target_utilisation": TARGET_UTILISATION,
            "pools": pools,
        }
        print(json.dumps(doc, indent=1))
        return 0
    print(
        f"{traffic.offers_per_s:g} offers/s, {traffic.quotes_per_s:g} quotes/s "
        f"(each pool at {TARGET_UTILISATION:.0%} of its measured capacity):"
    )
    for p in pools:
        envoy = p["envoy"]
        low, high = p["replicas"], p["max_replicas"]
        print(
            f"  {p['pool']}: {p['rate_per_s']:g} req/s / ({p['worker_rps']} per worker x "
            f"{p['workers']} workers) -> {low} replicas (Kubernetes HPA {low}-{high})\n"
            f"    Envoy, each of {ENVOY_REPLICAS}: {envoy['in_flight_per_pod']} in flight per "
            f"pod, {envoy['in_flight_per_pool']} per pool at most, {envoy['pending']} pending; "
            f"all Envoys admit {envoy['all_in_flight_at_min']} in flight at {low} pods, "
            f"{envoy['all_in_flight_at_max']} at {high}"
        )
    return 0
