"""The compiled hot path against its Python reference: the switch tracer (relabels,
measured greenlets, hub blocks, route CPU, spawned greenlets' tags) and a tracer that
meets a bad state.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import greenlet
import pytest
from greenlet import getcurrent

from tests.unit.tracing.timing import replay
from tests.unit.tracing.timing.replay import (
    LABELS,
    US,
    Clock,
    Exploding,
    FakeGreenlet,
    compiled,
    needs_compiled,
    on_path,
    replay_switches,
    switch_events,
)
from tracing.timing import native
from tracing.timing.labels import HUB_LABEL, TAG_ATTR, GreenletTag, tag_of
from tracing.timing.route_cpu import RouteCpu
from tracing.timing.switch_tracer import SwitchTracer
from tracing.timing.switchlog import SwitchLog


@needs_compiled
@pytest.mark.parametrize("seed", range(12))
def test_the_switch_tracer_gives_the_reference_numbers(seed: int, tmp_path: Path) -> None:
    events = switch_events(seed, greenlets=6, steps=600)
    schedstat = tmp_path / "schedstat" if seed % 2 else None
    if schedstat is not None:
        schedstat.write_text("0 0 0\n")
    reference = replay_switches(False, events, schedstat)
    if schedstat is not None:
        assert len(reference["runqueue"][0]) > 10, "the run-queue clock was never sampled"
    assert any(c[0] is not None for c in reference["calls"]), "the sequence measured nothing"
    assert any(c[0] is not None and c[0][1] + c[0][2] > 0 for c in reference["calls"])
    assert any(c[1] is not None and c[1][3] for c in reference["calls"]), "no request waits"
    assert reference["blocks"], "no run was long enough to count as a hub block"
    if schedstat is not None:
        schedstat.write_text("0 0 0\n")
    assert replay_switches(True, events, schedstat) == reference


@needs_compiled
def test_the_switch_tracer_gives_the_reference_numbers_over_many_labels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More labels than the compiled tracer holds runs for (the rest go to the dict), and
    labels equal but not the same string object: the same CPU per label."""
    many: list[str | None] = [f"GET /v1/r{i}" for i in range(90)]
    many += ["".join(["GET /v1/r", str(i)]) for i in range(10)]  # equal, not identical
    monkeypatch.setattr(replay, "LABELS", [*many, None, "<hub>"])
    events = switch_events(7, greenlets=6, steps=3000)
    reference = replay_switches(False, events)
    assert len(reference["route_cpu"]) > 40
    assert replay_switches(True, events) == reference


def test_route_cpu_is_read_up_to_date_while_the_tracer_runs() -> None:
    """The compiled tracer holds short runs until pulled: ``current()`` pulls them."""
    clock = Clock()
    route_cpu = RouteCpu()
    route_cpu.since[:] = [clock.now, HUB_LABEL]
    tracer = SwitchTracer(compiled.SwitchLog(16) if compiled else SwitchLog(16), clock=clock)
    hub, bike = FakeGreenlet(HUB_LABEL), FakeGreenlet(LABELS[0])
    with on_path(compiled is not None, clock):
        tracer.install(route_cpu=route_cpu)
        try:
            trace = tracer._trace
            assert trace is not None
            clock.now += 300 * US
            trace("switch", (hub, bike))
            clock.now += 200 * US
            trace("switch", (bike, hub))
            assert route_cpu.current() == {HUB_LABEL: 300 * US, LABELS[0]: 200 * US}
            assert route_cpu.since == [clock.now, HUB_LABEL]
            clock.now += 100 * US
            trace("switch", (hub, bike))
            assert route_cpu.current()[HUB_LABEL] == 400 * US
        finally:
            tracer.uninstall()
    assert route_cpu.pull is None
    assert route_cpu.by_label_ns == {HUB_LABEL: 400 * US, LABELS[0]: 200 * US}


def test_the_recorded_switch_sequences_contain_culprits_of_delays() -> None:
    """The sequences above are worth comparing: they name culprits."""
    culprits = [
        c[0][4]
        for seed in range(12)
        for c in replay_switches(False, switch_events(seed, greenlets=6, steps=600))["calls"]
        if c[0] is not None
    ]
    assert any(culprits)


