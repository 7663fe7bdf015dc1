"""The tuning store: winners, per-candidate timings and provenance in SQLite,
and canonical JSON packs that ship winners with an adopter.

One SQLite file per cache directory (``$FLYAUTOTUNE_CACHE_DIR``, default
``$XDG_CACHE_HOME/flyautotune`` or ``~/.cache/flyautotune``), shared safely by
every process of the user. The methods the autotuner calls on a tune
(``get``, ``get_timings``, ``put``, ``delete``) never raise on I/O trouble: a
read-only, full, locked or unreadable store logs a warning on the
``flyautotune.store`` logger and the tune goes on without it.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import logging
import math
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

import attrs

log = logging.getLogger("flyautotune.store")

CACHE_DIR_ENV = "FLYAUTOTUNE_CACHE_DIR"
DB_NAME = "tuning.sqlite3"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 30.0
PACK_FORMAT = "flyautotune-pack"
PACK_VERSION = 1

PathLike = Union[str, "os.PathLike[str]"]

# SQLite result codes that mean "this file is damaged or not a database".
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_CORRUPT_TEXT = ("file is not a database", "database disk image is malformed", "file is encrypted")


class StoreError(RuntimeError):
    """A maintenance command (``entries``, ``clear``, ``export_pack``,
    ``import_pack``) could not read or write the store; names the file and cause."""


class PackError(ValueError):
    """A tuning pack is malformed; the message names the pack and the problem."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"tuning pack {source}: {problem}")
        self.source = source
        self.problem = problem


# -- canonical JSON -------------------------------------------------------------------


def canonical_config_json(config: Mapping[str, Any]) -> str:
    """The canonical text of a ``Config.to_dict()`` form: the identity of a candidate."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _jsonable(value: Any) -> Any:
    """Provenance made strict JSON: informational, so odd values become their repr, never an error."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


# -- entries --------------------------------------------------------------------------


@attrs.frozen
class StoreEntry:
    """One tuned winner: the config for ``(tuner, key)``, every candidate's timing
    and where it came from. Treat the dict fields as read-only.

    :param tuner: the tuner's name.
    :param key: the canonical key JSON of the call.
    :param config: the winner in ``Config.to_dict()`` form.
    :param timings: ``{"config": dict, "ms": float | None, "error": str | None}``
        per candidate of the search, fastest first, failures last.
    :param provenance: what the tuner recorded (device, toolchain, versions, duration).
    :param created: when the winner was written (seconds since the epoch).
    :param timing_key: the key of the per-candidate timing pool it was searched with.
    :param origin: the store file or pack it was read from (not compared).
    """

    tuner: str
    key: str
    config: dict
    timings: tuple = ()
    provenance: dict = attrs.field(factory=dict)
    created: float = 0.0
    timing_key: str = ""
    origin: str = attrs.field(default="", eq=False)

    def to_pack_dict(self) -> dict:
        """The entry's JSON form inside a pack."""
        return {
            "tuner": self.tuner,
            "key": self.key,
            "timing_key": self.timing_key,
            "config": self.config,
            "timings": list(self.timings),
            "provenance": self.provenance,
            "created": self.created,
        }


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_text(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty string, got {value!r}")


def _check_config(where: str, config: Any) -> None:
    if not isinstance(config, Mapping):
        raise TypeError(f"{where} must be a Config.to_dict() mapping, got {config!r}")
    try:
        canonical_config_json(config)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where} is not JSON-serializable ({exc}): {config!r}") from None


