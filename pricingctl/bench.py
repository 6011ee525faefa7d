"""`pricingctl bench`: flags and defaults; the parts themselves live in `bench`.

    pricingctl bench [--quick] [--duration S] [--repeats N] [--workers N] [--rates cpu=R,offers=R]
    pricingctl bench envoy-hop [--quick] ...
    pricingctl bench io-capacity [--quick] ...
    pricingctl bench tracing-overhead [--quick] ...
    pricingctl bench http-client [--quick] [--clients ours,geventhttpclient,urllib3] ...
    pricingctl bench timing-accuracy [--quick] [--calls N] [--hogs N] ...
    pricingctl bench timing-cost [--quick] [--rounds N] [--repeat N]
    pricingctl bench soak [--minutes M] [--kill-every-s S] ...
    pricingctl bench overload [--quick] [--multiples X,X] [--pools io,cpu] ...
    pricingctl bench suggest [--quick] [--rates offers=R,cpu=R,batch=R] ...
    pricingctl bench routes-scale [--quick] [--routes N] [--seed S]

Every part runs through one skeleton (`_measure_and_report`): machine check,
measurement, results written by the part, one summary printed, one way to fail.

Exit codes: 0 measured (targets met or not: they are reported, not enforced),
1 the benchmark could not run (a bad route config included), 2 bad flags, 130
interrupted (143 on SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from bench import suggest as suggest_part
from bench.overload import ADMISSIONS
from bench.overload import POOLS as OVERLOAD_POOLS
from bench.progress import Progress
from bench.run import STACK_START_EST_S, BenchError, LoadSettings, planned_seconds
from bench.traffic import GROUPS
from routing.errors import RouteConfigError
from routing.load import load_routes
from routing.model import RouteConfig

if TYPE_CHECKING:
    from bench.tracing_overhead import CapacitySearch

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
DEFAULT_WORKERS = 3
DEFAULT_UPSTREAM_MS = 100.0
# `bench --tracing`: every request sampled, so that every offer has a breakdown.
TRACING_SAMPLE_PERCENT = 100.0


@dataclass(frozen=True)
class Defaults:
    duration_s: float
    warmup_s: float
    repeats: int


FULL = Defaults(duration_s=45.0, warmup_s=10.0, repeats=3)
QUICK = Defaults(duration_s=15.0, warmup_s=4.0, repeats=1)
HOP_FULL, HOP_QUICK = Defaults(30.0, 5.0, 1), Defaults(10.0, 3.0, 1)
CAPACITY_FULL, CAPACITY_QUICK = Defaults(15.0, 3.0, 1), Defaults(6.0, 2.0, 1)
CLIENT_FULL, CLIENT_QUICK = Defaults(20.0, 4.0, 2), Defaults(5.0, 2.0, 1)


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


def _offer_rates(text: str) -> tuple[str, ...]:
    from bench.tracing_overhead import parse_offer_rates

    try:
        return parse_offer_rates(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _modes(text: str) -> tuple[str, ...]:
    from bench.tracing_overhead import MODE_SETTINGS

    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in modes if m not in MODE_SETTINGS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown mode {unknown[0]!r}; expected some of {', '.join(MODE_SETTINGS)}"
        )
    if "off" not in modes or len(set(modes)) != len(modes) or len(modes) < 2:
        raise argparse.ArgumentTypeError("expected off and at least one other mode, each once")
    return modes


def _multiples(text: str) -> tuple[float, ...]:
    values = tuple(_number(t.strip(), low=0.01, what="a multiple") for t in text.split(","))
    if not values or list(values) != sorted(set(values)):
        raise argparse.ArgumentTypeError("expected increasing multiples, e.g. 0.5,1,2")
    return values


def _some_of(allowed: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: a comma-separated subset of `allowed`, each once."""

    def parse(text: str) -> tuple[str, ...]:
        chosen = tuple(c.strip() for c in text.split(",") if c.strip())
        if not chosen or set(chosen) - set(allowed) or len(set(chosen)) != len(chosen):
            raise argparse.ArgumentTypeError(f"expected some of {', '.join(allowed)}, each once")
        return chosen

    return parse


def _clients(text: str) -> tuple[str, ...]:
    from pricing.upstream.client_choice import CLIENTS, OURS

    clients = tuple(c.strip() for c in text.split(",") if c.strip())
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown client {unknown[0]!r}; expected some of {', '.join(CLIENTS)}"
        )
    if OURS not in clients or len(set(clients)) != len(clients) or len(clients) < 2:
        raise argparse.ArgumentTypeError("expected ours and at least one other client, each once")
    return clients


