"""deploy/kubernetes: generated, committed, valid for a pinned Kubernetes (strict
schemas, offline), clean for checkov, and its parts refer to each other correctly."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from pricingctl.deploy import jaeger_config
from routing.container import VERSION
from routing.envoy import ADMIN_CLUSTER
from routing.gunicorn import GRACEFUL_TIMEOUT_S
from routing.kubernetes import (
    ENVOY_REPLICAS,
    KUBERNETES_VERSION,
    LOOP_LAG_METRIC,
    MONITORING_FILES,
    MONITORING_NAMESPACE,
    render_kubernetes,
)
from routing.load import DEFAULT_ROUTES_PATH, load_routes
from routing.model import Pool
from routing.sizing import Traffic, size
from toolkit.contract import LOOP_LAG_SERIES

ROOT = DEFAULT_ROUTES_PATH.parent
K8S_DIR = ROOT / "deploy" / "kubernetes"
COMPOSE_DIR = ROOT / "deploy" / "compose"
#: Kinds of the Prometheus operator's CRDs: no schema in kubernetes-validate.
CRD_KINDS = {"PodMonitor", "PrometheusRule"}


def objects(directory: Path = K8S_DIR) -> list[dict[str, Any]]:
    found = []
    for path in sorted(directory.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            found += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return found


def by_kind(kind: str, docs: list[dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in (docs or objects()) if o["kind"] == kind}


def pod_specs() -> dict[str, dict[str, Any]]:
    return {n: d["spec"]["template"]["spec"] for n, d in by_kind("Deployment").items()}


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
    assert len(passed) == len([o for o in objects() if o["kind"] not in CRD_KINDS])


def test_strict_validation_is_not_vacuous(tmp_path: Path) -> None:
    doc = by_kind("Deployment")["pool-io"]
    doc["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}  # a typo
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert validate(bad).returncode != 0


def test_kustomization_lists_every_file() -> None:
    """All but the monitoring files: those need the operator's CRDs or live in the
    monitoring namespace, which the kustomization's namespace would override."""
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    files = sorted(p.name for p in K8S_DIR.glob("*.yaml") if p.name != "kustomization.yaml")
    assert set(MONITORING_FILES) <= set(files)
    assert kustomization["resources"] == [f for f in files if f not in MONITORING_FILES]


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
        # The HPA owns the count: an apply must not reset it.
        assert "replicas" not in deployments[name]["spec"]
        assert hpas[name]["spec"]["maxReplicas"] > hpas[name]["spec"]["minReplicas"] >= 2
        assert (
            pdbs[name]["spec"]["selector"]["matchLabels"]
            == deployments[name]["spec"]["selector"]["matchLabels"]
        )
        # A share of the pool, never a fixed count: it scales with the HPA's choice.
        assert pdbs[name]["spec"]["maxUnavailable"].endswith("%")
        env = {e["name"]: e.get("value") for e in container["env"]}
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
        if cluster["name"] == ADMIN_CLUSTER:  # the stats listener's way to the admin
            (endpoint,) = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
            assert endpoint["endpoint"]["address"]["socket_address"]["address"] == "127.0.0.1"
            continue
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
        envoy_rule, monitoring_rule = policy["ingress"]
        assert [f["podSelector"]["matchLabels"] for f in envoy_rule["from"]] == [envoy_labels]
        # Prometheus, from the monitoring namespace, reaches /metrics on the same port.
        (peer,) = monitoring_rule["from"]
        assert peer == {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": MONITORING_NAMESPACE}
            }
        }
        assert monitoring_rule["ports"] == envoy_rule["ports"]
        reached = [
            to["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
            for rule in policy["egress"]
            for to in rule["to"]
            if "namespaceSelector" not in to
        ]
        assert reached == ["simulator", "jaeger"]  # its upstreams, and traces


def test_every_pod_has_a_network_policy() -> None:
    policies = by_kind("NetworkPolicy")
    for name, deployment in by_kind("Deployment").items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        selecting = [
            p
            for p in policies.values()
            if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        ]
        assert selecting, name
    jaeger = policies["jaeger"]["spec"]
    ui_rule = [r for r in jaeger["ingress"] if r["ports"] == [{"protocol": "TCP", "port": 16686}]]
    assert [r["from"][0] for r in ui_rule] == [
        {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": MONITORING_NAMESPACE}
            }
        }
    ]


def test_every_workload_is_hardened() -> None:
    for name, spec in pod_specs().items():
        assert spec["automountServiceAccountToken"] is False, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        tmp = next(v for v in spec["volumes"] if v["name"] == "tmp")
        assert tmp["emptyDir"]["sizeLimit"], name
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["capabilities"] == {"drop": ["ALL"]}, name
            assert security["runAsUser"] >= 10000, name
            assert {"readinessProbe", "livenessProbe"} <= container.keys(), name
            assert "/tmp" in [m["mountPath"] for m in container["volumeMounts"]], name


