"""`pricingctl bench tracing-overhead`, `http-client`: what a choice costs under the
same load (tracing modes, HTTP client libraries)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING

from bench.run import STACK_START_EST_S, LoadSettings, planned_seconds
from pricingctl.bench.capacity import CAPACITY_FULL, CAPACITY_QUICK
from pricingctl.bench.flags import (
    FULL,
    QUICK,
    Defaults,
    Parts,
    common_flags,
    compared,
    load_flags,
    positive,
    seconds,
)
from pricingctl.bench.skeleton import Part, Run, part_handler

if TYPE_CHECKING:
    from bench.tracing_overhead import CapacitySearch
CLIENT_FULL, CLIENT_QUICK = Defaults(20.0, 4.0, 2), Defaults(5.0, 2.0, 1)


def _offer_rates(text: str) -> tuple[str, ...]:
    from bench.tracing_overhead import parse_offer_rates

    try:
        return parse_offer_rates(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _modes(text: str) -> tuple[str, ...]:
    from bench.tracing_overhead import MODE_SETTINGS

    return compared(text, MODE_SETTINGS, "off", "mode")


def _clients(text: str) -> tuple[str, ...]:
    from bench.clients import CLIENTS, OURS

    return compared(text, CLIENTS, OURS, "client")


def tracing_overhead_parser(sub: Parts) -> None:
    tr = sub.add_parser(
        "tracing-overhead", help="the same load with tracing off, at its default, at 100 %%"
    )
    common_flags(tr, FULL)
    load_flags(tr, FULL)
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
        "--paired",
        action="store_true",
        help="run every mode at once, each on its own stack over the same window, at the "
        "rate points given in offers/s (a share of the capacity still runs one mode after "
        "another): the machine's drift lands on every mode alike",
    )
    tr.add_argument(
        "--capacity-start-rps", type=positive, default=None, help="first step (default 100)"
    )
    tr.add_argument("--capacity-step-rps", type=positive, default=None, help="default 100")
    tr.add_argument("--capacity-max-rps", type=positive, default=None, help="default 1500")
    full, quick = CAPACITY_FULL, CAPACITY_QUICK
    windows = (
        ("duration", "measured seconds per", 1.0, full.duration_s, quick.duration_s),
        ("warmup", "discarded seconds before each", 0.0, full.warmup_s, quick.warmup_s),
    )
    for window, what, low, full_s, quick_s in windows:
        tr.add_argument(
            f"--capacity-{window}",
            type=seconds(low),
            default=None,
            metavar="S",
            help=f"{what} capacity step (default {full_s:g}, --quick {quick_s:g})",
        )
    tr.set_defaults(handler=part_handler(TRACING_OVERHEAD))


def http_client_parser(sub: Parts) -> None:
    hc = sub.add_parser(
        "http-client",
        help="CPU per upstream call and offer p99 with each HTTP client library",
        description="The io pool's upstream calls made by each client library in turn, "
        "at the same offers-only load (default offers=100/s), tracing off and traced; "
        "writes http_client.json with the decision rule's verdict.",
    )
    common_flags(hc, CLIENT_FULL)
    load_flags(hc, CLIENT_FULL)
    hc.add_argument(
        "--clients",
        type=_clients,
        default=None,
        metavar="C,C",
        help="client libraries to compare, ours among them (default all: "
        "ours,geventhttpclient,urllib3)",
    )
    hc.set_defaults(handler=part_handler(HTTP_CLIENT))


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
        duration_s=args.capacity_duration or d.duration_s,
        warmup_s=d.warmup_s if args.capacity_warmup is None else args.capacity_warmup,
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
    runs = len(run_order(arms(args.modes or DEFAULT_MODES), d.repeats))
    shares = 0 if rates is None else sum(r.endswith("%") for r in rates)
    absolute = 1 if rates is None else len(rates) - shares
    # A paired point runs each repeat's modes at once: one run's time per repeat.
    planned = (shares + (0 if args.paired else absolute)) * planned_seconds(settings, runs)
    if args.paired:
        planned += absolute * planned_seconds(settings, d.repeats)
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
        paired=run.args.paired,
    )
    return write_tracing_overhead({**run.header, **doc}, run.args.out)


TRACING_OVERHEAD = Part(FULL, QUICK, _planned_overhead, _measure_overhead, _check_overhead)


def _client_settings(args: argparse.Namespace, settings: LoadSettings) -> LoadSettings:
    from bench.http_client import DEFAULT_RATES as CLIENT_RATES

    return replace(settings, group_rates_rps={**CLIENT_RATES, **args.rates})


def _planned_http_client(args: argparse.Namespace, settings: LoadSettings, d: Defaults) -> float:
    from bench.clients import CLIENTS
    from bench.http_client import arms
    from bench.run import run_order

    return planned_seconds(settings, len(run_order(arms(args.clients or CLIENTS), d.repeats)))


def _measure_http_client(run: Run) -> str:
    from bench.clients import CLIENTS
    from bench.http_client import run_http_client, write_http_client

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

    from bench.clients import CLIENTS, OURS

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
