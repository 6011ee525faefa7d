"""The derived route config for --workers N, written as TOML the pools can read."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.run import with_workers
from routing.load import parse_routes
from routing.model import Layout, RouteConfig
from routing.write import render_routes_toml, write_routes


def test_rendered_toml_reads_back_as_the_same_config(routes: RouteConfig) -> None:
    assert parse_routes(render_routes_toml(routes)) == routes


@pytest.mark.parametrize("n", [2, 3, 5])
def test_with_workers_keeps_the_same_total(routes: RouteConfig, n: int) -> None:
    derived = with_workers(routes, n)
    assert derived.pool("cpu").workers == n - 1
    assert derived.pool("io").workers == 1
    assert derived.pool("shared", Layout.SHARED).workers == n
    # and the loader derives the same shared count from the file
    assert parse_routes(render_routes_toml(derived)) == derived


def test_with_workers_refuses_one(routes: RouteConfig) -> None:
    with pytest.raises(ValueError, match="at least 2"):
        with_workers(routes, 1)


def test_write_routes_points_source_at_the_file(routes: RouteConfig, tmp_path: Path) -> None:
    written = write_routes(with_workers(routes, 4), tmp_path / "r.toml")
    assert written.source == str((tmp_path / "r.toml").resolve())
    assert written.pool("cpu").workers == 3
