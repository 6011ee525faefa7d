"""`pricingctl bench span-cost`, `log-cost`, `metrics-cost`, `instructions`: what a
request's spans, its access line and its metrics cost a worker, and what tracing adds to
an offer in instructions, measured in this process or its children (no stack)."""

from __future__ import annotations

import argparse

from bench.progress import Progress
from pricingctl.bench.flags import Parts, count, timing_flags
from pricingctl.bench.skeleton import command_line, measure_and_report, resolved


def span_cost_parser(sub: Parts) -> None:
    p = sub.add_parser("span-cost", help="CPU a sampled request's spans cost, hub and exporter")
    timing_flags(p)
    p.add_argument("--requests", type=count(1, 10**6), default=None, help="default 400")
    p.add_argument("--repeat", type=count(1, 100), default=None, help="default 7")
    p.add_argument("--profile", action="store_true", help="print cProfile's top functions instead")
    p.set_defaults(handler=_span_cost)


def log_cost_parser(sub: Parts) -> None:
    p = sub.add_parser("log-cost", help="CPU of the pools' access line, per request")
    timing_flags(p)
    p.add_argument("--n", type=count(10, 10**7), default=None, help="lines per run (20000)")
    p.set_defaults(handler=_log_cost)


def metrics_cost_parser(sub: Parts) -> None:
    p = sub.add_parser("metrics-cost", help="CPU of the metrics on the request path and flush")
    timing_flags(p)
    p.add_argument(
        "--n", type=count(100, 10**8), default=None, help="observations per run (200000)"
    )
    p.set_defaults(handler=_metrics_cost)


def instructions_parser(sub: Parts) -> None:
    p = sub.add_parser(
        "instructions", help="instructions tracing adds to an offer (callgrind, in process)"
    )
    timing_flags(p)
    p.add_argument("--offers", type=count(8, 10**5), default=None, help="counted (400)")
    p.add_argument("--warmup", type=count(8, 10**5), default=None, help="offers first (200)")
    p.add_argument("--repeats", type=count(1, 20), default=None, help="per mode (3)")
    p.add_argument(
        "--sampled",
        action="store_true",
        help="every traced offer sampled by Envoy (100 %% sampling), not unsampled",
    )
    p.set_defaults(handler=_instructions)


INSTRUCTIONS_FULL = {"offers": 400, "warmup": 200, "repeats": 3}
INSTRUCTIONS_QUICK = {"offers": 16, "warmup": 8, "repeats": 1}
SPAN_FULL, SPAN_QUICK = {"requests": 400, "repeat": 7}, {"requests": 20, "repeat": 2}
LOG_FULL, LOG_QUICK = {"n": 20_000}, {"n": 500}
METRICS_FULL, METRICS_QUICK = {"n": 200_000}, {"n": 2_000}


def _span_cost(args: argparse.Namespace) -> int:
    from bench import span_cost

    n = resolved(args, SPAN_FULL, SPAN_QUICK)
    planned_s = 2e-3 * n["requests"] * n["repeat"]

    def measure(progress: Progress, machine: dict[str, object]) -> str:
        if args.profile:
            span_cost.profile(n["requests"])
            return "profiled (nothing written)"
        progress.step("span-cost: requests and export", planned_s)
        best = span_cost.measure(n["requests"], n["repeat"])
        doc = {"command": command_line(), "machine": machine, "settings": n, "best_us": best}
        return span_cost.write_span_cost(doc, args.out)

    return measure_and_report(planned_s, measure)


def _log_cost(args: argparse.Namespace) -> int:
    from bench.log_cost import run_log_cost, write_log_cost

    n = resolved(args, LOG_FULL, LOG_QUICK)["n"]
    planned_s = 3 * 5 * 2e-5 * n

    def measure(progress: Progress, machine: dict[str, object]) -> str:
        progress.step("log-cost: access lines", planned_s)
        doc = run_log_cost(n)
        return write_log_cost({"command": command_line(), "machine": machine, **doc}, args.out)

    return measure_and_report(planned_s, measure)


def _metrics_cost(args: argparse.Namespace) -> int:
    from bench.metrics_cost import run_metrics_cost, write_metrics_cost

    n = resolved(args, METRICS_FULL, METRICS_QUICK)["n"]
    planned_s = 2 + 2 * 5 * 3e-6 * n

    def measure(progress: Progress, machine: dict[str, object]) -> str:
        progress.step("metrics-cost: both modes (a process each)", planned_s)
        doc = run_metrics_cost(n)
        return write_metrics_cost({"command": command_line(), "machine": machine, **doc}, args.out)

    return measure_and_report(planned_s, measure)


def _instructions(args: argparse.Namespace) -> int:
    from bench.instructions import run_instructions, write_instructions

    n = resolved(args, INSTRUCTIONS_FULL, INSTRUCTIONS_QUICK)
    # Valgrind: ~1 min to start each child, then ~0.1 s an offer.
    planned_s = 2 * n["repeats"] * (60 + 0.1 * (n["offers"] + n["warmup"]))

    def measure(progress: Progress, machine: dict[str, object]) -> str:
        progress.step("instructions: off and traced under callgrind", planned_s)
        doc = run_instructions(
            offers=n["offers"], warmup=n["warmup"], repeats=n["repeats"], sampled=args.sampled
        )
        return write_instructions({"command": command_line(), "machine": machine, **doc}, args.out)

    return measure_and_report(planned_s, measure)
