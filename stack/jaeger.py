"""Jaeger v2 all-in-one: built from its Go module, run on loopback with in-memory storage,
serving the web UI when deploy/jaeger/build-ui.sh has built it.

No Jaeger release binary or image registry is reachable from these machines, so
deploy/jaeger/build.sh compiles `github.com/jaegertracing/jaeger/cmd/jaeger` once
(~530 CPU-seconds cold: 9.3 min measured on 2 cores shared with other work,
about 4 min on 2 idle cores; 15-25 s when Go's caches are warm) and caches it
under $PRICING_CACHE_DIR (default ~/.cache/pricingservice). Jaeger v2 is an
OpenTelemetry Collector distribution: it takes a collector-style YAML file via
`--config` (`jaeger validate --config F` checks one without serving). Run with
no arguments it listens on 14 TCP and 2 UDP ports, the query ones (16686, 16685) on all
interfaces, so we always pass our own config: only what we use, 127.0.0.1 only,
ports chosen by the caller so tests can run it next to a developer's instance.

The web UI is a separate project (jaeger-ui), in neither the Go module nor the npm
registry: deploy/jaeger/build-ui.sh builds it from source (Node, ~3 min once) into
ui/ beside the binary, and Jaeger serves that directory (`ui.assets_path`). Without
it Jaeger serves its API and a placeholder page.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stack.procs import Proc, StartError, free_ports
from toolkit.contract import CACHE_DIR_ENV
from toolkit.fetch import http_ok
from toolkit.logs import tail

# The Go module keeps v1 tags; module v1.76.0 is the Jaeger v2.13.0 release
# (same code as the Docker image jaegertracing/jaeger:2.13.0 in deploy/compose/).
JAEGER_VERSION = "v1.76.0"

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "deploy" / "jaeger" / "build.sh"
UI_BUILD_SCRIPT = REPO_ROOT / "deploy" / "jaeger" / "build-ui.sh"
# build-ui.sh's exit status when it cannot build here (no Node, no source).
UI_UNAVAILABLE_EXIT = 2

# Twice the slowest cold build seen (9.3 min on 2 busy cores, modules already
# downloaded; the download adds ~1 min).
DEFAULT_BUILD_TIMEOUT_S = 1200.0
# The UI: 163-254 s measured on 2 busy cores (npm download, build, cleanup).
DEFAULT_UI_BUILD_TIMEOUT_S = 900.0


class JaegerBuildError(RuntimeError):
    """build.sh or build-ui.sh failed; the message carries the tail of its output."""


class JaegerUIUnavailable(RuntimeError):
    """The UI cannot be built here (no Node.js, or no source): one line saying why."""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "pricingservice")


def binary_path() -> Path:
    """Where build.sh puts the binary for JAEGER_VERSION (it may not exist yet)."""
    return cache_dir() / "jaeger" / JAEGER_VERSION / "jaeger"


def cached_binary() -> Path | None:
    """The built binary, or None. build.sh only ever renames a finished,
    working binary into place, so existence is enough."""
    path = binary_path()
    if path.is_file() and os.access(path, os.X_OK):
        return path
    return None


def ui_path() -> Path:
    """Where build-ui.sh puts the web UI (index.html + static/; it may not exist yet)."""
    return binary_path().parent / "ui"


def cached_ui() -> Path | None:
    """The built UI for our Jaeger version, or None. build-ui.sh renames only a
    finished build into place and records its pin in .pin."""
    path = ui_path()
    try:
        pinned_tag = (path / ".pin").read_text().split()[0]
    except (OSError, IndexError):
        return None
    if pinned_tag == JAEGER_VERSION and (path / "index.html").is_file():
        return path
    return None


def build(timeout_s: float = DEFAULT_BUILD_TIMEOUT_S) -> Path:
    """Build (or reuse, in well under a second) the Jaeger binary; return its path."""
    code, out, err = _run_script(BUILD_SCRIPT, timeout_s)
    if code != 0:
        raise JaegerBuildError(f"{BUILD_SCRIPT} failed with exit code {code}:\n{tail(err)}")
    return _printed_path(BUILD_SCRIPT, out)


def build_ui(timeout_s: float = DEFAULT_UI_BUILD_TIMEOUT_S) -> Path:
    """Build (or reuse) the web UI; return its directory. Raises JaegerUIUnavailable
    when it cannot be built here (no Node, no source), JaegerBuildError when a build
    failed. The source is JAEGER_UI_SOURCE (tarball or directory) or a git clone."""
    code, out, err = _run_script(UI_BUILD_SCRIPT, timeout_s)
    if code == UI_UNAVAILABLE_EXIT:
        raise JaegerUIUnavailable(tail(err, 1))
    if code != 0:
        raise JaegerBuildError(f"{UI_BUILD_SCRIPT} failed with exit code {code}:\n{tail(err)}")
    return _printed_path(UI_BUILD_SCRIPT, out)


def _run_script(script: Path, timeout_s: float) -> tuple[int, str, str]:
    if not script.is_file():
        raise JaegerBuildError(f"build script missing: {script}")
    env = {**os.environ, "JAEGER_VERSION": JAEGER_VERSION}
    # Own session: on timeout the whole tree (go build and its compilers, npm and
    # its workers) must go, not just the bash process.
    proc = subprocess.Popen(
        ["bash", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise JaegerBuildError(
            f"{script.name} ({JAEGER_VERSION}) took longer than {timeout_s:.0f} s; "
            f"last output:\n{tail(err)}"
        ) from None
    except BaseException:
        # Ctrl-C reaches only our process group, not the build's own session.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc.returncode, out, err


def _printed_path(script: Path, out: str) -> Path:
    lines = out.strip().splitlines()
    path = Path(lines[-1]) if lines else None
    if path is None or not path.exists():
        raise JaegerBuildError(f"{script} printed no path (stdout: {out!r})")
    return path


@dataclass(frozen=True)
class JaegerPorts:
    otlp_grpc: int
    otlp_http: int
    query_http: int
    # The query extension always opens its gRPC API too; no way to switch it off.
    query_grpc: int
    host: str = "127.0.0.1"

    @classmethod
    def free(cls, host: str = "127.0.0.1") -> JaegerPorts:
        otlp_grpc, otlp_http, query_http, query_grpc = free_ports(4, host)
        return cls(otlp_grpc, otlp_http, query_http, query_grpc, host)

    @classmethod
    def defaults(cls) -> JaegerPorts:
        """Jaeger's usual ports, as Envoy and OTel SDK defaults expect them."""
        return cls(4317, 4318, 16686, 16685)

    @property
    def query_url(self) -> str:
        return f"http://{self.host}:{self.query_http}"

    @property
    def otlp_http_url(self) -> str:
        return f"http://{self.host}:{self.otlp_http}"


