"""`pricingctl`: one root, its sub-commands, the installed script and `python -m`."""

from __future__ import annotations

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
    for argv in (["routes", "check"], ["up"], ["traces", "--file"], ["bench", "--quick"]):
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


def test_a_bad_route_config_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "routes.toml"
    bad.write_text("[listener]\n")
    assert main(["routes", "--config", str(bad), "check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pricingctl: {bad}: ") and len(err.strip().splitlines()) == 1
