"""Prometheus rules rendered from the route config: recording rules per route and per
pool, multi-window multi-burn-rate SLO alerts for each route with an objective, and
cause alerts that name the route to move or shed.

Pure data: ``render_rules`` returns the rule file's document; ``rules_yaml`` its text
for plain Prometheus; ``routing.kubernetes`` wraps the same groups in a PrometheusRule.
Every series the rules read is named in ``toolkit.contract``. The pools' series carry a
``pool`` label (the RED histogram's own, or the scrape target's: the stack's and
compose's scrape configs and the PodMonitors set it on every pool target).

The SLO alerts follow the Google SRE workbook ("Alerting on SLOs", its multiwindow,
multi-burn-rate table): a page when the budget of SLO_PERIOD would be gone in about two
days (burn rate 14.4 over an hour, or 6 over six hours), a ticket on a slower burn (3
over a day, 1 over three days); each long window is confirmed by a short one (a twelfth
of it) so an alert stops soon after the burn does. docs/alerts.md says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from routing.envoy import cluster_name
from routing.model import Route, RouteConfig, route_label
from toolkit.contract import (
    HTTP_METHOD_LABEL,
    HTTP_ROUTE_LABEL,
    HTTP_SERVER_DURATION_SERIES,
    HTTP_STATUS_LABEL,
    LOOP_LAG_SERIES,
    ROUTE_CULPRIT_SERIES,
    ROUTE_HUB_WAIT_SERIES,
    ROUTE_REQUESTS_SERIES,
    SHED_SERIES,
)

#: The period an objective is counted over (its error budget's), in Prometheus's units.
SLO_PERIOD = "30d"
SLO_PERIOD_HOURS = 30 * 24

#: Cause thresholds. Loop lag: the io pool HPA's target (routing.kubernetes), the lag at
#: which it adds replicas. Hub wait: a tenth of an offer's 500 ms cap spent waiting for
#: the loop by one request in a hundred. Shedding: one request in a hundred refused.
LOOP_LAG_P99_LIMIT_S = 0.02
HUB_WAIT_P99_LIMIT_S = 0.05
SHED_RATIO_LIMIT = 0.01

#: Envoy's gauges of a cluster's hosts (its /stats/prometheus names).
ENVOY_HEALTHY = "envoy_cluster_membership_healthy"
ENVOY_MEMBERS = "envoy_cluster_membership_total"
ENVOY_CLUSTER_LABEL = "envoy_cluster_name"

PAGE = "page"
TICKET = "ticket"


@dataclass(frozen=True)
class Burn:
    """One row of the workbook's table: alert when both windows burn faster than
    *factor* times the rate that spends the budget in exactly SLO_PERIOD."""

    severity: str
    long: str
    short: str
    factor: float

    @property
    def days_to_exhaust(self) -> float:
        return SLO_PERIOD_HOURS / 24 / self.factor


#: The workbook's table for a 30-day period: the share of the budget each row spends
#: in its long window is 2 %, 5 %, 10 % and 10 %.
BURNS = (
    Burn(PAGE, "1h", "5m", 14.4),
    Burn(PAGE, "6h", "30m", 6.0),
    Burn(TICKET, "1d", "2h", 3.0),
    Burn(TICKET, "3d", "6h", 1.0),
)
SLO_WINDOWS = tuple(dict.fromkeys(w for b in BURNS for w in (b.short, b.long)))


@dataclass(frozen=True)
class RuleOptions:
    """How fast the rules react. The shipped rules use the defaults; a test that makes an
    incident happen in seconds renders with shorter ones (never shipped)."""

    #: How often Prometheus evaluates each group.
    interval: str = "30s"
    #: The rate window of the per-route and per-pool recording rules and cause alerts.
    window: str = "5m"
    #: How long a cause (held loop, shedding, pool out of Envoy's set) lasts before it
    #: fires: long enough that a deploy or a burst does not.
    cause_for: str = "10m"
    health_for: str = "2m"


def timeout_bound(route: Route, config: RouteConfig) -> str:
    """The RED histogram's ``le`` label at the route's timeout, as the pools write it
    (prometheus_client writes a bound as Python's repr of the float: ``0.5``, ``10.0``).
    The pools' bounds are *config*'s ``request_duration_bounds_s``, which hold every
    route's timeout: the bucket counts exactly the requests answered within it."""
    seconds = route.timeout_ms / 1000
    return repr(float(max(b for b in config.request_duration_bounds_s() if b <= seconds)))


def _selector(method: str, route: Route, extra: str = "") -> str:
    labels = f'{HTTP_METHOD_LABEL}="{method}",{HTTP_ROUTE_LABEL}="{route.path}"'
    return "{" + labels + (f",{extra}" if extra else "") + "}"


def _rate(series: str, selector: str, window: str, by: str = "pool") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({series}{selector}[{window}]))"


