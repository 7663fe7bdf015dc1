"""What a benchmarker reports for one candidate: a time, its spread, and how it was taken."""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional

import attrs


def _to_ms(value: Any) -> float:
    # float() alone would take True as 1.0 ms and fail on None with a message that names no field.
    if not isinstance(value, bool):
        try:
            return float(value)
        except (TypeError, ValueError, OverflowError):
            pass
    raise ValueError(f"Measurement.ms={value!r}: expected a finite time in milliseconds > 0")


def _reps(instance, attribute, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"Measurement.reps={value!r}: expected the number of timed samples, an int >= 0")


def _text(instance, attribute, value):
    if not isinstance(value, str):
        raise TypeError(f"Measurement.{attribute.name}={value!r}: expected a str")


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

    ms: float = attrs.field(validator=_finite_ms, converter=_to_ms)
    spread: Optional[float] = attrs.field(default=None, validator=_spread)
    method: str = attrs.field(default="", validator=_text)
    reps: int = attrs.field(default=0, validator=_reps)
    note: str = attrs.field(default="", validator=_text)

    def __float__(self) -> float:
        # Callers written for float-returning benchmarkers keep working.
        return self.ms

    def to_dict(self) -> dict:
        return {"ms": self.ms, "spread": self.spread, "method": self.method, "reps": self.reps,
                **({"note": self.note} if self.note else {})}

    @classmethod
    def coerce(cls, value: Any, who: str = "benchmark") -> "Measurement":
        """A benchmarker's answer (float ms, any real number such as a NumPy scalar, or Measurement) as a Measurement.

        :raises ValueError: naming ``who`` and the value, for None, NaN, inf,
            negative, zero, bool or non-number answers.
        """
        if isinstance(value, Measurement):
            return value
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            several = isinstance(value, (list, tuple)) and len(value) > 1 and all(
                isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value)
            raise ValueError(f"{who} returned {value!r}; expected the time of one launch in milliseconds "
                             f"(a finite float > 0) or a flyautotune.Measurement"
                             + ("; several numbers, as triton.testing.do_bench(..., quantiles=...) returns: return "
                                "one of them (the median: quantiles=(0.5, ...) puts it first)" if several else ""))
        try:
            ms = float(value)
        except OverflowError:  # an int beyond any float
            ms = math.inf
        if not math.isfinite(ms) or ms <= 0:
            raise ValueError(f"{who} returned {value!r} ms; expected a finite time > 0")
        return cls(ms)
