"""``MemoryStore``: a store in a dict, for tests and as the example of a
replacement store (return one from a ``flyautotune_store`` hook)."""

from __future__ import annotations

import threading
import time
from typing import Any, Mapping, Optional, Sequence

from .entries import StoreEntry, check_put, normalize_timings
from .jsontext import canonical_config_json, jsonable


class MemoryStore:
    """Winners and timings of this process only, validated like ``TuningStore``'s.

    Example plugin::

        class InMemory:
            def __init__(self):
                self.store = MemoryStore()

            @flyautotune.hookimpl
            def flyautotune_store(self):
                return self.store
    """

    def __init__(self) -> None:
        self._entries: dict = {}  # (tuner, key) -> StoreEntry
        self._timings: dict = {}  # (tuner, timing_key) -> {config json: ms or None}
        self._failures: dict = {}  # (tuner, timing_key) -> {config json: error}
        self._lock = threading.Lock()
        self.path = "<memory>"

    def __repr__(self) -> str:
        return f"<flyautotune.MemoryStore {len(self._entries)} entries>"

    def get(self, tuner: str, key: str) -> Optional[StoreEntry]:
        return self._entries.get((tuner, key))

    def get_timings(self, tuner: str, timing_key: str) -> dict:
        return dict(self._timings.get((tuner, timing_key), {}))

    def put(self, tuner: str, key: str, timing_key: str, config: Mapping[str, Any],
            timings: Sequence[Mapping[str, Any]], provenance: Mapping[str, Any]) -> bool:
        rows = check_put(tuner, key, timing_key, config, timings, provenance)
        entry = StoreEntry(tuner=tuner, key=key, config=dict(config), timings=tuple(rows),
                           provenance=jsonable(provenance), created=time.time(), timing_key=timing_key,
                           origin=self.path)
        with self._lock:
            self._entries[(tuner, key)] = entry
            pool = self._timings.setdefault((tuner, timing_key), {})
            pool.update((canonical_config_json(r["config"]), r["ms"] if r["error"] is None else None) for r in rows)
        return True

    def put_timing(self, tuner: str, timing_key: str, timing: Mapping[str, Any]) -> bool:
        (row,) = normalize_timings([timing])
        with self._lock:
            cj = canonical_config_json(row["config"])
            self._timings.setdefault((tuner, timing_key), {})[cj] = row["ms"] if row["error"] is None else None
            failures = self._failures.setdefault((tuner, timing_key), {})
            if row["error"] is None:
                failures.pop(cj, None)
            else:
                failures[cj] = row["error"]
        return True

    def drop_timing(self, tuner: str, timing_key: str, config: Mapping[str, Any], error: str) -> bool:
        with self._lock:
            cj = canonical_config_json(config)
            failures = self._failures.get((tuner, timing_key), {})
            if failures.get(cj) == error:
                del failures[cj]
                self._timings.get((tuner, timing_key), {}).pop(cj, None)
        return True

    def get_failures(self, tuner: str, timing_key: str) -> dict:
        return dict(self._failures.get((tuner, timing_key), {}))

    def delete(self, tuner: str, key: str) -> None:
        with self._lock:
            self._entries.pop((tuner, key), None)

    def entries(self, tuner: Optional[str] = None) -> list:
        with self._lock:
            items = sorted(self._entries.items())
        return [e for (t, _), e in items if tuner is None or t == tuner]

    def clear(self, tuner: Optional[str] = None) -> int:
        with self._lock:
            gone = [k for k in self._entries if tuner is None or k[0] == tuner]
            for k in gone:
                del self._entries[k]
            for k in [k for k in self._timings if tuner is None or k[0] == tuner]:
                del self._timings[k]
            for k in [k for k in self._failures if tuner is None or k[0] == tuner]:
                del self._failures[k]
        return len(gone)
