"""The root parser: one sub-command per module, one way to report a bad config.

Exit codes shared by every sub-command: 0 done, 1 it could not be done (a bad route
config: one line naming the file and the key), 2 bad flags (argparse's usage error; every
flag's value is checked at the door by the types in `argtypes`).
Flags follow the sub-command they belong to (`pricingctl routes check --config F`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, cast

from pricingctl import bench, deploy, down, incident, reload, routes, traces, up
from routing.errors import RouteConfigError

Handler = Callable[[argparse.Namespace], int]


class OneLineParser(argparse.ArgumentParser):
    """Bad flags give one line (no usage dump) and exit 2; unknown flags included.

    Every sub-command's parser is one (the root parser passes this class down), so
    the error names the sub-command that refused the flag.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, via `pip install -e .`)."""
    from toolkit.version import package_version

    return package_version(missing="unknown (not installed: make setup)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pricingctl",
        description="Run, route and inspect pricingservice.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(
            dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser
        ),
    )
    routes.add_parser(sub)
    up.add_parser(sub)
    down.add_parser(sub)
    reload.add_parser(sub)
    bench.add_parser(sub)
    traces.add_parser(sub)
    deploy.add_parser(sub)
    incident.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return int(handler(args))
    except RouteConfigError as exc:
        print(f"pricingctl: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
