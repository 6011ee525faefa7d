"""Per-group summaries of the generator's samples.

Percentiles are nearest-rank (`tracing.readback.report.percentile`, the project's one):
always a latency that was actually observed, never an interpolation between two.
Failed requests stay in the latency distribution, counted at the route's deadline or
later (`failure_floor_s`): a fast 503 is a miss, not a fast answer, so errors can
never make the percentiles look better.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bench.loadgen import FAILURE_NAMES, Samples
from tracing.readback.report import percentile

OK_STATUS = 200


@dataclass(frozen=True)
class Rows:
    """The samples of some kinds inside a window, possibly pooled over several runs."""

    latency_s: tuple[float, ...]
    status: tuple[int, ...]
    lag_s: tuple[float, ...]
    window_s: float

    @classmethod
    def select(cls, samples: Samples, kinds: Iterable[str], start_s: float, end_s: float) -> Rows:
        """Rows whose due time is in [start_s, end_s) and whose kind is in `kinds`."""
        wanted = {i for i, k in enumerate(samples.kinds) if k in set(kinds)}
        idx = [
            i
            for i, (k, t) in enumerate(zip(samples.kind, samples.scheduled_s, strict=True))
            if k in wanted and start_s <= t < end_s
        ]
        return cls(
            latency_s=tuple(samples.latency_s[i] for i in idx),
            status=tuple(samples.status[i] for i in idx),
            lag_s=tuple(samples.lag_s[i] for i in idx),
            window_s=end_s - start_s,
        )

    def effective_latency_s(self, failure_floor_s: float | None) -> list[float]:
        """Latencies with every non-200 counted at `failure_floor_s` or later."""
        if failure_floor_s is None:
            return list(self.latency_s)
        return [
            x if s == OK_STATUS else max(x, failure_floor_s)
            for x, s in zip(self.latency_s, self.status, strict=True)
        ]

    @classmethod
    def pooled(cls, parts: Sequence[Rows]) -> Rows:
        return cls(
            latency_s=tuple(x for p in parts for x in p.latency_s),
            status=tuple(x for p in parts for x in p.status),
            lag_s=tuple(x for p in parts for x in p.lag_s),
            window_s=sum(p.window_s for p in parts),
        )


@dataclass(frozen=True)
class GroupStats:
    """What the report says about one group of requests (offers, or the CPU endpoint)."""

    count: int
    ok: int
    offered_rps: float
    rps: float  # 200 responses per second of the window
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    # Status 200 within the deadline; None when the group has no deadline.
    within_deadline: float | None
    failures: dict[str, int] = field(default_factory=dict)  # by failure name / http_<code>

    @classmethod
    def of(
        cls, rows: Rows, deadline_s: float | None = None, failure_floor_s: float | None = None
    ) -> GroupStats:
        """`deadline_s`: for `within_deadline`; failures count at `failure_floor_s`
        (default: the deadline) or later in the percentiles."""
        if not rows.status:
            raise ValueError("no samples in the window")
        floor = failure_floor_s if failure_floor_s is not None else deadline_s
        lat = sorted(rows.effective_latency_s(floor))
        ok = sum(1 for s in rows.status if s == OK_STATUS)
        failures: dict[str, int] = {}
        for s in rows.status:
            if s != OK_STATUS:
                name = FAILURE_NAMES.get(s, f"http_{s}")
                failures[name] = failures.get(name, 0) + 1
        within = None
        if deadline_s is not None:
            good = sum(
                1
                for s, x in zip(rows.status, rows.latency_s, strict=True)
                if s == OK_STATUS and x <= deadline_s
            )
            within = good / len(rows.status)
        return cls(
            count=len(rows.status),
            ok=ok,
            offered_rps=len(rows.status) / rows.window_s,
            rps=ok / rows.window_s,
            p50_ms=percentile(lat, 50) * 1000,
            p95_ms=percentile(lat, 95) * 1000,
            p99_ms=percentile(lat, 99) * 1000,
            p999_ms=percentile(lat, 99.9) * 1000,
            max_ms=lat[-1] * 1000,
            within_deadline=within,
            failures=dict(sorted(failures.items())),
        )

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "count": self.count,
            "ok": self.ok,
            "offered_rps": round(self.offered_rps, 2),
            "rps": round(self.rps, 2),
            "p50_ms": round(self.p50_ms, 2),
            "p95_ms": round(self.p95_ms, 2),
            "p99_ms": round(self.p99_ms, 2),
            "p999_ms": round(self.p999_ms, 2),
            "max_ms": round(self.max_ms, 2),
            "failures": self.failures,
        }
        if self.within_deadline is not None:
            out["within_deadline"] = round(self.within_deadline, 6)
        return out


def lag_summary_ms(rows: Rows) -> dict[str, float]:
    """How late the generator sent requests: small values mean it kept its schedule."""
    lag = sorted(rows.lag_s)
    if not lag:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    return {
        "p50_ms": round(percentile(lag, 50) * 1000, 3),
        "p99_ms": round(percentile(lag, 99) * 1000, 3),
        "max_ms": round(lag[-1] * 1000, 3),
    }


def median_and_p99(values: Sequence[float]) -> tuple[float, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return percentile(ordered, 50), percentile(ordered, 99)


# Student's t, two-sided 95 %, by degrees of freedom (1-30); past 30, the normal's 1.96.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def mean_interval95(values: Sequence[float]) -> tuple[float, float, float] | None:
    """The mean of *values* (each repeat's paired difference, say) and its 95 %
    confidence interval, Student's t over the repeats: (mean, low, high). None for fewer
    than two values: one repeat says nothing of the spread."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    half = (_T975[n - 2] if n - 1 <= len(_T975) else 1.96) * sd / n**0.5
    return mean, mean - half, mean + half
