"""Route configs derived from the committed one, and views of a running stack: its
processes (the /proc readers themselves live in `stack.procfs`) and its JSON logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from routing.load import DEFAULT_ROUTES_PATH, load_routes
from routing.model import RouteConfig
from stack.launch import Stack
from stack.procfs import descendants, serving_workers


def derived_config(tmp_path: Path, replace: dict[str, str]) -> RouteConfig:
    """routes.toml with some text replaced, written to tmp (the pools read the FILE)."""
    text = DEFAULT_ROUTES_PATH.read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "routes.toml"
    path.write_text(text)
    return load_routes(path)


def accepting_workers(stack: Stack, pool: str) -> list[int]:
    """The pool's workers that are serving (app loaded, accept loop running)."""
    port = stack.config.pool(pool, stack.layout).bind.port
    return serving_workers(stack.procs[f"pool-{pool}"].pid, port)


def stack_pids(stack: Stack) -> dict[str, list[int]]:
    """Every process of the stack by part: the process started and its descendants."""
    return {name: [proc.pid, *descendants(proc.pid)] for name, proc in stack.procs.items()}


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a log file (Envoy's file also holds its own plain warnings)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
