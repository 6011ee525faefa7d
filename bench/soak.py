"""The soak: the benchmark's mixed load for N minutes on the split stack, a worker
SIGKILLed every few minutes (io and cpu in turn) and one `routes apply` half-way (a
route timeout changed: every pool reloaded, Envoy switched). Sampled every few
seconds: RSS and open descriptors per process. Reported: their growth after the
warm-up, the failed requests (apart from the killed worker's in-flight POSTs), and
the TCP connections left in CLOSE_WAIT once the load has stopped.

The long mode (`long=True`) looks for a slow leak instead: no kill and no apply, so
every process (each pool's workers included) lives the whole run, with tracing on at
the route config's sampling or the one given; each pool's Python allocator blocks
(`pricing_python_allocated_blocks`) sampled with the RSS. Reported per process: the
RSS growth over the run's second half as the slope of a least-squares line, per hour and
per million requests (bounded caches and the allocator fill for longer than any fixed
warm-up; the slope while they fill is reported beside it).
"""

from __future__ import annotations

import math
import os
import random
import signal
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import heapwatch as heapwatch_of
from bench.loadgen import Plan, Samples
from bench.progress import Progress
from bench.run import (
    BenchError,
    LoadgenProcess,
    LoadSettings,
    running_stack,
    set_upstreams_fixed,
    with_sample_percent,
)
from bench.traffic import CPU_KINDS, kind_rates, targets_for
from routing.model import Layout, RouteConfig
from routing.write import write_routes
from stack import ops
from stack.launch import Stack
from stack.procfs import children, open_fds, rss_kib, tcp_sockets
from toolkit.fetch import fetch
from tracing.metric_families import ALLOCATED_BLOCKS
from tracing.readback.usage import parse_text

# The route changed by the one `routes apply`, and its new timeout.
APPLY_ENDPOINT, APPLY_TIMEOUT_MS = "offers.scooter", 600
RSS_GROWTH_TARGET = 0.05
# The long mode's target: RSS growth after the warm-up, per hour, of every process.
RSS_GROWTH_PER_HOUR_TARGET = 0.01


@dataclass(frozen=True)
class Event:
    at_s: float
    what: str


def _processes(stack: Stack) -> dict[int, str]:
    """pid -> label (`envoy`, `pool-io master`, `pool-io worker`, ...)."""
    out: dict[int, str] = {}
    for name, proc in stack.procs.items():
        if name.startswith("pool-"):
            out[proc.pid] = f"{name} master"
            for worker in children(proc.pid):
                out[worker] = f"{name} worker"
        else:
            out[proc.pid] = name
    return out


def _apply_change(config: RouteConfig) -> RouteConfig:
    routes = tuple(
        replace(r, timeout_ms=APPLY_TIMEOUT_MS) if r.endpoint == APPLY_ENDPOINT else r
        for r in config.routes
    )
    return replace(config, routes=routes)


def _sample(stack: Stack, series: dict[int, dict[str, Any]], at_s: float) -> None:
    """RSS and open descriptors of every process of the stack, now."""
    for pid, label in _processes(stack).items():
        row = series.setdefault(pid, {"label": label, "t": [], "rss": [], "fds": []})
        row["t"].append(at_s)
        row["rss"].append(rss_kib(pid))
        row["fds"].append(open_fds(pid))


def _sample_blocks(stack: Stack, blocks: dict[str, dict[str, list[float]]], at_s: float) -> None:
    """Each pool's allocator blocks (its live workers' sum), from its own /metrics."""
    for pool in stack.config.pools_for(stack.layout):
        url = f"{stack.pool_url(pool.name)}{stack.config.meta.metrics}"
        try:
            samples = parse_text(fetch(url, timeout_s=5.0).expect_ok().text)
        except Exception:  # a busy pool that missed one sample: the next one counts
            continue
        value = sum(
            v for per in samples.values() for (n, _), v in per.items() if n == ALLOCATED_BLOCKS
        )
        row = blocks.setdefault(pool.name, {"t": [], "blocks": []})
        row["t"].append(at_s)
        row["blocks"].append(value)


KILL_POOLS = ("io", "cpu")


def _kill_a_worker(stack: Stack, events: list[Event], rng: random.Random, at_s: float) -> None:
    """SIGKILL one worker, of the io and the cpu pool in turn."""
    pool = KILL_POOLS[len([e for e in events if "SIGKILL" in e.what]) % len(KILL_POOLS)]
    victims = children(stack.procs[f"pool-{pool}"].pid)
    if victims:
        victim = rng.choice(victims)
        os.kill(victim, signal.SIGKILL)
        events.append(Event(at_s, f"SIGKILL {pool} worker {victim}"))


