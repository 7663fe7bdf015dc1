"""Store files and packs as untrusted input, and a store that never stalls a call
(issue 11): each test failed on the store before this change."""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import sys
import threading
import time

import pytest

from flyautotune import store as st
from flyautotune.store import (MemoryStore, PackError, PackIndex, Store, StoreError, TuningStore, apply_import,
                               load_pack, plan_import, read_pack, write_atomic)
from flyautotune.store import files, recovery
from flyautotune.store import sqlite as sqlite_mod

POSIX = pytest.mark.skipif(sys.platform == "win32", reason="POSIX files (symlinks, FIFOs, owners)")


def cfg(block: int) -> dict:
    return {"kwargs": {"BLOCK": block}, "compile_hints": {}}


def item(**over) -> dict:
    e = {"tuner": "rms", "key": "k", "timing_key": "t", "config": cfg(1), "timings": [], "provenance": {},
         "created": 1.5}
    e.update(over)
    return e


def pack_text(entries) -> str:
    return json.dumps({"format": "flyautotune-pack", "version": 1, "entries": entries})


def messages(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "flyautotune.store")


@pytest.fixture
def warnings_(caplog):
    caplog.set_level(logging.WARNING, logger="flyautotune.store")
    return caplog


# -- bounded parsing ------------------------------------------------------------------


def test_deeply_nested_pack_is_refused_without_recursion_error(tmp_path, warnings_):
    path = tmp_path / "deep.json"
    path.write_text(pack_text([item(config={"kwargs": {"B": "DEEP"}})]).replace('"DEEP"', "[" * 1000 + "]" * 1000))
    with pytest.raises(PackError, match="nests 100[0-9] levels deep; at most 32"):
        load_pack(path)
    assert PackIndex().find([path], "rms", "k") is None  # a shipped pack: one warning, no exception
    assert "nests" in messages(warnings_)


def test_deep_json_in_a_store_row_skips_that_row(tmp_path, warnings_):
    s = TuningStore(tmp_path)
    s.put("rms", "k", "t", cfg(1), [], {})
    raw = sqlite3.connect(s.path)
    raw.execute("UPDATE entries SET provenance_json = ?", ("[" * 5000 + "]" * 5000,))
    raw.commit()
    raw.close()
    assert s.get("rms", "k") is None
    assert "provenance_json nests 5000 levels deep" in messages(warnings_)


@pytest.mark.parametrize("number", ["1e999", "-1e999"])
def test_infinite_numbers_are_refused(number):
    with pytest.raises(PackError, match=f"the number {number} is out of range"):
        load_pack(pack_text([item(config={"kwargs": {"B": 7}})]).replace("7", number))


def test_oversized_pack_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("flyautotune.store.packs.MAX_PACK_BYTES", 1000)
    path = tmp_path / "big.json"
    path.write_text(pack_text([item(provenance={"pad": "x" * 2000})]))
    with pytest.raises(PackError, match="larger than 1000 bytes"):
        load_pack(path)


@pytest.mark.parametrize("created, why", [
    ("1" + "0" * 400, "the number 10000000000000000000... (401 digits) is out of range"),  # no float holds it
    ("1e300", "created must be epoch seconds from 0 to at most a day ahead"),
    ("-5", "created must be epoch seconds from 0 to at most a day ahead"),
])
def test_absurd_created_rejects_that_entry_only(created, why):
    text = pack_text([item(key="bad", created=1.5), item(key="good")]).replace("1.5", created, 1)
    pack = read_pack(text)
    assert [e.key for e in pack.entries] == ["good"]
    (where, reason), = pack.rejected
    assert where == "entries[0]" and why in reason
    with pytest.raises(PackError, match=re.escape(why)):
        load_pack(text)


@pytest.mark.parametrize("key", [[1, 2], {"M": 1}])
def test_keys_that_are_json_lists_or_objects_reject_only_their_entry(tmp_path, key, warnings_):
    path = tmp_path / "p.json"
    path.write_text(pack_text([item(key=key), item(key="innocent")]))
    index = PackIndex()
    assert index.find([path], "rms", "innocent").config == cfg(1)
    assert "entries[0].key must be a non-empty string" in messages(warnings_)


