"""`pricingctl bench suggest`, `routes-scale`: the route config's tools measured
(what following `routes suggest` buys; the service grown to hundreds of routes)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from bench import suggest as suggest_part
from bench.progress import Progress
from bench.run import STACK_START_EST_S, LoadSettings
from pricingctl import argtypes
from pricingctl.bench.flags import (
    Defaults,
    Parts,
    common_flags,
    count,
    rates_flag,
    timing_flags,
)
from pricingctl.bench.skeleton import Part, Run, command_line, measure_and_report, part_handler


def suggest_parser(sub: Parts) -> None:
    sug = sub.add_parser(
        "suggest",
        help="what following `routes suggest` buys: offers' p99 and hub wait before/after",
        description="Start the split stack on a wrong route config (rideshare and batch "
        "next to the offers), run `routes suggest --from-metrics --write` under the mixed "
        "load, restart on the config it wrote under the same load; writes suggest.json: "
        "the moves, the offers' client p99 and hub-wait p99 before and after, their ratios.",
    )
    common_flags(sug, SUGGEST_FULL)
    rates_flag(
        sug,
        "offers=R,cpu=R,batch=R",
        "requests/s per group (default "
        + ",".join(f"{k}={v:g}" for k, v in suggest_part.RATES.items())
        + ")",
    )
    sug.set_defaults(handler=part_handler(SUGGEST))


def routes_scale_parser(sub: Parts) -> None:
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
    timing_flags(scale)
    scale.add_argument(
        "--routes", type=count(4, 5000), default=None, help="synthetic routes (default 300)"
    )
    scale.add_argument("--seed", type=argtypes.seed, default=1, help="of the synthetic service")
    scale.add_argument(
        "--run-dir", type=argtypes.path, default=Path(".run/bench-routes-scale"), help="stack logs"
    )
    scale.set_defaults(handler=_routes_scale)


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
            {"command": command_line(), "machine": machine, **doc}, args.out / "routes-scale.json"
        )

    return measure_and_report(planned_s, measure)
