"""A real Prometheus on the real stack: it scrapes every pool and Envoy, evaluates the
rules rendered from the route config, and the cause alert names the culprit route
while CPU quotes starve offers in the shared layout.

One stack, in the shared layout (one pool, as the story's "before"), serves both tests.
The rules run with short windows and `for:` (RuleOptions) so that an incident of a few
seconds shows; the shipped ones are the same expressions on longer windows. Skipped
with one line where Prometheus is not installed (`bash .ci/run` installs it).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.client import HTTPException
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import yaml

from pricingctl.deploy import TARGETS
from routing.alerts import RuleOptions
from routing.kubernetes import PROMETHEUS_ADAPTER_FILE
from routing.model import Layout, RouteConfig
from stack import prometheus
from stack.launch import Stack
from stack.prometheus import LOCAL_NAMESPACE, PrometheusSettings
from tests.integration.support.browser import Browser, BrowserError, find_chromium
from tests.integration.support.load import HOG_ROUTE, Hogs
from tests.samples import offer_query
from toolkit.contract import LOOP_LAG_SERIES
from toolkit.fetch import fetch
from toolkit.wait import wait_until

pytestmark = pytest.mark.skipif(
    prometheus.binary() is None, reason="no prometheus binary on PATH (apt install prometheus)"
)

WINDOW = "10s"
#: Fast enough to see seconds of traffic; `for` long enough that the alert stays pending.
FAST = PrometheusSettings(
    interval="1s",
    rules=RuleOptions(interval="1s", window=WINDOW, cause_for="5m", health_for="5m"),
)


@pytest.fixture(scope="module")
def watched(
    hogged_routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """One stack for the module (the shared layout, where the incident happens), with
    Prometheus watching it."""
    run_dir = tmp_path_factory.mktemp("prom-shared")
    with Stack.on_free_ports(
        hogged_routes, Layout.SHARED, run_dir, prometheus_settings=FAST
    ) as stack:
        yield stack


def query(stack: Stack, promql: str) -> list[dict[str, Any]]:
    """An instant query's result vector, through Prometheus's HTTP API."""
    reply = fetch(f"{stack.prometheus_url}/api/v1/query?{urlencode({'query': promql})}")
    body = reply.expect_ok().json()
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def values(stack: Stack, promql: str, label: str) -> dict[str, float]:
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in query(stack, promql)}


def offers(stack: Stack, count: int) -> None:
    for i in range(count):
        fetch(f"{stack.url}/v1/offers/bike?{offer_query(f'u-{i}')}").expect_ok()


def adapter_query(pods: list[str]) -> str:
    """The prometheus-adapter rule's metricsQuery, its template filled in as the adapter
    fills it for the HPA's pods (from the committed manifests)."""
    manifest = TARGETS["kubernetes"] / PROMETHEUS_ADAPTER_FILE
    config_map = yaml.safe_load(manifest.read_text(encoding="utf-8").split("\n---")[0])
    (rule,) = yaml.safe_load(config_map["data"]["config.yaml"])["rules"]
    matchers = f'namespace="{LOCAL_NAMESPACE}",pod=~"{"|".join(pods)}"'
    return (
        rule["metricsQuery"]
        .replace("<<.Series>>", f"{LOOP_LAG_SERIES}_bucket")
        .replace("<<.LabelMatchers>>", matchers)
        .replace("<<.GroupBy>>", "pod")
    )


def test_prometheus_scrapes_every_pool_and_evaluates_the_rules(watched: Stack) -> None:
    stack = watched
    pools = {p.name for p in stack.config.pools_for(stack.layout)}

    def targets_up() -> bool:
        up = values(stack, 'up{job="pricing-pools"} == 1', "pool")
        return set(up) == pools and bool(query(stack, 'up{job="envoy"} == 1'))

    assert wait_until(targets_up, 30, 0.5), query(stack, "up")

    bike = '{route="GET /v1/offers/bike"}'
    rate = f"route:pricing_requests:rate{WINDOW}{bike}"

    def served() -> bool:
        offers(stack, 10)  # a rate needs requests between two scrapes
        return bool(values(stack, f"{rate} > 0", "pool"))

    assert wait_until(served, 30, 0.2), query(stack, rate)
    (route,) = [r for r in stack.config.routes if r.endpoint == "offers.bike"]
    pool = stack.config.pool_of(route, stack.layout)
    assert set(values(stack, rate, "pool")) == {pool}
    within = values(stack, f"route:pricing_within_timeout:ratio_rate{WINDOW}{bike}", "pool")
    errors = values(stack, f"route:pricing_errors:ratio_rate{WINDOW}{bike}", "pool")
    assert within[pool] > 0.9 and errors[pool] == 0, (within, errors)
    lag = values(stack, f"pool:pricing_loop_lag_seconds:p99_{WINDOW}", "pool")
    assert set(lag) == pools and all(0 < v < 1 for v in lag.values()), lag

    pods = [stack.replica_name(p.name, 0) for p in stack.config.pools_for(stack.layout)]
    per_pod = values(stack, adapter_query(pods), "pod")
    assert set(per_pod) == set(pods) and all(0 < v < 1 for v in per_pod.values()), per_pod


