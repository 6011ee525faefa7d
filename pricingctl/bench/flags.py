"""The flags the parts of `pricingctl bench` share, their defaults, and the checks of
their values (argparse `type=`: a bad value becomes one clear line, exit 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from bench.traffic import GROUPS
from pricingctl import argtypes

DEFAULT_OUT = Path("bench-out")
DEFAULT_RUN_DIR = Path(".run/bench")
# Main comparison: N = 3 (2 cpu + 1 io vs 3 shared). Rates, from CPU per request
# measured on the benchmark VM when it was quiet: a rideshare quote ~26 ms in-process,
# ~37-42 ms in the pool (request parsing, validation, JSON); an offer ~1.6-2 ms in the
# io pool, ~0.7 ms in Envoy, ~0.4 ms in the simulator. 30 quotes/s keeps the two cpu
# workers ~60 % busy (busy, under 85 %) and, with 100 offers/s, the whole 2-core
# machine ~80 % busy: the shared layout must absorb the same work in the same 3
# processes, so it runs hot but not over capacity.
DEFAULT_RATES = {"cpu": 30.0, "offers": 100.0}
DEFAULT_WORKERS = 3
DEFAULT_UPSTREAM_MS = 100.0


@dataclass(frozen=True)
class Defaults:
    duration_s: float
    warmup_s: float
    repeats: int


FULL = Defaults(duration_s=45.0, warmup_s=10.0, repeats=3)
QUICK = Defaults(duration_s=15.0, warmup_s=4.0, repeats=1)


def number(text: str, *, low: float, what: str) -> float:
    """A finite number at least *low* (`argtypes.number`)."""
    return argtypes.number(what, low)(text)


def seconds(low: float) -> Callable[[str], float]:
    return argtypes.number("seconds", low)


def count(low: int, high: int) -> Callable[[str], int]:
    return argtypes.whole(low, high)


#: Above 0 and finite (a rate, a step, a limit in ms).
positive = argtypes.number("value", 0.0, above=True)

_group_rates = argtypes.rates(GROUPS, high=10_000)


def parse_rates(text: str) -> dict[str, float]:
    """`cpu=35,offers=100` (either or both; requests per second, at most 10000)."""
    rates = _group_rates(text)
    if rates.get("offers", 1.0) <= 0:
        raise argparse.ArgumentTypeError("offers must be greater than 0")
    return rates


def common_flags(p: argparse.ArgumentParser, defaults: Defaults) -> None:
    p.add_argument(
        "--quick",
        action="store_true",
        help="one short run: a smoke test (CI), not a measurement to quote",
    )
    p.add_argument(
        "--duration",
        type=seconds(1.0),
        default=None,
        metavar="S",
        help=f"measured seconds per run (default {defaults.duration_s:g})",
    )
    p.add_argument(
        "--warmup",
        type=seconds(0.0),
        default=None,
        metavar="S",
        help=f"discarded seconds before each measurement (default {defaults.warmup_s:g})",
    )
    p.add_argument(
        "--upstream-ms",
        type=argtypes.number("milliseconds", 0.0, 600_000.0),
        default=DEFAULT_UPSTREAM_MS,
        metavar="MS",
        help="every upstream answers after exactly this long (default 100)",
    )
    p.add_argument("--seed", type=argtypes.seed, default=1, help="arrival schedule seed")
    argtypes.add_out_flags(p, DEFAULT_OUT, DEFAULT_RUN_DIR)
    argtypes.add_config_flag(p, None)


def load_flags(p: argparse.ArgumentParser, defaults: Defaults) -> None:
    p.add_argument(
        "--repeats",
        type=count(1, 100),
        default=None,
        help=f"runs per layout, interleaved (default {defaults.repeats})",
    )
    p.add_argument(
        "--workers",
        type=count(2, 64),
        default=DEFAULT_WORKERS,
        help="processes in total: shared N vs cpu N-1 + io 1 (default 3)",
    )
    rates_flag(
        p,
        "cpu=R,offers=R",
        "requests/s: cpu = rideshare quotes, offers = bike + scooter "
        f"(default cpu={DEFAULT_RATES['cpu']:g},offers={DEFAULT_RATES['offers']:g})",
    )


def rates_flag(p: argparse.ArgumentParser, metavar: str, help: str) -> None:
    """--rates KEY=R,...: requests/s per group of the load (`parse_rates`)."""
    p.add_argument("--rates", type=parse_rates, default={}, metavar=metavar, help=help)


def compared(text: str, allowed: Iterable[str], required: str, what: str) -> tuple[str, ...]:
    """A comma-separated list of `allowed`, each once: `required` and at least one
    other, to compare with it."""
    allowed = tuple(allowed)
    chosen = tuple(c.strip() for c in text.split(",") if c.strip())
    unknown = [c for c in chosen if c not in allowed]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {unknown[0]!r}; expected some of {', '.join(allowed)}"
        )
    if required not in chosen or len(set(chosen)) != len(chosen) or len(chosen) < 2:
        raise argparse.ArgumentTypeError(
            f"expected {required} and at least one other {what}, each once"
        )
    return chosen


def some_of(allowed: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: a comma-separated subset of `allowed`, each once."""

    def parse(text: str) -> tuple[str, ...]:
        chosen = tuple(c.strip() for c in text.split(",") if c.strip())
        if not chosen or set(chosen) - set(allowed) or len(set(chosen)) != len(chosen):
            raise argparse.ArgumentTypeError(f"expected some of {', '.join(allowed)}, each once")
        return chosen

    return parse


# The `bench` command's sub-parsers, one function per part adds its own.
Parts: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def timing_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--quick", action="store_true", help="a short run: a smoke test, not a figure to quote"
    )
    argtypes.add_out_flags(p, DEFAULT_OUT)
