"""One measured run (a stack, one load generator run, CPU before/after), and the
comparisons built from such runs: interleaved (one arm after another) or paired
(every arm at once, each on its own stack, over the same window).

Timeline of a run (all on CLOCK_MONOTONIC, shared by every process):

    start stack -> set upstream latencies -> start generator, wait for `ready`
    -> start_at: warm-up (discarded) -> CPU snapshot -> measured window -> CPU
    snapshot -> generator drains in-flight requests and writes its samples -> stop

The driver only sleeps while the generator runs (its own CPU is reported too).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.cpu import ComponentCpu, Snapshot, usage
from bench.floor import (
    OFFER_UPSTREAMS,
    Floor,
    fixed_latency,
    floor_from_records,
    floor_from_settings,
    settings_from_control,
)
from bench.loadgen import Plan, Samples
from bench.progress import Progress
from bench.spans import (
    BREAKDOWNS_FILE_NAME,
    SpanTimings,
    env_for,
    read_jaeger,
    read_span_file,
    read_span_file_breakdowns,
    write_breakdowns,
)
from bench.stats import GroupStats, Rows
from bench.traffic import CPU_KINDS, OFFER_KINDS, Target, kind_rates, targets_for
from routing.envoy import cluster_name
from routing.model import Layout, RouteConfig
from routing.write import write_routes
from stack.jaeger import JaegerPorts
from stack.launch import PROJECT_ROOT, Stack
from stack.procfs import descendants, serving_workers
from stack.procs import Proc, StartError
from toolkit.fetch import fetch
from tracing.readback.breakdown import Breakdown
from tracing.readback.spans import SpanSourceError

# Planned seconds for progress estimates (not limits).
STACK_START_EST_S = 8.0
DRAIN_EST_S = 2.0
# Seconds between the generator's `ready` and its first due request.
_START_MARGIN_S = 0.3
_READY_TIMEOUT_S = 60.0
_POLL_S = 0.25
# Envoy counters reported per run (per pool cluster), as deltas over the window.
ENVOY_COUNTERS = (
    "upstream_rq_pending_overflow",  # Envoy's queue for the pool was full: 503
    "upstream_rq_timeout",  # the route timeout fired: 504
    "upstream_rq_retry",
    "upstream_rq_pending_total",  # requests that had to queue in Envoy
    # The pool taken out of rotation (5 local-origin failures in a row, route
    # timeouts included): Envoy answers 503 "no healthy upstream" meanwhile.
    "outlier_detection.ejections_enforced_total",
    "health_check.failure",  # a health check of the pool failed (timed out, or not 200)
)


DRIVER = "bench-driver"


class BenchError(RuntimeError):
    """The benchmark could not run (a process did not start, or died)."""


@dataclass(frozen=True)
class LoadSettings:
    """What one run drives. Rates are per group: `cpu` and `offers` (bike + scooter)."""

    group_rates_rps: Mapping[str, float]
    duration_s: float
    warmup_s: float
    seed: int = 1
    # Per-request client deadline, from the due time. Above every route timeout, so
    # the server's own answer (200, or Envoy's 504) is what gets recorded.
    timeout_s: float = 5.0
    # Every upstream answers after exactly this long (the main comparison's floor).
    upstream_ms: float = 100.0
    tracing: bool = False
    # The CPU endpoint's route timeout: its failures count at least this long.
    cpu_timeout_s: float = 3.0
    # Tracing runs: start Jaeger with each stack (every span there, Envoy's too) and
    # read the spans back from it; otherwise the pools write the span file.
    jaeger: bool = False
    # Envoy's sampling percentage for tracing runs (None: the route config's).
    sample_percent: float | None = None
    # Of the generator's traceparents, the percentage sent sampled (`Plan.sampled_pct`).
    traceparent_sampled_pct: float = 100.0

    @property
    def total_s(self) -> float:
        return self.warmup_s + self.duration_s

    def to_json(self, *, workers: int, repeats: int) -> dict[str, object]:
        """What every interleaved part's results.json says about its load first."""
        return {
            "workers": workers,
            "repeats": repeats,
            "duration_s": self.duration_s,
            "warmup_s": self.warmup_s,
            "rates_rps": dict(self.group_rates_rps),
        }


