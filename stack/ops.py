"""Changing a running stack without failing a request: a rolling reload of a pool,
and a route config applied live (the destination pool first, then Envoy, then the
old pool). Both act on what the stack's pid file says (`stack.state.Running`), so
`pricingctl` can run them from another process than the one that started the stack.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from routing.envoy import LDS_FILE, cluster_name, render_envoy, render_xds, xds_version
from routing.envoy import envoy_config as static_envoy_config
from routing.load import load_routes
from routing.model import Layout, RouteConfig
from routing.write import render_routes_toml, write_atomic, write_routes
from stack.envoy import Admin, validate, write_xds
from stack.procfs import children, serving_workers
from stack.state import Running, pid_alive, replica_name
from toolkit.wait import wait_until

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Seconds a new worker gets to load the app and accept (the cpu pool builds its road
# graphs first), and an old one to finish what it holds (gunicorn's graceful_timeout
# is 10 s).
BOOT_TIMEOUT_S = 90.0
RETIRE_TIMEOUT_S = 20.0
# Seconds Envoy gets to load a replaced LDS/CDS file and report it active.
SWITCH_TIMEOUT_S = 30.0
# The app a new worker of `pool` would load, built once in a throw-away process
# with that worker's environment, as gunicorn loads it: a deployment that cannot boot
# is refused before any worker is replaced (a gunicorn worker that fails to boot halts
# its master).
_BOOT_CHECK = "import sys; from gunicorn.util import import_app; import_app(sys.argv[1])"

Say = Callable[[str], None]


class OpsError(RuntimeError):
    """An operation stopped; the message is one line saying what and what still runs."""


# --- one operation at a time ------------------------------------------------------------

LOCK_FILE = "ops.lock"


@contextlib.contextmanager
def exclusive(running: Running, what: str) -> Iterator[None]:
    """Hold the stack's operation lock (`<run dir>/ops.lock`) while `what` runs: a
    second reload or apply on the same stack is refused at once, naming the first. The
    kernel drops the lock when its holder exits, however it exits."""
    path = running.run_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another command"
            raise OpsError(
                f"{what}: {holder} is changing this stack; nothing was done "
                "(run it again when that one is finished)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"`pricingctl {what}` (pid {os.getpid()})".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock


# --- rolling reload -------------------------------------------------------------------


def boot_check(running: Running, pool: str) -> str | None:
    """None when the pool's app loads with the pool's environment; else the last line
    of the error."""
    done = subprocess.run(
        [sys.executable, "-c", _BOOT_CHECK, running.app or f"pricing:create_app(pool={pool!r})"],
        env={**os.environ, **running.pool_env[pool]},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=BOOT_TIMEOUT_S,
        check=False,
    )
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {done.returncode}"


def reload_pool(running: Running, pool: str, say: Say) -> None:
    """Replace every worker of `pool`, replica by replica and one worker at a time:
    TTIN starts a new worker; once it accepts and Envoy sees the pool healthy, TTOU
    retires the oldest (gracefully: it finishes what it has accepted). The pool never
    has fewer serving workers."""
    if pool not in running.pool_routes:
        known = ", ".join(running.pool_routes)
        raise OpsError(f"reload: no pool {pool!r} in this stack (pools: {known})")
    # The replicas' addresses from the config Envoy serves: pools keep their addresses
    # while the stack runs, and the pool's own file may be the new one being tried.
    binds = load_routes(running.config_path).pool(pool, running.layout).binds
    for replica in range(len(binds)):
        master = running.pids[replica_name(pool, replica)]
        if not pid_alive(master):
            raise OpsError(f"reload {pool}: its gunicorn master ({master}) is not running")
    problem = boot_check(running, pool)
    if problem is not None:
        raise OpsError(
            f"reload {pool}: a new worker would not boot ({problem}); "
            "nothing was replaced, the old workers keep serving"
        )
    for replica, bind in enumerate(binds):
        name = pool if len(binds) == 1 else f"{pool} ({bind})"
        master = running.pids[replica_name(pool, replica)]
        _reload_replica(running, pool, name, master, bind.port, say)


def _reload_replica(
    running: Running, pool: str, name: str, master: int, port: int, say: Say
) -> None:
    admin = Admin(running.admin_url)
    old = children(master)
    for i, retiring in enumerate(old, start=1):
        started = time.monotonic()
        before = set(children(master))
        os.kill(master, signal.SIGTTIN)

        def new_serving(before: set[int] = before) -> set[int]:
            return set(serving_workers(master, port)) - before

        if not wait_until(new_serving, BOOT_TIMEOUT_S, 0.1):
            raise OpsError(
                f"reload {name}: the new worker did not serve within {BOOT_TIMEOUT_S:.0f} s "
                f"(see the pool's log in {running.run_dir / 'logs'}); "
                f"the old workers keep serving ({i - 1} of {len(old)} replaced)"
            )
        (new,) = sorted(new_serving())[:1]
        os.kill(master, signal.SIGTTOU)
        if not wait_until(lambda: len(children(master)) == len(old), RETIRE_TIMEOUT_S, 0.1):
            raise OpsError(f"reload {name}: an old worker did not stop within {RETIRE_TIMEOUT_S} s")
        wait_until(lambda: admin.clusters_healthy([cluster_name(pool)]), RETIRE_TIMEOUT_S, 0.1)
        say(
            f"reload {name}: worker {i}/{len(old)}: {retiring} -> {new} serving "
            f"({time.monotonic() - started:.1f} s)"
        )


# --- routes apply ----------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """A new route config, fitted to the running stack (its addresses), and what moves."""

    old: RouteConfig
    new: RouteConfig
    moved: dict[str, tuple[str, str]]  # endpoint -> (old pool, new pool)


def plan_apply(running: Running, wanted: RouteConfig) -> Plan:
    """`wanted` on the running stack's addresses. Pools are fixed while the stack runs:
    a change to a pool's settings is refused, naming the pool."""
    old = load_routes(running.config_path)
    for pool in old.pools_for(running.layout):
        try:
            other = wanted.pool(pool.name, running.layout)
        except KeyError:
            raise OpsError(
                f"routes apply: pool {pool.name!r} is gone from the new config; "
                "pools change with `pricingctl down` and `up`"
            ) from None
        if replace(other, binds=pool.binds) != pool:
            raise OpsError(
                f"routes apply: pool {pool.name!r} has new settings; "
                "pool settings change with `pricingctl down` and `up`, routes with apply"
            )
    new = replace(
        wanted,
        listener=replace(wanted.listener, address=old.listener.address),
        admin=old.admin,
        upstream_base_url=old.upstream_base_url,
        pools=old.pools,
        shared=old.shared,
        source=old.source,
    )
    moved = {}
    for route in new.routes:
        before = old.route_for_endpoint(route.endpoint)
        if before is None:
            continue
        was, now = old.pool_of(before, running.layout), new.pool_of(route, running.layout)
        if was != now:
            moved[route.endpoint] = (was, now)
    return Plan(old, new, moved)


