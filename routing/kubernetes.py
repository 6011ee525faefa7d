"""Kubernetes manifests for the whole service, rendered from the route config: per pool
a Deployment, a headless Service, a HorizontalPodAutoscaler and a PodDisruptionBudget;
Envoy (Deployment, ConfigMap, Service, PodDisruptionBudget); the dev upstream simulator
and Jaeger; NetworkPolicies; a kustomization.yaml. Beside them, outside the
kustomization (they live in the monitoring namespace or need its CRDs): PodMonitors
for the Prometheus operator and the prometheus-adapter rule the io pool's HPA reads.

Every pool Service is headless: Envoy's STRICT_DNS cluster resolves it to every ready
pod, so Envoy balances per pod (least request), health-checks and ejects each one, as
it does for replicas on loopback. A ClusterIP would hide the pods behind one address.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from routing.container import (
    ENVOY_CONFIG_PATH,
    ENVOY_IMAGE,
    ENVOY_STATS_PORT,
    IMAGE,
    JAEGER_CONFIG_PATH,
    JAEGER_IMAGE,
    JAEGER_OTLP_GRPC_PORT,
    JAEGER_OTLP_HTTP_PORT,
    JAEGER_UI_PORT,
    POOL_PORT,
    SERVICE_NAMES,
    SIMULATOR_PORT,
    VERSION,
    pool_env,
    render_container_envoy,
)
from routing.envoy import STATS_PATHS
from routing.gunicorn import GRACEFUL_TIMEOUT_S
from routing.model import Pool, RouteConfig
from routing.sizing import TARGET_UTILISATION, EnvoyLimits, envoy_limits
from toolkit.contract import LOOP_LAG_SERIES, PORT_ENV

#: The Kubernetes version the manifests are validated against (kubernetes-validate).
KUBERNETES_VERSION = "1.33.0"
NAMESPACE = "pricing"
APP_LABEL = "app.kubernetes.io/name"
PART_LABEL = "app.kubernetes.io/component"
APP = "pricingservice"


NAMES = SERVICE_NAMES
ENVOY = "envoy"
ENVOY_CONFIGMAP = "envoy-config"
JAEGER_CONFIGMAP = "jaeger-config"
#: Files rendered beside the kustomization but not in it: the PodMonitors need the
#: Prometheus operator's CRDs, the adapter's rules live in the monitoring namespace.
PROMETHEUS_OPERATOR_FILE = "prometheus-operator.yaml"
PROMETHEUS_ADAPTER_FILE = "prometheus-adapter.yaml"
MONITORING_FILES = (PROMETHEUS_OPERATOR_FILE, PROMETHEUS_ADAPTER_FILE)
#: Where Prometheus (and the adapter) run; the NetworkPolicies let it scrape.
MONITORING_NAMESPACE = "monitoring"
#: deployment.environment.name of everything the manifests run.
ENVIRONMENT = "production"

# Rolling updates lose nothing: a terminating pod first stays in service PRESTOP_S
# (Envoy's DNS refresh and health checks take it out), then gunicorn gets SIGTERM
# and GRACEFUL_TIMEOUT_S to finish what it accepted; the kubelet waits longer still.
PRESTOP_S = 10
TERMINATION_GRACE_S = PRESTOP_S + GRACEFUL_TIMEOUT_S + 5
# Memory per worker process and for the gunicorn master (measured RSS is ~80-120 MiB
# per worker; the cpu pool's road graphs make it the larger).
WORKER_MEMORY_MI = {"cpu": 384, "io": 256}
DEFAULT_WORKER_MEMORY_MI = 256
MASTER_MEMORY_MI = 128
# The io pool asks for half a CPU per worker: its work is waiting on upstreams.
IO_CPU_MILLI_PER_WORKER = 500
# HPA targets.
CPU_TARGET_UTILISATION = 60
# io pool: scale out when the event loop lags (p99 over the pods, through a metrics
# adapter: see the README), before any offer misses its deadline. The adapter makes
# LOOP_LAG_METRIC from the pools' LOOP_LAG_SERIES histogram (prometheus-adapter.yaml).
LOOP_LAG_METRIC = "pricing_loop_lag_p99_seconds"
LOOP_LAG_TARGET = "20m"  # 0.02 s
LOOP_LAG_WINDOW = "1m"
MAX_REPLICAS_FACTOR = 4
# A pool is sized to carry its load at TARGET_UTILISATION: it can lose the rest of its
# replicas to a node drain and still serve. At least one (a PDB that allows no eviction
# blocks every drain); Kubernetes rounds the percentage up.
PDB_MAX_UNAVAILABLE = f"{round((1 - TARGET_UTILISATION) * 100)}%"

# Envoy runs a fixed number of replicas (no HPA: its own work per request is small, and
# each replica's circuit breakers are its share of the pools', see envoy_limits_in_cluster).
ENVOY_REPLICAS = 2
# Envoy's drain on shutdown: /healthcheck/fail (its /ready answers 503), then its
# listeners drain (HTTP/1.1 responses get `Connection: close`), for the longest route
# timeout plus the few seconds the Service's endpoints take to drop the pod; then it
# gets SIGTERM with nothing left in flight.
ENVOY_DRAIN_EXTRA_S = 5
ENVOY_ADMIN_ENV = "ENVOY_ADMIN"

#: Users the containers run as: the image's (Dockerfile), Jaeger's image's, and one
#: for Envoy above the host's system range (the image's own `envoy` user is uid 101).
APP_UID = 10001
JAEGER_UID = 10001
ENVOY_UID = 10101
#: The /tmp every container gets (read-only root file systems): the pools' metrics
#: files (prometheus_client's multiprocess mode) and the span file fallback.
TMP_SIZE_LIMIT = "256Mi"

#: checkov checks skipped, per workload, each with its one-line reason (the manifests
#: carry them as checkov.io/skip annotations; tests/unit/routing/test_kubernetes.py
#: runs checkov and fails on any other finding).
SKIP_DIGEST = (
    "CKV_K8S_43",
    "tags are release versions; pin digests at deploy time (kustomize `images:`), no "
    "registry is reachable where the manifests are rendered",
)
SKIP_PULL_ALWAYS = (
    "CKV_K8S_15",
    "release tags never move: IfNotPresent lets pods start while the registry is down",
)
SKIP_CPU_LIMIT = (
    "CKV_K8S_11",
    "no CPU limit on purpose: CFS throttling stalls every request of an event loop at once",
)

HEADER = """\
# GENERATED by `pricingctl deploy render kubernetes` from {source}. DO NOT EDIT:
# change {source} and render again (`--check` fails, and so does a test, when stale).
# Validated offline with kubernetes-validate --strict against Kubernetes {k8s}, and checkov.
"""


def _labels(part: str) -> dict[str, str]:
    return {APP_LABEL: APP, PART_LABEL: part}


def _meta(
    name: str, part: str, skips: tuple[tuple[str, str], ...] = (), namespace: str = NAMESPACE
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": _labels(part)}
    if skips:
        meta["annotations"] = {
            f"checkov.io/skip{i}": f"{check}={reason}" for i, (check, reason) in enumerate(skips, 1)
        }
    return meta


def _http_probe(path: str, port: int | str, period_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period_s,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def _container_security(uid: int) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _pod_spec(
    part: str,
    containers: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    uid: int,
    *,
    spread: bool = False,
    grace_s: int | None = None,
) -> dict[str, Any]:
    """What every pod shares: no service account token (nothing here calls the API
    server), the runtime's default seccomp profile, a non-root user, a bounded /tmp;
    spread over zones and nodes where it runs several replicas."""
    for container in containers:
        container["securityContext"] = _container_security(uid)
        container.setdefault("volumeMounts", []).append({"name": "tmp", "mountPath": "/tmp"})
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if grace_s is not None:
        spec["terminationGracePeriodSeconds"] = grace_s
    if spread:
        # Both soft (ScheduleAnyway): a hard spread leaves the HPA's new pods Pending
        # when a zone or node is full, which is worse than an uneven spread.
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": key,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": _labels(part)},
                "matchLabelKeys": ["pod-template-hash"],
            }
            for key in ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
        ]
    spec["containers"] = containers
    spec["volumes"] = [*volumes, {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}}]
    return spec


def _scrape_annotations(port: int, path: str) -> dict[str, str]:
    """For a Prometheus that scrapes by annotation (the community chart's
    `kubernetes-pods` job; it labels each series with `namespace` and `pod`)."""
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": path,
    }


def _identity_env(deployment: str, container: str) -> list[dict[str, Any]]:
    """The pod's identity from the downward API, then the OpenTelemetry resource built
    from it (Kubernetes expands $(NAME) from the variables above it). The instance id is
    the OpenTelemetry operator's: namespace.pod.container, unique across pods (a
    worker's pid repeats in every pod)."""
    fields = {
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_UID": "metadata.uid",
        "NODE_NAME": "spec.nodeName",
    }
    attributes = {
        "service.instance.id": f"$(POD_NAMESPACE).$(POD_NAME).{container}",
        "service.version": VERSION,
        "deployment.environment.name": ENVIRONMENT,
        "k8s.namespace.name": "$(POD_NAMESPACE)",
        "k8s.pod.name": "$(POD_NAME)",
        "k8s.pod.uid": "$(POD_UID)",
        "k8s.node.name": "$(NODE_NAME)",
        "k8s.deployment.name": deployment,
        "k8s.container.name": container,
    }
    return [
        *({"name": n, "valueFrom": {"fieldRef": {"fieldPath": f}}} for n, f in fields.items()),
        {
            "name": "OTEL_RESOURCE_ATTRIBUTES",
            "value": ",".join(f"{k}={v}" for k, v in attributes.items()),
        },
    ]