def test_lone_surrogate_in_a_name_is_refused_clearly(tmp_path):
    text = pack_text([item(tuner="\ud800x"), item(key="ok")])
    pack = read_pack(text)
    assert [e.key for e in pack.entries] == ["ok"]
    assert "entries[0].tuner contains a lone surrogate (\\ud800), which is not valid text" in pack.rejected[0][1]
    s = TuningStore(tmp_path)
    with pytest.raises(ValueError, match=r"tuner contains a lone surrogate \(\\ud800\)"):
        s.put("\ud800", "k", "t", cfg(1), [], {})
    with pytest.raises(ValueError, match="key contains the control character '\\\\x1b'"):
        s.put("rms", "\x1b[31mred", "t", cfg(1), [], {})


# -- pack files -------------------------------------------------------------------------


@POSIX
def test_shipped_packs_read_only_regular_files_inside_the_package(tmp_path, monkeypatch, warnings_):
    caplog = warnings_
    caplog.set_level(logging.WARNING)
    pkg = tmp_path / "shipped_pkg"
    (pkg / "packs").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "packs" / "good.json").write_text(pack_text([item()]))
    outside = tmp_path / "outside.json"
    outside.write_text(pack_text([item(key="evil")]))
    (pkg / "packs" / "zero.json").symlink_to("/dev/zero")
    (pkg / "packs" / "escape.json").symlink_to(outside)
    monkeypatch.syspath_prepend(str(tmp_path))
    found = st.package_packs("shipped_pkg")
    assert [p.name for p in found] == ["good.json"]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "zero.json: it is a symbolic link (to /dev/zero)" in text and "escape.json: it is a symbolic link" in text


@POSIX
@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_pack_path_that_is_not_a_regular_file_is_refused_at_once(tmp_path, special):
    path = special
    if special == "fifo":
        path = tmp_path / "fifo.json"
        os.mkfifo(path)  # no writer: opening it for reading would block forever
    t0 = time.monotonic()
    with pytest.raises(PackError, match="it is not a regular file"):
        load_pack(path)
    assert time.monotonic() - t0 < 2


def test_write_atomic_never_follows_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "pack.json"
    for name in (f"{target}.tmp-{os.getpid()}", f".pack.json.tmp-{os.getpid()}-{threading.get_ident()}"):
        os.symlink(victim, tmp_path / os.path.basename(name))
    write_atomic(target, "new text\n")
    assert target.read_text() == "new text\n" and victim.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp" in p.name and not p.is_symlink()) == []


# -- store files --------------------------------------------------------------------------


def _plant(path, *sql) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = sqlite3.connect(path)
    for statement in sql:
        raw.execute(statement)
    raw.commit()
    raw.close()


@pytest.mark.parametrize("sql", [
    ("CREATE VIEW entries AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
     "SELECT 'rms' AS tuner, 'k' AS key, 't' AS timing_key, '{}' AS config_json, '[]' AS timings_json, "
     "'{}' AS provenance_json, x AS created FROM c",),
    ("CREATE TABLE entries (tuner, key, timing_key, config_json, timings_json, provenance_json, created)",
     "CREATE TABLE log (x)", "CREATE TRIGGER t AFTER INSERT ON entries BEGIN INSERT INTO log VALUES (1); END"),
    ("CREATE TABLE entries (tuner, key, evil)",),
], ids=["endless-view", "trigger", "wrong-columns"])
def test_a_store_file_flyautotune_did_not_write_is_moved_aside(tmp_path, warnings_, sql):
    d = tmp_path / "cache"
    _plant(d / st.DB_NAME, *sql)
    t0 = time.monotonic()
    s = TuningStore(d)
    assert s.get("rms", "k") is None
    assert time.monotonic() - t0 < 5
    msg = messages(warnings_)
    assert msg.count("was not written by flyautotune") == 1 and "moved it aside" in msg
    assert s.put("rms", "k", "t", cfg(1), [], {}) and s.get("rms", "k").config == cfg(1)