# The `bench` command's sub-parsers, one function per part adds its own.
_Parts: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_parser(subparsers: _Parts) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="measure shared vs split pools side by side (results.json + plots)",
        description="Without PART: start the stack in the shared and the split layout, drive "
        "both with the same open-loop load, and write results.json and PNG plots to --out. "
        "With PART: measure that part on its own.",
    )
    _common(bench, FULL)
    _load_flags(bench, FULL)
    bench.add_argument(
        "--tracing",
        action="store_true",
        help="start the pools with PRICING_TRACING=full, each stack with Jaeger (when its "
        "binary is cached; otherwise the span file), and break every traced offer down",
    )
    bench.add_argument(
        "--sample-percent",
        type=lambda text: _number(text, low=0.0, what="percent"),
        default=TRACING_SAMPLE_PERCENT,
        metavar="P",
        help="with --tracing: Envoy samples P %% of requests "
        f"(default {TRACING_SAMPLE_PERCENT:g}: every offer gets a breakdown)",
    )
    bench.add_argument(
        "--replot",
        action="store_true",
        help="measure nothing: rebuild results.json, results.md and the plots in --out "
        "from the run in --run-dir that wrote them",
    )
    bench.set_defaults(handler=_compare_or_replot)
    # The sub-parsers are of the root's one-line-error class, like this one.
    sub = bench.add_subparsers(dest="bench_command", metavar="PART")
    _envoy_hop_parser(sub)
    _io_capacity_parser(sub)
    _cpu_capacity_parser(sub)
    _tracing_overhead_parser(sub)
    _overload_parser(sub)
    _http_client_parser(sub)
    _timing_accuracy_parser(sub)
    _soak_parser(sub)
    _suggest_parser(sub)
    _timing_cost_parser(sub)
    _routes_scale_parser(sub)


def _envoy_hop_parser(sub: _Parts) -> None:
    hop = sub.add_parser("envoy-hop", help="offers via Envoy vs straight to the io pool")
    _common(hop, HOP_FULL)
    hop.add_argument(
        "--rate", type=_positive, default=100.0, help="offers/s in total (default 100)"
    )
    hop.set_defaults(handler=_handler(ENVOY_HOP))


def _io_capacity_parser(sub: _Parts) -> None:
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
    cap.add_argument(
        "--tracing",
        action="store_true",
        help="pools with tracing at its production default (PRICING_TRACING=full, the "
        "route config's [tracing].sample_percent); default: tracing off",
    )
    cap.set_defaults(handler=_handler(IO_CAPACITY))


def _cpu_capacity_parser(sub: _Parts) -> None:
    cpu_cap = sub.add_parser(
        "cpu-capacity", help="rideshare quotes per second one cpu worker serves"
    )
    cpu_cap.add_argument("--config", type=Path, default=None, help="route config")
    cpu_cap.add_argument("--duration", type=_seconds(1.0), default=20.0, metavar="S")
    cpu_cap.add_argument(
        "--clients", type=int, default=2, help="closed-loop clients (default 2: one queued)"
    )
    cpu_cap.add_argument(
        "--run-dir", type=Path, default=Path(".run/bench-cpu-capacity"), help="stack logs"
    )
    cpu_cap.set_defaults(handler=_cpu_capacity)


def _tracing_overhead_parser(sub: _Parts) -> None:
    tr = sub.add_parser(
        "tracing-overhead", help="the same load with tracing off, at its default, at 100 %%"
    )
    _common(tr, FULL)
    _load_flags(tr, FULL)
    tr.add_argument(
        "--modes",
        type=_modes,
        default=None,
        metavar="M,M",
        help="tracing modes to compare, off among them: off, default (full, the route "
        "config's sampling), 100 (full, every request), spans (spans only), reference "
        "(default with the timing core's Python reference); default off,default,100",
    )
    tr.add_argument(
        "--offer-rates",
        type=_offer_rates,
        default=None,
        metavar="R,R",
        help="rate points, offers only: offers/s, or N%% of the io worker's untraced "
        "capacity measured in the same run (default 40,80%%); --rates runs one mixed point",
    )
    tr.add_argument(
        "--no-capacity",
        action="store_true",
        help="skip io-capacity with tracing off and at the default (then no N%% rates)",
    )
    tr.add_argument(
        "--capacity-start-rps", type=_positive, default=None, help="first step (default 100)"
    )
    tr.add_argument("--capacity-step-rps", type=_positive, default=None, help="default 100")
    tr.add_argument("--capacity-max-rps", type=_positive, default=None, help="default 1500")
    tr.set_defaults(handler=_handler(TRACING_OVERHEAD))


