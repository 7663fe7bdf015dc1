"""Timing one candidate on an NVIDIA GPU with device events.

Each timed launch is bracketed by its own pair of CUDA events on the launch
stream, and every batch is queued behind a GPU-side sleep, so the GPU never
waits on the host between the events (a host-starved launch would time the
Python dispatch, not the kernel). ``setup`` and the L2 flush run outside the
event pairs. The result is the median over batches of the mean per launch.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Optional

#: Clock the sleep kernel is sized for (cycles per microsecond); a slower
#: clock only lengthens the backlog, which is harmless.
_SLEEP_CYCLES_PER_US = 2000
_MAX_BACKLOG_US = 20000.0
#: A batch of short launches is stretched to about this much GPU time (flushes included) ...
MIN_BATCH_MS = 0.5
#: ... but never more launches than this.
MAX_PER_BATCH = 100
_flush_buffers: dict = {}


def _torch():
    import torch

    return torch


def _flush_buffer(device: Any):
    """A buffer twice the L2 size, zeroed before each timed launch (cold L2 each rep)."""
    torch = _torch()
    index = device.index if device.index is not None else torch.cuda.current_device()
    buf = _flush_buffers.get(index)
    if buf is None:
        l2 = getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0) or (64 << 20)
        buf = _flush_buffers[index] = torch.empty(2 * l2, dtype=torch.int8, device=torch.device("cuda", index))
    return buf


def cuda_benchmark(
    fn: Callable[[], Any],
    setup: Optional[Callable[[], Any]] = None,
    *,
    stream: Any = None,
    warmup: int = 5,
    rep: int = 20,
    batches: int = 5,
    flush_l2: bool = True,
) -> float:
    """Median milliseconds of one ``fn()`` launch on ``stream`` (see module docstring).

    :param fn: one launch; it must enqueue its work on the current stream.
    :param setup: untimed, before every launch (restore/zero tensors).
    :param stream: a torch CUDA stream; None = the current stream.
    :param warmup: untimed launches first (compilation, caches).
    :param rep: timed launches in total (at least), split into ``batches``; short
        kernels get more, up to ``MAX_PER_BATCH`` per batch.
    :param flush_l2: zero a buffer twice the L2 size before each launch.
    """
    torch = _torch()
    if stream is None:
        stream = torch.cuda.current_stream()
    batches = max(1, min(batches, rep))
    per_batch = max(1, -(-rep // batches))
    with torch.cuda.stream(stream):
        flush = _flush_buffer(stream.device) if flush_l2 else None
        host_us = float("inf")
        n_warm = max(warmup, 2)
        for i in range(n_warm):
            if i == 1:
                w0 = torch.cuda.Event(enable_timing=True)
                w0.record(stream)
            t0 = time.perf_counter()
            if setup is not None:
                setup()
            if flush is not None:
                flush.zero_()
            fn()
            # the fastest warm-up excludes the first call's compilation
            host_us = min(host_us, (time.perf_counter() - t0) * 1e6)
        w1 = torch.cuda.Event(enable_timing=True)
        w1.record(stream)
        stream.synchronize()
        # Short kernels: more launches per batch, so that a batch spans about MIN_BATCH_MS.
        est_ms = max(w0.elapsed_time(w1) / (n_warm - 1), 1e-3)
        per_batch = max(per_batch, min(MAX_PER_BATCH, int(MIN_BATCH_MS / est_ms) + 1))
        # Enough GPU-side backlog to cover the host enqueueing a whole batch.
        backlog_us = min(_MAX_BACKLOG_US, 2.0 * host_us * per_batch + 50.0)
        results = []
        for _ in range(batches):
            pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(per_batch)]
            torch.cuda._sleep(int(backlog_us * _SLEEP_CYCLES_PER_US))
            for start, end in pairs:
                if setup is not None:
                    setup()
                if flush is not None:
                    flush.zero_()
                start.record(stream)
                fn()
                end.record(stream)
            stream.synchronize()
            results.append(sum(s.elapsed_time(e) for s, e in pairs) / per_batch)
    return statistics.median(results)