def check_envoy(running: Running, config: RouteConfig) -> str | None:
    """Envoy's own verdict on the whole config (listener, routes, clusters)."""
    import yaml

    document = static_envoy_config(
        config, running.layout, tracing_collector=running.tracing_collector
    )
    return validate(yaml.safe_dump(document, sort_keys=False))


def _transitional(plan: Plan, pool: str, layout: Layout) -> RouteConfig:
    """The new config as `pool` serves it while Envoy switches: routes moving away from
    it stay with it, routes moving to it are there already. Two pools then serve a
    moving endpoint, so it is served whichever config Envoy runs."""
    routes = tuple(
        replace(route, pool=pool) if plan.moved.get(route.endpoint, ("", ""))[0] == pool else route
        for route in plan.new.routes
    )
    return replace(plan.new, routes=routes)


def _set_pool_routes(running: Running, pool: str, config: RouteConfig, say: Say) -> None:
    """Give `pool` this route config (a rolling reload: new workers read it)."""
    path = running.pool_routes[pool]
    if path.read_text(encoding="utf-8") == render_routes_toml(config):
        return
    write_routes(config, path)
    reload_pool(running, pool, say)


def apply_routes(running: Running, wanted: RouteConfig, say: Say) -> Plan:
    """Apply `wanted` to the running stack: refuse it before anything changes when it is
    invalid; otherwise (1) the pools that gain an endpoint serve it, (2) Envoy switches
    (LDS/CDS files renamed into place) and reports the new listener active, and its
    old connections have drained, (3) the pools drop what they no longer serve."""
    plan = plan_apply(running, wanted)
    problem = check_envoy(running, plan.new)
    if problem is not None:
        raise OpsError(f"routes apply: Envoy refuses the new config: {problem}")
    layout = running.layout
    pools = list(running.pool_routes)
    for endpoint, (was, now) in plan.moved.items():
        say(f"routes apply: {endpoint} moves from {was} to {now}")
    # (1) every pool serves what it serves now and what it will serve.
    for pool in pools:
        _set_pool_routes(running, pool, _transitional(plan, pool, layout), say)
    # (2) Envoy.
    files = render_xds(plan.new, layout, tracing_collector=running.tracing_collector)
    version = xds_version(files[LDS_FILE])
    admin = Admin(running.admin_url)
    if admin.listener_version() != version:
        write_xds(running.xds_dir, files)
        if not wait_until(lambda: admin.listener_version() == version, SWITCH_TIMEOUT_S, 0.05):
            raise OpsError(
                f"routes apply: Envoy did not report listener version {version} within "
                f"{SWITCH_TIMEOUT_S:.0f} s (see {running.run_dir / 'logs' / 'envoy.log'}); "
                "every pool still serves the old and the new routes"
            )
        say(f"routes apply: Envoy runs listener version {version}")
        # Connections accepted before the switch still route by the old config until
        # they close (Envoy closes them within its drain time).
        wait_until(lambda: admin.draining() == 0, running.drain_time_s + 5.0, 0.1)
    write_routes(plan.new, running.config_path)
    # (3) what each pool serves from now on.
    for pool in pools:
        _set_pool_routes(running, pool, plan.new, say)
    bootstrap = render_envoy(plan.new, layout, xds_dir=str(running.xds_dir))
    write_atomic(running.run_dir / f"envoy.{layout.value}.yaml", bootstrap)
    return plan
