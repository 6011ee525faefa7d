"""The one version lookup: `pricingctl --version`, the build-info metric and the tracing
resource all give the version pyproject.toml declares."""

from __future__ import annotations

import tomllib
from pathlib import Path

from toolkit.version import PROJECT, package_version

ROOT = Path(__file__).resolve().parents[3]


def test_the_project_version_is_pyprojects() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert declared["name"] == PROJECT
    assert package_version() == declared["version"]


def test_a_package_not_installed_gives_the_fallback() -> None:
    assert package_version("no-such-distribution-here") == "unknown"
    assert package_version("no-such-distribution-here", missing="n/a") == "n/a"
