"""The store file's schema: migrations, the check of a file flyautotune did not
create, error classification, and salvage of a damaged file."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

from .files import file_lock

SCHEMA_VERSION = 1

COLUMNS = {
    "entries": ("tuner", "key", "timing_key", "config_json", "timings_json", "provenance_json", "created"),
    "timings": ("tuner", "timing_key", "config_json", "ms", "error", "created"),
}

PRIMARY_KEYS = {"entries": ("tuner", "key"), "timings": ("tuner", "timing_key", "config_json")}

# SQLite primary result codes.
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_NOTADB = 5, 6, 11, 13, 26
_CORRUPT_TEXT = ("file is not a database", "database disk image is malformed", "file is encrypted")

SALVAGE_TIMEOUT_S = 20.0
ENTRY_SQL = "INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?)"
TIMING_SQL = "INSERT OR REPLACE INTO timings VALUES (?,?,?,?,?,?)"
DB_LOCK_SUFFIX = ".lock"

log = logging.getLogger("flyautotune.store")


class BadSchema(sqlite3.DatabaseError):
    """The file is a SQLite database, but not one flyautotune wrote (views, triggers, odd tables)."""


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
    with transaction(conn):
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        while version < target:
            MIGRATIONS[version](conn)
            version += 1
        conn.execute(f"PRAGMA user_version = {int(version)}")
    return version


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction: IMMEDIATE takes the write lock up front, so the busy
    timeout applies (no deadlock-prone read-to-write upgrade)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def schema_problem(conn: sqlite3.Connection) -> str:
    """Why the file behind ``conn`` is not a store flyautotune wrote ('' if it is, or is empty).

    Reads only ``sqlite_master`` and table metadata: nothing of the file's own SQL
    (a view, a trigger) runs, so a hostile file cannot hang or steer the check. A file from a
    newer schema may hold tables and indexes of its own: it is only ever read, through the
    tables this version knows."""
    newer = conn.execute("PRAGMA user_version").fetchone()[0] > SCHEMA_VERSION
    for kind, name, table, sql in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"):
        if kind == "index" and name.startswith("sqlite_autoindex_") and table in COLUMNS:
            continue
        if kind == "table" and name in COLUMNS and (sql or "").lstrip().upper().startswith("CREATE TABLE"):
            continue
        if newer and name not in COLUMNS and (kind == "index" or kind == "table"):
            continue
        return f"it holds a {kind} named {name!r}, which flyautotune never creates"
    for table, want in COLUMNS.items():
        info = list(conn.execute(f"PRAGMA table_info({table})"))
        have = tuple(row[1] for row in info)
        if not have:
            continue
        # a newer schema may have added columns (migrations only ever add them); this one has exactly these
        if (have[: len(want)] if newer else have) != want:
            return f"its {table} table has the columns {list(have)}; expected {list(want)}"
        key = tuple(row[1] for row in sorted((r for r in info if r[5]), key=lambda r: r[5]))
        if key != PRIMARY_KEYS[table]:  # without it, rows pile up instead of replacing each other
            return f"its {table} table's primary key is {list(key)}; expected {list(PRIMARY_KEYS[table])}"
    return ""


def _code(exc: BaseException) -> Optional[int]:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def is_corrupt(exc: BaseException) -> bool:
    """True for a damaged file or one that is not a database at all."""
    if isinstance(exc, BadSchema):
        return True
    code = _code(exc)
    if code is not None and code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return True
    text = str(exc).lower()
    return any(t in text for t in _CORRUPT_TEXT)


def is_busy(exc: BaseException) -> bool:
    """True when another connection holds a lock."""
    code = _code(exc)
    if code is not None:
        return code in (_SQLITE_BUSY, _SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def is_full(exc: BaseException) -> bool:
    return _code(exc) == _SQLITE_FULL or "disk is full" in str(exc).lower()


def is_transient(exc: BaseException) -> bool:
    """A SQLite error worth retrying later: a lock held elsewhere, or a full disk."""
    return isinstance(exc, sqlite3.DatabaseError) and (is_busy(exc) or is_full(exc))


def bound_time(conn: sqlite3.Connection, seconds: float) -> None:
    """Abort any statement of ``conn`` that runs longer than ``seconds`` (it raises
    ``OperationalError: interrupted``): a query can never hang the caller."""
    deadline = [time.monotonic() + seconds]
    conn.set_progress_handler(lambda: time.monotonic() > deadline[0], 10_000)


def _scan(conn: sqlite3.Connection, table: str) -> list:
    """Every row of ``table`` that can still be read, in rowid order, stepping over
    damaged or missing pages: after an error, probe further rowids (doubling the
    step), then bisect back to the first rowid readable after the damage."""
    cols = ", ".join(COLUMNS[table])
    sql = f"SELECT rowid, {cols} FROM {table} WHERE rowid > ? ORDER BY rowid"
    required = [i + 1 for i, c in enumerate(COLUMNS[table]) if c not in ("ms", "error")]
    rows: list = []
    last = 0  # flyautotune's rows have positive rowids

    def first_after(rowid: int) -> bool:
        try:
            return conn.execute(sql + " LIMIT 1", (rowid,)).fetchone() is not None
        except sqlite3.DatabaseError:
            return False

    while True:
        try:
            for row in conn.execute(sql, (last,)):
                if all(row[i] is not None for i in required):  # a damaged record can read as NULLs
                    rows.append(row[1:])
                last = row[0]
            return rows
        except sqlite3.DatabaseError as exc:
            if "interrupted" in str(exc):
                return rows
        step = 1
        while not first_after(last + step):
            step *= 2
            if last + step >= 2**62:
                return rows
        lo, hi = last + step // 2, last + step  # lo fails (or is last), hi reads
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if first_after(mid) else (mid, hi)
        last = hi


def salvage(path: Path) -> Optional[tuple]:
    """``(entries rows, timings rows)`` still readable from a damaged store, or None
    if the file is healthy now (another process already replaced it).

    Reads a copy, padded back to the size its header records: a truncated file
    then loses only the rows on its missing pages."""
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return [], []
    try:
        bound_time(conn, SALVAGE_TIMEOUT_S)
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA trusted_schema=OFF")
        try:
            if schema_problem(conn):
                return [], []  # not our file: reading its tables could run its SQL
            if conn.execute("PRAGMA quick_check").fetchone()[0] == "ok":
                return None
        except sqlite3.DatabaseError:
            pass
    finally:
        conn.close()
    with tempfile.TemporaryDirectory(prefix="flyautotune-salvage-") as tmp:
        copy = Path(tmp) / "copy.sqlite3"
        try:
            shutil.copyfile(path, copy)
            if os.path.isfile(f"{path}-wal"):
                shutil.copyfile(f"{path}-wal", f"{copy}-wal")
            _pad_to_header_size(copy)
            conn = sqlite3.connect(str(copy), timeout=1.0, isolation_level=None)
        except (OSError, sqlite3.Error):
            return [], []
        try:
            bound_time(conn, SALVAGE_TIMEOUT_S)
            conn.execute("PRAGMA trusted_schema=OFF")
            if schema_problem(conn):
                return [], []
            return _scan(conn, "entries"), _scan(conn, "timings")
        except sqlite3.DatabaseError:
            return [], []
        finally:
            conn.close()


def _pad_to_header_size(copy: Path) -> None:
    # Header: page size at byte 16 (1 means 65536), page count at byte 28 (SQLite file format).
    with open(copy, "r+b") as f:
        header = f.read(100)
        if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
            return
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        want = int.from_bytes(header[28:32], "big") * page_size
        size = f.seek(0, os.SEEK_END)
        if size < want <= 64 * size + (1 << 20):  # a header claiming far more is not believed
            f.truncate(want)


def move_aside(path: Path) -> Path:
    """Rename ``path`` (and its WAL files) to ``<path>.corrupt-<time>``; returns the new name.

    :raises OSError: it cannot be moved (e.g. a read-only folder)."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    aside = Path(f"{path}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = Path(f"{path}.corrupt-{stamp}-{n}")
    os.replace(path, aside)
    for suffix in ("-wal", "-shm"):
        # A stale WAL next to a fresh file would be replayed into it.
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
    return aside


