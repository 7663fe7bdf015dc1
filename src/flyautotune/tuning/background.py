"""What runs beside a search's own thread: the device's clock warm-up, in the background, and a short
interpreter switch interval, so the search's many short waits are not held up by compile threads."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from typing import Any, Iterator, Optional

from .. import streams

log = logging.getLogger("flyautotune")

#: The interpreter's thread switch interval while a search runs (Python's default is 5 ms).
SWITCH_INTERVAL_S = 0.001
_switch_lock = threading.Lock()
_switch_state = [0, None]  # searches running, the interval they replaced


@contextlib.contextmanager
def short_switch_interval() -> Iterator[None]:
    """Hold the interpreter's thread switch interval at :data:`SWITCH_INTERVAL_S` while searches run.

    The search's thread waits on the GPU and the store many times per candidate and wants the
    interpreter back after each wait; with compile threads busy in Python, each return could take a
    whole 5 ms switch interval (a store write measured 0.03 ms alone, 20 ms beside one busy thread).
    The previous interval comes back when the last running search ends."""
    with _switch_lock:
        if _switch_state[0] == 0:
            _switch_state[1] = sys.getswitchinterval()
            if _switch_state[1] > SWITCH_INTERVAL_S:
                sys.setswitchinterval(SWITCH_INTERVAL_S)
        _switch_state[0] += 1
    try:
        yield
    finally:
        with _switch_lock:
            _switch_state[0] -= 1
            if _switch_state[0] == 0 and _switch_state[1] is not None:
                sys.setswitchinterval(_switch_state[1])
                _switch_state[1] = None


def warm_in_background(tuner: Any, device: Any) -> Optional[threading.Thread]:
    """Start warming ``device``'s clocks (and its math libraries' lazy set-up) on a side stream in a
    thread; None when the tuner times with its own ``do_bench`` or the device has no events. Whoever
    starts it joins it before anything is timed."""
    if tuner.do_bench is not None:
        return None
    module = streams.device_module(device)
    if module is None or not callable(getattr(module, "Event", None)):
        return None
    from ..timing import clocks

    def warm() -> None:
        try:
            side = module.Stream(device=device) if callable(getattr(module, "Stream", None)) else None
            clocks.warm_clocks(device, module, stream=side)
        except Exception as exc:  # the timing warms the device itself; say why not here
            log.debug("%s: warming %s in the background failed: %s", tuner.name, device, exc)

    thread = threading.Thread(target=warm, name="flyautotune-warm-clocks", daemon=True)
    thread.start()
    return thread