def _cpu_milli(pool: Pool) -> int:
    """CPU the pool's pod requests. A cpu-bound pool asks for one whole CPU per worker:
    a worker runs one request at a time on one core."""
    if pool.worker_connections == 1:
        return 1000 * pool.workers
    return IO_CPU_MILLI_PER_WORKER * pool.workers


def _resources(pool: Pool) -> dict[str, Any]:
    """Requests and limits. CPU LIMITS ARE NOT SET, on purpose: a CFS quota lets a
    process run its quota and then stops it for the rest of the 100 ms period, and for
    a gevent worker that stall lands on every greenlet of the loop at once, as
    scheduling delay (the latency this service exists to remove). Requests reserve
    the CPU (whole CPUs for the cpu pool); memory has a limit equal to its request."""
    memory = MASTER_MEMORY_MI + pool.workers * WORKER_MEMORY_MI.get(
        pool.name, DEFAULT_WORKER_MEMORY_MI
    )
    cpu = _cpu_milli(pool)
    cpu_text = f"{cpu // 1000}" if cpu % 1000 == 0 else f"{cpu}m"
    return {
        "requests": {"cpu": cpu_text, "memory": f"{memory}Mi"},
        "limits": {"memory": f"{memory}Mi"},
    }


def max_replicas(replicas: int) -> int:
    """The HPA's maximum for a pool rendered (and kept at least) at `replicas`."""
    return replicas * MAX_REPLICAS_FACTOR


