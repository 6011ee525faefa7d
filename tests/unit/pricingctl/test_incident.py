"""`pricingctl incident`'s door: a bad scenario file is one line and exit 1, before
any process starts; a missing one is a bad flag (exit 2); `--jaeger on` without Jaeger
built is one line too."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scenario import DEFAULT_SCENARIO
from pricingctl.main import build_parser, main


def test_the_defaults_are_the_shipped_scenario_and_text_output() -> None:
    args = build_parser().parse_args(["incident"])
    assert args.scenario == DEFAULT_SCENARIO
    assert args.json is False and callable(args.handler)


def test_a_bad_scenario_is_refused_in_one_line_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(DEFAULT_SCENARIO.read_text().replace("count = 60", "count = -1"))
    assert main(["incident", "--scenario", str(bad), "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err == f"pricingctl incident: {bad}: [clients].count: -1 is outside 1 to 5000\n"
    assert not (tmp_path / "run").exists()


def test_a_missing_scenario_is_a_bad_flag(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as done:
        main(["incident", "--scenario", str(tmp_path / "nope.toml")])
    assert done.value.code == 2


def test_keep_and_jaeger_are_off_and_auto_by_default() -> None:
    args = build_parser().parse_args(["incident"])
    assert args.keep is False and args.jaeger == "auto"
    args = build_parser().parse_args(["incident", "--keep", "--jaeger", "off"])
    assert args.keep is True and args.jaeger == "off"


def test_jaeger_on_without_jaeger_built_is_one_line_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from stack import jaeger

    monkeypatch.setattr(jaeger, "cached_binary", lambda: None)
    run_dir = tmp_path / "run"
    assert main(["incident", "--jaeger", "on", "--run-dir", str(run_dir)]) == 1
    assert capsys.readouterr().err == (
        "pricingctl incident: Jaeger is not built; run `make jaeger` first\n"
    )
    assert not run_dir.exists()
