"""The tuning store in one process: round trips, failure behaviour, schema, get_store()."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading

import pytest

from flyautotune import store as st
from flyautotune.store import recovery
from flyautotune.store import sqlite as sqlite_mod
from flyautotune.store import StoreEntry, TuningStore, canonical_config_json, get_store


def cfg(block: int, **hints) -> dict:
    return {"kwargs": {"BLOCK": block}, "compile_hints": hints}


def timings(*pairs) -> list:
    return [{"config": cfg(b), "ms": ms, "error": None if ms is not None else "CompileError: boom"}
            for b, ms in pairs]


@pytest.fixture
def store(tmp_path):
    s = TuningStore(tmp_path / "cache")
    yield s
    s.close()


@pytest.fixture
def warnings_(caplog):
    caplog.set_level(logging.WARNING, logger="flyautotune.store")
    return caplog


def edit_file(path, sql, params=()) -> None:
    """Change a store file behind the store's back, as another program (or a newer flyautotune) would."""
    raw = sqlite3.connect(path)
    raw.execute(sql, params)
    raw.commit()
    raw.close()


def messages(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "flyautotune.store")


# -- round trips --------------------------------------------------------------------


def test_put_then_get_returns_winner_timings_and_provenance(store):
    prov = {"device": "gfx942", "versions": {"flyautotune": "0.1.0"}, "search_s": 1.25, "dims": (4, 8)}
    assert store.put("rms", "k1", "t1", cfg(256, waves_per_eu=2), timings((128, 2.0), (256, 1.0), (512, None)), prov)
    e = store.get("rms", "k1")
    assert isinstance(e, StoreEntry)
    assert (e.tuner, e.key, e.timing_key) == ("rms", "k1", "t1")
    assert e.config == cfg(256, waves_per_eu=2)
    # fastest first, failures last
    assert [t["config"]["kwargs"]["BLOCK"] for t in e.timings] == [256, 128, 512]
    assert e.timings[2] == {"config": cfg(512), "ms": None, "error": "CompileError: boom"}
    assert e.provenance == {"device": "gfx942", "versions": {"flyautotune": "0.1.0"}, "search_s": 1.25, "dims": [4, 8]}
    assert e.created > 0 and e.origin == str(store.path)
    assert store.get("rms", "other") is None
    assert store.get("other", "k1") is None


def test_second_put_replaces_the_winner(store):
    store.put("rms", "k", "t", cfg(128), timings((128, 1.0)), {"run": 1})
    store.put("rms", "k", "t", cfg(256), timings((256, 0.5)), {"run": 2})
    e = store.get("rms", "k")
    assert e.config == cfg(256) and e.provenance == {"run": 2}
    assert len(store.entries()) == 1


def test_get_timings_accumulate_per_candidate(store):
    store.put("rms", "k", "t", cfg(128), timings((128, 1.0), (64, None)), {})
    # a later search of a larger space with the same timing key
    store.put("rms", "k", "t", cfg(256), timings((128, 1.0), (64, None), (256, 0.5)), {})
    got = store.get_timings("rms", "t")
    assert got == {
        canonical_config_json(cfg(128)): 1.0,
        canonical_config_json(cfg(64)): None,
        canonical_config_json(cfg(256)): 0.5,
    }
    assert store.get_timings("rms", "another") == {}
    assert store.get_timings("other", "t") == {}


def test_canonical_config_json_ignores_key_order():
    assert canonical_config_json({"kwargs": {"B": 1, "A": 2}, "compile_hints": {}}) == \
        '{"compile_hints":{},"kwargs":{"A":2,"B":1}}'


def test_provenance_values_json_cannot_hold_are_stored_as_repr(store):
    class Dev:
        def __repr__(self):
            return "Dev(0)"

    assert store.put("rms", "k", "t", cfg(1), [], {"dev": Dev(), "bad": float("nan")})
    assert store.get("rms", "k").provenance == {"dev": "Dev(0)", "bad": "nan"}


