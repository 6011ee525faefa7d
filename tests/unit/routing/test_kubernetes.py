"""deploy/kubernetes: generated, committed, valid for a pinned Kubernetes (strict
schemas, offline), and its parts refer to each other correctly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from routing.gunicorn import GRACEFUL_TIMEOUT_S
from routing.kubernetes import KUBERNETES_VERSION
from routing.load import DEFAULT_ROUTES_PATH, load_routes

K8S_DIR = DEFAULT_ROUTES_PATH.parent / "deploy" / "kubernetes"
COMPOSE_DIR = DEFAULT_ROUTES_PATH.parent / "deploy" / "compose"


def objects() -> list[dict[str, Any]]:
    found = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            found += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return found


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects() if o["kind"] == kind}


def validate(*paths: Path) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).parent / "kubernetes-validate"
    return subprocess.run(
        [str(tool), "--strict", "-k", KUBERNETES_VERSION, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_manifest_passes_strict_validation() -> None:
    manifests = sorted(p for p in K8S_DIR.glob("*.yaml") if p.name != "kustomization.yaml")
    result = validate(*manifests)
    assert result.returncode == 0, result.stdout + result.stderr
    passed = [line for line in result.stdout.splitlines() if " passed for resource " in line]
    print(f"\nkubernetes-validate --strict -k {KUBERNETES_VERSION}: {len(passed)} resources passed")
    assert len(passed) == len(objects())


def test_strict_validation_is_not_vacuous(tmp_path: Path) -> None:
    doc = by_kind("Deployment")["pool-io"]
    doc["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}  # a typo
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert validate(bad).returncode != 0


def test_kustomization_lists_every_file() -> None:
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    files = sorted(p.name for p in K8S_DIR.glob("*.yaml") if p.name != "kustomization.yaml")
    assert kustomization["resources"] == files


def test_services_select_their_deployments_pods_and_ports() -> None:
    deployments = by_kind("Deployment")
    for name, service in by_kind("Service").items():
        pod = deployments[name]["spec"]["template"]
        selector = service["spec"]["selector"]
        assert selector.items() <= pod["metadata"]["labels"].items(), name
        assert deployments[name]["spec"]["selector"]["matchLabels"] == selector
        ports = {p["name"] for c in pod["spec"]["containers"] for p in c["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports, name


def test_pools_probes_shutdown_and_resources_follow_the_route_config() -> None:
    config = load_routes()
    deployments, hpas, pdbs = (
        by_kind("Deployment"),
        by_kind("HorizontalPodAutoscaler"),
        by_kind("PodDisruptionBudget"),
    )
    for pool in config.pools:
        name = f"pool-{pool.name}"
        spec = deployments[name]["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        assert container["livenessProbe"]["httpGet"]["path"] == config.meta.healthz
        assert container["readinessProbe"]["httpGet"]["path"] == config.meta.readyz
        pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert spec["terminationGracePeriodSeconds"] > pre_stop + GRACEFUL_TIMEOUT_S
        assert "cpu" not in container["resources"]["limits"]  # no CFS throttling
        assert hpas[name]["spec"]["scaleTargetRef"]["name"] == name
        assert hpas[name]["spec"]["minReplicas"] == deployments[name]["spec"]["replicas"]
        assert (
            pdbs[name]["spec"]["selector"]["matchLabels"]
            == deployments[name]["spec"]["selector"]["matchLabels"]
        )
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318"
    cpu = deployments["pool-cpu"]["spec"]["template"]["spec"]["containers"][0]
    assert cpu["resources"]["requests"]["cpu"] == str(config.pool("cpu").workers)  # whole CPUs
    metrics = [m["type"] for m in hpas["pool-io"]["spec"]["metrics"]]
    assert metrics == ["Pods", "Resource"]  # loop lag, with CPU as the fallback
    assert [m["type"] for m in hpas["pool-cpu"]["spec"]["metrics"]] == ["Resource"]


def test_envoy_configmap_names_services_that_exist() -> None:
    services = by_kind("Service")
    configmap = by_kind("ConfigMap")["envoy-config"]
    envoy = yaml.safe_load(configmap["data"]["envoy.yaml"])
    deployment = by_kind("Deployment")["envoy"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert volumes[0]["configMap"]["name"] == "envoy-config"
    for cluster in envoy["static_resources"]["clusters"]:
        assert cluster["type"] == "STRICT_DNS"
        for endpoint in cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]:
            address = endpoint["endpoint"]["address"]["socket_address"]
            service = services[address["address"]]
            ports = [p["port"] for p in service["spec"]["ports"]]
            assert address["port_value"] in ports, (cluster["name"], ports)
        if cluster["name"].endswith("_pool"):
            assert services[address["address"]]["spec"]["clusterIP"] == "None"  # every pod


def test_network_policies_let_only_envoy_reach_the_pools() -> None:
    config = load_routes()
    policies = by_kind("NetworkPolicy")
    envoy_labels = by_kind("Deployment")["envoy"]["spec"]["template"]["metadata"]["labels"]
    for pool in config.pools:
        policy = policies[f"pool-{pool.name}"]["spec"]
        assert policy["policyTypes"] == ["Ingress", "Egress"]
        (rule,) = policy["ingress"]
        assert [f["podSelector"]["matchLabels"] for f in rule["from"]] == [envoy_labels]
        reached = [
            to["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
            for rule in policy["egress"]
            for to in rule["to"]
            if "namespaceSelector" not in to
        ]
        assert reached == ["simulator", "jaeger"]  # its upstreams, and traces
