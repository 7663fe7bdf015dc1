"""Timing launches one by one with device events (the fallback when a graph cannot be used).

Each timed launch is bracketed by its own pair of events on the launch stream,
and every batch is queued behind a GPU-side sleep where the device module has
one, so the GPU never waits on the host between the events (a host-starved
launch would time the Python dispatch, not the kernel). ``setup`` and the cache
flush run outside the event pairs. The result is the median over batches of the
mean per launch.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional, Sequence

from . import rotate, stats

#: Clock the sleep kernel is sized for (cycles per microsecond); a slower clock only lengthens the backlog.
SLEEP_CYCLES_PER_US = 2000
_MAX_BACKLOG_US = 20000.0
#: A batch of short launches is stretched to about this much GPU time ...
MIN_BATCH_MS = 0.5
#: ... but never more launches than this.
MAX_PER_BATCH = 100
#: Batches (samples) behind one result.
BATCHES = 10

_flush_buffers: dict = {}
_flush_lock = threading.Lock()


def _make_flush_buffer(device: Any, module: Any) -> Any:
    import torch

    size = rotate.last_level_cache_bytes(device, module) or rotate.DEFAULT_CACHE_BYTES
    return torch.empty(int(rotate.FOOTPRINT_FACTOR * size), dtype=torch.int8, device=device)


def flush_buffer(device: Any, module: Any) -> Any:
    """A buffer twice the last-level cache, zeroed before a timed launch so that it starts cold (one per device)."""
    key = (getattr(device, "type", str(device)), getattr(device, "index", None))
    with _flush_lock:
        buf = _flush_buffers.get(key)
        if buf is None:
            buf = _flush_buffers[key] = _make_flush_buffer(device, module)
    return buf


def release_flush_buffers() -> None:
    """Drop the cached flush buffers (twice the last-level cache on each device that timed: 100 MB on an
    H200, 512 MB on an MI300). A search calls this when it ends, so the memory goes back to the allocator
    for the caller's tensors; the next timing that needs one allocates it again."""
    with _flush_lock:
        _flush_buffers.clear()


def _backlog(module: Any, us: float) -> None:
    sleep = getattr(module, "_sleep", None)
    if sleep is not None:
        sleep(int(min(_MAX_BACKLOG_US, us) * SLEEP_CYCLES_PER_US))


def time_one(fn: Callable[[], Any], module: Any, stream: Any, *, host_us: float = 50.0) -> float:
    """Milliseconds of one ``fn()`` on ``stream``, queued behind a backlog so that host dispatch is not timed."""
    start, end = module.Event(enable_timing=True), module.Event(enable_timing=True)
    _backlog(module, 2.0 * host_us + 50.0)
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end)


def time_events(
    launches: Sequence[Callable[[], Any]],
    *,
    module: Any,
    stream: Any,
    setup: Optional[Callable[[], Any]] = None,
    flush: Any = None,
    warmup: int = 5,
    rep: int = 20,
    est_ms: float = 1e-3,
    batches: int = BATCHES,
) -> tuple:
    """Per-launch device-event timing, round-robin over ``launches``.

    :param launches: one launch each (the same launch over distinct input copies, or just one).
    :param setup: untimed before every launch.
    :param flush: a buffer zeroed before every launch (None = no flush).
    :param est_ms: a first estimate of one launch, to size the batches.
    :returns: ``(ms, spread, samples)``: median over batches of the mean per launch,
        relative interquartile range of the batch means, number of batches.
    """
    n = len(launches)
    batches = max(1, min(batches, rep))
    per_batch = max(1, -(-rep // batches))
    # Short kernels: more launches per batch, so that a batch spans about MIN_BATCH_MS.
    per_batch = max(per_batch, min(MAX_PER_BATCH, int(MIN_BATCH_MS / max(est_ms, 1e-4)) + 1))
    host_us = float("inf")
    k = 0
    for _ in range(max(warmup, 1)):
        t0 = time.perf_counter()
        if setup is not None:
            setup()
        if flush is not None:
            flush.zero_()
        launches[k % n]()
        k += 1
        host_us = min(host_us, (time.perf_counter() - t0) * 1e6)
    # Enough GPU-side backlog to cover the host enqueueing a whole batch.
    backlog_us = 2.0 * host_us * per_batch + 50.0
    results = []
    for _ in range(batches):
        pairs = [(module.Event(enable_timing=True), module.Event(enable_timing=True)) for _ in range(per_batch)]
        _backlog(module, backlog_us)
        for start, end in pairs:
            if setup is not None:
                setup()
            if flush is not None:
                flush.zero_()
            start.record(stream)
            launches[k % n]()
            end.record(stream)
            k += 1
        pairs[-1][1].synchronize()
        results.append(sum(s.elapsed_time(e) for s, e in pairs) / per_batch)
    return stats.median(results), stats.relative_iqr(results), len(results)
