"""What a benchmarker reports for one candidate: a time, its spread, and how it was taken."""

from __future__ import annotations

import math
from typing import Any, Optional

import attrs


def _finite_ms(instance, attribute, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"Measurement.{attribute.name}={value!r}: expected a finite time in milliseconds > 0")


def _spread(instance, attribute, value):
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"Measurement.spread={value!r}: expected a finite relative spread >= 0, or None")


@attrs.frozen
class Measurement:
    """One candidate's timing.

    :param ms: time of one launch in milliseconds (a median over ``reps``).
    :param spread: relative spread of the samples behind ``ms`` (e.g. the
        interquartile range over the median), or None when unknown.
    :param method: how it was timed: ``"graph"`` (graph replay over rotated
        inputs), ``"events"`` (device events per launch), ``"wall"`` (host
        clock), or a benchmarker's own name.
    :param reps: timed samples behind ``ms``.
    :param note: why a method was chosen (e.g. the graph capture error that
        forced event timing), or "".
    """

    ms: float = attrs.field(validator=_finite_ms, converter=float)
    spread: Optional[float] = attrs.field(default=None, validator=_spread)
    method: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    reps: int = attrs.field(default=0, validator=attrs.validators.instance_of(int))
    note: str = attrs.field(default="", validator=attrs.validators.instance_of(str))

    def __float__(self) -> float:
        # Callers written for float-returning benchmarkers keep working.
        return self.ms

    def to_dict(self) -> dict:
        return {"ms": self.ms, "spread": self.spread, "method": self.method, "reps": self.reps,
                **({"note": self.note} if self.note else {})}

    @classmethod
    def coerce(cls, value: Any, who: str = "benchmark") -> "Measurement":
        """A benchmarker's answer (float ms or Measurement) as a Measurement.

        :raises ValueError: naming ``who`` and the value, for None, NaN, inf,
            negative, zero, bool or non-number answers.
        """
        if isinstance(value, Measurement):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{who} returned {value!r}; expected the time of one launch in milliseconds "
                             f"(a finite float > 0) or a flyautotune.Measurement")
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{who} returned {value!r} ms; expected a finite time > 0")
        return cls(float(value))