def envoy_limits_in_cluster(pool: Pool, replicas: int) -> EnvoyLimits:
    """One Envoy replica's circuit breakers for `pool`, whose HPA keeps it between
    `replicas` and max_replicas(replicas) pods: the limits follow the pods.

    Per host: each pod's share of what it serves within its latency
    (routing.sizing.envoy_limits for one host), divided among the Envoy replicas,
    which each apply their breakers on their own. Envoy re-resolves the headless
    Service, so every pod the HPA adds brings its own share, and a removed one takes
    it away; what all Envoys admit is always the pods' capacity, never more (more
    would queue in the workers' sockets, where nobody sheds it).
    Cluster-wide in flight: the same at the HPA's maximum, a ceiling never reached
    before the per-host caps. Pending: at the HPA's minimum, so that the queue in
    Envoy never waits longer than routes.toml's max_pending allows for the pods
    that run at least (more pods drain it faster: a shorter wait).
    Rendering at the maximum alone would admit four times what a pool at its minimum
    serves, and at the minimum alone the HPA's new pods would get nothing."""
    share = envoy_limits(pool, hosts=1).in_flight
    ceiling = envoy_limits(pool, hosts=max_replicas(replicas))
    floor = envoy_limits(pool, hosts=replicas)
    return EnvoyLimits(
        in_flight=math.ceil(ceiling.in_flight / ENVOY_REPLICAS),
        pending=math.ceil(floor.pending / ENVOY_REPLICAS),
        per_host_in_flight=math.ceil(share / ENVOY_REPLICAS),
        # Each Envoy replica holds its share of what a crashed worker held.
        retries=math.ceil(floor.retries / ENVOY_REPLICAS),
    )


