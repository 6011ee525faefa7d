"""The accuracy figures from the spied calls and the upstream's send log: each call's
own figures, and the comparison with the ground truth where there is one."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from bench.timing_accuracy import HOG_LABEL, summarize

ARGS = argparse.Namespace(
    calls=2, hogs=1, phase_calls=1, reply_ms=1, concurrency=1, pause_ms=0.0, seed=0
)
MS = 1_000_000  # ns


@dataclass
class Timing:
    duration_s: float
    scheduling_delay_s: float
    culprits: dict[str, float] = field(default_factory=dict)
    running_s: float = 0.0
    network_s: float = 0.0
    socket_waits: int = 1

    def top_culprits(self, n: int) -> list[tuple[str, float]]:
        return sorted(self.culprits.items(), key=lambda item: -item[1])[:n]


def test_a_compared_call_and_a_call_the_hogs_did_not_delay() -> None:
    before = 1000 * MS
    raw = {
        # Compared: the request landed 2 ms before the upstream sent, the reply was
        # ready 1 ms after the send and resumed 5 ms later; network_s is off by 0.5 ms.
        1: {
            "timing": Timing(0.010, 0.004, network_s=0.0025),
            "waits": [(0, before + 6 * MS, before + MS, 0)],
            "sent": before - 3 * MS,
        },
        # Delayed 20 ms, mostly by another route: blamed, and named as odd.
        2: {"timing": Timing(0.030, 0.020, {HOG_LABEL: 0.005, "GET /x": 0.015}), "waits": []},
    }
    sent = {1: (before - 2 * MS, before, before + 2 * MS)}
    doc = summarize(ARGS, raw, sent)
    assert doc["calls"] == 2
    assert doc["reply_arrival_in_send_window"] == {"in": 1, "of": 1}
    assert doc["network_minus_true_network_ms"]["max"] == 0.5
    assert doc["true_reply_delay_ms"]["max"] == 6.0
    assert doc["reply_delay_error_ms"]["max"] == -1.0  # measured 5 ms of a true 6
    assert doc["reply_delay_error_by_true_delay"] == [
        {"from_ms": 1.0, "to_ms": 10.0, "n": 1, "max_abs_error_ms": 1.0}
    ]
    assert doc["calls_with_delay_over_10ms"] == 1
    assert doc["share_of_all_delay_pct"] == {"GET /x": 75.0, HOG_LABEL: 25.0}
    (odd,) = doc["calls_where_hogs_got_less_than_half"]
    assert odd.startswith("  call 2: delay 20.0 ms") and "GET /x 15.0 ms" in odd
    assert doc["network_outliers_over_1ms"] == []
