"""`pricingctl`: the one command for operators and developers."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bench import cli as bench_cli
from routing import cli as routes_cli
from stack import up as up_cli
from tracing import cli as traces_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pricingctl",
        description="Run, route and inspect pricingservice.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    routes_cli.add_parser(sub)
    up_cli.add_parser(sub)
    bench_cli.add_parser(sub)
    traces_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return routes_cli.run_guarded(args.handler, args)


if __name__ == "__main__":
    sys.exit(main())
