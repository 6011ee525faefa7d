"""bench.run: the route config for --workers N, and the interleaved run order."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bench.run import layout_arms, run_order, with_workers
from bench.tracing_overhead import ARMS
from routing.load import parse_routes
from routing.model import Layout, RouteConfig
from routing.write import render_routes_toml
from tracing.settings import OTLP_TRACES_ENDPOINT_ENV


@pytest.mark.parametrize("n", [2, 3, 5])
def test_with_workers_keeps_the_same_total(routes: RouteConfig, n: int) -> None:
    derived = with_workers(routes, n)
    assert derived.pool("cpu").workers == n - 1
    assert derived.pool("io").workers == 1
    assert derived.pool("shared", Layout.SHARED).workers == n
    # and the loader derives the same shared count from the file
    assert parse_routes(render_routes_toml(derived)) == derived


def test_with_workers_refuses_one(routes: RouteConfig) -> None:
    with pytest.raises(ValueError, match="at least 2"):
        with_workers(routes, 1)


def test_run_order_interleaves_and_alternates_which_arm_goes_first() -> None:
    order = [(repeat, arm.key) for repeat, arm in run_order(layout_arms(False), 3)]
    assert order == [
        (0, "shared"),
        (0, "split"),
        (1, "split"),
        (1, "shared"),
        (2, "shared"),
        (2, "split"),
    ]
    modes = [arm.key for _, arm in run_order(ARMS, 2)]
    assert modes == ["off", "default", "100", "100", "default", "off"]


def test_arms_name_their_runs_where_replot_looks() -> None:
    shared, split = layout_arms(True)
    assert (shared.run_name.format(repeat=2), split.label.format(repeat=1, repeats=3)) == (
        "r2-shared",
        "repeat 1/3 split",
    )
    assert shared.traced and not ARMS[0].traced


def test_tracing_overhead_modes_set_the_switch_and_the_sampling(
    routes: RouteConfig, tmp_path: Path
) -> None:
    from bench.run import with_sample_percent
    from bench.tracing_overhead import arms

    by_key = {arm.key: arm for arm in arms(("off", "default", "100", "spans"))}
    assert (by_key["off"].tracing, by_key["off"].traced) == ("off", False)
    assert (by_key["default"].tracing, by_key["default"].sample_percent) == ("full", None)
    assert (by_key["100"].tracing, by_key["100"].sample_percent) == ("full", 100.0)
    assert by_key["spans"].tracing == "spans"
    # 100-otlp: as 100, exporting to the sink the run started, where 100 writes the file.
    otlp = {arm.key: arm for arm in arms(("off", "100", "100-otlp"), "http://127.0.0.1:9")}
    assert (otlp["100-otlp"].tracing, otlp["100-otlp"].sample_percent) == ("full", 100.0)
    assert otlp["100-otlp"].env[OTLP_TRACES_ENDPOINT_ENV] == "http://127.0.0.1:9/v1/traces"
    assert OTLP_TRACES_ENDPOINT_ENV not in otlp["100"].env
    # 100 %: a derived routes.toml the pools read (source), the rest of the config alike.
    derived = with_sample_percent(routes, 100.0, tmp_path)
    assert derived.tracing.sample_percent == 100.0
    assert Path(derived.source).parent == tmp_path
    assert derived.pools == routes.pools
    assert with_sample_percent(routes, None, tmp_path) is routes


def test_tracing_overhead_reports_each_repeats_cost_per_call_and_their_interval() -> None:
    from bench.tracing_overhead import _per_call_by_repeat

    # io ms per offer: +0.06, +0.03 and -0.03 against each repeat's own off run (3 calls).
    got = _per_call_by_repeat([2.06, 2.03, 1.97, None], [2.0, 2.0, 2.0, 2.0])
    assert got["us_per_upstream_call_by_repeat"] == [20.0, 10.0, -10.0]
    low, high = got["us_per_upstream_call_interval95"]
    assert low < 0 < 6.67 < high  # the mean, +6.67 us, with an interval that holds 0
    assert _per_call_by_repeat([2.06], [2.0])["us_per_upstream_call_interval95"] is None


def test_paired_runs_start_together_and_a_failed_one_releases_the_others() -> None:
    from bench.run import PairAborted, StartTogether

    together = StartTogether(3)
    starts: list[float] = []
    threads = [threading.Thread(target=lambda: starts.append(together.wait())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(starts) == 3 and len(set(starts)) == 1  # one start time, for all

    pair = StartTogether(2)
    pair.abort()  # the other run failed before its generator was ready
    with pytest.raises(PairAborted):
        pair.wait()
