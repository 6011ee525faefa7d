"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import os

import pytest

from routing.load import load_routes
from routing.model import RouteConfig
from toolkit.contract import BENCH_PREFLIGHT_ENV


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-compiled",
        action="store_true",
        help="stop at once unless the compiled hot path is built and runs (CI's sanitizer "
        "and version jobs: a skipped compiled test would hide that it is not)",
    )
    parser.addoption(
        "--leak-calls",
        type=int,
        default=200_000,
        help="observed calls the leak check runs through the compiled observer",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Each `pricingctl bench` a test starts (and its results) look at the machine for
    # half a second before it starts, not the benchmark's three: the smoke runs check
    # that a part runs and writes what it promises, not how busy the machine was.
    os.environ.setdefault(BENCH_PREFLIGHT_ENV, "0.5")


def pytest_report_header(config: pytest.Config) -> str:
    from tracing.timing import native

    if native.module is not None and native.reason is None:
        return f"timing core: compiled ({native.module.__file__})"
    return f"timing core: the Python reference ({native.reason})"


def pytest_sessionstart(session: pytest.Session) -> None:
    from tracing.timing import native

    if session.config.getoption("--require-compiled") and (
        native.module is None or native.reason is not None
    ):
        raise pytest.UsageError(
            f"--require-compiled: the compiled path does not run ({native.reason})"
        )


@pytest.fixture(scope="session")
def routes() -> RouteConfig:
    return load_routes()


@pytest.fixture(scope="session")
def all_traced_routes(routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory) -> RouteConfig:
    """The committed route config with Envoy sampling every request, written to a file
    the pools read (tests that look at spans of ordinary requests need them all)."""
    from dataclasses import replace

    from routing.write import write_routes

    config = replace(routes, tracing=replace(routes.tracing, sample_percent=100.0))
    return write_routes(config, tmp_path_factory.mktemp("all-traced") / "routes.toml")


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(cert, key) PEM files of a self-signed certificate for 127.0.0.1 and localhost,
    made with the `openssl` command line; the cert is its own CA bundle."""
    import shutil
    import subprocess

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return str(cert), str(key)
