"""`pricingctl bench routes-scale`: the service grown to hundreds of routes
(`bench.synth`) against the six-route service, in the split layout, in one run.

Reported, for each service: `routes render` (the bootstrap and the listeners and
clusters), `routes check` and `envoy --mode validate` time; Envoy's config size; the
time from starting the stack to every pool ready; the CPU of the io pool per offer under
the same offers-only load (what the per-route accounting costs a request when the pool
knows hundreds of routes). For the synthetic service only: each pool's `/metrics` size
and scrape time after every route was served (prometheus_client multiprocess), `routes
suggest`'s time and its placement scored against the truth (CPU-heavy routes placed in
the io pool on purpose: how many it moves to the cpu pool, and how many I/O routes it
moves), and `routes apply` time for one moved route.

Every figure is of this machine at that moment: the offers' CPU is compared as a ratio
of the two services measured minutes apart in the same run.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from bench import pool_app
from bench.loadgen import run_open_loop
from bench.run import BenchError
from bench.schedule import mixed_schedule
from bench.spans import env_for
from bench.synth import Synth, synthesize
from bench.traffic import OFFER_KINDS, PreparedRequest, Target, build_request, targets_for
from routing.check import check_endpoints
from routing.envoy import envoy_config, render_envoy, render_xds
from routing.load import load_routes
from routing.model import Layout, RouteConfig
from routing.suggest import Thresholds, suggest
from routing.write import write_routes
from stack.envoy import validate
from stack.launch import Stack
from stack.ops import apply_routes
from stack.procfs import process_cpu_s, tree
from stack.procs import StartError
from toolkit.fetch import fetch
from tracing.readback.usage import usage_from_scrapes

#: Offers/s of the offers-only load both services get (the per-offer CPU).
OFFERS_RPS = 40.0
OFFERS_S = 20.0
#: The synthetic load while `suggest` scrapes: the Zipf profile at ZIPF_RPS, plus a floor
#: that gives every route 2 x MIN_REQUESTS requests in the window on average (Poisson:
#: fewer than MIN_REQUESTS for 0.5 % of the routes), so a rare misplaced route is
#: measured too. MIN_REQUESTS is suggest's own default (`--min-requests`): a
#: class judged from a handful of requests on a busy machine is noise (at 3, one I/O
#: route of 0.1 % of the traffic crossed the CPU-heavy threshold).
ZIPF_RPS = 20.0
MIN_REQUESTS = Thresholds().min_requests
WINDOW_S = 60.0
#: Before the window, every route is asked twice on average (over WARM_S seconds): a route's
#: first request pays one-off costs (its first upstream connections) that are not its
#: class.
WARM_S = 10.0
SCRAPES = 3
_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ScaleSettings:
    routes: int = 300
    seed: int = 1
    offers_s: float = OFFERS_S
    window_s: float = WINDOW_S
    #: Apply one moved route (a rolling restart of both pools: ~20 s here).
    apply: bool = True


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def config_figures(config: RouteConfig, synth: Synth | None = None) -> dict[str, Any]:
    """Render, check and validate times, and Envoy's config size, for *config* (its
    endpoints: the service's, and *synth*'s)."""
    from pricing.web.views import ENDPOINTS, META_VIEWS
    from tracing import metrics

    def render() -> int:
        files = render_xds(config, Layout.SPLIT)
        return len(render_envoy(config, Layout.SPLIT)) + sum(len(t) for t in files.values())

    size, render_s = _timed(render)
    known = {*ENDPOINTS, *(synth.spec["endpoints"] if synth is not None else ())}

    def check() -> list[str]:
        return check_endpoints(config, known, {*META_VIEWS, metrics.ENDPOINT})

    problems, check_s = _timed(check)
    if problems:
        raise BenchError(f"routes check: {problems[0]}")
    document = yaml.safe_dump(envoy_config(config, Layout.SPLIT), sort_keys=False)
    verdict, validate_s = _timed(lambda: validate(document))
    if verdict is not None:
        raise BenchError(f"envoy --mode validate: {verdict}")
    return {
        "routes": len(config.routes),
        "render_s": render_s,
        "check_s": check_s,
        "validate_s": validate_s,
        "envoy_config_bytes": size,
    }


def _pool_cpu_s(stack: Stack, pool: str) -> float:
    pid = stack.procs[stack.replica_name(pool, 0)].pid
    return sum(process_cpu_s(p) or 0.0 for p in tree(pid))


def _load(stack: Stack, targets: Sequence[Target], rates: Mapping[str, float], s: float) -> int:
    """Open-loop load for *s* seconds; the number of 2xx answers."""
    schedule = mixed_schedule(rates, s, seed=1)
    samples, _ = run_open_loop(schedule, targets, time.monotonic() + 0.2, _TIMEOUT_S)
    return sum(1 for status in samples.status if 200 <= status < 300)


def offers_cpu(stack: Stack, offers_s: float) -> dict[str, float]:
    """The io pool's CPU per answered offer, under offers alone."""
    listener = stack.config.listener.address
    targets = targets_for(stack.config, listener.host, listener.port, OFFER_KINDS)
    rates = {kind: OFFERS_RPS / len(OFFER_KINDS) for kind in OFFER_KINDS}
    _load(stack, targets, rates, 3.0)  # warm up: connections, first requests
    before = _pool_cpu_s(stack, "io")
    answered = _load(stack, targets, rates, offers_s)
    used = _pool_cpu_s(stack, "io") - before
    if not answered:
        raise BenchError("no offer was answered")
    return {"offers": answered, "io_cpu_ms_per_offer": 1000 * used / answered}


