"""The kinds of value `pricingctl`'s flags take, checked at the door (argparse `type=`).

A bad value is one line naming the flag and exit 2, before anything runs: never a
traceback from deep inside, never a value taken silently (`nan`, `inf`, `1e400`, a
negative rate, an empty path, a URL without a host). Every command's flags use these;
a test feeds every flag of every command bad values and walks the parsers.

A meaning shared by several commands has one function here and one flag name
everywhere: `output` (`--out`), `routes_file` (`--config`), `jaeger_url`
(`--from-jaeger`), `metrics_url` (`--from-metrics`), `span_file` (`--from-spans`),
`port` (`--port`, `--<what>-port`).
"""

from __future__ import annotations

import argparse
import math
import re
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path

Error = argparse.ArgumentTypeError

#: Requests per second a rate flag takes at most: beyond any machine this runs on, and
#: small enough that replica counts and load schedules made from it stay ordinary.
MAX_RATE_PER_S = 1_000_000.0


def _show(bound: float) -> str:
    """A bound as people write it: 1000000, not 1e+06."""
    return str(int(bound)) if bound == int(bound) else f"{bound:g}"


def number(
    what: str, low: float, high: float = math.inf, *, above: bool = False
) -> Callable[[str], float]:
    """A finite float in [low, high] (in (low, high] with ``above``); *what* names it
    in the error (`seconds`, `percent`)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise Error(f"expected a number ({what}), got {text!r}") from None
        if not math.isfinite(value):
            raise Error(f"expected a finite number ({what}), got {text!r}")
        if value < low or (above and value == low) or value > high:
            bounds = f"{'above' if above else 'at least'} {_show(low)}"
            if high != math.inf:
                bounds += f" and at most {_show(high)}"
            raise Error(f"{what}: must be {bounds}, got {text}")
        return value

    return parse


def whole(low: int, high: int, what: str = "a whole number") -> Callable[[str], int]:
    """An int in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise Error(f"expected {what}, got {text!r}") from None
        if not low <= value <= high:
            raise Error(f"must be between {low} and {high}, got {value}")
        return value

    return parse


#: Requests per second: above 0, at most MAX_RATE_PER_S.
rate = number("requests/s", 0.0, MAX_RATE_PER_S, above=True)
#: Requests per second where none is a meaningful target (a group of the load left out).
rate_or_zero = number("requests/s", 0.0, MAX_RATE_PER_S)
#: Of requests traced, sampled, ...: 0 to 100.
percent = number("percent", 0.0, 100.0)
#: Seeds of random schedules and synthetic services.
seed = whole(0, 2**31 - 1, "a seed (a whole number)")
#: Traces or spans read from Jaeger.
limit = whole(1, 1_000_000, "a count (a whole number)")


def port(text: str) -> int:
    """A TCP port, 1-65535."""
    try:
        value = int(text)
    except ValueError:
        raise Error(f"expected a port (1-65535), got {text!r}") from None
    if not 1 <= value <= 65535:
        raise Error(f"a port is 1-65535, got {value}")
    return value


def url(text: str, example: str = "http://127.0.0.1:8080") -> str:
    """An http(s) URL with a host (and, if given, a port in range)."""
    wanted = f"expected an http(s) URL with a host, e.g. {example}, got {text!r}"
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Error(wanted)
    try:
        host, _port = parts.hostname, parts.port
    except ValueError as exc:  # a port out of range or not a number
        raise Error(f"{text!r}: {exc}") from None
    if not host or _port == 0:
        raise Error(wanted)
    return text


def jaeger_url(text: str) -> str:
    """Jaeger's query service (its API and UI)."""
    return url(text, "http://127.0.0.1:16686")


def metrics_url(text: str) -> str:
    """A pool's Prometheus endpoint."""
    return url(text, "http://127.0.0.1:8102/metrics")


def _not_flag_like(text: str, what: str, hint: str = "") -> str:
    if not text.strip():
        raise Error(f"expected {what}, got an empty string")
    if text.startswith("-"):
        raise Error(f"{text!r} looks like a flag, not {what}{hint}")
    if any(not c.isprintable() for c in text):
        raise Error(f"{what} {text!r} holds a control character")
    return text


