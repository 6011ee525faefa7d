"""Per-upstream behaviour as frozen data, and its validation.

The same validation serves the TOML config file and the control API's partial
updates, so a setting is accepted or rejected the same way from both. Every
rejection is a SettingsError that names the offending key with a dotted path
(e.g. ``upstreams.routing.latency.tail_p``).
"""

from __future__ import annotations

import math
import os
import random
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal, cast

Dist = Literal["fixed", "jitter", "longtail"]
Fault = Literal["none", "reset", "malformed", "trickle", "close", "hang"]

UPSTREAMS: Final[tuple[str, ...]] = ("vehicles", "routing", "promotions")
DISTS: Final[tuple[str, ...]] = ("fixed", "jitter", "longtail")
FAULTS: Final[tuple[str, ...]] = ("none", "reset", "malformed", "trickle", "close", "hang")

MAX_DELAY_MS: Final = 600_000.0  # ten minutes: anything longer is a typo
MAX_TRICKLE_MS: Final = 60_000.0

# Which keys each distribution uses. A key that the distribution ignores is an
# error, so `{"dist": "fixed", "jitter_ms": 20}` cannot silently do nothing.
_DIST_KEYS: Final[dict[str, frozenset[str]]] = {
    "fixed": frozenset({"dist", "ms"}),
    "jitter": frozenset({"dist", "ms", "jitter_ms"}),
    "longtail": frozenset({"dist", "ms", "tail_p", "tail_ms"}),
}
_UPSTREAM_KEYS: Final = frozenset(
    {"latency", "error_rate", "error_status", "fault", "fault_rate", "trickle_ms"}
)
_TOP_KEYS: Final = frozenset({"seed", "upstreams"})


class SettingsError(ValueError):
    """A setting is invalid. `field` is the dotted path of the offending key."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Latency:
    """How long an upstream waits before it answers, in milliseconds.

    fixed:    always `ms`
    jitter:   uniform in [ms - jitter_ms, ms + jitter_ms]
    longtail: `ms`, except a fraction `tail_p` of requests take `tail_ms`
    """

    dist: Dist = "fixed"
    ms: float = 0.0
    jitter_ms: float = 0.0
    tail_p: float = 0.0
    tail_ms: float = 0.0

    def sample_ms(self, rng: random.Random) -> float:
        dist = self.dist
        if dist == "fixed":
            return self.ms
        if dist == "jitter":
            return self.ms + (2.0 * rng.random() - 1.0) * self.jitter_ms
        return self.tail_ms if rng.random() < self.tail_p else self.ms

    def mean_ms(self) -> float:
        if self.dist == "longtail":
            return (1.0 - self.tail_p) * self.ms + self.tail_p * self.tail_ms
        return self.ms

    def to_dict(self) -> dict[str, Any]:
        keys = _DIST_KEYS[self.dist]
        out: dict[str, Any] = {"dist": self.dist}
        out.update((k, _plain(getattr(self, k))) for k in _FIELD_ORDER if k in keys)
        return out


_FIELD_ORDER: Final = ("ms", "jitter_ms", "tail_p", "tail_ms")

# What a distribution starts from when an update switches to it.
_DIST_DEFAULTS: Final[dict[str, Latency]] = {
    "fixed": Latency("fixed", 0.0),
    "jitter": Latency("jitter", 0.0, jitter_ms=0.0),
    "longtail": Latency("longtail", 0.0, tail_p=0.01, tail_ms=1000.0),
}


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    """Everything that shapes one upstream's answers.

    error_rate:  fraction of requests answered with `error_status` (problem+json)
    fault:       what goes wrong at the transport level, for a fraction `fault_rate`
                 of requests (1.0 = every request); "none" turns faults off
    trickle_ms:  with fault "trickle", the gap between body bytes
    """

    latency: Latency = Latency()
    error_rate: float = 0.0
    error_status: int = 503
    fault: Fault = "none"
    fault_rate: float = 1.0
    trickle_ms: float = 50.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "latency": self.latency.to_dict(),
            "error_rate": _plain(self.error_rate),
            "error_status": self.error_status,
            "fault": self.fault,
            "fault_rate": _plain(self.fault_rate),
            "trickle_ms": _plain(self.trickle_ms),
        }

    def updated(self, data: object, where: str = "") -> UpstreamSettings:
        """A copy with the keys of `data` (a partial mapping) applied and validated."""
        data = _mapping(data, where)
        _no_unknown_keys(data, _UPSTREAM_KEYS, where)
        changes: dict[str, Any] = {}
        if "latency" in data:
            changes["latency"] = _latency(data["latency"], self.latency, _join(where, "latency"))
        if "error_rate" in data:
            changes["error_rate"] = _fraction(data["error_rate"], _join(where, "error_rate"))
        if "error_status" in data:
            changes["error_status"] = _status(data["error_status"], _join(where, "error_status"))
        if "fault" in data:
            changes["fault"] = _choice(data["fault"], FAULTS, _join(where, "fault"))
        if "fault_rate" in data:
            changes["fault_rate"] = _fraction(data["fault_rate"], _join(where, "fault_rate"))
        if "trickle_ms" in data:
            key = _join(where, "trickle_ms")
            trickle = _number(data["trickle_ms"], key, 0.0, MAX_TRICKLE_MS)
            if trickle <= 0:
                raise SettingsError(key, "must be greater than 0")
            changes["trickle_ms"] = trickle
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class SimulatorConfig:
    """The settings the process starts with (and `POST /_control/reset` returns to)."""

    upstreams: Mapping[str, UpstreamSettings]
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {name: self.upstreams[name].to_dict() for name in UPSTREAMS}


DEFAULT_UPSTREAMS: Final[Mapping[str, UpstreamSettings]] = MappingProxyType(
    {
        "vehicles": UpstreamSettings(Latency("jitter", 35.0, jitter_ms=10.0)),
        "routing": UpstreamSettings(Latency("longtail", 45.0, tail_p=0.01, tail_ms=400.0)),
        "promotions": UpstreamSettings(Latency("jitter", 20.0, jitter_ms=5.0)),
    }
)

DEFAULT_CONFIG: Final = SimulatorConfig(upstreams=MappingProxyType(dict(DEFAULT_UPSTREAMS)))


def parse_config(data: Mapping[str, Any]) -> SimulatorConfig:
    """Validate a parsed config document; upstreams it omits keep the defaults."""
    _no_unknown_keys(data, _TOP_KEYS, "")
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise SettingsError("seed", "must be an integer")
    upstreams = dict(DEFAULT_UPSTREAMS)
    section = _mapping(data.get("upstreams", {}), "upstreams")
    for name, value in section.items():
        if name not in upstreams:
            raise SettingsError(
                f"upstreams.{name}", f"unknown upstream (known: {', '.join(UPSTREAMS)})"
            )
        upstreams[name] = upstreams[name].updated(value, f"upstreams.{name}")
    return SimulatorConfig(upstreams=MappingProxyType(upstreams), seed=seed)


def load_config(path: str | os.PathLike[str]) -> SimulatorConfig:
    """Read a TOML config file. Raises SettingsError (field "config" for I/O and syntax)."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError("config", f"cannot read {source}: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError("config", f"{source} is not valid TOML: {exc}") from None
    return parse_config(data)


