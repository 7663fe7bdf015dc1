"""Store files and packs as untrusted input, and a store that never stalls a call
(issue 11); what the store and packs accept is bounded so it can always be read back (integers
no float holds, error texts and rows too long to read, times in the future). Each test failed on
the store before the change that added it."""

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
import torch

import flyautotune as fat
from flyautotune import store as st
from flyautotune.cli import main
from flyautotune.cli.cmd import show
from flyautotune.store import (MAX_ENTRY_BYTES, MemoryStore, PackError, PackIndex, Store, StoreEntry, StoreError,
                               TuningStore, apply_import, load_pack, plan_import, read_pack, write_atomic)
from flyautotune.store import files
from flyautotune.store import sqlite as sqlite_mod

HUGE = "1" + "0" * 400  # a 401-digit integer: valid JSON, valid Python, no float holds it
MAX_INT_DIGITS = 308  # jsontext.MAX_INT_DIGITS: every integer this long still converts to a float
MAX_ERROR_CHARS = 1000  # entries.MAX_ERROR_CHARS
CREATED_SLACK_S = 24 * 3600.0  # entries.CREATED_SLACK_S

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
    said = messages(warnings_)
    assert said.count("cannot save the winner yet (OperationalError: database is locked): it is kept in memory "
                      "and written when the store takes it") == 1  # one warning for both winners, and it is true
    assert "continuing without the store" not in said
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


# -- bounds: what the store and packs accept can always be read back ---------------------------------


def timed_item(**over) -> dict:
    """``item`` with one measured candidate."""
    return item(**{"timings": [{"config": cfg(1), "ms": 1.0, "error": None}], **over})


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _bench(fn, setup=None):
    fn()
    return 1.0

# -- integers no float holds -------------------------------------------------------------


@pytest.mark.parametrize("field", ["spread", "ms", "created", "config", "provenance"])
def test_an_integer_of_hundreds_of_digits_is_refused_like_1e999(field):
    timing = {"config": cfg(1), "ms": 1.0, "error": None}
    if field in ("spread", "ms"):
        timing[field] = 7777
    entry = timed_item(timings=[timing])
    if field == "created":
        entry["created"] = 7777
    elif field == "config":
        entry["config"] = {"kwargs": {"BLOCK": 7777}, "compile_hints": {}}
    elif field == "provenance":
        entry["provenance"] = {"margin": 7777}
    text = pack_text([entry, timed_item(key="innocent")])
    pack = read_pack(text.replace("7777", HUGE))  # was: accepted, then OverflowError wherever it was used
    assert [e.key for e in pack.entries] == ["innocent"]  # refused on its own, like any malformed entry
    (where, reason), = pack.rejected
    assert where == "entries[0]" and reason.startswith("entries[0]: the number 10000000000000000000... (401 digits) "
                                                       "is out of range")
    with pytest.raises(PackError, match=r"\(401 digits\) is out of range"):
        load_pack(text.replace("7777", HUGE))
    # The longest integer accepted still converts to a float (as created, it is then a time too far ahead).
    pack = read_pack(text.replace("7777", "9" * MAX_INT_DIGITS))
    assert len(pack.entries) == 1 + (field != "created") and len(pack.rejected) == (field == "created")


def test_a_shipped_pack_with_a_huge_integer_costs_a_warning_not_the_call(pm, tmp_path, warnings_):
    def launch(x, n, BLOCK=None):
        return BLOCK

    first = fat.autotune(configs=[fat.Config(BLOCK=b) for b in (1, 2)], key=["n"], do_bench=_bench,
                         plugin_manager=pm, name="t_huge")(launch)
    first(torch.zeros(2), 2)
    (entry,) = st.get_store().entries("t_huge")
    data = entry.to_pack_dict()
    data["timings"] = [{"config": entry.config, "ms": 1.0, "error": None, "spread": 7777}]
    path = tmp_path / "huge.json"
    path.write_text(pack_text([data]).replace("7777", HUGE))
    st.get_store().clear()
    fat.clear_caches()
    shipped = fat.autotune(configs=[fat.Config(BLOCK=b) for b in (1, 2)], key=["n"], do_bench=_bench,
                           plugin_manager=pm, name="t_huge", packs=[path])(launch)
    assert shipped(torch.zeros(2), 2) in (1, 2)  # was: OverflowError from the call itself
    assert shipped.last_source == "search"
    assert "skipping a malformed entry: entries[0]: the number 10000000000000000000... (401 digits)" in \
        messages(warnings_)