def _record(name: str, expr: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = labels
    return rule


# --- recording rules -------------------------------------------------------------------


def route_rules(config: RouteConfig, window: str) -> list[dict[str, Any]]:
    """Per route (method and path) and pool: request rate, the share answered with a 5xx,
    and the share answered (no 5xx) within the route's timeout."""
    rules = []
    for route in config.app_routes():
        for method in route.methods:
            labels = {"route": route_label(method, route.path)}
            every = _selector(method, route)
            errors = _selector(method, route, f'{HTTP_STATUS_LABEL}=~"5.."')
            good = _selector(
                method, route, f'{HTTP_STATUS_LABEL}!~"5..",le="{timeout_bound(route, config)}"'
            )
            count = f"{ROUTE_REQUESTS_SERIES}_count"
            total = _rate(count, every, window)
            rules += [
                _record(f"route:pricing_requests:rate{window}", total, labels),
                _record(
                    f"route:pricing_errors:ratio_rate{window}",
                    f"({_rate(count, errors, window)} or {total} * 0) / {total}",
                    labels,
                ),
                _record(
                    f"route:pricing_within_timeout:ratio_rate{window}",
                    f"{_rate(f'{HTTP_SERVER_DURATION_SERIES}_bucket', good, window)}"
                    f" / {_rate(f'{HTTP_SERVER_DURATION_SERIES}_count', every, window)}",
                    labels,
                ),
            ]
    return rules


def pool_rules(window: str) -> list[dict[str, Any]]:
    """Per pool: loop lag p99, each route's hub wait p99, hub-wait seconds by culprit
    route, shed rate by reason, request rate."""
    return [
        _record(
            f"pool:{LOOP_LAG_SERIES}:p99_{window}",
            "histogram_quantile(0.99, "
            f"{_rate(f'{LOOP_LAG_SERIES}_bucket', '', window, 'pool, le')})",
        ),
        _record(
            f"pool_route:pricing_hub_wait_seconds:p99_{window}",
            "histogram_quantile(0.99, "
            f"{_rate(f'{ROUTE_HUB_WAIT_SERIES}_bucket', '', window, 'pool, route, le')})",
        ),
        # Seconds per second that requests of `victim` waited for the loop while
        # greenlets of `route` (the culprit) ran.
        _record(
            f"pool:pricing_hub_wait_by_culprit_seconds:rate{window}",
            _rate(ROUTE_CULPRIT_SERIES, "", window, "pool, route, victim"),
        ),
        _record(f"pool:pricing_shed:rate{window}", _rate(SHED_SERIES, "", window, "pool, reason")),
        _record(
            f"pool:pricing_requests:rate{window}",
            _rate(f"{ROUTE_REQUESTS_SERIES}_count", "", window),
        ),
    ]


def slo_rules(config: RouteConfig) -> list[dict[str, Any]]:
    """Per route with an objective and per SLO window: the share of requests that missed
    it (a 5xx, or slower than the timeout), over every pool."""
    rules = []
    for route in objective_routes(config):
        for method in route.methods:
            labels = {"route": route_label(method, route.path)}
            good = _selector(
                method, route, f'{HTTP_STATUS_LABEL}!~"5..",le="{timeout_bound(route, config)}"'
            )
            every = _selector(method, route)
            for window in SLO_WINDOWS:
                hits = _rate(f"{HTTP_SERVER_DURATION_SERIES}_bucket", good, window, "")
                total = _rate(f"{HTTP_SERVER_DURATION_SERIES}_count", every, window, "")
                rules.append(
                    _record(
                        f"route:pricing_slo_misses:ratio_rate{window}",
                        f"1 - (({hits} or vector(0)) / {total})",
                        labels,
                    )
                )
    return rules


def objective_routes(config: RouteConfig) -> tuple[Route, ...]:
    return tuple(r for r in config.app_routes() if r.objective_percent is not None)


# --- alerts ----------------------------------------------------------------------------


def slo_alerts(config: RouteConfig) -> list[dict[str, Any]]:
    """Per route with an objective: a page on a fast burn, a ticket on a slow one."""
    alerts = []
    for route in objective_routes(config):
        assert route.objective_percent is not None
        budget = 1 - route.objective_percent / 100
        for method in route.methods:
            label = route_label(method, route.path)
            for severity, name in (
                (PAGE, "PricingErrorBudgetBurnFast"),
                (TICKET, "PricingErrorBudgetBurnSlow"),
            ):
                rows = [b for b in BURNS if b.severity == severity]
                expr = "\nor\n".join(_burn_expr(label, b, budget) for b in rows)
                alerts.append(_slo_alert(name, severity, label, route, expr, rows))
    return alerts


def _burn_expr(label: str, burn: Burn, budget: float) -> str:
    limit = f"{burn.factor:g} * {budget:.6g}"
    return (
        f'(route:pricing_slo_misses:ratio_rate{burn.long}{{route="{label}"}} > ({limit})\n'
        f'and route:pricing_slo_misses:ratio_rate{burn.short}{{route="{label}"}} > ({limit}))'
    )


def _slo_alert(
    name: str, severity: str, label: str, route: Route, expr: str, rows: list[Burn]
) -> dict[str, Any]:
    days = " or ".join(f"{b.days_to_exhaust:.0f}" for b in rows)
    windows = " or ".join(f"{b.long} (and {b.short})" for b in rows)
    return {
        "alert": name,
        "expr": expr,
        "labels": {"severity": severity, "route": label},
        "annotations": {
            "summary": f"{label} is spending its error budget: at this rate it is gone in "
            f"{days} days",
            "description": (
                f"{label} must answer {route.objective_percent:g} % of requests without a "
                f"5xx within {route.timeout_ms} ms over {SLO_PERIOD}; over the last "
                f"{windows} it missed {{{{ $value | humanizePercentage }}}} of them."
            ),
            "action": (
                "see the PricingLoopHeld, PricingShedding and PricingPool* alerts for the "
                "cause; `pricingctl traces` lists the slow requests"
            ),
        },
    }


def cause_alerts(config: RouteConfig, options: RuleOptions) -> list[dict[str, Any]]:
    w = options.window
    clusters = "|".join(cluster_name(p) for p in (*config.pools, config.shared))
    envoy = f'{{{ENVOY_CLUSTER_LABEL}=~"{clusters}"}}'
    return [
        {
            "alert": "PricingLoopHeld",
            "expr": (
                # The top route by name: "<hub>" (the loop's own work) and "<other>"
                # (folded culprits) are nothing to move.
                f"topk by (pool) (1, sum by (pool, route) "
                f'(pool:pricing_hub_wait_by_culprit_seconds:rate{w}{{route!~"<.*>"}}) > 0)\n'
                "and on (pool) (\n"
                f"  pool:{LOOP_LAG_SERIES}:p99_{w} > {LOOP_LAG_P99_LIMIT_S:g}\n"
                f"  or on (pool) max by (pool) (pool_route:pricing_hub_wait_seconds:p99_{w})"
                f" > {HUB_WAIT_P99_LIMIT_S:g}\n)"
            ),
            "for": options.cause_for,
            "labels": {"severity": TICKET},
            "annotations": {
                "summary": "the {{ $labels.pool }} pool's event loop is held; most of the "
                "wait is behind {{ $labels.route }}",
                "description": (
                    "Requests in the {{ $labels.pool }} pool wait for its event loop (p99 "
                    f"loop lag over {LOOP_LAG_P99_LIMIT_S * 1000:g} ms, or a route's p99 "
                    f"hub wait over {HUB_WAIT_P99_LIMIT_S * 1000:g} ms); greenlets of "
                    "{{ $labels.route }} ran during {{ $value | humanize }} s of that "
                    "wait per second, more than any other route."
                ),
                "action": (
                    "move or shed {{ $labels.route }}: give it a pool of its own in "
                    "routes.toml (`pricingctl routes suggest` proposes one), or lower "
                    "what it may take at once"
                ),
            },
        },
        {
            "alert": "PricingShedding",
            "expr": (
                f"pool:pricing_shed:rate{w} / on (pool) group_left "
                f"pool:pricing_requests:rate{w} > {SHED_RATIO_LIMIT:g}"
            ),
            "for": options.cause_for,
            "labels": {"severity": TICKET},
            "annotations": {
                "summary": "the {{ $labels.pool }} pool refuses {{ $value | "
                "humanizePercentage }} of its requests ({{ $labels.reason }})",
                "description": (
                    "Requests reach the {{ $labels.pool }} pool with too little of their "
                    "deadline left and are answered 503 at once: it is past its capacity."
                ),
                "action": "add replicas (`pricingctl deploy size`), or move a route out",
            },
        },
        {
            "alert": "PricingPoolDegraded",
            "expr": f"{ENVOY_HEALTHY}{envoy} < {ENVOY_MEMBERS}{envoy}",
            "for": options.health_for,
            "labels": {"severity": TICKET},
            "annotations": {
                "summary": "some hosts of {{ $labels.envoy_cluster_name }} failed Envoy's "
                "health check ({{ $value }} healthy)",
                "description": "Envoy sends the pool's requests to the healthy hosts only.",
                "action": "read the pool's log; `pricingctl reload` restarts it",
            },
        },
        {
            "alert": "PricingPoolDown",
            "expr": f"{ENVOY_HEALTHY}{envoy} == 0",
            "for": options.health_for,
            "labels": {"severity": PAGE},
            "annotations": {
                "summary": "no host of {{ $labels.envoy_cluster_name }} is in Envoy's "
                "healthy set: its routes answer 503",
                "description": "Every host of the pool failed Envoy's health check.",
                "action": "read the pool's log; `pricingctl reload` restarts it",
            },
        },
    ]


def render_rules(config: RouteConfig, options: RuleOptions | None = None) -> dict[str, Any]:
    """The rule file's document: one group of recording rules per level, one of SLO
    alerts, one of cause alerts."""
    options = options or RuleOptions()
    interval = {"interval": options.interval}
    groups = [
        {"name": "pricing-routes", **interval, "rules": route_rules(config, options.window)},
        {"name": "pricing-pools", **interval, "rules": pool_rules(options.window)},
        {"name": "pricing-causes", **interval, "rules": cause_alerts(config, options)},
    ]
    if objective_routes(config):
        groups[2:2] = [
            {"name": "pricing-slo", **interval, "rules": slo_rules(config)},
            {"name": "pricing-slo-alerts", **interval, "rules": slo_alerts(config)},
        ]
    return {"groups": groups}


class _Dumper(yaml.SafeDumper):
    """Multi-line expressions as YAML literal blocks, as a person writes them; no
    anchors (each rule reads whole)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)


RULES_HEADER = """\
# GENERATED from {source} by routing.alerts. DO NOT EDIT: change {source} and render
# again; a test fails when this file is stale. What pages, what tickets, and why:
# docs/alerts.md.
"""


def rules_yaml(config: RouteConfig, options: RuleOptions | None = None) -> str:
    """The rule file for plain Prometheus (``rule_files:``), with its header."""
    from pathlib import Path

    body = yaml.dump(render_rules(config, options), Dumper=_Dumper, sort_keys=False, width=120)
    return RULES_HEADER.format(source=Path(config.source).name) + body
