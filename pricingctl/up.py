"""`pricingctl up`: start the stack, print its URL; on Ctrl-C/SIGTERM (`pricingctl
down`) drain Envoy, then stop everything. A stack still running from the same run dir
is named in one line instead."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from routing.load import load_routes
from routing.model import Layout
from stack import jaeger
from stack.jaeger import JaegerPorts
from stack.launch import DEFAULT_RUN_DIR, DEFAULT_SIMULATOR_PORT, Stack
from stack.procs import StartError, port_in_use
from stack.state import clear_state, read_state


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = subparsers.add_parser("up", help="start simulator, pools and Envoy; Ctrl-C stops them")
    up.add_argument("--layout", choices=[x.value for x in Layout], default="split")
    up.add_argument(
        "--port", type=int, default=None, help="Envoy listener port (default: routes.toml)"
    )
    up.add_argument("--config", type=Path, default=None, help="route config (default: routes.toml)")
    up.add_argument("--simulator-port", type=int, default=DEFAULT_SIMULATOR_PORT)
    up.add_argument("--simulator-config", type=Path, default=None, help="simulator TOML config")
    up.add_argument(
        "--jaeger",
        choices=["auto", "on", "off"],
        default="auto",
        help="whether to start Jaeger: auto (when it is built: make jaeger), on (fail "
        "without it), off (spans go to a file); `traces --jaeger-url` reads from one",
    )
    up.add_argument(
        "--run-dir", type=Path, default=DEFAULT_RUN_DIR, help="logs and rendered configs"
    )
    up.set_defaults(handler=run)


def _jaeger_ports() -> JaegerPorts:
    """Jaeger's usual ports when they are free (so its API is where people look), else any."""
    usual = JaegerPorts.defaults()
    ports = (usual.otlp_grpc, usual.otlp_http, usual.query_http, usual.query_grpc)
    if any(port_in_use(usual.host, p) for p in ports):
        return JaegerPorts.free()
    return usual


def run(args: argparse.Namespace) -> int:
    if args.port is not None and not 1 <= args.port <= 65535:
        print(f"pricingctl: --port must be between 1 and 65535, got {args.port}", file=sys.stderr)
        return 2
    config = load_routes(args.config)
    if args.port is not None:
        config = config.with_ports(listener_port=args.port)
    with_jaeger = args.jaeger == "on" or (args.jaeger == "auto" and jaeger.cached_binary())
    if args.jaeger == "on" and jaeger.cached_binary() is None:
        print(
            f"pricingctl: Jaeger is not built; run `make jaeger` ({jaeger.BUILD_SCRIPT}) first",
            file=sys.stderr,
        )
        return 1
    earlier = read_state(args.run_dir)
    if earlier is not None:
        alive = earlier.alive()
        if alive:
            print(
                f"pricingctl: a stack from an earlier `pricingctl up` is still running from "
                f"{args.run_dir} (pids {' '.join(map(str, alive))}); stop it with "
                f"`pricingctl down --run-dir {args.run_dir}`",
                file=sys.stderr,
            )
            return 1
        clear_state(args.run_dir)  # its processes are gone: a stale pid file
    stack = Stack(
        config,
        Layout(args.layout),
        run_dir=args.run_dir,
        simulator_port=args.simulator_port,
        simulator_config=args.simulator_config,
        with_jaeger=bool(with_jaeger),
        jaeger_ports=_jaeger_ports() if with_jaeger else None,
    )
    stopping = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        stopping.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            stack.start()
        except StartError as exc:
            first, *rest = str(exc).splitlines()
            print(f"pricingctl: {first}", file=sys.stderr)
            if rest:
                print("\n".join(rest), file=sys.stderr)
            return 1
        if stopping.is_set():
            return 0
        pools = " ".join(f"{p.name}={p.bind}" for p in stack.config.pools_for(stack.layout))
        if stack.jaeger_url and stack.jaeger_ui:
            traces = f"traces in Jaeger's UI {stack.jaeger_url}"
        elif stack.jaeger_url:
            traces = (
                f"traces in Jaeger's API {stack.jaeger_url} (no web UI: `make jaeger` builds "
                "it with Node.js and JAEGER_UI_SOURCE or git)"
            )
        else:
            traces = f"spans in {stack.span_file}"
        print(
            f"pricingservice is up at {stack.url} ({stack.layout.value} layout; pools {pools}; "
            f"upstreams {stack.simulator_url}; admin {stack.admin_url}; "
            f"{traces}; logs {stack.run_dir / 'logs'}). "
            "Ctrl-C (or `pricingctl down`) stops it.",
            flush=True,
        )
        while not stopping.wait(0.5):
            dead = stack.dead()
            if dead:
                print(
                    f"pricingctl: {', '.join(dead)} exited unexpectedly; stopping "
                    f"(see {stack.run_dir / 'logs'})",
                    file=sys.stderr,
                )
                return 1
        if not stack.drain():
            print(
                f"pricingctl: requests were still in flight after {stack.drain_time_s} s "
                "of draining",
                file=sys.stderr,
            )
        return 0
    finally:
        stack.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
