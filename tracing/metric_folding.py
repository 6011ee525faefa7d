"""The in-process side of the pool's metrics: what the request path observes into, and
how each flush folds it into prometheus_client, keeping the families bounded.

A family keeps an in-process child (``LocalCounter`` or a ``tracing.timing.histogram``)
per label values: the request path does a dict lookup and an addition, never touches
prometheus_client. ``flush`` adds what each child gained to the prometheus_client
metric. The top-k families name at most *top_k* routes (or culprits per victim) for
good, the busiest when they first had room, and fold every other one into
``CULPRIT_OTHER``, counting each label set folded once (``SERIES_FOLDED``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracing import prometheus_adapter
from tracing.metric_families import CULPRIT_OTHER
from tracing.timing import histogram


class LocalCounter:
    """A counter the request path increments: a float addition, no lock (the hub runs
    one greenlet at a time; threads' counts come in through ``PoolMetrics.sync``)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class Family:
    """One metric family as the request path sees it: an in-process child per label
    values (``LocalCounter`` or ``Histogram``), created on first use and looked up by
    a dict lookup (``labels()`` validates and takes a lock on every call). ``flush``
    adds what each child gained since the last flush to the prometheus_client metric."""

    __slots__ = ("_bounds", "_by", "_flushed", "_metric", "_targets")

    def __init__(self, metric: Any, bounds: Sequence[float] | None = None) -> None:
        self._metric = metric
        #: A histogram's bounds (without ``+Inf``); None: a counter.
        self._bounds = tuple(bounds) if bounds is not None else None
        self._by: dict[tuple[str, ...], Any] = {}
        # Per label values: what the prometheus_client child has already been given.
        self._flushed: dict[tuple[str, ...], Any] = {}
        self._targets: dict[tuple[str, ...], Any] = {}

    @property
    def metric(self) -> Any:
        """The prometheus_client metric behind the family."""
        return self._metric

    def __call__(self, *values: str) -> Any:
        # The histogram kind of the path that runs (``native``), looked up on first use.
        child = self._by.get(values)
        if child is None:
            child = (
                LocalCounter() if self._bounds is None else histogram.new_histogram(self._bounds)
            )
            self._by[values] = child
        return child

    def _target(self, values: tuple[str, ...]) -> Any:
        target = self._targets.get(values)
        if target is None:
            target = self._metric.labels(*values) if values else self._metric
            self._targets[values] = target
        return target

    def flush(self) -> None:
        """Fold what every child gained since the last flush into prometheus_client.
        What is taken is recorded before it is written: a flush that ran again
        meanwhile would add only what is new."""
        for values, child in list(self._by.items()):
            if self._bounds is not None:
                counts, total = list(child.counts), child.sum
                before = self._flushed.get(values)
                if before is None:
                    before = ([0] * len(counts), 0.0)
                gained = [now - then for now, then in zip(counts, before[0], strict=True)]
                if not any(gained):
                    continue
                self._flushed[values] = (counts, total)
                self._add(values, gained, total - before[1])
            else:
                now = child.value
                gained = now - self._flushed.get(values, 0.0)
                if not gained:
                    continue
                self._flushed[values] = now
                self._target(self._exposed(values)).inc(gained)

    def _add(self, values: tuple[str, ...], gained: Sequence[int], sum_delta: float) -> None:
        """Fold a histogram child's gains (per bucket, and their sum) into the exposed
        series."""
        prometheus_adapter.add_to_histogram(self._target(self._exposed(values)), gained, sum_delta)

    def _exposed(self, values: tuple[str, ...]) -> tuple[str, ...]:
        """The label values *values*' gains are exposed under (their own here)."""
        return values


class TopRoutesFamily(Family):
    """A per-route histogram that exposes at most *top_k* routes per worker by name.

    The route is the label values up to *route_at* included (``("GET /x",)`` for the
    timing histograms; ``(method, http_route)`` for the RED one, whose status and pool
    follow). The request path is the plain family's. At each flush, while there is
    room, the unnamed routes with the most observations so far are named, for good (a
    series never moves), every series of a named route with it; every other route's
    gains go to its label values with the route label (*route_at*) set to
    CULPRIT_OTHER, so the family's count and sum stay the worker's whole, and each
    route folded for the first time counts once in *folded*."""

    __slots__ = ("_folded", "_folded_routes", "_named", "_route_at", "_top_k")

    def __init__(
        self,
        metric: Any,
        bounds: Sequence[float],
        top_k: int,
        folded: LocalCounter,
        *,
        route_at: int = 0,
    ) -> None:
        super().__init__(metric, bounds)
        self._top_k = top_k
        self._route_at = route_at
        self._named: set[tuple[str, ...]] = set()
        self._folded = folded
        self._folded_routes: set[tuple[str, ...]] = set()

    def flush(self) -> None:
        if len(self._named) < self._top_k:
            unnamed: dict[tuple[str, ...], int] = {}
            for values, child in list(self._by.items()):
                route = values[: self._route_at + 1]
                if route not in self._named:
                    unnamed[route] = unnamed.get(route, 0) + sum(child.counts)
            ranked = sorted(unnamed.items(), key=lambda pair: (-pair[1], pair[0]))
            for route, _ in ranked[: self._top_k - len(self._named)]:
                self._named.add(route)
        super().flush()

    def _exposed(self, values: tuple[str, ...]) -> tuple[str, ...]:
        at = self._route_at
        route = values[: at + 1]
        if route in self._named:
            return values
        if route not in self._folded_routes:
            self._folded_routes.add(route)
            self._folded.inc()
        return (*values[:at], CULPRIT_OTHER, *values[at + 1 :])


class RedFamily(TopRoutesFamily):
    """The RED histogram (``HTTP_SERVER_DURATION``: method, route, status, pool), named
    for the top *top_k* (method, route) only, whose every label set's count and sum
    also go, unfolded, to the summary *totals* (``ROUTE_REQUESTS``): one observation on
    the request path, exact requests per route in the scrape."""

    __slots__ = ("_totals", "_totals_targets")

    def __init__(
        self,
        metric: Any,
        bounds: Sequence[float],
        top_k: int,
        folded: LocalCounter,
        totals: Any,
    ) -> None:
        super().__init__(metric, bounds, top_k, folded, route_at=1)
        self._totals = totals
        self._totals_targets: dict[tuple[str, ...], Any] = {}

    def _add(self, values: tuple[str, ...], gained: Sequence[int], sum_delta: float) -> None:
        super()._add(values, gained, sum_delta)
        target = self._totals_targets.get(values)
        if target is None:
            target = self._totals_targets[values] = self._totals.labels(*values)
        prometheus_adapter.add_to_summary(target, sum(gained), sum_delta)


class TopCulpritsFamily(Family):
    """A (culprit, victim) counter that exposes at most *top_k* culprits per victim.

    The request path is the plain family's (an in-process counter per pair, created on
    first use). At each flush, a victim with room for more named culprits takes the
    unnamed ones with the most seconds so far; a named culprit keeps its series for
    good (a counter never moves). Every other culprit's gain goes to ``(CULPRIT_OTHER,
    victim)``, so a victim's culprit seconds still sum to what was measured, and each
    pair folded for the first time counts once in *folded*."""

    __slots__ = ("_folded", "_folded_pairs", "_named", "_top_k")

    def __init__(self, metric: Any, top_k: int, folded: LocalCounter) -> None:
        super().__init__(metric)
        self._top_k = top_k
        self._named: dict[str, set[str]] = {}
        self._folded = folded
        self._folded_pairs: set[tuple[str, ...]] = set()

    def flush(self) -> None:
        by_victim: dict[str, list[tuple[float, str]]] = {}
        for (culprit, victim), child in list(self._by.items()):
            by_victim.setdefault(victim, []).append((child.value, culprit))
        for victim, totals in by_victim.items():
            named = self._named.setdefault(victim, set())
            totals.sort(reverse=True)
            for _, culprit in totals:
                if len(named) >= self._top_k:
                    break
                named.add(culprit)
            for total, culprit in totals:
                pair = (culprit, victim)
                gained = total - self._flushed.get(pair, 0.0)
                if not gained:
                    continue
                self._flushed[pair] = total
                if culprit in named:
                    self._target(pair).inc(gained)
                    continue
                self._target((CULPRIT_OTHER, victim)).inc(gained)
                if pair not in self._folded_pairs:
                    self._folded_pairs.add(pair)
                    self._folded.inc()