@dataclass(frozen=True)
class RunResult:
    label: str
    layout: str
    repeat: int
    settings: LoadSettings
    samples: Samples
    cpu: Mapping[str, ComponentCpu]
    floor: Floor
    spans: SpanTimings | None
    envoy: Mapping[str, int]
    connections_opened: int
    window_wall_ns: tuple[int, int]
    pools: Mapping[str, int]  # pool -> worker processes
    # Upstream calls that arrived at the simulator with a traceparent (tracing runs
    # only): 0 means the pools did not propagate the trace, i.e. tracing was not on.
    traced_upstream_calls: int | None = None
    # Per traced request in the window, tracing.readback.breakdown's parts (None: not traced).
    breakdowns: tuple[Breakdown, ...] | None = None
    # The pool whose workers ran on a core of their own (run_arms' *pin*), else None.
    pinned_pool: str | None = None

    @property
    def window_s(self) -> tuple[float, float]:
        """The measured window in schedule time (seconds after the first due request)."""
        return (self.settings.warmup_s, self.settings.total_s)

    def rows(self, kinds: Sequence[str]) -> Rows:
        start, end = self.window_s
        return Rows.select(self.samples, kinds, start, end)

    def offers(self, deadline_s: float) -> GroupStats:
        return GroupStats.of(self.rows(OFFER_KINDS), deadline_s)

    def cpu_endpoint(self) -> GroupStats:
        return GroupStats.of(self.rows(CPU_KINDS), failure_floor_s=self.settings.cpu_timeout_s)


# --- the stack -------------------------------------------------------------------------


# The two pools `--workers N` splits the processes between.
CPU_POOL = "cpu"
IO_POOL = "io"


def with_workers(config: RouteConfig, workers: int) -> RouteConfig:
    """The same config with N processes in total: cpu N-1 + io 1 (split), shared N."""
    names = {p.name for p in config.pools}
    if names != {CPU_POOL, IO_POOL}:
        raise ValueError(
            f"--workers needs exactly the pools {CPU_POOL!r} and {IO_POOL!r}; "
            f"the route config has {', '.join(sorted(names))}"
        )
    if workers < 2:
        raise ValueError("--workers must be at least 2 (one cpu and one io process)")
    pools = tuple(
        replace(p, workers=workers - 1 if p.name == CPU_POOL else 1) for p in config.pools
    )
    return replace(config, pools=pools, shared=replace(config.shared, workers=workers))


def prepared_config(config: RouteConfig, workers: int, run_dir: Path) -> RouteConfig:
    """The route config with `workers` processes, written where the pools can read it.
    Envoy trusts the load generator's traceparents (its samples join the spans by trace
    id), which it drops from any other client."""
    trusted = replace(config, tracing=replace(config.tracing, trust_incoming=True))
    return write_routes(with_workers(trusted, workers), run_dir / "routes.toml")


def with_sample_percent(config: RouteConfig, percent: float | None, run_dir: Path) -> RouteConfig:
    """`config` with Envoy sampling `percent` of requests, written where the pools read
    it (the stack's `source`); unchanged when `percent` is None or already that."""
    if percent is None or percent == config.tracing.sample_percent:
        return config
    sampled = replace(config, tracing=replace(config.tracing, sample_percent=percent))
    return write_routes(sampled, run_dir / f"routes-sample-{percent:g}.toml")