def config_dict(
    otlp_grpc_port: int,
    otlp_http_port: int,
    query_port: int,
    query_grpc_port: int,
    *,
    host: str = "127.0.0.1",
    max_traces: int = 100_000,
    log_level: str = "info",
    ui_assets: Path | None = None,
) -> dict[str, Any]:
    def addr(port: int) -> dict[str, str]:
        return {"endpoint": f"{host}:{port}"}

    query: dict[str, Any] = {
        "storage": {"traces": "memstore"},
        # On by default in v2: the query service then traces itself and
        # exports over OTLP gRPC to localhost:4317, i.e. into whichever
        # Jaeger owns the default port, not into this one.
        "enable_tracing": False,
        # Both default to all interfaces (":16686", ":16685").
        "http": addr(query_port),
        "grpc": addr(query_grpc_port),
    }
    if ui_assets is not None:
        # The built jaeger-ui directory; Jaeger injects its config into index.html.
        query["ui"] = {"assets_path": str(ui_assets)}
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    # No batch processor: spans reach the in-memory store as they
                    # arrive, so a test can read a trace back without waiting for
                    # a batch timeout; the store is cheap enough per request.
                    "processors": [],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {
                "resource": {"service.name": "jaeger"},
                # Any other level opens a Prometheus listener on localhost:8888,
                # which would clash between two instances.
                "metrics": {"level": "none"},
                "logs": {"level": log_level},
            },
        },
        "extensions": {
            "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": max_traces}}}},
            "jaeger_query": query,
        },
        "receivers": {
            "otlp": {"protocols": {"grpc": addr(otlp_grpc_port), "http": addr(otlp_http_port)}}
        },
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
    }


