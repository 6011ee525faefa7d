"""`pricingctl`: one root, its sub-commands, the installed script and `python -m`."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pricingctl.main import build_parser, main

ROOT = Path(__file__).resolve().parents[3]


def test_the_installed_script_is_this_main() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"pricingctl": "pricingctl.main:main"}


def test_every_sub_command_is_wired() -> None:
    parser = build_parser()
    for argv in (["routes", "check"], ["up"], ["traces", "--from-spans"], ["bench", "--quick"]):
        assert callable(parser.parse_args(argv).handler)


def test_python_dash_m_runs_the_same_main() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pricingctl", "routes", "render", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "is up to date" in done.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["routes", "--config", "{bad}", "check"],
        ["routes", "check", "--config", "{bad}"],
        ["routes", "render", "--check", "--config", "{bad}"],
    ],
)
def test_a_bad_route_config_is_one_line_and_exit_1(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "routes.toml"
    bad.write_text("[listener]\n")
    assert main([a.format(bad=bad) for a in argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"pricingctl: {bad}: ") and len(err.strip().splitlines()) == 1


def test_routes_config_after_the_action_is_the_one_used(tmp_path: Path) -> None:
    for name in ("r.toml", "a.toml"):
        (tmp_path / name).write_text("")  # read by the command, not by the parser
    args = build_parser().parse_args(["routes", "check", "--config", str(tmp_path / "r.toml")])
    assert args.config == tmp_path / "r.toml"
    args = build_parser().parse_args(["routes", "--config", str(tmp_path / "a.toml"), "check"])
    assert args.config == tmp_path / "a.toml"
    assert build_parser().parse_args(["routes", "check"]).config is None


def test_a_bad_route_config_in_bench_is_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "routes.toml"
    bad.write_text("[listener]\n")
    code = main(["bench", "envoy-hop", "--quick", "--config", str(bad), "--out", str(tmp_path)])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"pricingctl bench: {bad}: ")


def test_a_usage_error_stays_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["routes", "check", "--no-such-flag"])
    assert exc.value.code == 2


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"pricingctl {version('pricingservice')}"


def test_jaeger_is_a_mode_in_up_and_a_url_in_traces() -> None:
    parser = build_parser()
    assert parser.parse_args(["up", "--jaeger", "off"]).jaeger == "off"
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--jaeger", "http://127.0.0.1:16686"])
    url = "http://127.0.0.1:9"
    assert parser.parse_args(["traces", "--from-jaeger", url]).from_jaeger == url
    assert parser.parse_args(["traces"]).from_jaeger == "http://127.0.0.1:16686"


def _all_help(parser: argparse.ArgumentParser) -> str:
    text = parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                text += _all_help(sub)
    return text


def test_no_help_text_names_a_tracing_value_that_no_longer_exists() -> None:
    text = _all_help(build_parser())
    assert "PRICING_TRACING=1" not in text and "PRICING_TRACING=0" not in text
    assert "PRICING_TRACING=full" in text
