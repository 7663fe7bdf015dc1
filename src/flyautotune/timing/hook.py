"""The engine as a backend's ``flyautotune_benchmark``: one implementation for every torch GPU backend."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from .._markers import hookimpl
from ..measurement import Measurement
from .engine import benchmark


def time_on_stream(
    fn: Callable[[], Any],
    setup: Optional[Callable[[], Any]] = None,
    *,
    stream: Any = None,
    warmup: int = 5,
    rep: int = 20,
    rotations: Sequence[Callable[[], Any]] = (),
    **options: Any,
) -> Measurement:
    """:func:`benchmark` on ``stream``'s device (the current accelerator device when ``stream`` is None).

    :param options: passed on to the engine (``cutoff_ms``, ``method``, ``warm``, ``name``).
    """
    if "device" in options:
        raise TypeError(f"time_on_stream: device={options['device']!r}: not accepted; the device is the stream's "
                        f"(the current accelerator's when stream is None); to choose it, call "
                        f"flyautotune.timing.benchmark(fn, device=...)")
    device = getattr(stream, "device", None)
    if device is None:
        from ..devices import current_device

        device = current_device()
    return benchmark(fn, setup=setup, stream=stream, device=device, warmup=warmup, rep=rep, rotations=rotations,
                     **options)


def benchmark_hook(owns: Callable[[Any], bool]) -> Callable[..., Optional[Measurement]]:
    """A ``flyautotune_benchmark`` implementation that times the targets ``owns(target)`` accepts
    with this engine; a backend plugin binds it as its hook: ``flyautotune_benchmark = benchmark_hook(...)``."""
    if not callable(owns):
        raise TypeError(f"benchmark_hook: owns={owns!r}: expected owns(target) -> bool, e.g. "
                        f"lambda target: target.backend == 'cuda'")

    @hookimpl
    def flyautotune_benchmark(fn: Callable[[], Any], setup: Optional[Callable[[], Any]], target: Any, stream: Any,
                              warmup: int, rep: int, rotations: Sequence[Callable[[], Any]],
                              cutoff_ms: Optional[float]) -> Optional[Measurement]:
        if not owns(target):
            return None
        return time_on_stream(fn, setup, stream=stream, warmup=warmup, rep=rep, rotations=rotations,
                              cutoff_ms=cutoff_ms)

    return flyautotune_benchmark