def _pool_objects(
    config: RouteConfig, pool: Pool, replicas: int, upstream_url: str | None
) -> list[dict[str, Any]]:
    """A pool's Deployment, its headless Service, its HPA and its PDB."""
    name = NAMES.pool(pool.name)
    part = name
    container = _pool_container(config, pool, name, upstream_url)
    return [
        _pool_deployment(config, name, part, container),
        _headless_service(name, part),
        _pool_hpa(pool, name, part, replicas),
        _pdb(name, part, PDB_MAX_UNAVAILABLE),
    ]


def _pool_container(
    config: RouteConfig, pool: Pool, name: str, upstream_url: str | None
) -> dict[str, Any]:
    env = pool_env(pool, NAMES, config, upstream_url)
    return {
        "name": "pool",
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": [pool.name],
        "ports": [{"name": "http", "containerPort": POOL_PORT}],
        "env": [
            *_identity_env(name, "pool"),
            *({"name": k, "value": v} for k, v in env.items()),
        ],
        "resources": _resources(pool),
        "livenessProbe": _http_probe(config.meta.healthz, POOL_PORT, 10, 3),
        "readinessProbe": _http_probe(config.meta.readyz, POOL_PORT, 2, 2),
        "startupProbe": _http_probe(config.meta.healthz, POOL_PORT, 2, 30),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_S}}},
    }


def _pool_deployment(
    config: RouteConfig, name: str, part: str, container: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, part, (SKIP_DIGEST, SKIP_PULL_ALWAYS, SKIP_CPU_LIMIT)),
        "spec": {
            # No `replicas`: the HPA owns the count (an apply would reset it); a new
            # Deployment starts at one pod and the HPA raises it to minReplicas.
            "selector": {"matchLabels": _labels(part)},
            # One new pod before an old one goes: the pool never has fewer replicas.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {
                    "labels": _labels(part),
                    "annotations": _scrape_annotations(POOL_PORT, config.meta.metrics),
                },
                "spec": _pod_spec(
                    part, [container], [], APP_UID, spread=True, grace_s=TERMINATION_GRACE_S
                ),
            },
        },
    }


def _headless_service(name: str, part: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, part),
        "spec": {
            "clusterIP": "None",  # headless: Envoy resolves every ready pod
            "selector": _labels(part),
            "ports": [{"name": "http", "port": POOL_PORT, "targetPort": "http"}],
        },
    }