def _overload_parser(sub: _Parts) -> None:
    over = sub.add_parser(
        "overload",
        help="goodput, shedding and health past each pool's capacity, traced and not",
    )
    _common(over, OVERLOAD_FULL)
    over.add_argument(
        "--multiples",
        type=_multiples,
        default=None,
        metavar="X,X",
        help="offered load, as multiples of each pool's capacity "
        "(default 0.5,1,1.5,2,3; --quick 1,3)",
    )
    over.add_argument(
        "--pools",
        type=_some_of(OVERLOAD_POOLS),
        default=None,
        metavar="P,P",
        help="which pools to overload (default io,cpu)",
    )
    over.add_argument(
        "--admission",
        type=_some_of(ADMISSIONS),
        default=None,
        metavar="A,A",
        help="how Envoy limits each pool: littles-law (the shipped circuit breakers), "
        "adaptive (Envoy's adaptive_concurrency filter, to compare); default littles-law",
    )
    over.set_defaults(handler=_handler(OVERLOAD))


def _http_client_parser(sub: _Parts) -> None:
    hc = sub.add_parser(
        "http-client",
        help="CPU per upstream call and offer p99 with each HTTP client library",
        description="The io pool's upstream calls made by each client library in turn, "
        "at the same offers-only load (default offers=100/s), tracing off and traced; "
        "writes http_client.json with the decision rule's verdict.",
    )
    _common(hc, CLIENT_FULL)
    _load_flags(hc, CLIENT_FULL)
    hc.add_argument(
        "--clients",
        type=_clients,
        default=None,
        metavar="C,C",
        help="client libraries to compare, ours among them (default all: "
        "ours,geventhttpclient,urllib3)",
    )
    hc.set_defaults(handler=_handler(HTTP_CLIENT))


def _timing_accuracy_parser(sub: _Parts) -> None:
    acc = sub.add_parser(
        "timing-accuracy",
        help="the per-call network / scheduling-delay split against ground truth",
    )
    _timing_flags(acc)
    acc.add_argument("--calls", type=_count(1, 100_000), default=None, help="default 300")
    acc.add_argument("--hogs", type=_count(0, 64), default=2, help="CPU-hog greenlets")
    acc.add_argument(
        "--phase-calls", type=_count(1, 100_000), default=None, help="calls per load phase"
    )
    acc.add_argument("--reply-ms", type=_count(0, 10_000), default=20, help="upstream delay")
    acc.add_argument("--concurrency", type=_count(1, 1000), default=4, help="client greenlets")
    acc.add_argument("--pause-ms", type=_positive, default=10.0, help="max pause between calls")
    acc.add_argument("--seed", type=_count(0, 2**31), default=1, help="random seed")
    acc.set_defaults(handler=_timing_accuracy)


def _soak_parser(sub: _Parts) -> None:
    soak = sub.add_parser(
        "soak",
        help="N minutes of mixed load with worker SIGKILLs and one routes apply: RSS, fds, "
        "failures, CLOSE_WAIT",
    )
    _common(soak, SOAK_FULL)
    soak.add_argument(
        "--rates",
        type=parse_rates,
        default={},
        metavar="cpu=R,offers=R",
        help="requests/s per group (default cpu=10,offers=35: the benchmark's mix, slower)",
    )
    soak.add_argument(
        "--minutes",
        type=lambda text: _number(text, low=0.1, what="minutes"),
        default=SOAK_MINUTES,
        help=f"how long the load runs (default {SOAK_MINUTES:g})",
    )
    soak.add_argument(
        "--kill-every-s",
        type=_positive,
        default=None,
        metavar="S",
        help="a worker SIGKILLed every S seconds, io and cpu in turn (default: 4 per run, "
        "at most every 5 minutes)",
    )
    soak.set_defaults(handler=_handler(SOAK))


def _suggest_parser(sub: _Parts) -> None:
    sug = sub.add_parser(
        "suggest",
        help="what following `routes suggest` buys: offers' p99 and hub wait before/after",
        description="Start the split stack on a wrong route config (rideshare and batch "
        "next to the offers), run `routes suggest --from-metrics --write` under the mixed "
        "load, restart on the config it wrote under the same load; writes suggest.json: "
        "the moves, the offers' client p99 and hub-wait p99 before and after, their ratios.",
    )
    _common(sug, SUGGEST_FULL)
    sug.add_argument(
        "--rates",
        type=parse_rates,
        default={},
        metavar="offers=R,cpu=R,batch=R",
        help="requests/s per group (default "
        + ",".join(f"{k}={v:g}" for k, v in suggest_part.RATES.items())
        + ")",
    )
    sug.set_defaults(handler=_handler(SUGGEST))