def synth_targets(stack: Stack, synth: Synth) -> tuple[Target, ...]:
    listener = stack.config.listener.address
    hostport = f"{listener.host}:{listener.port}"
    out = []
    for route in stack.config.app_routes():
        if route.endpoint in synth.profile:
            raw = build_request("GET", route.path, hostport)
            head, _, body = raw.partition(b"\r\n\r\n")
            request = PreparedRequest(head + b"\r\n", body)
            out.append(Target(route.endpoint, listener.host, listener.port, (request,)))
    return tuple(out)


def scrape_figures(url: str) -> dict[str, float]:
    sizes, times = [], []
    for _ in range(SCRAPES):
        started = time.perf_counter()
        body = fetch(url, timeout_s=30).expect_ok().body
        times.append(time.perf_counter() - started)
        sizes.append(len(body))
    return {"metrics_bytes": max(sizes), "scrape_s": statistics.median(times)}


def placement_score(synth: Synth, moves: Mapping[str, str]) -> dict[str, Any]:
    """How many of the misplaced CPU routes `suggest` moves to the cpu pool, and how many
    I/O routes it moves at all."""
    misplaced = set(synth.misplaced)
    found = sorted(e for e, pool in moves.items() if e in misplaced and pool == "cpu")
    io_moved = sorted(e for e in moves if e in synth.spec["endpoints"] and synth.kind(e) == "io")
    return {
        "misplaced": len(misplaced),
        "found": len(found),
        "found_pct": 100 * len(found) / len(misplaced),
        "io_moved": io_moved,
        "other_moves": sorted(set(moves) - misplaced - set(io_moved)),
    }


def _started(config: RouteConfig, run_dir: Path, app: str | None) -> tuple[Stack, float]:
    stack = Stack.on_free_ports(config, Layout.SPLIT, run_dir, extra_env=env_for("full"), app=app)
    try:
        _, up_s = _timed(stack.start)
    except StartError as exc:
        stack.stop()
        raise BenchError(f"the stack did not start: {exc}") from None
    return stack, up_s


def run_service(
    config: RouteConfig, run_dir: Path, settings: ScaleSettings, synth: Synth | None
) -> dict[str, Any]:
    app = pool_app.entry(spec=synth.spec_path) if synth is not None else None
    out = config_figures(config, synth)
    stack, out["up_s"] = _started(config, run_dir, app)
    try:
        out.update(offers_cpu(stack, settings.offers_s))
        if synth is not None:
            out.update(_synth_figures(stack, synth, run_dir, settings))
    finally:
        stack.stop()
    return out


