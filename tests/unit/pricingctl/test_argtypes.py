"""The kinds of flag value (`pricingctl.argtypes`): what each takes and refuses. The
parser walk (test_vocabulary) feeds every flag the careless values; these are the
edges of each kind."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pricingctl import argtypes


@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        (argtypes.port, ["1", "65535"], ["0", "65536", "http", "8.5"]),
        (argtypes.rate, ["0.5", "1000000"], ["0", "1000001", "1e6x"]),
        (argtypes.rate_or_zero, ["0"], ["-0.1"]),
        (argtypes.percent, ["0", "100"], ["100.1"]),
        (
            argtypes.url,
            ["http://127.0.0.1:16686", "https://jaeger.example/"],
            [
                "127.0.0.1:16686",
                "ftp://h/",
                "http://",
                "http://h:99999/",
                "http://h:0/",
                "http:///x",
            ],
        ),
        (argtypes.trace_id, ["4bf92f3577b34da6a3ce929d0e0e4736", "abc"], ["0" * 33, "xyz"]),
        (argtypes.lookback, ["15m", "2h", "1d"], ["0m", "15", "15 minutes"]),
        (argtypes.name, ["pricingservice", "io"], ["two words", "-io"]),
        (argtypes.path, ["./-1", "run dir"], ["-1", " ", "a\x00b"]),
    ],
)
def test_each_kind_takes_its_values_and_refuses_the_rest(
    kind: object, good: list[str], bad: list[str]
) -> None:
    assert callable(kind)
    for text in good:
        kind(text)
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            kind(text)


def test_an_input_file_must_exist(tmp_path: Path) -> None:
    there = tmp_path / "routes.toml"
    there.write_text("")
    assert argtypes.routes_file(str(there)) == there
    with pytest.raises(argparse.ArgumentTypeError, match="no such file"):
        argtypes.routes_file(str(tmp_path / "nope.toml"))
    with pytest.raises(argparse.ArgumentTypeError, match="not a file"):
        argtypes.span_file(str(tmp_path))


def test_rates_are_key_rate_pairs_each_key_once() -> None:
    any_key = argtypes.rates()
    assert any_key("offers.rideshare=40, offers.bike=0") == {
        "offers.rideshare": 40.0,
        "offers.bike": 0.0,
    }
    groups = argtypes.rates(("cpu", "offers"), high=10_000)
    assert groups("cpu=20,offers=150") == {"cpu": 20.0, "offers": 150.0}
    for bad in ("cpu", "=3", "gpu=1", "cpu=1,cpu=2", "cpu=nan", "cpu=-1", "cpu=10001", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            groups(bad)


def test_bounds_are_written_as_people_write_them() -> None:
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        argtypes.rate("2000000")
    assert "at most 1000000" in str(exc.value)