def _apply(stack: Stack, prepared: RouteConfig, events: list[Event], start: float) -> None:
    """`routes apply` of the changed timeout, under the load."""
    began = time.monotonic()
    lines: list[str] = []
    try:
        ops.apply_routes(stack.running(), _apply_change(prepared), lines.append)
    except ops.OpsError as exc:
        raise BenchError(f"soak: routes apply failed: {exc}") from None
    events.append(
        Event(
            began - start,
            f"routes apply ({APPLY_ENDPOINT} timeout {APPLY_TIMEOUT_MS} ms, "
            f"{time.monotonic() - began:.0f} s, {len(lines)} steps)",
        )
    )


@dataclass
class _Soak:
    """What one soak collects while it runs. Mutable."""

    series: dict[int, dict[str, Any]]
    events: list[Event]
    blocks: dict[str, dict[str, list[float]]]


def _loop(
    stack: Stack,
    gen: LoadgenProcess,
    prepared: RouteConfig,
    *,
    long: bool,
    start: float,
    total_s: float,
    kill_every_s: float,
    sample_every_s: float,
    rng: random.Random,
    progress: Progress,
) -> _Soak:
    """Sample (and, unless `long`, kill and apply) until the load's end."""
    got = _Soak({}, [], {})
    next_sample, next_kill = start, start + kill_every_s
    applied = long
    while time.monotonic() < start + total_s:
        now = time.monotonic()
        if now >= next_sample:
            _sample(stack, got.series, round(now - start, 2))
            if long:
                _sample_blocks(stack, got.blocks, round(now - start, 2))
            next_sample += sample_every_s
        if not long and now >= next_kill:
            _kill_a_worker(stack, got.events, rng, now - start)
            next_kill += kill_every_s
        if not applied and now >= start + total_s / 2:
            applied = True
            _apply(stack, prepared, got.events, start)
        dead = stack.dead()
        if dead:
            raise BenchError(f"soak: {', '.join(dead)} exited (logs in {stack.run_dir})")
        if not gen.alive() and gen.popen.returncode != 0:
            raise gen.failure(f"exited with code {gen.popen.returncode}")
        progress.update()
        time.sleep(0.2)
    return got


def run_soak(
    config: RouteConfig,
    settings: LoadSettings,
    *,
    kill_every_s: float,
    sample_every_s: float,
    run_dir: Path,
    progress: Progress,
    long: bool = False,
    sample_percent: float | None = None,
    heapwatch: Path | None = None,
) -> dict[str, Any]:
    # The shipped pools (two workers each): a killed worker leaves its pool serving.
    prepared = write_routes(config, run_dir / "routes.toml")
    if long:  # tracing on, at the sampling asked for: what the leak must survive
        prepared = with_sample_percent(prepared, sample_percent, run_dir)
    total_s = settings.total_s
    watching = heapwatch_of.watching(heapwatch)  # every process started inherits it
    with watching, running_stack(prepared, Layout.SPLIT, run_dir / "stack", tracing=long) as stack:
        set_upstreams_fixed(stack, settings.upstream_ms)
        rates = kind_rates(settings.group_rates_rps)
        host, port = stack.url.removeprefix("http://").split(":")
        plan = Plan(
            targets=targets_for(stack.config, host, int(port), tuple(rates), settings.seed),
            rates_rps=rates,
            duration_s=total_s,
            seed=settings.seed,
            timeout_s=settings.timeout_s,
        )
        gen = LoadgenProcess(plan, run_dir / "loadgen")
        try:
            gen.wait_ready()
            start = time.monotonic() + 0.3
            gen.start(start)
            what = "no kills, tracing on" if long else "kills and an apply"
            progress.step(f"soak: {total_s / 60:.1f} min of mixed load ({what})", total_s)
            got = _loop(
                stack,
                gen,
                prepared,
                long=long,
                start=start,
                total_s=total_s,
                kill_every_s=kill_every_s,
                sample_every_s=sample_every_s,
                rng=random.Random(settings.seed),
                progress=progress,
            )
            doc = gen.result(timeout_s=settings.timeout_s + 60)
        finally:
            gen.stop()
        time.sleep(2.0)  # the last connections close
        pids = [pid for pid in _processes(stack)]
        close_wait = sum(1 for *_, state in tcp_sockets(pids) if state == "CLOSE_WAIT")
    samples = Samples.from_json(doc["samples"])
    out: dict[str, Any] = {
        "settings": {
            **settings.to_json(workers=sum(p.workers for p in config.pools), repeats=1),
            "kill_every_s": None if long else kill_every_s,
            "sample_every_s": sample_every_s,
            "mode": "long" if long else "kills",
            "sample_percent": prepared.tracing.sample_percent if long else None,
        },
        "events": [{"at_s": round(e.at_s, 1), "what": e.what} for e in got.events],
        "failures": failures(samples, got.events, timeout_s=settings.cpu_timeout_s),
        "close_wait": close_wait,
        "processes": summarize(got.series, warmup_s=settings.warmup_s),
        "series": {str(pid): row for pid, row in got.series.items()},
    }
    if long:
        out.update(_long_figures(got, settings, requests=len(samples), watched=heapwatch))
    return out


