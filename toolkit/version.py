"""An installed distribution's version: the one lookup the build-info metric, the
tracing resource and `pricingctl --version` all make."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

#: This project's distribution (pyproject.toml's name).
PROJECT: str = "pricingservice"


def package_version(package: str = PROJECT, *, missing: str = "unknown") -> str:
    """The installed version of `package`, or `missing` when it is not installed."""
    try:
        return version(package)
    except PackageNotFoundError:
        return missing
