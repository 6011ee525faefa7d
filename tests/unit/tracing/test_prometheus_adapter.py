"""The prometheus_client internals tracing.prometheus_adapter relies on: if a new
prometheus-client changes them, these fail (and the pin in pyproject.toml says why)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Histogram, Summary

from tracing.prometheus_adapter import add_to_histogram, add_to_summary, histogram_bounds

BOUNDS = (0.001, 0.01, 0.1, 1.0)
VALUES = (0.0005, 0.001, 0.002, 0.05, 0.05, 0.3, 7.0, 0.0)


def per_bucket(values: tuple[float, ...]) -> list[int]:
    """Observations per bucket, +Inf last: `value <= bound` like prometheus_client."""
    counts = [0] * (len(BOUNDS) + 1)
    for v in values:
        counts[next((i for i, b in enumerate(BOUNDS) if v <= b), len(BOUNDS))] += 1
    return counts


def run_multiprocess(script: str, directory: Path) -> Any:
    """Run *script* in a fresh interpreter in multiprocess mode (its files in
    *directory*, the repository's root as the working directory); what it printed as
    JSON."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=root, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def exposition(histogram: Histogram) -> list[tuple[str, dict[str, str], float]]:
    (family,) = histogram.collect()
    return [
        (s.name.split("_", 1)[1], s.labels, s.value)
        for s in family.samples
        if not s.name.endswith("_created")
    ]


def test_folded_counts_read_as_the_same_observations_made_one_by_one() -> None:
    registry = CollectorRegistry()
    observed = Histogram("a_seconds", "a", ["route"], registry=registry, buckets=BOUNDS)
    folded = Histogram("b_seconds", "b", ["route"], registry=registry, buckets=BOUNDS)
    for v in VALUES:
        observed.labels("r").observe(v)
    assert histogram_bounds(folded.labels("r")) == (*BOUNDS, float("inf"))
    half = len(VALUES) // 2  # two folds add up
    for part in (VALUES[:half], VALUES[half:]):
        add_to_histogram(folded.labels("r"), per_bucket(part), sum(part))
    got, want = exposition(folded), exposition(observed)
    assert [(n, ls) for n, ls, _ in got] == [(n, ls) for n, ls, _ in want]
    assert [v for *_, v in got] == pytest.approx([v for *_, v in want])  # sums: float order
    counts = {s[1]["le"]: s[2] for s in exposition(folded) if "le" in s[1]}
    assert counts == {"0.001": 3, "0.01": 4, "0.1": 6, "1.0": 7, "+Inf": 8}


def test_folding_writes_the_multiprocess_files_a_scrape_reads(tmp_path: Path) -> None:
    """In multiprocess mode (what the pools run) the folded values reach the mmap'ed
    files and MultiProcessCollector sums them like observed ones."""
    given = f"BOUNDS, VALUES, PER_BUCKET = {BOUNDS!r}, {VALUES!r}, {per_bucket(VALUES)!r}"
    script = (
        given
        + """
import json
from prometheus_client import CollectorRegistry, Histogram, Summary, multiprocess
from tracing.prometheus_adapter import add_to_histogram, add_to_summary
observed = Histogram("a_seconds", "a", registry=None, buckets=BOUNDS)
folded = Histogram("b_seconds", "b", registry=None, buckets=BOUNDS)
for v in VALUES:
    observed.observe(v)
add_to_histogram(folded, PER_BUCKET, sum(VALUES))
observed_summary = Summary("c_seconds", "c", registry=None)
folded_summary = Summary("d_seconds", "d", registry=None)
for v in VALUES:
    observed_summary.observe(v)
add_to_summary(folded_summary, len(VALUES), sum(VALUES))
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
out = {}
for family in registry.collect():
    out[family.name] = sorted(
        (s.name.split("_", 1)[1], s.labels.get("le", ""), s.value) for s in family.samples
    )
print(json.dumps(out))
"""
    )
    out = run_multiprocess(script, tmp_path)
    assert out["b_seconds"] == out["a_seconds"]
    assert ["seconds_count", "", 8] in out["b_seconds"]
    assert out["d_seconds"] == out["c_seconds"]
    assert ["seconds_count", "", 8] in out["d_seconds"]


def test_multiprocess_values_take_the_pid_from_a_cache_that_a_fork_refreshes(
    tmp_path: Path,
) -> None:
    """After check_pid_from_cache a value write checks the cached pid, not getpid's; a
    forked child still writes to its own file (its pid), and a scrape sums them all."""
    script = """
import json, os
from prometheus_client import CollectorRegistry, Counter, multiprocess
from tracing import prometheus_adapter
assert prometheus_adapter.check_pid_from_cache()
assert prometheus_adapter.check_pid_from_cache()  # idempotent
counter = Counter("writes", "w", registry=None)
for _ in range(100):
    counter.inc()
child = os.fork()
if child == 0:
    counter.inc(1000)
    # The pid a write checks is the cache's: a cache saying another pid moves the writes.
    prometheus_adapter._pid = 7
    counter.inc(10000)
    os._exit(0)
os.waitpid(child, 0)
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
total = [s.value for f in registry.collect() for s in f.samples if s.name == "writes_total"]
files = sorted(os.listdir(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
print(json.dumps({"total": total, "files": files, "pids": [os.getpid(), child]}))
"""
    out = run_multiprocess(script, tmp_path)
    assert out["total"] == [11100.0]
    parent, child = out["pids"]
    assert out["files"] == sorted([f"counter_{parent}.db", f"counter_{child}.db", "counter_7.db"])


def test_without_multiprocess_mode_the_values_are_left_alone() -> None:
    from prometheus_client import values

    from tracing.prometheus_adapter import check_pid_from_cache

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        pytest.skip("this process runs in multiprocess mode")
    before = values.ValueClass
    assert check_pid_from_cache() is False
    assert values.ValueClass is before


def test_a_folded_summary_reads_as_the_same_observations_made_one_by_one() -> None:
    registry = CollectorRegistry()
    observed = Summary("a_seconds", "a", ["route"], registry=registry)
    folded = Summary("b_seconds", "b", ["route"], registry=registry)
    for v in VALUES:
        observed.labels("r").observe(v)
    half = len(VALUES) // 2
    for part in (VALUES[:half], VALUES[half:]):
        add_to_summary(folded.labels("r"), len(part), sum(part))
    got, want = exposition(folded), exposition(observed)
    assert [(n, ls) for n, ls, _ in got] == [(n, ls) for n, ls, _ in want]
    assert [v for *_, v in got] == pytest.approx([v for *_, v in want])
    assert ("seconds_count", {"route": "r"}, 8) in got


# --- a full metrics directory ---------------------------------------------------------

FULL_DISK_SCRIPT = """
import os, sys
from pathlib import Path
from bench import full_disk
if sys.argv[2] == "guarded":
    from tracing import prometheus_adapter
    prometheus_adapter.reserve_metric_files()
from prometheus_client import CollectorRegistry, Counter
counter = Counter("early", "made before the disk filled", ["k"], registry=CollectorRegistry())
counter.labels("0").inc()
full_disk.fill(Path(sys.argv[1]))
late = Counter("late", "a new series after", ["k"], registry=CollectorRegistry())
for i in range(3000):  # new pages, the file's growth
    late.labels(str(i)).inc()
counter.labels("0").inc()
print("served on")
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    from bench import full_disk

    try:
        with full_disk.small_tmpfs(tmp_path / "disk", size_mib=1) as path:
            yield path
    except full_disk.NoMount as exc:
        pytest.skip(f"no size-limited tmpfs here (root only): {exc}")


def _run_full(small_disk: Path, mode: str) -> subprocess.CompletedProcess[str]:
    metrics = small_disk / "metrics"
    metrics.mkdir(exist_ok=True)
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics)}
    return subprocess.run(
        [sys.executable, "-c", FULL_DISK_SCRIPT, str(small_disk), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[3],
    )


def test_a_full_metrics_directory_costs_the_metrics_not_the_worker(small_disk: Path) -> None:
    """A value's first write into a page the full file system cannot back is SIGBUS
    (prometheus_client's own files, unguarded); reserved, the process runs on, says so,
    and the pool's files stay readable by a scrape."""
    from prometheus_client import multiprocess

    unguarded = _run_full(small_disk, "unguarded")
    assert unguarded.returncode == -7, unguarded  # SIGBUS: what the guard is for
    (small_disk / ".filler").unlink()
    for old in (small_disk / "metrics").iterdir():
        old.unlink()
    guarded = _run_full(small_disk, "guarded")
    assert guarded.returncode == 0, guarded.stderr
    assert "served on" in guarded.stdout
    assert "kept in memory, not scraped" in guarded.stderr
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, str(small_disk / "metrics"))
    early = registry.get_sample_value("early_total", {"k": "0"})
    assert early is not None and early >= 1  # what was written before stays counted