def _timing_cost_parser(sub: _Parts) -> None:
    cost = sub.add_parser("timing-cost", help="CPU cost of the gevent timing instrumentation")
    _timing_flags(cost)
    cost.add_argument("--rounds", type=_count(100, 10**7), default=None, help="default 50000")
    cost.add_argument("--repeat", type=_count(1, 100), default=None, help="default 15")
    cost.set_defaults(handler=_timing_cost)


def _routes_scale_parser(sub: _Parts) -> None:
    scale = sub.add_parser(
        "routes-scale",
        help="the service grown to N synthetic routes against the six-route one",
        description="Synthesize N more routes (`routes synth`), then, for the six-route "
        "service and the grown one in the split layout: render/check/validate time, "
        "Envoy's config size, up time, the io pool's CPU per offer; for the grown one each "
        "pool's /metrics size and scrape time, `routes suggest` time and placement scored "
        "against the truth, `routes apply` time of one moved route. Writes "
        "routes-scale.json.",
    )
    _timing_flags(scale)
    scale.add_argument(
        "--routes", type=_count(4, 5000), default=None, help="synthetic routes (default 300)"
    )
    scale.add_argument("--seed", type=int, default=1, help="of the synthetic service")
    scale.add_argument(
        "--run-dir", type=Path, default=Path(".run/bench-routes-scale"), help="stack logs"
    )
    scale.set_defaults(handler=_routes_scale)


# --- one skeleton for every part ----------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What a part needs to measure: the flags, their defaults resolved, the route
    config with its timeouts applied to the load, and where to report progress."""

    args: argparse.Namespace
    defaults: Defaults
    config: RouteConfig
    settings: LoadSettings
    deadline_s: float
    progress: Progress
    command: str
    machine: dict[str, object]

    @property
    def header(self) -> dict[str, object]:
        """First in every results file: how it was made, and on what."""
        return {"command": self.command, "machine": self.machine}


@dataclass(frozen=True)
class Part:
    full: Defaults
    quick: Defaults
    # Planned seconds (for the progress bar) from the flags and the load settings.
    planned_s: Callable[[argparse.Namespace, LoadSettings, Defaults], float]
    # Runs the part, writes its results to --out, returns the summary to print.
    measure: Callable[[Run], str]
    # A problem with the flags that argparse cannot see (one line), or None.
    check: Callable[[argparse.Namespace], str | None] = lambda args: None


def _cpu_capacity(args: argparse.Namespace) -> int:
    import json

    from bench.cpu_capacity import run_cpu_capacity

    result = run_cpu_capacity(
        load_routes(args.config),
        duration_s=args.duration,
        clients=max(1, args.clients),
        run_dir=args.run_dir,
    )
    print(json.dumps(result))
    return 0


def _handler(part: Part) -> Callable[[argparse.Namespace], int]:
    """A part that starts stacks: its load settings and the route config's timeouts."""

    def handler(args: argparse.Namespace) -> int:
        problem = part.check(args)
        if problem is not None:
            print(f"pricingctl bench {args.bench_command}: error: {problem}", file=sys.stderr)
            return 2
        defaults = _defaults(args, part.full, part.quick)
        settings = _settings(args, defaults)

        def measure(progress: Progress, machine: dict[str, object]) -> str:
            config = load_routes(args.config)
            timed = replace(settings, cpu_timeout_s=_route_timeout_s(config, "offers.rideshare"))
            deadline_s = _route_timeout_s(config, "offers.bike")
            return part.measure(
                Run(args, defaults, config, timed, deadline_s, progress, _command(), machine)
            )

        return _measure_and_report(part.planned_s(args, settings, defaults), measure)

    return handler


def _measure_and_report(
    planned_s: float, measure: Callable[[Progress, dict[str, object]], str]
) -> int:
    """The one skeleton of every part: look at the machine, measure (the part writes its
    results to --out), print its summary; fail in one of the ways the docstring lists."""
    progress = Progress(planned_s)

    def body() -> int:
        from bench.report import machine_before_start

        summary = measure(progress, machine_before_start())
        progress.finish()
        print(summary)
        return 0

    return _guarded(body, progress)


def _defaults(args: argparse.Namespace, full: Defaults, quick: Defaults) -> Defaults:
    base = quick if args.quick else full
    return Defaults(
        duration_s=args.duration if args.duration is not None else base.duration_s,
        warmup_s=args.warmup if args.warmup is not None else base.warmup_s,
        repeats=getattr(args, "repeats", None) or base.repeats,
    )