@contextlib.contextmanager
def running_stack(
    config: RouteConfig,
    layout: Layout,
    run_dir: Path,
    *,
    tracing: bool | str,
    with_jaeger: bool = False,
    env: Mapping[str, str] | None = None,
    app: str | None = None,
    jaeger_ports: JaegerPorts | None = None,
) -> Iterator[Stack]:
    """A started stack on free ports; stopped (by process group) however the block ends.
    `env` is added to the pools' environment; `app` is the WSGI app they serve
    (`Stack.app`; None: the service's own); `jaeger_ports` where Jaeger listens (None:
    free ports)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack.on_free_ports(
        config,
        layout,
        run_dir,
        extra_env={**env_for(tracing, jaeger=with_jaeger), **(env or {})},
        with_jaeger=with_jaeger,
        app=app,
        jaeger_ports=jaeger_ports,
    )
    try:
        stack.start()
    except StartError as exc:
        raise BenchError(f"the {layout.value} stack did not start: {exc}") from None
    try:
        yield stack
    finally:
        stack.stop()


def pin_pool(stack: Stack, pool: str) -> bool:
    """The pool's workers on the last core, every other process of the stack and this
    driver (so the load generator it starts) on the others: on a 2-core machine an
    unpinned worker shares its core with the load generator, and a capacity search
    measures the load generator. False: one core only, nothing pinned. The caller puts
    its own affinity back (`os.sched_setaffinity(0, ...)`) when done."""
    return pin_pids(stack, pool_workers(stack, pool))


def pin_pids(stack: Stack, pids: frozenset[int]) -> bool:
    """`pin_pool` for any processes of the stack (*pids*): they on the last core,
    everything else of the stack and this driver on the others."""
    cores = sorted(os.sched_getaffinity(0) | set(range(os.cpu_count() or 1)))
    if len(cores) < 2:
        return False
    mine, rest = {cores[-1]}, set(cores[:-1])
    workers = pids
    os.sched_setaffinity(0, rest)
    for proc in stack.procs.values():
        for pid in (proc.pid, *descendants(proc.pid)):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(pid, mine if pid in workers else rest)
    return True


def pool_workers(stack: Stack, pool: str) -> frozenset[int]:
    """The pids of the pool's workers serving now (empty: no such pool running)."""
    proc = stack.procs.get(f"pool-{pool}")
    if proc is None:
        return frozenset()
    return frozenset(serving_workers(proc.pid, stack.config.pool(pool).bind.port))


def _http_json(method: str, url: str, body: Any = None, timeout_s: float = 10.0) -> Any:
    reply = fetch(url, method=method, body=body, timeout_s=timeout_s)
    return reply.expect_ok().json()


def set_upstreams_fixed(stack: Stack, ms: float) -> dict[str, Any]:
    """Every upstream answers after exactly `ms`; returns the simulator's settings."""
    for name in OFFER_UPSTREAMS:
        _http_json("PUT", f"{stack.simulator_url}/_control/upstreams/{name}", fixed_latency(ms))
    doc = _http_json("GET", f"{stack.simulator_url}/_control/upstreams")
    assert isinstance(doc, dict)
    return doc


def _envoy_counters(stack: Stack) -> dict[str, int]:
    out: dict[str, int] = {}
    for pool in stack.config.pools_for(stack.layout):
        for counter in ENVOY_COUNTERS:
            name = f"cluster.{cluster_name(pool)}.{counter}"
            try:
                out[name] = stack.envoy_stat(name)
            except (KeyError, OSError):
                continue
    return out


def _component_roots(stack: Stack, loadgen_pid: int) -> dict[str, int]:
    roots = {"loadgen": loadgen_pid}
    roots.update({name: proc.pid for name, proc in stack.procs.items()})
    return roots


def _self_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# --- the load generator process ----------------------------------------------------------


#: The load generator's process: a child of the part that runs it, never a command.
LOADGEN_CHILD = "import sys; from bench.loadgen import main; sys.exit(main())"