def _normalize_timings(timings: Any, where: str = "timings") -> list:
    """Validated timing dicts, fastest first, failures last, ties by config text."""
    if isinstance(timings, (str, bytes, Mapping)) or not isinstance(timings, Iterable):
        raise TypeError(f"{where} must be a list of timing dicts, got {timings!r}")
    rows = []
    for i, t in enumerate(timings):
        if not isinstance(t, Mapping):
            raise TypeError(f"{where}[{i}] must be a dict with 'config', 'ms', 'error', got {t!r}")
        unknown = set(t) - {"config", "ms", "error"}
        if unknown or "config" not in t:
            raise ValueError(
                f"{where}[{i}] = {t!r}: accepted fields are 'config' (required), 'ms', 'error'"
            )
        _check_config(f"{where}[{i}]['config']", t["config"])
        ms, error = t.get("ms"), t.get("error")
        if ms is not None and not _is_number(ms):
            raise TypeError(f"{where}[{i}]['ms'] must be a number of milliseconds or None, got {ms!r}")
        if error is not None and not isinstance(error, str):
            raise TypeError(f"{where}[{i}]['error'] must be a string or None, got {error!r}")
        if ms is not None and not math.isfinite(ms):
            # JSON has no inf/NaN: a non-finite time is recorded as a failure.
            ms, error = None, error or f"non-finite time {ms!r} ms"
        rows.append({"config": dict(t["config"]), "ms": None if ms is None else float(ms), "error": error})
    rows.sort(key=lambda r: (r["ms"] is None, r["ms"] or 0.0, canonical_config_json(r["config"])))
    return rows


_ENTRY_FIELDS = frozenset({"tuner", "key", "timing_key", "config", "timings", "provenance", "created"})
_TIMING_FIELDS = frozenset({"config", "ms", "error"})


def _entry_from_json(where: str, data: Any, origin: str) -> StoreEntry:
    """Build an entry from parsed JSON (a store row or a pack item); ValueError/TypeError
    name the bad field. Parsed JSON is always serializable, so only shapes and types are
    checked here: this runs for every entry of a pack and every store read."""
    if type(data) is not dict:
        raise TypeError(f"{where} must be a JSON object, got {data!r}")
    if data.keys() != _ENTRY_FIELDS:
        raise ValueError(
            f"{where}: missing field(s) {sorted(_ENTRY_FIELDS - set(data))}, unknown field(s) "
            f"{sorted(set(data) - _ENTRY_FIELDS)}; accepted: {sorted(_ENTRY_FIELDS)}"
        )
    for name in ("tuner", "key", "timing_key"):
        if type(data[name]) is not str or not data[name]:
            raise TypeError(f"{where}.{name} must be a non-empty string, got {data[name]!r}")
    if type(data["config"]) is not dict:
        raise TypeError(f"{where}.config must be a Config.to_dict() mapping, got {data['config']!r}")
    if type(data["provenance"]) is not dict:
        raise TypeError(f"{where}.provenance must be a JSON object, got {data['provenance']!r}")
    created = data["created"]
    if type(created) is not float and (type(created) is not int):
        raise TypeError(f"{where}.created must be a number (epoch seconds), got {created!r}")
    timings = data["timings"]
    if type(timings) is not list:
        raise TypeError(f"{where}.timings must be a list of timing dicts, got {timings!r}")
    for i, t in enumerate(timings):
        if type(t) is not dict or t.keys() != _TIMING_FIELDS:
            raise ValueError(
                f"{where}.timings[{i}] = {t!r}: expected exactly the fields 'config', 'ms', 'error'"
            )
        ms, error = t["ms"], t["error"]
        if type(t["config"]) is not dict:
            raise TypeError(f"{where}.timings[{i}]['config'] must be a Config.to_dict() mapping, got {t['config']!r}")
        if ms is not None and type(ms) is not float and type(ms) is not int:
            raise TypeError(f"{where}.timings[{i}]['ms'] must be a number of milliseconds or None, got {ms!r}")
        if error is not None and type(error) is not str:
            raise TypeError(f"{where}.timings[{i}]['error'] must be a string or None, got {error!r}")
    return StoreEntry(
        tuner=data["tuner"],
        key=data["key"],
        config=data["config"],
        timings=tuple(timings),
        provenance=data["provenance"],
        created=float(created),
        timing_key=data["timing_key"],
        origin=origin,
    )


# -- schema ---------------------------------------------------------------------------


