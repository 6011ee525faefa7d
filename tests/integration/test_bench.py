"""`pricingctl bench --quick` end to end: real stacks, real load, real files.

Structure and sanity only (counts, ordered percentiles, fractions in range, PNGs
that are PNGs). Never a timing: this machine is shared and the numbers are the
benchmark's business, not the test's.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.integration.support.cli import pricingctl

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PNG = b"\x89PNG\r\n\x1a\n"


def assert_ordered(stats: dict[str, Any]) -> None:
    assert stats["count"] > 0
    assert 0 <= stats["ok"] <= stats["count"]
    assert stats["p50_ms"] <= stats["p95_ms"] <= stats["p99_ms"] <= stats["p999_ms"]
    assert stats["p999_ms"] <= stats["max_ms"]
    assert stats["p50_ms"] > 0


def test_bench_quick_writes_results_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # --quick's one repeat, in windows of seconds (what this checks is the files).
    done = pricingctl(
        "bench",
        *("--quick", "--duration", "3", "--warmup", "1"),
        *("--out", str(out), "--run-dir", str(tmp_path / "run")),
        timeout_s=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["upstream_floor_ms"] > 0
    assert set(doc["layouts"]) == {"shared", "split"}
    for name, layout in doc["layouts"].items():
        offers, cpu = layout["offers"], layout["cpu"]
        assert_ordered(offers)
        assert_ordered(cpu)
        assert 0.0 <= offers["within_deadline"] <= 1.0
        assert cpu["rps"] >= 0
        assert len(layout["repeats"]) == 1
        run = layout["repeats"][0]
        components = set(run["cpu_use"])
        assert {"loadgen", "simulator", "envoy", "other processes"} <= components
        pools = {"pool-shared"} if name == "shared" else {"pool-cpu", "pool-io"}
        assert pools <= components
        assert layout["tracing"]["scheduling_delay_ms"] == "n/a"
        assert layout["time_breakdown"]["bars"]
    assert {t["name"] for t in doc["targets"]} >= {
        "split offers p99 vs upstream floor p99",
        "offers p99 shared / split",
    }
    for png in ("offers_latency_cdf.png", "offers_time_breakdown.png", "cpu_by_component.png"):
        assert (out / png).read_bytes()[:8] == PNG
    assert "| **split** | **all** |" in (out / "results.md").read_text()

    # --replot rebuilds the same numbers from the kept samples, measuring nothing.
    replot = pricingctl(
        "bench", "--replot", "--out", str(out), "--run-dir", str(tmp_path / "run"), timeout_s=120
    )
    assert replot.returncode == 0, replot.stderr[-3000:]
    again = json.loads((out / "results.json").read_text())
    assert again["layouts"] == doc["layouts"]
    assert again["targets"] == doc["targets"]


def test_bench_parts_quick(tmp_path: Path) -> None:
    out, run = tmp_path / "out", tmp_path / "run"
    common = ["--duration", "3", "--warmup", "1", "--out", str(out), "--run-dir", str(run)]
    hop = pricingctl("bench", "envoy-hop", *common, timeout_s=300)
    assert hop.returncode == 0, hop.stderr[-3000:]
    doc = json.loads((out / "envoy_hop.json").read_text())
    assert_ordered(doc["via_envoy"])
    assert_ordered(doc["direct"])
    assert (out / "envoy_hop_cdf.png").read_bytes()[:8] == PNG

    cap = pricingctl(
        "bench",
        "io-capacity",
        *common,
        "--start-rps",
        "50",
        "--step-rps",
        "50",
        "--max-rps",
        "100",
        timeout_s=300,
    )
    assert cap.returncode == 0, cap.stderr[-3000:]
    doc = json.loads((out / "io_capacity.json").read_text())
    assert doc["steps"]  # 50 and 100/s, failed steps once more, maybe a midpoint
    for step in doc["steps"]:
        assert_ordered(step)
    assert (out / "io_capacity.png").read_bytes()[:8] == PNG


def tracing_overhead(tmp_path: Path, *flags: str) -> dict[str, Any]:
    """A quick `bench tracing-overhead` with *flags*: its results document."""
    out, run = tmp_path / "out", tmp_path / "run"
    done = pricingctl(
        "bench",
        "tracing-overhead",
        *("--duration", "2", "--warmup", "1", "--repeats", "1", "--quick", *flags),
        *("--out", str(out), "--run-dir", str(run)),
        timeout_s=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc: dict[str, Any] = json.loads((out / "tracing_overhead.json").read_text())
    return doc


def test_tracing_overhead_otlp_mode_exports_every_span_to_its_sink(tmp_path: Path) -> None:
    """100-otlp: the pools export over OTLP/HTTP protobuf to the sink the run started
    (no span file), and what arrived there is counted in the results, as is the CPU of
    the io worker's span exporter thread (none untraced)."""
    doc = tracing_overhead(
        tmp_path, "--no-capacity", "--offer-rates", "40", "--modes", "off,100-otlp"
    )
    (point,) = doc["points"]
    evidence = point["evidence"]["100-otlp"]
    assert evidence["active"] and evidence["client_spans_in_span_file"] == 0
    assert doc["exported_to_sink"]["batches"] > 0 and doc["exported_to_sink"]["bytes"] > 0
    assert "100-otlp_cpu_per_offer_over_off at 40 offers/s" in {t["target"] for t in doc["targets"]}
    exporter_ms = {mode: m["io_export_thread_ms_per_offer"] for mode, m in point["modes"].items()}
    # A 2 s window at 40/s may hold no clock tick of the exporter's: its share is bounded.
    assert exporter_ms["off"] == 0.0
    assert 0.0 <= exporter_ms["100-otlp"] < point["modes"]["100-otlp"]["io_cpu_ms_per_offer"]