def _long_figures(
    got: _Soak, settings: LoadSettings, *, requests: int, watched: Path | None
) -> dict[str, Any]:
    """The long mode's growth figures, its blocks' series and, if the heap was watched,
    the allocation sites that grew over the same second half."""
    total_s = settings.total_s
    fitted = growth(
        got.series, got.blocks, warmup_s=settings.warmup_s, requests=requests, total_s=total_s
    )
    out: dict[str, Any] = {"growth": fitted, "blocks": got.blocks}
    if watched is not None:
        out["heapwatch"] = heapwatch_of.report(
            watched, from_s=fitted["from_s"], requests_per_s=requests / total_s
        )
    return out


def _slope(t: list[float], y: list[float]) -> float:
    """Least-squares slope of y over t (0 with fewer than three points)."""
    if len(t) < 3 or len(set(t)) < 2:
        return 0.0
    return statistics.linear_regression(t, y).slope


def growth(
    series: Mapping[int, Mapping[str, Any]],
    blocks: Mapping[str, Mapping[str, list[float]]],
    *,
    warmup_s: float,
    requests: int,
    total_s: float,
) -> dict[str, Any]:
    """The long soak's figures: per process, its RSS over the run's second half as a
    least-squares line, per hour (fraction of the line's value where it starts) and per
    million requests (KiB); per pool, its allocator blocks likewise. Bounded caches and
    the allocator's arenas fill for many minutes at the soak's rates, longer than any
    fixed warm-up: the figure is the second half's slope, and the slope from the warm-up's
    end to the half (`warming`) is kept beside it to show the levelling off."""
    per_s = requests / total_s if total_s else 0.0
    half_s = max(warmup_s, total_s / 2)

    def fit(t: list[float], y: list[float], lo: float, hi: float) -> dict[str, Any] | None:
        kept = [(a, b) for a, b in zip(t, y, strict=True) if lo <= a <= hi and b > 0]
        if len(kept) < 3:
            return None
        ts, ys = [a for a, _ in kept], [b for _, b in kept]
        slope = _slope(ts, ys)
        base = statistics.fmean(ys) - slope * (statistics.fmean(ts) - ts[0])
        return {
            "from_s": ts[0],
            "span_s": round(ts[-1] - ts[0], 1),
            "first": ys[0],
            "last": ys[-1],
            "per_hour": round(slope * 3600 / base, 5) if base else None,
            "per_million_requests": round(slope / per_s * 1e6, 1) if per_s else None,
        }

    def both(t: list[float], y: list[float]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        return fit(t, y, half_s, math.inf), fit(t, y, warmup_s, half_s)

    procs = []
    for pid, row in series.items():
        rss, warming = both(row["t"], row["rss"])
        if rss is not None:
            procs.append({"pid": pid, "label": row["label"], "rss_kib": rss, "warming": warming})
    pools = []
    for pool, row in blocks.items():
        fitted, warming = both(row["t"], row["blocks"])
        if fitted is not None:
            pools.append({"pool": pool, "allocated_blocks": fitted, "warming": warming})
    return {
        "from_s": half_s,
        "processes": sorted(procs, key=lambda p: (p["label"], p["pid"])),
        "pools": pools,
    }


def failures(samples: Samples, events: list[Event], *, timeout_s: float) -> dict[str, Any]:
    """Non-200 answers, split into the killed workers' in-flight POSTs (sent within a
    route timeout before a kill: never retried, they may have been priced) and the rest."""
    kills = [e.at_s for e in events if "SIGKILL" in e.what]
    excused, other = 0, []
    for kind, sent, status in zip(samples.kind, samples.scheduled_s, samples.status, strict=True):
        if status == 200:
            continue
        name = samples.kinds[kind]
        if name in CPU_KINDS and any(k - timeout_s <= sent <= k + 1.0 for k in kills):
            excused += 1
        else:
            other.append({"kind": name, "sent_s": round(sent, 2), "status": status})
    return {"requests": len(samples), "killed_in_flight": excused, "other": other}


def summarize(series: Mapping[int, Mapping[str, Any]], *, warmup_s: float) -> list[dict[str, Any]]:
    """Per process: RSS and descriptors from its first sample after its warm-up (the
    run's, or its own start plus the warm-up for a replaced worker) to its last."""
    out = []
    for pid, row in series.items():
        t0 = max(warmup_s, row["t"][0] + warmup_s)
        kept = [i for i, t in enumerate(row["t"]) if t >= t0 and row["rss"][i] > 0]
        if len(kept) < 2:
            continue
        rss = [row["rss"][i] for i in kept]
        fds = [row["fds"][i] for i in kept]
        out.append(
            {
                "pid": pid,
                "label": row["label"],
                "span_s": round(row["t"][kept[-1]] - row["t"][kept[0]], 1),
                "rss_first_kib": rss[0],
                "rss_last_kib": rss[-1],
                "rss_growth": round(rss[-1] / rss[0] - 1.0, 4),
                "fds_first": fds[0],
                "fds_last": fds[-1],
                "fds_min": min(fds),
                "fds_max": max(fds),
            }
        )
    return sorted(out, key=lambda p: (p["label"], p["pid"]))


# The test's upstream: reported, but not a process of the service the target is about.
NOT_THE_SERVICE = ("simulator",)


def _per_hour(fit: Mapping[str, Any] | None) -> str:
    return "-" if fit is None or fit["per_hour"] is None else f"{fit['per_hour']:+.2%}/h"


def long_lines(growth: Mapping[str, Any]) -> list[str]:
    """The long soak's summary: each process's RSS growth per hour (over the run's second
    half, and while warming) and per million requests, and each pool's allocator blocks."""
    procs = growth["processes"]
    rates = [
        p["rss_kib"]["per_hour"]
        for p in procs
        if p["rss_kib"]["per_hour"] is not None and p["label"] not in NOT_THE_SERVICE
    ]
    worst = max(rates, default=0.0)
    met = "met" if worst < RSS_GROWTH_PER_HOUR_TARGET else "NOT met"
    lines = [
        f"RSS growth per hour from {growth['from_s']:.0f} s (the run's second half): worst "
        f"of the service {worst:+.2%} (target < 1 %/h: {met}); warming: from the warm-up's "
        "end to the half"
    ]
    for p in procs:
        fit = p["rss_kib"]
        lines.append(
            f"  {p['label']} {p['pid']}: RSS {fit['first'] / 1024:.1f} -> {fit['last'] / 1024:.1f}"
            f" MiB, {_per_hour(fit)}, {fit['per_million_requests']:+.0f} KiB per million"
            f" requests (warming {_per_hour(p['warming'])})"
        )
    for pool in growth["pools"]:
        fit = pool["allocated_blocks"]
        lines.append(
            f"  pool-{pool['pool']} allocator blocks: {fit['first']:.0f} -> {fit['last']:.0f}, "
            f"{_per_hour(fit)}, {fit['per_million_requests']:+.0f} per million requests"
            f" (warming {_per_hour(pool['warming'])})"
        )
    return lines


def write_soak(doc: dict[str, Any], out: Path) -> str:
    import json

    from bench.plots import soak_timeline

    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    marks = [(e["at_s"], e["what"]) for e in doc["events"]]
    if "growth" in doc:  # where the long mode's figures start
        marks.append((doc["growth"]["from_s"], "growth fitted from here"))
    soak_timeline(
        doc["series"],
        marks,
        out / "soak.png",
        title=f"soak: {doc['settings']['duration_s'] / 60:g} min of mixed load",
    )
    procs = doc["processes"]
    long_lived = [p for p in procs if "worker" not in p["label"]]
    worst = max(procs, key=lambda p: p["rss_growth"]) if procs else None
    if "growth" in doc:  # the long mode: the per-hour figures say it
        worst, long_lived = None, []
    fails = doc["failures"]
    lines = [
        f"soak: {fails['requests']} requests, {len(fails['other'])} failed "
        f"(+{fails['killed_in_flight']} killed workers' in-flight POSTs); "
        f"{sum('SIGKILL' in e['what'] for e in doc['events'])} workers SIGKILLed, "
        f"{sum('apply' in e['what'] for e in doc['events'])} routes apply; CLOSE_WAIT left: "
        + str(doc["close_wait"]),
    ]
    if worst is not None:
        met = "met" if worst["rss_growth"] < RSS_GROWTH_TARGET else "NOT met"
        lines.append(
            f"RSS growth after warm-up: worst {worst['rss_growth']:+.1%} ({worst['label']} "
            f"{worst['pid']} over {worst['span_s']:.0f} s; target < 5 %: {met})"
        )
    for p in long_lived:
        lines.append(
            f"  {p['label']}: RSS {p['rss_first_kib'] / 1024:.1f} -> {p['rss_last_kib'] / 1024:.1f}"
            f" MiB ({p['rss_growth']:+.1%}), fds {p['fds_first']} -> {p['fds_last']}"
            f" (min {p['fds_min']}, max {p['fds_max']})"
        )
    if "growth" in doc:
        lines += long_lines(doc["growth"])
    if "heapwatch" in doc:
        lines += ["allocation sites that grew over the second half (tracemalloc):"]
        lines += doc["heapwatch"]
    lines.append(f"results: {out / 'soak.json'}, {out / 'soak.png'}")
    return "\n".join(lines)
