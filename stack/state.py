"""The pid file of a running stack (`<run dir>/stack.json`): who started it, its
processes, and what `pricingctl reload`, `routes apply` and `down` need to act on
it from another process. Written once the stack is up, removed when it stops."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from routing.model import Layout
from routing.write import write_atomic
from stack.procfs import stat_fields

STATE_FILE = "stack.json"


def replica_name(pool: str, replica: int = 0) -> str:
    """The process name of a pool's replica: pool-io, then pool-io-2, pool-io-3, ..."""
    return f"pool-{pool}" if replica == 0 else f"pool-{pool}-{replica + 1}"


@dataclass(frozen=True)
class Running:
    run_dir: Path
    layout: Layout
    launcher_pid: int
    url: str
    admin_url: str
    # Process name ("envoy", "pool-io", ...) -> pid; each leads its own process group.
    pids: dict[str, int]
    # The route config Envoy serves now; each pool's own copy is in pool_routes.
    config_path: Path
    pool_routes: dict[str, Path]
    # Each pool's environment beyond the launcher's (what a new worker boots with).
    pool_env: dict[str, dict[str, str]]
    xds_dir: Path
    # Envoy's OTLP collector (host, port), as the CDS file names it.
    tracing_collector: tuple[str, int] | None = None
    drain_time_s: int = 0
    # pid -> its start time (clock ticks after boot, /proc/<pid>/stat): a pid the kernel
    # has since given to another process is not ours, whatever the file says.
    started: dict[int, int] = field(default_factory=dict)
    # The route config file `pricingctl up` was given: what `routes apply` applies.
    source_config: Path | None = None
    # The WSGI app the pools serve (Stack.app); None: the service's own.
    app: str | None = None
    # Process name -> times the launcher started it again after a crash (stack.supervise).
    restarts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        doc = {
            "run_dir": str(self.run_dir),
            "layout": self.layout.value,
            "launcher_pid": self.launcher_pid,
            "url": self.url,
            "admin_url": self.admin_url,
            "pids": self.pids,
            "config_path": str(self.config_path),
            "pool_routes": {k: str(v) for k, v in self.pool_routes.items()},
            "pool_env": self.pool_env,
            "xds_dir": str(self.xds_dir),
            "tracing_collector": list(self.tracing_collector) if self.tracing_collector else None,
            "drain_time_s": self.drain_time_s,
            "started": {str(k): v for k, v in self.started.items()},
            "source_config": str(self.source_config) if self.source_config else None,
            "app": self.app,
            "restarts": self.restarts,
        }
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Running:
        doc = json.loads(text)
        collector = doc.get("tracing_collector")
        return cls(
            run_dir=Path(doc["run_dir"]),
            layout=Layout(doc["layout"]),
            launcher_pid=int(doc["launcher_pid"]),
            url=doc["url"],
            admin_url=doc["admin_url"],
            pids={k: int(v) for k, v in doc["pids"].items()},
            config_path=Path(doc["config_path"]),
            pool_routes={k: Path(v) for k, v in doc["pool_routes"].items()},
            pool_env=doc["pool_env"],
            xds_dir=Path(doc["xds_dir"]),
            tracing_collector=(collector[0], int(collector[1])) if collector else None,
            drain_time_s=int(doc.get("drain_time_s", 0)),
            started={int(k): int(v) for k, v in doc.get("started", {}).items()},
            source_config=Path(doc["source_config"]) if doc.get("source_config") else None,
            app=doc.get("app"),
            restarts={k: int(v) for k, v in doc.get("restarts", {}).items()},
        )

    def ours(self, pid: int) -> bool:
        """`pid` runs, and is the process this file named (same start time)."""
        if not pid_alive(pid):
            return False
        recorded = self.started.get(pid)
        return recorded is None or process_start(pid) == recorded

    def alive(self) -> list[int]:
        """The launcher and the process groups it started that still run as ours."""
        return [pid for pid in (self.launcher_pid, *self.pids.values()) if self.ours(pid)]


def process_start(pid: int) -> int | None:
    """When `pid` started, in clock ticks after boot (field 22 of /proc/<pid>/stat);
    None when it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not running.
    fields = stat_fields(pid)
    return fields is None or fields[0] != "Z"


def state_path(run_dir: Path) -> Path:
    return run_dir / STATE_FILE


def write_state(running: Running) -> None:
    write_atomic(state_path(running.run_dir), running.to_json())


def read_state(run_dir: Path) -> Running | None:
    try:
        return Running.from_json(state_path(run_dir).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return None


def clear_state(run_dir: Path, launcher_pid: int | None = None) -> None:
    """Remove the pid file (only the one this launcher wrote, when it says so)."""
    current = read_state(run_dir)
    if launcher_pid is not None and current is not None and current.launcher_pid != launcher_pid:
        return
    state_path(run_dir).unlink(missing_ok=True)
