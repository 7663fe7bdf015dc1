"""``Store``: the methods a replacement store (from the ``flyautotune_store`` hook) must have."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Protocol, Sequence, runtime_checkable

from .entries import StoreEntry


@runtime_checkable
class Store(Protocol):
    """What the tuner and the CLI call on a store. ``get``, ``get_timings``, ``put``
    and ``delete`` run on a tuned call: they must be quick and must not raise on
    I/O trouble (warn and return the documented fallback). ``entries`` and
    ``clear`` serve ``flyautotune show/export/clear`` and may raise ``StoreError``.
    ``MemoryStore`` is the smallest complete example.

    Optional: ``put_timing(tuner, timing_key, timing)`` and ``get_failures(tuner,
    timing_key) -> {config json: error}``; with them a search records each candidate as
    it runs, so a restart after a crash keeps what was measured and skips the
    candidate that brought the process down. And ``drop_timing(tuner, timing_key,
    config, error)``, which deletes a config's row if its error is still ``error``: a
    search stopped by an exception (Ctrl-C) takes its crash marker back with it
    (without it, the marker is replaced by a failure the next search retries)."""

    def get(self, tuner: str, key: str) -> Optional[StoreEntry]:
        """The winner for ``(tuner, key)``, or None."""

    def get_timings(self, tuner: str, timing_key: str) -> dict:
        """Known candidate times for ``(tuner, timing_key)``: canonical config JSON
        (``canonical_config_json``) -> milliseconds, or None for a failed candidate."""

    def put(self, tuner: str, key: str, timing_key: str, config: Mapping[str, Any],
            timings: Sequence[Mapping[str, Any]], provenance: Mapping[str, Any]) -> bool:
        """Record a winner and its candidates' timings (see ``TuningStore.put``);
        True when stored."""

    def delete(self, tuner: str, key: str) -> None:
        """Drop the winner for ``(tuner, key)`` (it no longer fits the kernel)."""

    def entries(self, tuner: Optional[str] = None) -> list:
        """Every winner (of one tuner, or all) as ``StoreEntry``, sorted by (tuner, key)."""

    def clear(self, tuner: Optional[str] = None) -> int:
        """Delete the winners (and timings) of one tuner or all; the number of winners removed."""
