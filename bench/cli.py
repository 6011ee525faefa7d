"""`pricingctl bench`: flags, defaults, and writing the results.

    pricingctl bench [--quick] [--duration S] [--repeats N] [--workers N] [--rates cpu=R,offers=R]
    pricingctl bench envoy-hop [--quick] ...
    pricingctl bench io-capacity [--quick] ...
    pricingctl bench tracing-overhead [--quick] ...

Exit codes: 0 measured (targets met or not: they are reported, not enforced),
1 the benchmark could not run, 2 bad flags, 130 interrupted (143 on SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from bench.progress import Progress
from bench.run import STACK_START_EST_S, BenchError, LoadSettings, planned_seconds
from bench.traffic import GROUPS
from routing.errors import RouteConfigError
from routing.load import load_routes
from routing.model import RouteConfig

DEFAULT_OUT = Path("bench-out")
DEFAULT_RUN_DIR = Path(".run/bench")
# Main comparison: N = 3 (2 cpu + 1 io vs 3 shared). Rates, from CPU per request
# measured on the benchmark VM when it was quiet: a rideshare quote ~26 ms in-process,
# ~37-42 ms in the pool (request parsing, validation, JSON); an offer ~1.6-2 ms in the
# io pool, ~0.7 ms in Envoy, ~0.4 ms in the simulator. 30 quotes/s keeps the two cpu
# workers ~60 % busy (busy, under 85 %) and, with 100 offers/s, the whole 2-core
# machine ~80 % busy: the shared layout must absorb the same work in the same 3
# processes, so it runs hot but not over capacity.
DEFAULT_RATES = {"cpu": 30.0, "offers": 100.0}
# Before a run, the machine's CPU use is sampled this long; above the threshold the
# run still happens, with a warning (the neighbours show in every run's CPU table).
PREFLIGHT_S = 3.0
BUSY_WARNING_PCT = 30.0
DEFAULT_WORKERS = 3
DEFAULT_UPSTREAM_MS = 100.0


@dataclass(frozen=True)
class Defaults:
    duration_s: float
    warmup_s: float
    repeats: int


FULL = Defaults(duration_s=45.0, warmup_s=10.0, repeats=3)
QUICK = Defaults(duration_s=15.0, warmup_s=4.0, repeats=1)
HOP_FULL, HOP_QUICK = Defaults(30.0, 5.0, 1), Defaults(10.0, 3.0, 1)
CAPACITY_FULL, CAPACITY_QUICK = Defaults(15.0, 3.0, 1), Defaults(6.0, 2.0, 1)


class OneLineParser(argparse.ArgumentParser):
    """Bad flags give one line (no usage dump) and exit 2; unknown flags included."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras


# --- value checks (argparse `type=`: a bad value becomes one clear line) --------------


def _number(text: str, *, low: float, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < low:
        raise argparse.ArgumentTypeError(f"{what}: must be at least {low:g}, got {text}")
    return value


def _seconds(low: float) -> Callable[[str], float]:
    return lambda text: _number(text, low=low, what="seconds")


def _count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


def _positive(text: str) -> float:
    value = _number(text, low=0.0, what="value")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def parse_rates(text: str) -> dict[str, float]:
    """`cpu=35,offers=100` (either or both; requests per second)."""
    rates: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in GROUPS:
            raise argparse.ArgumentTypeError(
                f"expected KEY=RATE[,KEY=RATE] with KEY in {', '.join(GROUPS)}, got {part!r}"
            )
        if key in rates:
            raise argparse.ArgumentTypeError(f"{key} given twice")
        rate = _number(value, low=0.0, what=key)
        if key == "offers" and rate <= 0:
            raise argparse.ArgumentTypeError("offers must be greater than 0")
        if rate > 10_000:
            raise argparse.ArgumentTypeError(f"{key}: at most 10000/s, got {value}")
        rates[key] = rate
    return rates


# --- the parser ---------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser, defaults: Defaults) -> None:
    p.add_argument(
        "--quick",
        action="store_true",
        help="one short run: a smoke test (CI), not a measurement to quote",
    )
    p.add_argument(
        "--duration",
        type=_seconds(1.0),
        default=None,
        metavar="S",
        help=f"measured seconds per run (default {defaults.duration_s:g})",
    )
    p.add_argument(
        "--warmup",
        type=_seconds(0.0),
        default=None,
        metavar="S",
        help=f"discarded seconds before each measurement (default {defaults.warmup_s:g})",
    )
    p.add_argument(
        "--upstream-ms",
        type=lambda text: _number(text, low=0.0, what="milliseconds"),
        default=DEFAULT_UPSTREAM_MS,
        metavar="MS",
        help="every upstream answers after exactly this long (default 100)",
    )
    p.add_argument("--seed", type=_count(0, 2**31), default=1, help="arrival schedule seed")
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"results directory (default {DEFAULT_OUT})"
    )
    p.add_argument(
        "--run-dir",
        type=Path,
        default=DEFAULT_RUN_DIR,
        help=f"logs, raw samples, derived configs (default {DEFAULT_RUN_DIR})",
    )
    p.add_argument("--config", type=Path, default=None, help="route config (default routes.toml)")


