"""Tuning events, delivered through the ``flyautotune_tuning_event`` hook.

Events are plain dicts with an ``event`` field: ``select`` (where a config came
from), ``search_start``, ``candidate`` (one timed config: time, spread and
method, or its error), ``retime`` (a round of re-timing the default and the
best challengers side by side), ``search_end`` (winner, margin over the default,
duration). Two built-in plugins receive them: :class:`EventLog` appends them as
JSON lines to ``FLYAUTOTUNE_EVENT_LOG``; :class:`Listeners` calls the callbacks
given to :func:`add_listener`. Any plugin can implement the hook too.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
import threading
import time
from typing import Any, Callable

from ._markers import hookimpl

log = logging.getLogger("flyautotune.events")

EVENT_LOG_ENV = "FLYAUTOTUNE_EVENT_LOG"


def emit(pm: Any, event: str, **fields: Any) -> None:
    """Send one event to every ``flyautotune_tuning_event`` implementation; never raises into a tune."""
    record = {"event": event, "time": time.time(), **fields}
    hook = pm.hook.flyautotune_tuning_event
    for impl in hook.get_hookimpls():  # one plugin's failure must not hide the event from the others
        try:
            impl.function(event=record)
        except Exception:
            log.exception("flyautotune_tuning_event of plugin %r failed", impl.plugin_name)


def _strict(value: Any) -> Any:
    """JSON-safe: non-finite floats become strings, so the log stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


class EventLog:
    """Appends every event as one JSON line to ``$FLYAUTOTUNE_EVENT_LOG`` (when set).

    Only regular files (or new paths) are written: a FIFO or device path is
    refused, so a reader that never comes cannot hang a tune. A path that
    cannot be written is reported once per path, not once per event.
    """

    __name__ = "flyautotune.events.EventLog"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed: set = set()

    @hookimpl(trylast=True)
    def flyautotune_tuning_event(self, event: dict) -> None:
        path = os.environ.get(EVENT_LOG_ENV)
        if not path or path in self._failed:
            return
        try:
            line = json.dumps(_strict(event), sort_keys=True, default=repr, allow_nan=False)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0)
            with self._lock:
                fd = os.open(path, flags, 0o644)
                try:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        raise OSError(f"{path} is not a regular file")
                    os.write(fd, (line + "\n").encode("utf-8", "backslashreplace"))
                finally:
                    os.close(fd)
        except (OSError, ValueError) as exc:
            self._failed.add(path)
            log.warning("cannot write the flyautotune event log %s (%s); events are not logged there "
                        "for the rest of this process", path, exc)


class Listeners:
    """Calls the in-process callbacks registered with :func:`add_listener`."""

    __name__ = "flyautotune.events.Listeners"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.callbacks: list = []

    @hookimpl(trylast=True)
    def flyautotune_tuning_event(self, event: dict) -> None:
        for callback in list(self.callbacks):
            try:
                callback(dict(event))
            except Exception:  # a broken listener must not break tuning
                log.exception("flyautotune event listener %r failed", callback)


#: The process-wide listener registry (a built-in plugin of every manager).
LISTENERS = Listeners()


def add_listener(callback: Callable[[dict], Any]) -> Callable[[dict], Any]:
    """Call ``callback(event)`` for every tuning event; returns the callback (decorator-friendly)."""
    if not callable(callback):
        raise TypeError(f"add_listener: callback must be callable, got {callback!r}")
    with LISTENERS._lock:
        LISTENERS.callbacks.append(callback)
    return callback


def remove_listener(callback: Callable[[dict], Any]) -> None:
    """Stop calling ``callback``; a callback never added is ignored."""
    with LISTENERS._lock:
        if callback in LISTENERS.callbacks:
            LISTENERS.callbacks.remove(callback)
