"""A synthetic large service, for the benchmark and the tests: N routes, a mix of
I/O-heavy and CPU-heavy endpoints, and a Zipf-like load profile.

`synthesize` writes three files into a directory:

- ``routes.toml``: the service's routes.toml (pools, listener, its six routes) and N
  generated routes (``synth.r0001`` at ``/v1/synth/r0001``);
- ``synth.json``: what each endpoint does (the spec) and the truth the benchmark
  scores ``routes suggest`` against: each route's kind, and which CPU-heavy routes
  were placed in the io pool on purpose;
- ``profile.json``: each endpoint's share of the traffic (Zipf, exponent
  ``ZIPF_S``: a few routes carry most of it).

The service's own endpoints (``pricing.web.views.ENDPOINTS``) are untouched: a pool serves
the synthetic ones only when it runs the benchmark's app entry, ``bench.pool_app``, with
``synth.json``: that entry calls :func:`endpoints` with the spec and hands the views to
the service's factory (``create_app(extra_endpoints=...)``).

An I/O-heavy endpoint makes one to four upstream calls to the simulator: up to three in
parallel (one per upstream: vehicles, routing, promotions, each with its own latency
distribution in simulator.toml), a fourth after them, as a follow-up. A CPU-heavy one
burns ``cpu_ms`` of this thread's CPU on the hub, as a real handler computing would.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from routing.load import load_routes
from routing.model import Route, RouteConfig
from routing.write import write_routes

ROUTES_FILE: Final = "routes.toml"
SPEC_FILE: Final = "synth.json"
PROFILE_FILE: Final = "profile.json"
#: Popularity of the route of rank r (1-based) is proportional to 1 / r**ZIPF_S.
ZIPF_S: Final = 1.1
#: Shares of the kinds, and of CPU-heavy routes placed in the io pool on purpose.
CPU_SHARE: Final = 0.3
MISPLACED_SHARE: Final = 0.25
#: CPU per request of a CPU-heavy endpoint, milliseconds (tens of ms: "tens of ms" of
#: the issue; rideshare quotes measure 25 ms).
CPU_MS_RANGE: Final = (10, 60)
IO_TIMEOUT_MS: Final = 1000
CPU_TIMEOUT_MS: Final = 3000
#: The simulator's upstreams, and what an I/O endpoint asks each.
UPSTREAM_PATHS: Final = {
    "vehicles": "/vehicles/v1/nearby?lat=37.77&lng=-122.42&mode=bike&limit=5",
    "routing": "/routing/v1/eta?origin=37.77,-122.42&destination=37.79,-122.40&mode=bike",
    "promotions": "/promotions/v1/active?user_id=synth&mode=bike",
}
HEADER: Final = (
    "# A synthetic service, written by `pricingctl routes synth` (bench.synth); "
    "do not edit.\n# Its endpoints are served by the benchmark's app entry (bench.pool_app)."
)


@dataclass(frozen=True)
class Synth:
    """What `synthesize` wrote."""

    routes_path: Path
    spec_path: Path
    profile_path: Path
    config: RouteConfig
    spec: Mapping[str, Any]
    profile: Mapping[str, float]

    @property
    def misplaced(self) -> list[str]:
        """Endpoints of CPU-heavy routes placed in the io pool on purpose."""
        return list(self.spec["truth"]["misplaced"])

    def kind(self, endpoint: str) -> str:
        return str(self.spec["endpoints"][endpoint]["kind"])


def endpoint_name(index: int) -> str:
    return f"synth.r{index:04d}"


def synthesize(n_routes: int, seed: int, out: Path, base: RouteConfig | None = None) -> Synth:
    """N routes, their spec and their load profile, written into *out*. The same seed
    gives the same service. *base* gives pools, listener and meta (default routes.toml);
    its routes stay (the service's own endpoints, in their pools), the N come after."""
    if n_routes < 4:
        raise ValueError(f"--routes must be at least 4 (one of each kind and pool), got {n_routes}")
    base = base or load_routes()
    rng = random.Random(seed)
    pools = {p.name for p in base.pools}
    if not {"cpu", "io"} <= pools:
        raise ValueError(f"{base.source}: the synthetic service needs pools 'cpu' and 'io'")
    simulated = _simulated_latencies()
    n_cpu = max(2, round(n_routes * CPU_SHARE))
    cpu_indices = set(rng.sample(range(1, n_routes + 1), n_cpu))
    misplaced = set(rng.sample(sorted(cpu_indices), max(1, round(n_cpu * MISPLACED_SHARE))))
    routes: list[Route] = []
    endpoints: dict[str, dict[str, Any]] = {}
    for i in range(1, n_routes + 1):
        name = endpoint_name(i)
        if i in cpu_indices:
            endpoints[name] = {"kind": "cpu", "cpu_ms": rng.randint(*CPU_MS_RANGE)}
            pool, timeout_ms = ("io" if i in misplaced else "cpu"), CPU_TIMEOUT_MS
        else:
            upstreams = list(UPSTREAM_PATHS)
            n_calls = rng.randint(1, 4)
            first = rng.sample(upstreams, min(n_calls, 3))
            stages = [first] + ([[rng.choice(upstreams)]] if n_calls == 4 else [])
            endpoints[name] = {
                "kind": "io",
                "stages": stages,
                "latency": {u: simulated[u] for stage in stages for u in stage},
            }
            pool, timeout_ms = "io", IO_TIMEOUT_MS
        routes.append(Route(name, f"/v1/synth/r{i:04d}", ("GET",), pool, timeout_ms))
    config = replace(base, routes=(*base.routes, *routes))
    ranked = [r.endpoint for r in routes]
    rng.shuffle(ranked)
    weights = [1 / (rank**ZIPF_S) for rank in range(1, len(ranked) + 1)]
    total = sum(weights)
    profile = {e: w / total for e, w in zip(ranked, weights, strict=True)}
    spec = {
        "seed": seed,
        "endpoints": endpoints,
        "truth": {"misplaced": sorted(endpoint_name(i) for i in misplaced)},
    }
    out.mkdir(parents=True, exist_ok=True)
    routes_path = out / ROUTES_FILE
    config = write_routes(config, routes_path, HEADER)
    spec_path, profile_path = out / SPEC_FILE, out / PROFILE_FILE
    spec_path.write_text(json.dumps(spec, indent=1, sort_keys=True), encoding="utf-8")
    profile_path.write_text(json.dumps(profile, indent=1), encoding="utf-8")
    return Synth(routes_path, spec_path.resolve(), profile_path, config, spec, profile)


def _simulated_latencies() -> dict[str, dict[str, Any]]:
    """Each upstream's latency distribution in simulator.toml (the truth of the calls)."""
    from simulator.model import load_config
    from stack.launch import PROJECT_ROOT

    config = load_config(PROJECT_ROOT / "simulator.toml")
    return {name: config.upstreams[name].latency.to_dict() for name in UPSTREAM_PATHS}


def load_synth(directory: Path) -> Synth:
    """A synthetic service `synthesize` wrote earlier."""
    spec_path = directory / SPEC_FILE
    return Synth(
        directory / ROUTES_FILE,
        spec_path.resolve(),
        directory / PROFILE_FILE,
        load_routes(directory / ROUTES_FILE),
        json.loads(spec_path.read_text(encoding="utf-8")),
        json.loads((directory / PROFILE_FILE).read_text(encoding="utf-8")),
    )


# --- in the pool: the generic views --------------------------------------------------


def endpoints(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Endpoint name -> view factory, for each endpoint of the spec (called by
    ``bench.pool_app`` in the pool, and by ``routes-scale``'s check)."""
    out: dict[str, Any] = {}
    for name, body in spec["endpoints"].items():
        if body["kind"] == "cpu":
            out[name] = _cpu_view(float(body["cpu_ms"]))
        else:
            out[name] = _io_view([list(stage) for stage in body["stages"]])
    return out


def burn_cpu(ms: float) -> None:
    """Run on this thread's CPU for *ms* milliseconds (CPU time, not wall time: a busy
    machine makes it last longer, as it would a real computation)."""
    end = time.thread_time() + ms / 1000
    x = 0
    while time.thread_time() < end:
        for i in range(2000):
            x ^= i * i


def _cpu_view(cpu_ms: float) -> Any:
    from pricing.web.views import json_response

    def factory(route: Route) -> Any:
        def view() -> Any:
            burn_cpu(cpu_ms)
            return json_response({"endpoint": route.endpoint, "cpu_ms": cpu_ms})

        return view

    return factory


def _io_view(stages: list[list[str]]) -> Any:
    from flask import current_app

    from pricing.domain.errors import UpstreamFailure, UpstreamUnavailable
    from pricing.upstream.gateway import UPSTREAMS, Call
    from pricing.web.admission import current_deadline
    from pricing.web.views import json_response

    def factory(route: Route) -> Any:
        def view() -> Any:
            gateway = current_app.extensions["pricing.gateway"]
            calls = 0
            for stage in stages:
                answers = gateway.fetch_all(
                    [Call(u, UPSTREAM_PATHS[u]) for u in stage], current_deadline()
                )
                for answer in answers.values():
                    if isinstance(answer, UpstreamFailure) and UPSTREAMS[answer.upstream].required:
                        raise UpstreamUnavailable(answer)
                calls += len(answers)
            return json_response({"endpoint": route.endpoint, "calls": calls})

        return view

    return factory