def _synth_figures(
    stack: Stack, synth: Synth, run_dir: Path, settings: ScaleSettings
) -> dict[str, Any]:
    import threading

    targets = synth_targets(stack, synth)
    floor = 2 * MIN_REQUESTS / settings.window_s
    rates = {t.kind: ZIPF_RPS * synth.profile[t.kind] + floor for t in targets}
    urls = [stack.pool_url(p.name) + stack.config.meta.metrics for p in stack.config.pools]
    measured: dict[str, Any] = {}

    def scrape() -> None:
        measured["usage"] = usage_from_scrapes(urls, settings.window_s)

    _load(stack, targets, {t.kind: 2 / WARM_S for t in targets}, WARM_S)
    scraper = threading.Timer(2.0, scrape)
    scraper.start()
    _load(stack, targets, rates, settings.window_s + 6.0)
    scraper.join(timeout=settings.window_s + 60)
    if "usage" not in measured:
        raise BenchError("routes suggest: the pools were not scraped")
    out: dict[str, Any] = {
        "pools": {p.name: scrape_figures(u) for p, u in zip(stack.config.pools, urls, strict=True)}
    }
    thresholds = Thresholds()
    suggestion, out["suggest_s"] = _timed(
        lambda: suggest(stack.config, measured["usage"], thresholds)
    )
    moves = {e.endpoint: e.proposed_pool for e in suggestion.moves}
    out["placement"] = placement_score(synth, moves)
    if settings.apply:
        out["apply_s"] = _apply_one(stack, synth, run_dir)
    return out


def _apply_one(stack: Stack, synth: Synth, run_dir: Path) -> float:
    """`routes apply` of the running config with one misplaced route moved to cpu."""
    moved = synth.misplaced[0]
    wanted = replace(
        stack.config,
        routes=tuple(
            replace(r, pool="cpu") if r.endpoint == moved else r for r in stack.config.routes
        ),
    )
    wanted = write_routes(wanted, run_dir / "apply.toml")
    plan, apply_s = _timed(lambda: apply_routes(stack.running(), wanted, lambda line: None))
    if moved not in plan.moved:
        raise BenchError(f"routes apply did not move {moved}")
    return float(apply_s)


def run_routes_scale(settings: ScaleSettings, run_dir: Path) -> dict[str, Any]:
    base = load_routes()
    synth = synthesize(settings.routes, settings.seed, run_dir / "synth", base)
    six = run_service(base, run_dir / "six", settings, None)
    many = run_service(synth.config, run_dir / "many", settings, synth)
    return {
        "settings": {
            "routes": settings.routes,
            "seed": settings.seed,
            "offers_rps": OFFERS_RPS,
            "offers_s": settings.offers_s,
            "zipf_rps": ZIPF_RPS,
            "window_s": settings.window_s,
        },
        "six": six,
        "many": many,
        "ratios": {
            key: many[key] / six[key]
            for key in ("render_s", "check_s", "validate_s", "envoy_config_bytes", "up_s")
        }
        | {"io_cpu_ms_per_offer": many["io_cpu_ms_per_offer"] / six["io_cpu_ms_per_offer"]},
    }


def write_routes_scale(doc: Mapping[str, Any], out: Path) -> str:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    six, many, ratios = doc["six"], doc["many"], doc["ratios"]
    lines = [
        f"| | six routes | {many['routes']} routes | ratio |",
        "|---|---|---|---|",
        *(
            f"| {label} | {six[key] * scale:.{digits}f} | {many[key] * scale:.{digits}f} "
            f"| {ratios[key]:.2f} |"
            for label, key, scale, digits in (
                ("routes render (ms)", "render_s", 1000, 1),
                ("routes check (ms)", "check_s", 1000, 1),
                ("envoy --mode validate (ms)", "validate_s", 1000, 0),
                ("Envoy config (KB)", "envoy_config_bytes", 1 / 1024, 1),
                ("up to every pool ready (s)", "up_s", 1, 2),
                ("io pool CPU per offer (ms)", "io_cpu_ms_per_offer", 1, 3),
            )
        ),
    ]
    for pool, fig in many["pools"].items():
        lines.append(
            f"| /metrics of {pool} at {many['routes']} routes | | "
            f"{fig['metrics_bytes'] / 1024:.0f} KB, scraped in {fig['scrape_s'] * 1000:.0f} ms | |"
        )
    placement = many["placement"]
    applied = f"; routes apply of one moved route: {many['apply_s']:.1f} s"
    lines += [
        "",
        f"routes suggest: {many['suggest_s'] * 1000:.0f} ms; moved {placement['found']} of "
        f"{placement['misplaced']} misplaced CPU-heavy routes to cpu "
        f"({placement['found_pct']:.0f} %), {len(placement['io_moved'])} I/O route(s) moved"
        + (applied if "apply_s" in many else ""),
    ]
    return "\n".join(lines)