def recover(path: Path, exc: BaseException, *, reopen: Callable[[], sqlite3.Connection],
            warn_once: Callable[[str], None]) -> bool:
    """Move the damaged or foreign store ``path`` aside under an inter-process lock
    (waited for a bounded time), copy its readable rows into a fresh file opened by
    ``reopen``, and log what happened. Returns True when retrying makes sense."""
    lock_path = Path(f"{path}{DB_LOCK_SUFFIX}")
    what = "was not written by flyautotune" if isinstance(exc, BadSchema) else "is not a readable SQLite database"
    with file_lock(lock_path) as held:
        if not held:
            warn_once(f"flyautotune store {path} {what} ({exc}), and another process holds "
                      f"{lock_path} while recovering it; continuing without the store")
            return False
        salvaged = salvage(path)
        if salvaged is None:
            return True  # another process already replaced the file: just reconnect
        try:
            aside = move_aside(path)
        except OSError as move_exc:
            warn_once(f"flyautotune store {path} {what} ({exc}) and could "
                      f"not be moved aside ({move_exc}); continuing without the store")
            return False
        entries, timings = salvaged
        kept = ""
        if entries or timings:
            try:
                conn = reopen()
                try:
                    with transaction(conn):
                        conn.executemany(ENTRY_SQL, entries)
                        conn.executemany(TIMING_SQL, timings)
                finally:
                    conn.close()
                kept = f"; copied the {len(entries)} entries and {len(timings)} timings still readable"
            except Exception as copy_exc:  # noqa: BLE001 - the fresh store stays usable either way
                kept = f"; could not copy the readable rows ({copy_exc})"
        log.warning("flyautotune store %s %s (%s); moved it aside to %s and started a fresh store%s",
                    path, what, exc, aside, kept)
        return True
