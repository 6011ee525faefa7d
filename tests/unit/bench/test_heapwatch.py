"""The heap watch: which allocation sites grew between two tracemalloc snapshots, and
nothing traced unless the environment asks for it."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from bench import heapwatch
from toolkit.contract import HEAPWATCH_DIR_ENV


def _kept(n: int) -> list[bytes]:
    return [bytes(1000) + str(i).encode() for i in range(n)]  # the growing site


def test_the_site_that_keeps_allocations_comes_first(tmp_path: Path) -> None:
    proc = tmp_path / "123-simulator"
    proc.mkdir()
    tracemalloc.start(1)
    try:
        tracemalloc.take_snapshot().dump(str(proc / "0000060.snap"))
        kept = _kept(2000)
        tracemalloc.take_snapshot().dump(str(proc / "0000120.snap"))
    finally:
        tracemalloc.stop()
    (top, *_) = heapwatch.growing_sites(proc / "0000060.snap", proc / "0000120.snap")
    first = _kept.__code__.co_firstlineno
    site = f"{Path(__file__).name}:"
    assert top.where.split("/")[-1] in (f"{site}{first}", f"{site}{first + 1}")
    assert top.grew_blocks >= len(kept)
    assert top.grew_bytes >= 1000 * len(kept)
    lines = heapwatch.report(tmp_path, from_s=0.0, requests_per_s=100.0)
    assert lines[0].startswith("123-simulator: traced KiB over 60 s")
    assert "KiB per million requests" in lines[1] and top.where in lines[1]


def test_nothing_is_traced_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HEAPWATCH_DIR_ENV, raising=False)
    monkeypatch.setattr(heapwatch.sys, "orig_argv", ["python", "-m", "simulator"])
    heapwatch.install()
    assert not tracemalloc.is_tracing()


def test_watching_sets_the_environment_for_the_block_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.delenv(HEAPWATCH_DIR_ENV, raising=False)
    with heapwatch.watching(tmp_path):
        site, elsewhere = os.environ["PYTHONPATH"].split(os.pathsep)
        assert (Path(site) / "sitecustomize.py").is_file() and elsewhere == "/elsewhere"
        assert os.environ[HEAPWATCH_DIR_ENV] == str(tmp_path)
    assert os.environ["PYTHONPATH"] == "/elsewhere"
    assert HEAPWATCH_DIR_ENV not in os.environ