def _load_flags(p: argparse.ArgumentParser, defaults: Defaults) -> None:
    p.add_argument(
        "--repeats",
        type=_count(1, 100),
        default=None,
        help=f"runs per layout, interleaved (default {defaults.repeats})",
    )
    p.add_argument(
        "--workers",
        type=_count(2, 64),
        default=DEFAULT_WORKERS,
        help="processes in total: shared N vs cpu N-1 + io 1 (default 3)",
    )
    p.add_argument(
        "--rates",
        type=parse_rates,
        default={},
        metavar="cpu=R,offers=R",
        help="requests/s: cpu = rideshare quotes, offers = bike + scooter "
        f"(default cpu={DEFAULT_RATES['cpu']:g},offers={DEFAULT_RATES['offers']:g})",
    )


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="measure shared vs split pools side by side (results.json + plots)",
        description="Without PART: start the stack in the shared and the split layout, drive "
        "both with the same open-loop load, and write results.json and PNG plots to --out. "
        "With PART: measure that part on its own.",
    )
    # The parent parser's class is fixed by add_parser(); switch this one to the
    # one-line-error subclass (it adds no state, only overrides two methods).
    bench.__class__ = OneLineParser
    _common(bench, FULL)
    _load_flags(bench, FULL)
    bench.add_argument(
        "--tracing",
        action="store_true",
        help="start the pools with PRICING_TRACING=1 and read spans if they appear",
    )
    bench.add_argument(
        "--replot",
        action="store_true",
        help="measure nothing: rebuild results.json, results.md and the plots in --out "
        "from the run in --run-dir that wrote them",
    )
    bench.set_defaults(handler=run_compare)
    sub = bench.add_subparsers(dest="bench_command", metavar="PART", parser_class=OneLineParser)

    hop = sub.add_parser("envoy-hop", help="offers via Envoy vs straight to the io pool")
    _common(hop, HOP_FULL)
    hop.add_argument(
        "--rate", type=_positive, default=100.0, help="offers/s in total (default 100)"
    )
    hop.set_defaults(handler=run_envoy_hop_cmd)

    cap = sub.add_parser("io-capacity", help="highest offer rate one io worker sustains")
    _common(cap, CAPACITY_FULL)
    cap.add_argument("--start-rps", type=_positive, default=None, help="first step (default 100)")
    cap.add_argument("--step-rps", type=_positive, default=None, help="step size (default 100)")
    cap.add_argument("--max-rps", type=_positive, default=None, help="last step (default 1500)")
    cap.add_argument(
        "--p99-limit-ms", type=_positive, default=200.0, help="a step passes at p99 <= this"
    )
    cap.add_argument(
        "--direct", action="store_true", help="send straight to the io pool, not through Envoy"
    )
    cap.set_defaults(handler=run_io_capacity_cmd)

    tr = sub.add_parser("tracing-overhead", help="the same load with PRICING_TRACING=0 and 1")
    _common(tr, FULL)
    _load_flags(tr, FULL)
    tr.set_defaults(handler=run_tracing_overhead_cmd)


# --- shared plumbing -------------------------------------------------------------------------


