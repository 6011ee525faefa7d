"""Prometheus beside the stack: Debian's `prometheus` binary (or any on PATH), on a
loopback port, scraping every pool replica and Envoy's admin stats, with the rules
rendered from the route config (``routing.alerts``) loaded. Its config, rule file, log
and data live under ``<run dir>/prometheus``; the data dir is emptied at each start.

Optional like Jaeger: without the binary the stack runs without it (`pricingctl up`
says so in one line).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from routing.alerts import RuleOptions, rules_yaml
from routing.model import RouteConfig
from routing.prometheus import PoolTarget, prometheus_config, prometheus_yaml
from stack.procs import Proc, free_port
from toolkit.fetch import http_ok

BINARY = "prometheus"
RULES_FILE = "rules.yml"
CONFIG_FILE = "prometheus.yml"
#: Prometheus's usual port, taken when free (`pricingctl up`).
DEFAULT_PORT = 9090
#: The namespace label the pool targets get (as in Kubernetes, where it is real).
LOCAL_NAMESPACE = "local"


@dataclass(frozen=True)
class PrometheusSettings:
    """How the stack runs Prometheus. A test that makes an incident happen in seconds
    shortens ``interval`` and the rules' windows; the defaults are the shipped ones."""

    port: int | None = None  # None: a free port
    interval: str = "15s"  # scrape and evaluation
    rules: RuleOptions = field(default_factory=RuleOptions)


def binary() -> str | None:
    """The Prometheus binary on PATH (Debian's /usr/bin/prometheus), or None."""
    return shutil.which(BINARY)


def url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def write_files(
    run_dir: Path,
    config: RouteConfig,
    pools: Sequence[PoolTarget],
    envoy: str,
    envoy_path: str,
    settings: PrometheusSettings,
) -> Path:
    """Prometheus's config and rule file in *run_dir*; returns the config's path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RULES_FILE).write_text(rules_yaml(config, settings.rules), encoding="utf-8")
    document = prometheus_config(
        pools,
        envoy,
        metrics_path=config.meta.metrics,
        envoy_path=envoy_path,
        rule_files=[str(run_dir / RULES_FILE)],
        namespace=LOCAL_NAMESPACE,
        interval=settings.interval,
    )
    path = run_dir / CONFIG_FILE
    path.write_text(prometheus_yaml(document, Path(config.source).name), encoding="utf-8")
    return path


def start(
    run_dir: Path, config_path: Path, port: int | None, timeout_s: float = 30.0
) -> tuple[Proc, int]:
    """Start Prometheus on 127.0.0.1 (*port*, or a free one) and wait until it is ready."""
    exe = binary()
    if exe is None:
        raise FileNotFoundError(f"no {BINARY} binary on PATH (Debian: apt install prometheus)")
    chosen = port or free_port()
    data = run_dir / "data"
    shutil.rmtree(data, ignore_errors=True)
    argv = [
        exe,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{chosen}",
        "--log.level=warn",
    ]
    proc = Proc("prometheus", argv, run_dir / "prometheus.log").start()
    proc.wait_ready(lambda: http_ok(f"{url(chosen)}/-/ready"), timeout_s, "ready")
    return proc, chosen
