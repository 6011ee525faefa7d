"""One skeleton for every part of `pricingctl bench` (`measure_and_report`): machine
check, measurement, results written by the part, one summary printed, one way to fail
(the exit codes the package's docstring lists)."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

from bench.progress import Progress
from bench.run import BenchError, LoadSettings
from pricingctl.bench.flags import DEFAULT_RATES, Defaults
from routing.errors import RouteConfigError
from routing.load import load_routes
from routing.model import RouteConfig


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


def part_handler(part: Part) -> Callable[[argparse.Namespace], int]:
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
            timed = replace(settings, cpu_timeout_s=route_timeout_s(config, "offers.rideshare"))
            deadline_s = route_timeout_s(config, "offers.bike")
            return part.measure(
                Run(args, defaults, config, timed, deadline_s, progress, command_line(), machine)
            )

        return measure_and_report(part.planned_s(args, settings, defaults), measure)

    return handler


def measure_and_report(
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

    return guarded(body, progress)


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


def route_timeout_s(config: RouteConfig, endpoint: str) -> float:
    route = config.route_for_endpoint(endpoint)
    if route is None:
        raise BenchError(f"the route config has no {endpoint} route")
    return route.timeout_ms / 1000.0


def command_line() -> str:
    return shlex.join(["pricingctl", *sys.argv[1:]])


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a CI timeout, `kill`): unwinds like Ctrl-C, so every `finally` runs
    and every stack started so far is stopped by process group."""


def _on_sigterm(_signum: int, _frame: object) -> None:
    raise _Terminated


def guarded(
    body: Callable[[], int], progress: Progress | None = None, prefix: str = "pricingctl bench"
) -> int:
    """*body*'s exit code; a failure it raises is one line (and its details) prefixed
    with *prefix*, and exit 1; Ctrl-C and SIGTERM unwind it (130, 143)."""
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return body()
    except BenchError as exc:
        first, *rest = str(exc).splitlines()
        if progress is not None:
            progress.finish()
        print(f"{prefix}: {first}", file=sys.stderr)
        if rest:
            print("\n".join(rest), file=sys.stderr)
        return 1
    except RouteConfigError as exc:
        print(f"{prefix}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        print(f"\n{prefix}: interrupted; every process it started is stopped", file=sys.stderr)
        return 143 if isinstance(exc, _Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def resolved(
    args: argparse.Namespace, full: dict[str, int], quick: dict[str, int]
) -> dict[str, int]:
    """Flags left unset take the full or the --quick default."""
    base = quick if args.quick else full
    return {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in base.items()}
