"""Tuning telemetry: structured events for listeners and an opt-in JSON-lines log.

Events are plain dicts with an ``event`` field: ``select`` (where a config came
from), ``search_start``, ``candidate`` (one benchmarked config: time or error),
``search_end`` (winner, duration). Set ``FLYAUTOTUNE_EVENT_LOG=path`` to append
them as JSON lines, or ``add_listener(callback)`` to receive them in-process.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any, Callable

log = logging.getLogger("flyautotune.events")

EVENT_LOG_ENV = "FLYAUTOTUNE_EVENT_LOG"
_listeners: list = []
_lock = threading.Lock()


def add_listener(callback: Callable[[dict], Any]) -> Callable[[dict], Any]:
    """Call ``callback(event)`` for every event; returns the callback (decorator-friendly)."""
    if not callable(callback):
        raise TypeError(f"add_listener: callback must be callable, got {callback!r}")
    with _lock:
        _listeners.append(callback)
    return callback


def remove_listener(callback: Callable[[dict], Any]) -> None:
    with _lock:
        if callback in _listeners:
            _listeners.remove(callback)


def enabled() -> bool:
    return bool(_listeners) or bool(os.environ.get(EVENT_LOG_ENV))


def emit(event: str, **fields: Any) -> None:
    """Send one event to listeners and the event log; never raises into a tune."""
    if not enabled():
        return
    record = {"event": event, "time": time.time(), **fields}
    for callback in list(_listeners):
        try:
            callback(record)
        except Exception:  # a broken listener must not break tuning
            log.exception("flyautotune event listener %r failed", callback)
    path = os.environ.get(EVENT_LOG_ENV)
    if path:
        try:
            line = json.dumps(record, sort_keys=True, default=repr)
            with _lock, open(path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as exc:
            log.warning("cannot write flyautotune event log %s: %s", path, exc)