def _defaults(args: argparse.Namespace, full: Defaults, quick: Defaults) -> Defaults:
    base = quick if args.quick else full
    return Defaults(
        duration_s=args.duration if args.duration is not None else base.duration_s,
        warmup_s=args.warmup if args.warmup is not None else base.warmup_s,
        repeats=getattr(args, "repeats", None) or base.repeats,
    )


def _settings(args: argparse.Namespace, d: Defaults, *, tracing: bool = False) -> LoadSettings:
    rates = {**DEFAULT_RATES, **getattr(args, "rates", {})}
    return LoadSettings(
        group_rates_rps=rates,
        duration_s=d.duration_s,
        warmup_s=d.warmup_s,
        seed=args.seed,
        upstream_ms=args.upstream_ms,
        tracing=tracing,
    )


def _config(args: argparse.Namespace) -> RouteConfig:
    return load_routes(args.config)


def _offer_deadline_s(config: RouteConfig) -> float:
    return _route_timeout_s(config, "offers.bike")


def _route_timeout_s(config: RouteConfig, endpoint: str) -> float:
    route = config.route_for_endpoint(endpoint)
    if route is None:
        raise BenchError(f"the route config has no {endpoint} route")
    return route.timeout_ms / 1000.0


def _with_route_timeouts(settings: LoadSettings, config: RouteConfig) -> LoadSettings:
    return replace(settings, cpu_timeout_s=_route_timeout_s(config, "offers.rideshare"))


def _command() -> str:
    return shlex.join(["pricingctl", *sys.argv[1:]])