def _pool_hpa(pool: Pool, name: str, part: str, replicas: int) -> dict[str, Any]:
    """Scales on CPU; an io pool first on its loop lag."""
    metrics: list[dict[str, Any]] = [
        {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": CPU_TARGET_UTILISATION},
            },
        }
    ]
    hpa_meta = _meta(name, part)
    if pool.worker_connections > 1:
        # What hurts an io pool is its loop lag, not its CPU: from /metrics through
        # prometheus-adapter (its rule: PROMETHEUS_ADAPTER_FILE). Without the adapter
        # the HPA cannot read this metric and scales on the CPU metric alone.
        metrics.insert(
            0,
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": LOOP_LAG_METRIC},
                    "target": {"type": "AverageValue", "averageValue": LOOP_LAG_TARGET},
                },
            },
        )
        hpa_meta["annotations"] = {
            f"{APP}/metric-source": f"{LOOP_LAG_METRIC}: prometheus-adapter rule in "
            f"{PROMETHEUS_ADAPTER_FILE}, p99 of {LOOP_LAG_SERIES} over {LOOP_LAG_WINDOW}"
        }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": hpa_meta,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": replicas,
            "maxReplicas": max_replicas(replicas),
            "metrics": metrics,
        },
    }


def _pdb(name: str, part: str, max_unavailable: int | str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(name, part),
        "spec": {
            "maxUnavailable": max_unavailable,
            "selector": {"matchLabels": _labels(part)},
            # A pod that is not ready serves nothing: evicting it costs nothing, and
            # must not block a node drain.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def _policy(
    name: str, part: str, ingress: list[dict[str, Any]] | None, egress: list[dict[str, Any]] | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": {"matchLabels": _labels(part)}, "policyTypes": []}
    if ingress is not None:
        spec["policyTypes"].append("Ingress")
        spec["ingress"] = ingress
    if egress is not None:
        spec["policyTypes"].append("Egress")
        spec["egress"] = egress
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name, part),
        "spec": spec,
    }


def _to(part: str, *ports: int) -> dict[str, Any]:
    return {
        "to": [{"podSelector": {"matchLabels": _labels(part)}}],
        "ports": [{"protocol": "TCP", "port": p} for p in ports],
    }


def _from(peers: list[dict[str, Any]], *ports: int) -> dict[str, Any]:
    return {"from": peers, "ports": [{"protocol": "TCP", "port": p} for p in ports]}


def _pods(*parts: str) -> list[dict[str, Any]]:
    return [{"podSelector": {"matchLabels": _labels(part)}} for part in parts]


DNS_EGRESS = {
    "to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}
#: Prometheus (and anything else) in the monitoring namespace.
MONITORING = [
    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING_NAMESPACE}}}
]


def _network_policies(config: RouteConfig, upstream_url: str | None) -> list[dict[str, Any]]:
    policies = []
    pools = [NAMES.pool(p.name) for p in config.pools]
    for part in pools:
        # Real upstreams live outside the namespace: their addresses are the
        # operator's to add here; the simulator is in it.
        upstream = [_to(NAMES.simulator, SIMULATOR_PORT)] if upstream_url is None else []
        policies.append(
            _policy(
                part,
                part,
                # /metrics is on the pool's one port: Prometheus reaches it there.
                ingress=[_from(_pods(ENVOY), POOL_PORT), _from(MONITORING, POOL_PORT)],
                egress=[*upstream, _to(NAMES.jaeger, JAEGER_OTLP_HTTP_PORT), DNS_EGRESS],
            )
        )
    policies.append(
        _policy(
            ENVOY,
            ENVOY,
            ingress=[
                {"ports": [{"protocol": "TCP", "port": config.listener.address.port}]},
                _from(MONITORING, ENVOY_STATS_PORT),
            ],
            egress=[
                *(_to(part, POOL_PORT) for part in pools),
                _to(NAMES.jaeger, JAEGER_OTLP_GRPC_PORT),
                DNS_EGRESS,
            ],
        )
    )
    # Jaeger takes spans from Envoy (gRPC) and the pools (HTTP); its UI and query API
    # only from the monitoring namespace (or `kubectl port-forward`, which no policy
    # sees). It calls nothing (in-memory storage).
    policies.append(
        _policy(
            NAMES.jaeger,
            NAMES.jaeger,
            ingress=[
                _from(_pods(ENVOY), JAEGER_OTLP_GRPC_PORT),
                _from(_pods(*pools), JAEGER_OTLP_HTTP_PORT),
                _from(MONITORING, JAEGER_UI_PORT),
            ],
            egress=[],
        )
    )
    if upstream_url is None:
        policies.append(
            _policy(
                NAMES.simulator,
                NAMES.simulator,
                ingress=[_from(_pods(*pools), SIMULATOR_PORT)],
                egress=[],
            )
        )
    return policies


