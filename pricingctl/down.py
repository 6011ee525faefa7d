"""`pricingctl down`: stop the stack a `pricingctl up` started (from its pid file).

The launcher is asked to stop (SIGTERM) and does it the graceful way: Envoy stops
accepting, the requests it accepted finish, then the pools stop. Processes left by
a launcher that was killed outright are stopped by process group.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys

from pricingctl import argtypes
from stack.launch import DEFAULT_RUN_DIR
from stack.state import clear_state, pid_alive, read_state
from toolkit.wait import wait_until

# Seconds the launcher gets to drain Envoy (the longest route timeout) and stop the
# pools (gunicorn's graceful timeout) before what is left is killed.
STOP_TIMEOUT_S = 40.0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    down = subparsers.add_parser("down", help="stop the stack `pricingctl up` started")
    down.add_argument(
        "--run-dir", type=argtypes.path, default=DEFAULT_RUN_DIR, help="the stack's run dir"
    )
    down.set_defaults(handler=run)


def _wait_gone(pids: list[int], timeout_s: float) -> bool:
    return wait_until(lambda: not any(pid_alive(pid) for pid in pids), timeout_s, 0.1)


def run(args: argparse.Namespace) -> int:
    running = read_state(args.run_dir)
    if running is None:
        print(f"pricingctl: no stack is running from {args.run_dir}")
        return 0
    # A group whose leader runs but is not the process the file named (its pid was
    # given to another process since) is left alone: a stale pid file kills nothing
    # that is not ours. A group whose leader is gone keeps its id while any member
    # lives, so its members are still ours.
    groups = []
    for name, pgid in running.pids.items():
        if pid_alive(pgid) and not running.ours(pgid):
            print(f"pricingctl: {name} ({pgid}) is no longer ours; left alone", file=sys.stderr)
            continue
        groups.append(pgid)
    if running.ours(running.launcher_pid):
        os.kill(running.launcher_pid, signal.SIGTERM)
        # It stops the pools before it exits: whatever outlives it is left over, and
        # is stopped below at once.
        if not _wait_gone([running.launcher_pid], STOP_TIMEOUT_S):
            print(
                f"pricingctl: the launcher ({running.launcher_pid}) did not stop within "
                f"{STOP_TIMEOUT_S:.0f} s; killing what is left",
                file=sys.stderr,
            )
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    if not _wait_gone(groups, 15.0):
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
    clear_state(args.run_dir)
    print(f"pricingservice at {running.url} is stopped")
    return 0