def _write_json(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return path


def preflight() -> dict[str, object]:
    """The machine before the benchmark: hardware, and how busy the neighbours are."""
    from bench import report
    from bench.cpu import machine_busy_pct

    machine = report.machine_info()
    busy = machine_busy_pct(PREFLIGHT_S)
    machine["busy_before_start_pct_of_one_core"] = round(busy, 1)
    if busy > BUSY_WARNING_PCT:
        print(
            f"pricingctl bench: warning: other processes use {busy:.0f} % of one core before "
            f"the benchmark starts; results will be noisier and capacities lower "
            f"(each run reports their share as 'other processes')",
            file=sys.stderr,
        )
    return machine


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a CI timeout, `kill`): unwinds like Ctrl-C, so every `finally` runs
    and every stack started so far is stopped by process group."""


def _on_sigterm(_signum: int, _frame: object) -> None:
    raise _Terminated


def _guarded(body: Callable[[], int], progress: Progress | None = None) -> int:
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return body()
    except BenchError as exc:
        first, *rest = str(exc).splitlines()
        if progress is not None:
            progress.finish()
        print(f"pricingctl bench: {first}", file=sys.stderr)
        if rest:
            print("\n".join(rest), file=sys.stderr)
        return 1
    except RouteConfigError as exc:
        print(f"pricingctl bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(
            "\npricingctl bench: interrupted; every process it started is stopped", file=sys.stderr
        )
        return 143 if isinstance(exc, _Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, previous)


# --- the commands ------------------------------------------------------------------------------


def run_compare(args: argparse.Namespace) -> int:
    from bench.run import compare, run_order

    if args.replot:
        return _guarded(lambda: _replot(args))
    d = _defaults(args, FULL, QUICK)
    settings = _settings(args, d, tracing=args.tracing)
    runs = len(run_order(d.repeats))
    progress = Progress(planned_seconds(settings, runs))

    def body() -> int:
        machine = preflight()
        config = _config(args)
        timed = _with_route_timeouts(settings, config)
        results = compare(
            config,
            timed,
            workers=args.workers,
            repeats=d.repeats,
            run_dir=args.run_dir,
            progress=progress,
        )
        progress.finish()
        return _write_comparison(
            results,
            out=args.out,
            workers=args.workers,
            repeats=d.repeats,
            deadline_s=_offer_deadline_s(config),
            command=_command(),
            machine=machine,
        )

    return _guarded(body, progress)


def _replot(args: argparse.Namespace) -> int:
    from bench.replot import runs_from_results

    path = args.out / "results.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BenchError(f"--replot: {path} does not exist") from None
    results = runs_from_results(doc, args.run_dir)
    s = doc["settings"]
    return _write_comparison(
        results,
        out=args.out,
        workers=int(s["workers"]),
        repeats=int(s["repeats"]),
        deadline_s=float(s["deadline_ms"]) / 1000.0,
        command=str(doc["command"]),
        machine=doc["machine"],
        replotted_by=_command(),
    )


def _write_comparison(
    results: Sequence[Any],
    *,
    out: Path,
    workers: int,
    repeats: int,
    deadline_s: float,
    command: str,
    machine: Mapping[str, object],
    replotted_by: str | None = None,
) -> int:
    """results.json, results.md and the three PNGs for a finished comparison."""
    from bench import plots, report

    doc = report.comparison_json(
        results,
        workers=workers,
        repeats=repeats,
        deadline_s=deadline_s,
        command=command,
        machine=machine,
    )
    if replotted_by is not None:
        doc["replotted_by"] = replotted_by
    settings = results[0].settings
    _write_json(out / "results.json", doc)
    (out / "results.md").write_text(report.summary_text(doc) + "\n", encoding="utf-8")
    title_runs = f"{repeats} repeat(s) x {settings.duration_s:g} s, pooled"
    plots.latency_cdf(
        {lay: report.offer_latencies_ms(results, lay, deadline_s) for lay in doc["layouts"]},
        out / "offers_latency_cdf.png",
        title=f"Offers latency, {workers} processes: shared pool vs split pools ({title_runs}); "
        f"upstreams fixed {settings.upstream_ms:g} ms",
        floor_p99_ms=doc["upstream_floor_ms"],
        deadline_ms=deadline_s * 1000,
    )
    breakdowns = {lay: v["time_breakdown"] for lay, v in doc["layouts"].items()}
    source = next(iter(breakdowns.values()))["source"]
    how = (
        "network vs scheduling delay vs handling (from traces)"
        if source == "tracing"
        else "no tracing: the upstream floor vs everything else"
    )
    plots.time_breakdown(
        breakdowns, out / "offers_time_breakdown.png", title=f"Where offer time went - {how}"
    )
    plots.cpu_by_component(
        {lay: v["cpu_use_pct"] for lay, v in doc["layouts"].items()},
        out / "cpu_by_component.png",
        title=f"CPU by component, mean over repeats ({workers} processes in each layout)",
    )
    print(report.summary_text(doc))
    print(f"\nwrote {out / 'results.json'}, results.md and 3 PNGs in {out}")
    return 0


def run_envoy_hop_cmd(args: argparse.Namespace) -> int:
    from bench import plots
    from bench.envoy_hop import run_envoy_hop

    d = _defaults(args, HOP_FULL, HOP_QUICK)
    settings = _settings(args, d)
    progress = Progress(planned_seconds(settings, 1))

    def body() -> int:
        machine = preflight()
        config = _config(args)
        timed = _with_route_timeouts(settings, config)
        deadline_s = _offer_deadline_s(config)
        doc, latencies = run_envoy_hop(
            config,
            timed,
            rate_rps=args.rate,
            workers=DEFAULT_WORKERS,
            deadline_s=deadline_s,
            run_dir=args.run_dir,
            progress=progress,
        )
        progress.finish()
        doc = {"command": _command(), "machine": machine, **doc}
        out: Path = args.out
        _write_json(out / "envoy_hop.json", doc)
        plots.latency_cdf(
            latencies,
            out / "envoy_hop_cdf.png",
            title=f"Offers via Envoy vs straight to the io pool (no CPU load, "
            f"{args.rate:g} offers/s in total): hop p50 {doc['hop_ms']['p50']:.2f} ms",
            deadline_ms=None,
        )
        v, r = doc["via_envoy"], doc["direct"]
        print(
            f"via Envoy p50 {v['p50_ms']:.2f} ms p99 {v['p99_ms']:.2f} ms; "
            f"direct p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms; "
            f"hop p50 {doc['hop_ms']['p50']:.2f} ms p99 {doc['hop_ms']['p99']:.2f} ms "
            f"(target <= 2 ms at p50: {'met' if doc['target']['met'] else 'NOT met'})"
        )
        print(f"wrote {out / 'envoy_hop.json'} and envoy_hop_cdf.png")
        return 0

    return _guarded(body, progress)


def run_io_capacity_cmd(args: argparse.Namespace) -> int:
    from bench import plots
    from bench.io_capacity import run_io_capacity, step_rates

    d = _defaults(args, CAPACITY_FULL, CAPACITY_QUICK)
    start = args.start_rps or 100.0
    step = args.step_rps or (200.0 if args.quick else 100.0)
    top = args.max_rps or (500.0 if args.quick else 1500.0)
    if top < start:
        print(
            "pricingctl bench io-capacity: error: --max-rps is below --start-rps", file=sys.stderr
        )
        return 2
    settings = _settings(args, d)
    steps = len(step_rates(start, step, top))
    progress = Progress(planned_seconds(settings, steps) - (steps - 1) * STACK_START_EST_S)

    def body() -> int:
        machine = preflight()
        config = _config(args)
        timed = _with_route_timeouts(settings, config)
        doc = run_io_capacity(
            config,
            timed,
            start_rps=start,
            step_rps=step,
            max_rps=top,
            p99_limit_ms=args.p99_limit_ms,
            direct=args.direct,
            deadline_s=_offer_deadline_s(config),
            run_dir=args.run_dir,
            progress=progress,
        )
        progress.finish()
        doc = {"command": _command(), "machine": machine, **doc}
        out: Path = args.out
        _write_json(out / "io_capacity.json", doc)
        if doc["steps"]:
            plots.rate_steps(
                doc["steps"],
                out / "io_capacity.png",
                title=f"One io worker, upstreams fixed {settings.upstream_ms:g} ms "
                f"({doc['settings']['path']}): capacity {doc['capacity_rps']:g} offers/s "
                f"at p99 <= {args.p99_limit_ms:g} ms",
                p99_limit_ms=args.p99_limit_ms,
            )
        for s in doc["steps"]:
            io_pct = s["cpu_use_pct"].get("pool-io", 0.0)
            print(
                f"{s['rate_rps']:6.0f}/s offered: served {s['rps']:6.1f}/s, "
                f"p50 {s['p50_ms']:7.1f} ms, p99 {s['p99_ms']:7.1f} ms, io CPU {io_pct:5.1f} % "
                f"({s['io_worker_cpu_ms_per_offer']} ms/offer) {'pass' if s['passed'] else 'FAIL'}"
            )
        print(
            f"capacity: {doc['capacity_rps']:g} offers/s "
            f"(target >= 700: {'met' if doc['target']['met'] else 'NOT met'}); "
            f"wrote {out / 'io_capacity.json'}"
        )
        return 0

    return _guarded(body, progress)


def run_tracing_overhead_cmd(args: argparse.Namespace) -> int:
    from bench.tracing_overhead import run_order, run_tracing_overhead

    d = _defaults(args, FULL, QUICK)
    settings = _settings(args, d)
    progress = Progress(planned_seconds(settings, len(run_order(d.repeats))))

    def body() -> int:
        machine = preflight()
        config = _config(args)
        timed = _with_route_timeouts(settings, config)
        doc = run_tracing_overhead(
            config,
            timed,
            workers=args.workers,
            repeats=d.repeats,
            deadline_s=_offer_deadline_s(config),
            run_dir=args.run_dir,
            progress=progress,
        )
        progress.finish()
        doc = {"command": _command(), "machine": machine, **doc}
        out: Path = args.out
        _write_json(out / "tracing_overhead.json", doc)
        for mode, m in doc["modes"].items():
            o = m["offers"]
            print(
                f"tracing {mode}: offers p50 {o['p50_ms']:.1f} ms p99 {o['p99_ms']:.1f} ms, "
                f"io CPU {m['io_cpu_ms_per_offer']} ms/offer"
            )
        overhead = doc["overhead"]
        print(
            "gevent instrumentation (full - spans): "
            f"{overhead['instrumentation_io_cpu_ms_per_offer']} ms CPU per offer, "
            f"{overhead['instrumentation_us_per_upstream_call']} us per upstream call, "
            f"{overhead['instrumentation_share_of_offer_cpu']} of an offer's CPU"
        )
        if not doc["tracing_active"]:
            print(f"note: {doc['note']}")
        print(f"wrote {out / 'tracing_overhead.json'}")
        return 0

    return _guarded(body, progress)