def config_yaml(
    otlp_grpc_port: int,
    otlp_http_port: int,
    query_port: int,
    query_grpc_port: int,
    *,
    host: str = "127.0.0.1",
    max_traces: int = 100_000,
    log_level: str = "info",
    ui_assets: Path | None = None,
) -> str:
    """A complete Jaeger v2 config: OTLP in, in-memory storage, query API (and the web
    UI from ui_assets); nothing else listens (no Jaeger/Zipkin receivers, sampling,
    health check or metrics ports)."""
    cfg = config_dict(
        otlp_grpc_port,
        otlp_http_port,
        query_port,
        query_grpc_port,
        host=host,
        max_traces=max_traces,
        log_level=log_level,
        ui_assets=ui_assets,
    )
    return yaml.safe_dump(cfg, sort_keys=False)


def command(binary: Path, config_path: Path) -> list[str]:
    return [str(binary), "--config", str(config_path)]


def _tcp_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def ready(ports: JaegerPorts) -> bool:
    """Query API answers and both OTLP receivers accept connections (the collector
    starts receivers after extensions, so the query port alone is not enough)."""
    return (
        http_ok(f"{ports.query_url}/api/services")
        and _tcp_open(ports.host, ports.otlp_http)
        and _tcp_open(ports.host, ports.otlp_grpc)
    )


def start(
    run_dir: Path,
    *,
    binary: Path | None = None,
    ports: JaegerPorts | None = None,
    ui: Path | None = None,
    timeout_s: float = 30.0,
    attempts: int = 3,
) -> tuple[Proc, JaegerPorts]:
    """Start Jaeger with config and log in run_dir; return once it is ready.

    ui: a built jaeger-ui directory (cached_ui()) to serve at the query port;
    None serves the API only.

    With ports=None, free ports are picked, and picked again if one was taken
    between the pick and Jaeger's bind (free_port cannot reserve a port).
    """
    exe = binary or cached_binary()
    if exe is None:
        raise StartError(f"no Jaeger binary at {binary_path()}; run {BUILD_SCRIPT} first")
    run_dir.mkdir(parents=True, exist_ok=True)
    last_error: StartError | None = None
    for _ in range(attempts if ports is None else 1):
        chosen = ports or JaegerPorts.free()
        config_path = run_dir / "jaeger.yaml"
        config_path.write_text(
            config_yaml(
                chosen.otlp_grpc,
                chosen.otlp_http,
                chosen.query_http,
                chosen.query_grpc,
                host=chosen.host,
                ui_assets=ui,
            )
        )
        proc = Proc("jaeger", command(exe, config_path), run_dir / "jaeger.log").start()
        try:
            proc.wait_ready(functools.partial(ready, chosen), timeout_s=timeout_s)
        except StartError as exc:
            proc.stop()
            last_error = exc
            if "address already in use" in str(exc):
                time.sleep(0.1)
                continue
            raise
        return proc, chosen
    assert last_error is not None
    raise last_error


COMPOSE_CONFIG_HEADER = """\
# Jaeger v2 config for Docker with host networking (Jaeger's usual
# ports, loopback only). Generated: python -m stack.jaeger config > deploy/jaeger/config.yaml
# tests/integration/test_jaeger_build.py checks it matches stack/jaeger.py."""


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m stack.jaeger")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build or reuse the binary; print its path")
    sub.add_parser("build-ui", help="build or reuse the web UI; print its directory")
    sub.add_parser("config", help="print the config on Jaeger's default ports")
    args = parser.parse_args(argv)
    if args.cmd == "build":
        print(build())
    elif args.cmd == "build-ui":
        try:
            print(build_ui())
        except JaegerUIUnavailable as exc:
            print(exc, file=sys.stderr)
            return UI_UNAVAILABLE_EXIT
    else:
        p = JaegerPorts.defaults()
        body = config_yaml(p.otlp_grpc, p.otlp_http, p.query_http, p.query_grpc)
        print(f"{COMPOSE_CONFIG_HEADER}\n\n{body}", end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
