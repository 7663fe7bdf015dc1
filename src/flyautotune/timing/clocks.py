"""Warm a GPU to steady clocks before timing.

An idle GPU runs at low clocks and ramps up under load; the first candidate
timed after a pause would look slower than the rest. A short burst of dense
work (matrix products, about :data:`WARM_MS` of GPU time) brings the clocks to
their loaded level. It runs once per process and device, and again after the
device sat idle (no timing on it) for :data:`REWARM_AFTER_S`.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

#: GPU time of one warm-up burst.
WARM_MS = 150.0
#: A device left without timing this long is warmed again.
REWARM_AFTER_S = 10.0
#: Launches enqueued between two looks at the elapsed time.
_CHUNK = 16
#: Give up warming after this many chunks (a device whose events report nothing useful).
_MAX_CHUNKS = 256
_MATMUL_N = 4096

_last_busy: dict = {}
_lock = threading.Lock()


def _key(device: Any) -> tuple:
    return (getattr(device, "type", str(device)), getattr(device, "index", None))


def _matmul_work(device: Any) -> Callable[[], Any]:
    import torch

    a = torch.randn(_MATMUL_N, _MATMUL_N, device=device, dtype=torch.float16)
    b = torch.randn(_MATMUL_N, _MATMUL_N, device=device, dtype=torch.float16)
    out = torch.empty_like(a)
    return lambda: torch.matmul(a, b, out=out)


#: Builds the warm-up work for a device: ``make_work(device) -> work``, ``work()`` enqueues one burst.
make_work: Callable[[Any], Callable[[], Any]] = _matmul_work


def mark_busy(device: Any) -> None:
    """Record that ``device`` just ran timed work (it is still warm)."""
    with _lock:
        _last_busy[_key(device)] = time.monotonic()


def forget() -> None:
    """Treat every device as cold again (tests; after a long pause)."""
    with _lock:
        _last_busy.clear()


def warm_clocks(device: Any, module: Any, *, stream: Any = None, ms: float = WARM_MS,
                work: Optional[Callable[[], Any]] = None) -> Optional[float]:
    """Run about ``ms`` of dense work on ``device`` unless it ran timed work recently.

    :param module: the device module (its ``Event`` and ``stream``).
    :param stream: where the work runs (None = the current stream).
    :param work: one burst of work; None = a half-precision matrix product.
    :returns: the GPU milliseconds spent warming, or None when the device was warm.
    """
    now = time.monotonic()
    with _lock:
        last = _last_busy.get(_key(device))
        if last is not None and now - last < REWARM_AFTER_S:
            return None
        _last_busy[_key(device)] = now  # a concurrent caller does not warm twice
    spent = 0.0
    try:
        work = work if work is not None else make_work(device)
        with _on(module, stream):
            start = module.Event(enable_timing=True)
            start.record()
            for _ in range(_MAX_CHUNKS):
                for _ in range(_CHUNK):
                    work()
                end = module.Event(enable_timing=True)
                end.record()
                end.synchronize()
                spent = start.elapsed_time(end)
                if spent >= ms:
                    break
    except BaseException:
        with _lock:  # not warmed: the next caller tries again
            if _last_busy.get(_key(device)) == now:
                del _last_busy[_key(device)]
        raise
    mark_busy(device)
    return spent


def _on(module: Any, stream: Any):
    import contextlib

    return module.stream(stream) if stream is not None else contextlib.nullcontext()
