"""routing.write: a route config written back as routes.toml reads back the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.run import with_workers
from routing.load import parse_routes
from routing.model import RouteConfig
from routing.write import render_routes_toml, write_routes


def test_rendered_toml_reads_back_as_the_same_config(routes: RouteConfig) -> None:
    assert parse_routes(render_routes_toml(routes)) == routes


def test_meta_paths_are_written_once(routes: RouteConfig) -> None:
    text = render_routes_toml(routes)
    assert text.count('"/openapi.json"') == 1  # in [meta]; the meta.openapi route has no path
    assert '[meta]\nhealthz = "/healthz"\nreadyz = "/readyz"' in text


def test_write_routes_points_source_at_the_file(routes: RouteConfig, tmp_path: Path) -> None:
    written = write_routes(with_workers(routes, 4), tmp_path / "r.toml")
    assert written.source == str((tmp_path / "r.toml").resolve())
    assert written.pool("cpu").workers == 3


def test_write_atomic_leaves_the_old_file_when_a_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from routing.write import write_atomic

    target = tmp_path / "pool.toml"
    write_atomic(target, "old\n")

    def crash(fd: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk gone"):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["pool.toml"]  # no temporary left


def test_write_atomic_makes_a_file_others_can_read_and_keeps_a_set_mode(tmp_path: Path) -> None:
    """`deploy render`'s files are mounted into containers whose user is not their owner
    (Envoy's, Jaeger's): mkstemp's 0600 made them unreadable there."""
    from routing.write import write_atomic

    target = tmp_path / "envoy.yaml"
    write_atomic(target, "one\n")
    assert target.stat().st_mode & 0o777 == 0o644
    target.chmod(0o640)
    write_atomic(target, "two\n")
    assert target.stat().st_mode & 0o777 == 0o640
