"""`pricingctl bench overload`, `soak`, `faults`: past each pool's capacity, over time
with workers killed and routes applied, and one fault at a time."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING

from bench.overload import ADMISSIONS
from bench.overload import POOLS as OVERLOAD_POOLS
from bench.run import STACK_START_EST_S, LoadSettings, planned_seconds
from pricingctl import argtypes
from pricingctl.bench.flags import (
    Defaults,
    Parts,
    common_flags,
    number,
    positive,
    rates_flag,
    some_of,
)
from pricingctl.bench.skeleton import Part, Run, part_handler

if TYPE_CHECKING:
    from bench.faults import Fault, Windows


def _multiples(text: str) -> tuple[float, ...]:
    values = tuple(number(t.strip(), low=0.01, what="a multiple") for t in text.split(","))
    if not values or list(values) != sorted(set(values)):
        raise argparse.ArgumentTypeError("expected increasing multiples, e.g. 0.5,1,2")
    return values


def overload_parser(sub: Parts) -> None:
    over = sub.add_parser(
        "overload",
        help="goodput, shedding and health past each pool's capacity, traced and not",
    )
    common_flags(over, OVERLOAD_FULL)
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
        type=some_of(OVERLOAD_POOLS),
        default=None,
        metavar="P,P",
        help="which pools to overload (default io,cpu)",
    )
    over.add_argument(
        "--admission",
        type=some_of(ADMISSIONS),
        default=None,
        metavar="A,A",
        help="how Envoy limits each pool: littles-law (the shipped circuit breakers), "
        "adaptive (Envoy's adaptive_concurrency filter, to compare); default littles-law",
    )
    over.set_defaults(handler=part_handler(OVERLOAD))


def soak_parser(sub: Parts) -> None:
    soak = sub.add_parser(
        "soak",
        help="N minutes of mixed load with worker SIGKILLs and one routes apply: RSS, fds, "
        "failures, CLOSE_WAIT",
    )
    common_flags(soak, SOAK_FULL)
    rates_flag(
        soak,
        "cpu=R,offers=R",
        "requests/s per group (default cpu=10,offers=35: the benchmark's mix, slower)",
    )
    soak.add_argument(
        "--minutes",
        type=lambda text: number(text, low=0.1, what="minutes"),
        default=None,
        help=f"how long the load runs (default {SOAK_MINUTES:g}; --long {LONG_SOAK_MINUTES:g})",
    )
    soak.add_argument(
        "--long",
        action="store_true",
        help="look for a slow leak: no kills and no apply (every process lives the whole "
        "run), tracing on; RSS growth per hour and per million requests, and each pool's "
        "allocator blocks",
    )
    soak.add_argument(
        "--sample-percent",
        type=argtypes.number("percent", 0.0, 100.0),
        default=None,
        metavar="P",
        help="with --long: Envoy samples P %% of requests (default: the route config's)",
    )
    soak.add_argument(
        "--heapwatch",
        type=argtypes.path,
        default=None,
        metavar="DIR",
        help="with --long: tracemalloc snapshots of the workers and the simulator, every "
        "minute, to DIR, and the allocation sites that grew reported (it slows them: a "
        "search, not figures)",
    )
    soak.add_argument(
        "--kill-every-s",
        type=positive,
        default=None,
        metavar="S",
        help="a worker SIGKILLed every S seconds, io and cpu in turn (default: 4 per run, "
        "at most every 5 minutes)",
    )
    soak.set_defaults(handler=part_handler(SOAK))


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
LONG_SOAK_MINUTES = 30.0
# The benchmark's mix at a third of its rates: the soak looks for leaks and lost
# requests over 20 minutes, not for capacity, and this machine is shared (at the full
# 30 quotes/s the two cpu workers queue into 503s whenever a neighbour is busy).
SOAK_RATES = {"cpu": 10.0, "offers": 35.0}
SOAK_FULL = Defaults(duration_s=SOAK_MINUTES * 60, warmup_s=60.0, repeats=1)


def _soak_minutes(args: argparse.Namespace) -> float:
    return float(args.minutes or (LONG_SOAK_MINUTES if args.long else SOAK_MINUTES))


def _soak_defaults(args: argparse.Namespace) -> tuple[float, float, float]:
    """(total seconds, warm-up seconds, seconds between kills) from --minutes. The long
    mode's warm-up is longer: a worker's heap grows for minutes before it levels off."""
    total_s = _soak_minutes(args) * 60
    warmup_cap_s = 300.0 if args.long else 60.0
    warmup_s = args.warmup if args.warmup is not None else min(warmup_cap_s, total_s / 5)
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
        long=run.args.long,
        sample_percent=run.args.sample_percent,
        heapwatch=run.args.heapwatch,
    )
    return write_soak({**run.header, **doc}, run.args.out)


def _long_only(args: argparse.Namespace) -> str | None:
    """The flags that only the long soak takes, given without --long: one line."""
    for flag, value in (("--sample-percent", args.sample_percent), ("--heapwatch", args.heapwatch)):
        if value is not None and not args.long:
            return f"{flag} needs --long"
    return None


SOAK = Part(
    SOAK_FULL,
    SOAK_FULL,
    lambda args, settings, d: STACK_START_EST_S + _soak_minutes(args) * 60 + 60,
    _measure_soak,
    _long_only,
)


def faults_parser(sub: Parts) -> None:
    from bench.faults import FAULT_SLUGS

    faults = sub.add_parser(
        "faults",
        help="one fault at a time under mixed load (kills, stops, a full disk, a slow "
        "collector): requests failed, recovery, RSS/fds, telemetry lost",
    )
    common_flags(faults, FAULTS_FULL)
    rates_flag(
        faults,
        "cpu=R,offers=R",
        "requests/s per group (default cpu=10,offers=35: the soak's mix)",
    )
    faults.add_argument(
        "--after",
        type=positive,
        default=None,
        metavar="S",
        help=f"seconds of load after each fault's window (default {FAULTS_AFTER_S[0]:g}; "
        f"--quick {FAULTS_AFTER_S[1]:g}); --warmup is the load before it, --duration the "
        "window",
    )
    faults.add_argument(
        "--faults",
        type=some_of(FAULT_SLUGS),
        default=None,
        metavar="F,F",
        help=f"which faults, in order (default all: {', '.join(FAULT_SLUGS)})",
    )
    faults.add_argument(
        "--no-supervise",
        action="store_true",
        help="restart nothing that exits (default: as `pricingctl up` supervises)",
    )
    faults.set_defaults(handler=part_handler(FAULTS))


# Seconds: the fault's window (--duration) and the load before it (--warmup); after it:
FAULTS_FULL, FAULTS_QUICK = Defaults(10.0, 8.0, 1), Defaults(3.0, 4.0, 1)
FAULTS_AFTER_S = (15.0, 6.0)


def _fault_plan(
    run_args: argparse.Namespace, settings: LoadSettings
) -> tuple[list[Fault], Windows]:
    from bench.faults import MATRIX, Windows

    chosen = run_args.faults or tuple(f.slug for f in MATRIX)
    faults = [f for slug in chosen for f in MATRIX if f.slug == slug]
    after = run_args.after or FAULTS_AFTER_S[1 if run_args.quick else 0]
    return faults, Windows(settings.warmup_s, settings.duration_s, after)


def _measure_faults(run: Run) -> str:
    from bench.faults import run_faults, write_faults

    faults, windows = _fault_plan(run.args, run.settings)
    settings = replace(run.settings, group_rates_rps={**SOAK_RATES, **run.args.rates})
    doc = run_faults(
        run.config,
        settings,
        faults,
        windows,
        run.args.run_dir,
        run.progress,
        supervise=not run.args.no_supervise,
    )
    return write_faults({**run.header, **doc}, run.args.out)


def _planned_faults(args: argparse.Namespace, settings: LoadSettings, d: Defaults) -> float:
    faults, windows = _fault_plan(args, settings)
    return len(faults) * (STACK_START_EST_S + windows.total_s + 4)


FAULTS = Part(FAULTS_FULL, FAULTS_QUICK, _planned_faults, _measure_faults)