def path(text: str) -> Path:
    """A path to write to or create (a run directory, a folder of configs)."""
    return Path(_not_flag_like(text, "a path", f" (write ./{text} if you mean it)"))


def output(text: str) -> Path:
    """Where a command writes its output (a file or a directory, as its help says)."""
    return Path(_not_flag_like(text, "an output path", f" (write ./{text} if you mean it)"))


def existing_file(text: str) -> Path:
    """A file to read: it must exist."""
    found = Path(_not_flag_like(text, "a file", f" (write ./{text} if you mean it)"))
    if not found.is_file():
        raise Error(f"no such file: {text}" if not found.exists() else f"not a file: {text}")
    return found


def routes_file(text: str) -> Path:
    """The route config to read (a routes.toml)."""
    return existing_file(text)


def add_config_flag(p: argparse.ArgumentParser, default: object) -> None:
    """`--config FILE`, the route config, as every command spells it. A command whose
    actions take it too gives the action `argparse.SUPPRESS`: without the flag there,
    the value given before the action stays (`routes --config F check`)."""
    p.add_argument(
        "--config", type=routes_file, default=default, help="route config (default: routes.toml)"
    )


def add_out_flags(
    p: argparse.ArgumentParser,
    default_out: Path,
    default_run_dir: Path | None = None,
    *,
    out_help: str = "results directory",
    run_dir_help: str = "logs, raw samples, derived configs",
) -> None:
    """`--out DIR`, where a command writes its results, and (with *default_run_dir*)
    `--run-dir DIR`, where the stack it starts keeps its logs and configs, as every
    command that writes results spells them; each help ends with its default."""
    p.add_argument(
        "--out", type=output, default=default_out, help=f"{out_help} (default {default_out})"
    )
    if default_run_dir is not None:
        p.add_argument(
            "--run-dir",
            type=path,
            default=default_run_dir,
            help=f"{run_dir_help} (default {default_run_dir})",
        )


def span_file(text: str) -> Path:
    """An OTLP JSON-lines span file to read."""
    return existing_file(text)


def name(text: str) -> str:
    """A name (a service, a pool): not empty, no blanks, not a flag."""
    _not_flag_like(text, "a name")
    if any(c.isspace() for c in text):
        raise Error(f"a name has no blanks, got {text!r}")
    return text


_HEX = re.compile(r"[0-9a-fA-F]{1,32}")


def trace_id(text: str) -> str:
    """A trace id: 1 to 32 hexadecimal digits (Jaeger drops leading zeros)."""
    if not _HEX.fullmatch(text):
        raise Error(f"expected a trace id (up to 32 hexadecimal digits), got {text!r}")
    return text


def lookback(text: str) -> str:
    """How far back to read: a positive number and s, m, h or d (15m, 2h)."""
    from tracing.readback.spans import lookback_s

    try:
        seconds = lookback_s(text)
    except ValueError as exc:
        raise Error(str(exc)) from None
    if not 0 < seconds < math.inf:
        raise Error(f"lookback {text!r}: must be above 0 and finite")
    return text


def rates(
    keys: Iterable[str] | None = None, high: float = MAX_RATE_PER_S
) -> Callable[[str], dict[str, float]]:
    """`KEY=RATE[,KEY=RATE...]`: requests/s per key (0 to *high*), each key once; with
    *keys*, only those."""
    allowed = tuple(keys) if keys is not None else None
    each = number("requests/s", 0.0, high)

    def parse(text: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for item in text.split(","):
            key, sep, value = (x.strip() for x in item.partition("="))
            if not sep or not key or (allowed is not None and key not in allowed):
                keys_are = f" with KEY in {', '.join(allowed)}" if allowed is not None else ""
                raise Error(f"expected KEY=RATE[,KEY=RATE]{keys_are}, got {item.strip()!r}")
            if key in out:
                raise Error(f"{key} given twice")
            try:
                out[key] = each(value)
            except Error as exc:
                raise Error(f"{key}: {exc}") from None
        return out

    return parse
