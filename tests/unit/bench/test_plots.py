"""Without matplotlib (a dev-only package) the plots are skipped with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import plots


def test_without_matplotlib_plots_are_skipped_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(plots, "plt", None)
    monkeypatch.setattr(plots, "_told", [False])
    path = tmp_path / "cdf.png"
    assert plots.latency_cdf({"split": [1.0, 2.0]}, path, title="t", deadline_ms=None) is None
    assert plots.cpu_by_component({}, tmp_path / "cpu.png", title="t") is None
    assert not path.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "matplotlib is not installed" in err


def test_with_matplotlib_a_png_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "cdf.png"
    plots.latency_cdf({"split": [1.0, 2.0, 3.0]}, path, title="t", deadline_ms=None)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
