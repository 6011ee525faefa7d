"""`pricingctl bench envoy-hop`, `io-capacity`: what one io worker sustains, and what
the Envoy hop adds."""

from __future__ import annotations

import argparse

from bench.run import STACK_START_EST_S, LoadSettings, planned_seconds
from pricingctl.bench.flags import DEFAULT_WORKERS, Defaults, Parts, common_flags, positive
from pricingctl.bench.skeleton import Part, Run, part_handler
from toolkit.contract import TRACING_ENV

HOP_FULL, HOP_QUICK = Defaults(30.0, 5.0, 1), Defaults(10.0, 3.0, 1)
CAPACITY_FULL, CAPACITY_QUICK = Defaults(15.0, 3.0, 1), Defaults(6.0, 2.0, 1)


def envoy_hop_parser(sub: Parts) -> None:
    hop = sub.add_parser("envoy-hop", help="offers via Envoy vs straight to the io pool")
    common_flags(hop, HOP_FULL)
    hop.add_argument("--rate", type=positive, default=100.0, help="offers/s in total (default 100)")
    hop.set_defaults(handler=part_handler(ENVOY_HOP))


def io_capacity_parser(sub: Parts) -> None:
    cap = sub.add_parser("io-capacity", help="highest offer rate one io worker sustains")
    common_flags(cap, CAPACITY_FULL)
    cap.add_argument("--start-rps", type=positive, default=None, help="first step (default 100)")
    cap.add_argument("--step-rps", type=positive, default=None, help="step size (default 100)")
    cap.add_argument("--max-rps", type=positive, default=None, help="last step (default 1500)")
    cap.add_argument(
        "--p99-limit-ms", type=positive, default=200.0, help="a step passes at p99 <= this"
    )
    cap.add_argument(
        "--direct", action="store_true", help="send straight to the io pool, not through Envoy"
    )
    cap.add_argument(
        "--tracing",
        action="store_true",
        help=f"pools with tracing at its production default ({TRACING_ENV}=full, the "
        "route config's [tracing].sample_percent); default: tracing off",
    )
    cap.set_defaults(handler=part_handler(IO_CAPACITY))


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
