"""Timing candidates on an NVIDIA GPU: the core's timing engine on the launch stream.

The engine (``flyautotune.timing``) warms the clocks, then times graph replays
of round-robin launches over rotated inputs, or per-launch CUDA events when a
graph cannot be captured or ``setup`` must run between launches.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from flyautotune import timing
from flyautotune.measurement import Measurement


def _device(stream: Any) -> Any:
    import torch

    device = getattr(stream, "device", None)
    return device if device is not None else torch.device("cuda", torch.cuda.current_device())


def benchmark(
    fn: Callable[[], Any],
    setup: Optional[Callable[[], Any]] = None,
    *,
    stream: Any = None,
    warmup: int = 5,
    rep: int = 20,
    rotations: Sequence[Callable[[], Any]] = (),
    **options: Any,
) -> Measurement:
    """One launch of ``fn`` timed on ``stream`` (None = the current stream); see :func:`flyautotune.timing.benchmark`.

    :param options: passed on to the engine (``cutoff_ms``, ``method``, ``warm``, ``name``).
    """
    return timing.benchmark(fn, setup=setup, stream=stream, device=_device(stream), warmup=warmup, rep=rep,
                            rotations=rotations, **options)


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
