"""What the store and packs accept is bounded so that it can always be read back: integers that no float
holds, error texts and rows too long to read, times in the future; and the messages that name a refused
entry, or a kept one, say which it is. Each test failed before the change that added it."""

from __future__ import annotations

import json
import logging
import sqlite3
import time

import pytest
import torch

import flyautotune as fat
from flyautotune import store as st
from flyautotune.cli import main
from flyautotune.cli.cmd import show
from flyautotune.store import (MAX_ENTRY_BYTES, PackError, PackIndex, StoreEntry, TuningStore, apply_import,
                               load_pack, plan_import, read_pack)

HUGE = "1" + "0" * 400  # a 401-digit integer: valid JSON, valid Python, no float holds it
MAX_INT_DIGITS = 308  # jsontext.MAX_INT_DIGITS: every integer this long still converts to a float
MAX_ERROR_CHARS = 1000  # entries.MAX_ERROR_CHARS
CREATED_SLACK_S = 24 * 3600.0  # entries.CREATED_SLACK_S


def cfg(block: int) -> dict:
    return {"kwargs": {"BLOCK": block}, "compile_hints": {}}


def item(**over) -> dict:
    e = {"tuner": "rms", "key": "k", "timing_key": "t", "config": cfg(1),
         "timings": [{"config": cfg(1), "ms": 1.0, "error": None}], "provenance": {}, "created": 1.5}
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
    entry = item(timings=[timing])
    if field == "created":
        entry["created"] = 7777
    elif field == "config":
        entry["config"] = {"kwargs": {"BLOCK": 7777}, "compile_hints": {}}
    elif field == "provenance":
        entry["provenance"] = {"margin": 7777}
    text = pack_text([entry, item(key="innocent")])
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
    path.write_text(pack_text([item(key='{"n":1}', timings=[{"config": cfg(1), "ms": 7777, "error": None}])])
                    .replace("7777", HUGE))
    status, _, err = run(capsys, "import", path)
    assert status == 1 and "(401 digits) is out of range" in err  # was: a traceback
    assert st.get_store().entries() == []


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
    path.write_bytes(pack_text([item()]).encode("utf-8-sig"))  # as Notepad saves it
    assert [e.key for e in load_pack(path)] == ["k"]  # was: "Expecting value: line 1 column 1"
    assert [e.key for e in load_pack("\ufeff" + pack_text([item()]))] == ["k"]
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
    pack = read_pack(pack_text([item(key="future", created=9e10), item(key="soon", created=soon)]))
    assert [e.key for e in pack.entries] == ["soon"]
    (where, reason), = pack.rejected
    assert where == "entries[0]"
    assert "created must be epoch seconds from 0 to at most a day ahead" in reason
    assert "got 90000000000.0 (the year 4821)" in reason


def test_a_future_dated_pack_entry_does_not_replace_a_local_winner(tmp_path):
    s = TuningStore(tmp_path)
    s.put("rms", "k", "t", cfg(64), [{"config": cfg(64), "ms": 1.0, "error": None}], {})
    plan = plan_import(s, read_pack(pack_text([item(config=cfg(16), created=9e10)])))
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
