"""One candidate of a search: its config, the samples timed for it, and how noisy they are."""

from __future__ import annotations

import statistics
from typing import Any, Optional

from ..config import Config
from ..measurement import Measurement


def config_repr(config: Config) -> Any:
    return config.to_dict() if config.pre_hook is None else repr(config)


def relative_spread(samples: list) -> float:
    """Half the range of the samples over their median: the noise one timing carries."""
    if len(samples) < 2:
        return 0.0
    med = statistics.median(samples)
    return (max(samples) - min(samples)) / 2 / med if med > 0 else 0.0


class Candidate:
    """One config of a search and everything measured about it."""

    def __init__(self, config: Config, is_default: bool) -> None:
        self.config = config
        self.is_default = is_default
        self.samples: list = []
        self.measurement: Optional[Measurement] = None
        self.error: Optional[str] = None
        self.reused = False

    @property
    def ms(self) -> Optional[float]:
        return statistics.median(self.samples) if self.samples else None

    def noise(self, within: bool = False) -> float:
        """The relative uncertainty of ``ms``: how far the re-timing rounds disagree, or, from one
        measurement of ``reps`` samples, the standard error of its median (IQR / 1.35 is the
        standard deviation of normal samples; the median's error is 1.25 of that over sqrt(reps)).
        ``within=True``: only the latter."""
        m = self.measurement
        spread = m.spread if m is not None and m.spread else 0.0
        reps = m.reps if m is not None and m.reps and m.reps > 1 else 1
        se = spread * 0.93 / reps ** 0.5
        return se if within else max(relative_spread(self.samples), se)

    def row(self) -> dict:
        row = {"config": config_repr(self.config), "ms": self.ms, "error": self.error}
        if self.measurement is not None:
            row.update(spread=round(self.noise(), 6), rounds=len(self.samples))
            if len(self.samples) > 1:  # the first pass and each re-timing round, in order (not stored)
                row["samples"] = list(self.samples)
            if self.measurement.method:
                row["method"] = self.measurement.method
            if self.measurement.reps:
                row["reps"] = self.measurement.reps
        if self.is_default:
            row["default"] = True
        return row
