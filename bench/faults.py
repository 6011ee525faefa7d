"""The fault matrix: one fault at a time against the split stack under the benchmark's
mixed load (`bench.traffic`, sent by `bench.loadgen`), tracing at its default. Each
fault gets a fresh stack and one run of load: a quiet stretch, the fault for a fixed
window (a signal, a full file system, a slow collector), then the stack's own
recovery. What the stack does after a crash (restart it or not) is the launcher's: the
matrix only reports it.

Per fault: requests failed, split into idempotent GETs and POSTs (and the POSTs in
flight on a killed process, the only losses a kill may cost); time to recover (from
the fault's end to the end of the last failed request); RSS and open descriptors of
every process before and after; the spans the pools dropped and exported, from their
own counters (`pricing_spans_dropped`, `pricing_spans_exported` on each pool's
/metrics), and the metric files a worker had to keep in memory (its own warning, in the
pools' logs: their later values are not scraped).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import full_disk
from bench.loadgen import Plan, Samples
from bench.progress import Progress
from bench.run import (
    BenchError,
    LoadgenProcess,
    LoadSettings,
    running_stack,
    set_upstreams_fixed,
)
from bench.soak import _processes
from bench.throttle import ThrottleProxy
from bench.traffic import CPU_KINDS, kind_rates, targets_for
from routing.model import Layout, RouteConfig
from stack.jaeger import JaegerPorts
from stack.launch import Stack
from stack.procfs import children, open_fds, rss_kib
from stack.supervise import Supervisor
from toolkit.contract import METRICS_DIR_ENV, SPAN_FILE_ENV
from toolkit.fetch import fetch
from tracing.prometheus_adapter import IN_MEMORY_WARNING
from tracing.readback.usage import parse_text
from tracing.settings import OTLP_TRACES_ENDPOINT_ENV, TRACES_PATH

#: Bytes a second the slow collector passes, each way: an OTLP export of a batch of
#: spans takes seconds instead of milliseconds.
SLOW_COLLECTOR_BPS = 2048.0
#: The counters a pool keeps of what its telemetry lost (and sent), summed per pool.
TELEMETRY_COUNTERS = {
    "spans_dropped": "pricing_spans_dropped_total",
    "spans_exported": "pricing_spans_exported_total",
}
#: A failure this close to the end of the run: the stack had not recovered.
UNRECOVERED_TAIL_S = 2.0


@dataclass(frozen=True)
class Fault:
    """One row of the matrix: `action` (SIGKILL, SIGSTOP, disk-full, slow-collector) on
    `target` (io worker, cpu worker, io master, envoy, simulator, jaeger, span file,
    metrics dir, collector)."""

    action: str
    target: str

    @property
    def name(self) -> str:
        return f"{self.action} {self.target}"

    @property
    def slug(self) -> str:
        """The name `--faults` takes: sigkill-io-worker, disk-full-span-file, slow-collector."""
        if self.target == "collector":
            return self.action
        return f"{self.action.lower()}-{self.target.replace(' ', '-')}"

    @property
    def jaeger(self) -> bool:
        """Spans to Jaeger over OTLP; False: to the span file (its file system's fault)."""
        return self.target != "span file"

    @property
    def instant(self) -> bool:
        """A kill: the fault is one moment, and the window is the stack's to recover in."""
        return self.action == "SIGKILL"


SIGNAL_TARGETS = ("io worker", "cpu worker", "io master", "envoy", "simulator", "jaeger")
MATRIX: tuple[Fault, ...] = (
    *(Fault(action, target) for target in SIGNAL_TARGETS for action in ("SIGKILL", "SIGSTOP")),
    Fault("disk-full", "span file"),
    Fault("disk-full", "metrics dir"),
    Fault("slow-collector", "collector"),
)
FAULT_SLUGS = tuple(f.slug for f in MATRIX)


@dataclass(frozen=True)
class Windows:
    """Seconds of load before the fault, of the fault, and after it."""

    before_s: float
    fault_s: float
    after_s: float

    @property
    def total_s(self) -> float:
        return self.before_s + self.fault_s + self.after_s


@dataclass
class _Rig:
    """What one fault's stack runs with besides itself: the small file system under the
    span file or the metrics, the throttling proxy in front of Jaeger. Mutable."""

    disk: Path | None = None
    proxy: ThrottleProxy | None = None


@contextlib.contextmanager
def _rig(fault: Fault, run_dir: Path) -> Iterator[tuple[_Rig, dict[str, str], JaegerPorts | None]]:
    """The rig, the pools' extra environment and Jaeger's ports for `fault`."""
    rig, env = _Rig(), {}
    ports = JaegerPorts.free() if fault.jaeger else None
    with contextlib.ExitStack() as stack:
        if fault.action == "disk-full":
            rig.disk = stack.enter_context(full_disk.small_tmpfs(run_dir / "disk"))
            if fault.target == "span file":
                env[SPAN_FILE_ENV] = str(rig.disk / "spans.jsonl")
            else:
                env[METRICS_DIR_ENV] = str(rig.disk / "metrics")
        if fault.action == "slow-collector":
            assert ports is not None
            rig.proxy = stack.enter_context(ThrottleProxy((ports.host, ports.otlp_http)))
            env[OTLP_TRACES_ENDPOINT_ENV] = rig.proxy.url + TRACES_PATH
        yield rig, env, ports


def _victim(stack: Stack, target: str) -> tuple[int, str]:
    """The pid `target` names in the running stack, and its label."""
    if target in ("io worker", "cpu worker"):
        pool = target.split()[0]
        workers = children(stack.procs[f"pool-{pool}"].pid)
        if not workers:
            raise BenchError(f"faults: the {pool} pool has no worker to signal")
        return workers[0], f"pool-{pool} worker"
    if target == "io master":
        return stack.procs["pool-io"].pid, "pool-io master"
    return stack.procs[target].pid, target


def _inject(fault: Fault, stack: Stack, rig: _Rig) -> tuple[str, Callable[[], str] | None]:
    """Start the fault: what it did, and what ends it (None: a kill, over at once)."""
    if fault.action in ("SIGKILL", "SIGSTOP"):
        pid, label = _victim(stack, fault.target)
        os.kill(pid, getattr(signal, fault.action))
        if fault.action == "SIGKILL":
            return f"{label} {pid} killed", None

        def resume() -> str:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            return f"{label} {pid} continued"

        return f"{label} {pid} stopped", resume
    if fault.action == "disk-full":
        assert rig.disk is not None
        taken = full_disk.fill(rig.disk)

        def unfill() -> str:
            assert rig.disk is not None
            full_disk.free(rig.disk)
            return f"{fault.target}'s file system freed"

        return f"{fault.target}'s file system filled ({taken >> 20} MiB)", unfill
    assert rig.proxy is not None
    rig.proxy.rate_bps = SLOW_COLLECTOR_BPS

    def unthrottle() -> str:
        assert rig.proxy is not None
        rig.proxy.rate_bps = None
        return "collector unthrottled"

    return f"collector throttled to {SLOW_COLLECTOR_BPS:g} B/s", unthrottle


def telemetry_counters(stack: Stack) -> dict[str, dict[str, float] | None]:
    """Per pool: the telemetry counters of its /metrics (every worker's, the dead ones'
    too: prometheus_client's multiprocess totals); None when the pool did not answer."""
    out: dict[str, dict[str, float] | None] = {}
    for pool in stack.config.pools_for(stack.layout):
        url = f"{stack.pool_url(pool.name)}{stack.config.meta.metrics}"
        try:
            samples = parse_text(fetch(url, timeout_s=5.0).expect_ok().text)
        except Exception:  # a pool that is down is a figure too: None
            out[pool.name] = None
            continue
        totals: dict[str, float] = {}  # a counter the pools do not keep stays out
        for per_pid in samples.values():
            for (name, _labels), value in per_pid.items():
                for key, wanted in TELEMETRY_COUNTERS.items():
                    if name == wanted:
                        totals[key] = totals.get(key, 0.0) + value
        out[pool.name] = totals
    return out


def _telemetry_lost(
    before: dict[str, dict[str, float] | None], after: dict[str, dict[str, float] | None]
) -> dict[str, float | None]:
    """The counters' increases over the run, summed over the pools that answered both."""
    out: dict[str, float | None] = {}
    for key in TELEMETRY_COUNTERS:
        pairs = [(b, after.get(p)) for p, b in before.items()]
        known = [(b, a) for b, a in pairs if b is not None and a is not None and key in a]
        out[key] = sum(a[key] - b.get(key, 0.0) for b, a in known) if known else None
    return out


def _processes_now(stack: Stack) -> dict[int, dict[str, Any]]:
    return {
        pid: {"label": label, "rss_kib": rss_kib(pid), "fds": open_fds(pid)}
        for pid, label in _processes(stack).items()
    }


def process_change(
    before: dict[int, dict[str, Any]], after: dict[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every process seen before or after the fault: its RSS and descriptors at each
    (None where it was not there: killed, or started since)."""
    rows = []
    for pid in sorted(set(before) | set(after)):
        b, a = before.get(pid), after.get(pid)
        label = (b or a or {}).get("label")
        rows.append(
            {
                "pid": pid,
                "label": label,
                "rss_kib": [b and b["rss_kib"], a and a["rss_kib"]],
                "fds": [b and b["fds"], a and a["fds"]],
            }
        )
    return sorted(rows, key=lambda r: (str(r["label"]), r["pid"]))


def failures(
    samples: Samples,
    fault_at_s: float,
    fault_end_s: float,
    *,
    cpu_timeout_s: float,
    kill: bool,
    total_s: float,
) -> dict[str, Any]:
    """Non-200 answers split into GETs (idempotent: none may fail to a worker or master
    fault) and POSTs, and the POSTs in flight at a kill (sent within the CPU route's
    timeout before it, or within a second after). Recovery: from the fault's end to the
    end of the last failed request (0: none failed after the fault ended); None when
    requests still failed at the end of the run."""
    requests = {"get": 0, "post": 0}
    failed = {"get": 0, "post": 0, "post_in_flight": 0}
    before = {"get": 0, "post": 0}  # before the fault: the machine's own noise
    statuses: dict[str, int] = {}
    last_end, tail_failed = fault_end_s, False
    for kind, sent, latency, status in zip(
        samples.kind, samples.scheduled_s, samples.latency_s, samples.status, strict=True
    ):
        method = "post" if samples.kinds[kind] in CPU_KINDS else "get"
        requests[method] += 1
        if status == 200:
            continue
        failed[method] += 1
        if sent < fault_at_s:
            before[method] += 1
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        in_flight = fault_at_s - cpu_timeout_s <= sent <= fault_at_s + 1.0
        if method == "post" and kill and in_flight:
            failed["post_in_flight"] += 1
        last_end = max(last_end, sent + latency)
        tail_failed = tail_failed or sent >= total_s - UNRECOVERED_TAIL_S
    recovery = None if tail_failed else round(last_end - fault_end_s, 2)
    return {
        "requests": requests,
        "failed": failed,
        "failed_before": before,
        "statuses": statuses,
        "recovery_s": recovery,
    }


def failure_timeline(samples: Samples, bin_s: float = 0.5) -> list[int]:
    """Failed requests per `bin_s` of due time (the plot's rows)."""
    bins: list[int] = []
    for sent, status in zip(samples.scheduled_s, samples.status, strict=True):
        i = int(sent / bin_s)
        bins.extend([0] * (i + 1 - len(bins)))
        if status != 200:
            bins[i] += 1
    return bins


def _plan(stack: Stack, settings: LoadSettings, total_s: float) -> Plan:
    rates = kind_rates(settings.group_rates_rps)
    host, port = stack.url.removeprefix("http://").split(":")
    return Plan(
        targets=targets_for(stack.config, host, int(port), tuple(rates), settings.seed),
        rates_rps=rates,
        duration_s=total_s,
        seed=settings.seed,
        timeout_s=settings.timeout_s,
    )


@dataclass
class _Watch:
    """What happened during one fault's run, as it happened. Mutable."""

    start: float
    events: list[dict[str, Any]]
    dead: set[str]

    def note(self, what: str) -> None:
        self.events.append({"at_s": round(time.monotonic() - self.start, 2), "what": what})

    def check(self, stack: Stack, gen: LoadgenProcess) -> None:
        for name in stack.dead():
            if name not in self.dead:
                self.dead.add(name)
                self.note(f"{name} exited")
        for name in list(self.dead):
            if name in stack.procs and stack.procs[name].alive():
                self.dead.discard(name)
                self.note(f"{name} running again")
        if not gen.alive() and gen.popen.returncode != 0:
            raise gen.failure(f"exited with code {gen.popen.returncode}")


def _drive(
    fault: Fault,
    stack: Stack,
    rig: _Rig,
    gen: LoadgenProcess,
    windows: Windows,
    progress: Progress,
    supervise: bool,
) -> tuple[_Watch, dict[str, Any]]:
    """The load's run: before, the fault, after. Returns the watch and the 'before'
    snapshot (processes and telemetry counters, a second before the fault)."""
    gen.wait_ready()
    start = time.monotonic() + 0.3
    gen.start(start)
    watch = _Watch(start, [], set())
    # What `pricingctl up` does for a process that exits on its own (None: nothing).
    supervisor = Supervisor(stack, watch.note) if supervise else None
    at, end, stop = (
        start + windows.before_s,
        start + windows.before_s + windows.fault_s,
        start + windows.total_s,
    )
    before: dict[str, Any] = {}
    injected, ending = False, None
    while time.monotonic() < stop:
        now = time.monotonic()
        if not before and now >= at - 1.0:
            before = {"processes": _processes_now(stack), "telemetry": telemetry_counters(stack)}
        if not injected and now >= at:
            injected = True
            what, ending = _inject(fault, stack, rig)
            watch.note(f"{fault.name}: {what}")
        if ending is not None and now >= end:
            watch.note(f"{fault.name}: {ending()}")
            ending = None
        if supervisor is not None and (reason := supervisor.check()) is not None:
            watch.note(reason)
        watch.check(stack, gen)
        progress.update()
        time.sleep(0.1)
    return watch, before


def metric_files_in_memory(stack: Stack) -> int:
    """Metric files the pools' workers moved into memory (a full metrics directory),
    from their own warning in the pools' logs."""
    count = 0
    for log in (stack.run_dir / "logs").glob("pool-*.log"):
        with contextlib.suppress(OSError):
            count += log.read_text(encoding="utf-8", errors="replace").count(IN_MEMORY_WARNING)
    return count


def span_file_lines(path: Path) -> dict[str, int]:
    """The span file's lines, and those that are not whole JSON (a write the full file
    system cut short: `pricingctl traces` refuses a file holding one)."""
    import json

    lines = torn = 0
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_bytes().splitlines():
            lines += 1
            try:
                json.loads(line)
            except ValueError:
                torn += 1
    return {"lines": lines, "torn": torn}


def run_fault(
    config: RouteConfig,
    settings: LoadSettings,
    fault: Fault,
    windows: Windows,
    run_dir: Path,
    progress: Progress,
    supervise: bool = True,
) -> dict[str, Any]:
    """One fault on a fresh split stack under the mixed load; its row of the matrix."""
    with (
        _rig(fault, run_dir) as (rig, env, ports),
        running_stack(
            config,
            Layout.SPLIT,
            run_dir / "stack",
            tracing=True,
            with_jaeger=fault.jaeger,
            env=env,
            jaeger_ports=ports,
        ) as stack,
    ):
        set_upstreams_fixed(stack, settings.upstream_ms)
        gen = LoadgenProcess(_plan(stack, settings, windows.total_s), run_dir / "loadgen")
        try:
            watch, before = _drive(fault, stack, rig, gen, windows, progress, supervise)
            doc = gen.result(timeout_s=settings.timeout_s + 60)
        finally:
            gen.stop()
        time.sleep(1.5)  # the last spans exported, the last metrics flushed
        after: dict[str, Any] = {
            "processes": _processes_now(stack),
            "telemetry": telemetry_counters(stack),
        }
        metric_files = metric_files_in_memory(stack)
        span_file = span_file_lines(Path(env[SPAN_FILE_ENV])) if SPAN_FILE_ENV in env else None
    samples = Samples.from_json(doc["samples"])
    fault_end = windows.before_s + (0.0 if fault.instant else windows.fault_s)
    return {
        "fault": fault.name,
        "events": watch.events,
        "not_running_at_end": sorted(watch.dead),
        **failures(
            samples,
            windows.before_s,
            fault_end,
            cpu_timeout_s=settings.cpu_timeout_s,
            kill=fault.instant,
            total_s=windows.total_s,
        ),
        "telemetry_lost": _telemetry_lost(before.get("telemetry", {}), after["telemetry"]),
        "processes": process_change(before.get("processes", {}), after["processes"]),
        "failed_per_half_s": failure_timeline(samples),
        "span_file": span_file,
        "metric_files_in_memory": metric_files,
    }


def run_faults(
    config: RouteConfig,
    settings: LoadSettings,
    faults: Sequence[Fault],
    windows: Windows,
    run_dir: Path,
    progress: Progress,
    supervise: bool = True,
) -> dict[str, Any]:
    """The matrix: each fault on its own stack, in order (supervised as `pricingctl up`
    supervises, unless `supervise` is False). A disk fault where no tmpfs can
    be mounted is skipped with the reason."""
    rows, skipped = [], {}
    for i, fault in enumerate(faults):
        progress.step(f"faults: {fault.name} ({i + 1}/{len(faults)})", windows.total_s + 10)
        try:
            rows.append(
                run_fault(
                    config, settings, fault, windows, run_dir / f"{i:02d}", progress, supervise
                )
            )
        except full_disk.NoMount as exc:
            skipped[fault.name] = str(exc)
    return {
        "settings": {
            "rates_rps": dict(settings.group_rates_rps),
            "upstream_ms": settings.upstream_ms,
            "windows_s": [windows.before_s, windows.fault_s, windows.after_s],
            "sample_percent": config.tracing.sample_percent,
            "slow_collector_bps": SLOW_COLLECTOR_BPS,
            "tmpfs_mib": full_disk.SIZE_MIB,
            "supervised": supervise,
        },
        "faults": rows,
        "skipped": skipped,
    }


def _cell(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:g}{unit}"


def summary_line(row: dict[str, Any]) -> str:
    failed, req, lost = row["failed"], row["requests"], row["telemetry_lost"]
    noise = row["failed_before"]
    recovery = (
        "NOT recovered" if row["recovery_s"] is None else f"recovered {row['recovery_s']:g} s"
    )
    down = (
        f"; not running at the end: {', '.join(row['not_running_at_end'])}"
        if row["not_running_at_end"]
        else ""
    )
    torn = f"; span file lines torn {row['span_file']['torn']}" if row.get("span_file") else ""
    return (
        f"  {row['fault']:<24} GET failed {failed['get']}/{req['get']}, POST failed "
        f"{failed['post']}/{req['post']} ({failed['post_in_flight']} in flight at a kill; "
        f"before the fault {noise['get']} GET, {noise['post']} POST); "
        f"{recovery}; spans dropped {_cell(lost['spans_dropped'])}, metric files in memory "
        f"{row['metric_files_in_memory']}{torn}{down}"
    )


def write_faults(doc: dict[str, Any], out: Path) -> str:
    import json

    from bench.plots import fault_matrix

    out.mkdir(parents=True, exist_ok=True)
    (out / "faults.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    before_s = doc["settings"]["windows_s"][0]
    fault_matrix(
        [(r["fault"], r["failed_per_half_s"]) for r in doc["faults"]],
        0.5,
        (before_s, before_s + doc["settings"]["windows_s"][1]),
        out / "faults.png",
    )
    how = "supervised" if doc["settings"]["supervised"] else "nothing restarted"
    lines = [f"faults: one at a time, a fresh split stack each ({how}), under the mixed load"]
    lines += [summary_line(row) for row in doc["faults"]]
    lines += [f"  {name}: skipped ({why})" for name, why in doc["skipped"].items()]
    lines.append(f"results: {out / 'faults.json'}, {out / 'faults.png'}")
    return "\n".join(lines)
