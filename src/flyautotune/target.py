"""The compile target a backend reports for a device."""

from __future__ import annotations

import attrs


def _nonempty_str(instance, attribute, value):
    if not isinstance(value, str) or not value:
        raise ValueError(f"Target.{attribute.name} must be a non-empty string, got {value!r}")


def _positive_int(instance, attribute, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"Target.{attribute.name} must be a positive int, got {value!r}")


@attrs.frozen
class Target:
    """What a backend compiles for: ``Target("rocm", "gfx942", 64)``.

    Frozen and hashable by value, so it is used directly as a cache-key part.
    """

    backend: str = attrs.field(validator=_nonempty_str)
    arch: str = attrs.field(validator=_nonempty_str)
    warp_size: int = attrs.field(validator=_positive_int)

    def to_dict(self) -> dict:
        return attrs.asdict(self)
