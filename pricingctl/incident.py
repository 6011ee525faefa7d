"""`pricingctl incident`: replay the founding incident on this machine, end to end
(`bench.incident`): flickering offers, the trace that explains them, the live move,
the nines after.

Exit codes: 0 the fix worked (every target that decides it was met: the move applied,
no request failed during it, the after window within its cap and p999 targets, no
flicker); 3 the replay ran and the fix did not work (the report says which target was
missed); 1 the replay could not run (a bad scenario or route config, a process that
did not start: one line); 2 bad flags; 130 interrupted (143 on SIGTERM). With
`--keep`, Ctrl-C after the report stops the stack it kept and the exit code is the
fix's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pricingctl import argtypes

DEFAULT_OUT = Path("bench-out/incident")
DEFAULT_RUN_DIR = Path(".run/incident")
NOT_FIXED = 3


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from bench.scenario import DEFAULT_SCENARIO

    incident = subparsers.add_parser(
        "incident",
        help="replay the founding incident (flickering offers, the trace that explains "
        "them, the live move, the nines after); exit 0: the fix worked, 3: it did not",
    )
    incident.add_argument(
        "--scenario",
        type=argtypes.existing_file,
        default=DEFAULT_SCENARIO,
        help="traffic, timings and targets (default: incident.toml, which documents each key)",
    )
    argtypes.add_config_flag(incident, None)
    argtypes.add_out_flags(
        incident,
        DEFAULT_OUT,
        DEFAULT_RUN_DIR,
        out_help="where incident.json and incident.png go",
        run_dir_help="the replay's stack, logs and configs",
    )
    incident.add_argument(
        "--json",
        action="store_true",
        help="print the results document (stdout) instead of the report; progress on stderr",
    )
    incident.add_argument(
        "--jaeger",
        choices=["auto", "on", "off"],
        default="auto",
        help="whether the replay's stack runs Jaeger: auto (when it is built: make jaeger), "
        "on (fail without it), off (the traces are read from its span file)",
    )
    incident.add_argument(
        "--keep",
        action="store_true",
        help="after the report, keep the replay's stack (and its Jaeger, so the trace "
        "link works) running until Ctrl-C",
    )
    incident.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bench.incident import hold, replayed, report, summary_lines, write_results
    from bench.report import machine_info
    from bench.scenario import ScenarioError, load_scenario
    from pricingctl.bench.skeleton import command_line, guarded
    from routing.load import load_routes
    from stack import jaeger

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"pricingctl incident: {exc}", file=sys.stderr)
        return 1
    built = jaeger.cached_binary() is not None
    with_jaeger = built and args.jaeger != "off"
    if args.jaeger == "on" and not built:
        print("pricingctl incident: Jaeger is not built; run `make jaeger` first", file=sys.stderr)
        return 1
    out = sys.stderr if args.json else sys.stdout

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    def body() -> int:
        config = load_routes(args.config)
        replay = replayed(config, scenario, args.run_dir, say, with_jaeger=with_jaeger)
        with replay as (outcome, stack):
            doc = {"command": command_line(), "machine": machine_info()}
            doc.update(report(outcome, scenario))
            written = write_results(doc, args.out)
            if args.json:
                print(json.dumps(doc, indent=1), flush=True)
            else:
                for line in summary_lines(doc):
                    say(line)
            say(f"wrote {', '.join(str(p) for p in written)}")
            if args.keep:
                hold(stack, say)
            elif stack.jaeger_url is not None:
                say("the trace link works while the replay's stack runs: --keep leaves it up")
        return 0 if doc["fixed"] else NOT_FIXED

    return guarded(body, prefix="pricingctl incident")
