"""Winners the store could not take yet (locked, full, read-only): kept in memory
and written later, by the next write or by a background writer, with back-off."""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from typing import Callable, Optional

MAX_PENDING = 1000
FIRST_RETRY_S = 0.5
MAX_RETRY_S = 60.0


class DeferredWrites:
    """Pending winner rows of one store, keyed by ``(tuner, key)`` (a later winner
    replaces an earlier one). ``flush`` is the store's function that writes a list
    of pending items in one transaction and returns True when they committed;
    ``flush(items, patient)``: a patient write (the background writer's, the one at
    exit) waits for a lock, as a tuned call's write does not once the store was found
    locked."""

    def __init__(self, flush: Callable[[list, bool], bool]) -> None:
        self._flush = flush
        self._items: dict = {}
        self._lock = threading.Lock()
        self._retry_at = 0.0
        self._pause = FIRST_RETRY_S
        self._thread: Optional[threading.Thread] = None

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def get(self, tuner: str, key: str) -> Optional[tuple]:
        """The pending item for ``(tuner, key)``, or None."""
        return self._items.get((tuner, key)) if self._items else None

    def add(self, tuner: str, key: str, item: tuple) -> bool:
        """Keep ``item`` for a later write; False when the queue is full (it is dropped)."""
        with self._lock:
            if (tuner, key) not in self._items and len(self._items) >= MAX_PENDING:
                return False
            self._items[(tuner, key)] = item
            self._retry_at = max(self._retry_at, time.monotonic() + self._pause)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=_writer, args=(weakref.ref(self),), name="flyautotune-store-writer", daemon=True
                )
                self._thread.start()
        return True

    def discard(self, tuner: str, key: str) -> None:
        with self._lock:
            self._items.pop((tuner, key), None)

    def clear(self, tuner: Optional[str] = None) -> None:
        with self._lock:
            for k in [k for k in self._items if tuner is None or k[0] == tuner]:
                del self._items[k]

    def due(self) -> bool:
        return bool(self._items) and time.monotonic() >= self._retry_at

    def flush(self, patient: bool = False) -> bool:
        """Try to write every pending item now; True when none is left. ``patient``: off the
        tuned call's path (the background writer, the exit), the write may wait for a lock."""
        with self._lock:
            batch = dict(self._items)
        if not batch:
            return True
        if not self._flush(list(batch.values()), patient):
            with self._lock:
                self._pause = min(self._pause * 2, MAX_RETRY_S)
                self._retry_at = time.monotonic() + self._pause
            return False
        with self._lock:
            for k, item in batch.items():
                if self._items.get(k) is item:  # a newer winner queued meanwhile stays queued
                    del self._items[k]
            self._pause = FIRST_RETRY_S
            return not self._items


def _writer(ref: "weakref.ref[DeferredWrites]") -> None:
    # Holds only a weak reference, so a dropped store does not live on in its thread.
    while True:
        queue = ref()
        if queue is None or not queue:
            return
        wait = max(queue._retry_at - time.monotonic(), 0.0)
        del queue
        time.sleep(min(wait, 1.0))
        queue = ref()
        if queue is not None and queue.due():
            queue.flush(patient=True)
        del queue


_QUEUES: "weakref.WeakSet[DeferredWrites]" = weakref.WeakSet()


def register(queue: DeferredWrites) -> None:
    """Flush ``queue`` once more when the process exits normally."""
    _QUEUES.add(queue)


@atexit.register
def _flush_at_exit() -> None:
    for queue in list(_QUEUES):
        if queue:
            queue.flush(patient=True)