@needs_compiled
def test_a_bad_state_in_the_tracer_is_counted_and_dropped() -> None:
    log = compiled.SwitchLog(16)
    route_cpu = RouteCpu()
    forwarded: list[str] = []
    tracer = compiled.Tracer(log, lambda event, args: forwarded.append(event), route_cpu)
    bad = types.SimpleNamespace(**{TAG_ATTR: Exploding()})
    good = FakeGreenlet("GET /v1/offers/bike")
    before = compiled.bad_states()
    assert tracer("switch", (good, bad)) is None
    assert tracer("switch", "not a pair") is None
    assert compiled.bad_states() == before + 2
    assert forwarded == ["switch", "switch"]  # the chained tracer still sees every event
    tracer("switch", (bad, good))
    assert log.last()[1] == "GET /v1/offers/bike"


@needs_compiled
def test_the_tracer_reads_a_tag_alike_through_its_slots_or_its_dict() -> None:
    """The compiled path reads the timing core's __slots__ classes at the slot's offset
    (found once per type and name); any other object through getattr. Both say the same,
    in any order, and a slot never set is a bad state, not a crash."""

    class SlotTag:
        __slots__ = ("call", "inbound", "label", "request")

    class DictTag:
        pass

    log = compiled.SwitchLog(16)
    tracer = compiled.Tracer(log, None, RouteCpu())
    hub = FakeGreenlet("<hub>")
    for cls in (SlotTag, DictTag, SlotTag, DictTag):
        tag = cls()
        tag.label, tag.call, tag.request, tag.inbound = f"GET /{cls.__name__}", None, None, None
        tracer("switch", (hub, types.SimpleNamespace(**{TAG_ATTR: tag})))
        assert log.last()[1] == f"GET /{cls.__name__}"
    before = compiled.bad_states()
    tracer("switch", (hub, types.SimpleNamespace(**{TAG_ATTR: SlotTag()})))  # no label set
    assert compiled.bad_states() == before + 1
    # A class changed after its slot was found is looked at again: its slot still holds
    # a value, but the name now means something else.
    tag = SlotTag()
    tag.label, tag.call, tag.request, tag.inbound = "GET /SlotTag", None, None, None
    SlotTag.label = property(lambda self: "GET /patched")  # type: ignore[assignment,misc]
    tracer("switch", (hub, types.SimpleNamespace(**{TAG_ATTR: tag})))
    assert log.last()[1] == "GET /patched"


@needs_compiled
def test_the_tracer_finds_a_greenlets_tag_as_getattr_does() -> None:
    """The compiled path reads a greenlet's tag from its instance dict when its type has
    nothing of that name (checked once per type and call site); otherwise, or once the
    class changed, through getattr: a property or ``__getattr__`` is obeyed."""

    def tagged(label: str) -> GreenletTag:
        return GreenletTag(label)

    class Plain:
        pass

    class Computed:
        def __getattr__(self, name: str) -> Any:
            if name == TAG_ATTR:
                return tagged("GET /computed")
            raise AttributeError(name)

    log = compiled.SwitchLog(16)
    tracer = compiled.Tracer(log, None, RouteCpu())
    hub = FakeGreenlet("<hub>")
    real = greenlet.greenlet(lambda: None)
    setattr(real, TAG_ATTR, tagged("GET /real"))
    plain = Plain()
    setattr(plain, TAG_ATTR, tagged("GET /plain"))
    for target, label in [
        (real, "GET /real"),
        (plain, "GET /plain"),
        (Computed(), "GET /computed"),
    ] * 2:
        tracer("switch", (hub, target))
        assert log.last()[1] == label
    # A class that gains a property of that name after it was seen: the property wins.
    setattr(Plain, TAG_ATTR, property(lambda self: tagged("GET /property")))
    for _ in range(3):
        tracer("switch", (hub, plain))
        assert log.last()[1] == "GET /property"
    delattr(Plain, TAG_ATTR)
    for _ in range(3):
        tracer("switch", (hub, plain))
        assert log.last()[1] == "GET /plain"
    # No tag yet: the tracer makes one (labels.tag_of), as getattr(..., None) finds none.
    fresh = Plain()
    tracer("switch", (hub, fresh))
    assert isinstance(getattr(fresh, TAG_ATTR), GreenletTag)


