"""Greenlet labels: which route a greenlet is working for.

The server layer labels the greenlet serving a request (``"POST /v1/offers/rideshare"``);
greenlets it spawns for fan-out inherit the label the first time they are seen. The switch
log records labels, so attribution never has to keep a greenlet alive.

A label lives in a small tag object stored as an attribute on the greenlet itself: a lookup
is one ``getattr``, cheap enough for every greenlet switch (``pricingctl bench
timing-cost``: the switch tracer, and ``set_greenlet_label``). The same tag
carries the greenlet's active call measurement, so the switch tracer and the socket hooks
find both with one lookup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from greenlet import getcurrent

if TYPE_CHECKING:
    from tracing.timing.call_state import CallState
    from tracing.timing.request_state import InboundWatch, RequestState

#: Label of the hub greenlet: time spent in the hub's own callbacks and in polling.
HUB_LABEL = "<hub>"
#: Label of greenlets nobody labelled.
UNKNOWN_LABEL = "<unknown>"

#: Attribute name under which a greenlet carries its :class:`GreenletTag`.
TAG_ATTR = "_gevent_timing_tag"


class GreenletTag:
    """Per-greenlet tracing state: its label, its active call measurement, and, for a
    greenlet serving a connection, the connection's inbound watch and its request."""

    __slots__ = ("call", "inbound", "label", "request")

    def __init__(self, label: str | None) -> None:
        self.label = label
        self.call: CallState | None = None
        self.inbound: InboundWatch | None = None
        self.request: RequestState | None = None


_hub_type: type | None = None

#: Called with the new label when the running greenlet relabels itself; set by the switch
#: tracer, which logs it like a switch: from now on, this label runs. (A request handler
#: labels itself after it was switched in; without this the CPU it burns before its next
#: switch would be logged under its old label.)
current_label_listener: Callable[[str | None], None] | None = None


def _is_hub(greenlet: Any) -> bool:
    global _hub_type
    if _hub_type is None:
        from gevent.hub import Hub

        _hub_type = Hub
    return isinstance(greenlet, _hub_type)


def tag_of(greenlet: Any) -> GreenletTag:
    """Return the tag of *greenlet*, creating it (with an inherited label) on first use."""
    tag: GreenletTag | None = getattr(greenlet, TAG_ATTR, None)
    if tag is not None:
        return tag
    label: str | None = None
    if _is_hub(greenlet):
        label = HUB_LABEL
    else:
        # gevent remembers who spawned a Greenlet (config.track_greenlet_tree, on by
        # default): inherit that greenlet's label, so fan-out work is blamed on the route.
        spawner_ref = getattr(greenlet, "spawning_greenlet", None)
        spawner = spawner_ref() if spawner_ref is not None else None
        if spawner is not None and spawner is not greenlet:
            label = tag_of(spawner).label
    tag = GreenletTag(label)
    # A greenlet type without a __dict__ cannot carry a tag: it stays unlabelled.
    with contextlib.suppress(AttributeError, TypeError):
        setattr(greenlet, TAG_ATTR, tag)
    return tag


def set_greenlet_label(label: str | None, greenlet: Any = None) -> str | None:
    """Label *greenlet* (default: the current one) and return its previous label.

    Pass ``None`` to clear the label, for example when a request ends and the worker
    greenlet goes back to waiting for the next one.
    """
    current = getcurrent()
    tag = tag_of(current if greenlet is None else greenlet)
    previous = tag.label
    tag.label = label
    listener = current_label_listener
    if listener is not None and (greenlet is None or greenlet is current):
        listener(label)
    return previous


def get_greenlet_label(greenlet: Any = None) -> str:
    """Return the label of *greenlet* (default: the current one), or ``"<unknown>"``."""
    label = tag_of(getcurrent() if greenlet is None else greenlet).label
    return UNKNOWN_LABEL if label is None else label