def test_tracing_overhead_quick(tmp_path: Path) -> None:
    """off / production default / 100 %: each mode measured at each rate point, traced
    modes shown active (traceparents at the upstreams, even at 1 % sampling), costs
    taken from off; the capacity of tracing off and default from one io-capacity each,
    and the second rate point a share of the untraced one. --paired: the point in
    offers/s runs the three modes at once, the share of the capacity one after another."""
    doc = tracing_overhead(
        tmp_path,
        *("--paired", "--offer-rates", "40,50%"),
        *("--capacity-start-rps", "50", "--capacity-max-rps", "50"),
        # Each of the four io-capacity steps (off, default, 0.8 x and 1.5 x) in a short
        # window: what this checks is that they ran and what they fed the points.
        *("--capacity-duration", "3", "--capacity-warmup", "1"),
    )
    capacity = doc["capacity"]
    assert set(capacity) >= {"off", "default", "default_over_off"}
    off_capacity = capacity["off"]["capacity_rps"]
    if capacity["default"]["capacity_rps"]:
        # CPU per offer below and past the traced capacity (instrumentation vs backlog).
        assert set(capacity["load_growth"]["shares"]) == {"0.8", "1.5"}
    assert [p["offers_rps"] for p in doc["points"]] == [40.0, round(off_capacity * 0.5, 1)]
    assert doc["settings"]["modes"]["100"]["sample_percent"] == 100.0
    assert doc["settings"]["modes"]["default"]["sample_percent"] < 100.0
    assert doc["tracing_active"] is True
    assert [p["design"] for p in doc["points"]] == ["paired", "interleaved"]
    # One mode after another, the io worker has a core of its own (as in io-capacity).
    cores = [p["cores"] for p in doc["points"]]
    assert cores[0] == "shared by every process"
    if len(os.sched_getaffinity(0)) >= 2:
        assert cores[1] == "the io worker on one core, everything else on the other"
    for paired, point in zip((True, False), doc["points"], strict=True):
        windows = [w[0] for w in point["windows_unix_ns"].values()]  # repeat 1, by mode
        overlap_ns = min(end for _, end in windows) - max(start for start, _ in windows)
        if paired:  # the same window, give or take when each thread took its snapshot
            assert overlap_ns > 0.5 * min(end - start for start, end in windows), windows
        else:
            assert overlap_ns < 0, windows
    point = doc["points"][0]
    assert set(point["modes"]) == {"off", "default", "100"}
    for mode in ("default", "100"):
        assert point["evidence"][mode]["upstream_calls_with_traceparent"] > 0
        overhead = point["overhead"][mode]
        assert overhead["io_cpu_per_offer_over_off"] > 0
        # Paired by repeat (the mode's run against the off run of the same repeat): with
        # one repeat, the pooled ratio itself.
        by_repeat = overhead["io_cpu_per_offer_over_off_by_repeat"]
        assert by_repeat == [overhead["io_cpu_per_offer_over_off"]]
        assert overhead["us_per_upstream_call"] is not None
    for m in point["modes"].values():
        assert_ordered(m["offers"])
        assert m["io_cpu_ms_per_offer"] > 0
        assert m["cpu"] is None  # offers only
    # Every request of the 100 % mode has spans; the default samples few.
    assert (
        point["evidence"]["100"]["client_spans_in_span_file"]
        > (point["evidence"]["default"]["client_spans_in_span_file"])
    )
    assert {t["target"].split(" ")[0] for t in doc["targets"]} >= {
        "default_cpu_per_offer_over_off",
        "capacity_default_over_off",
    }


