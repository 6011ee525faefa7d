"""`pricingctl reload [POOL|all]`: replace a running pool's workers one at a time
(new code, or a pool's changed route file), without failing a request."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pricingctl import argtypes
from stack.launch import DEFAULT_RUN_DIR
from stack.ops import OpsError, exclusive, reload_pool
from stack.state import Running, read_state

ALL = "all"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reload = subparsers.add_parser(
        "reload", help="rolling reload of a pool's workers (or every pool's), one at a time"
    )
    reload.add_argument(
        "pool", nargs="?", type=argtypes.name, default=ALL, help="a pool name, or all (default)"
    )
    reload.add_argument(
        "--run-dir", type=argtypes.path, default=DEFAULT_RUN_DIR, help="the stack's run dir"
    )
    reload.set_defaults(handler=run)


def running_stack(run_dir: Path) -> Running | None:
    """The stack `pricingctl up` runs from `run_dir`, or None (said in one line)."""
    running = read_state(run_dir)
    if running is None or not running.ours(running.launcher_pid):
        print(
            f"pricingctl: no stack is running from {run_dir} (start one with `pricingctl up`)",
            file=sys.stderr,
        )
        return None
    return running


def run(args: argparse.Namespace) -> int:
    running = running_stack(args.run_dir)
    if running is None:
        return 1
    pools = list(running.pool_routes) if args.pool == ALL else [args.pool]
    try:
        with exclusive(running, "reload"):
            for pool in pools:
                reload_pool(running, pool, lambda line: print(line, flush=True))
    except OpsError as exc:
        print(f"pricingctl: {exc}", file=sys.stderr)
        return 1
    print(f"reloaded {', '.join(pools)}")
    return 0