def _settings(args: argparse.Namespace, d: Defaults) -> LoadSettings:
    rates = {**DEFAULT_RATES, **getattr(args, "rates", {})}
    return LoadSettings(
        group_rates_rps=rates,
        duration_s=d.duration_s,
        warmup_s=d.warmup_s,
        seed=args.seed,
        upstream_ms=args.upstream_ms,
        tracing=getattr(args, "tracing", False),
    )


def _traced_settings(args: argparse.Namespace, settings: LoadSettings) -> LoadSettings:
    """`bench --tracing`: Jaeger with every stack when its binary is cached (Envoy's
    spans too: the breakdowns tile Envoy's span), at --sample-percent."""
    if not settings.tracing:
        return settings
    from stack import jaeger

    return replace(
        settings,
        jaeger=jaeger.cached_binary() is not None,
        sample_percent=args.sample_percent,
    )


def _route_timeout_s(config: RouteConfig, endpoint: str) -> float:
    route = config.route_for_endpoint(endpoint)
    if route is None:
        raise BenchError(f"the route config has no {endpoint} route")
    return route.timeout_ms / 1000.0


def _command() -> str:
    return shlex.join(["pricingctl", *sys.argv[1:]])


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
        return 1
    except KeyboardInterrupt as exc:
        print(
            "\npricingctl bench: interrupted; every process it started is stopped", file=sys.stderr
        )
        return 143 if isinstance(exc, _Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, previous)


# --- the parts: flags -> one call into `bench` ------------------------------------------------


def _measure_compare(run: Run) -> str:
    from bench.report import write_comparison
    from bench.run import compare

    settings = _traced_settings(run.args, run.settings)
    if settings.tracing and not settings.jaeger:
        print(
            "pricingctl bench: no cached Jaeger binary (deploy/jaeger/build.sh): spans go to "
            "the span file, without Envoy's; each breakdown's total is the server span",
            file=sys.stderr,
        )
    results = compare(
        run.config,
        settings,
        workers=run.args.workers,
        repeats=run.defaults.repeats,
        run_dir=run.args.run_dir,
        progress=run.progress,
    )
    return write_comparison(
        results,
        out=run.args.out,
        workers=run.args.workers,
        repeats=run.defaults.repeats,
        deadline_s=run.deadline_s,
        command=run.command,
        machine=run.machine,
    )


def _planned_compare(args: argparse.Namespace, settings: LoadSettings, d: Defaults) -> float:
    from bench.run import layout_arms, run_order

    return planned_seconds(settings, len(run_order(layout_arms(False), d.repeats)))


COMPARE = Part(FULL, QUICK, _planned_compare, _measure_compare)


def _compare_or_replot(args: argparse.Namespace) -> int:
    if args.replot:
        return _guarded(lambda: _replot(args))
    return _handler(COMPARE)(args)


def _replot(args: argparse.Namespace) -> int:
    from bench.replot import runs_from_results
    from bench.report import write_comparison

    path = args.out / "results.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BenchError(f"--replot: {path} does not exist") from None
    results = runs_from_results(doc, args.run_dir)
    s = doc["settings"]
    print(
        write_comparison(
            results,
            out=args.out,
            workers=int(s["workers"]),
            repeats=int(s["repeats"]),
            deadline_s=float(s["deadline_ms"]) / 1000.0,
            command=str(doc["command"]),
            machine=doc["machine"],
            replotted_by=_command(),
        )
    )
    return 0


def _measure_envoy_hop(run: Run) -> str:
    from bench.envoy_hop import run_envoy_hop, write_envoy_hop

    doc, latencies = run_envoy_hop(
        run.config,
        run.settings,
        rate_rps=run.args.rate,
        workers=DEFAULT_WORKERS,
        deadline_s=run.deadline_s,
        run_dir=run.args.run_dir,
        progress=run.progress,
    )
    return write_envoy_hop({**run.header, **doc}, latencies, run.args.out, rate_rps=run.args.rate)


ENVOY_HOP = Part(
    HOP_FULL, HOP_QUICK, lambda args, settings, d: planned_seconds(settings, 1), _measure_envoy_hop
)


def _capacity_steps(args: argparse.Namespace) -> tuple[float, float, float]:
    """(start, step, top) offers/s."""
    start = args.start_rps or 100.0
    step = args.step_rps or (200.0 if args.quick else 100.0)
    top = args.max_rps or (500.0 if args.quick else 1500.0)
    return start, step, top


def _check_capacity(args: argparse.Namespace) -> str | None:
    start, _, top = _capacity_steps(args)
    return "--max-rps is below --start-rps" if top < start else None


