"""Host wall-clock timing, for devices whose launches finish before they return (CPU, interpreters)."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

from . import stats


def time_one(fn: Callable[[], Any]) -> float:
    """Host milliseconds of one ``fn()``."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def time_wall(
    launches: Sequence[Callable[[], Any]],
    *,
    setup: Optional[Callable[[], Any]] = None,
    warmup: int = 1,
    rep: int = 5,
    cutoff_ms: Optional[float] = None,
) -> tuple:
    """Per-launch host timing, round-robin over ``launches``, ``setup`` untimed before each.

    :param cutoff_ms: stop after the first timed launch when it took longer.
    :returns: ``(ms, spread, samples)``: the median, the relative interquartile
        range, the number of timed launches (1 when cut short).
    """
    n = len(launches)
    for i in range(max(warmup, 0)):
        if setup is not None:
            setup()
        launches[i % n]()
    times = []
    for i in range(max(rep, 1)):
        if setup is not None:
            setup()
        times.append(time_one(launches[i % n]))
        if cutoff_ms is not None and times[0] > cutoff_ms:
            break
    return stats.median(times), stats.relative_iqr(times), len(times)