def _envoy_drain_s(config: RouteConfig) -> int:
    return math.ceil(max(r.timeout_ms for r in config.routes) / 1000) + ENVOY_DRAIN_EXTRA_S


def _envoy_pre_stop(config: RouteConfig, drain_s: int) -> list[str]:
    """The image has bash but no HTTP client: bash's /dev/tcp posts to the admin
    (loopback only, as routes.toml keeps it)."""
    admin = f"{config.admin.host}/{config.admin.port}"
    post = (
        "{ printf 'POST %s HTTP/1.1\\r\\nHost: admin\\r\\nContent-Length: 0\\r\\n"
        'Connection: close\\r\\n\\r\\n\' "$p" >&3; cat <&3 >/dev/null; } '
        f"3<>/dev/tcp/{admin}"
    )
    script = (
        f"for p in /healthcheck/fail '/drain_listeners?graceful'; do {post}; done; sleep {drain_s}"
    )
    return ["/bin/bash", "-c", script]


def _envoy_objects(config: RouteConfig, replicas: dict[str, int]) -> list[dict[str, Any]]:
    port = config.listener.address.port
    drain_s = _envoy_drain_s(config)
    limits = {p.name: envoy_limits_in_cluster(p, replicas[p.name]) for p in config.pools}
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(ENVOY_CONFIGMAP, ENVOY),
        "data": {
            "envoy.yaml": render_container_envoy(
                config, NAMES, limits=limits, stats_port=ENVOY_STATS_PORT
            )
        },
    }
    prometheus_path, ready_path = STATS_PATHS
    container = _envoy_container(config, drain_s, ready_path)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(ENVOY, ENVOY, (SKIP_DIGEST, SKIP_PULL_ALWAYS, SKIP_CPU_LIMIT)),
        "spec": {
            # Fixed, no HPA: each replica's circuit breakers are 1/ENVOY_REPLICAS of
            # each pool's (envoy_limits_in_cluster).
            "replicas": ENVOY_REPLICAS,
            "selector": {"matchLabels": _labels(ENVOY)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {
                    "labels": _labels(ENVOY),
                    "annotations": _scrape_annotations(ENVOY_STATS_PORT, prometheus_path),
                },
                "spec": _pod_spec(
                    ENVOY,
                    [container],
                    [{"name": "config", "configMap": {"name": ENVOY_CONFIGMAP}}],
                    ENVOY_UID,
                    spread=True,
                    grace_s=drain_s + ENVOY_DRAIN_EXTRA_S,
                ),
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ENVOY, ENVOY),
        "spec": {
            "selector": _labels(ENVOY),
            "ports": [{"name": "http", "port": port, "targetPort": "http"}],
        },
    }
    return [configmap, deployment, service, _pdb(ENVOY, ENVOY, 1)]