def test_http_client_quick(tmp_path: Path) -> None:
    """Each client library makes the io pool's calls in the real stack, tracing off and
    traced; the results carry CPU per call, p99, the split check and the decision."""
    out, run = tmp_path / "out", tmp_path / "run"
    done = pricingctl(
        "bench",
        "http-client",
        *("--clients", "ours,geventhttpclient", "--rates", "offers=60"),
        *("--duration", "2", "--warmup", "1", "--repeats", "1"),
        *("--out", str(out), "--run-dir", str(run)),
        timeout_s=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "http_client.json").read_text())
    assert set(doc["clients"]) == {"ours", "geventhttpclient"}
    for client in doc["clients"].values():
        for mode in (client, client["traced"]):
            assert_ordered(mode["offers"])
            assert mode["offers"]["ok"] > 0
            assert mode["io_cpu_us_per_call"] > 0
        assert client["split"]["spans"] > 0
    # Our client's calls through the real stack: the network time is the simulator's
    # fixed 100 ms, not the scheduling delay.
    assert doc["clients"]["ours"]["split"]["works"] is True
    assert doc["decision"]["best_other"] == "geventhttpclient"
    assert isinstance(doc["decision"]["keep_ours"], bool)
    # Each run's pools really used the client it names (they say so when they start).
    for name in ("ours", "geventhttpclient"):
        log = (run / f"client-{name}-r1" / "logs" / "pool-io.log").read_text()
        assert f"upstream client {name})" in log
    assert "decision:" in done.stdout


