"""The whole stack: upstream simulator -> gunicorn pools -> Envoy, started in order,
each waited for, and stopped in reverse order by process group (Envoy drained first
when asked). A started stack writes its pid file (`stack.state`) in its run dir."""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from routing.envoy import STATS_PATHS, cluster_name, render_envoy, render_xds
from routing.gunicorn import GRACEFUL_TIMEOUT_S
from routing.model import Layout, RouteConfig
from routing.prometheus import PoolTarget
from routing.write import write_routes
from simulator.server import HEALTH_PATH as SIMULATOR_HEALTH_PATH
from stack import jaeger, prometheus
from stack.envoy import Admin, envoy_binary, write_xds
from stack.jaeger import JaegerPorts
from stack.procfs import group_members, serving_workers
from stack.procs import Proc, StartError, free_ports, port_in_use
from stack.state import Running, clear_state, process_start, replica_name, write_state
from toolkit.contract import METRICS_DIR_ENV, POOL_ENV, ROUTES_ENV, SPAN_FILE_ENV, UPSTREAM_URL_ENV
from toolkit.fetch import http_ok
from toolkit.wait import wait_until
from tracing.settings import OTLP_TRACES_ENDPOINT_ENV, TRACES_PATH

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RUN_DIR = PROJECT_ROOT / ".run"
DEFAULT_SIMULATOR_PORT = 8200
# One Envoy worker thread: this is a 2-core machine and the pools need the CPU.
ENVOY_CONCURRENCY = 1
# Seconds beyond the longest route timeout that a drain waits for in-flight requests.
DRAIN_MARGIN_S = 1.0
# Seconds beyond gunicorn's graceful timeout that a replaced master's orphaned workers
# get to finish before SIGKILL.
ORPHAN_STOP_MARGIN_S = 2.0

__all__ = ["PortTaken", "Stack", "envoy_binary"]


class PortTaken(StartError):
    """A port the stack needs is already in use."""