def test_a_store_truncated_to_half_keeps_what_can_be_read(tmp_path, warnings_):
    s = TuningStore(tmp_path)
    for i in range(400):
        s.put("rms", f"k{i:03d}", f"t{i % 5}", cfg(i), [{"config": cfg(j), "ms": 1.0 + j, "error": None}
                                                       for j in range(8)], {"i": i, "pad": "x" * 300})
    s._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    with open(s.path, "r+b") as f:
        f.truncate(os.path.getsize(s.path) // 2)
    s2 = TuningStore(tmp_path)
    kept = sum(s2.get("rms", f"k{i:03d}") is not None for i in range(400))
    assert kept >= 150, messages(warnings_)  # the old store kept 0
    assert "moved it aside" in messages(warnings_)


def test_a_store_owned_by_another_user_is_refused(tmp_path, monkeypatch, warnings_):
    s = TuningStore(tmp_path / "cache")
    s.put("rms", "k", "t", cfg(1), [], {})
    s.close()
    monkeypatch.setattr(files.os, "geteuid", lambda: 4242)  # as if someone else planted the folder
    other = TuningStore(tmp_path / "cache")
    assert other.get("rms", "k") is None
    msg = messages(warnings_)
    assert f"{tmp_path / 'cache'} is owned by" in msg and "not by you" in msg and "uid 4242" in msg
    with pytest.raises(StoreError, match="not by you"):
        other.entries()


@POSIX
def test_the_recovery_lock_is_waited_for_a_bounded_time(tmp_path, monkeypatch, warnings_):
    import fcntl

    (tmp_path / st.DB_NAME).write_bytes(b"not a database" * 100)
    monkeypatch.setattr(files, "LOCK_TIMEOUT_S", 0.2)
    fd = os.open(tmp_path / (st.DB_NAME + ".lock"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a stuck recoverer in another process
    try:
        t0 = time.monotonic()
        assert TuningStore(tmp_path).get("rms", "k") is None
        assert time.monotonic() - t0 < 3
    finally:
        os.close(fd)
    assert "holds" in messages(warnings_) and "while recovering it" in messages(warnings_)


# -- the call path never stalls -------------------------------------------------------


def test_a_locked_store_costs_about_a_second_and_the_winner_is_written_later(tmp_path, warnings_):
    s = TuningStore(tmp_path)
    s.put("rms", "a", "t", cfg(1), [], {})
    holder = sqlite3.connect(s.path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        for key in ("b", "c"):
            t0 = time.monotonic()
            assert s.put("rms", key, "t", cfg(2), [{"config": cfg(2), "ms": 1.0, "error": None}], {}) is False
            assert time.monotonic() - t0 < 2.5  # was 30 s per call
            assert s.get("rms", key).config == cfg(2)  # served from memory meanwhile
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert messages(warnings_).count("is busy, full or read-only; new winners are kept in memory") == 1
    assert s.flush() is True
    assert [e.key for e in TuningStore(tmp_path).entries()] == ["a", "b", "c"]


def test_a_locked_store_stalls_a_search_once_not_per_candidate(tmp_path, pm, warnings_, monkeypatch):
    """A search records two timing rows per candidate: once a write found the store locked, the later ones
    (and the winner's) do not wait for the lock again; the winner is written once the lock is gone."""
    import torch

    import flyautotune as fat

    s = TuningStore(tmp_path, call_timeout=0.25)
    s.put("other", "k", "t", cfg(1), [], {})
    waits = []
    do = s._do

    def timed_do(what, fn, **kw):
        t0 = time.monotonic()
        try:
            return do(what, fn, **kw)
        finally:
            if time.monotonic() - t0 >= 0.2:
                waits.append(what)

    monkeypatch.setattr(s, "_do", timed_do)

    class Plugin:
        @fat.hookimpl
        def flyautotune_store(self):
            return s

    pm.register(Plugin())

    @fat.autotune(configs=[fat.Config(B=b) for b in range(1, 11)], key=["n"], plugin_manager=pm, name="locked",
                  do_bench=lambda fn, setup=None: 1.0 + abs(fn() - 3))
    def launch(x, n, B=None):
        return B

    won = {"kwargs": {"B": 3}, "compile_hints": {}}
    holder = sqlite3.connect(s.path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        sel = launch.select(torch.zeros(2), 2)
        assert sel.config == fat.Config(B=3) and s.get("locked", sel.key).config == won  # kept in memory
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert waits == ["save a timing"]  # the first write waited; the 21 others, and the winner, did not
    # timing rows are for resuming a crashed search: their loss is logged at debug level; the winner's warns
    assert "cannot save a timing" not in messages(warnings_)
    assert messages(warnings_).count("cannot save the winner") == 1
    assert s.put_timing("locked", "t", {"config": cfg(5), "ms": 1.0, "error": None}) is True  # the lock is gone
    assert s.flush() is True
    fresh = TuningStore(tmp_path)
    assert fresh.get("locked", sel.key).config == won and len(fresh.get_timings("locked", sel.key)) == 10
    waits.clear()
    holder = sqlite3.connect(s.path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:  # a write went through since: the next lock is waited for again
        assert s.put_timing("locked", "t", {"config": cfg(5), "ms": 1.0, "error": None}) is False
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert waits == ["save a timing"]


def test_a_flush_off_the_call_path_still_waits_for_the_lock(tmp_path):
    """Writes on a tuned call stop waiting once the store was found locked; ``flush`` (and the background
    writer, and the last try at exit) still waits for it, so a winner kept in memory lands when it can."""
    s = TuningStore(tmp_path, call_timeout=0.5)
    assert s.get("rms", "k") is None  # creates the file
    holder = sqlite3.connect(s.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    assert s.put("rms", "k", "t", cfg(1), [], {}) is False
    t0 = time.monotonic()
    assert s.put("rms", "j", "t", cfg(2), [], {}) is False and time.monotonic() - t0 < 0.25  # did not wait
    threading.Timer(0.1, holder.execute, ("ROLLBACK",)).start()
    try:
        assert s.flush() is True
    finally:
        time.sleep(0.1)
        holder.close()
    assert [e.key for e in TuningStore(tmp_path).entries()] == ["j", "k"]


def test_a_store_read_only_at_first_open_is_retried_later(tmp_path, monkeypatch, warnings_):
    TuningStore(tmp_path).put("rms", "a", "t", cfg(1), [], {})
    monkeypatch.setattr(sqlite_mod, "READ_ONLY_RETRY_S", (0.05, 0.05))
    real = TuningStore._connect
    denied = {"on": True}

    def connect(self, target, **kwargs):
        if denied["on"] and not target.startswith("file:"):
            raise sqlite3.OperationalError("unable to open database file")
        return real(self, target, **kwargs)

    monkeypatch.setattr(TuningStore, "_connect", connect)
    s = TuningStore(tmp_path)
    assert s.get("rms", "a").config == cfg(1)  # read-only, still served
    assert s.put("rms", "b", "t", cfg(2), [], {}) is False
    denied["on"] = False  # permissions fixed
    time.sleep(0.1)
    assert s.put("rms", "c", "t", cfg(3), [], {}) is True
    assert s.flush() is True
    assert [e.key for e in TuningStore(tmp_path).entries()] == ["a", "b", "c"]


def test_a_late_write_never_replaces_a_newer_winner(tmp_path):
    s = TuningStore(tmp_path)
    assert s.get("rms", "k") is None  # creates the file
    holder = sqlite3.connect(s.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    assert s.put("rms", "k", "t", cfg(1), [], {}) is False
    holder.execute("ROLLBACK")
    holder.close()
    TuningStore(tmp_path).put("rms", "k", "t", cfg(2), [], {})  # another process, later
    assert s.flush() is True
    assert TuningStore(tmp_path).get("rms", "k").config == cfg(2)


# -- timings ------------------------------------------------------------------------------


@pytest.mark.parametrize("ms", [0, -1.0, float("inf"), float("nan")])
def test_only_finite_positive_times_are_times(tmp_path, ms):
    s = TuningStore(tmp_path)
    s.put("rms", "k", "t", cfg(1), [{"config": cfg(1), "ms": ms, "error": None}], {})
    (t,) = s.get("rms", "k").timings
    assert t["ms"] is None and "times must be finite and > 0" in t["error"]


@pytest.mark.parametrize("ms", [True, "1.5"])
def test_a_time_that_is_not_a_number_is_a_caller_error(tmp_path, ms):
    with pytest.raises(TypeError, match=r"timings\[0\]\['ms'\] must be a number"):
        TuningStore(tmp_path).put("rms", "k", "t", cfg(1), [{"config": cfg(1), "ms": ms}], {})


def test_timing_statistics_round_trip_through_store_and_pack(tmp_path):
    s = TuningStore(tmp_path / "a")
    rows = [{"config": cfg(1), "ms": 1.0, "error": None, "spread": 0.02, "method": "cuda-graph", "reps": 50},
            {"config": cfg(2), "ms": 2.0, "error": None}]
    s.put("rms", "k", "t", cfg(1), rows, {})
    assert list(s.get("rms", "k").timings) == rows
    pack = tmp_path / "p.json"
    s.export_pack(pack)
    b = TuningStore(tmp_path / "b")
    b.import_pack(pack)
    assert list(b.get("rms", "k").timings) == rows
    with pytest.raises(ValueError, match=r"timings\[0\]\['reps'\] must be an integer >= 1, got 0"):
        s.put("rms", "k", "t", cfg(1), [dict(rows[0], reps=0)], {})


# -- import planning ------------------------------------------------------------------


def _entry(tuner, key, block, ms, created):
    return st.StoreEntry(tuner=tuner, key=key, config=cfg(block), timing_key="t", created=created,
                         timings=({"config": cfg(block), "ms": ms, "error": None},))


def test_import_is_scoped_and_keeps_newer_faster_local_winners(tmp_path):
    s = TuningStore(tmp_path)
    recent = time.time() - 60  # newer than the pack's entries, and not in the future
    s.put_entries([_entry("rms", "fast-local", 1, 1.0, recent), _entry("rms", "slow-local", 1, 9.0, recent),
                   _entry("other", "k", 1, 1.0, 1.0)])
    pack = read_pack(pack_text([
        item(key="new"),
        dict(_entry("rms", "fast-local", 2, 5.0, 1.0).to_pack_dict()),
        dict(_entry("rms", "slow-local", 2, 5.0, 1.0).to_pack_dict()),
        dict(_entry("other", "k", 2, 0.5, 3.0).to_pack_dict()),
        item(key="bad", created=1e300),
    ]))
    plan = plan_import(s, pack, tuners=["rms"])
    assert [i.entry.key for i in plan.added] == ["new"]
    assert [i.entry.key for i in plan.replaced] == ["slow-local"]
    assert [i.entry.key for i in plan.kept] == ["fast-local"] and "newer and faster" in plan.kept[0].reason
    assert sorted(i.where for i in plan.skipped) == ["entries[4]", "other 'k'"]
    assert "not among those imported (rms)" in [i for i in plan.skipped if i.entry][0].reason
    assert s.get("rms", "new") is None  # planning writes nothing
    assert apply_import(s, plan) == 2
    assert s.get("rms", "fast-local").config == cfg(1) and s.get("rms", "slow-local").config == cfg(2)
    assert s.get("other", "k").config == cfg(1)
    forced = plan_import(s, pack, tuners=["rms"], replace=True)
    assert [i.entry.key for i in forced.replaced] == ["fast-local"]


def test_apply_import_on_any_store_uses_its_put():
    mem = MemoryStore()
    plan = plan_import(mem, [_entry("rms", "k", 3, 1.0, 5.0)])
    assert apply_import(mem, plan) == 1 and mem.get("rms", "k").config == cfg(3)


# -- the store as a plugin ------------------------------------------------------------


def test_memory_store_is_a_store_and_behaves_like_one():
    mem = MemoryStore()
    assert isinstance(mem, Store) and isinstance(TuningStore("unused-dir"), Store)
    assert mem.put("rms", "k", "t", cfg(1), [{"config": cfg(1), "ms": 2.0, "error": None}], {"d": (1, 2)})
    assert mem.get("rms", "k").provenance == {"d": [1, 2]}
    assert mem.get_timings("rms", "t") == {st.canonical_config_json(cfg(1)): 2.0}
    mem.put("b", "k", "t", cfg(2), [], {})
    assert [e.tuner for e in mem.entries()] == ["b", "rms"]
    mem.delete("rms", "k")
    assert mem.get("rms", "k") is None and mem.clear() == 1 and mem.entries() == []


def test_the_builtin_plugin_provides_the_sqlite_store_and_yields_to_others(tmp_path, monkeypatch):
    import pluggy

    from flyautotune import hookimpl, hookspecs

    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(tmp_path / "c"))
    pm = pluggy.PluginManager("flyautotune")
    pm.add_hookspecs(hookspecs)
    pm.register(st.SqliteStorePlugin, name="flyautotune.store")
    assert pm.hook.flyautotune_store() is st.get_store()
    assert pm.hook.flyautotune_store().path == (tmp_path / "c").resolve() / st.DB_NAME
    mem = MemoryStore()

    class InMemory:
        @hookimpl
        def flyautotune_store(self):
            return mem

    pm.register(InMemory())
    assert pm.hook.flyautotune_store() is mem
