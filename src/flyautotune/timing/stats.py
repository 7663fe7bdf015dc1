"""Summaries of timed samples: the median and a relative spread that ignores outliers."""

from __future__ import annotations

import statistics
from typing import Sequence


def median(samples: Sequence[float]) -> float:
    """The median of ``samples`` (at least one)."""
    return float(statistics.median(samples))


def relative_iqr(samples: Sequence[float]) -> float:
    """Interquartile range over the median (0.0 for fewer than two samples or a zero median)."""
    if len(samples) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    mid = statistics.median(samples)
    return float((q3 - q1) / mid) if mid > 0 else 0.0

