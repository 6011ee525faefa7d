"""Replace methods on classes and put back exactly what was there.

Restoring must not leave a copy behind: a method a subclass inherited goes back to being
inherited (the attribute is deleted), one the class defined itself is set back to the very
same object. Every replacement carries ``PATCH_MARK``, so a patch is never mistaken for an
original, and patching twice is a no-op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

PATCH_MARK: Final = "__gevent_timing_patch__"

_MISSING: Final = object()

Factory = Callable[[Callable[..., Any]], Callable[..., Any]]


def is_patch(value: object) -> bool:
    return bool(getattr(value, PATCH_MARK, False))


class Patches:
    """A set of method replacements, applied and restored together."""

    def __init__(self) -> None:
        # (class, attribute, the class's own original __dict__ entry or _MISSING)
        self._applied: list[tuple[type, str, Any]] = []

    def __bool__(self) -> bool:
        return bool(self._applied)

    def apply(self, cls: type, name: str, factory: Factory) -> None:
        """Replace ``cls.name`` with ``factory(original)`` unless it is already a patch."""
        original = getattr(cls, name)
        if is_patch(original):
            return
        own = cls.__dict__.get(name, _MISSING)
        replacement = factory(original)
        setattr(replacement, PATCH_MARK, True)
        setattr(cls, name, replacement)
        self._applied.append((cls, name, own))

    def restore(self) -> None:
        """Undo every replacement, newest first (idempotent)."""
        while self._applied:
            cls, name, own = self._applied.pop()
            if own is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, own)