def test_bench_tracing_breakdown_quick(tmp_path: Path) -> None:
    """`bench --tracing`: every traced offer broken down by tracing.readback.breakdown (with
    Envoy's span when Jaeger is cached), each band with every part and "unexplained";
    --replot gives the same breakdown back from what the run kept."""
    out, run = tmp_path / "out", tmp_path / "run"
    common = ("--out", str(out), "--run-dir", str(run))
    done = pricingctl(
        "bench",
        "--tracing",
        *("--duration", "3", "--warmup", "1", "--repeats", "1"),
        *common,
        timeout_s=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    for layout in doc["layouts"].values():
        bd = layout["time_breakdown"]
        assert bd["source"].startswith("tracing")
        added = bd["adds_up"]
        assert 0 < added["traced_offers"] <= added["offers_in_window"]
        assert 0.0 <= added["share"] <= 1.0
        for band, bar in bd["bars"].items():
            assert {"network", "handler running", "unexplained"} <= set(bar), band
            assert bd["unexplained_pct"][band] >= 0
            if bd["total"] == "Envoy's span":
                assert "envoy before pool" in bar
    names = {t["name"] for t in doc["targets"]}
    assert "split: traced offers whose parts add up (max(1 ms, 3 %))" in names
    assert (out / "offers_time_breakdown.png").read_bytes()[:8] == PNG
    assert "Time breakdown:" in (out / "results.md").read_text()

    replot = pricingctl("bench", "--replot", *common, timeout_s=120)
    assert replot.returncode == 0, replot.stderr[-3000:]
    again = json.loads((out / "results.json").read_text())
    for name, layout in doc["layouts"].items():
        assert again["layouts"][name]["time_breakdown"] == layout["time_breakdown"]


def test_timing_parts_quick(tmp_path: Path) -> None:
    """The gevent timing core's accuracy and cost parts run end to end (no stack)."""
    accuracy = pricingctl(
        "bench", "timing-accuracy", "--quick", "--out", str(tmp_path), timeout_s=300
    )
    assert accuracy.returncode == 0, accuracy.stderr[-3000:]
    doc = json.loads((tmp_path / "timing_accuracy.json").read_text())
    assert doc["calls"] >= 40
    window = doc["reply_arrival_in_send_window"]
    assert 0 < window["in"] <= window["of"] <= doc["calls"]
    assert doc["call_duration_ms"]["min"] <= doc["call_duration_ms"]["max"]
    assert "reply arrival in send window" in accuracy.stdout

    cost = pricingctl("bench", "timing-cost", "--quick", "--out", str(tmp_path), timeout_s=300)
    assert cost.returncode == 0, cost.stderr[-3000:]
    doc = json.loads((tmp_path / "timing_cost.json").read_text())
    assert doc["greenlet_switch_us"]["bare"] > 0
    assert doc["send_and_read_wait_us"]["uninstrumented"] > 0
    assert set(doc["pieces_us"]) == {
        "peek_receive_timestamp",
        "begin_call_and_finish",
        "culprits_of_1ms_with_100_switches",
        "set_greenlet_label",
    }
    assert doc["culprits_us_by_switches"]["python"]["8000"] > 0
    assert "naming culprits, python" in cost.stdout


@pytest.mark.skipif(
    not (shutil.which("valgrind") and shutil.which("callgrind_control")), reason="no valgrind"
)
def test_instructions_quick(tmp_path: Path) -> None:
    """`bench instructions` counts both modes under callgrind and reports the difference."""
    done = pricingctl("bench", "instructions", "--quick", "--out", str(tmp_path), timeout_s=900)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "instructions.json").read_text())
    assert set(doc["per_offer"]) == {"off", "full"}
    assert all(v > 0 for values in doc["per_offer"].values() for v in values)
    assert len(doc["tracing_adds_by_repeat"]) == doc["settings"]["repeats"] == 1
    assert "tracing adds" in done.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ("bench", "--workers", "1"),
        ("bench", "tracing-overhead", "--modes", "default,100"),
        ("bench", "tracing-overhead", "--modes", "off,sometimes"),
        ("bench", "overload", "--multiples", "2,1"),
        ("bench", "overload", "--pools", "io,db"),
        ("bench", "overload", "--admission", "guess"),
        ("bench", "tracing-overhead", "--offer-rates", "40,fast"),
        ("bench", "tracing-overhead", "--no-capacity", "--offer-rates", "80%"),
    ],
)
def test_bad_flag_is_one_line_and_exit_2(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    """In this process: each is refused before anything runs, by the parser (SystemExit)
    or the part's own check (exit code); the installed command's own exit is
    tests/unit/pricingctl/test_vocabulary.py's."""
    from pricingctl.main import main

    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_bench_soak_smoke_writes_series_failures_and_a_plot(tmp_path: Path) -> None:
    """Twenty seconds: a kill per pool, one routes apply, every process sampled."""
    out = tmp_path / "out"
    done = pricingctl(
        "bench",
        "soak",
        "--minutes",
        "0.33",
        "--out",
        str(out),
        "--run-dir",
        str(tmp_path / "run"),
        timeout_s=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CLOSE_WAIT left:" in done.stdout
    doc = json.loads((out / "soak.json").read_text())
    whats = [e["what"] for e in doc["events"]]
    assert any(w.startswith("SIGKILL io worker") for w in whats), whats
    assert any(w.startswith("routes apply") for w in whats), whats
    labels = {row["label"] for row in doc["series"].values()}
    assert {"envoy", "simulator", "pool-io master", "pool-io worker", "pool-cpu worker"} <= labels
    for row in doc["series"].values():
        assert len(row["t"]) == len(row["rss"]) == len(row["fds"])
    assert doc["failures"]["requests"] > 100
    assert isinstance(doc["close_wait"], int)
    assert (out / "soak.png").read_bytes().startswith(PNG)


def test_bench_overload_smoke_writes_steps_targets_and_a_plot(tmp_path: Path) -> None:
    """The cpu pool at 2x its capacity, tracing off and at its default: every figure
    the report names is there and sane; the excess was shed."""
    out, run = tmp_path / "out", tmp_path / "run"
    done = pricingctl(
        "bench",
        "overload",
        *("--pools", "cpu", "--multiples", "2", "--duration", "3", "--warmup", "1"),
        *("--out", str(out), "--run-dir", str(run)),
        timeout_s=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "overload.json").read_text())
    steps = doc["steps"]
    assert {(s["mode"], s["pool"], s["multiple"]) for s in steps} == {
        ("off", "cpu", 2.0),
        ("default", "cpu", 2.0),
    }
    for step in steps:
        assert step["requests"] > 0
        assert step["goodput_rps"] >= 0 and 0 <= step["goodput_fraction"] <= 5
        assert step["shed"] > 0  # twice what one worker serves: some was refused
        assert step["shed_by_envoy"] <= step["shed"]
        assert step["cpu_ms_per_request"] is None or step["cpu_ms_per_request"] > 0
    names = {t["name"] for t in doc["targets"]}
    assert any("goodput" in n for n in names) and any("shed" in n for n in names)
    png = out / "overload.png"
    assert png.read_bytes().startswith(PNG)
    assert "goodput" in done.stdout


def test_bench_faults_smoke_a_killed_io_worker_and_a_killed_envoy(tmp_path: Path) -> None:
    """Two rows of the matrix, short windows: an io worker SIGKILLed under the mixed load
    costs no GET (Envoy retries what it held) and gunicorn replaces it; a SIGKILLed Envoy
    is started again by the supervisor and the stack serves again before the run ends.
    Each row names every process before and after, and the pools' span counters."""
    out = tmp_path / "out"
    done = pricingctl(
        "bench",
        "faults",
        *("--quick", "--faults", "sigkill-io-worker,sigkill-envoy"),
        *("--warmup", "2", "--duration", "3", "--after", "6"),
        *("--out", str(out), "--run-dir", str(tmp_path / "run")),
        timeout_s=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "faults.json").read_text())
    rows = {row["fault"]: row for row in doc["faults"]}
    worker = rows["SIGKILL io worker"]
    assert worker["requests"]["get"] > 50
    assert worker["failed"]["get"] == 0, worker["statuses"]
    workers = [p for p in worker["processes"] if p["label"] == "pool-io worker"]
    assert [p["rss_kib"][1] for p in workers].count(None) == 1  # the killed one
    assert [p["rss_kib"][0] for p in workers].count(None) == 1  # its replacement
    assert worker["telemetry_lost"]["spans_exported"] is not None
    envoy = rows["SIGKILL envoy"]
    assert envoy["not_running_at_end"] == [], envoy["events"]
    assert any("restarted as pid" in e["what"] for e in envoy["events"]), envoy["events"]
    assert envoy["recovery_s"] is not None, envoy["events"]
    assert (out / "faults.png").read_bytes().startswith(PNG)
