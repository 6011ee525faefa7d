"""The Prometheus rules rendered from routes.toml: checked by `promtool check rules`, and
each alert tested by `promtool test rules` on synthetic series (fires when it should,
silent when it should, with its labels and annotations). Skipped with one line where
promtool is missing (`bash .ci/run` installs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from routing.alerts import BURNS, RuleOptions, render_rules, rules_yaml
from routing.errors import RouteConfigError
from routing.load import DEFAULT_ROUTES_PATH, load_routes, parse_routes
from routing.model import RouteConfig

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="no promtool on PATH (apt install prometheus)"
)

BIKE = "GET /v1/offers/bike"
RIDE = "POST /v1/offers/rideshare"
RED = "http_server_request_duration_seconds"
BIKE_SERIES = (
    '{http_request_method="GET",http_route="/v1/offers/bike",'
    'http_response_status_code="200",pool="io"}'
)


def rules_of(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Alert name -> its first rule."""
    out: dict[str, dict[str, Any]] = {}
    for group in document["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                out.setdefault(rule["alert"], rule)
    return out


RULES = rules_of(render_rules(load_routes()))


def expand(alert: str, labels: dict[str, str], value: str) -> dict[str, str]:
    """The alert's annotations with its templates filled in as Prometheus fills them
    (*value*: what `$value` and its humanize functions print here)."""
    out = {}
    for key, template in RULES[alert]["annotations"].items():
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
        out[key] = re.sub(r"\{\{ \$value( \| \w+)? \}\}", value, text)
    return out


def expected(alert: str, labels: dict[str, str], value: str) -> dict[str, Any]:
    return {"exp_labels": labels, "exp_annotations": expand(alert, labels, value)}


def red(
    good_per_30s: int, total_per_30s: int, samples: int, le: str = "0.5"
) -> list[dict[str, str]]:
    """The offers' RED histogram: *total* requests every 30 s, *good* of them within
    the cap (the bucket *le*)."""
    return [
        {
            "series": f"{RED}_count{BIKE_SERIES}",
            "values": f"0+{total_per_30s}x{samples}",
        },
        {
            "series": f'{RED}_bucket{BIKE_SERIES[:-1]},le="{le}"}}',
            "values": f"0+{good_per_30s}x{samples}",
        },
    ]


def run_promtool(
    tmp_path: Path, tests: list[dict[str, Any]], config: RouteConfig | None = None
) -> None:
    assert PROMTOOL is not None
    (tmp_path / "rules.yml").write_text(rules_yaml(config or load_routes()), encoding="utf-8")
    document = {"rule_files": ["rules.yml"], "evaluation_interval": "30s", "tests": tests}
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def slo_test(good: int, total: int, at: str, page: str | None, ticket: str | None) -> dict:
    """Offers at 200/s with *good* of every *total* within the cap, for 3 hours."""
    cases = []
    for alert, value in (
        ("PricingErrorBudgetBurnFast", page),
        ("PricingErrorBudgetBurnSlow", ticket),
    ):
        severity = "page" if alert.endswith("Fast") else "ticket"
        labels = {"severity": severity, "route": BIKE}
        alerts = [] if value is None else [expected(alert, labels, value)]
        cases.append({"eval_time": at, "alertname": alert, "exp_alerts": alerts})
    return {"interval": "30s", "input_series": red(good, total, 360), "alert_rule_test": cases}


# --- promtool ---------------------------------------------------------------------------


@needs_promtool
def test_every_rendered_rule_file_passes_promtool_check(tmp_path: Path) -> None:
    config = load_routes()
    fast = RuleOptions(interval="1s", window="10s", cause_for="1m", health_for="1m")
    for name, text in {"shipped": rules_yaml(config), "fast": rules_yaml(config, fast)}.items():
        path = tmp_path / f"{name}.yml"
        path.write_text(text, encoding="utf-8")
        result = subprocess.run(
            [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_a_healthy_hour_pages_nobody(tmp_path: Path) -> None:
    # Every offer within its cap, and one in 100,000 a miss: a tenth of the budget.
    run_promtool(
        tmp_path,
        [
            slo_test(6000, 6000, "60m", None, None),
            slo_test(99999, 100000, "60m", None, None),
        ],
    )


@needs_promtool
def test_the_incidents_half_percent_of_misses_pages_within_the_fast_window(
    tmp_path: Path,
) -> None:
    # 0.5 % of offers missing the cap burns a 99.99 % budget 50 times too fast: the page
    # fires within the fast row's short window, and the ticket too.
    fast_short = BURNS[0].short
    run_promtool(tmp_path, [slo_test(5970, 6000, fast_short, "0.5%", "0.5%")])


@needs_promtool
def test_a_slow_burn_tickets_without_paging(tmp_path: Path) -> None:
    # 0.05 % missed: five times the budget's rate, gone in six days. Ticket, no page.
    run_promtool(tmp_path, [slo_test(19990, 20000, "2h30m", None, "0.05%")])


def _loop_series(lag_bucket: str, culprits: dict[str, int]) -> list[dict[str, str]]:
    """The shared pool's loop lag (every tick in *lag_bucket*, 10 per 30 s) and each
    culprit route's hub-wait seconds per 30 s."""
    series = [
        {
            "series": f'pricing_loop_lag_seconds_bucket{{pool="shared",le="{le}"}}',
            "values": "0+10x60" if float(le) >= float(lag_bucket) else "0+0x60",
        }
        for le in ("0.001", "0.01", "0.05", "+Inf")
    ]
    series += [
        {
            "series": f'pricing_route_culprit_seconds_total{{pool="shared",route="{route}",'
            f'victim="{BIKE}"}}',
            "values": f"0+{seconds}x60",
        }
        for route, seconds in culprits.items()
    ]
    return series


@needs_promtool
def test_a_held_loop_names_the_route_to_move_or_shed(tmp_path: Path) -> None:
    # The hub's own work ("<hub>") waits longest, but is nothing to move: the alert names
    # the route with the most seconds, the quotes.
    culprits = {RIDE: 15, BIKE: 1, "<hub>": 30}
    labels = {"severity": "ticket", "pool": "shared", "route": RIDE}
    held = expected("PricingLoopHeld", labels, "500m")
    assert held["exp_annotations"]["action"].startswith(f"move or shed {RIDE}")
    run_promtool(
        tmp_path,
        [
            {
                "interval": "30s",
                "input_series": _loop_series("0.05", culprits),
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": "PricingLoopHeld", "exp_alerts": []},
                    {"eval_time": "15m", "alertname": "PricingLoopHeld", "exp_alerts": [held]},
                ],
            },
            {  # the same culprits on a loop that is not late: nothing to say
                "interval": "30s",
                "input_series": _loop_series("0.001", culprits),
                "alert_rule_test": [
                    {"eval_time": "15m", "alertname": "PricingLoopHeld", "exp_alerts": []}
                ],
            },
        ],
    )


def _shed_test(shed_per_30s: int, alerts: list[dict[str, Any]]) -> dict[str, Any]:
    """The io pool answering 300 requests per 30 s, shedding *shed_per_30s* of them."""
    return {
        "interval": "30s",
        "input_series": [
            {
                "series": 'pricing_route_request_duration_seconds_count{pool="io",'
                'http_request_method="GET",http_route="/v1/offers/bike",'
                'http_response_status_code="200"}',
                "values": "0+300x60",
            },
            {
                "series": f'pricing_shed_total{{pool="io",route="{BIKE}",reason="budget"}}',
                "values": f"0+{shed_per_30s}x60",
            },
        ],
        "alert_rule_test": [
            {"eval_time": "15m", "alertname": "PricingShedding", "exp_alerts": alerts}
        ],
    }


@needs_promtool
def test_shedding_above_one_percent_tickets(tmp_path: Path) -> None:
    labels = {"severity": "ticket", "pool": "io", "reason": "budget"}
    run_promtool(
        tmp_path,
        [
            _shed_test(6, [expected("PricingShedding", labels, "2%")]),
            _shed_test(1, []),
        ],
    )


def _envoy_test(healthy: int, total: int, alert: str, alerts: list[dict[str, Any]]) -> dict:
    cluster = '{envoy_cluster_name="io_pool"}'
    return {
        "interval": "30s",
        "input_series": [
            {"series": f"envoy_cluster_membership_healthy{cluster}", "values": f"{healthy}x20"},
            {"series": f"envoy_cluster_membership_total{cluster}", "values": f"{total}x20"},
        ],
        "alert_rule_test": [{"eval_time": "5m", "alertname": alert, "exp_alerts": alerts}],
    }


@needs_promtool
def test_a_pool_out_of_envoys_healthy_set(tmp_path: Path) -> None:
    io = {"envoy_cluster_name": "io_pool"}
    run_promtool(
        tmp_path,
        [
            _envoy_test(
                1,
                2,
                "PricingPoolDegraded",
                [expected("PricingPoolDegraded", {**io, "severity": "ticket"}, "1")],
            ),
            _envoy_test(1, 2, "PricingPoolDown", []),
            _envoy_test(
                0,
                2,
                "PricingPoolDown",
                [expected("PricingPoolDown", {**io, "severity": "page"}, "0")],
            ),
            _envoy_test(2, 2, "PricingPoolDegraded", []),
        ],
    )


# --- rendering and validation ---------------------------------------------------------


def test_only_routes_with_an_objective_get_slo_alerts() -> None:
    config = load_routes()
    with_objective = {r.endpoint for r in config.routes if r.objective_percent is not None}
    assert with_objective == {"offers.bike", "offers.scooter"}
    slo = [
        rule["labels"]["route"]
        for group in render_rules(config)["groups"]
        for rule in group["rules"]
        if rule.get("alert", "").startswith("PricingErrorBudget")
    ]
    assert sorted(set(slo)) == [BIKE, "GET /v1/offers/scooter"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("objective_percent = 100", "above 0 and below 100"),
        ('objective_percent = "99.9"', "above 0 and below 100"),
    ],
)
def test_a_bad_objective_is_one_clear_error(line: str, message: str) -> None:
    with pytest.raises(RouteConfigError, match=message):
        derived("objective_percent = 99.99  ", line + "  ")


def bike_at_450_ms() -> RouteConfig:
    """The shipped config with the bike offer's timeout at 450 ms, not a fixed bound of
    the request-duration histogram (DURATION_BUCKETS_S), its objective kept."""
    return derived("timeout_ms = 500\nobjective_percent", "timeout_ms = 450\nobjective_percent")


def test_an_objective_on_a_timeout_off_the_fixed_bounds_reads_the_bucket_at_it() -> None:
    from toolkit.contract import DURATION_BUCKETS_S

    config = bike_at_450_ms()
    bike = config.route_for_endpoint("offers.bike")
    assert bike is not None and bike.objective_percent == 99.99
    assert 0.45 not in DURATION_BUCKETS_S and 0.45 in config.request_duration_bounds_s()
    reads = [
        rule["expr"]
        for group in render_rules(config)["groups"]
        for rule in group["rules"]
        if rule.get("labels", {}).get("route") == BIKE and "_bucket" in rule.get("expr", "")
    ]
    assert len(reads) > 1 and all('le="0.45"' in expr for expr in reads)


@needs_promtool
def test_an_objective_at_450_ms_pages_on_what_missed_450_ms(tmp_path: Path) -> None:
    # Half a percent of offers slower than 450 ms (all within the fixed 0.5 s bound):
    # the page and the ticket fire, read from the 0.45 bucket the pools now have.
    cases = slo_test(5970, 6000, BURNS[0].short, "0.5%", "0.5%")
    within_500 = red(6000, 6000, 360)[1]
    cases["input_series"] = [*red(5970, 6000, 360, le="0.45"), within_500]
    for case in cases["alert_rule_test"]:
        for alert in case["exp_alerts"]:
            text = alert["exp_annotations"]["description"]
            assert "within 500 ms" in text
            alert["exp_annotations"]["description"] = text.replace("500 ms", "450 ms")
    run_promtool(tmp_path, [cases], bike_at_450_ms())


def derived(old: str, new: str) -> RouteConfig:
    """routes.toml with its first *old* replaced, loaded."""
    text = DEFAULT_ROUTES_PATH.read_text(encoding="utf-8")
    assert old in text, old
    return parse_routes(text.replace(old, new, 1))
