"""The compiled call observer (``tracing._client_native``) against ``tracing.client``.

Its ``call`` makes a ``_CompiledCall`` slot by slot, from the C table ``SLOT_NAMES``;
``configure_observer`` reads the class against it (every name a plain slot, every slot
named) and refuses a class that disagrees. These tests fail when ``_Call``'s
``__slots__`` and the C table drift apart, and when the extension was not built or not
taken where a compiler exists (a quiet fallback to the reference would double its CPU).
"""

from __future__ import annotations

import importlib
import shutil
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tests.unit.support.timing import slots_of
from tracing import client
from tracing.client import _Call, _CompiledCall
from tracing.timing import native
from tracing.timing.hook_errors import swallow

try:
    compiled: Any = importlib.import_module(client.COMPILED_OBSERVER)
except ImportError:
    compiled = None
needs_compiled = pytest.mark.skipif(
    compiled is None or native.module is None, reason="the compiled observer is not built"
)


def test_the_compiled_observer_is_what_runs_where_it_could_be_built() -> None:
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which("cc") is None or not headers.exists():
        pytest.skip("no compiler or no Python headers: the reference runs, by design")
    assert compiled is not None, "tracing._client_native did not import"
    assert client._compiled_observer is compiled.CallObserver, "configure_observer refused it"


@needs_compiled
def test_the_c_table_names_exactly_the_compiled_calls_slots() -> None:
    names: tuple[str, ...] = compiled.SLOT_NAMES
    assert len(set(names)) == len(names)
    assert set(names) == slots_of(_CompiledCall), (
        sorted(set(names) - slots_of(_CompiledCall)),
        sorted(slots_of(_CompiledCall) - set(names)),
    )


@needs_compiled
def test_configure_observer_refuses_a_class_the_table_does_not_match() -> None:
    more = type("More", (_CompiledCall,), {"__slots__": ("added_in_python",)})
    with pytest.raises(TypeError, match="added_in_python"):
        compiled.configure_observer(more, _Call.__enter__, _Call.__exit__, swallow)
    fewer_slots = tuple(sorted(slots_of(_CompiledCall) - {"_totals"}))
    fewer = type("Fewer", (), {"__slots__": fewer_slots})
    with pytest.raises(TypeError, match="_totals"):
        compiled.configure_observer(fewer, _Call.__enter__, _Call.__exit__, swallow)
    # the real class is still what the compiled observer makes
    enter, exit_ = compiled.configure_observer(
        _CompiledCall, _Call.__enter__, _Call.__exit__, swallow
    )
    assert (enter.__name__, exit_.__name__) == ("__enter__", "__exit__")
    assert _CompiledCall.__dict__["__enter__"].__name__ == "__enter__"


@needs_compiled
def test_the_observer_reaches_the_timing_core_through_its_capsule() -> None:
    """Nothing is linked across: the observer's extension finds the core's C API by name."""
    assert type(native.module._C_API).__name__ == "PyCapsule"
    assert "tracing.timing._native._C_API" in repr(native.module._C_API)
    assert compiled.CallObserver.__module__ == "tracing._client_native"
    assert not hasattr(native.module, "CallObserver")
    assert not hasattr(native.module, "configure_observer")