@needs_compiled
def test_the_tracer_gives_a_spawned_greenlet_its_spawners_label_as_the_reference() -> None:
    """A greenlet gevent spawned gets its tag from the compiled tracer when its spawner has
    one; otherwise labels.tag_of makes both tags. The same labels either way."""
    import gevent

    def spawned_from(spawner_label: str | None) -> tuple[Any, Any]:
        def spawner() -> Any:
            if spawner_label is not None:
                tag_of(getcurrent()).label = spawner_label
            return gevent.spawn(lambda: None)

        parent = gevent.spawn(spawner)
        parent.join()
        return parent, parent.value

    log = compiled.SwitchLog(16)
    tracer = compiled.Tracer(log, None, RouteCpu())
    hub = FakeGreenlet("<hub>")
    for spawner_label in ("POST /v1/offers/rideshare", None):  # None: the spawner has no tag
        parent, child = spawned_from(spawner_label)
        assert getattr(child, TAG_ATTR, None) is None
        tracer("switch", (hub, child))
        tag = getattr(child, TAG_ATTR)
        assert type(tag) is GreenletTag
        assert tag.label == getattr(parent, TAG_ATTR).label == log.last()[1]
        if spawner_label is not None:
            assert tag.label == spawner_label
        child.kill()


@needs_compiled
def test_the_tracer_makes_a_spawned_greenlets_tag_without_running_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tag a new greenlet gets on its first switch is built in C, slot by slot, without
    running GreenletTag.__init__ (a Python frame inside the tracer, once per greenlet).
    It holds what GreenletTag(label) holds."""
    import gevent

    inits: list[object] = []
    reference_init = GreenletTag.__init__

    def counted_init(self: GreenletTag, label: str | None) -> None:
        inits.append(label)
        reference_init(self, label)

    def spawner() -> Any:
        tag_of(getcurrent()).label = "GET /v1/offers/bike"
        return gevent.spawn(lambda: None)

    parent = gevent.spawn(spawner)
    parent.join()
    child = parent.value
    tracer, hub = compiled.Tracer(compiled.SwitchLog(16), None, RouteCpu()), FakeGreenlet("<hub>")
    monkeypatch.setattr(GreenletTag, "__init__", counted_init)
    tracer("switch", (hub, child))
    assert inits == []
    tag, reference = getattr(child, TAG_ATTR), GreenletTag("GET /v1/offers/bike")
    assert inits == ["GET /v1/offers/bike"]  # the reference does run it
    assert type(tag) is GreenletTag
    assert {name: getattr(tag, name) for name in GreenletTag.__slots__} == {
        name: getattr(reference, name) for name in GreenletTag.__slots__
    }
    child.kill()


@needs_compiled
def test_a_tag_type_with_other_slots_is_refused_by_configure() -> None:
    """The compiled tracer fills exactly GreenletTag's four slots: a type with more (or
    fewer) would be left half set, so configure says so instead."""

    class Wider:
        __slots__ = ("call", "extra", "inbound", "label", "request")

    class Narrower:
        __slots__ = ("call", "label", "request")

    for tag_type in (Wider, Narrower):
        with pytest.raises(TypeError):
            native.module.configure(
                getcurrent=getcurrent,
                measuring=[0],
                tag_of=tag_of,
                tag_type=tag_type,
                call_state=None,
                request_type=GreenletTag,
                max_waits=1,
            )


@needs_compiled
def test_a_tracer_given_a_bad_since_is_refused_with_a_clear_error() -> None:
    route_cpu = RouteCpu()
    route_cpu.since[0] = "not a time"
    with pytest.raises(TypeError, match="integer"):
        compiled.Tracer(compiled.SwitchLog(8), None, route_cpu, hub_label=HUB_LABEL)