def _planned_capacity(args: argparse.Namespace, settings: LoadSettings, d: Defaults) -> float:
    from bench.io_capacity import step_rates

    steps = len(step_rates(*_capacity_steps(args)))
    # Passing steps share one stack: only the first start is paid.
    return planned_seconds(settings, steps) - (steps - 1) * STACK_START_EST_S


def _measure_capacity(run: Run) -> str:
    from bench.io_capacity import run_io_capacity, write_io_capacity

    start, step, top = _capacity_steps(run.args)
    doc = run_io_capacity(
        run.config,
        run.settings,
        start_rps=start,
        step_rps=step,
        max_rps=top,
        p99_limit_ms=run.args.p99_limit_ms,
        direct=run.args.direct,
        deadline_s=run.deadline_s,
        run_dir=run.args.run_dir,
        progress=run.progress,
    )
    return write_io_capacity(
        {**run.header, **doc}, run.args.out, upstream_ms=run.settings.upstream_ms
    )


IO_CAPACITY = Part(
    CAPACITY_FULL, CAPACITY_QUICK, _planned_capacity, _measure_capacity, _check_capacity
)


def _overhead_rates(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The rate points (None: one mixed point at --rates)."""
    from bench.tracing_overhead import DEFAULT_OFFER_RATES

    if args.offer_rates is not None:
        return tuple(args.offer_rates)
    if args.rates:
        return None
    if args.no_capacity:
        return tuple(r for r in DEFAULT_OFFER_RATES if not r.endswith("%"))
    return DEFAULT_OFFER_RATES


def _overhead_capacity(args: argparse.Namespace) -> CapacitySearch | None:
    from bench.tracing_overhead import CapacitySearch

    if args.no_capacity:
        return None
    d = CAPACITY_QUICK if args.quick else CAPACITY_FULL
    return CapacitySearch(
        start_rps=args.capacity_start_rps or 100.0,
        step_rps=args.capacity_step_rps or (200.0 if args.quick else 100.0),
        max_rps=args.capacity_max_rps or (500.0 if args.quick else 1500.0),
        duration_s=d.duration_s,
        warmup_s=d.warmup_s,
    )


def _check_overhead(args: argparse.Namespace) -> str | None:
    rates = _overhead_rates(args)
    if args.no_capacity and rates is not None and any(r.endswith("%") for r in rates):
        return "--offer-rates with N% needs the capacity run (drop --no-capacity)"
    return None


def _planned_overhead(args: argparse.Namespace, settings: LoadSettings, d: Defaults) -> float:
    from bench.io_capacity import step_rates
    from bench.run import run_order
    from bench.tracing_overhead import DEFAULT_MODES, arms

    rates = _overhead_rates(args)
    points = 1 if rates is None else len(rates)
    runs = len(run_order(arms(args.modes or DEFAULT_MODES), d.repeats))
    planned = points * planned_seconds(settings, runs)
    search = _overhead_capacity(args)
    if search is not None:
        steps = len(step_rates(search.start_rps, search.step_rps, search.max_rps))
        # Roughly: half the steps pass, each with its warm-up, per arm; then 0.8 x and
        # 1.5 x the traced capacity (the latter run twice: it fails).
        per_step = search.duration_s + search.warmup_s
        planned += 2 * (STACK_START_EST_S + steps / 2 * per_step)
        planned += 3 * (STACK_START_EST_S + per_step)
    return planned


def _measure_overhead(run: Run) -> str:
    from bench.tracing_overhead import (
        DEFAULT_MODES,
        run_tracing_overhead,
        write_tracing_overhead,
    )

    doc = run_tracing_overhead(
        run.config,
        run.settings,
        workers=run.args.workers,
        repeats=run.defaults.repeats,
        deadline_s=run.deadline_s,
        run_dir=run.args.run_dir,
        modes=run.args.modes or DEFAULT_MODES,
        progress=run.progress,
        offer_rates=_overhead_rates(run.args),
        capacity=_overhead_capacity(run.args),
    )
    return write_tracing_overhead({**run.header, **doc}, run.args.out)


TRACING_OVERHEAD = Part(FULL, QUICK, _planned_overhead, _measure_overhead, _check_overhead)


OVERLOAD_FULL, OVERLOAD_QUICK = Defaults(10.0, 3.0, 1), Defaults(4.0, 2.0, 1)


def _overload_steps(args: argparse.Namespace) -> tuple[tuple[float, ...], tuple[str, ...]]:
    from bench.overload import DEFAULT_MULTIPLES, POOLS

    multiples = args.multiples or ((1.0, 3.0) if args.quick else DEFAULT_MULTIPLES)
    return multiples, args.pools or POOLS


def _planned_overload(args: argparse.Namespace, settings: LoadSettings, d: Defaults) -> float:
    from bench.overload import DEFAULT_ADMISSIONS, DEFAULT_MODES

    multiples, pools = _overload_steps(args)
    stacks = len(DEFAULT_MODES) * len(args.admission or DEFAULT_ADMISSIONS)
    runs = stacks * len(pools) * len(multiples)
    return planned_seconds(settings, runs) - (runs - stacks) * STACK_START_EST_S


def _measure_overload(run: Run) -> str:
    from bench.overload import DEFAULT_ADMISSIONS, run_overload, write_overload

    multiples, pools = _overload_steps(run.args)
    doc = run_overload(
        run.config,
        run.settings,
        multiples=multiples,
        pools=pools,
        admissions=run.args.admission or DEFAULT_ADMISSIONS,
        run_dir=run.args.run_dir,
        progress=run.progress,
    )
    return write_overload({**run.header, **doc}, run.args.out)


OVERLOAD = Part(OVERLOAD_FULL, OVERLOAD_QUICK, _planned_overload, _measure_overload)


SOAK_MINUTES = 20.0
# The benchmark's mix at a third of its rates: the soak looks for leaks and lost
# requests over 20 minutes, not for capacity, and this machine is shared (at the full
# 30 quotes/s the two cpu workers queue into 503s whenever a neighbour is busy).
SOAK_RATES = {"cpu": 10.0, "offers": 35.0}
SOAK_FULL = Defaults(duration_s=SOAK_MINUTES * 60, warmup_s=60.0, repeats=1)


def _soak_defaults(args: argparse.Namespace) -> tuple[float, float, float]:
    """(total seconds, warm-up seconds, seconds between kills) from --minutes."""
    total_s = args.minutes * 60
    warmup_s = args.warmup if args.warmup is not None else min(60.0, total_s / 5)
    kill_every_s = args.kill_every_s or min(300.0, total_s / 4)
    return total_s, warmup_s, kill_every_s


def _measure_soak(run: Run) -> str:
    from bench.soak import run_soak, write_soak

    total_s, warmup_s, kill_every_s = _soak_defaults(run.args)
    rates = {**SOAK_RATES, **run.args.rates}
    settings = replace(
        run.settings, duration_s=total_s - warmup_s, warmup_s=warmup_s, group_rates_rps=rates
    )
    doc = run_soak(
        run.config,
        settings,
        kill_every_s=kill_every_s,
        sample_every_s=max(1.0, min(10.0, total_s / 60)),
        run_dir=run.args.run_dir,
        progress=run.progress,
    )
    return write_soak({**run.header, **doc}, run.args.out)


SOAK = Part(
    SOAK_FULL,
    SOAK_FULL,
    lambda args, settings, d: STACK_START_EST_S + args.minutes * 60 + 60,
    _measure_soak,
)


def _client_settings(args: argparse.Namespace, settings: LoadSettings) -> LoadSettings:
    from bench.http_client import DEFAULT_RATES as CLIENT_RATES

    return replace(settings, group_rates_rps={**CLIENT_RATES, **args.rates})


def _planned_http_client(args: argparse.Namespace, settings: LoadSettings, d: Defaults) -> float:
    from bench.http_client import arms
    from bench.run import run_order
    from pricing.upstream.client_choice import CLIENTS

    return planned_seconds(settings, len(run_order(arms(args.clients or CLIENTS), d.repeats)))


def _measure_http_client(run: Run) -> str:
    from bench.http_client import run_http_client, write_http_client
    from pricing.upstream.client_choice import CLIENTS

    doc = run_http_client(
        run.config,
        _client_settings(run.args, run.settings),
        workers=run.args.workers,
        repeats=run.defaults.repeats,
        deadline_s=run.deadline_s,
        run_dir=run.args.run_dir,
        clients=run.args.clients or CLIENTS,
        progress=run.progress,
    )
    return write_http_client({**run.header, **doc}, run.args.out)


def _check_http_client(args: argparse.Namespace) -> str | None:
    import importlib.util

    from pricing.upstream.client_choice import CLIENTS, OURS

    missing = [c for c in args.clients or CLIENTS if c != OURS and not importlib.util.find_spec(c)]
    if missing:
        return (
            f"{', '.join(missing)} not installed (dev-only: make setup-dev), "
            "or leave it out with --clients"
        )
    return None


HTTP_CLIENT = Part(
    CLIENT_FULL, CLIENT_QUICK, _planned_http_client, _measure_http_client, _check_http_client
)


SUGGEST_FULL = Defaults(suggest_part.DURATION_S, suggest_part.WARMUP_S, repeats=1)
SUGGEST_QUICK = Defaults(suggest_part.QUICK_DURATION_S, suggest_part.QUICK_WARMUP_S, repeats=1)


def _suggest_settings(args: argparse.Namespace, settings: LoadSettings) -> LoadSettings:
    return replace(settings, group_rates_rps={**suggest_part.RATES, **args.rates})


def _measure_suggest(run: Run) -> str:
    doc = suggest_part.run_suggest_bench(
        run.config,
        _suggest_settings(run.args, run.settings),
        deadline_s=run.deadline_s,
        run_dir=run.args.run_dir,
        progress=run.progress,
    )
    return suggest_part.write_suggest({**run.header, **doc}, run.args.out)


def _planned_suggest(args: argparse.Namespace, settings: LoadSettings, d: Defaults) -> float:
    return suggest_part.planned_s(_suggest_settings(args, settings))


SUGGEST = Part(SUGGEST_FULL, SUGGEST_QUICK, _planned_suggest, _measure_suggest)


# --- the parts that start no stack: the gevent timing core's accuracy and cost -------------

ACCURACY_FULL = {"calls": 300, "phase_calls": 25}
ACCURACY_QUICK = {"calls": 40, "phase_calls": 10}
COST_FULL = {"rounds": 50_000, "repeat": 15}
COST_QUICK = {"rounds": 5_000, "repeat": 3}


def _resolved(
    args: argparse.Namespace, full: dict[str, int], quick: dict[str, int]
) -> dict[str, int]:
    """Flags left unset take the full or the --quick default."""
    base = quick if args.quick else full
    return {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in base.items()}


def _timing_accuracy(args: argparse.Namespace) -> int:
    from bench.timing_accuracy import run_timing_accuracy, write_timing_accuracy

    n = _resolved(args, ACCURACY_FULL, ACCURACY_QUICK)

    def measure(progress: Progress, machine: dict[str, object]) -> str:
        progress.step("timing-accuracy: measuring (its own process)", 0.15 * n["calls"])
        doc = run_timing_accuracy(
            calls=n["calls"],
            hogs=args.hogs,
            phase_calls=n["phase_calls"],
            reply_ms=args.reply_ms,
            concurrency=args.concurrency,
            pause_ms=args.pause_ms,
            seed=args.seed,
        )
        return write_timing_accuracy({"command": _command(), "machine": machine, **doc}, args.out)

    return _measure_and_report(0.15 * n["calls"], measure)


def _timing_cost(args: argparse.Namespace) -> int:
    from bench.timing_cost import run_timing_cost, write_timing_cost

    n = _resolved(args, COST_FULL, COST_QUICK)
    planned_s = 4e-5 * n["rounds"] * n["repeat"]

    def measure(progress: Progress, machine: dict[str, object]) -> str:
        progress.step("timing-cost: microbenchmarks", planned_s)
        doc = run_timing_cost(rounds=n["rounds"], repeat=n["repeat"])
        return write_timing_cost({"command": _command(), "machine": machine, **doc}, args.out)

    return _measure_and_report(planned_s, measure)


SCALE_FULL = {"routes": 300, "offers_s": 20, "window_s": 60}
SCALE_QUICK = {"routes": 20, "offers_s": 5, "window_s": 8}


def _routes_scale(args: argparse.Namespace) -> int:
    from bench.routes_scale import ScaleSettings, run_routes_scale, write_routes_scale

    base = SCALE_QUICK if args.quick else SCALE_FULL
    settings = ScaleSettings(
        routes=args.routes or base["routes"],
        seed=args.seed,
        offers_s=base["offers_s"],
        window_s=base["window_s"],
    )
    # Two stacks each started, loaded (offers, then the synthetic load) and one rolled.
    planned_s = 2 * (STACK_START_EST_S + settings.offers_s + 3) + settings.window_s + 50

    def measure(progress: Progress, machine: dict[str, object]) -> str:
        progress.step(f"routes-scale: six routes, then {settings.routes} more", planned_s)
        doc = run_routes_scale(settings, args.run_dir)
        return write_routes_scale(
            {"command": _command(), "machine": machine, **doc}, args.out / "routes-scale.json"
        )

    return _measure_and_report(planned_s, measure)


def _timing_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--quick", action="store_true", help="a short run: a smoke test, not a figure to quote"
    )
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"results directory (default {DEFAULT_OUT})"
    )