def test_non_finite_time_is_recorded_as_failure(store):
    store.put("rms", "k", "t", cfg(1), [{"config": cfg(1), "ms": float("inf"), "error": None}], {})
    e = store.get("rms", "k")
    assert e.timings[0]["ms"] is None and "inf" in e.timings[0]["error"]
    assert store.get_timings("rms", "t") == {canonical_config_json(cfg(1)): None}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"tuner": ""}, "tuner must be a non-empty string"),
        ({"key": None}, "key must be a non-empty string"),
        ({"config": [1]}, "config must be a Config.to_dict"),
        ({"config": {"kwargs": {"B": object()}}}, "config is not JSON-serializable"),
        ({"timings": [{"ms": 1.0}]}, r"timings\[0\].*'config' \(required\)"),
        ({"timings": [{"config": cfg(1), "ms": "fast"}]}, r"timings\[0\]\['ms'\] must be a number"),
        ({"timings": [{"config": cfg(1), "ms": 1.0, "bogus": 3}]}, "accepted fields are"),
        ({"provenance": "gfx942"}, "provenance must be a mapping"),
    ],
)
def test_put_rejects_malformed_arguments_naming_them(store, kwargs, match):
    args = dict(tuner="rms", key="k", timing_key="t", config=cfg(1), timings=[], provenance={})
    args.update(kwargs)
    with pytest.raises((TypeError, ValueError), match=match):
        store.put(**args)
    assert store.entries() == []


def test_delete_drops_the_winner_and_keeps_timings(store):
    store.put("rms", "k", "t", cfg(1), timings((1, 1.0)), {})
    store.delete("rms", "k")
    assert store.get("rms", "k") is None
    assert store.get_timings("rms", "t") == {canonical_config_json(cfg(1)): 1.0}


def test_entries_and_clear_by_tuner(store):
    for tuner in ("b", "a"):
        for key in ("k2", "k1"):
            store.put(tuner, key, "t", cfg(1), timings((1, 1.0)), {})
    assert [(e.tuner, e.key) for e in store.entries()] == [("a", "k1"), ("a", "k2"), ("b", "k1"), ("b", "k2")]
    assert [e.key for e in store.entries("b")] == ["k1", "k2"]
    assert store.clear("a") == 2
    assert store.get_timings("a", "t") == {}
    assert [e.tuner for e in store.entries()] == ["b", "b"]
    assert store.clear() == 2
    assert store.entries() == []


def test_two_store_objects_share_the_file(tmp_path):
    a, b = TuningStore(tmp_path), TuningStore(tmp_path)
    a.put("rms", "k", "t", cfg(7), [], {})
    assert b.get("rms", "k").config == cfg(7)


def test_threads_share_one_store_object(store, warnings_):
    errors = []

    def work(n):
        try:
            for i in range(40):
                assert store.put("thr", f"{n}-{i}", f"t{n}", cfg(i), timings((i, float(i))), {"n": n})
                assert store.get("thr", f"{n}-{i}").config == cfg(i)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [], messages(warnings_)
    assert len(store.entries("thr")) == 240


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_reopens_its_own_connection(store):
    store.put("rms", "parent", "t", cfg(1), [], {})
    pid = os.fork()
    if pid == 0:  # child: must not reuse the parent's sqlite connection
        ok = store.put("rms", "child", "t", cfg(2), [], {}) and store.get("rms", "parent") is not None
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.get("rms", "child").config == cfg(2)
    assert store.put("rms", "parent2", "t", cfg(3), [], {})


# -- failure behaviour ----------------------------------------------------------------


