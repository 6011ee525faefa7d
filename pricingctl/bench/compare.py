"""`pricingctl bench` without a part: shared vs split pools side by side, and
`--replot` of a run already made."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from bench.run import BenchError, LoadSettings, planned_seconds
from pricingctl import argtypes
from pricingctl.bench.flags import FULL, QUICK, Defaults, common_flags, load_flags
from pricingctl.bench.skeleton import Part, Run, command_line, guarded, part_handler
from toolkit.contract import TRACING_ENV

# `bench --tracing`: every request sampled, so that every offer has a breakdown.
TRACING_SAMPLE_PERCENT = 100.0


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
        return guarded(lambda: _replot(args))
    return part_handler(COMPARE)(args)


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
            replotted_by=command_line(),
        )
    )
    return 0


def compare_flags(bench: argparse.ArgumentParser) -> None:
    """The `bench` command's own flags: the comparison's, and --replot."""
    common_flags(bench, FULL)
    load_flags(bench, FULL)
    bench.add_argument(
        "--tracing",
        action="store_true",
        help=f"start the pools with {TRACING_ENV}=full, each stack with Jaeger (when its "
        "binary is cached; otherwise the span file), and break every traced offer down",
    )
    bench.add_argument(
        "--sample-percent",
        type=argtypes.percent,
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