@dataclass
class Stack:
    config: RouteConfig
    layout: Layout
    run_dir: Path = DEFAULT_RUN_DIR
    simulator_port: int = DEFAULT_SIMULATOR_PORT
    simulator_config: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    # The WSGI app the pools serve, as gunicorn names one (``module:factory(args)``);
    # None: the service's own, which each pool's config names. A caller that serves more
    # than the service (the benchmark) hands its own entry in here.
    app: str | None = None
    # Start Jaeger and send every span there (Envoy's too); otherwise the pools
    # write OTLP JSON lines to span_file.
    with_jaeger: bool = False
    jaeger_ports: JaegerPorts | None = None  # None: free ports
    # The web UI Jaeger serves (build-ui.sh's cached build), once started; None: API only.
    jaeger_ui: Path | None = None
    # Start Prometheus (scraping the pools and Envoy, the rules loaded) as these say;
    # None: not at all.
    prometheus_settings: prometheus.PrometheusSettings | None = None
    prometheus_port: int | None = None  # once started
    procs: dict[str, Proc] = field(default_factory=dict)
    # Process name -> times it was started again after it exited on its own
    # (stack.supervise); written to the pid file.
    restarts: Counter[str] = field(default_factory=Counter)
    # Replica name -> its listening socket, bound here and held for the stack's life
    # (as systemd's socket activation holds one): each gunicorn master it starts
    # serves on it (`bind fd://N`), so a master that dies takes no socket with it.
    listeners: dict[str, socket.socket] = field(default_factory=dict)
    # Replaced masters' orphaned workers, each group stopping in a thread of its own.
    retiring: list[threading.Thread] = field(default_factory=list)

    @property
    def span_file(self) -> Path:
        return self.run_dir / "spans.jsonl"

    @property
    def jaeger_url(self) -> str | None:
        """Jaeger's query API, once started."""
        return self.jaeger_ports.query_url if self.with_jaeger and self.jaeger_ports else None

    @classmethod
    def on_free_ports(
        cls, config: RouteConfig, layout: Layout, run_dir: Path, **kw: object
    ) -> Stack:
        """A stack whose every listener is on a port the kernel picked (tests, benchmark)."""
        moved, simulator = config_on_free_ports(config)
        return cls(moved, layout, run_dir, simulator_port=simulator, **kw)  # type: ignore[arg-type]

    @property
    def prometheus_url(self) -> str | None:
        """Prometheus's web UI and API, once started."""
        return prometheus.url(self.prometheus_port) if self.prometheus_port else None

    # --- addresses ------------------------------------------------------------

    @property
    def url(self) -> str:
        a = self.config.listener.address
        return f"http://{a.host}:{a.port}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.config.admin.host}:{self.config.admin.port}"

    @property
    def simulator_url(self) -> str:
        return f"http://127.0.0.1:{self.simulator_port}"

    def pool_url(self, pool: str, replica: int = 0) -> str:
        bind = self.config.pool(pool, self.layout).binds[replica]
        return f"http://{bind.host}:{bind.port}"

    replica_name = staticmethod(replica_name)

    # --- lifecycle ------------------------------------------------------------

    def check_ports(self) -> None:
        wanted = [
            (
                "Envoy listener",
                self.config.listener.address.host,
                self.config.listener.address.port,
            ),
            ("Envoy admin", self.config.admin.host, self.config.admin.port),
            ("upstream simulator", "127.0.0.1", self.simulator_port),
            *(
                (f"pool {p.name}", b.host, b.port)
                for p in self.config.pools_for(self.layout)
                for b in p.binds
            ),
        ]
        for i, (what, host, port) in enumerate(wanted):
            for other, other_host, other_port in wanted[:i]:
                if port == other_port and _same_address(host, other_host):
                    raise PortTaken(f"port {port} is given to both the {other} and the {what}")
            if port_in_use(host, port):
                raise PortTaken(f"port {port} on {host} ({what}) is already in use")

    def start(self, timeout_s: float = 60.0) -> Stack:
        self.check_ports()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # The pools append to it; owner only, also when an earlier run left it wider.
        self.span_file.touch(mode=0o600)
        self.span_file.chmod(0o600)
        try:
            if self.with_jaeger:
                self._start_jaeger(timeout_s)
            self._start_simulator(timeout_s)
            # Every replica loads its app at once (the cpu pool's road graphs take the
            # longest); then each is waited for.
            started = [
                (pool.name, replica, self._spawn_replica(pool.name, replica))
                for pool in self.config.pools_for(self.layout)
                for replica in range(pool.replicas)
            ]
            for pool_name, replica, proc in started:
                self._wait_replica(pool_name, replica, proc, timeout_s)
            self._start_envoy(timeout_s)
            if self.prometheus_settings is not None:
                self._start_prometheus(self.prometheus_settings, timeout_s)
        except BaseException:
            self.stop()
            raise
        write_state(self.running())
        return self

    def stop(self) -> None:
        for thread in self.retiring:
            thread.join()
        self.retiring.clear()
        self._stop_procs(list(self.procs))
        clear_state(self.run_dir, os.getpid())

    def drain(self) -> bool:
        """Envoy stops accepting connections; the requests it has accepted finish (each
        within its route timeout). True when none was left in flight. Then `stop`
        stops the pools with nothing on their way to them."""
        envoy = self.procs.get("envoy")
        if envoy is None or not envoy.alive():
            return True
        try:
            self.admin.stop_accepting()
            return wait_until(lambda: self.admin.active_requests() == 0, self.drain_time_s, 0.02)
        except OSError:
            return False

    @property
    def drain_time_s(self) -> int:
        """Seconds an accepted request may still take: the longest route timeout, and a
        margin. Envoy's own --drain-time-s for the connections an update replaces."""
        longest_ms = max(r.timeout_ms for r in self.config.routes)
        return math.ceil(longest_ms / 1000 + DRAIN_MARGIN_S)

    @property
    def admin(self) -> Admin:
        return Admin(self.admin_url)

    def running(self) -> Running:
        """What the pid file says: enough for another process to reload, re-route or
        stop this stack."""
        pools = [p.name for p in self.config.pools_for(self.layout)]
        return Running(
            run_dir=self.run_dir.resolve(),
            layout=self.layout,
            launcher_pid=os.getpid(),
            url=self.url,
            admin_url=self.admin_url,
            pids={name: proc.pid for name, proc in self.procs.items()},
            config_path=self._routes_path("active"),
            pool_routes={pool: self._routes_path(pool) for pool in pools},
            pool_env={pool: self.pool_env(pool) for pool in pools},
            xds_dir=self.xds_dir(),
            tracing_collector=self.tracing_collector,
            drain_time_s=self.drain_time_s,
            started={
                pid: start
                for pid in (os.getpid(), *(proc.pid for proc in self.procs.values()))
                if (start := process_start(pid)) is not None
            },
            source_config=Path(self.config.source).resolve(),
            app=self.app,
            restarts=dict(self.restarts),
        )

    def restart(self, name: str, timeout_s: float = 60.0) -> Proc:
        """Start `name` again after it exited on its own, as it was started: the same
        command on the same ports and files (Envoy's bootstrap and the LDS/CDS files
        `routes apply` may have replaced, a pool's own route file), none rendered
        again; wait until its own readiness check passes, and record it in the pid
        file. Any process the stack runs, whatever started it: one more part of the
        stack needs nothing here. Raises StartError (the new process stopped) when it
        does not come back.

        What is left of the old process's group is stopped (SIGTERM, then SIGKILL after
        the stop's timeout), first, or, for a pool, once the new master's own workers
        serve: a dead gunicorn master's orphaned workers serve on from the pool's
        socket, which the launcher holds, while the new master boots on the same
        socket; then they finish what they hold and leave. No connection is refused
        or reset meanwhile."""
        old = self.procs[name]
        hand_over = name in self.listeners and bool(group_members(old.pid))
        if not hand_over:
            old.stop()
        proc = old.again().start()
        self.procs[name] = proc
        try:
            proc.wait_ready(timeout_s=timeout_s)
        except StartError:
            proc.stop()
            raise
        finally:
            if hand_over:
                self._retire(old)
            self.restarts[name] += 1
            write_state(self.running())
        return proc

    def _retire(self, old: Proc) -> None:
        """Stop a replaced master's orphaned workers: SIGTERM now (they stop accepting
        and finish what they hold, within gunicorn's graceful timeout), SIGKILL what is
        left after it; in a thread, so that the supervisor watches on meanwhile."""
        thread = threading.Thread(
            target=old.stop,
            args=(GRACEFUL_TIMEOUT_S + ORPHAN_STOP_MARGIN_S,),
            name=f"retire {old.name} {old.pid}",
            daemon=True,
        )
        thread.start()
        self.retiring.append(thread)

    def stop_all_but(self, *keep: str) -> None:
        """Stop every process except those named (in reverse start order), e.g. all but
        Jaeger, so that the pools flush their spans into it and it can still be read."""
        self._stop_procs([name for name in self.procs if name not in keep])

    def _stop_procs(self, names: list[str]) -> None:
        """Stop *names* (in start order) in reverse start order, but every pool replica at
        once: what was started after them (Envoy) first, so nothing new reaches them, and
        what was started before (the simulator they call) last. A gevent worker sees its
        SIGTERM only at its loop's next beat, up to a second: pool after pool added those."""
        pools = [name for name in names if name in self.listeners]
        first_pool = names.index(pools[0]) if pools else len(names)
        before = [name for name in names[:first_pool] if name not in pools]
        after = [name for name in names[first_pool:] if name not in pools]
        for name in reversed(after):
            self._stop_proc(name)
        for name in pools:
            self.procs[name].terminate()
        for name in [*reversed(pools), *reversed(before)]:
            self._stop_proc(name)

    def _stop_proc(self, name: str) -> None:
        self.procs.pop(name).stop()
        self._close_listener(name)

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def dead(self) -> list[str]:
        """Names of processes that exited on their own."""
        return [name for name, proc in self.procs.items() if not proc.alive()]

    # --- the parts --------------------------------------------------------------

    def _log(self, name: str) -> Path:
        return self.run_dir / "logs" / f"{name}.log"

    def _start_jaeger(self, timeout_s: float) -> None:
        self.jaeger_ui = jaeger.cached_ui()
        proc, self.jaeger_ports = jaeger.start(
            self.run_dir / "jaeger", ports=self.jaeger_ports, ui=self.jaeger_ui, timeout_s=timeout_s
        )
        self.procs["jaeger"] = proc

    def _start_prometheus(self, settings: prometheus.PrometheusSettings, timeout_s: float) -> None:
        pools = [
            PoolTarget(pool.name, self.replica_name(pool.name, i), str(bind))
            for pool in self.config.pools_for(self.layout)
            for i, bind in enumerate(pool.binds)
        ]
        admin = f"{self.config.admin.host}:{self.config.admin.port}"
        run_dir = self.run_dir / "prometheus"
        config = prometheus.write_files(
            run_dir, self.config, pools, admin, STATS_PATHS[0], settings
        )
        proc, self.prometheus_port = prometheus.start(run_dir, config, settings.port, timeout_s)
        self.procs["prometheus"] = proc

    def _start_simulator(self, timeout_s: float) -> None:
        argv = [sys.executable, "-m", "simulator", "--bind", f"127.0.0.1:{self.simulator_port}"]
        if self.simulator_config is not None:
            argv += ["--config", str(self.simulator_config)]
        proc = Proc("simulator", argv, self._log("simulator"), cwd=PROJECT_ROOT).start()
        self.procs["simulator"] = proc
        proc.wait_ready(
            lambda: http_ok(f"{self.simulator_url}{SIMULATOR_HEALTH_PATH}"), timeout_s, "serving"
        )

    def _routes_path(self, name: str) -> Path:
        return (self.run_dir / "routes" / f"{name}.toml").resolve()

    def pool_env(self, pool: str) -> dict[str, str]:
        env = {
            # The pool's own copy of the route config: `routes apply` changes it for
            # one pool at a time (a new worker reads it when it loads the app).
            ROUTES_ENV: str(self._routes_path(pool)),
            POOL_ENV: pool,
            UPSTREAM_URL_ENV: self.simulator_url,
            SPAN_FILE_ENV: str(self.span_file),
            METRICS_DIR_ENV: str(self.run_dir / "metrics"),
        }
        if self.with_jaeger and self.jaeger_ports is not None:
            # The signal-specific name: it wins over an OTEL_EXPORTER_OTLP_ENDPOINT
            # exported in the shell, so the spans go to the Jaeger this stack started.
            env[OTLP_TRACES_ENDPOINT_ENV] = self.jaeger_ports.otlp_http_url + TRACES_PATH
        return {**env, **self.extra_env}

    def start_replica(self, pool: str, replica: int = 0, timeout_s: float = 60.0) -> Proc:
        """Start one replica of `pool` (a gunicorn master on its own address), and wait
        until it is ready; also how a test brings back a replica it killed."""
        proc = self._spawn_replica(pool, replica)
        self._wait_replica(pool, replica, proc, timeout_s)
        return proc

    def _spawn_replica(self, pool: str, replica: int) -> Proc:
        name = self.replica_name(pool, replica)
        fd = self._listener(pool, replica).fileno()
        write_routes(self.config, self._routes_path(pool))
        argv = [
            sys.executable,
            "-m",
            "gunicorn",
            "--config",
            f"python:gunicorn_conf.{pool}",
            "--bind",
            f"fd://{fd}",
            *([self.app] if self.app else []),
        ]
        proc = Proc(
            name, argv, self._log(name), env=self.pool_env(pool), cwd=PROJECT_ROOT, pass_fds=(fd,)
        ).start()
        self.procs[name] = proc
        return proc

    def _listener(self, pool: str, replica: int) -> socket.socket:
        """The replica's listening socket: bound at its first start, then the same one
        for every master started on it. gunicorn makes it listen (its backlog); once
        listening, it keeps queueing connections while no master is left to accept."""
        name = self.replica_name(pool, replica)
        if name not in self.listeners:
            bind = self.config.pool(pool, self.layout).binds[replica]
            family = socket.AF_INET6 if ":" in bind.host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((bind.host, bind.port))
            except OSError as exc:
                sock.close()
                raise PortTaken(f"port {bind.port} on {bind.host} (pool {pool}): {exc}") from None
            self.listeners[name] = sock
        return self.listeners[name]

    def _close_listener(self, name: str) -> None:
        sock = self.listeners.pop(name, None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _wait_replica(self, pool: str, replica: int, proc: Proc, timeout_s: float) -> None:
        """Ready, as Envoy's health check sees it (app, upstream clients and tracing set
        up), and served by this master's own workers, every one: not by the orphans of
        a master it replaces, which share its socket."""
        name = self.replica_name(pool, replica)
        ready_url = f"{self.pool_url(pool, replica)}{self.config.meta.readyz}"
        port = self.config.pool(pool, self.layout).binds[replica].port
        workers = self.config.pool(pool, self.layout).workers

        def ready() -> bool:
            own = serving_workers(self.procs[name].pid, port)
            return len(own) >= workers and http_ok(ready_url)

        proc.wait_ready(ready, timeout_s, "ready (every worker serving)")

    def envoy_config_path(self) -> Path:
        """Envoy's bootstrap; its listeners and clusters are in `xds_dir`."""
        return self.run_dir / f"envoy.{self.layout.value}.yaml"

    def xds_dir(self) -> Path:
        return (self.run_dir / "envoy").resolve()

    @property
    def tracing_collector(self) -> tuple[str, int] | None:
        if self.with_jaeger and self.jaeger_ports is not None:
            return (self.jaeger_ports.host, self.jaeger_ports.otlp_grpc)
        return None

    def _start_envoy(self, timeout_s: float) -> None:
        path = self.envoy_config_path()
        write_routes(self.config, self._routes_path("active"))
        write_xds(
            self.xds_dir(),
            render_xds(self.config, self.layout, tracing_collector=self.tracing_collector),
        )
        path.write_text(
            render_envoy(self.config, self.layout, xds_dir=str(self.xds_dir())), encoding="utf-8"
        )
        argv = [
            envoy_binary(),
            "--config-path",
            str(path),
            "--disable-hot-restart",
            "--concurrency",
            str(ENVOY_CONCURRENCY),
            # Connections a listener update replaced are told to close at once
            # (Connection: close) and closed after drain_time_s: by then every
            # request on them has had its route timeout.
            "--drain-time-s",
            str(self.drain_time_s),
            "--drain-strategy",
            "immediate",
            "--log-level",
            "warn",
        ]
        proc = Proc("envoy", argv, self._log("envoy"), cwd=PROJECT_ROOT).start()
        self.procs["envoy"] = proc
        proc.wait_ready(
            lambda: self._listener_bound(proc) and self.clusters_healthy(),
            timeout_s,
            "listening and healthy (every cluster)",
        )

    def _listener_bound(self, envoy: Proc) -> bool:
        """Envoy's listener (from the LDS file) is serving. A listener Envoy cannot bind
        (its port taken since check_ports) is rejected and logged while Envoy runs on,
        answering nothing: a failed start, said with Envoy's reason."""
        try:
            if self.admin.stat("listener_manager.lds.update_rejected"):
                raise StartError(
                    f"Envoy refused its listener on {self.config.listener.address}; "
                    f"log {envoy.log_path}:\n{envoy.log_tail()}"
                )
            return self.admin.stat("listener_manager.total_listeners_active") > 0
        except (OSError, KeyError):  # the admin is not up yet
            return False

    def clusters_healthy(self) -> bool:
        """Every pool's cluster has passed Envoy's active health check."""
        return self.admin.clusters_healthy(
            cluster_name(pool) for pool in self.config.pools_for(self.layout)
        )

    def envoy_stat(self, name: str) -> int:
        return self.admin.stat(name)


def config_on_free_ports(config: RouteConfig) -> tuple[RouteConfig, int]:
    """*config* with its listener, admin and every pool (the shared one too) on ports the
    kernel picked, and one more for the upstream simulator: all different, picked at once."""
    names = [p.name for p in config.pools] + [config.shared.name]
    listener, admin, simulator, *pools = free_ports(3 + len(names))
    moved = config.with_ports(
        listener_port=listener,
        admin_port=admin,
        pool_ports=dict(zip(names, pools, strict=True)),
    )
    return moved, simulator


def _same_address(a: str, b: str) -> bool:
    """Two listeners on one port clash: the same host, or either on every address."""
    return a == b or bool({a, b} & {"0.0.0.0", "::", ""})
