"""Prometheus's files for the stack: every pool replica and Envoy scraped with the
labels the rules and the adapter group by, the rules beside the config."""

from __future__ import annotations

from pathlib import Path

import yaml

from routing.load import load_routes
from routing.prometheus import PoolTarget
from stack.prometheus import LOCAL_NAMESPACE, RULES_FILE, PrometheusSettings, write_files


def test_every_pool_replica_and_envoy_are_scraped_with_their_labels(tmp_path: Path) -> None:
    pools = [
        PoolTarget("io", "pool-io", "127.0.0.1:8102"),
        PoolTarget("io", "pool-io-2", "127.0.0.2:8102"),
        PoolTarget("cpu", "pool-cpu", "127.0.0.1:8101"),
    ]
    settings = PrometheusSettings(interval="1s")
    path = write_files(
        tmp_path, load_routes(), pools, "127.0.0.1:9901", "/stats/prometheus", settings
    )
    document = yaml.safe_load(path.read_text())
    assert document["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert document["rule_files"] == [str(tmp_path / RULES_FILE)]
    assert "PricingLoopHeld" in (tmp_path / RULES_FILE).read_text()
    jobs = {job["job_name"]: job for job in document["scrape_configs"]}
    targets = {
        group["targets"][0]: group["labels"] for group in jobs["pricing-pools"]["static_configs"]
    }
    assert targets["127.0.0.2:8102"] == {
        "pool": "io",
        "namespace": LOCAL_NAMESPACE,
        "pod": "pool-io-2",
    }
    assert len(targets) == 3 and jobs["pricing-pools"]["metrics_path"] == "/metrics"
    assert jobs["envoy"]["static_configs"] == [{"targets": ["127.0.0.1:9901"]}]
    assert jobs["envoy"]["metrics_path"] == "/stats/prometheus"
