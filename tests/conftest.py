"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import pytest

from routing.load import load_routes
from routing.model import RouteConfig


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
