"""Timing candidates on an NVIDIA GPU: the core's timing engine on the launch stream.

The engine (``flyautotune.timing``) warms the clocks, then times graph replays
of round-robin launches over rotated inputs (each replay behind an untimed L2
flush; ``flush=False`` replays back to back), or per-launch CUDA events when a
graph cannot be captured or ``setup`` must run between launches.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from flyautotune import timing


#: One launch timed on its stream's device (see :func:`flyautotune.timing.time_on_stream`).
benchmark = timing.time_on_stream


def cuda_benchmark(
    fn: Callable[[], Any],
    setup: Optional[Callable[[], Any]] = None,
    *,
    stream: Any = None,
    warmup: int = 5,
    rep: int = 20,
    **options: Any,
) -> float:
    """Median milliseconds of one ``fn()`` launch on ``stream`` (:func:`benchmark`'s ``ms``)."""
    return benchmark(fn, setup, stream=stream, warmup=warmup, rep=rep, **options).ms