def loop_held(stack: Stack) -> list[dict[str, Any]]:
    reply = fetch(f"{stack.prometheus_url}/api/v1/alerts").expect_ok().json()
    return [a for a in reply["data"]["alerts"] if a["labels"]["alertname"] == "PricingLoopHeld"]


def test_the_cause_alert_names_the_quotes_that_starve_offers(
    watched: Stack, tmp_path: Path
) -> None:
    stack = watched
    # Before the quotes: the rules have seen the offers' hub wait, and no alert names the
    # quotes. (On a machine shared with other work a quiet pool's loop may still be late:
    # its alert then names an offers route, the only one running.)
    hub_wait = f'pool_route:pricing_hub_wait_seconds:p99_{WINDOW}{{route="GET /v1/offers/bike"}}'

    def seen() -> bool:
        offers(stack, 10)
        return bool(query(stack, hub_wait))

    assert wait_until(seen, 30, 0.2), query(stack, hub_wait)
    assert not [a for a in loop_held(stack) if a["labels"]["route"] == HOG_ROUTE]

    with Hogs(stack.url, threads=6), offers_meanwhile(stack):

        def names_the_quotes() -> bool:
            return any(a["labels"]["route"] == HOG_ROUTE for a in loop_held(stack))

        assert wait_until(names_the_quotes, 60, 0.5), (
            loop_held(stack),
            query(stack, f"pool:pricing_hub_wait_by_culprit_seconds:rate{WINDOW}"),
        )
        (alert,) = [a for a in loop_held(stack) if a["labels"]["route"] == HOG_ROUTE]
        # One alert per pool: the quotes are its culprit now, the offers are not.
        assert len(loop_held(stack)) == 1, loop_held(stack)
        assert alert["state"] == "pending", alert
        assert alert["labels"]["pool"] == "shared", alert
        assert alert["annotations"]["action"].startswith(f"move or shed {HOG_ROUTE}"), alert
        _screenshot(stack, tmp_path)


@contextmanager
def offers_meanwhile(stack: Stack) -> Iterator[None]:
    """Offers sent one after another on a thread while inside: the victims."""
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            with suppress(OSError, HTTPException, AssertionError):
                offers(stack, 1)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def _screenshot(stack: Stack, tmp_path: Path) -> None:
    """Prometheus's alert page during the incident, into PRICING_SCREENSHOT_DIR (the
    docs' picture) or tmp_path; nothing where there is no browser."""
    chromium = find_chromium()
    if chromium is None:
        return
    out = Path(os.environ.get("PRICING_SCREENSHOT_DIR") or tmp_path)
    try:
        with Browser(chromium, tmp_path / "profile", width=1400, height=900) as page:
            page.goto(f"{stack.prometheus_url}/classic/alerts")
            page.wait_for("document.body && document.body.innerText.includes('PricingLoopHeld')")
            # Open the pending alert's row, and tick the page's boxes (hide the inactive
            # rules, show annotations), so its labels and annotations show.
            page.evaluate(
                "document.querySelectorAll('tr.alert_header').forEach(r => {"
                " if (r.innerText.includes('PricingLoopHeld')) r.click(); });"
                "document.querySelectorAll('input[type=checkbox]').forEach(c => {"
                " if (!c.checked) c.click(); })"
            )
            time.sleep(0.5)
            path = page.screenshot(out / "prometheus-alert-shared-layout.png")
            print(f"screenshot: {path}")
    except BrowserError as exc:  # a picture for the docs, not what the test checks
        print(f"no screenshot: {exc}")
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
