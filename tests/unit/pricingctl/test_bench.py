"""`pricingctl bench`: its flags and their errors (one line, exit 2)."""

from __future__ import annotations

import pytest

from pricingctl.bench.flags import parse_rates
from pricingctl.main import build_parser


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


def test_tracing_overhead_capacity_windows_default_to_the_parts_own() -> None:
    """--capacity-duration/--capacity-warmup set each capacity step's windows; without
    them the steps keep io-capacity's (quick or full), whatever --duration says."""
    from pricingctl.bench.capacity import CAPACITY_FULL, CAPACITY_QUICK
    from pricingctl.bench.overhead import _overhead_capacity

    def windows(*flags: str) -> tuple[float, float]:
        args = build_parser().parse_args(["bench", "tracing-overhead", *flags])
        search = _overhead_capacity(args)
        assert search is not None
        return search.duration_s, search.warmup_s

    assert windows("--duration", "2") == (CAPACITY_FULL.duration_s, CAPACITY_FULL.warmup_s)
    assert windows("--quick") == (CAPACITY_QUICK.duration_s, CAPACITY_QUICK.warmup_s)
    assert windows("--quick", "--capacity-duration", "3", "--capacity-warmup", "0") == (3.0, 0.0)


def test_http_client_without_a_dev_only_client_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    from pricingctl.main import main

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "geventhttpclient" else real(name, *a),
    )
    assert main(["bench", "http-client", "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "geventhttpclient not installed" in err[0] and "--clients" in err[0]


@pytest.mark.parametrize("clients", ["geventhttpclient,urllib3", "ours", "ours,ours", "ours,curl"])
def test_http_client_needs_ours_and_another_known_client(clients: str) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["bench", "http-client", "--clients", clients])
    assert exc.value.code == 2