def test_corrupt_file_is_moved_aside_and_a_fresh_store_starts(tmp_path, warnings_):
    d = tmp_path / "cache"
    d.mkdir()
    garbage = b"this is not a sqlite database\n" * 200
    (d / st.DB_NAME).write_bytes(garbage)
    s = TuningStore(d)
    assert s.get("rms", "k") is None
    msg = messages(warnings_)
    assert f"flyautotune store {s.path} is not a readable SQLite database" in msg
    assert "moved it aside to" in msg and "started a fresh store" in msg
    aside = [p for p in d.iterdir() if p.name.startswith(st.DB_NAME + ".corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes() == garbage  # nothing is deleted
    assert str(aside[0]) in msg
    assert s.put("rms", "k", "t", cfg(1), [], {})
    assert TuningStore(d).get("rms", "k").config == cfg(1)


def test_corrupt_file_that_cannot_be_moved_degrades_to_no_store(tmp_path, monkeypatch, warnings_):
    (tmp_path / st.DB_NAME).write_bytes(b"not a database" * 100)

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", str(src))

    monkeypatch.setattr(recovery.os, "replace", refuse)  # e.g. a read-only directory
    s = TuningStore(tmp_path)
    for _ in range(3):
        assert s.get("rms", "k") is None
        assert s.put("rms", "k", "t", cfg(1), [], {}) is False
    msg = messages(warnings_)
    assert msg.count("is not a readable SQLite database (file is not a database) and could not be moved aside") == 1
    assert "cannot save the winner (DatabaseError: file is not a database)" in msg
    assert (tmp_path / st.DB_NAME).read_bytes() == b"not a database" * 100


def test_corrupt_index_keeps_every_readable_row(tmp_path, warnings_):
    s = TuningStore(tmp_path)
    for i in range(300):
        s.put("rms", f"k{i:03d}", "t", cfg(i), timings((i, 1.0)), {"i": i})
    s.close()
    raw = sqlite3.connect(s.path)
    root = raw.execute("SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_entries_1'").fetchone()[0]
    page = raw.execute("PRAGMA page_size").fetchone()[0]
    raw.close()
    with open(s.path, "r+b") as f:  # wreck the (tuner, key) index, not the rows
        f.seek((root - 1) * page)
        f.write(b"\xff" * page)
    s2 = TuningStore(tmp_path)
    assert s2.get("rms", "k005").config == cfg(5)  # served from the fresh copy
    msg = messages(warnings_)
    assert "moved it aside" in msg and "copied the 300 entries and 300 timings still readable" in msg
    assert all(s2.get("rms", f"k{i:03d}").config == cfg(i) for i in range(300))
    assert s2._conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_file_replaced_by_garbage_while_open_is_recovered(store, warnings_):
    store.put("rms", "k", "t", cfg(1), [], {})
    tmp = store.path.with_name("junk")
    tmp.write_bytes(b"\x00garbage" * 1000)
    os.replace(tmp, store.path)  # another program clobbers the file (new inode)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(f"{store.path}{suffix}"):
            os.remove(f"{store.path}{suffix}")
    assert store.get("rms", "k") is None
    assert "is not a readable SQLite database" in messages(warnings_)
    assert store.put("rms", "k", "t", cfg(2), [], {})
    assert store.get("rms", "k").config == cfg(2)


def test_store_file_deleted_while_open_is_recreated(store):
    store.put("rms", "a", "t", cfg(1), [], {})
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{store.path}{suffix}"):
            os.remove(f"{store.path}{suffix}")
    assert store.put("rms", "b", "t", cfg(2), [], {})
    # the write landed in the file on disk, not in the deleted inode
    assert TuningStore(store.directory).get("rms", "b").config == cfg(2)


def test_malformed_row_is_skipped_with_a_warning_naming_it(store, warnings_):
    store.put("rms", "good", "t", cfg(1), timings((1, 1.0)), {})
    store.put("rms", "bad", "t", cfg(2), timings((2, 1.0)), {})
    edit_file(store.path, "UPDATE entries SET config_json = '{not json' WHERE key = 'bad'")
    assert store.get("rms", "bad") is None
    msg = messages(warnings_)
    assert "skipping malformed entry tuner='rms' key='bad'" in msg and str(store.path) in msg
    assert store.get("rms", "good").config == cfg(1)
    assert [e.key for e in store.entries()] == ["good"]
    assert store.put("rms", "bad", "t", cfg(3), [], {})  # a new tune overwrites it
    assert store.get("rms", "bad").config == cfg(3)


@pytest.mark.parametrize(
    "column, value, problem",
    [
        ("config_json", "[1, 2]", "entry.config must be a Config.to_dict() mapping"),
        ("timings_json", '[{"ms": 1}]', "entry.timings[0] = {'ms': 1}: expected the fields 'config', 'ms', 'error'"),
        ("timings_json", '{"ms": 1}', "entry.timings must be a list"),
        ("provenance_json", '{"x": NaN}', "NaN is not valid JSON"),
        ("created", "'yesterday'", "entry.created must be a number"),
    ],
)
def test_malformed_fields_are_reported(store, warnings_, column, value, problem):
    store.put("rms", "k", "t", cfg(1), [], {})
    edit_file(store.path, f"UPDATE entries SET {column} = {value if column == 'created' else repr(value)}")
    assert store.get("rms", "k") is None
    assert problem in messages(warnings_)


def test_malformed_timing_row_is_skipped(store, warnings_):
    store.put("rms", "k", "t", cfg(1), timings((1, 1.0), (2, 2.0)), {})
    edit_file(store.path, "UPDATE timings SET ms = 'fast' WHERE config_json = ?", (canonical_config_json(cfg(2)),))
    assert store.get_timings("rms", "t") == {canonical_config_json(cfg(1)): 1.0}
    assert "skipping malformed timing tuner='rms'" in messages(warnings_)


def test_cache_dir_that_is_a_file_degrades_to_no_store(tmp_path, warnings_):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    s = TuningStore(blocker / "cache")
    assert s.get("rms", "k") is None
    assert s.put("rms", "k", "t", cfg(1), [], {}) is False
    assert s.get_timings("rms", "t") == {}
    s.delete("rms", "k")
    msg = messages(warnings_)
    assert f"flyautotune store {s.path}: cannot read (NotADirectoryError" in msg
    assert "cannot save the winner" in msg and "continuing without the store" in msg
    with pytest.raises(st.StoreError, match="cannot read entries"):
        s.entries()


def test_read_only_database_error_degrades_to_no_store(tmp_path, monkeypatch, warnings_):
    def refuse(*args, **kwargs):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(sqlite_mod.sqlite3, "connect", refuse)
    s = TuningStore(tmp_path)
    assert s.get("rms", "k") is None
    assert s.put("rms", "k", "t", cfg(1), [], {}) is False
    msg = messages(warnings_)
    assert "cannot read (OperationalError: attempt to write a readonly database)" in msg
    assert "cannot save the winner (OperationalError: attempt to write a readonly database)" in msg


def test_warnings_for_an_unusable_store_are_not_repeated(tmp_path, monkeypatch, warnings_):
    monkeypatch.setattr(sqlite_mod.sqlite3, "connect", lambda *a, **k: (_ for _ in ()).throw(
        sqlite3.OperationalError("attempt to write a readonly database")))
    s = TuningStore(tmp_path)
    for _ in range(5):
        s.put("rms", "k", "t", cfg(1), [], {})
    assert messages(warnings_).count("cannot save the winner") == 1


def test_one_cause_is_warned_once_across_operations_and_the_lost_winner_always(tmp_path, monkeypatch, warnings_):
    monkeypatch.setattr(sqlite_mod.sqlite3, "connect", lambda *a, **k: (_ for _ in ()).throw(
        sqlite3.OperationalError("attempt to write a readonly database")))
    s = TuningStore(tmp_path)
    assert s.get("rms", "k") is None  # "cannot read (...)": the cause, said once
    assert s.put("rms", "k", "t", cfg(1), [], {}) is False  # a lost winner is said even so
    s.flush()
    s.delete("rms", "k")
    said = messages(warnings_)
    assert said.count("attempt to write a readonly database") == 2
    assert "cannot read (" in said and "cannot save the winner (" in said
    assert "cannot save the winners kept in memory" not in said and "cannot delete" not in said


def test_database_from_a_newer_schema_is_read_but_not_written(store, warnings_):
    store.put("rms", "k", "t", cfg(1), [], {})
    store.close()
    edit_file(store.path, "PRAGMA user_version = 99")
    assert store.get("rms", "k").config == cfg(1)
    assert store.put("rms", "k2", "t", cfg(2), [], {}) is False
    assert "it was written by a newer flyautotune (schema v99; this one writes v1)" in messages(warnings_)


@pytest.mark.parametrize("addition", ["CREATE INDEX by_created ON entries(created)",
                                      "CREATE TABLE notes (key TEXT PRIMARY KEY, text TEXT)"])
def test_a_newer_schema_with_tables_of_its_own_is_read_not_moved_aside(store, warnings_, addition):
    store.put("rms", "k", "t", cfg(1), [], {})
    store.close()
    edit_file(store.path, addition)
    edit_file(store.path, "PRAGMA user_version = 99")
    assert store.get("rms", "k").config == cfg(1)
    assert store.put("rms", "k2", "t", cfg(2), [], {}) is False
    assert "schema v99" in messages(warnings_) and "moved" not in messages(warnings_)
    assert not list(store.path.parent.glob("*corrupt*"))  # nothing moved aside: the newer version keeps it all


def test_an_unknown_table_in_a_store_of_this_schema_is_still_refused(store, warnings_):
    store.put("rms", "k", "t", cfg(1), [], {})
    store.close()
    edit_file(store.path, "CREATE TABLE notes (key TEXT)")
    assert store.get("rms", "k") is None
    assert "which flyautotune never creates" in messages(warnings_)


def test_full_disk_returns_false_and_keeps_earlier_entries(store, warnings_):
    store.put("rms", "small", "t", cfg(1), [], {})
    conn = store._conn()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")  # a disk with no room left
    huge = {"notes": "x" * 200_000}
    assert store.put("rms", "huge", "t", cfg(2), [], huge) is False
    assert "database or disk is full" in messages(warnings_)
    assert "it is kept in memory and written when the store takes it" in messages(warnings_)
    assert store.get("rms", "small").config == cfg(1)
    assert store.get("rms", "huge").provenance == huge  # from memory, for this process
    assert TuningStore(store.directory).get("rms", "huge") is None  # not on disk yet
    conn.execute("PRAGMA max_page_count = 1000000")  # space was freed
    assert store.flush() is True
    assert TuningStore(store.directory).get("rms", "huge").provenance == huge


def test_locked_database_times_out_into_a_warning(tmp_path, warnings_):
    s = TuningStore(tmp_path, timeout=0.2)
    s.put("rms", "a", "t", cfg(1), [], {})
    holder = sqlite3.connect(s.path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert s.put("rms", "b", "t", cfg(2), [], {}) is False
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "cannot save the winner yet (OperationalError: database is locked)" in messages(warnings_)
    assert s.put("rms", "b", "t", cfg(2), [], {}) is True


# -- schema -----------------------------------------------------------------------------


@pytest.mark.parametrize("create, why", [
    ("CREATE TABLE entries (tuner TEXT, key TEXT, timing_key TEXT, config_json TEXT, timings_json TEXT, "
     "provenance_json TEXT, created REAL)", "its entries table's primary key is []; expected ['tuner', 'key']"),
    ("CREATE TABLE entries (tuner TEXT, key TEXT, timing_key TEXT, config_json TEXT, timings_json TEXT, "
     "provenance_json TEXT, created REAL, extra TEXT, PRIMARY KEY (tuner, key))", "its entries table has the columns"),
], ids=["no_primary_key", "an_extra_column"])
def test_a_file_of_this_schema_whose_tables_differ_is_moved_aside_not_used(tmp_path, warnings_, create, why):
    # without the key, rows pile up and crash markers count forever; with an extra column every write fails
    edit_file(tmp_path / "tuning.sqlite3", create)
    edit_file(tmp_path / "tuning.sqlite3", "PRAGMA user_version = 1")
    s = TuningStore(tmp_path)
    assert s.put("rms", "k", "t", cfg(1), [], {}) is True  # a fresh store took the place of the file
    assert s.get("rms", "k").config == cfg(1)
    assert why in messages(warnings_)
    assert list(tmp_path.glob("*corrupt*"))  # the file is kept aside, not deleted


def test_new_file_gets_the_current_schema_in_wal_mode(store):
    store.get("rms", "k")
    raw = sqlite3.connect(store.path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == st.SCHEMA_VERSION == 1
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cols = [r[1] for r in raw.execute("PRAGMA table_info(entries)")]
    assert cols == ["tuner", "key", "timing_key", "config_json", "timings_json", "provenance_json", "created"]
    cols = [r[1] for r in raw.execute("PRAGMA table_info(timings)")]
    assert cols == ["tuner", "timing_key", "config_json", "ms", "error", "created"]
    raw.close()


def test_migration_path_upgrades_and_keeps_rows(store, monkeypatch):
    store.put("rms", "k", "t", cfg(1), [], {"a": 1})
    store.close()

    def v1_to_v2(conn):
        conn.execute("ALTER TABLE entries ADD COLUMN note TEXT")

    monkeypatch.setattr(recovery, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(recovery.MIGRATIONS, 1, v1_to_v2)
    assert store.get("rms", "k").provenance == {"a": 1}
    raw = sqlite3.connect(store.path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 2
    assert "note" in [r[1] for r in raw.execute("PRAGMA table_info(entries)")]
    raw.close()


def test_failed_migration_leaves_the_old_schema(store, monkeypatch, warnings_):
    store.put("rms", "k", "t", cfg(1), [], {})
    store.close()

    def broken(conn):
        conn.execute("ALTER TABLE entries ADD COLUMN note TEXT")
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(recovery, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(recovery.MIGRATIONS, 1, broken)
    store.get("rms", "k")
    raw = sqlite3.connect(store.path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 1
    assert "note" not in [r[1] for r in raw.execute("PRAGMA table_info(entries)")]
    raw.close()


# -- get_store ----------------------------------------------------------------------------


def test_get_store_follows_flyautotune_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(tmp_path / "one"))
    a = get_store()
    assert a.path == tmp_path.resolve() / "one" / st.DB_NAME
    a.put("rms", "k", "t", cfg(1), [], {})
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(tmp_path / "two"))
    b = get_store()
    assert b.path == tmp_path.resolve() / "two" / st.DB_NAME
    assert b.get("rms", "k") is None
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(tmp_path / "one") + os.sep)
    assert get_store() is a  # one object per directory
    assert get_store().get("rms", "k").config == cfg(1)


def test_get_store_defaults_to_the_user_cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("FLYAUTOTUNE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert get_store().path == tmp_path.resolve() / "xdg" / "flyautotune" / st.DB_NAME
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert get_store().path == tmp_path.resolve() / "home" / ".cache" / "flyautotune" / st.DB_NAME


def test_get_store_with_a_symlinked_dir_is_the_same_object(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert get_store(tmp_path / "link") is get_store(tmp_path / "real")
