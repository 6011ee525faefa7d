"""What the simulator keeps grows to its caps and no further: the records deque and the
response and cell caches fill (the long soak's simulator RSS climbs while they do) and
then stay bounded, by count and in traced memory (tracemalloc: only what is allocated
while the test runs, so garbage that earlier tests leave behind cannot move the figure,
as it moved the process-wide allocated blocks)."""

from __future__ import annotations

import asyncio
import gc
import random
import tracemalloc
from typing import Any

import pytest

from simulator import responses, server
from simulator.model import UPSTREAMS, parse_config
from simulator.server import HttpProtocol, Simulator

CAP = 300
INSTANT = {name: {"latency": {"dist": "fixed", "ms": 0}} for name in UPSTREAMS}


class _Sink(asyncio.Transport):
    """A connection's far end that reads nothing back: the test counts what is kept."""

    def write(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def _serve(sim: Simulator, first: int, count: int) -> None:
    conn = HttpProtocol(sim)
    conn.connection_made(_Sink())
    for i in range(first, first + count):  # every query new, every request traced
        head = b" HTTP/1.1\r\nHost: sim\r\ntraceparent: 00-%032x-%016x-01\r\n\r\n" % (i, i)
        conn.data_received(b"GET /vehicles/v1/nearby?lat=%.5f&lng=-122.41" % (37 + i / 1e5) + head)
        conn.data_received(b"GET /promotions/v1/active?user_id=u%d" % i + head)


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_records_and_caches_stop_growing_at_their_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "RECORDS_MAX", CAP)
    monkeypatch.setattr(server, "CACHE_MAX", CAP)
    monkeypatch.setattr(responses, "CELL_CACHE_MAX", CAP)
    responses._cells.clear()
    sim = Simulator(parse_config({"upstreams": INSTANT}), rng=random.Random(1))
    tracemalloc.start()
    try:
        before = _traced()
        _serve(sim, 0, 2 * CAP)  # past every cap
        filled = _traced()
        _serve(sim, 2 * CAP, 4 * CAP)  # twice as many again
        after = _traced()
    finally:
        tracemalloc.stop()
    assert len(sim.records) == CAP
    assert all(len(cache) <= CAP for _, _, cache in sim.routes.values())
    assert len(responses._cells) <= CAP
    assert sum(sim.requests.values()) == 12 * CAP
    # Filling took hundreds of bytes a request; twice the requests since added a small fraction.
    assert filled - before > 100 * CAP
    assert after - filled < (filled - before) / 10
