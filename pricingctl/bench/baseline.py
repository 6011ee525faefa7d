"""`pricingctl bench baseline`: the io pool against the stock gevent and asyncio stacks
(`bench.baseline`)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from bench.run import STACK_START_EST_S, LoadSettings
from pricingctl.bench.flags import Defaults, Parts, common_flags, positive
from pricingctl.bench.skeleton import Part, Run, part_handler

BASELINE_FULL, BASELINE_QUICK = Defaults(15.0, 5.0, 1), Defaults(2.0, 1.0, 1)
#: Each capacity step (io-capacity's --quick length: three searches in one run).
CAPACITY_STEP = Defaults(8.0, 2.0, 1)
#: Offers/s: a light load, and one near the stock gevent stack's capacity at 1 %.
QUICK_RATES = (40.0,)
#: Without --offer-rates and without the capacity search.
NO_CAPACITY_RATES = (100.0, 200.0)


def _rates(text: str) -> tuple[float, ...]:
    rates = tuple(positive(t) for t in text.split(",") if t.strip())
    if not rates:
        raise argparse.ArgumentTypeError("expected offers/s, comma-separated")
    return rates


def baseline_parser(sub: Parts) -> None:
    p = sub.add_parser(
        "baseline", help="the io pool vs the stock gevent and asyncio stacks (CPU per offer)"
    )
    common_flags(p, BASELINE_FULL)
    p.add_argument(
        "--offer-rates",
        type=_rates,
        default=None,
        metavar="R,R",
        help="offers/s each side is driven at (default: 0.5 and 0.9 x the stock gevent "
        "stack's capacity at 1 %%, from the capacity search; --quick 40)",
    )
    p.add_argument(
        "--no-capacity",
        action="store_true",
        help="skip each side's capacity search (always skipped with --quick)",
    )
    p.add_argument(
        "--p99-limit-ms", type=positive, default=200.0, help="a capacity step passes at p99 <= this"
    )
    p.set_defaults(handler=part_handler(BASELINE))


def _plan_of(run: Run) -> object:
    from bench.baseline.part import Plan

    args = run.args
    skip = args.quick or args.no_capacity
    rates = args.offer_rates or (QUICK_RATES if args.quick else None)
    return Plan(
        rates_rps=rates or (NO_CAPACITY_RATES if skip else None),
        # --quick: tracing at 1 % only (every side's OpenTelemetry wiring runs).
        modes=("1 %",) if args.quick else ("1 %", "off"),
        capacity_steps=None if skip else (50.0, 50.0, 1500.0),
        capacity_settings=replace(
            run.settings, duration_s=CAPACITY_STEP.duration_s, warmup_s=CAPACITY_STEP.warmup_s
        ),
        p99_limit_ms=args.p99_limit_ms,
        deadline_s=run.deadline_s,
    )


def _planned(args: argparse.Namespace, settings: LoadSettings, d: Defaults) -> float:
    rates = args.offer_rates or (QUICK_RATES if args.quick else NO_CAPACITY_RATES)
    modes = 1 if args.quick else 2
    windows = modes * 3 * len(rates) * (settings.total_s + 2.0)
    step_s = CAPACITY_STEP.duration_s + CAPACITY_STEP.warmup_s + 2.0
    capacity = 0.0 if args.quick or args.no_capacity else 3 * 8 * step_s
    return modes * STACK_START_EST_S + windows + capacity


def _measure(run: Run) -> str:
    from bench.baseline.part import Plan, run_baseline, write_baseline

    plan = _plan_of(run)
    assert isinstance(plan, Plan)
    doc = run_baseline(
        run.config, run.settings, plan, run_dir=run.args.run_dir, progress=run.progress
    )
    return write_baseline({**run.header, **doc}, run.args.out)


BASELINE = Part(BASELINE_FULL, BASELINE_QUICK, _planned, _measure)
