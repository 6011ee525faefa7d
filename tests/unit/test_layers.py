"""The import graph of the project's own modules: no cycles, and layers import
downward only. A lower layer that needs something from a higher one takes it as
an argument (`routes check` hands routing the app's endpoints, create_app hands
tracing the metrics path). Imports inside functions and under TYPE_CHECKING count.

The gevent timing core (tracing.timing) imports neither OpenTelemetry nor Flask:
a subprocess imports and uses it with both blocked."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pricing", "routing", "tracing", "simulator", "stack", "bench", "gunicorn_conf")
PACKAGES += ("pricingctl", "toolkit")

# Layer -> the other layers it may import. Bottom first: the toolkit (standard library
# only), which every layer but the timing core may use (the core stays usable by any
# gevent program on its own); routing (pure data) and the simulator (a stand-alone
# process); the timing core; the tracing wiring; the tracing read-back (outside the
# pools); the app (its factory wires tracing in); the pools' gunicorn configs; the
# launcher; the benchmark; the command package on top, which may import anything.
ALLOWED: dict[str, set[str]] = {
    "toolkit": set(),
    "routing": {"toolkit"},
    "simulator": {"toolkit"},
    "tracing.timing": set(),
    # routing.logfields: the log field names the pools share with Envoy's access log.
    "tracing": {"tracing.timing", "routing", "toolkit"},
    "tracing.readback": {"tracing", "tracing.timing", "routing", "toolkit"},
    "pricing": {"routing", "tracing", "tracing.timing", "toolkit"},
    "gunicorn_conf": {"routing", "tracing", "toolkit"},
    "stack": {"routing", "tracing", "simulator", "toolkit"},
    # gunicorn_conf: bench.log_cost measures the pools' access-log writer itself.
    "bench": {
        *("routing", "tracing", "tracing.timing", "tracing.readback", "pricing"),
        *("simulator", "stack", "gunicorn_conf", "toolkit"),
    },
    "pricingctl": {*PACKAGES, "tracing.timing", "tracing.readback"},
}
# What the issue asks in so many words: the lower layers never import these.
UPPER = ("stack", "bench", "pricingctl")
LOWER = ("pricing", "routing", "tracing.timing", "toolkit")
# What runs inside a pool's worker: it never imports the read-back side.
WORKER = ("tracing.timing", "tracing", "pricing", "gunicorn_conf")


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


MODULES = project_modules()


def _resolve(name: str) -> str | None:
    """The project module an import names (a name inside a module resolves to it)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name)
            if target is not None and target != module:
                found.add(target)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def layer_of(module: str) -> str:
    for sub in ("tracing.timing", "tracing.readback"):
        if module == sub or module.startswith(f"{sub}."):
            return sub
    return module.split(".")[0]


def test_the_walk_sees_the_project() -> None:
    assert {"pricing.web.views", "tracing.timing.labels", "pricingctl.main"} <= set(MODULES)
    assert "tracing.timing.call_state" in GRAPH["tracing.timing.labels"]  # a type-only import


def test_no_import_cycles() -> None:
    cycles = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(GRAPH[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert cycles == []


def test_layers_import_downward_only() -> None:
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if layer_of(target) != layer_of(module)
        and layer_of(target) not in ALLOWED[layer_of(module)]
    )
    assert upward == []


def test_lower_layers_never_import_the_launcher_benchmark_or_command() -> None:
    assert not [
        (module, target)
        for module, targets in GRAPH.items()
        if layer_of(module) in LOWER
        for target in targets
        if layer_of(target) in UPPER
    ]


def test_worker_code_never_imports_the_read_back_side() -> None:
    assert {"tracing.readback.spans", "tracing.readback.usage"} <= set(MODULES)
    assert not [
        (module, target)
        for module, targets in GRAPH.items()
        if layer_of(module) in WORKER
        for target in targets
        if layer_of(target) == "tracing.readback"
    ]


# The rooms of `pricing`, bottom first: the domain (pure values and computations), the
# upstream client, the web layer (Flask); `pricing` itself (create_app) wires them on
# top. A room imports only the rooms below it.
PRICING_ROOMS = ("pricing.domain", "pricing.upstream", "pricing.web", "pricing")


def room_of(module: str) -> str:
    return next(r for r in PRICING_ROOMS if module == r or module.startswith(f"{r}."))


def external_imports_of(module: str) -> set[str]:
    """The top-level names of what `module` imports from outside the project."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found - set(PACKAGES)


def test_pricing_rooms_import_downward_only() -> None:
    pricing = [m for m in MODULES if layer_of(m) == "pricing"]
    assert {"pricing.domain.fares", "pricing.upstream.httpclient", "pricing.web.views"} <= set(
        pricing
    )
    assert [m for m in pricing if room_of(m) == "pricing"] == ["pricing"]  # a small __init__
    rank = {m: PRICING_ROOMS.index(room_of(m)) for m in pricing}
    upward = sorted(
        f"{module} imports {target}"
        for module in pricing
        for target in GRAPH[module]
        if target in rank and rank[target] > rank[module]
    )
    assert upward == []
    # Below the web layer, no Flask and no tracing: the domain and the upstream client are
    # plain Python (gevent for the client), usable outside a pool.
    below_web = [m for m in pricing if rank[m] < PRICING_ROOMS.index("pricing.web")]
    assert not [(m, "flask") for m in below_web if "flask" in external_imports_of(m)]
    assert not [(m, t) for m in below_web for t in GRAPH[m] if layer_of(t).startswith("tracing")]


BLOCKED_RUN = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    BLOCKED = ("opentelemetry", "flask")

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked by the test")
            return None

    sys.meta_path.insert(0, Blocker())

    import tracing.timing
    for info in pkgutil.iter_modules(tracing.timing.__path__):
        importlib.import_module(f"tracing.timing.{info.name}")

    # Usable on its own: instrument gevent and measure one call over a socket pair.
    import gevent
    from gevent import socket
    from tracing.timing.call_timing import measure_call
    from tracing.timing.instrumentor import GeventTimingInstrumentor

    instrumentor = GeventTimingInstrumentor(loop_lag_interval_s=None, hub_block_threshold_s=None)
    instrumentor.instrument()
    a, b = socket.socketpair()

    def caller():
        with measure_call() as measurement:
            a.sendall(b"ping")
            a.recv(4)
        return measurement.timing

    def echo():
        gevent.sleep(0.01)
        b.sendall(b.recv(4))

    echoing = gevent.spawn(echo)
    timing = gevent.spawn(caller).get(timeout=10)
    echoing.join()
    instrumentor.uninstrument()
    assert timing.duration_s >= 0.005 and timing.socket_waits >= 1, timing
    loaded = sorted(n for n in sys.modules if n.split(".")[0] in BLOCKED)
    assert not loaded, loaded
    print("core ok")
    """
)


