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
        assert native.active() is native.module


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
        assert (begin_request, finish_request) == (compiled.begin_request, compiled.finish_request)
        assert (begin_call, finish_call) == (compiled.begin_call, compiled.finish_call)
    else:
        assert begin_request is server_timing.begin_request
        assert finish_request is server_timing.RequestMeasurement.finish
        assert begin_call is call_timing.begin_call
        assert finish_call is call_timing.CallMeasurement.finish


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
