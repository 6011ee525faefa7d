"""`pricingctl incident`: the founding incident replayed on this machine, end to end.

One stack, one load that never stops, four steps (the scenario file sets the shape):

1. **Before.** The split stack, tracing at its default (Envoy samples 1 %, a slow
   request is kept whatever), with the scenario's CPU-heavy endpoints placed in the
   offers' pool: every app endpoint shares the same processes, as pricingservice did.
   App clients poll for their trip's offers (bike and scooter at once); CPU-heavy
   quotes arrive meanwhile; every upstream answers after the scenario's latency.
2. **Diagnose** from what the product recorded: the late offers' traces (Jaeger, or
   the span file without it) say how much of their time was network and how much
   waiting for the event loop, and behind which route (`tracing.readback.diagnosis`).
   `pricingctl routes suggest` reads the pools' /metrics over the window meanwhile.
3. **Fix.** The move `suggest` proposes is applied live with `pricingctl routes
   apply`, under the same load.
4. **After.** The same window again.

The figures come from the app clients' side (`bench.incident_report`); the diagnosis
and the move only from the product's own records and commands. Which endpoints are
truly CPU-heavy (the scenario knows) is used once, to check the culprit the traces
name.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.cpu import OTHER, Snapshot, usage
from bench.incident_report import (
    comparison_lines,
    failed_during,
    flicker,
    sent,
    timeline,
    window_stats,
)
from bench.loadgen import Plan, Samples, plan_schedule
from bench.run import BenchError, LoadgenProcess, LoadSettings, running_stack, set_upstreams_fixed
from bench.scenario import Scenario
from bench.suggest import moves, suggest_cmd
from bench.traffic import Target, targets_for
from routing.model import Layout, RouteConfig
from routing.write import write_routes
from stack.launch import PROJECT_ROOT, Stack
from toolkit.fetch import fetch
from tracing.readback.diagnosis import Diagnosis, diagnose, tell
from tracing.readback.report import percentile
from tracing.readback.spans import Span, SpanSourceError, from_file, from_jaeger, jaeger_trace_url

Say = Callable[[str], None]

# The generator's schedule runs this long past the before window, so that the move
# (however long it takes, up to this) and the after window fit in it; the driver ends
# it once the after window is over.
MOVE_MAX_S = 240.0
# Seconds the pools' span exporters get to flush the window's last spans.
FLUSH_S = 3.0
# The client's own deadline for a request, past the longest route timeout: the
# service's answer is what gets recorded, not the client giving up.
CLIENT_MARGIN_S = 1.0
_START_MARGIN_S = 0.5
# Seconds of the before window left for `routes suggest`'s last scrape of the pools.
SCRAPE_SPARE_S = 1.0
_POLL_S = 0.2
# The capacity probe: requests of each CPU-heavy endpoint, one at a time, counted after
# one per worker (which warms it); it stops early past the time limit (3 at least).
PROBE_REQUESTS = 10
PROBE_MAX_S = 3.0
_PROBE_MIN = 3


def before_config(config: RouteConfig, scenario: Scenario, run_dir: Path) -> RouteConfig:
    """*config* with the scenario's CPU-heavy endpoints in the offers' pool (a pool left
    with no app route keeps the API description: a pool must serve a route), the
    offers' timeout the scenario's, and their slow threshold half the cap (every late
    offer is traced). Written to *run_dir*/before.toml."""
    offers = {r.pool for r in config.routes if r.endpoint in scenario.offer_kinds}
    if len(offers) != 1:
        raise BenchError(f"the offers {', '.join(scenario.offer_kinds)} must share one pool")
    (pool,) = offers

    def placed(route: Any) -> Any:
        if route.endpoint in scenario.cpu_kinds:
            return replace(route, pool=pool)
        if route.endpoint in scenario.offer_kinds:
            slow_ms = int(scenario.cap_ms / 2)
            return replace(route, timeout_ms=scenario.offer_timeout_ms, slow_ms=slow_ms)
        return route

    routes = tuple(placed(r) for r in config.routes)
    for other in config.pools:
        if not any(r.pool == other.name for r in routes if not r.endpoint.startswith("meta.")):
            routes = tuple(
                replace(r, pool=other.name) if r.endpoint == "meta.openapi" else r for r in routes
            )
    return write_routes(replace(config, routes=routes), run_dir / "before.toml")


def moved_config(config: RouteConfig, proposed: Mapping[str, str], run_dir: Path) -> RouteConfig:
    """*config* with only the proposed moves (pool sizes stay: they need a restart)."""
    routes = tuple(replace(r, pool=proposed.get(r.endpoint, r.pool)) for r in config.routes)
    return write_routes(replace(config, routes=routes), run_dir / "after.toml")


@dataclass
class Clock:
    """Schedule time: seconds since the generator's first due request. Mutable: it
    checks the stack and the generator while it waits."""

    start_at: float
    stack: Stack
    gen: LoadgenProcess

    def now(self) -> float:
        return time.monotonic() - self.start_at

    def wall_ns(self, t: float) -> int:
        """Schedule time *t* on the wall clock (for the spans' timestamps)."""
        return time.time_ns() - int((self.now() - t) * 1e9)

    def wait_until(self, t: float) -> None:
        while (left := t - self.now()) > 0:
            time.sleep(min(_POLL_S, left))
            dead = self.stack.dead()
            if dead:
                raise BenchError(
                    f"{', '.join(dead)} exited (logs in {self.stack.run_dir / 'logs'})"
                )
            if not self.gen.alive():
                raise self.gen.failure("stopped before the replay ended")


def _probe_once(target: Target, i: int) -> float:
    request = target.requests[i % len(target.requests)]
    method, path, _ = request.head.decode("latin-1").split(" ", 2)
    url = f"http://{target.host}:{target.port}{path}"
    try:
        reply = fetch(url, method=method, body=request.body, timeout_s=60).expect_ok()
    except OSError as exc:
        raise BenchError(f"the capacity probe of {target.kind}: {exc}") from None
    return reply.elapsed_s


def calibrate(stack: Stack, scenario: Scenario) -> dict[str, dict[str, float]]:
    """Each CPU-heavy endpoint's capacity in the offers' pool, on this machine as busy as
    it is now: its requests one at a time, the pool's workers over their median time;
    and the rate the scenario's share of that capacity asks for."""
    listener = stack.config.listener.address
    kinds = scenario.cpu_kinds
    targets = targets_for(stack.config, listener.host, listener.port, kinds, scenario.seed)
    route = stack.config.route_for_endpoint(scenario.offer_kinds[0])
    assert route is not None
    workers = stack.config.pool(route.pool).workers
    out: dict[str, dict[str, float]] = {}
    for target in targets:
        times: list[float] = []
        deadline = time.monotonic() + PROBE_MAX_S
        for i in itertools.count():
            elapsed = _probe_once(target, i)
            if i >= workers:
                times.append(elapsed)
            late = time.monotonic() > deadline and len(times) >= _PROBE_MIN
            if len(times) >= PROBE_REQUESTS or late:
                break
        median_s = percentile(times, 50)
        share = scenario.cpu_shares[target.kind]
        out[target.kind] = {
            "median_ms": round(median_s * 1000, 1),
            "workers": workers,
            "capacity_rps": round(workers / median_s, 2),
            "share": share,
            "rate_rps": round(share * workers / median_s, 3),
        }
    return out


def calibration_lines(calibration: Mapping[str, Mapping[str, float]]) -> list[str]:
    return [
        f"capacity: {kind} takes {c['median_ms']:.0f} ms here; the offers' pool "
        f"({c['workers']:.0f} workers) serves {c['capacity_rps']:.1f}/s; "
        f"{100 * c['share']:.0f} % of it: {c['rate_rps']:.2f}/s"
        for kind, c in calibration.items()
    ]


def _plan(stack: Stack, scenario: Scenario, rates_rps: Mapping[str, float]) -> Plan:
    listener = stack.config.listener.address
    kinds = (*scenario.offer_kinds, *scenario.cpu_kinds)
    targets = targets_for(stack.config, listener.host, listener.port, kinds, scenario.seed)
    longest_s = max(r.timeout_ms for r in stack.config.routes) / 1000
    return Plan(
        targets=targets,
        rates_rps=dict(rates_rps),
        duration_s=scenario.warmup_s + scenario.before_s + MOVE_MAX_S + scenario.after_s,
        seed=scenario.seed,
        timeout_s=longest_s + CLIENT_MARGIN_S,
        polls=scenario.polls,
    )


def _suggest_window_s(scenario: Scenario) -> float:
    """`routes suggest` starts with the before window (the load is warm by then) and
    scrapes the pools once more just before it ends."""
    return max(2.0, scenario.before_s - SCRAPE_SPARE_S)


def _suggest_settings(scenario: Scenario, rates_rps: Mapping[str, float]) -> LoadSettings:
    """The load as `bench.suggest` sizes `routes suggest`'s evidence."""
    batch = rates_rps.get("quotes.batch", 0.0)
    return LoadSettings(
        group_rates_rps={"batch": batch} if batch else {"cpu": 1.0},
        duration_s=scenario.before_s,
        warmup_s=scenario.warmup_s,
    )


def _run_suggest(
    stack: Stack, config: RouteConfig, settings: LoadSettings, window: float, out: dict[str, Any]
) -> threading.Thread:
    """`pricingctl routes suggest --from-metrics` on the pools, inside the before window."""
    cmd = suggest_cmd(stack, config, settings, window=window)
    out["command"] = cmd

    def run() -> None:
        out["done"] = subprocess.run(
            cmd,
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=window + 60,
            check=False,
        )

    thread = threading.Thread(target=run, name="routes-suggest", daemon=True)
    thread.start()
    return thread


def read_spans(stack: Stack, since_ns: int, until_ns: int) -> tuple[list[Span], str]:
    """The spans that started in [since_ns, until_ns), from the stack's Jaeger (or its
    span file without one), and where they came from."""
    if stack.jaeger_url is not None:
        lookback = f"{int((time.time_ns() - since_ns) / 1e9) + 10}s"
        try:
            spans = from_jaeger(stack.jaeger_url, limit=5000, lookback=lookback, timeout_s=60)
        except SpanSourceError as exc:
            raise BenchError(f"reading the before window's traces: {exc}") from None
        source = f"Jaeger at {stack.jaeger_url}"
    else:
        spans, source = from_file(stack.span_file, strict=False), f"the span file {stack.span_file}"
    return [s for s in spans if since_ns <= s.start_us * 1000 < until_ns], source


def diagnosis_json(found: Diagnosis, source: str, link: str | None) -> dict[str, Any]:
    example = found.example()
    median_wait, median_net = found.median("wait_s"), found.median("network_s")
    return {
        "source": source,
        "traced": found.traced,
        "late": len(found.late),
        "late_by_endpoint": found.by_endpoint,
        "median_wait_ms": None if median_wait is None else round(median_wait * 1000, 1),
        "median_network_ms": None if median_net is None else round(median_net * 1000, 1),
        "culprits": [
            {"route": label, "seconds": round(s, 3), "share": round(s / found.wait_s, 3)}
            for label, s in found.culprits
        ],
        "culprit": found.culprit,
        "example": None
        if example is None
        else {"story": tell(example), "trace_id": example.trace_id, "url": link},
    }


def diagnosis_lines(doc: Mapping[str, Any], cap_ms: float) -> list[str]:
    """What the traces say, as the seed tells it."""
    if not doc["late"]:
        return [f"diagnosis: no traced offer took longer than {cap_ms:.0f} ms ({doc['source']})"]
    endpoints = ", ".join(f"{e} {n}" for e, n in doc["late_by_endpoint"].items())
    lines = [
        f"diagnosis, from {doc['traced']} traced offers ({doc['source']}): "
        f"{doc['late']} took longer than {cap_ms:.0f} ms ({endpoints}); median "
        f"{doc['median_network_ms']:.0f} ms on the network, {doc['median_wait_ms']:.0f} ms "
        "waiting for the event loop",
        "  waited behind: "
        + ", ".join(f"{c['route']} {100 * c['share']:.0f} %" for c in doc["culprits"][:3]),
    ]
    example = doc["example"]
    if example is not None:
        lines.append(f"  the slowest: {example['story']}")
        lines.append(f"  its trace: {example['url'] or example['trace_id']}")
    return lines


def _diagnose(
    stack: Stack, clock: Clock, scenario: Scenario, window: tuple[float, float]
) -> dict[str, Any]:
    labels: set[str] = set()
    for kind in scenario.offer_kinds:
        route = stack.config.route_for_endpoint(kind)
        assert route is not None
        labels.update(route.labels(route.answered_methods))
    spans, source = read_spans(stack, clock.wall_ns(window[0]), clock.wall_ns(window[1]))
    found = diagnose(spans, labels, scenario.cap_ms / 1000)
    example = found.example()
    link = None
    if example is not None and stack.jaeger_url is not None and stack.jaeger_ui is not None:
        link = jaeger_trace_url(stack.jaeger_url, example.trace_id, example.span_id)
    elif example is not None and stack.jaeger_url is None:
        link = f"pricingctl traces --from-spans {stack.span_file} --trace-id {example.trace_id}"
    return diagnosis_json(found, source, link)


def _cpu_labels(stack: Stack, scenario: Scenario) -> set[str]:
    labels: set[str] = set()
    for kind in scenario.cpu_kinds:
        route = stack.config.route_for_endpoint(kind)
        if route is not None:
            labels.update(route.labels())
    return labels


def _apply(stack: Stack, config: RouteConfig, clock: Clock, say: Say) -> dict[str, Any]:
    """`pricingctl routes apply` of *config* on the running stack; when it ran."""
    cmd = [sys.executable, "-m", "pricingctl", "routes", "--config", config.source, "apply"]
    cmd += ["--run-dir", str(stack.run_dir)]
    say("$ pricingctl routes apply (under load)")
    start = clock.now()
    done = subprocess.Popen(
        cmd, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert done.stdout is not None
    output = []
    for line in done.stdout:
        output.append(line.rstrip("\n"))
        say(f"  {output[-1]}")
    code = done.wait()
    end = clock.now()
    return {"exit": code, "start_s": round(start, 3), "end_s": round(end, 3), "output": output}


def _cpu_window(stack: Stack, gen: LoadgenProcess) -> Snapshot:
    return Snapshot.take({"loadgen": gen.pid, **{n: p.pid for n, p in stack.procs.items()}})


def _neighbours_pct(before: Snapshot, after: Snapshot, seconds: float) -> float:
    return round(usage(before, after, seconds)[OTHER].cpu_pct, 1)


@dataclass(frozen=True)
class Outcome:
    """What the driver saw: the clients' samples, the windows, the diagnosis, the move."""

    samples: Samples
    plan: Plan
    before: tuple[float, float]
    after: tuple[float, float]
    diagnosis: dict[str, Any]
    suggest: dict[str, Any]
    move: dict[str, Any] | None
    neighbours_pct: dict[str, float]
    cpu_labels: set[str]
    calibration: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


def _fix(
    stack: Stack, config: RouteConfig, clock: Clock, suggested: dict[str, Any], say: Say
) -> dict[str, Any] | None:
    """Show what `routes suggest` proposed, and apply its moves live; None: no move."""
    done = suggested.get("done")
    if done is None or done.returncode not in (0, 1):
        detail = "" if done is None else f" (exit {done.returncode}): {done.stderr.strip()}"
        raise BenchError(f"routes suggest did not finish{detail}")
    say("$ pricingctl routes suggest --from-metrics ... (the pools' /metrics, before window)")
    shown = ("route ", "+", "-", "@")
    diff = [x for x in done.stdout.splitlines() if x.startswith(shown) or "(move)" in x]
    for line in diff:
        say(f"  {line}")
    proposed = moves(done.stdout)
    suggested["moves"] = proposed
    if not proposed:
        say("  routes suggest proposed no move")
        return None
    say("  (applied: the moves; a change of a pool's size needs a restart)")
    return _apply(stack, moved_config(config, proposed, stack.run_dir.parent), clock, say)


@contextmanager
def replayed(
    config: RouteConfig, scenario: Scenario, run_dir: Path, say: Say, *, with_jaeger: bool
) -> Iterator[tuple[Outcome, Stack]]:
    """Run the replay; the driver's view of it (`report` turns it into figures) and its
    stack, which runs (the load stopped) until the block ends. Without Jaeger the
    traces are read from the stack's span file."""
    before_cfg = before_config(config, scenario, run_dir)
    with running_stack(
        before_cfg, Layout.SPLIT, run_dir / "stack", tracing="full", with_jaeger=with_jaeger
    ) as stack:
        set_upstreams_fixed(stack, scenario.upstream_ms)
        calibration = calibrate(stack, scenario)
        for line in calibration_lines(calibration):
            say(line)
        rates = {kind: c["rate_rps"] for kind, c in calibration.items()}
        plan = _plan(stack, scenario, rates)
        gen = LoadgenProcess(plan, run_dir)
        try:
            outcome = _drive(stack, before_cfg, scenario, gen, plan, say)
        finally:
            gen.stop()
        yield replace(outcome, calibration=calibration), stack


def hold(stack: Stack, say: Say) -> None:
    """Keep the replay's stack up (its Jaeger holds the traces) until Ctrl-C or SIGTERM,
    or until one of its processes exits."""
    if stack.jaeger_url is not None and stack.jaeger_ui is not None:
        where = f"Jaeger's UI {stack.jaeger_url}"
    elif stack.jaeger_url is not None:
        where = f"Jaeger's API {stack.jaeger_url}"
    else:
        where = f"spans in {stack.span_file}"
    say(
        f"--keep: the replay's stack stays up ({where}; pricingservice {stack.url}); "
        f"Ctrl-C (or `kill {os.getpid()}`) stops it"
    )
    try:
        while not (dead := stack.dead()):
            time.sleep(_POLL_S * 5)
        say(f"{', '.join(dead)} exited; stopping the stack")
    except KeyboardInterrupt:
        say("stopping the replay's stack")


def _drive(
    stack: Stack,
    config: RouteConfig,
    scenario: Scenario,
    gen: LoadgenProcess,
    plan: Plan,
    say: Say,
) -> Outcome:
    gen.wait_ready()
    clock = Clock(time.monotonic() + _START_MARGIN_S, stack, gen)
    gen.start(clock.start_at)
    before = (scenario.warmup_s, scenario.warmup_s + scenario.before_s)
    say(f"before: {scenario.polls.clients} clients polling, {before[1] - before[0]:.0f} s measured")
    clock.wait_until(before[0])
    suggested: dict[str, Any] = {}
    settings = _suggest_settings(scenario, plan.rates_rps)
    thread = _run_suggest(stack, config, settings, _suggest_window_s(scenario), suggested)
    cpu_before = _cpu_window(stack, gen)
    clock.wait_until(before[1])
    neighbours = {"before": _neighbours_pct(cpu_before, _cpu_window(stack, gen), scenario.before_s)}
    clock.wait_until(before[1] + FLUSH_S)
    diagnosis = _diagnose(stack, clock, scenario, before)
    for line in diagnosis_lines(diagnosis, scenario.cap_ms):
        say(line)
    thread.join(timeout=_suggest_window_s(scenario) + 90)
    move = _fix(stack, config, clock, suggested, say)
    start = (move["end_s"] if move else clock.now()) + scenario.settle_s
    after = (start, start + scenario.after_s)
    if after[1] > plan.duration_s:
        raise BenchError(f"the move took longer than {MOVE_MAX_S:.0f} s")
    say(f"after: the same clients, {scenario.after_s:.0f} s measured")
    clock.wait_until(after[0])
    cpu_after = _cpu_window(stack, gen)
    clock.wait_until(after[1])
    neighbours["after"] = _neighbours_pct(cpu_after, _cpu_window(stack, gen), scenario.after_s)
    gen.end()
    doc = gen.result(timeout_s=plan.timeout_s + 30)
    samples = Samples.from_json(doc["samples"])
    suggested.pop("done", None)
    return Outcome(
        samples, plan, before, after, diagnosis, suggested, move, neighbours,
        _cpu_labels(stack, scenario),
    )  # fmt: skip


def report(outcome: Outcome, scenario: Scenario) -> dict[str, Any]:
    """The results document: before and after, the diagnosis, the move, the targets."""
    cap_s = scenario.cap_ms / 1000
    items = sent(plan_schedule(outcome.plan), outcome.samples)
    kinds = scenario.offer_kinds

    def side(window: tuple[float, float]) -> dict[str, Any]:
        return {
            "window_s": [round(window[0], 3), round(window[1], 3)],
            "offers": window_stats(outcome.samples, kinds, window, cap_s),
            "flicker": flicker(items, kinds, window, cap_s),
        }

    move = outcome.move
    during = failed_during(items, (move["start_s"], move["end_s"])) if move else None
    doc: dict[str, Any] = {
        "scenario": scenario.to_json(),
        "calibration": dict(outcome.calibration),
        "before": side(outcome.before),
        "diagnosis": outcome.diagnosis,
        "suggest": {"moves": outcome.suggest.get("moves", {})},
        "move": None if move is None else {**move, "during": during},
        "after": side(outcome.after),
        "other_processes_cpu_pct": outcome.neighbours_pct,
        "timeline": timeline(items, kinds, cap_s),
    }
    doc["targets"] = targets(doc, scenario, outcome.cpu_labels)
    doc["fixed"] = all(t["met"] for t in doc["targets"] if t["decides"])
    return doc


def targets(doc: Mapping[str, Any], scenario: Scenario, cpu_labels: set[str]) -> list[dict]:
    """Each target of the scenario: its figure, and whether it was met. Those that
    `decide` say whether the fix worked (the exit status); the others whether the
    incident was reproduced and diagnosed."""
    before, after = doc["before"]["offers"], doc["after"]["offers"]
    move = doc["move"]
    drop = before["p999_ms"] / after["p999_ms"] if after["p999_ms"] else None
    failed = None if move is None else move["during"]["failed"]
    b_ok, a_ok = before["within_deadline"], after["within_deadline"]
    rows = [
        ("before: within the cap at most", b_ok, scenario.before_within_cap_max,
         b_ok <= scenario.before_within_cap_max, False),
        ("before: p999 above the cap (ms)", before["p999_ms"], scenario.cap_ms,
         before["p999_ms"] > scenario.cap_ms, False),
        ("before: flickers seen", doc["before"]["flicker"]["flickers"], "> 0",
         doc["before"]["flicker"]["flickers"] > 0, False),
        ("the culprit the traces name is a CPU-heavy route", doc["diagnosis"]["culprit"],
         sorted(cpu_labels), doc["diagnosis"]["culprit"] in cpu_labels, False),
        ("a move proposed and applied", sorted(doc["suggest"]["moves"]), "exit 0",
         move is not None and move["exit"] == 0, True),
        ("requests failed during the move", failed, 0, failed == 0, True),
        ("after: within the cap at least", a_ok, scenario.after_within_cap_min,
         a_ok >= scenario.after_within_cap_min, True),
        ("p999 before / after", None if drop is None else round(drop, 2), scenario.p999_drop_min,
         drop is not None and drop >= scenario.p999_drop_min, True),
        ("after: flickers seen", doc["after"]["flicker"]["flickers"], 0,
         doc["after"]["flicker"]["flickers"] == 0, True),
    ]  # fmt: skip
    return [
        {"target": name, "value": value, "wanted": wanted, "met": bool(met), "decides": decides}
        for name, value, wanted, met, decides in rows
    ]


def write_results(doc: Mapping[str, Any], out: Path) -> list[Path]:
    """incident.json and the plot (without matplotlib, the JSON only)."""
    from bench.plots import incident_timeline
    from bench.report import write_json

    written = [write_json(out / "incident.json", doc)]
    windows = {"before": doc["before"]["window_s"], "after": doc["after"]["window_s"]}
    if doc["move"] is not None:
        windows["move"] = [doc["move"]["start_s"], doc["move"]["end_s"]]
    plot = incident_timeline(
        doc["timeline"],
        windows,
        out / "incident.png",
        cap_ms=doc["scenario"]["cap_ms"],
        title="Offers within the cap and their p99, before and after the move",
    )
    return written + ([plot] if plot is not None else [])


def summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """The report's end: before/after, the move, each target, the verdict."""
    lines = ["", *comparison_lines(doc["before"], doc["after"])]
    move = doc["move"]
    if move is not None:
        during = move["during"]
        lines.append(
            f"the move took {move['end_s'] - move['start_s']:.1f} s under load: "
            f"{during['failed']} of {during['requests']} requests failed meanwhile"
        )
    neighbours = doc["other_processes_cpu_pct"]
    lines.append(
        "other processes on this machine: "
        + ", ".join(f"{k} {v:.0f} % of a core" for k, v in neighbours.items())
    )
    lines.append("")
    for t in doc["targets"]:
        mark = "met" if t["met"] else "MISSED"
        lines.append(f"  {mark:7}{t['target']}: {t['value']} (wanted {t['wanted']})")
    lines.append("")
    lines.append("the fix worked" if doc["fixed"] else "the fix did not work (see MISSED above)")
    return lines