def _envoy_container(config: RouteConfig, drain_s: int, ready_path: str) -> dict[str, Any]:
    port = config.listener.address.port
    return {
        "name": "envoy",
        "image": ENVOY_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": [
            "-c",
            ENVOY_CONFIG_PATH,
            "--log-level",
            "warn",
            # Containers are replaced, never hot-restarted (no shared memory to keep).
            "--disable-hot-restart",
            "--drain-time-s",
            str(drain_s),
            "--drain-strategy",
            "immediate",
        ],
        "ports": [
            {"name": "http", "containerPort": port},
            {"name": "stats", "containerPort": ENVOY_STATS_PORT},
        ],
        # Ready: the admin's /ready through the stats listener (503 once draining).
        # Alive: the listener accepts connections (it still does while draining).
        "readinessProbe": _http_probe(ready_path, "stats", 2, 2),
        "livenessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 10, "timeoutSeconds": 2},
        "lifecycle": {"preStop": {"exec": {"command": _envoy_pre_stop(config, drain_s)}}},
        "resources": {
            "requests": {"cpu": "500m", "memory": "128Mi"},
            "limits": {"memory": "256Mi"},
        },
        "volumeMounts": [{"name": "config", "mountPath": str(Path(ENVOY_CONFIG_PATH).parent)}],
    }


def _simple_deployment(
    name: str,
    image: str,
    args: list[str],
    ports: dict[str, int],
    uid: int,
    probes: dict[str, dict[str, Any]],
    *,
    env: dict[str, str] | None = None,
    identity: bool = True,
    volumes: tuple[tuple[str, str, str], ...] = (),
    skips: tuple[tuple[str, str], ...] = (),
) -> list[dict[str, Any]]:
    """One replica of a helper (the simulator, Jaeger): it keeps no state worth a PDB.
    `identity`: the project's OpenTelemetry resource (`_identity_env`): not for Jaeger."""
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "ports": [{"name": n, "containerPort": p} for n, p in ports.items()],
        "env": [
            *(_identity_env(name, name) if identity else []),
            *({"name": k, "value": v} for k, v in (env or {}).items()),
        ],
        **probes,
        "resources": {
            "requests": {"cpu": "250m", "memory": "256Mi"},
            "limits": {"cpu": "1", "memory": "512Mi"},
        },
    }
    if volumes:
        container["volumeMounts"] = [{"name": v, "mountPath": path} for v, _, path in volumes]
    pod_volumes = [{"name": v, "configMap": {"name": cm}} for v, cm, _ in volumes]
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(name, name, (SKIP_DIGEST, SKIP_PULL_ALWAYS, *skips)),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": _labels(name)},
                "template": {
                    "metadata": {"labels": _labels(name)},
                    "spec": _pod_spec(name, [container], pod_volumes, uid),
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(name, name),
            "spec": {
                "selector": _labels(name),
                "ports": [{"name": n, "port": p, "targetPort": n} for n, p in ports.items()],
            },
        },
    ]


def _pod_monitor(name: str, part: str, port: str, path: str) -> dict[str, Any]:
    """For the Prometheus operator: its PodMonitors label every series with
    `namespace` and `pod`, as the annotation-driven job does."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _meta(name, part),
        "spec": {
            "selector": {"matchLabels": _labels(part)},
            "podMetricsEndpoints": [{"port": port, "path": path, "interval": "15s"}],
        },
    }


def _adapter_rules() -> dict[str, Any]:
    """prometheus-adapter's rule for the io pool's HPA: the p99 of each pod's loop lag
    over LOOP_LAG_WINDOW, from the pools' histogram (labels `namespace`, `pod`)."""
    return {
        "rules": [
            {
                "seriesQuery": f'{LOOP_LAG_SERIES}_bucket{{namespace!="",pod!=""}}',
                "resources": {
                    "overrides": {
                        "namespace": {"resource": "namespace"},
                        "pod": {"resource": "pod"},
                    }
                },
                "name": {"matches": f"^{LOOP_LAG_SERIES}_bucket$", "as": LOOP_LAG_METRIC},
                "metricsQuery": (
                    "histogram_quantile(0.99, sum(rate(<<.Series>>{<<.LabelMatchers>>}"
                    f"[{LOOP_LAG_WINDOW}])) by (le, <<.GroupBy>>))"
                ),
            }
        ]
    }


