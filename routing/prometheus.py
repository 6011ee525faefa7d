"""Prometheus's own config for a stack outside Kubernetes (the launcher's, compose's):
scrape every pool replica and Envoy's stats, load the rule file (``routing.alerts``).

Pure data. Every pool target carries the labels the rules and the prometheus-adapter
rule group by: ``pool``, and ``namespace`` and ``pod`` as a PodMonitor sets them
(``pod``: the replica), so the adapter's query reads the same here as in Kubernetes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

#: The jobs: one for the pools (the ``pool`` label tells them apart), one for Envoy.
POOLS_JOB = "pricing-pools"
ENVOY_JOB = "envoy"
#: How often the shipped config scrapes and evaluates (a PodMonitor's interval too).
SCRAPE_INTERVAL = "15s"


@dataclass(frozen=True)
class PoolTarget:
    """One pool replica to scrape: where, and the labels it gets."""

    pool: str
    pod: str  # the replica's name, as the adapter's `pod`
    address: str  # host:port, or a DNS name:port (dns=True)
    dns: bool = False  # every address the name resolves to (compose's replicas)


def prometheus_config(
    pools: Sequence[PoolTarget],
    envoy: str,
    *,
    metrics_path: str,
    envoy_path: str,
    rule_files: Sequence[str],
    namespace: str,
    interval: str = SCRAPE_INTERVAL,
) -> dict[str, Any]:
    """The config document: *envoy* is Envoy's stats address (host:port) serving
    *envoy_path*."""
    pool_targets: list[dict[str, Any]] = []
    dns_names: list[dict[str, Any]] = []
    for target in pools:
        labels = {"pool": target.pool, "namespace": namespace, "pod": target.pod}
        if target.dns:
            host, _, port = target.address.rpartition(":")
            dns_names.append(
                {
                    "job_name": f"{POOLS_JOB}-{target.pool}",
                    "metrics_path": metrics_path,
                    "dns_sd_configs": [{"names": [host], "type": "A", "port": int(port)}],
                    # Each replica resolved is a pod of its own, named by its address.
                    "relabel_configs": [
                        *(
                            {"target_label": k, "replacement": v}
                            for k, v in labels.items()
                            if k != "pod"
                        ),
                        {"source_labels": ["__address__"], "target_label": "pod"},
                    ],
                    "honor_labels": True,
                }
            )
        else:
            pool_targets.append({"targets": [target.address], "labels": labels})
    scrapes: list[dict[str, Any]] = []
    if pool_targets:
        # honor_labels: the RED histogram's own `pool` label is the target's, not a clash.
        scrapes.append(
            {
                "job_name": POOLS_JOB,
                "metrics_path": metrics_path,
                "honor_labels": True,
                "static_configs": pool_targets,
            }
        )
    scrapes += dns_names
    scrapes.append(
        {
            "job_name": ENVOY_JOB,
            "metrics_path": envoy_path,
            "static_configs": [{"targets": [envoy]}],
        }
    )
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": list(rule_files),
        "scrape_configs": scrapes,
    }


HEADER = """\
# GENERATED from {source}. DO NOT EDIT: change {source} and render again.
# Prometheus: scrape every pool and Envoy, load the rules beside this file.
"""


def prometheus_yaml(document: dict[str, Any], source: str) -> str:
    return HEADER.format(source=source) + yaml.safe_dump(document, sort_keys=False, width=120)
