"""The image and the compose topology for real, under podman: the real Dockerfile built
(offline, on a local Debian base), `pricingctl deploy render compose` run with
podman-compose, traffic through Envoy by service name, a pool replica killed.

Skipped, with the reason in one line, where podman or podman-compose is missing or
cannot start a container. The first run builds the base image, the wheelhouse and the
images (a few minutes); later runs reuse them (tests/integration/support/podman.py).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from routing.container import IMAGE, POOL_PORT, SERVICE_NAMES
from routing.model import RouteConfig
from tests.integration.support import jaeger_api, podman
from tests.integration.support.http import call_endpoint, http
from tests.samples import OFFER_QUERY
from toolkit.wait import wait_for, wait_until
from tracing.readback.spans import Span, from_jaeger

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NON_ROOT_UID = "10001"  # the Dockerfile's USER
KILLED_POOL = "io"  # its GETs retry on another replica on connect failure


def test_the_runtime_wrapper_drops_rlimits_from_a_bundle_and_an_exec(tmp_path: Path) -> None:
    """No podman needed: what the wrapper changes before it runs runc."""
    from tests.integration.support import oci_runtime_no_rlimits as wrapper

    rlimits = [{"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576}]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"process": {"args": ["true"], "rlimits": rlimits}}))
    process = tmp_path / "exec.json"
    process.write_text(json.dumps({"args": ["id"], "rlimits": rlimits}))
    args = ["--root", "/run/runc", "create", "--bundle", str(tmp_path), "ctr"]
    wrapper.drop_rlimits(str(tmp_path / "config.json"), process_key=True)
    wrapper.drop_rlimits(str(process), process_key=False)
    assert wrapper.option(args, "--bundle") == str(tmp_path)
    assert wrapper.option(["exec", f"--process={process}"], "--process") == str(process)
    assert json.loads(config.read_text()) == {"process": {"args": ["true"]}}
    assert json.loads(process.read_text()) == {"args": ["id"]}


def test_the_podman_copy_changes_only_addresses_and_health_check_form() -> None:
    """No podman needed: the compose document the test runs, against the committed one."""
    import yaml

    rendered = yaml.safe_load((podman.REPO_ROOT / "deploy/compose/docker-compose.yml").read_text())
    copy = podman.for_podman(rendered, "net-a", "net-b", {8080: 18080, 16686: 26686, 9090: 19090})
    assert copy["networks"]["default"] == {"external": True, "name": "net-a"}
    for name, spec in copy["services"].items():
        original = rendered["services"][name]
        changed = {k for k in {*spec, *original} if spec.get(k) != original.get(k)}
        assert changed <= {"networks", "ports", "healthcheck"}, (name, changed)
        if "ports" in original:
            assert spec["networks"] == ["default", "edge"]
            assert all(p.startswith("127.0.0.1:") for p in spec["ports"])
        else:
            assert "networks" not in spec  # the internal network only
        if "healthcheck" in original:
            assert isinstance(spec["healthcheck"]["test"], str)
            assert shlex.split(spec["healthcheck"]["test"]) == original["healthcheck"]["test"][1:]
    assert copy["services"]["envoy"]["ports"] == ["127.0.0.1:18080:8080"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> podman.Podman:
    try:
        return podman.podman(tmp_path_factory.mktemp("podman"))
    except podman.Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def images(engine: podman.Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The service image from the real Dockerfile, and the Envoy and Jaeger stand-ins."""
    workdir = tmp_path_factory.mktemp("images")
    try:
        stand_ins = podman.stand_ins()
    except podman.Unavailable as exc:
        pytest.skip(str(exc))
    for stand_in in stand_ins:
        podman.build_stand_in(engine, stand_in, workdir)
    return podman.build_service_image(engine, workdir)


