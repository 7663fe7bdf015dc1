"""Per-candidate timing rows of the SQLite store: read them for reuse, record one as soon as it is known,
take back a crash marker, and list the failures (a crash marker among them tells a restarted search which
candidate to skip)."""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Any, Mapping

from . import recovery
from .entries import check_text, is_time, normalize_timings
from .jsontext import canonical_config_json

log = logging.getLogger("flyautotune.store")

_TIMING_SQL = recovery.TIMING_SQL


class TimingRows:
    """Mixed into ``TuningStore``: the methods on the ``timings`` table alone (``_do`` and
    ``path`` come from the store)."""

    def get_timings(self, tuner: str, timing_key: str) -> dict:
        """Stored candidate timings for ``(tuner, timing_key)``: canonical config JSON ->
        milliseconds, or None for a candidate that failed. ``{}`` if the store is unreadable."""
        check_text("tuner", tuner)
        check_text("timing_key", timing_key)
        rows = self._do(
            "read timings",
            lambda c: c.execute("SELECT config_json, ms, error FROM timings WHERE tuner = ? AND timing_key = ?",
                                (tuner, timing_key)).fetchall(),
            write=False, strict=False, default=[],
        )
        out = {}
        for config_json, ms, error in rows:
            if type(config_json) is not str or (error is None and not is_time(ms)):
                log.warning("flyautotune store %s: skipping malformed timing tuner=%r config=%s: ms=%r",
                            self.path, tuner, ascii(config_json)[:200], ms)
                continue
            out[config_json] = None if error is not None else float(ms)
        return out

    def put_timing(self, tuner: str, timing_key: str, timing: Mapping[str, Any]) -> bool:
        """Record one candidate's timing as soon as it is known, so a search that dies later keeps it.

        :param timing: ``{"config": dict, "ms": float | None, "error": str | None}``.
        :returns: True when committed; False (no retry) when the store is busy or unusable.
        """
        check_text("tuner", tuner)
        check_text("timing_key", timing_key)
        (row,) = normalize_timings([timing])
        item = (tuner, timing_key, canonical_config_json(row["config"]), row["ms"], row["error"], time.time())

        def write(conn: sqlite3.Connection) -> bool:
            with recovery.transaction(conn):
                conn.execute(_TIMING_SQL, item)
            return True

        return bool(self._do("save a timing", write, write=True, strict=False, default=False))

    def drop_timing(self, tuner: str, timing_key: str, config: Mapping[str, Any], error: str) -> bool:
        """Delete ``config``'s timing row if its error is still ``error``: a search stopped by an exception
        (Ctrl-C) takes back the crash marker of the candidate it was running; a row another process wrote
        since stays.

        :returns: True when committed; False (no retry) when the store is busy or unusable.
        """
        check_text("tuner", tuner)
        check_text("timing_key", timing_key)
        check_text("error", error)
        item = (tuner, timing_key, canonical_config_json(config), error)

        def write(conn: sqlite3.Connection) -> bool:
            with recovery.transaction(conn):
                conn.execute("DELETE FROM timings WHERE tuner = ? AND timing_key = ? AND config_json = ? "
                             "AND error = ?", item)
            return True

        return bool(self._do("take back a crash marker", write, write=True, strict=False, default=False))

    def get_failures(self, tuner: str, timing_key: str) -> dict:
        """Stored failures for ``(tuner, timing_key)``: canonical config JSON -> error text."""
        check_text("tuner", tuner)
        check_text("timing_key", timing_key)
        rows = self._do(
            "read failures",
            lambda c: c.execute("SELECT config_json, error FROM timings WHERE tuner = ? AND timing_key = ? "
                                "AND error IS NOT NULL", (tuner, timing_key)).fetchall(),
            write=False, strict=False, default=[],
        )
        return {cj: err for cj, err in rows if type(cj) is str and type(err) is str}