def _migrate_v0_to_v1(conn: sqlite3.Connection) -> None:
    # v0 is an empty (new) file. Winners keep their search's timings as one
    # JSON snapshot, so a winner and its timings are always written together.
    conn.execute(
        "CREATE TABLE IF NOT EXISTS entries ("
        " tuner TEXT NOT NULL, key TEXT NOT NULL, timing_key TEXT NOT NULL,"
        " config_json TEXT NOT NULL, timings_json TEXT NOT NULL, provenance_json TEXT NOT NULL,"
        " created REAL NOT NULL, PRIMARY KEY (tuner, key))"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS timings ("
        " tuner TEXT NOT NULL, timing_key TEXT NOT NULL, config_json TEXT NOT NULL,"
        " ms REAL, error TEXT, created REAL NOT NULL, PRIMARY KEY (tuner, timing_key, config_json))"
    )


# MIGRATIONS[v] upgrades a database at user_version v to v + 1 (inside one transaction).
MIGRATIONS: dict = {0: _migrate_v0_to_v1}


def migrate(conn: sqlite3.Connection, target: Optional[int] = None) -> int:
    """Upgrade the schema of ``conn`` to ``target`` (default ``SCHEMA_VERSION``) in
    one write transaction; concurrent openers serialize on it. Returns the version."""
    target = SCHEMA_VERSION if target is None else target
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version >= target:
        return version
    with _transaction(conn):
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        while version < target:
            MIGRATIONS[version](conn)
            version += 1
        conn.execute(f"PRAGMA user_version = {int(version)}")
    return version


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    # IMMEDIATE takes the write lock up front, so the busy timeout applies (no
    # deadlock-prone read-to-write upgrade).
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _is_corrupt(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return True
    text = str(exc).lower()
    return any(t in text for t in _CORRUPT_TEXT)


def _is_busy(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _loads(text: Any) -> Any:
    """Strict JSON: NaN and Infinity are not JSON and are rejected."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    if not isinstance(text, str):
        raise TypeError(f"expected JSON text, got {text!r}")
    return _DECODER.decode(text)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An inter-process lock around corruption recovery (best effort off POSIX)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: recovery re-checks before moving
        yield
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# Connections inherited through fork() must never be closed by the child.
_FORK_LEFTOVERS: list = []


class _Unavailable(Exception):
    """The store cannot serve this operation (read-only, newer schema)."""


# -- the store ------------------------------------------------------------------------


class TuningStore:
    """The SQLite tuning store of one cache directory.

    Get one with ``get_store()``. Safe for many threads (a connection per
    thread) and many processes (SQLite WAL locking).
    """

    def __init__(self, directory: PathLike, *, timeout: float = BUSY_TIMEOUT_S) -> None:
        self.directory = Path(directory)
        self.path = self.directory / DB_NAME
        self.timeout = float(timeout)
        self._local = threading.local()
        self._lock = threading.RLock()  # re-entered: recovery warns while holding it
        self._warned: set = set()

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

    def _open(self) -> tuple:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(str(self.path), timeout=self.timeout, isolation_level=None)
        except sqlite3.OperationalError as exc:
            if _is_busy(exc) or not self.path.is_file():
                raise
            return self._open_read_only(), f"no write access ({exc})"
        try:
            if conn.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
                log.debug("flyautotune store %s: WAL journal unavailable", self.path)
            conn.execute("PRAGMA synchronous=NORMAL")
            version = migrate(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            if _is_corrupt(exc) or _is_busy(exc) or not self.path.is_file():
                raise
            # A directory or disk we may not write to: reading the existing file is still worth it.
            return self._open_read_only(), f"no write access ({exc})"
        except BaseException:
            conn.close()
            raise
        if version > SCHEMA_VERSION:
            return conn, (f"it was written by a newer flyautotune (schema v{version}; "
                          f"this one writes v{SCHEMA_VERSION})")
        return conn, None

    def _open_read_only(self) -> sqlite3.Connection:
        uri = self.path.resolve().as_uri()
        last: Optional[BaseException] = None
        # mode=ro needs the WAL index; immutable=1 reads a file nobody can be writing.
        for query in ("?mode=ro", "?immutable=1"):
            conn = None
            try:
                conn = sqlite3.connect(uri + query, uri=True, timeout=self.timeout, isolation_level=None)
                conn.execute("SELECT count(*) FROM entries").fetchone()
                return conn
            except sqlite3.DatabaseError as exc:
                last = exc
                if conn is not None:
                    conn.close()
                if _is_corrupt(exc):
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
    def _do(self, what: str, fn: Callable[[sqlite3.Connection], Any], *, write: bool, strict: bool,
            default: Any = None) -> Any:
        """Run ``fn(conn)``; recover once from a corrupt file; warn (or raise if strict) otherwise."""
        start = time.monotonic()
        recovered = False
        pause = 0.002
        while True:
            try:
                conn = self._conn()
                if write and self._local.read_only:
                    raise _Unavailable(f"the store is read-only: {self._local.read_only}")
                return fn(conn)
            except sqlite3.DatabaseError as exc:
                if _is_corrupt(exc) and not recovered:
                    recovered = True
                    if self._recover(exc):
                        continue
                elif _is_busy(exc) and time.monotonic() - start + pause < self.timeout:
                    # SQLite reports some lock races at once, without its busy handler: wait here.
                    time.sleep(pause)
                    pause = min(pause * 2, 0.1)
                    continue
                problem: BaseException = exc
            except (OSError, _Unavailable) as exc:
                problem = exc
            break
        if strict:
            raise StoreError(f"flyautotune store {self.path}: cannot {what}: {problem}") from problem
        reason = str(problem) if isinstance(problem, _Unavailable) else f"{type(problem).__name__}: {problem}"
        self._warn_once(f"flyautotune store {self.path}: cannot {what} ({reason}); continuing without the store")
        return default

    def _warn_once(self, message: str) -> None:
        with self._lock:
            if message in self._warned:
                return
            self._warned.add(message)
        log.warning("%s", message)

    def _recover(self, exc: BaseException) -> bool:
        """Move a corrupt file aside (keeping what is still readable); True when retrying makes sense."""
        self.close()
        with self._lock, _file_lock(self.directory / (DB_NAME + ".lock")):
            salvaged = _salvage(self.path)
            if salvaged is None:
                return True  # another process already replaced the file: just reconnect
            stamp = time.strftime("%Y%m%dT%H%M%S")
            aside = Path(f"{self.path}.corrupt-{stamp}")
            n = 1
            while aside.exists():
                n += 1
                aside = Path(f"{self.path}.corrupt-{stamp}-{n}")
            try:
                os.replace(self.path, aside)
                for suffix in ("-wal", "-shm"):
                    # A stale WAL next to a fresh file would be replayed into it.
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
            except OSError as move_exc:
                self._warn_once(
                    f"flyautotune store {self.path} is not a readable SQLite database ({exc}) and could "
                    f"not be moved aside ({move_exc}); continuing without the store"
                )
                return False
            entries, timings = salvaged
            kept = ""
            if entries or timings:
                try:
                    conn, _ = self._open()
                    try:
                        with _transaction(conn):
                            conn.executemany("INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?)", entries)
                            conn.executemany("INSERT OR REPLACE INTO timings VALUES (?,?,?,?,?,?)", timings)
                    finally:
                        conn.close()
                    kept = f"; copied the {len(entries)} entries and {len(timings)} timings still readable"
                except (sqlite3.Error, OSError) as copy_exc:
                    kept = f"; could not copy the readable rows ({copy_exc})"
            log.warning(
                "flyautotune store %s is not a readable SQLite database (%s); moved it aside to %s "
                "and started a fresh store%s", self.path, exc, aside, kept,
            )
            return True

    # -- the autotuner's calls (never raise on I/O) -------------------------------------
    def get(self, tuner: str, key: str) -> Optional[StoreEntry]:
        """The stored winner for ``(tuner, key)``, or None (absent, malformed, or unreadable store)."""
        _check_text("tuner", tuner)
        _check_text("key", key)
        row = self._do(
            "read",
            lambda c: c.execute(
                "SELECT timing_key, config_json, timings_json, provenance_json, created "
                "FROM entries WHERE tuner = ? AND key = ?", (tuner, key),
            ).fetchone(),
            write=False, strict=False,
        )
        return None if row is None else self._row_entry(tuner, key, row)

    def _row_entry(self, tuner: str, key: str, row: Sequence) -> Optional[StoreEntry]:
        timing_key, config_json, timings_json, provenance_json, created = row
        try:
            data = {
                "tuner": tuner, "key": key, "timing_key": timing_key,
                "config": _loads(config_json), "timings": _loads(timings_json),
                "provenance": _loads(provenance_json), "created": created,
            }
            return _entry_from_json("entry", data, str(self.path))
        except (TypeError, ValueError) as exc:
            log.warning(
                "flyautotune store %s: skipping malformed entry tuner=%r key=%r: %s",
                self.path, tuner, key, exc,
            )
            return None

    def get_timings(self, tuner: str, timing_key: str) -> dict:
        """Stored candidate timings for ``(tuner, timing_key)``: canonical config JSON ->
        milliseconds, or None for a candidate that failed. ``{}`` if the store is unreadable."""
        _check_text("tuner", tuner)
        _check_text("timing_key", timing_key)
        rows = self._do(
            "read timings",
            lambda c: c.execute(
                "SELECT config_json, ms, error FROM timings WHERE tuner = ? AND timing_key = ?",
                (tuner, timing_key),
            ).fetchall(),
            write=False, strict=False, default=[],
        )
        out = {}
        for config_json, ms, error in rows:
            if error is None and not (_is_number(ms) and math.isfinite(ms)):
                log.warning(
                    "flyautotune store %s: skipping malformed timing tuner=%r config=%s: ms=%r",
                    self.path, tuner, config_json, ms,
                )
                continue
            out[config_json] = None if error is not None else float(ms)
        return out

    def put(self, tuner: str, key: str, timing_key: str, config: Mapping[str, Any],
            timings: Sequence[Mapping[str, Any]], provenance: Mapping[str, Any]) -> bool:
        """Write the winner for ``(tuner, key)`` and every candidate's timing in one transaction.

        :param config: the winner, ``Config.to_dict()`` form.
        :param timings: ``{"config": dict, "ms": float | None, "error": str | None}`` per candidate.
        :param provenance: stored verbatim as JSON (values JSON cannot hold become their repr).
        :returns: True when committed; False (with a warning) if the store is
            read-only, full, locked past the busy timeout or unreadable.
        :raises TypeError, ValueError: malformed arguments (a caller bug, not an I/O problem).
        """
        for name, value in (("tuner", tuner), ("key", key), ("timing_key", timing_key)):
            _check_text(name, value)
        _check_config("config", config)
        rows = _normalize_timings(timings)
        if not isinstance(provenance, Mapping):
            raise TypeError(f"provenance must be a mapping, got {provenance!r}")
        now = time.time()
        entry = (tuner, key, timing_key, canonical_config_json(config), _compact(rows),
                 _compact(_jsonable(provenance)), now)
        timing_rows = [
            (tuner, timing_key, canonical_config_json(r["config"]), r["ms"], r["error"], now) for r in rows
        ]

        def write(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                conn.execute("INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?)", entry)
                conn.executemany("INSERT OR REPLACE INTO timings VALUES (?,?,?,?,?,?)", timing_rows)
            return True

        return bool(self._do("save the winner", write, write=True, strict=False, default=False))

    def delete(self, tuner: str, key: str) -> None:
        """Drop the winner for ``(tuner, key)`` (a stale entry); its timings stay reusable."""
        _check_text("tuner", tuner)
        _check_text("key", key)

        def drop(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.execute("DELETE FROM entries WHERE tuner = ? AND key = ?", (tuner, key))

        self._do("delete an entry", drop, write=True, strict=False)

    # -- maintenance (raise StoreError on I/O) ------------------------------------------
    def entries(self, tuner: Optional[str] = None) -> list:
        """Every readable winner (of one tuner, or all), sorted by (tuner, key);
        malformed rows are skipped with a warning."""
        if tuner is not None:
            _check_text("tuner", tuner)
        sql = "SELECT tuner, key, timing_key, config_json, timings_json, provenance_json, created FROM entries"
        rows = self._do(
            "read entries",
            lambda c: c.execute(sql + (" WHERE tuner = ?" if tuner else "") + " ORDER BY tuner, key",
                                (tuner,) if tuner else ()).fetchall(),
            write=False, strict=True,
        )
        out = []
        for row in rows:
            entry = self._row_entry(row[0], row[1], row[2:])
            if entry is not None:
                out.append(entry)
        return out

    def clear(self, tuner: Optional[str] = None) -> int:
        """Delete the winners and timings of one tuner (or all); returns the number of winners removed."""
        if tuner is not None:
            _check_text("tuner", tuner)
        where, args = (" WHERE tuner = ?", (tuner,)) if tuner else ("", ())

        def wipe(conn: sqlite3.Connection) -> int:
            with _transaction(conn):
                n = conn.execute("DELETE FROM entries" + where, args).rowcount
                conn.execute("DELETE FROM timings" + where, args)
            return n

        return self._do("clear the store", wipe, write=True, strict=True)

    def export_pack(self, path: PathLike, tuner: Optional[str] = None) -> int:
        """Write the winners (of one tuner, or all) to ``path`` as a canonical JSON
        pack, atomically; returns the number of entries written."""
        entries = self.entries(tuner)
        _write_atomic(Path(path), dump_pack(entries))
        return len(entries)

    def import_pack(self, path: PathLike, *, overwrite: bool = True) -> int:
        """Merge a pack's winners into the store in one transaction.

        :param overwrite: replace an existing winner for the same (tuner, key)
            (default); False keeps the store's own.
        :returns: the number of entries written.
        :raises PackError: the pack is malformed (nothing is written).
        """
        entries = load_pack(path)
        rows = [
            (e.tuner, e.key, e.timing_key, canonical_config_json(e.config), _compact(list(e.timings)),
             _compact(e.provenance), e.created)
            for e in entries
        ]
        verb = "REPLACE" if overwrite else "IGNORE"

        def merge(conn: sqlite3.Connection) -> int:
            with _transaction(conn):
                before = conn.total_changes
                conn.executemany(f"INSERT OR {verb} INTO entries VALUES (?,?,?,?,?,?,?)", rows)
                return conn.total_changes - before

        return self._do(f"import {path}", merge, write=True, strict=True)


def _salvage(path: Path) -> Optional[tuple]:
    """Rows still readable from a damaged store, or None if the file is healthy now."""
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error:
        return [], []
    try:
        try:
            if conn.execute("PRAGMA quick_check").fetchone()[0] == "ok":
                return None
        except sqlite3.DatabaseError:
            pass
        out: list = []
        for sql in ("SELECT tuner, key, timing_key, config_json, timings_json, provenance_json, created "
                    "FROM entries", "SELECT tuner, timing_key, config_json, ms, error, created FROM timings"):
            rows: list = []
            try:
                for row in conn.execute(sql):
                    rows.append(row)
            except sqlite3.DatabaseError:
                pass  # keep the rows read before the damaged page
            out.append(rows)
        return tuple(out)
    finally:
        conn.close()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# -- where the store lives ------------------------------------------------------------


def cache_dir() -> Path:
    """``$FLYAUTOTUNE_CACHE_DIR``, else the user cache dir + ``/flyautotune``
    (``$XDG_CACHE_HOME`` or ``~/.cache``; ``%LOCALAPPDATA%`` on Windows)."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    if os.name == "nt":  # pragma: no cover
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        # The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
        base = xdg if xdg and os.path.isabs(xdg) else str(Path.home() / ".cache")
    return Path(base) / "flyautotune"


_STORES: dict = {}
_STORES_LOCK = threading.Lock()
_LAST: tuple = (None, None)  # (environment token, store): the repeat-call fast path


def get_store(directory: Optional[PathLike] = None) -> TuningStore:
    """The process's ``TuningStore`` for ``directory`` (default: ``cache_dir()``,
    re-read from the environment on every call). One object per directory."""
    global _LAST
    token = None
    if directory is None:
        env = os.environ
        # An explicit FLYAUTOTUNE_CACHE_DIR decides alone; read the fallbacks only without it.
        token = env.get(CACHE_DIR_ENV) or (None, env.get("XDG_CACHE_HOME"), env.get("HOME"), env.get("LOCALAPPDATA"))
        last = _LAST
        if last[0] == token:
            return last[1]
        directory = cache_dir()
    resolved = os.path.realpath(os.path.expanduser(os.fspath(directory)))
    with _STORES_LOCK:
        store = _STORES.get(resolved)
        if store is None:
            store = _STORES[resolved] = TuningStore(resolved)
    if token is not None:
        _LAST = (token, store)
    return store


# -- packs ----------------------------------------------------------------------------


def dump_pack(entries: Iterable[StoreEntry]) -> str:
    """The canonical pack text of ``entries``: ``format`` and ``version`` first, entries
    sorted by (tuner, key), keys sorted below, two-space indent, ASCII, trailing
    newline — equal content gives equal bytes."""
    items = sorted(entries, key=lambda e: (e.tuner, e.key))
    seen = set()
    for e in items:
        if (e.tuner, e.key) in seen:
            raise ValueError(f"dump_pack: two entries for tuner={e.tuner!r} key={e.key!r}")
        seen.add((e.tuner, e.key))
    # The identity leads the file; everything below it has sorted keys.
    doc = {"format": PACK_FORMAT, "version": PACK_VERSION,
           "entries": [_sorted_keys(e.to_pack_dict()) for e in items]}
    return json.dumps(doc, indent=2, ensure_ascii=True, allow_nan=False) + "\n"


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [_sorted_keys(v) for v in value]
    return value


def _read_pack_source(path_or_text: Any) -> tuple:
    if isinstance(path_or_text, bytes):
        path_or_text = path_or_text.decode("utf-8")
    if isinstance(path_or_text, str) and path_or_text.lstrip().startswith("{"):
        return "<text>", path_or_text
    if isinstance(path_or_text, (str, os.PathLike)):
        name = os.fspath(path_or_text)
        try:
            return name, Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PackError(name, f"cannot read it ({exc})") from exc
    if hasattr(path_or_text, "read_text"):  # an importlib.resources Traversable (e.g. inside a zip)
        name = str(path_or_text)
        try:
            return name, path_or_text.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PackError(name, f"cannot read it ({exc})") from exc
    raise TypeError(f"load_pack: expected a path, a Traversable or pack text, got {path_or_text!r}")


def load_pack(path_or_text: Any) -> list:
    """Parse and validate a pack (a path, a Traversable, or the JSON text itself).

    :returns: its entries as ``StoreEntry`` objects, in file order.
    :raises PackError: naming the pack and the problem (bad JSON, wrong format
        or version, a malformed or duplicate entry).
    """
    name, text = _read_pack_source(path_or_text)
    try:
        doc = _loads(text)
    except ValueError as exc:
        raise PackError(name, f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise PackError(name, f"expected a JSON object at the top, got {type(doc).__name__}")
    if doc.get("format") != PACK_FORMAT:
        raise PackError(name, f"'format' is {doc.get('format')!r}; expected {PACK_FORMAT!r}")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise PackError(name, f"'version' is {version!r}; expected {PACK_VERSION}")
    if version > PACK_VERSION:
        raise PackError(
            name, f"version {version} was written by a newer flyautotune; this one reads version {PACK_VERSION}"
        )
    unknown = sorted(set(doc) - {"format", "version", "entries"})
    if unknown:
        raise PackError(name, f"unknown top-level field(s) {unknown}; accepted: 'format', 'version', 'entries'")
    raw = doc.get("entries")
    if not isinstance(raw, list):
        raise PackError(name, f"'entries' must be a list, got {raw!r}")
    entries, seen = [], set()
    for i, item in enumerate(raw):
        try:
            entry = _entry_from_json(f"entries[{i}]", item, name)
        except (TypeError, ValueError) as exc:
            raise PackError(name, str(exc)) from None
        if (entry.tuner, entry.key) in seen:
            raise PackError(name, f"entries[{i}] repeats tuner={entry.tuner!r} key={entry.key!r}")
        seen.add((entry.tuner, entry.key))
        entries.append(entry)
    return entries


class PackIndex:
    """Shipped packs, each parsed once per process and re-read when its file changes
    (mtime or size). A malformed or missing pack is skipped with one warning."""

    def __init__(self) -> None:
        self._packs: dict = {}  # name -> (stamp, {(tuner, key): StoreEntry} or None)
        self._lock = threading.Lock()

    def find(self, pack_paths: Iterable[Any], tuner: str, key: str) -> Optional[StoreEntry]:
        """The winner for ``(tuner, key)`` from the first pack in ``pack_paths`` that has one."""
        for pack in pack_paths:
            table = self._table(pack)
            if table:
                entry = table.get((tuner, key))
                if entry is not None:
                    return entry
        return None

    def _table(self, pack: Any) -> Optional[dict]:
        if isinstance(pack, (str, os.PathLike)):
            name = os.fspath(pack)
            try:
                st = os.stat(name)
                stamp: Any = (st.st_mtime_ns, st.st_size)
            except OSError:
                stamp = "missing"
        else:
            name, stamp = str(pack), "resource"  # a Traversable: its content cannot change in-process
        cached = self._packs.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        with self._lock:
            cached = self._packs.get(name)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            table = None
            if stamp == "missing":
                log.warning("flyautotune: skipping tuning pack %s: the file does not exist", name)
            else:
                try:
                    table = {(e.tuner, e.key): e for e in load_pack(pack)}
                except (PackError, TypeError) as exc:
                    log.warning("flyautotune: skipping tuning pack %s: %s", name, exc)
            self._packs[name] = (stamp, table)
            return table

    def clear(self) -> None:
        """Forget every parsed pack (the next lookup re-reads them)."""
        with self._lock:
            self._packs.clear()


_PACKS = PackIndex()


def find_in_packs(pack_paths: Iterable[Any], tuner: str, key: str) -> Optional[StoreEntry]:
    """The shipped winner for ``(tuner, key)`` from the first of ``pack_paths``
    (paths or Traversables) that has one, using the process-wide ``PackIndex``."""
    return _PACKS.find(pack_paths, tuner, key)


def package_packs(package: str, folder: str = "packs") -> list:
    """The ``*.json`` packs an adopter ships as package data under ``package/folder``,
    sorted by name (Traversables; plain paths for a normal install)."""
    root = importlib.resources.files(package) / folder
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.name.endswith(".json") and p.is_file()), key=lambda p: p.name)


__all__ = [
    "BUSY_TIMEOUT_S",
    "CACHE_DIR_ENV",
    "DB_NAME",
    "MIGRATIONS",
    "PACK_FORMAT",
    "PACK_VERSION",
    "SCHEMA_VERSION",
    "PackError",
    "PackIndex",
    "StoreEntry",
    "StoreError",
    "TuningStore",
    "cache_dir",
    "canonical_config_json",
    "dump_pack",
    "find_in_packs",
    "get_store",
    "load_pack",
    "migrate",
    "package_packs",
]