@pytest.fixture(scope="module")
def topology(
    engine: podman.Podman,
    images: str,
    all_traced_routes: RouteConfig,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[podman.Topology]:
    """The compose folder as `pricingctl deploy render compose` writes it, from the
    committed routes with Envoy sampling every request (so one request makes a trace)."""
    rendered = tmp_path_factory.mktemp("compose")
    render = ["deploy", "--config", str(all_traced_routes.source), "render", "compose"]
    result = subprocess.run(
        [sys.executable, "-m", "pricingctl", *render, "--out", str(rendered)],
        capture_output=True,
        text=True,
        cwd=podman.REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr
    with podman.compose_up(engine, rendered, all_traced_routes.listener.address.port) as running:
        yield running


def test_the_image_runs_as_its_non_root_user(engine: podman.Podman, images: str) -> None:
    assert images == IMAGE
    uid = engine.run("run", "--rm", "--entrypoint", "id", IMAGE, "-u").stdout.strip()
    assert uid == NON_ROOT_UID


def test_the_image_runs_every_compiled_part(engine: podman.Podman, images: str) -> None:
    """The timing core, the call observer and both span encoders are the compiled ones
    in the image (the Dockerfile copies each from the wheel), not the Python reference."""
    probe = (
        "import inspect; from tracing import export, otlp_protobuf; "
        "from tracing.timing import native; "
        "assert native.compiled_runs(), native.reason; "
        "assert inspect.isbuiltin(export.span_fields_text); "
        "assert inspect.isbuiltin(otlp_protobuf.span_fields_proto); print('compiled')"
    )
    done = engine.run("run", "--rm", "--entrypoint", "python", images, "-c", probe, check=False)
    assert done.stdout.strip() == "compiled", done.stderr[-2000:]


def test_every_service_is_healthy_and_pools_run_unprivileged(
    engine: podman.Podman, topology: podman.Topology, routes: RouteConfig
) -> None:
    assert topology.unhealthy() == []
    running = engine.run(
        "ps", "--filter", f"label=io.podman.compose.project={topology.project}",
        "--format", "{{.Names}}",
    ).stdout.split()  # fmt: skip
    assert sorted(running) == sorted(topology.all_containers())
    for pool in routes.pools:
        replicas = topology.containers(SERVICE_NAMES.pool(pool.name))
        assert len(replicas) >= 2
        for name in replicas:
            assert engine.exec(name, "id", "-u").strip() == NON_ROOT_UID


def test_every_route_is_served_by_its_pool_through_envoy(
    topology: podman.Topology, routes: RouteConfig
) -> None:
    """Offers (io pool) and rideshare quotes (cpu pool) among them: Envoy reaches each
    pool by its compose service name."""
    for route in routes.routes:
        status, pool = call_endpoint(topology.url, route)
        assert (route.endpoint, status, pool) == (route.endpoint, 200, route.pool)


def _complete_trace(jaeger_url: str) -> list[Span] | None:
    traces = jaeger_api.by_trace(from_jaeger(jaeger_url, service="envoy", limit=20))
    for trace in traces.values():
        services = {s.service for s in trace}
        kinds = {s.kind for s in trace if s.service == "pricingservice"}
        # The pool's server span ends after its calls and may leave in a later batch:
        # a trace is complete once it is in too.
        if {"envoy", "pricingservice"} <= services and {"server", "client"} <= kinds:
            return trace
    return None


def test_a_request_through_envoy_makes_one_trace_in_jaeger(topology: podman.Topology) -> None:
    """Envoy's span (OTLP gRPC to jaeger:4317) and the pool's server and client spans
    (OTLP HTTP to jaeger:4318) under one trace id."""
    reply = http("GET", f"{topology.url}/v1/offers/bike?{OFFER_QUERY}")
    assert reply.status == 200
    trace = wait_for(lambda: _complete_trace(topology.jaeger_url), 30, 1.0)
    assert trace is not None, "no trace with Envoy's and the pool's spans in Jaeger"
    server = [s for s in trace if s.service == "pricingservice" and s.kind == "server"]
    envoy = [s for s in trace if s.service == "envoy"]
    assert len(server) == 1 and len(envoy) == 1
    assert server[0].parent_id == envoy[0].span_id


def test_each_pool_replica_serves_its_metrics(
    engine: podman.Podman, topology: podman.Topology, routes: RouteConfig
) -> None:
    """Read inside each container (the pools publish no port): what Prometheus scrapes."""
    fetch = (
        "import urllib.request; print(urllib.request.urlopen("
        f"'http://127.0.0.1:{POOL_PORT}{routes.meta.metrics}', timeout=5).read().decode())"
    )
    for pool in routes.pools:
        for name in topology.containers(SERVICE_NAMES.pool(pool.name)):
            text = engine.exec(name, "python", "-c", fetch)
            assert "# TYPE pricing_loop_lag_seconds histogram" in text, name
            # Its own pool's settings: the workers routes.toml gives it.
            assert f"\npricing_workers {float(pool.workers)}\n" in text, name


def _envoy_hosts(
    engine: podman.Podman, topology: podman.Topology, routes: RouteConfig, cluster: str
) -> dict[str, int]:
    """The addresses Envoy's DNS cluster holds now, each with the requests it was sent
    (its admin, on loopback inside its container)."""
    admin = (
        "import urllib.request; print(urllib.request.urlopen("
        f"'http://127.0.0.1:{routes.admin.port}/clusters?format=json', timeout=5).read().decode())"
    )
    text = engine.exec(topology.containers("envoy")[0], "python3", "-c", admin)
    (status,) = [s for s in json.loads(text)["cluster_statuses"] if s["name"] == cluster]
    return {
        host["address"]["socket_address"]["address"]: next(
            int(s.get("value", 0)) for s in host["stats"] if s["name"] == "rq_total"
        )
        for host in status["host_statuses"]
    }


def _address(engine: podman.Podman, container: str) -> str:
    (network,) = json.loads(engine.run("inspect", container).stdout)[0]["NetworkSettings"][
        "Networks"
    ].values()
    return str(network["IPAddress"])


def _offers(url: str, count: int) -> list[int]:
    return [http("GET", f"{url}/v1/offers/bike?{OFFER_QUERY}").status for _ in range(count)]


def test_a_killed_pool_replica_leaves_envoy_serving_from_the_other(
    engine: podman.Podman, topology: podman.Topology, routes: RouteConfig
) -> None:
    """SIGKILL one io replica: Envoy's DNS cluster drops its address (podman's DNS stops
    answering with it; Envoy re-resolves every 5 s) and the other replica serves every
    offer. The requests sent while Envoy notices are counted, not asserted: a dead
    container's address swallows the connection attempts (no refusal, as on loopback),
    see the README."""
    cluster = f"{KILLED_POOL}_pool"
    victim, survivor = topology.containers(SERVICE_NAMES.pool(KILLED_POOL))[:2]
    assert _offers(topology.url, 20) == [200] * 20
    before = _envoy_hosts(engine, topology, routes, cluster)
    assert sorted(before) == sorted([_address(engine, victim), _address(engine, survivor)])
    assert all(count > 0 for count in before.values()), before  # both replicas served
    survivor_address = _address(engine, survivor)

    engine.run("kill", "--signal", "KILL", victim)
    killed_at = time.monotonic()
    while_noticing: list[int] = []

    def dropped() -> bool:
        while_noticing.extend(_offers(topology.url, 1))
        return list(_envoy_hosts(engine, topology, routes, cluster)) == [survivor_address]

    assert wait_until(dropped, timeout_s=60, interval_s=0.1)
    lost = len([s for s in while_noticing if s != 200])
    noticed_s = time.monotonic() - killed_at
    print(
        f"killed {victim}: Envoy's DNS cluster dropped it after {noticed_s:.1f} s; "
        f"{lost} of {len(while_noticing)} offers sent meanwhile failed"
    )

    served_before = _envoy_hosts(engine, topology, routes, cluster)[survivor_address]
    assert _offers(topology.url, 20) == [200] * 20
    served_after = _envoy_hosts(engine, topology, routes, cluster)[survivor_address]
    assert served_after - served_before >= 20
    assert engine.health(survivor)
