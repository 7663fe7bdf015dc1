"""Timing engine: the time of one launch, taken the way real use runs it, on any torch device.

``benchmark(fn, ...) -> Measurement`` is the entry point; backends' benchmark
hooks call it. It reaches the device only through torch's device-module
registry, so one implementation serves every GPU build of torch.
"""

from .engine import METHODS, benchmark, current_cutoff, cutoff_after
from .graph import CaptureError
from .rotate import (
    DEFAULT_CACHE_BYTES,
    last_level_cache_bytes,
    register_cache_probe,
    rotation_count,
    unregister_cache_probe,
)
from .clocks import warm_clocks
from .hook import benchmark_hook, time_on_stream

__all__ = [
    "CaptureError",
    "DEFAULT_CACHE_BYTES",
    "METHODS",
    "benchmark",
    "benchmark_hook",
    "time_on_stream",
    "current_cutoff",
    "cutoff_after",
    "last_level_cache_bytes",
    "register_cache_probe",
    "rotation_count",
    "unregister_cache_probe",
    "warm_clocks",
]