def test_a_huge_integer_in_a_store_row_skips_that_row_and_show_lists_the_rest(tmp_path, capsys, warnings_):
    s = st.get_store()
    for key in ('{"n":1}', '{"n":2}'):
        s.put("rms", key, "t", cfg(1), [{"config": cfg(1), "ms": 1.0, "error": None}], {})
    raw = sqlite3.connect(s.path)
    timings = json.dumps([{"config": cfg(1), "ms": 1.0, "error": None, "spread": 7777}]).replace("7777", HUGE)
    raw.execute("UPDATE entries SET timings_json = ? WHERE key = ?", (timings, '{"n":1}'))
    raw.execute("UPDATE entries SET provenance_json = ? WHERE key = ?", (f'{{"margin":{HUGE}}}', '{"n":2}'))
    raw.commit()
    raw.close()
    assert s.get("rms", '{"n":1}') is None and s.get("rms", '{"n":2}') is None
    assert messages(warnings_).count("(401 digits) is out of range") == 2
    status, out, err = run(capsys, "show")
    assert status == 0 and "No tuned entries" in out, err  # was: OverflowError, exit 1


def test_import_of_a_pack_with_a_huge_time_says_why_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(pack_text([timed_item(key='{"n":1}', timings=[{"config": cfg(1), "ms": 7777, "error": None}])])
                    .replace("7777", HUGE))
    status, out, _ = run(capsys, "import", path)
    assert status == 0 and "malformed: " in out and "(401 digits) is out of range" in out  # was: a traceback
    assert st.get_store().entries() == []
    status, _, err = run(capsys, "import", path, "--strict")
    assert status == 1 and "--strict: 1 entry of " in err