class LoadgenProcess:
    """The load generator (`bench.loadgen.main`) as a `Proc` (its own process and session,
    killed by group, dying with the driver), told when to start over its stdin; mutable
    (it owns a live process)."""

    def __init__(self, plan: Plan, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.plan_path = run_dir / "loadgen.plan.json"
        self.out_path = run_dir / "loadgen.out.json"
        self.plan_path.write_text(json.dumps(plan.to_json()), encoding="utf-8")
        self.out_path.unlink(missing_ok=True)
        argv = [sys.executable, "-c", LOADGEN_CHILD, str(self.plan_path), str(self.out_path)]
        log_path = run_dir / "logs" / "loadgen.log"
        self.proc = Proc("loadgen", argv, log_path, cwd=PROJECT_ROOT, piped=True).start()
        assert self.proc.popen is not None
        self.popen = self.proc.popen

    @property
    def pid(self) -> int:
        return self.proc.pid

    def failure(self, what: str) -> BenchError:
        log_path = self.proc.log_path
        return BenchError(f"load generator {what}; log {log_path}:\n{self.proc.log_tail(20)}")

    def wait_ready(self, timeout_s: float = _READY_TIMEOUT_S) -> None:
        assert self.popen.stdout is not None
        # The generator prints `ready` within a second or two, or dies (EOF); a hang
        # must not hang the driver.
        readable, _, _ = select.select([self.popen.stdout], [], [], timeout_s)
        if not readable:
            raise self.failure(f"did not get ready within {timeout_s:.0f} s")
        line = self.popen.stdout.readline()
        if line.strip() != b"ready":
            raise self.failure(f"did not get ready (said {line[:200]!r})")

    def start(self, start_at: float) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(f"{start_at!r}\n".encode())
        self.popen.stdin.close()

    def alive(self) -> bool:
        return self.proc.alive()

    def end(self) -> None:
        """Send nothing more; what is in flight finishes, then the samples are written."""
        os.kill(self.pid, signal.SIGUSR1)

    def result(self, timeout_s: float) -> dict[str, Any]:
        try:
            code = self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise self.failure(f"did not finish within {timeout_s:.0f} s") from None
        if code != 0 or not self.out_path.exists():
            raise self.failure(f"exited with code {code}")
        doc = json.loads(self.out_path.read_text(encoding="utf-8"))
        assert isinstance(doc, dict)
        return doc

    def stop(self) -> None:
        self.proc.stop()


class PairAborted(BenchError):
    """Another run of a paired comparison failed before the load started."""


class StartTogether:
    """One start time for several runs at once: each run's thread calls `wait` once its
    load generator is ready, and all get the same start, a moment after the last is
    ready. A run that fails first calls `abort`, so the others do not wait for it."""

    def __init__(self, parties: int) -> None:
        self.start_at = 0.0
        self._barrier = threading.Barrier(parties, action=self._set)

    def _set(self) -> None:
        self.start_at = time.monotonic() + _START_MARGIN_S

    def wait(self) -> float:
        try:
            self._barrier.wait(timeout=_READY_TIMEOUT_S)
        except threading.BrokenBarrierError:
            raise PairAborted("another run of the pair failed before the load started") from None
        return self.start_at

    def abort(self) -> None:
        self._barrier.abort()


def _sleep_until(deadline: float, progress: Progress | None, check: Callable[[], None]) -> None:
    while True:
        now = time.monotonic()
        if now >= deadline:
            return
        time.sleep(min(_POLL_S, deadline - now))
        check()
        if progress is not None:
            progress.update()


# --- one run -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Window:
    """What one run's measured window saw: the generator's results, CPU per component,
    Envoy's counters over the window, and the window in wall-clock ns."""

    doc: dict[str, Any]
    cpu: dict[str, ComponentCpu]
    envoy: dict[str, int]
    wall_ns: tuple[int, int]


def _measured_window(
    stack: Stack,
    gen: LoadgenProcess,
    start_at: float,
    settings: LoadSettings,
    label: str,
    progress: Progress | None,
) -> _Window:
    """Warm-up, the measured window (CPU and Envoy's counters either side), the drain."""

    def check() -> None:
        dead = stack.dead()
        if dead:
            raise BenchError(
                f"{', '.join(dead)} exited during the {label} run "
                f"(logs in {stack.run_dir / 'logs'})"
            )
        # It may finish early (its last arrival answered before the window ends);
        # only a failure is an error.
        if not gen.alive() and gen.popen.returncode != 0:
            raise gen.failure(f"exited with code {gen.popen.returncode} during the run")

    if progress is not None:
        progress.step(f"{label}: warm-up", settings.warmup_s)
    _sleep_until(start_at + settings.warmup_s, progress, check)
    roots = _component_roots(stack, gen.pid)
    before = Snapshot.take(roots)
    envoy_before = _envoy_counters(stack)
    driver_before = _self_cpu_s()
    wall_start = time.time_ns()
    t_before = time.monotonic()
    if progress is not None:
        progress.step(f"{label}: measuring", settings.duration_s)
    _sleep_until(start_at + settings.total_s, progress, check)
    after = Snapshot.take(roots)
    t_after = time.monotonic()
    wall_end = time.time_ns()
    driver_after = _self_cpu_s()
    if progress is not None:
        progress.step(f"{label}: draining", DRAIN_EST_S)
    doc = gen.result(timeout_s=settings.timeout_s + 60)
    envoy_after = _envoy_counters(stack)
    window = t_after - t_before
    driver_s = driver_after - driver_before
    driver = ComponentCpu(
        cpu_s=driver_s,
        cpu_pct=100.0 * driver_s / window,
        processes_pct={os.getpid(): 100.0 * driver_s / window},
    )
    return _Window(
        doc=doc,
        cpu=usage(before, after, window, extra={DRIVER: driver}),
        envoy={k: envoy_after[k] - envoy_before.get(k, 0) for k in envoy_after},
        wall_ns=(wall_start, wall_end),
    )


def measure(
    stack: Stack,
    targets: Sequence[Target],
    rates_rps: Mapping[str, float],
    settings: LoadSettings,
    run_dir: Path,
    *,
    label: str,
    repeat: int = 0,
    progress: Progress | None = None,
    start_together: StartTogether | None = None,
) -> RunResult:
    """Drive `stack` with one open-loop run and measure it. With `start_together`, the
    load starts when every run sharing it has its generator ready (a paired comparison)."""
    control = set_upstreams_fixed(stack, settings.upstream_ms)
    configured_floor = floor_from_settings(settings_from_control(control), seed=settings.seed)
    plan = Plan(
        targets=tuple(targets),
        rates_rps=dict(rates_rps),
        duration_s=settings.total_s,
        seed=settings.seed,
        timeout_s=settings.timeout_s,
        trace=settings.tracing,
        sampled_pct=settings.traceparent_sampled_pct,
    )
    gen = LoadgenProcess(plan, run_dir)
    try:
        gen.wait_ready()
        start_at = start_together.wait() if start_together else time.monotonic() + _START_MARGIN_S
        gen.start(start_at)
        window = _measured_window(stack, gen, start_at, settings, label, progress)
    finally:
        gen.stop()
    doc, cpu, wall_start = window.doc, window.cpu, window.wall_ns[0]
    samples = Samples.from_json(doc["samples"])
    floor = configured_floor
    traced_calls = None
    if settings.tracing:
        records = _records(stack, wall_start)
        traced_calls = sum(1 for rec in records if rec.get("traceparent"))
        ids = [t for t in samples.trace_id if t]
        floor = floor_from_records(records, ids or None) or configured_floor
    return RunResult(
        label=label,
        layout=stack.layout.value,
        repeat=repeat,
        settings=settings,
        samples=samples,
        cpu=cpu,
        floor=floor,
        spans=None,  # read by with_spans() once the stack has stopped
        envoy=window.envoy,
        connections_opened=int(doc.get("connections_opened", 0)),
        window_wall_ns=window.wall_ns,
        pools={p.name: p.workers for p in stack.config.pools_for(stack.layout)},
        traced_upstream_calls=traced_calls,
    )


def with_spans(result: RunResult, stack: Stack) -> RunResult:
    """`result` with the spans of its window, read after `stack` stopped (so the pools'
    exporters have flushed). Without tracing, unchanged."""
    if not result.settings.tracing:
        return result
    spans = read_span_file(stack.span_file, *result.window_wall_ns)
    return replace(result, spans=spans, breakdowns=read_span_file_breakdowns(stack.span_file))


def with_jaeger_spans(result: RunResult, stack: Stack) -> RunResult:
    """`result` with its window's spans read from the stack's Jaeger: everything but
    Jaeger is stopped first (the pools' exporters flush on exit), then Jaeger is asked.
    The breakdowns are kept in the stack's directory for --replot."""
    stack.stop_all_but("jaeger")
    assert stack.jaeger_url is not None
    try:
        spans, items = read_jaeger(stack.jaeger_url, *result.window_wall_ns)
    except SpanSourceError as exc:
        raise BenchError(f"reading the {result.label} run's spans: {exc}") from None
    write_breakdowns(stack.run_dir / BREAKDOWNS_FILE_NAME, items)
    return replace(result, spans=spans, breakdowns=items)


def _records(stack: Stack, since_ns: int) -> list[dict[str, Any]]:
    """The simulator's request records since `since_ns` (wall clock), newest 50 000."""
    try:
        doc = _http_json(
            "GET", f"{stack.simulator_url}/_control/records?since_ns={since_ns}&limit=50000"
        )
    except OSError:
        return []
    records = doc.get("records", [])
    return records if isinstance(records, list) else []


# --- the comparison ----------------------------------------------------------------------

LAYOUTS = (Layout.SHARED, Layout.SPLIT)


@dataclass(frozen=True)
class Arm:
    """One side of an interleaved comparison: a layout and the pools' tracing switch.

    `label` and `run_name` are templates for one run of it, with `{repeat}` (from 1)
    and `{repeats}`: the progress label, and the stack's directory under the run dir.
    """

    key: str
    layout: Layout
    tracing: bool | str  # PRICING_TRACING for the pools (bench.spans.env_for)
    label: str
    run_name: str
    # Envoy's sampling percentage (None: the load settings', else the route config's).
    sample_percent: float | None = None
    # More of the pools' environment.
    env: Mapping[str, str] = field(default_factory=dict)
    # The WSGI app the pools serve (`Stack.app`: e.g. another HTTP client library's,
    # `bench.pool_app`); None: the service's own.
    app: str | None = None

    @property
    def traced(self) -> bool:
        return self.tracing not in (False, "off", "0")


def layout_arms(tracing: bool) -> tuple[Arm, ...]:
    """The shared/split comparison: both layouts, the same tracing switch."""
    return tuple(
        Arm(
            lay.value,
            lay,
            tracing,
            f"repeat {{repeat}}/{{repeats}} {lay.value}",
            f"r{{repeat}}-{lay.value}",
        )
        for lay in LAYOUTS
    )


def run_order(arms: Sequence[Arm], repeats: int) -> list[tuple[int, Arm]]:
    """Interleaved arms, alternating which goes first, so slow drift on a noisy
    machine (other jobs, thermal) lands on every arm alike."""
    order: list[tuple[int, Arm]] = []
    for r in range(repeats):
        ordered = arms if r % 2 == 0 else tuple(reversed(arms))
        order += [(r, arm) for arm in ordered]
    return order


def planned_seconds(settings: LoadSettings, runs: int) -> float:
    return runs * (STACK_START_EST_S + settings.total_s + DRAIN_EST_S)


def _arm_stack(
    config: RouteConfig, settings: LoadSettings, arm: Arm, run_dir: Path, stack_dir: Path
) -> contextlib.AbstractContextManager[Stack]:
    """The arm's stack: its layout, tracing switch, sampling and environment."""
    percent = arm.sample_percent if arm.sample_percent is not None else settings.sample_percent
    return running_stack(
        with_sample_percent(config, percent, run_dir),
        arm.layout,
        stack_dir,
        tracing=arm.tracing,
        with_jaeger=settings.jaeger and arm.traced,
        env=arm.env,
        app=arm.app,
    )


def _measure_arm(
    stack: Stack,
    settings: LoadSettings,
    arm: Arm,
    stack_dir: Path,
    *,
    label: str,
    repeat: int,
    progress: Progress | None,
    start_together: StartTogether | None = None,
) -> RunResult:
    rates = kind_rates(settings.group_rates_rps)
    host, port = stack.config.listener.address.host, stack.config.listener.address.port
    result = measure(
        stack,
        targets_for(stack.config, host, port, tuple(rates), settings.seed),
        rates,
        replace(settings, tracing=arm.traced),
        stack_dir,
        label=label,
        repeat=repeat,
        progress=progress,
        start_together=start_together,
    )
    # Jaeger is read while it runs; the span file once the stack stopped (with_spans).
    return with_jaeger_spans(result, stack) if settings.jaeger and arm.traced else result


def _with_file_spans(
    result: RunResult, stack: Stack, settings: LoadSettings, arm: Arm
) -> RunResult:
    return result if settings.jaeger and arm.traced else with_spans(result, stack)


def run_arms(
    config: RouteConfig,
    settings: LoadSettings,
    arms: Sequence[Arm],
    *,
    workers: int,
    repeats: int,
    run_dir: Path,
    progress: Progress | None = None,
    paired: bool = False,
    pin: str | None = None,
) -> list[tuple[Arm, RunResult]]:
    """Every arm from the same route config, the same N processes and the same
    arrivals, `repeats` times, each run on a fresh stack. Every run is returned (not
    just the best), in the order they ran.

    *pin*: in runs one after another, that pool's workers run on a core of their own and
    everything else (Envoy, the simulator, this driver and so the load generator) on the
    other(s), as ``pin_pool`` does for io-capacity; each result says so
    (``pinned_pool``). Paired runs are never pinned: their arms share the cores.

    Interleaved (the default): one arm after another, alternating which goes first.
    *paired*: every arm at once, each on its own stack, all driven over the same window.
    What the machine does meanwhile (other jobs, frequency, a noisy neighbour) lands on
    every arm alike, so each repeat's ratio between arms is far steadier than between
    runs minutes apart. Only for loads the machine carries for every arm at once: the
    arms share its cores. Returned repeat by repeat, in the arms' order."""
    config = prepared_config(config, workers, run_dir)
    results: list[tuple[Arm, RunResult]] = []
    if paired:
        for repeat in range(repeats):
            results += _paired_repeat(config, settings, arms, run_dir, repeat, repeats, progress)
        return results
    driver_cores = os.sched_getaffinity(0)
    for repeat, arm in run_order(arms, repeats):
        names = {"repeat": repeat + 1, "repeats": repeats}
        label = arm.label.format(**names)
        stack_dir = run_dir / arm.run_name.format(**names)
        if progress is not None:
            progress.step(f"{label}: starting the stack", STACK_START_EST_S)
        with _arm_stack(config, settings, arm, run_dir, stack_dir) as stack:
            pinned = pin is not None and pin_pool(stack, pin)
            try:
                result = _measure_arm(
                    stack, settings, arm, stack_dir, label=label, repeat=repeat, progress=progress
                )
            finally:
                if pinned:
                    os.sched_setaffinity(0, driver_cores)
        if pinned:
            result = replace(result, pinned_pool=pin)
        results.append((arm, _with_file_spans(result, stack, settings, arm)))
    return results


def _paired_repeat(
    config: RouteConfig,
    settings: LoadSettings,
    arms: Sequence[Arm],
    run_dir: Path,
    repeat: int,
    repeats: int,
    progress: Progress | None,
) -> list[tuple[Arm, RunResult]]:
    names = {"repeat": repeat + 1, "repeats": repeats}
    dirs = [run_dir / arm.run_name.format(**names) for arm in arms]
    label = f"{' + '.join(arm.key for arm in arms)} at once, repeat {repeat + 1}/{repeats}"
    if progress is not None:
        progress.step(f"{label}: starting the stacks", STACK_START_EST_S * len(arms))
    together = StartTogether(len(arms))
    outcomes: list[RunResult | BaseException | None] = [None] * len(arms)
    with contextlib.ExitStack() as started:
        stacks = [
            started.enter_context(_arm_stack(config, settings, arm, run_dir, stack_dir))
            for arm, stack_dir in zip(arms, dirs, strict=True)
        ]

        def run(i: int) -> None:
            try:
                outcomes[i] = _measure_arm(
                    stacks[i],
                    settings,
                    arms[i],
                    dirs[i],
                    label=label if i == 0 else arms[i].key,
                    repeat=repeat,
                    # One progress line, the first arm's: they share the window.
                    progress=progress if i == 0 else None,
                    start_together=together,
                )
            except BaseException as exc:  # raised again on the driver's thread, below
                together.abort()
                outcomes[i] = exc

        threads = [
            threading.Thread(target=run, args=(i,), name=f"paired-{arm.key}", daemon=True)
            for i, arm in enumerate(arms)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    if failed:
        # The run that failed first, not the others it stopped.
        raise next((e for e in failed if not isinstance(e, PairAborted)), failed[0])
    out = []
    for arm, stack, outcome in zip(arms, stacks, outcomes, strict=True):
        assert isinstance(outcome, RunResult)
        out.append((arm, _with_file_spans(outcome, stack, settings, arm)))
    return out


def compare(
    config: RouteConfig,
    settings: LoadSettings,
    *,
    workers: int,
    repeats: int,
    run_dir: Path,
    progress: Progress | None = None,
) -> list[RunResult]:
    """The shared and the split layout, interleaved (see `run_arms`)."""
    runs = run_arms(
        config,
        settings,
        layout_arms(settings.tracing),
        workers=workers,
        repeats=repeats,
        run_dir=run_dir,
        progress=progress,
    )
    return [result for _, result in runs]
