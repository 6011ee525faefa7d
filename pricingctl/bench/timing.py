"""`pricingctl bench timing-accuracy`, `timing-cost`: the gevent timing core measured
on its own (no stack)."""

from __future__ import annotations

import argparse

from bench.progress import Progress
from pricingctl import argtypes
from pricingctl.bench.flags import Parts, count, positive, timing_flags
from pricingctl.bench.skeleton import command_line, measure_and_report, resolved


def timing_accuracy_parser(sub: Parts) -> None:
    acc = sub.add_parser(
        "timing-accuracy",
        help="the per-call network / scheduling-delay split against ground truth",
    )
    timing_flags(acc)
    acc.add_argument("--calls", type=count(1, 100_000), default=None, help="default 300")
    acc.add_argument("--hogs", type=count(0, 64), default=2, help="CPU-hog greenlets")
    acc.add_argument(
        "--phase-calls", type=count(1, 100_000), default=None, help="calls per load phase"
    )
    acc.add_argument("--reply-ms", type=count(0, 10_000), default=20, help="upstream delay")
    acc.add_argument("--concurrency", type=count(1, 1000), default=4, help="client greenlets")
    acc.add_argument("--pause-ms", type=positive, default=10.0, help="max pause between calls")
    acc.add_argument("--seed", type=argtypes.seed, default=1, help="random seed")
    acc.set_defaults(handler=_timing_accuracy)


def timing_cost_parser(sub: Parts) -> None:
    cost = sub.add_parser("timing-cost", help="CPU cost of the gevent timing instrumentation")
    timing_flags(cost)
    cost.add_argument("--rounds", type=count(100, 10**7), default=None, help="default 50000")
    cost.add_argument("--repeat", type=count(1, 100), default=None, help="default 15")
    cost.set_defaults(handler=_timing_cost)


ACCURACY_FULL = {"calls": 300, "phase_calls": 25}
ACCURACY_QUICK = {"calls": 40, "phase_calls": 10}
COST_FULL = {"rounds": 50_000, "repeat": 15}
COST_QUICK = {"rounds": 5_000, "repeat": 3}


def _timing_accuracy(args: argparse.Namespace) -> int:
    from bench.timing_accuracy import run_timing_accuracy, write_timing_accuracy

    n = resolved(args, ACCURACY_FULL, ACCURACY_QUICK)

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
        return write_timing_accuracy(
            {"command": command_line(), "machine": machine, **doc}, args.out
        )

    return measure_and_report(0.15 * n["calls"], measure)


def _timing_cost(args: argparse.Namespace) -> int:
    from bench.timing_cost import run_timing_cost, write_timing_cost

    n = resolved(args, COST_FULL, COST_QUICK)
    planned_s = 4e-5 * n["rounds"] * n["repeat"]

    def measure(progress: Progress, machine: dict[str, object]) -> str:
        progress.step("timing-cost: microbenchmarks", planned_s)
        doc = run_timing_cost(rounds=n["rounds"], repeat=n["repeat"])
        return write_timing_cost({"command": command_line(), "machine": machine, **doc}, args.out)

    return measure_and_report(planned_s, measure)
