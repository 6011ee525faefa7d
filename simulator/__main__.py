"""`python -m simulator --bind 127.0.0.1:8200 [--config simulator.toml] [--seed N]`

Exit codes: 0 stopped by SIGTERM/SIGINT, 1 cannot listen (e.g. port in use),
2 bad arguments or config (including a non-loopback --bind).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import signal
import sys
from dataclasses import replace

from simulator.model import DEFAULT_CONFIG, SettingsError, SimulatorConfig, load_config
from simulator.server import Simulator

DEFAULT_BIND = "127.0.0.1:8200"


class BindError(ValueError):
    pass


#: The one non-loopback address a container may bind (its own network namespace).
CONTAINER_BIND_HOST = "0.0.0.0"


def parse_bind(text: str, *, container: bool = False) -> tuple[str, int]:
    """'127.0.0.1:8200' / '[::1]:8200' / 'localhost:8200' -> (host, port); loopback only,
    or 0.0.0.0 when `container` (inside a container, whose network is its own)."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise BindError(f"--bind {text!r}: expected HOST:PORT, e.g. {DEFAULT_BIND}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host == "localhost":
        host = "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise BindError(
            f"--bind {text!r}: host must be a loopback IP address (127.0.0.1 or ::1)"
        ) from None
    if not address.is_loopback and not (container and host == CONTAINER_BIND_HOST):
        raise BindError(
            f"refusing to bind {text}: the simulator only listens on loopback (127.0.0.0/8 or ::1)"
        )
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise BindError(f"--bind {text!r}: port must be an integer between 0 and 65535")
    return host, int(port_text)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def run(host: str, port: int, config: SimulatorConfig) -> int:
    sim = Simulator(config)
    try:
        server = await sim.listen(host, port)
    except OSError as exc:
        why = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror or exc
        print(f"simulator: cannot listen on {_url(host, port)}: {why}", file=sys.stderr)
        return 1
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    actual_port = server.sockets[0].getsockname()[1]
    print(f"simulator listening on {_url(host, actual_port)}", flush=True)
    await stop.wait()
    server.close()
    sim.close_connections()
    await server.wait_closed()
    print("simulator stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulator",
        description="Fake vehicles/routing/promotions upstreams with configurable latency "
        "and faults (control API under /_control/).",
    )
    parser.add_argument("--bind", default=DEFAULT_BIND, help=f"HOST:PORT (default {DEFAULT_BIND})")
    parser.add_argument("--config", help="TOML file with per-upstream settings")
    parser.add_argument("--seed", type=int, help="seed the latency/error RNG (reproducible runs)")
    parser.add_argument(
        "--container",
        action="store_true",
        help=f"allow --bind {CONTAINER_BIND_HOST}:PORT: only inside a container's own network",
    )
    args = parser.parse_args(argv)
    try:
        host, port = parse_bind(args.bind, container=args.container)
    except BindError as exc:
        print(f"simulator: {exc}", file=sys.stderr)
        return 2
    config = DEFAULT_CONFIG
    if args.config:
        try:
            config = load_config(args.config)
        except SettingsError as exc:
            print(f"simulator: bad config {args.config}: {exc}", file=sys.stderr)
            return 2
    if args.seed is not None:
        config = replace(config, seed=args.seed)
    try:
        return asyncio.run(run(host, port, config))
    except KeyboardInterrupt:  # SIGINT before the handlers were installed
        return 0


if __name__ == "__main__":
    sys.exit(main())