def test_pools_and_envoy_spread_and_have_budgets() -> None:
    pdbs = by_kind("PodDisruptionBudget")
    for name, spec in pod_specs().items():
        if name in ("jaeger", "simulator"):
            continue
        keys = [c["topologyKey"] for c in spec["topologySpreadConstraints"]]
        assert keys == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"], name
        assert pdbs[name]["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_envoy_drains_on_shutdown_and_probes_readiness_apart_from_liveness() -> None:
    config = load_routes()
    deployment = by_kind("Deployment")["envoy"]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["readinessProbe"] != container["livenessProbe"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "stats"}
    script = container["lifecycle"]["preStop"]["exec"]["command"][-1]
    assert "/healthcheck/fail" in script and "/drain_listeners?graceful" in script
    drain_s = int(re.search(r"sleep (\d+)$", script).group(1))  # type: ignore[union-attr]
    assert drain_s * 1000 > max(r.timeout_ms for r in config.routes)  # the longest request
    assert spec["terminationGracePeriodSeconds"] > drain_s
    args = container["args"]
    assert args[args.index("--drain-time-s") + 1] == str(drain_s)
    assert by_kind("PodDisruptionBudget")["envoy"]["spec"]["maxUnavailable"] == 1


def _attributes(container: dict[str, Any]) -> dict[str, str]:
    env = {e["name"]: e.get("value") for e in container["env"]}
    return dict(item.split("=", 1) for item in env["OTEL_RESOURCE_ATTRIBUTES"].split(","))


def test_pods_carry_their_identity_and_version() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == VERSION
    for name in ("pool-cpu", "pool-io", "simulator"):
        (container,) = pod_specs()[name]["containers"]
        attributes = _attributes(container)
        # Unique per pod (a worker's pid repeats in every pod).
        assert "$(POD_NAME)" in attributes["service.instance.id"]
        assert attributes["k8s.pod.uid"] == "$(POD_UID)"
        assert attributes["k8s.deployment.name"] == name
        assert attributes["service.version"] == VERSION
        assert attributes["deployment.environment.name"] == "production"
        # Kubernetes expands $(X) only from variables defined above it.
        names = [e["name"] for e in container["env"]]
        for used in re.findall(r"\$\((\w+)\)", ",".join(attributes.values())):
            assert names.index(used) < names.index("OTEL_RESOURCE_ATTRIBUTES"), used


def test_prometheus_finds_every_component_and_the_hpa_its_metric() -> None:
    config = load_routes()
    deployments = by_kind("Deployment")
    monitors = by_kind("PodMonitor")
    for name in ("pool-cpu", "pool-io", "envoy"):
        template = deployments[name]["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
        (endpoint,) = monitors[name]["spec"]["podMetricsEndpoints"]
        assert ports[endpoint["port"]] == int(annotations["prometheus.io/port"]), name
        assert endpoint["path"] == annotations["prometheus.io/path"]
        assert monitors[name]["spec"]["selector"]["matchLabels"].items() <= (
            template["metadata"]["labels"].items()
        )
    assert monitors["pool-io"]["spec"]["podMetricsEndpoints"][0]["path"] == config.meta.metrics
    assert monitors["envoy"]["spec"]["podMetricsEndpoints"][0]["path"] == "/stats/prometheus"
    (adapter,) = by_kind("ConfigMap", objects()).get("pricing-adapter-rules", {}) and [
        by_kind("ConfigMap")["pricing-adapter-rules"]
    ]
    assert adapter["metadata"]["namespace"] == MONITORING_NAMESPACE
    (rule,) = yaml.safe_load(adapter["data"]["config.yaml"])["rules"]
    assert rule["name"]["as"] == LOOP_LAG_METRIC
    assert rule["seriesQuery"].startswith(f"{LOOP_LAG_SERIES}_bucket")
    hpa_metric = by_kind("HorizontalPodAutoscaler")["pool-io"]["spec"]["metrics"][0]
    assert hpa_metric["pods"]["metric"]["name"] == LOOP_LAG_METRIC


def _envoy_admits(files: dict[str, str]) -> dict[str, tuple[int, int, int, int]]:
    """Pool -> (HPA min, HPA max, what all Envoys admit in flight at the min and at the
    max), read back from the rendered manifests."""
    docs = [d for text in files.values() for d in yaml.safe_load_all(text) if d and "kind" in d]
    envoy = yaml.safe_load(by_kind("ConfigMap", docs)["envoy-config"]["data"]["envoy.yaml"])
    envoys = by_kind("Deployment", docs)["envoy"]["spec"]["replicas"]
    hpas = by_kind("HorizontalPodAutoscaler", docs)
    admitted = {}
    for cluster in envoy["static_resources"]["clusters"]:
        if not cluster["name"].endswith("_pool"):
            continue
        pool = cluster["name"].removesuffix("_pool")
        breakers = cluster["circuit_breakers"]
        (total,) = breakers["thresholds"]
        (per_host,) = breakers["per_host_thresholds"]
        hpa = hpas[f"pool-{pool}"]["spec"]
        low, high = hpa["minReplicas"], hpa["maxReplicas"]

        def at(pods: int, total: dict[str, Any] = total, host: dict[str, Any] = per_host) -> int:
            return envoys * min(total["max_requests"], pods * host["max_connections"])

        admitted[pool] = (low, high, at(low), at(high))
    return admitted


def _littles_law(pool: Pool) -> int:
    """What one replica serves within its latency (routes.toml's measurements)."""
    assert pool.worker_rps is not None
    if pool.latency_ms is None:
        return pool.workers * pool.worker_connections
    return max(pool.workers, math.ceil(pool.workers * pool.worker_rps * pool.latency_ms / 1000))


def test_what_envoy_admits_grows_with_the_replicas() -> None:
    """Rendered for 200 and for 20,000 offers/s: every pool's HPA range grows, and at
    each end of it all Envoys together admit what that many replicas serve within
    their latency (Little's law from worker_rps), rounded up per Envoy replica."""
    config = load_routes()
    renders = {
        rate: _envoy_admits(
            render_kubernetes(config, size(config, Traffic(rate, rate * 0.1)), jaeger_config())
        )
        for rate in (200, 20_000)
    }
    for pool in config.pools:
        per_replica = _littles_law(pool)
        small, large = renders[200][pool.name], renders[20_000][pool.name]
        assert large[0] > small[0] and large[1] > small[1], pool.name  # more replicas
        assert large[2] > small[2], pool.name  # and Envoy admits more
        for low, high, at_low, at_high in (small, large):
            assert at_high > at_low
            for pods, admitted in ((low, at_low), (high, at_high)):
                # Never less than the pods serve; over only by rounding up per Envoy.
                assert pods * per_replica <= admitted < pods * (per_replica + ENVOY_REPLICAS)
    io = config.pool("io")
    assert renders[20_000]["io"][2] >= 20_000 * io.latency_ms / 1000  # type: ignore[operator]


def _checkov(*args: str) -> dict[str, Any]:
    tool = Path(sys.executable).parent / "checkov"
    assert tool.exists(), "checkov is a dev dependency: make setup-dev installs it"
    result = subprocess.run(
        [str(tool), *args, "--skip-download", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(result.stdout)
    (report,) = report if isinstance(report, list) else [report]
    return report


@pytest.mark.parametrize(
    "args",
    [
        ("-d", str(K8S_DIR), "--framework", "kubernetes"),
        ("-f", str(ROOT / "Dockerfile"), "--framework", "dockerfile"),
    ],
    ids=["manifests", "dockerfile"],
)
def test_checkov_finds_nothing_unexplained(args: tuple[str, ...]) -> None:
    """Every check passes, or the manifest skips it with its reason."""
    report = _checkov(*args)
    failed = report["results"]["failed_checks"]
    assert not failed, [(f["check_id"], f["resource"]) for f in failed]
    summary = report["summary"]
    print(f"\ncheckov {args[-1]}: {summary['passed']} passed, {summary['skipped']} skipped")
    assert summary["passed"] > 50
    for skipped in report["results"]["skipped_checks"]:
        assert skipped["check_result"].get("suppress_comment", "").strip(), skipped["check_id"]


def test_checkov_is_not_vacuous(tmp_path: Path) -> None:
    deployment = by_kind("Deployment")["pool-io"]
    del deployment["spec"]["template"]["spec"]["securityContext"]
    del deployment["spec"]["template"]["spec"]["automountServiceAccountToken"]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(deployment))
    report = _checkov("-d", str(tmp_path), "--framework", "kubernetes")
    failed = {f["check_id"] for f in report["results"]["failed_checks"]}
    assert {"CKV_K8S_31", "CKV_K8S_38"} <= failed  # seccomp, service account token


def test_the_alert_rules_ship_as_a_prometheus_rule_and_pool_targets_get_their_pool() -> None:
    from routing.alerts import render_rules

    config = load_routes()
    (rule,) = by_kind("PrometheusRule").values()
    assert rule["spec"] == render_rules(config)
    monitors = by_kind("PodMonitor")
    for pool in config.pools:
        (endpoint,) = monitors[f"pool-{pool.name}"]["spec"]["podMetricsEndpoints"]
        assert endpoint["honorLabels"] is True
        assert endpoint["relabelings"] == [{"targetLabel": "pool", "replacement": pool.name}]