def test_the_timing_core_works_without_opentelemetry_or_flask() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_RUN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "core ok"


# -- the compiled sources ------------------------------------------------------------------
# The import walk above cannot see C. A C file belongs to the layer of the directory it
# sits in: the timing core's (tracing/timing/, its csrc/) names nothing of OpenTelemetry
# nor of the wiring above it, in code or comment; C above the core reaches it only through
# its C API header (csrc/capi.h), never its internal one (csrc/timing.h).
TIMING_C_FORBIDDEN = re.compile(
    r"opentelemetry|\botel|set_attributes?\b|start_as_current_span|\bspan(?:_id|_scope|s)?\b"
    r"|traceparent|tracing[./]client|_client_native|\b_Call\b|_CompiledCall|CallObserver",
    re.IGNORECASE,
)
C_SUFFIXES = (".c", ".h")


def compiled_sources() -> dict[str, list[Path]]:
    """The project's C sources, by layer."""
    found: dict[str, list[Path]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*")):
            if path.suffix in C_SUFFIXES and ".venv" not in path.parts:
                module = ".".join(path.relative_to(ROOT).parent.parts)
                found.setdefault(layer_of(module), []).append(path)
    return found


def forbidden_names(paths: list[Path]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r}"
        for path in paths
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in TIMING_C_FORBIDDEN.finditer(line)
    ]


def test_the_timing_cores_c_names_nothing_of_opentelemetry_or_the_wiring() -> None:
    sources = compiled_sources()
    core = sources.get("tracing.timing", [])
    assert {"native.c", "switch_tracer.c", "timing.h", "capi.h"} <= {p.name for p in core}
    assert forbidden_names(core) == []


def test_the_check_sees_a_name_from_above() -> None:
    """The pattern catches what it is for (a file of the core naming the wiring's)."""
    probe = ROOT / "tracing" / "timing" / "csrc" / "native.c"
    for line in ("/* see tracing.client */", "PyObject *span;", "OTEL_ENABLED", "_Call"):
        assert TIMING_C_FORBIDDEN.search(line), line
    assert TIMING_C_FORBIDDEN.search("begin_call(offset)") is None
    assert probe in compiled_sources()["tracing.timing"]


def test_c_above_the_core_uses_only_its_c_api() -> None:
    """Compiled code outside the timing core includes the core's capi.h, not timing.h
    (the span encoders, nothing of the core: only their shared buffer), and C never
    sits below the core (routing, toolkit: pure Python)."""
    sources = compiled_sources()
    above = [p for layer, paths in sources.items() if layer != "tracing.timing" for p in paths]
    assert {p.name for p in above} >= {"_client_native.c"}
    includes = {
        (p.name, name) for p in above for name in re.findall(r'#include\s+"([^"]+)"', p.read_text())
    }
    assert includes == {
        ("_client_native.c", "timing/csrc/capi.h"),
        ("_export_native.c", "_encode.h"),
        ("_otlp_native.c", "_encode.h"),
    }
    assert not {"toolkit", "routing"} & set(sources)
