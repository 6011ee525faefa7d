"""`pricingctl bench baseline --quick`: the io pool and the two stock stacks (Flask on
gunicorn gevent with requests, FastAPI on uvicorn with aiohttp, each with the contrib
instrumentation at 1 %) served the same offers in one run, and each side's worker CPU
per offer was read. Structure and sanity only: the figures are the benchmark's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.support.cli import pricingctl

pytestmark = [pytest.mark.integration]

PNG = b"\x89PNG\r\n\x1a\n"


def test_baseline_quick_measures_every_side(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = pricingctl(
        *("bench", "baseline", "--quick", "--out", str(out), "--run-dir", str(tmp_path / "run")),
        timeout_s=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "baseline.json").read_text())
    windows = {(w["tracing"], w["side"]): w for w in doc["windows"]}
    assert set(windows) == {("1 %", side) for side in ("project", "gevent", "asyncio")}
    for window in windows.values():
        # Every side answered every offer with a 200, and its own worker did the work.
        assert window["count"] > 0 and window["ok"] == window["count"], window
        assert window["cpu_ms_per_offer"] > 0
    ratios = {t["name"]: t["measured"] for t in doc["targets"]}
    assert all(r[0] > 0 for name, r in ratios.items() if "1 %" in name)
    assert (out / "baseline.png").read_bytes()[:8] == PNG


def test_baseline_bad_rates_are_one_line_and_exit_2() -> None:
    done = pricingctl("bench", "baseline", "--offer-rates", "40,fast", timeout_s=60)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
