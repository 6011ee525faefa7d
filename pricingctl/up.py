"""`pricingctl up`: start the stack, print its URL, restart what crashes (stack.supervise);
on Ctrl-C/SIGTERM (`pricingctl down`) drain Envoy, then stop everything. A stack still
running from the same run dir is named in one line instead."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pricingctl import argtypes
from routing.load import load_routes
from routing.model import Layout
from stack import jaeger
from stack.jaeger import JaegerPorts
from stack.launch import DEFAULT_RUN_DIR, DEFAULT_SIMULATOR_PORT, Stack
from stack.procs import StartError, port_in_use
from stack.state import clear_state, read_state
from stack.supervise import Supervisor


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = subparsers.add_parser("up", help="start simulator, pools and Envoy; Ctrl-C stops them")
    up.add_argument("--layout", choices=[x.value for x in Layout], default="split")
    up.add_argument(
        "--port",
        type=argtypes.port,
        default=None,
        help="Envoy listener port (default: routes.toml)",
    )
    argtypes.add_config_flag(up, None)
    up.add_argument(
        "--simulator-port",
        type=argtypes.port,
        default=DEFAULT_SIMULATOR_PORT,
        help=f"the upstream simulator's port (default {DEFAULT_SIMULATOR_PORT})",
    )
    up.add_argument(
        "--simulator-config",
        type=argtypes.existing_file,
        default=None,
        help="simulator TOML config",
    )
    up.add_argument(
        "--jaeger",
        choices=["auto", "on", "off"],
        default="auto",
        help="whether to start Jaeger: auto (when it is built: make jaeger), on (fail "
        "without it), off (spans go to a file); `traces --from-jaeger` reads from one",
    )
    up.add_argument(
        "--run-dir", type=argtypes.path, default=DEFAULT_RUN_DIR, help="logs and rendered configs"
    )
    up.set_defaults(handler=run)


def _jaeger_ports() -> JaegerPorts:
    """Jaeger's usual ports when they are free (so its API is where people look), else any."""
    usual = JaegerPorts.defaults()
    ports = (usual.otlp_grpc, usual.otlp_http, usual.query_http, usual.query_grpc)
    if any(port_in_use(usual.host, p) for p in ports):
        return JaegerPorts.free()
    return usual


def _still_running(run_dir: Path) -> bool:
    """Whether a stack from an earlier `pricingctl up` still runs from *run_dir* (said
    in one line); a pid file whose processes are gone is cleared."""
    earlier = read_state(run_dir)
    if earlier is None:
        return False
    alive = earlier.alive()
    if alive:
        print(
            f"pricingctl: a stack from an earlier `pricingctl up` is still running from "
            f"{run_dir} (pids {' '.join(map(str, alive))}); stop it with "
            f"`pricingctl down --run-dir {run_dir}`",
            file=sys.stderr,
        )
        return True
    clear_state(run_dir)  # its processes are gone: a stale pid file
    return False


def _stack(args: argparse.Namespace) -> Stack | None:
    """The stack the flags describe, not started yet; None (said in one line) when
    `--jaeger on` asks for a Jaeger that is not built."""
    config = load_routes(args.config)
    if args.port is not None:
        config = config.with_ports(listener_port=args.port)
    if args.jaeger == "on" and jaeger.cached_binary() is None:
        print(
            f"pricingctl: Jaeger is not built; run `make jaeger` ({jaeger.BUILD_SCRIPT}) first",
            file=sys.stderr,
        )
        return None
    with_jaeger = args.jaeger == "on" or (args.jaeger == "auto" and jaeger.cached_binary())
    return Stack(
        config,
        Layout(args.layout),
        run_dir=args.run_dir,
        simulator_port=args.simulator_port,
        simulator_config=args.simulator_config,
        with_jaeger=bool(with_jaeger),
        jaeger_ports=_jaeger_ports() if with_jaeger else None,
    )


@contextmanager
def _stop_requested() -> Iterator[threading.Event]:
    """An event set on SIGINT (Ctrl-C) or SIGTERM (`pricingctl down`) while inside."""
    stopping = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        stopping.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopping
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _up_line(stack: Stack) -> str:
    """The one line that says where everything is."""
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
    return (
        f"pricingservice is up at {stack.url} ({stack.layout.value} layout; pools {pools}; "
        f"upstreams {stack.simulator_url}; admin {stack.admin_url}; "
        f"{traces}; logs {stack.run_dir / 'logs'}). "
        "Ctrl-C (or `pricingctl down`) stops it."
    )


def _serve(stack: Stack, stopping: threading.Event) -> int:
    """Supervise the started stack until asked to stop (then drain Envoy: 0); a process
    that exits is restarted (one line each), a crash loop stops the stack (1)."""

    def say(line: str) -> None:
        print(f"pricingctl: {line}", file=sys.stderr, flush=True)

    reason = Supervisor(stack, say).watch(stopping)
    if reason is not None:
        say(reason)
        return 1
    if not stack.drain():
        say(f"requests were still in flight after {stack.drain_time_s} s of draining")
    return 0


def run(args: argparse.Namespace) -> int:
    stack = _stack(args)
    if stack is None or _still_running(args.run_dir):
        return 1
    with _stop_requested() as stopping:
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
            print(_up_line(stack), flush=True)
            return _serve(stack, stopping)
        finally:
            stack.stop()
