"""``TuningStore``: winners, per-candidate timings and provenance in one SQLite
file per cache directory, shared safely by every process of the user.

The methods a tune calls (``get``, ``get_timings``, ``put``, ``delete``) never
raise on I/O trouble and never wait long: a lock is waited for at most
``CALL_TIMEOUT_S``, and once a write found the store locked, the process's
later writes try once without waiting until one goes through (a search writes
two timing rows per candidate); a winner the store cannot take yet (locked,
full, read-only) stays in memory and is written later. Maintenance methods
raise ``StoreError``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from . import recovery
from .deferred import DeferredWrites, register
from .entries import (CREATED_SLACK_S, StoreEntry, StoreError, check_put, check_text, created_problem,
                      entry_from_row, entry_row, row_size_problem)
from .files import PathLike, ownership_problem
from .jsontext import canonical_config_json, clip, compact_json, jsonable
from .timing_rows import TimingRows

log = logging.getLogger("flyautotune.store")

DB_NAME = "tuning.sqlite3"
BUSY_TIMEOUT_S = 30.0  # maintenance commands (show, import, clear) may wait this long
CALL_TIMEOUT_S = 1.0  # a tuned call waits at most this long for a lock
QUERY_LIMIT_S = 60.0  # no statement runs longer: a hostile file cannot hang a call
READ_ONLY_RETRY_S = (1.0, 60.0)  # first and longest pause before writing to a read-only store again

_ENTRY_SQL = recovery.ENTRY_SQL
_TIMING_SQL = recovery.TIMING_SQL
# A late write of a deferred winner never replaces a newer one another process wrote meanwhile; a row dated
# further in the future than clocks can disagree (the 8th parameter: now plus the slack) is not newer, only
# wrong (a reader refuses it), and is replaced.
_LATE_ENTRY_SQL = (
    "INSERT INTO entries VALUES (?,?,?,?,?,?,?) ON CONFLICT (tuner, key) DO UPDATE SET "
    "timing_key = excluded.timing_key, config_json = excluded.config_json, timings_json = excluded.timings_json, "
    "provenance_json = excluded.provenance_json, created = excluded.created "
    "WHERE excluded.created >= created OR created > ?"
)
_SELECT = "SELECT tuner, key, timing_key, config_json, timings_json, provenance_json, created FROM entries"

# Connections inherited through fork() must never be closed by the child.
_FORK_LEFTOVERS: list = []


class _Unavailable(Exception):
    """The store cannot serve this operation (read-only, newer schema, not the user's)."""


class _ReadOnly(_Unavailable):
    """Writes are refused for now (permissions, a read-only mount): retried with back-off."""


def _deferrable(problem: Optional[BaseException]) -> bool:
    """Whether a winner a write failed on is kept in memory and written later: the store is read-only, or
    busy or full for now (not an unusable one: not ours, unreadable, a newer schema)."""
    return isinstance(problem, _ReadOnly) or (problem is not None and recovery.is_transient(problem))


#: Writes a search makes per candidate, for resuming after a crash: their failure loses nothing a user tuned.
_QUIET = frozenset({"save a timing", "take back a crash marker"})


class TuningStore(TimingRows):
    """The SQLite tuning store of one cache directory.

    Get one with ``get_store()``. Safe for many threads (a connection per
    thread) and many processes (SQLite WAL locking).

    :param timeout: seconds a maintenance command waits for another process's lock.
    :param call_timeout: seconds ``get``/``put``/``delete`` wait (the call path).
    """

    def __init__(self, directory: PathLike, *, timeout: float = BUSY_TIMEOUT_S,
                 call_timeout: float = CALL_TIMEOUT_S) -> None:
        self.directory = Path(directory)
        self.path = self.directory / DB_NAME
        self.timeout = float(timeout)
        self.call_timeout = min(float(call_timeout), self.timeout)
        self._local = threading.local()
        self._lock = threading.RLock()  # re-entered: recovery warns while holding it
        self._warned: set = set()
        self._read_only_pause = READ_ONLY_RETRY_S[0]
        self._read_only_retry_at = 0.0
        self._locked = False  # a write found the store locked and none went through since: writes do not wait
        self._deferred = DeferredWrites(self._write_late)
        register(self._deferred)

    def __repr__(self) -> str:
        return f"<flyautotune.TuningStore {str(self.path)!r}>"

    # -- connections ----------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None:
            if local.pid == os.getpid() and self._same_file(local.ident):
                return conn
            self.close()
        conn, read_only = self._open()  # read_only: None, or why writes are refused
        try:
            st = os.stat(self.path)
        except OSError:
            conn.close()
            raise
        local.conn, local.pid, local.ident, local.read_only = conn, os.getpid(), (st.st_dev, st.st_ino), read_only
        return conn

    def _same_file(self, ident: tuple) -> bool:
        # A store file deleted or moved aside under us: reconnect, or writes would vanish.
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == ident

    def _connect(self, target: str, **kwargs: Any) -> sqlite3.Connection:
        conn = sqlite3.connect(target, timeout=self.call_timeout, isolation_level=None, **kwargs)
        deadline = self._local.deadline = [float("inf")]
        conn.set_progress_handler(lambda: time.monotonic() > deadline[0], 10_000)
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA trusted_schema=OFF")  # no SQL functions with side effects from the file
        return conn

    def _open(self) -> tuple:
        self.directory.mkdir(parents=True, exist_ok=True)
        problem = ownership_problem(self.directory) or ownership_problem(self.path)
        if problem:
            raise _Unavailable(problem)
        try:
            conn = self._connect(str(self.path))
        except sqlite3.OperationalError as exc:
            if recovery.is_busy(exc) or not self.path.is_file():
                raise
            return self._open_read_only(), f"no write access ({exc})"
        try:
            problem = recovery.schema_problem(conn)
            if problem:
                raise recovery.BadSchema(problem)
            if conn.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
                log.debug("flyautotune store %s: WAL journal unavailable", self.path)
            conn.execute("PRAGMA synchronous=NORMAL")
            version = recovery.migrate(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            if recovery.is_corrupt(exc) or recovery.is_busy(exc) or not self.path.is_file():
                raise
            # A directory or disk we may not write to: reading the existing file is still worth it.
            return self._open_read_only(), f"no write access ({exc})"
        except BaseException:
            conn.close()
            raise
        if version > recovery.SCHEMA_VERSION:
            return conn, (f"it was written by a newer flyautotune (schema v{version}; "
                          f"this one writes v{recovery.SCHEMA_VERSION})")
        return conn, None

    def _open_read_only(self) -> sqlite3.Connection:
        uri = self.path.resolve().as_uri()
        last: Optional[BaseException] = None
        # mode=ro needs the WAL index; immutable=1 reads a file nobody can be writing.
        for query in ("?mode=ro", "?immutable=1"):
            conn = None
            try:
                conn = self._connect(uri + query, uri=True)
                problem = recovery.schema_problem(conn)
                if problem:
                    raise recovery.BadSchema(problem)
                conn.execute("SELECT count(*) FROM entries").fetchone()
                return conn
            except sqlite3.DatabaseError as exc:
                last = exc
                if conn is not None:
                    conn.close()
                if recovery.is_corrupt(exc):
                    raise
        assert last is not None
        raise last

    def close(self) -> None:
        """Close this thread's connection (the next call reopens it)."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is None:
            return
        local.conn = None
        if local.pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        else:
            _FORK_LEFTOVERS.append(conn)

    # -- error handling -------------------------------------------------------------
    def _writable(self) -> None:
        """Raise ``_Unavailable`` for a read-only connection, reopening it for writing once
        its back-off has passed (permissions fixed, space freed)."""
        reason = self._local.read_only
        if reason is None:
            return
        newer = reason.startswith("it was written by a newer")
        if time.monotonic() >= self._read_only_retry_at and not newer:
            self._read_only_retry_at = time.monotonic() + self._read_only_pause
            self._read_only_pause = min(self._read_only_pause * 2, READ_ONLY_RETRY_S[1])
            self.close()
            self._conn()
            reason = self._local.read_only
            if reason is None:
                self._read_only_pause = READ_ONLY_RETRY_S[0]
                return
        raise (_Unavailable if newer else _ReadOnly)(f"the store is read-only: {reason}")

    def _do(self, what: str, fn: Callable[[sqlite3.Connection], Any], *, write: bool, strict: bool,
            default: Any = None, patient: bool = False) -> Any:
        """Run ``fn(conn)``; recover once from a corrupt file; warn (or raise if strict) otherwise.

        Strict (maintenance) calls wait up to ``timeout`` for a lock, others up to ``call_timeout``; a
        write that is neither strict nor ``patient`` (off the tuned call's path) does not wait at all
        while the last write found the store locked (a search's timing rows would each wait again: a
        second per row).
        :returns: ``fn``'s result, or ``default`` after a warning; ``self._problem`` says why.
        """
        no_wait = write and not strict and not patient and self._locked
        limit = self.timeout if strict else 0.0 if no_wait else self.call_timeout
        start = time.monotonic()
        recovered = False
        pause = 0.002
        self._local.problem = None
        while True:
            try:
                conn = self._conn()
                if write:
                    self._writable()
                    conn = self._local.conn
                self._local.deadline[0] = time.monotonic() + QUERY_LIMIT_S
                if strict or no_wait:
                    conn.execute(f"PRAGMA busy_timeout = {int(limit * 1000)}")
                try:
                    result = fn(conn)
                finally:
                    self._local.deadline[0] = float("inf")
                    if (strict or no_wait) and self._local.conn is conn:
                        with contextlib.suppress(sqlite3.Error):
                            conn.execute(f"PRAGMA busy_timeout = {int(self.call_timeout * 1000)}")
                if write:
                    self._locked = False
                return result
            except sqlite3.DatabaseError as exc:
                if recovery.is_corrupt(exc) and not recovered:
                    recovered = True
                    if self._recover(exc):
                        continue
                elif recovery.is_busy(exc) and time.monotonic() - start + pause < limit:
                    # SQLite reports some lock races at once, without its busy handler: wait here.
                    time.sleep(pause)
                    pause = min(pause * 2, 0.1)
                    continue
                problem: BaseException = exc
            except (OSError, _Unavailable) as exc:
                problem = exc
            break
        self._local.problem = problem
        if write and isinstance(problem, sqlite3.DatabaseError) and recovery.is_busy(problem):
            self._locked = True
        if strict:
            raise StoreError(f"flyautotune store {self.path}: cannot {what}: {problem}") from problem
        reason = str(problem) if isinstance(problem, _Unavailable) else f"{type(problem).__name__}: {problem}"
        if what in _QUIET:  # the winner's own write says it, with what it means for the user
            log.debug("flyautotune store %s: cannot %s (%s)", self.path, what, reason)
            return default
        if what == "save the winner" and _deferrable(problem):  # put keeps it (``_defer``): say so, once
            self._warn_once(f"flyautotune store {self.path}: cannot save the winner yet ({reason}): it is kept in "
                            f"memory and written when the store takes it", cause=reason, always=True)
            return default
        # One cause is said once: the other operations it stops are logged at debug level, except a lost
        # winner, which a user must hear of on its own.
        self._warn_once(f"flyautotune store {self.path}: cannot {what} ({reason}); continuing without the store",
                        cause=reason, always=what == "save the winner")
        return default

    def _warn_once(self, message: str, cause: Optional[str] = None, always: bool = False) -> None:
        """Warn with ``message`` once; with ``cause``, only where no warning gave that cause yet, unless
        ``always``."""
        with self._lock:
            repeated = message in self._warned or (
                cause is not None and not always and ("cause", cause) in self._warned)
            self._warned.add(message)
            if cause is not None:
                self._warned.add(("cause", cause))
        if repeated:
            log.debug("%s", message)
            return
        log.warning("%s", message)

    def _recover(self, exc: BaseException) -> bool:
        """Move a damaged or foreign file aside, keeping what is still readable; True
        when retrying makes sense."""
        self.close()
        with self._lock:
            return recovery.recover(self.path, exc, reopen=lambda: self._open()[0], warn_once=self._warn_once)

    # -- the autotuner's calls (never raise on I/O) -------------------------------------
    def get(self, tuner: str, key: str) -> Optional[StoreEntry]:
        """The stored winner for ``(tuner, key)``, or None (absent, malformed, or unreadable store).
        A winner this process could not write yet is returned from memory."""
        check_text("tuner", tuner)
        check_text("key", key)
        if self._deferred:
            if self._deferred.due():
                self._deferred.flush()
            pending = self._deferred.get(tuner, key)
            if pending is not None:
                return self._row_entry(pending[0])
        row = self._do("read", lambda c: c.execute(_SELECT + " WHERE tuner = ? AND key = ?", (tuner, key)).fetchone(),
                       write=False, strict=False)
        return None if row is None else self._row_entry(row)

    def _row_entry(self, row: Sequence) -> Optional[StoreEntry]:
        try:
            return entry_from_row(row, str(self.path))
        except (TypeError, ValueError, OverflowError) as exc:
            # The whole key up to a bound, else its head and tail: keys differing only in their strides
            # (near the end) must not read the same.
            log.warning("flyautotune store %s: skipping malformed entry tuner=%s key=%s: %s",
                        self.path, clip(row[0], 200), clip(row[1], 2000), exc)
            return None

    def put(self, tuner: str, key: str, timing_key: str, config: Mapping[str, Any],
            timings: Sequence[Mapping[str, Any]], provenance: Mapping[str, Any]) -> bool:
        """Write the winner for ``(tuner, key)`` and every candidate's timing in one transaction.

        :param config: the winner, ``Config.to_dict()`` form.
        :param timings: ``{"config": dict, "ms": float | None, "error": str | None}`` per
            candidate, optionally with ``spread``, ``method``, ``reps``; a time that is
            not finite and above zero is recorded as a failure.
        :param provenance: stored verbatim as JSON (values JSON cannot hold become their repr).
        :returns: True when committed. False (with one warning) when the store is
            locked, full or read-only: the winner is then kept in memory (``get``
            returns it) and written later; or when the store is unusable; or when
            the row would be too large to read back (``MAX_ENTRY_BYTES`` per JSON field).
        :raises TypeError, ValueError: malformed arguments (a caller bug, not an I/O problem).
        """
        rows = check_put(tuner, key, timing_key, config, timings, provenance)
        now = time.time()
        entry = (tuner, key, timing_key, canonical_config_json(config), compact_json(rows),
                 compact_json(jsonable(provenance)), now)
        too_large = row_size_problem(*entry[3:6])
        if too_large:  # written, it would be skipped as malformed by every reader: every process would search
            log.warning("flyautotune store %s: not saving the winner for tuner=%s key=%s: %s",
                        self.path, clip(tuner, 200), clip(key, 2000), too_large)
            return False
        timing_rows = [(tuner, timing_key, canonical_config_json(r["config"]), r["ms"], r["error"], now)
                       for r in rows]
        self._deferred.discard(tuner, key)
        if self._deferred.due():
            self._deferred.flush()

        def write(conn: sqlite3.Connection) -> bool:
            with recovery.transaction(conn):
                conn.execute(_ENTRY_SQL, entry)
                conn.executemany(_TIMING_SQL, timing_rows)
            return True

        if self._do("save the winner", write, write=True, strict=False, default=False):
            return True
        self._defer(tuner, key, (entry, timing_rows))
        return False

    def _defer(self, tuner: str, key: str, item: tuple) -> None:
        if not _deferrable(self._local.problem):
            return  # an unusable store (not ours, unreadable, newer schema): nothing to retry
        self._deferred.add(tuner, key, item)  # the write's warning said it is kept in memory

    def _write_late(self, items: list, patient: bool = False) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            with recovery.transaction(conn):
                future = time.time() + CREATED_SLACK_S
                for entry, timing_rows in items:
                    conn.execute(_LATE_ENTRY_SQL, (*entry, future))
                    conn.executemany(_TIMING_SQL, timing_rows)
            return True

        return bool(self._do("save the winners kept in memory", write, write=True, strict=False, default=False,
                             patient=patient))

    def delete(self, tuner: str, key: str) -> None:
        """Drop the winner for ``(tuner, key)`` (a stale entry); its timings stay reusable."""
        check_text("tuner", tuner)
        check_text("key", key)
        self._deferred.discard(tuner, key)

        def drop(conn: sqlite3.Connection) -> None:
            with recovery.transaction(conn):
                conn.execute("DELETE FROM entries WHERE tuner = ? AND key = ?", (tuner, key))

        self._do("delete an entry", drop, write=True, strict=False)

    # -- maintenance (raise StoreError on I/O) ------------------------------------------
    def flush(self) -> bool:
        """Write the winners kept in memory now; True when none is left."""
        return self._deferred.flush(patient=True)

    def kept_in_memory(self, tuner: str, key: str) -> bool:
        """True while the winner for ``(tuner, key)`` waits in memory for the store to take it
        (``get`` returns it, but a new process would not find it)."""
        return bool(self._deferred) and self._deferred.get(tuner, key) is not None

    def check_writable(self) -> None:
        """Open the store for writing now (creating its folder and file where needed); raise ``StoreError``
        naming why a winner could not be written (a read-only folder or file, a newer schema, another
        user's file), so a command can stop before a search whose winner would be lost."""
        self._do("open the store for writing", lambda conn: None, write=True, strict=True)

    def entries(self, tuner: Optional[str] = None) -> list:
        """Every readable winner (of one tuner, or all), sorted by (tuner, key);
        malformed rows are skipped with a warning."""
        if tuner is not None:
            check_text("tuner", tuner)
        sql = _SELECT + (" WHERE tuner = ?" if tuner else "") + " ORDER BY tuner, key"
        rows = self._do("read entries", lambda c: c.execute(sql, (tuner,) if tuner else ()).fetchall(),
                        write=False, strict=True)
        return [e for e in map(self._row_entry, rows) if e is not None]

    def clear(self, tuner: Optional[str] = None) -> int:
        """Delete the winners and timings of one tuner (or all); returns the number of winners removed."""
        if tuner is not None:
            check_text("tuner", tuner)
        where, args = (" WHERE tuner = ?", (tuner,)) if tuner else ("", ())
        self._deferred.clear(tuner)

        def wipe(conn: sqlite3.Connection) -> int:
            with recovery.transaction(conn):
                n = conn.execute("DELETE FROM entries" + where, args).rowcount
                conn.execute("DELETE FROM timings" + where, args)
            return n

        return self._do("clear the store", wipe, write=True, strict=True)

    def put_entries(self, entries: Iterable[StoreEntry], *, overwrite: bool = True) -> int:
        """Write whole entries (an import) in one transaction, keeping their ``created`` time.

        :param overwrite: replace an existing winner for the same (tuner, key); False keeps it.
        :returns: the number of entries written.
        :raises ValueError: an entry could never be read back: its row is too large
            (``entries.entry_size_problem``) or its ``created`` is in the future
            (``entries.created_problem``); ``plan_import`` skips such entries. Nothing is written.
        """
        rows = [entry_row(e) for e in entries]
        for row in rows:
            problem = row_size_problem(*row[3:6])
            when = created_problem(row[6])
            if problem or when:
                raise ValueError(f"cannot write the entry tuner={clip(row[0], 200)} key={clip(row[1], 2000)}: "
                                 f"{problem or 'its created ' + when}; nothing was written")
        verb = "REPLACE" if overwrite else "IGNORE"

        def merge(conn: sqlite3.Connection) -> int:
            with recovery.transaction(conn):
                before = conn.total_changes
                conn.executemany(f"INSERT OR {verb} INTO entries VALUES (?,?,?,?,?,?,?)", rows)
                return conn.total_changes - before

        return self._do("import entries", merge, write=True, strict=True)

    def export_pack(self, path: PathLike, tuner: Optional[str] = None) -> int:
        """Write the winners (of one tuner, or all) to ``path`` as a canonical JSON
        pack, atomically; returns the number of entries written."""
        from .files import write_atomic
        from .packs import dump_pack

        entries = self.entries(tuner)
        write_atomic(path, dump_pack(entries))
        return len(entries)

    def import_pack(self, path: PathLike, *, overwrite: bool = True) -> int:
        """Merge a pack's winners into the store in one transaction.

        :param overwrite: replace an existing winner for the same (tuner, key)
            (default); False keeps the store's own.
        :returns: the number of entries written.
        :raises PackError: the pack is malformed, or an entry is too large for the store
            (nothing is written).
        """
        from .entries import PackError, entry_size_problem
        from .packs import read_pack

        pack = read_pack(path)
        if pack.rejected:
            raise PackError(pack.source, pack.rejected[0][1])
        for i, e in enumerate(pack.entries):
            too_large = entry_size_problem(e)
            if too_large:
                raise PackError(pack.source, f"entries[{i}] is too large for the store: {too_large}")
        return self.put_entries(pack.entries, overwrite=overwrite)
