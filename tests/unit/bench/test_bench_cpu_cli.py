"""CPU accounting from /proc, and the command line's flags and errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.cpu import OTHER, Snapshot, process_cpu_s, tree, usage
from pricingctl.bench import parse_rates
from pricingctl.main import build_parser


def test_process_cpu_and_tree_of_this_process() -> None:
    sum(i * i for i in range(200_000))  # burn a little CPU
    assert (process_cpu_s(os.getpid()) or 0.0) > 0.0
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert child.pid in tree(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert process_cpu_s(child.pid) is None


def test_usage_is_the_difference_per_component_and_the_rest_is_other() -> None:
    before = Snapshot({"a": {1: 10.0, 2: 5.0}, "b": {3: 1.0}}, machine_busy_s=100.0)
    after = Snapshot({"a": {1: 11.0, 2: 5.5, 4: 0.5}, "b": {3: 1.2}}, machine_busy_s=104.0)
    use = usage(before, after, window_s=2.0)
    assert use["a"].cpu_s == pytest.approx(2.0)  # 1 + 0.5 + a new process's 0.5
    assert use["a"].cpu_pct == pytest.approx(100.0)
    assert use["b"].cpu_pct == pytest.approx(10.0)
    assert use[OTHER].cpu_s == pytest.approx(4.0 - 2.2)


def test_parse_rates() -> None:
    assert parse_rates("cpu=20,offers=150") == {"cpu": 20.0, "offers": 150.0}
    assert parse_rates("cpu=0") == {"cpu": 0.0}
    for bad in ("cpu", "gpu=1", "cpu=-1", "offers=0", "cpu=1,cpu=2", "cpu=nan", "cpu=1e9"):
        with pytest.raises(Exception, match=r"."):
            parse_rates(bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--workers", "1"],
        ["bench", "--rates", "gpu=3"],
        ["bench", "--duration", "0"],
        ["bench", "--bogus"],
        ["bench", "io-capacity", "--p99-limit-ms", "x"],
        ["bench", "envoy-hop", "--nope"],
        ["bench", "timing-accuracy", "--calls", "0"],
        ["bench", "timing-cost", "--rounds", "1"],
        ["routes", "render", "--layout", "diagonal"],
    ],
)
def test_bad_flags_give_one_line_and_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"pricingctl {argv[0]}")


def test_good_flags_parse() -> None:
    args = build_parser().parse_args(
        ["bench", "--quick", "--workers", "4", "--rates", "cpu=10", "--out", "x"]
    )
    assert (args.quick, args.workers, args.rates, args.bench_command) == (
        True,
        4,
        {"cpu": 10.0},
        None,
    )
    args = build_parser().parse_args(["bench", "io-capacity", "--quick", "--direct"])
    assert args.bench_command == "io-capacity" and args.direct