# --- validation helpers --------------------------------------------------------------


def _latency(value: object, current: Latency, where: str) -> Latency:
    data = _mapping(value, where)
    base = current
    if "dist" in data:
        dist = _choice(data["dist"], DISTS, _join(where, "dist"))
        if dist != current.dist:
            base = _DIST_DEFAULTS[dist]
    allowed = _DIST_KEYS[base.dist]
    for key in data:
        if key not in allowed:
            known = _DIST_KEYS["longtail"] | _DIST_KEYS["jitter"]
            if key in known:
                raise SettingsError(_join(where, key), f"not used by dist {base.dist!r}")
            raise SettingsError(_join(where, key), "unknown key")
    changes: dict[str, Any] = {}
    for key in ("ms", "jitter_ms", "tail_ms"):
        if key in data:
            changes[key] = _number(data[key], _join(where, key), 0.0, MAX_DELAY_MS)
    if "tail_p" in data:
        changes["tail_p"] = _fraction(data["tail_p"], _join(where, "tail_p"))
    latency = replace(base, **changes)
    if latency.dist == "jitter" and latency.jitter_ms > latency.ms:
        raise SettingsError(
            _join(where, "jitter_ms"),
            f"must not exceed ms ({_plain(latency.ms)}): delays cannot be negative",
        )
    return latency


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SettingsError(where or "body", "must be an object/table")
    return cast("Mapping[str, Any]", value)


def _no_unknown_keys(data: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise SettingsError(
                _join(where, str(key)), f"unknown key (known: {', '.join(sorted(allowed))})"
            )


def _number(value: object, where: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SettingsError(where, "must be a number")
    number = float(value)
    if not math.isfinite(number) or number < lo or number > hi:
        raise SettingsError(where, f"must be between {_plain(lo)} and {_plain(hi)}")
    return number


def _fraction(value: object, where: str) -> float:
    return _number(value, where, 0.0, 1.0)


def _status(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 400 <= value <= 599:
        raise SettingsError(where, "must be an integer HTTP status between 400 and 599")
    return value


def _choice(value: object, choices: tuple[str, ...], where: str) -> Any:
    if value not in choices:
        raise SettingsError(where, f"must be one of {', '.join(choices)}")
    return value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _plain(number: float) -> float | int:
    """100.0 -> 100, so settings read back the way they were written."""
    return int(number) if float(number).is_integer() else number
