"""The incident `pricingctl incident` replays: traffic, timings and the target shape,
read from one small TOML file (`incident.toml` documents every key).

A bad file is refused at load time with one line naming the file and the key
(:class:`ScenarioError`): an unknown table or key, a value of the wrong type, out of
range, or an endpoint the benchmark cannot send.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.schedule import Polls
from bench.traffic import BATCH_KINDS, CPU_KINDS, OFFER_KINDS
from stack.launch import PROJECT_ROOT

DEFAULT_SCENARIO = PROJECT_ROOT / "incident.toml"


class ScenarioError(ValueError):
    """The scenario file cannot be used; the message is one line naming file and key."""


@dataclass(frozen=True)
class Scenario:
    source: Path
    polls: Polls
    cap_ms: float
    # endpoint -> the share of the offers' pool its requests keep busy (0-1), as a
    # fraction of the capacity `pricingctl incident` measures at start
    cpu_shares: Mapping[str, float]
    upstream_ms: float
    offer_timeout_ms: int
    warmup_s: float
    before_s: float
    settle_s: float
    after_s: float
    seed: int
    before_within_cap_max: float
    after_within_cap_min: float
    p999_drop_min: float

    @property
    def offer_kinds(self) -> tuple[str, ...]:
        return self.polls.kinds

    @property
    def cpu_kinds(self) -> tuple[str, ...]:
        return tuple(k for k, share in self.cpu_shares.items() if share > 0)

    def to_json(self) -> dict[str, object]:
        return {
            "source": str(self.source),
            "clients": self.polls.clients,
            "poll_interval_s": self.polls.interval_s,
            "offers": list(self.polls.kinds),
            "cap_ms": self.cap_ms,
            "cpu_shares": dict(self.cpu_shares),
            "upstream_ms": self.upstream_ms,
            "offer_timeout_ms": self.offer_timeout_ms,
            "warmup_s": self.warmup_s,
            "before_s": self.before_s,
            "settle_s": self.settle_s,
            "after_s": self.after_s,
            "seed": self.seed,
            "before_within_cap_max": self.before_within_cap_max,
            "after_within_cap_min": self.after_within_cap_min,
            "p999_drop_min": self.p999_drop_min,
        }


# table -> key -> (type, low, high); a number within [low, high].
_NUMBERS: Mapping[str, Mapping[str, tuple[type, float, float]]] = {
    "clients": {
        "count": (int, 1, 5000),
        "poll_interval_s": (float, 0.1, 60),
        "cap_ms": (float, 10, 60_000),
    },
    "service": {"upstream_ms": (float, 0, 10_000), "offer_timeout_ms": (int, 10, 60_000)},
    "timing": {
        "warmup_s": (float, 0, 600),
        "before_s": (float, 1, 3600),
        "settle_s": (float, 0, 600),
        "after_s": (float, 1, 3600),
        "seed": (int, 0, 2**31),
    },
    "target": {
        "before_within_cap_max": (float, 0, 1),
        "after_within_cap_min": (float, 0, 1),
        "p999_drop_min": (float, 0, 1000),
    },
}
_TABLES = (*_NUMBERS, "cpu")


def load_scenario(path: Path) -> Scenario:
    """The scenario in *path*, checked; ScenarioError (one line) otherwise."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read it ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: not TOML ({exc})") from None
    return _scenario(path, doc)


def _scenario(path: Path, doc: Mapping[str, Any]) -> Scenario:
    def fail(message: str) -> ScenarioError:
        return ScenarioError(f"{path}: {message}")

    for table in doc:
        if table not in _TABLES:
            raise fail(f"unknown table [{table}] (known: {', '.join(_TABLES)})")
        if not isinstance(doc[table], dict):
            raise fail(f"[{table}] must be a table")
    n = {t: _numbers(doc.get(t, {}), t, keys, fail) for t, keys in _NUMBERS.items()}
    clients = doc.get("clients", {})
    offers = clients.get("offers")
    if not isinstance(offers, list) or not offers or not all(k in OFFER_KINDS for k in offers):
        raise fail(f"[clients].offers: a list of {', '.join(OFFER_KINDS)}, got {offers!r}")
    cpu = _cpu_shares(doc.get("cpu", {}), fail)
    if n["service"]["offer_timeout_ms"] < n["clients"]["cap_ms"]:
        raise fail("[service].offer_timeout_ms: below [clients].cap_ms (no late offer is seen)")
    return Scenario(
        source=path,
        polls=Polls(n["clients"]["count"], n["clients"]["poll_interval_s"], tuple(offers)),
        cap_ms=n["clients"]["cap_ms"],
        cpu_shares=cpu,
        **n["service"],
        **n["timing"],
        **n["target"],
    )


def _numbers(
    table: Mapping[str, Any],
    name: str,
    keys: Mapping[str, tuple[type, float, float]],
    fail: Any,
) -> dict[str, Any]:
    extra = set(table) - set(keys) - ({"offers"} if name == "clients" else set())
    if extra:
        raise fail(f"[{name}].{sorted(extra)[0]}: unknown key (known: {', '.join(keys)})")
    out: dict[str, Any] = {}
    for key, (kind, low, high) in keys.items():
        if key not in table:
            raise fail(f"[{name}].{key}: missing")
        value = table[key]
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not (whole or (kind is float and isinstance(value, float))):
            wanted = "a whole number" if kind is int else "a number"
            raise fail(f"[{name}].{key}: {wanted} from {low:g} to {high:g}, got {value!r}")
        if not low <= value <= high:
            raise fail(f"[{name}].{key}: {value!r} is outside {low:g} to {high:g}")
        out[key] = kind(value)
    return out


def _cpu_shares(table: Mapping[str, Any], fail: Any) -> dict[str, float]:
    known = (*CPU_KINDS, *BATCH_KINDS)
    shares: dict[str, float] = {}
    for kind, share in table.items():
        if kind not in known:
            raise fail(
                f"[cpu].{kind}: not an endpoint the replay sends (known: {', '.join(known)})"
            )
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share < 1:
            raise fail(
                f"[cpu].{kind}: a share of the pool's measured capacity, from 0 to below 1, "
                f"got {share!r}"
            )
        shares[kind] = float(share)
    if sum(shares.values()) >= 1:
        raise fail("[cpu]: the shares add up to the pool's whole capacity or more (a backlog)")
    if not any(shares.values()):
        raise fail("[cpu]: no CPU-heavy endpoint with a share above 0 (nothing to hold the loop)")
    return shares