def _monitoring_objects(config: RouteConfig) -> dict[str, list[dict[str, Any]]]:
    monitors = [
        _pod_monitor(NAMES.pool(p.name), NAMES.pool(p.name), "http", config.meta.metrics)
        for p in config.pools
    ]
    monitors.append(_pod_monitor(ENVOY, ENVOY, "stats", STATS_PATHS[0]))
    adapter = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta("pricing-adapter-rules", APP, namespace=MONITORING_NAMESPACE),
        "data": {"config.yaml": yaml.safe_dump(_adapter_rules(), sort_keys=False, width=200)},
    }
    return {PROMETHEUS_OPERATOR_FILE: monitors, PROMETHEUS_ADAPTER_FILE: [adapter]}


def render_kubernetes(
    config: RouteConfig,
    replicas: dict[str, int],
    jaeger_config: str,
    upstream_url: str | None = None,
) -> dict[str, str]:
    """File name -> text of every manifest and the kustomization.yaml listing them.
    `replicas`: each pool's HPA minimum (its maximum is max_replicas of it).
    `jaeger_config`: Jaeger's config (from the launcher layer, which owns it)."""
    files: dict[str, list[dict[str, Any]]] = {}
    for pool in config.pools:
        files[f"{NAMES.pool(pool.name)}.yaml"] = _pool_objects(
            config, pool, replicas[pool.name], upstream_url
        )
    files["envoy.yaml"] = _envoy_objects(config, replicas)
    if upstream_url is None:
        files["simulator.yaml"] = _simple_deployment(
            NAMES.simulator,
            IMAGE,
            ["simulator"],
            {"http": SIMULATOR_PORT},
            APP_UID,
            {
                "readinessProbe": _http_probe(config.meta.healthz, "http", 2, 2),
                "livenessProbe": _http_probe(config.meta.healthz, "http", 10, 3),
            },
            env={PORT_ENV: str(SIMULATOR_PORT)},
        )
    files["jaeger.yaml"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(JAEGER_CONFIGMAP, NAMES.jaeger),
            "data": {"config.yaml": jaeger_config},
        },
        *_simple_deployment(
            NAMES.jaeger,
            JAEGER_IMAGE,
            ["--config", JAEGER_CONFIG_PATH],
            {
                "otlp-grpc": JAEGER_OTLP_GRPC_PORT,
                "otlp-http": JAEGER_OTLP_HTTP_PORT,
                "ui": JAEGER_UI_PORT,
            },
            JAEGER_UID,
            # Jaeger's config opens no health-check port: ready when its query API
            # answers, alive while its OTLP gRPC receiver accepts connections.
            {
                "readinessProbe": _http_probe("/api/services", "ui", 5, 3),
                "livenessProbe": {
                    "tcpSocket": {"port": "otlp-grpc"},
                    "periodSeconds": 10,
                    "timeoutSeconds": 2,
                },
            },
            identity=False,
            volumes=(("config", JAEGER_CONFIGMAP, str(Path(JAEGER_CONFIG_PATH).parent)),),
        ),
    ]
    files["network-policies.yaml"] = _network_policies(config, upstream_url)
    monitoring = _monitoring_objects(config)
    header = HEADER.format(source=Path(config.source).name, k8s=KUBERNETES_VERSION)
    out = {
        name: header + yaml.safe_dump_all(docs, sort_keys=False, width=100)
        for name, docs in {**files, **monitoring}.items()
    }
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": NAMESPACE,
        "labels": [{"pairs": {"app.kubernetes.io/part-of": APP}}],
        "resources": sorted(files),
    }
    out["kustomization.yaml"] = header + yaml.safe_dump(kustomization, sort_keys=False)
    return out
