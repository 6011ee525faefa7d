"""The compiled timing core's slot tables against the classes it writes slot by slot.

The C side makes GreenletTag, CallState, CallMeasurement, RequestMeasurement and
RequestState objects itself, filling each slot at an offset found once. Its name tables
are read against each class when the class is configured: every name must be a plain
slot, and every slot of the class must be named (one left unset would be an
AttributeError later, in Python code that reads it). These tests fail when a class's
``__slots__`` and the C table disagree, and when configuring refuses to see it.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from tests.unit.support.timing import slots_of
from tracing.timing import call_state, call_timing, native, server_timing
from tracing.timing.call_state import CallState, CallTiming
from tracing.timing.call_timing import CallMeasurement
from tracing.timing.request_state import RequestState
from tracing.timing.server_timing import RequestMeasurement, RequestTiming

compiled = native.module
pytestmark = pytest.mark.skipif(compiled is None, reason=native.reason or "not built")


def class_named(qualified: str) -> type:
    module, _, name = qualified.rpartition(".")
    cls: type = getattr(importlib.import_module(module), name)
    return cls


def test_every_table_names_exactly_its_classs_slots() -> None:
    tables: dict[str, tuple[str, ...]] = compiled.SLOT_TABLES
    assert set(tables) == {
        "tracing.timing.labels.GreenletTag",
        "tracing.timing.call_state.CallState",
        "tracing.timing.call_timing.CallMeasurement",
        "tracing.timing.server_timing.RequestMeasurement",
        "tracing.timing.request_state.RequestState",
    }
    disagree = {
        name: (
            sorted(set(table) - slots_of(class_named(name))),
            sorted(slots_of(class_named(name)) - set(table)),
        )
        for name, table in tables.items()
        if set(table) != slots_of(class_named(name)) or len(set(table)) != len(table)
    }
    assert disagree == {}, "C table only, class only: " + repr(disagree)


def _with_slot(base: type, name: str) -> type:
    return type(f"{base.__name__}WithMore", (base,), {"__slots__": (name,)})


def _without_slot(names: set[str], dropped: str) -> type:
    return type("Fewer", (), {"__slots__": tuple(sorted(names - {dropped}))})


def _configure_calls(measurement: type = CallMeasurement, state: type = CallState) -> Any:
    return compiled.configure_calls(
        measurement, state, CallTiming, call_state.NO_CULPRITS, call_timing.MAX_NESTING
    )


def _configure_requests(measurement: type = RequestMeasurement, state: type = RequestState) -> Any:
    return compiled.configure_requests(measurement, state, RequestTiming, call_state.NO_CULPRITS)


@pytest.mark.parametrize(
    ("configure", "keyword", "cls"),
    [
        (_configure_calls, "state", CallState),
        (_configure_calls, "measurement", CallMeasurement),
        (_configure_requests, "state", RequestState),
        (_configure_requests, "measurement", RequestMeasurement),
    ],
    ids=["CallState", "CallMeasurement", "RequestState", "RequestMeasurement"],
)
def test_configuring_refuses_a_class_whose_slots_the_table_does_not_match(
    configure: Any, keyword: str, cls: type
) -> None:
    with pytest.raises(TypeError, match="added_in_python"):
        configure(**{keyword: _with_slot(cls, "added_in_python")})
    dropped = sorted(slots_of(cls))[0]
    with pytest.raises(TypeError, match=dropped):
        configure(**{keyword: _without_slot(slots_of(cls), dropped)})
    configure()  # the real classes: taken (and what was configured before is kept)


def test_the_tag_type_is_checked_the_same_way() -> None:
    from tracing.timing import labels

    def configure(tag_type: type) -> None:
        compiled.configure(
            getcurrent=native.getcurrent,
            measuring=call_state.measuring,
            tag_of=labels.tag_of,
            tag_type=tag_type,
            call_state=call_state,
            request_type=RequestState,
            max_waits=64,
        )

    fewer = _without_slot(slots_of(labels.GreenletTag), "request")
    try:
        with pytest.raises(TypeError, match="request"):
            configure(fewer)
        with pytest.raises(TypeError, match="added_in_python"):
            configure(_with_slot(labels.GreenletTag, "added_in_python"))
    finally:
        native.configure_core(compiled)  # as at import, whatever happened above


def test_the_classes_were_taken_at_import() -> None:
    """The modules configured the compiled path with their own classes (a disagreement
    there would leave the reference running, with one logged line)."""
    previous = native.use(True)
    try:
        assert (call_timing.begin_call, call_timing.finish_call) == (
            compiled.begin_call,
            compiled.finish_call,
        )
        assert (server_timing.begin_request, server_timing.finish_request) == (
            compiled.begin_request,
            compiled.finish_request,
        )
    finally:
        native.use(previous)
