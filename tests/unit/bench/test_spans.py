"""bench.spans: upstream-call timings from the span file, and the tracing switch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.spans import env_for, read_span_file
from tracing.attributes import NETWORK_DURATION, SCHEDULING_DELAY


def _span(
    trace: str, start_ns: int, net_s: float, sched_s: float, kind: int = 3
) -> dict[str, object]:
    return {
        "traceId": trace,
        "spanId": "1" * 16,
        "name": "GET",
        "kind": kind,
        "startTimeUnixNano": str(start_ns),
        "endTimeUnixNano": str(start_ns + 1000),
        "attributes": [
            {"key": NETWORK_DURATION, "value": {"doubleValue": net_s}},
            {"key": SCHEDULING_DELAY, "value": {"doubleValue": sched_s}},
            {"key": "http.method", "value": {"stringValue": "GET"}},
        ],
    }


def test_span_file_hook_reads_otlp_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "spans.otlp.jsonl"
    lines = [
        json.dumps(
            {
                "resourceSpans": [
                    {
                        "resource": {},
                        "scopeSpans": [
                            {
                                "scope": {"name": "tracing"},
                                "spans": [
                                    _span("a" * 32, 100_000, 0.100, 0.002),
                                    _span("a" * 32, 101_000, 0.050, 0.001),
                                    # the server span: sums over its calls, ignored
                                    _span("a" * 32, 99_000, 0.150, 0.003, kind=2),
                                    {"traceId": "b" * 32, "name": "no timing"},
                                ],
                            }
                        ],
                    }
                ]
            }
        ),
        json.dumps(_span("c" * 32, 200_000, 0.100, 0.300)),  # a bare span per line
        json.dumps(_span("d" * 32, 999_000, 0.1, 0.1)),  # outside the window
        '{"resourceSpans": [',  # cut short by a writer that was stopped
    ]
    path.write_text("\n".join(lines) + "\n")
    timings = read_span_file(path, start_ns=0, end_ns=500_000)
    assert timings is not None
    assert len(timings.calls) == 3
    summary = timings.summary()
    assert summary["spans"] == 3
    assert summary["network_duration_ms"] == {"p50": 100.0, "p99": 100.0}
    assert summary["scheduling_delay_ms"] == {"p50": 2.0, "p99": 300.0}
    critical = timings.critical_call()
    # The last to end (tracing.timing.call_state.critical_call), not the longest.
    assert critical["a" * 32].network_s == pytest.approx(0.05)
    assert critical["a" * 32].end_ns == 101_000 + 1000


def test_no_span_file_means_not_available(tmp_path: Path) -> None:
    assert read_span_file(tmp_path / "missing.jsonl") is None
    (tmp_path / "empty.jsonl").write_text("")
    assert read_span_file(tmp_path / "empty.jsonl") is None


def test_tracing_switch_env_is_what_the_pools_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from tracing.settings import Mode, TracingSettings

    for on, mode in ((True, Mode.FULL), (False, Mode.OFF)):
        for key, value in env_for(on).items():
            monkeypatch.setenv(key, value)
        settings = TracingSettings.from_env()
        assert settings.mode is mode
        assert settings.otlp_endpoint is None  # spans go to the span file