def test_import_skips_a_malformed_entry_on_its_own_and_strict_refuses_the_pack(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(pack_text([timed_item(key='{"n":1}'), timed_item(key='{"n":2}', created=9e10)]))
    status, out, _ = run(capsys, "import", path, "--strict")
    assert status == 1 and st.get_store().entries() == []
    status, out, _ = run(capsys, "import", path)
    assert status == 0 and "skip" in out and "the year 4821" in out
    assert [e.key for e in st.get_store().entries()] == ['{"n":1}']  # the good entry, as security.md says


def test_number_checks_refuse_huge_integers_instead_of_overflowing():
    s = st.MemoryStore()
    big = 10 ** 400
    # A caller's time that is not a finite number above zero is recorded as a failure, as inf is.
    assert s.put("rms", "k", "t", cfg(1), [{"config": cfg(1), "ms": big, "error": None}], {})
    (row,) = s.get("rms", "k").timings
    assert row["ms"] is None and "rejected time an integer of 401 digits ms" in row["error"]
    with pytest.raises(ValueError, match=r"\['spread'\] must be a finite number .*an integer of 401 digits"):
        s.put("rms", "k", "t", cfg(1), [{"config": cfg(1), "ms": 1.0, "error": None, "spread": big}], {})
    # show and import format whatever an entry holds: a number no float holds costs its cell.
    odd = StoreEntry(tuner="rms", key="k", config=cfg(1), provenance={"margin": big, "noise": big},
                     timings=({"config": cfg(1), "ms": big, "error": None, "spread": big},))
    assert show._winner_ms(odd) == "-" and show._decision(odd) == "-"
    assert st.imports._ms(odd) == "unmeasured"

# -- what the messages say -----------------------------------------------------------------


def test_a_malformed_row_warning_keeps_the_end_of_a_long_key(tmp_path, warnings_):
    s = TuningStore(tmp_path)
    keys = [json.dumps({"args": {"pad": "p" * 300}, "strides": {"x": list(st_)}}) for st_ in ((2, 1), (1, 1))]
    for k in keys:
        s.put("rms", k, "t", cfg(1), [], {})
    raw = sqlite3.connect(s.path)
    raw.execute("UPDATE entries SET config_json = 'not json'")
    raw.commit()
    raw.close()
    assert s.entries() == []
    lines = [r.getMessage() for r in warnings_.records if "skipping malformed entry" in r.getMessage()]
    assert len(lines) == 2 and lines[0] != lines[1]  # was: both cut at 200 characters, before the strides
    assert any('"strides": {"x": [2, 1]}' in line for line in lines)
    clipped = st.jsontext.clip("a" * 5000 + "TAIL", 200)
    assert clipped.startswith("'aaa") and clipped.endswith("aTAIL'") and "characters]" in clipped
    assert len(clipped) <= 200


def test_a_pack_with_a_utf8_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(pack_text([timed_item()]).encode("utf-8-sig"))  # as Notepad saves it
    assert [e.key for e in load_pack(path)] == ["k"]  # was: "Expecting value: line 1 column 1"
    assert [e.key for e in load_pack("\ufeff" + pack_text([timed_item()]))] == ["k"]
    assert PackIndex().find([path], "rms", "k").config == cfg(1)
    assert apply_import(st.get_store(), plan_import(st.get_store(), read_pack(path))) == 1


# -- rows too large to read back ---------------------------------------------------------


def test_long_error_texts_are_cut_so_a_winner_of_many_failures_is_read_back(pm, monkeypatch):
    def launch(x, n, BLOCK=None):
        if BLOCK:
            raise RuntimeError("no good: " + "x" * 8000)
        return BLOCK

    configs = [fat.Config(BLOCK=b) for b in range(600)]
    first = fat.autotune(configs=configs, key=["n"], do_bench=_bench, plugin_manager=pm, name="t_errors")(launch)
    with monkeypatch.context() as m:
        m.setattr(logging.getLogger("flyautotune"), "disabled", True)  # 599 failure warnings
        assert first(torch.zeros(2), 2) == 0 and first.last_source == "search"
    fat.clear_caches()  # as another process: only the store remembers
    again = fat.autotune(configs=configs, key=["n"], do_bench=_bench, plugin_manager=pm, name="t_errors")(launch)
    assert again(torch.zeros(2), 2) == 0
    assert again.last_source == "store"  # was: "search" (the row was over 4 MiB and skipped)
    (entry,) = st.get_store().entries("t_errors")
    error = entry.timings[-1]["error"]
    assert error.startswith("RuntimeError: no good: xxx") and error.endswith("more characters not stored]")
    assert len(error) < MAX_ERROR_CHARS + 60
    failures = st.get_store().get_failures("t_errors", entry.timing_key)  # put_timing's rows are cut alike
    assert len(failures) == 599 and all(len(e) < MAX_ERROR_CHARS + 60 for e in failures.values())


def _too_large(key="k"):
    return StoreEntry(tuner="rms", key=key, config=cfg(1), timing_key="t", created=time.time() - 60,
                      provenance={"log": "x" * (MAX_ENTRY_BYTES + 10)},
                      timings=({"config": cfg(1), "ms": 1.0, "error": None},))


def test_a_winner_too_large_to_read_back_is_not_written(tmp_path, warnings_):
    s = TuningStore(tmp_path)
    big = _too_large()
    assert s.put("rms", "k", "t", big.config, list(big.timings), big.provenance) is False
    assert "not saving the winner for tuner='rms' key='k': its provenance is" in messages(warnings_)
    assert "it could never be read back" in messages(warnings_)
    assert s.flush() is True and s.get("rms", "k") is None  # nothing kept to retry either
    with pytest.raises(ValueError, match="its provenance is .* characters of JSON, .* nothing was written"):
        s.put_entries([StoreEntry(tuner="rms", key="fine", config=cfg(1)), big])
    assert s.entries() == []
    text = st.dump_pack([big])
    with pytest.raises(PackError, match=r"entries\[0\] is too large for the store: its provenance is"):
        s.import_pack(text)
    assert s.entries() == []


def test_import_skips_an_entry_too_large_for_the_store(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(st.dump_pack([_too_large('{"n":1}'), StoreEntry(tuner="rms", key='{"n":2}', config=cfg(2),
                                                                     created=1.0, timing_key="t")]))
    plan = plan_import(st.get_store(), read_pack(path))
    (skipped,) = plan.skipped
    assert skipped.reason.startswith("too large for the store: its provenance is")
    assert [i.entry.key for i in plan.added] == ['{"n":2}']
    status, out, _ = run(capsys, "import", path)
    assert status == 0 and "add 1, replace 0, keep 0 local, skip 1" in out  # was: "add 2", one unreadable
    assert "too large for the store" in out
    assert [e.key for e in st.get_store().entries()] == ['{"n":2}']

# -- times in the future -----------------------------------------------------------------


def test_an_entry_dated_in_the_future_is_refused_with_its_value():
    soon = time.time() + CREATED_SLACK_S / 2  # another machine's clock a little ahead: accepted
    pack = read_pack(pack_text([timed_item(key="future", created=9e10), timed_item(key="soon", created=soon)]))
    assert [e.key for e in pack.entries] == ["soon"]
    (where, reason), = pack.rejected
    assert where == "entries[0]"
    assert "created must be epoch seconds from 0 to at most a day ahead" in reason
    assert "got 90000000000.0 (the year 4821)" in reason


def test_a_future_dated_pack_entry_does_not_replace_a_local_winner(tmp_path):
    s = TuningStore(tmp_path)
    s.put("rms", "k", "t", cfg(64), [{"config": cfg(64), "ms": 1.0, "error": None}], {})
    plan = plan_import(s, read_pack(pack_text([timed_item(config=cfg(16), created=9e10)])))
    assert plan.replaced == () and plan.added == ()  # was: replaced, "the pack's winner is newer"
    assert "the year 4821" in plan.skipped[0].reason
    with pytest.raises(ValueError, match="the year 4821"):
        s.put_entries([StoreEntry(tuner="rms", key="k", config=cfg(16), created=9e10, timing_key="t")])
    assert s.get("rms", "k").config == cfg(64)


def test_a_future_dated_store_row_is_skipped_and_a_late_write_replaces_it(tmp_path, warnings_):
    s = TuningStore(tmp_path)
    s.put("rms", "k", "t", cfg(16), [], {})
    raw = sqlite3.connect(s.path)
    raw.execute("UPDATE entries SET created = 9e10")  # as an import of a future-dated pack left it
    raw.commit()
    raw.close()
    assert s.get("rms", "k") is None
    assert "got 90000000000.0 (the year 4821)" in messages(warnings_)
    holder = sqlite3.connect(s.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a forced tune's winner deferred by a lock
    assert s.put("rms", "k", "t", cfg(64), [], {}) is False
    holder.execute("ROLLBACK")
    holder.close()
    assert s.flush() is True
    entry = TuningStore(tmp_path).get("rms", "k")
    assert entry is not None and entry.config == cfg(64)  # was: silently dropped as "older"

# -- the import's plan, as printed -------------------------------------------------------


def test_import_keep_line_names_the_local_winner_and_tells_keys_apart(pm, capsys, tmp_path):
    def key(strides):
        return json.dumps({"args": {"n": 16}, "strides": {"x": strides}}, sort_keys=True, separators=(",", ":"))

    old, slow = time.time() - 3600, 9.0
    pack = [StoreEntry(tuner="demo", key=key([2, 1]), config=cfg(16), created=old, timing_key="t",
                       timings=({"config": cfg(16), "ms": slow, "error": None},)),
            StoreEntry(tuner="demo", key=key([1, 1]), config=cfg(16), created=old, timing_key="t",
                       timings=({"config": cfg(16), "ms": slow, "error": None},))]
    path = tmp_path / "p.json"
    path.write_text(st.dump_pack(pack))
    st.get_store().put("demo", key([2, 1]), "t", cfg(64), [{"config": cfg(64), "ms": 1.0, "error": None}], {})
    status, out, _ = run(capsys, "import", path)
    assert status == 0 and "add 1, replace 0, keep 1 local, skip 0" in out
    (line,) = [x for x in out.splitlines() if x.startswith("  keep")]
    assert line.startswith("  keep the local winner for demo n=16 strides=x:2x1 on -: BLOCK=64 ")  # was: BLOCK=16
