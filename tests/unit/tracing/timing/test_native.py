"""Which path runs: the compiled hot path (``_native``) where it was built, the Python
reference otherwise or when asked; the replays comparing the two are in
``test_native_<module>.py``, over ``replay.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.tracing.timing.replay import (
    Clock,
    compiled,
    needs_compiled,
    on_path,
)
from tracing.timing import native
from tracing.timing.switchlog import SwitchLog


def test_the_compiled_path_is_what_runs_where_it_could_be_built() -> None:
    """A machine with a C compiler and Python's headers (CI's) tests the compiled path:
    a build that failed quietly (setup.py's extension is optional) would fail here."""
    import os
    import shutil
    import sysconfig

    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which("cc") is None or not headers.exists():
        pytest.skip("no compiler or no Python headers: the reference runs, by design")
    assert native.module is not None, native.reason
    if os.environ.get(native.ENV, "1") not in ("0", "off", "false", "no"):
        assert native.compiled_runs()


@needs_compiled
@pytest.mark.parametrize("use_compiled", [True, False], ids=["compiled", "reference"])
def test_what_the_hooks_bind_once_is_the_path_that_runs(use_compiled: bool) -> None:
    """The server's hooks and the call observer bind begin and finish once per process:
    the compiled functions where the compiled path runs, the reference's otherwise."""
    from tracing.timing import call_timing, server_timing

    with on_path(use_compiled, Clock()):
        begin_request, finish_request = server_timing.bound_requests()
        begin_call, finish_call = call_timing.bound_calls()
        if use_compiled:
            assert (begin_request, finish_request) == (
                compiled.begin_request,
                compiled.finish_request,
            )
            assert (begin_call, finish_call) == (compiled.begin_call, compiled.finish_call)
        else:
            assert begin_request.__module__ == server_timing.__name__
            assert finish_request.__module__ == server_timing.__name__
            assert begin_call.__module__ == call_timing.__name__
            assert finish_call.__module__ == call_timing.__name__


def test_one_place_decides_which_path_runs() -> None:
    """Every hot-path module hands ``native.accelerate`` its names; none asks which path
    runs (``native.reason``, ``native.module``) or imports the extension itself."""
    import re

    import tracing

    asks = re.compile(r"native\.(reason|module|compiled_runs)\b|import _native\b")
    root = Path(tracing.__file__).parent
    found = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        if path != root / "timing" / "native.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if asks.search(line)
    ]
    assert found == []


@needs_compiled
def test_switching_the_path_swaps_every_registered_name_back_and_forth() -> None:
    from tracing.timing import call_timing, histogram, server_timing, switchlog

    before = (call_timing.begin_call, server_timing.finish_request, histogram.new_histogram)
    previous = native.use(True)
    try:
        assert call_timing.begin_call is compiled.begin_call
        assert server_timing.finish_request is compiled.finish_request
        assert histogram.new_histogram is compiled.Histogram
        assert type(switchlog.new_log(8)) is compiled.SwitchLog
        native.use(False)
        assert call_timing.begin_call.__module__ == call_timing.__name__
        assert server_timing.finish_request.__module__ == server_timing.__name__
        assert type(histogram.new_histogram([1.0])) is histogram.Histogram
        assert type(switchlog.new_log(8)) is SwitchLog
        native.use(True)
        assert call_timing.begin_call is compiled.begin_call
    finally:
        native.use(previous)
    assert before == (
        call_timing.begin_call,
        server_timing.finish_request,
        histogram.new_histogram,
    )


def test_the_reference_is_announced_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    logger = logging.getLogger("tracing")
    monkeypatch.setattr(native, "reason", "the compiled extension is not built (no module)")
    with caplog.at_level(logging.INFO, logger="tracing"):
        native.announce(logger)
    (record,) = caplog.records
    assert "Python reference" in record.getMessage() and "not built" in record.getMessage()
    monkeypatch.setattr(native, "reason", None)
    caplog.clear()
    native.announce(logger)
    assert caplog.records == []
