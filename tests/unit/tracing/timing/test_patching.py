"""Patches go back exactly as they were."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracing.timing.patching import Patches, is_patch


class Base:
    def greet(self) -> str:
        return "base"


class Child(Base):
    def own(self) -> str:
        return "own"


def shout(original: Callable[..., Any]) -> Callable[..., Any]:
    def patched(self: Any) -> str:
        return original(self).upper()

    return patched


def test_restores_own_methods_to_the_same_object_and_inherited_ones_to_inherited() -> None:
    own_before = Child.__dict__["own"]
    patches = Patches()
    patches.apply(Child, "own", shout)
    patches.apply(Child, "greet", shout)
    assert (Child().own(), Child().greet(), Base().greet()) == ("OWN", "BASE", "base")
    assert is_patch(Child.__dict__["greet"])
    patches.restore()
    assert Child.__dict__["own"] is own_before
    assert "greet" not in Child.__dict__
    assert not patches
    patches.restore()  # idempotent


def test_never_patches_a_patch() -> None:
    first, second = Patches(), Patches()
    first.apply(Base, "greet", shout)
    second.apply(Base, "greet", shout)
    try:
        assert Base().greet() == "BASE"
        assert not second
    finally:
        first.restore()
    assert Base().greet() == "base"
