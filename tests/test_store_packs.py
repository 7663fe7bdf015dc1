"""Tuning packs: canonical export, exact round trips, validation, shipped-pack lookup."""

from __future__ import annotations

import json
import logging
import os

import pytest

from flyautotune import store as st
from flyautotune.store import packs
from flyautotune.store import PackError, PackIndex, StoreEntry, TuningStore, find_in_packs, load_pack


def cfg(block: int) -> dict:
    return {"kwargs": {"BLOCK": block}, "compile_hints": {"waves_per_eu": 2}}


@pytest.fixture
def store(tmp_path):
    s = TuningStore(tmp_path / "cache")
    s.put("rmsnorm", '{"M":4096,"N":8192}', "t1", cfg(256),
          [{"config": cfg(128), "ms": 0.031, "error": None}, {"config": cfg(256), "ms": 0.0275, "error": None},
           {"config": cfg(1024), "ms": None, "error": "OutOfResources: shared memory"}],
          {"device": "AMD Instinct MI300X", "arch": "gfx942", "toolchain": "triton 3.9.0", "search_s": 3.5})
    s.put("rmsnorm", '{"M":1,"N":4096}', "t2", cfg(128), [], {"device": "AMD Instinct MI300X"})
    s.put("add", "k\u00e9y", "t3", {"kwargs": {"B": [1, 2]}, "compile_hints": {}}, [], {"note": "\u00fcnicode"})
    yield s
    s.close()


def pack_text(entries) -> str:
    return json.dumps({"format": "flyautotune-pack", "version": 1, "entries": entries})


def good_entry(**over) -> dict:
    e = {"tuner": "rms", "key": "k", "timing_key": "t", "config": cfg(1), "timings": [], "provenance": {},
         "created": 1.5}
    e.update(over)
    return e


def test_export_clear_import_round_trips_byte_identical(store, tmp_path):
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    before = store.entries()
    assert store.export_pack(first) == 3
    assert store.clear() == 3
    assert store.entries() == []
    assert store.import_pack(first) == 3
    assert store.entries() == before  # every field, created timestamps included
    assert store.export_pack(second) == 3
    assert second.read_bytes() == first.read_bytes()


def test_export_is_canonical_json(store, tmp_path):
    path = tmp_path / "p.json"
    store.export_pack(path)
    text = path.read_text(encoding="ascii")
    doc = json.loads(text)
    assert list(doc) == ["format", "version", "entries"]  # identity leads the file
    assert doc["format"] == "flyautotune-pack" and doc["version"] == 1
    assert [(e["tuner"], e["key"]) for e in doc["entries"]] == sorted((e["tuner"], e["key"]) for e in doc["entries"])
    for e in doc["entries"]:
        assert list(e) == sorted(e)
    assert text.endswith("}\n")
    assert load_pack(text) == load_pack(path)


def test_export_one_tuner(store, tmp_path):
    path = tmp_path / "rms.json"
    assert store.export_pack(path, tuner="rmsnorm") == 2
    assert {e.tuner for e in load_pack(path)} == {"rmsnorm"}


def test_import_merges_and_can_keep_local_winners(store, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(pack_text([good_entry(tuner="rmsnorm", key='{"M":1,"N":4096}', config=cfg(999)),
                               good_entry(key="new")]))
    assert store.import_pack(path, overwrite=False) == 1
    assert store.get("rmsnorm", '{"M":1,"N":4096}').config == cfg(128)
    assert store.import_pack(path) == 2
    assert store.get("rmsnorm", '{"M":1,"N":4096}').config == cfg(999)
    assert len(store.entries()) == 4


@pytest.mark.parametrize(
    "text, problem",
    [
        ("{not json", "not valid JSON"),
        ('[1, 2]', "expected a JSON object at the top"),
        ('{"format": "other", "version": 1, "entries": []}', "'format' is 'other'; expected 'flyautotune-pack'"),
        ('{"format": "flyautotune-pack", "version": 7, "entries": []}', "version 7 was written by a newer"),
        ('{"format": "flyautotune-pack", "version": "1", "entries": []}', "'version' is '1'"),
        ('{"format": "flyautotune-pack", "version": 1, "entries": {}}', "'entries' must be a list"),
        ('{"format": "flyautotune-pack", "version": 1, "entries": [], "x": 1}', "unknown top-level field(s) ['x']"),
        (pack_text([{"tuner": "rms"}]), "entries[0]: missing field(s) ['config', 'created', 'key'"),
        (pack_text([good_entry(extra=1)]), "unknown field(s) ['extra']"),
        (pack_text([good_entry(key="")]), "entries[0].key must be a non-empty string"),
        (pack_text([good_entry(config="BLOCK=1")]), "entries[0].config must be a Config.to_dict() mapping"),
        (pack_text([good_entry(), good_entry(timings=[{"config": cfg(1), "ms": "x", "error": None}])]),
         "entries[1].timings[0]['ms'] must be a number"),
        (pack_text([good_entry(created="today")]), "entries[0].created must be a number"),
        (pack_text([good_entry(timings=[{"config": cfg(1), "ms": 1.0}])]),
         "entries[0].timings[0] = {'config'"),
        (pack_text([good_entry(), good_entry()]), "entries[1] repeats tuner='rms' key='k'"),
        (pack_text([good_entry()]).replace("1.5", "NaN"), "NaN is not valid JSON"),
    ],
)
def test_malformed_pack_raises_naming_file_and_problem(tmp_path, text, problem):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(PackError) as info:
        load_pack(path)
    assert str(info.value).startswith(f"tuning pack {path}: ")
    assert problem in str(info.value)


def test_importing_a_malformed_pack_writes_nothing(store, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(pack_text([good_entry(key="a"), good_entry(key="b", config=3)]))
    with pytest.raises(PackError, match="entries.1..config"):
        store.import_pack(path)
    assert store.get("rms", "a") is None


def test_missing_pack_file_raises_pack_error(tmp_path):
    with pytest.raises(PackError, match="nope.json: cannot read it"):
        load_pack(tmp_path / "nope.json")


def test_load_pack_accepts_text():
    (e,) = load_pack(pack_text([good_entry()]))
    assert e == StoreEntry(tuner="rms", key="k", config=cfg(1), created=1.5, timing_key="t")
    assert e.origin == "<text>"


# -- shipped packs ----------------------------------------------------------------------


def test_find_in_packs_takes_the_first_pack_with_the_key(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(pack_text([good_entry(key="k1", config=cfg(1))]))
    b.write_text(pack_text([good_entry(key="k1", config=cfg(2)), good_entry(key="k2", config=cfg(3))]))
    index = PackIndex()
    assert index.find([a, b], "rms", "k1").config == cfg(1)
    assert index.find([a, str(b)], "rms", "k2").config == cfg(3)
    assert index.find([a, b], "rms", "k3") is None
    assert index.find([a, b], "other", "k1") is None
    assert find_in_packs([b], "rms", "k2").origin == str(b)


def test_malformed_shipped_pack_is_skipped_with_one_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="flyautotune.store")
    bad, good, missing = tmp_path / "bad.json", tmp_path / "good.json", tmp_path / "missing.json"
    bad.write_text('{"format": "flyautotune-pack", "version": 1, "entries": [{"tuner": 5}]}')
    good.write_text(pack_text([good_entry()]))
    index = PackIndex()
    for _ in range(3):
        assert index.find([missing, bad, good], "rms", "k").config == cfg(1)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert text.count(f"tuning pack {bad}: skipping a malformed entry: entries[0]: missing field(s)") == 1
    assert text.count(f"skipping tuning pack {missing}: the file does not exist") == 1


def test_packs_are_parsed_once_and_reread_when_changed(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    path.write_text(pack_text([good_entry(config=cfg(1))]))
    calls = []
    real = packs.read_pack
    monkeypatch.setattr(packs, "read_pack", lambda p: calls.append(p) or real(p))
    index = PackIndex()
    for _ in range(5):
        assert index.find([path], "rms", "k").config == cfg(1)
    assert len(calls) == 1
    path.write_text(pack_text([good_entry(config=cfg(22))]))
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse-clock filesystems
    assert index.find([path], "rms", "k").config == cfg(22)
    assert len(calls) == 2


def test_package_packs_lists_shipped_json(tmp_path, monkeypatch):
    pkg = tmp_path / "my_kernels_pkg"
    (pkg / "packs").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "packs" / "mi300x.json").write_text(pack_text([good_entry()]))
    (pkg / "packs" / "h200.json").write_text(pack_text([good_entry(key="k2")]))
    (pkg / "packs" / "README.md").write_text("not a pack")
    monkeypatch.syspath_prepend(str(tmp_path))
    packs = st.package_packs("my_kernels_pkg")
    assert [p.name for p in packs] == ["h200.json", "mi300x.json"]
    assert find_in_packs(packs, "rms", "k2").config == cfg(1)
    assert st.package_packs("my_kernels_pkg", "nothing-here") == []


def test_a_pack_file_whose_name_begins_with_a_brace_is_read_as_a_file(tmp_path, monkeypatch):
    """A path given as a str is pack text only where no file has that name: ``{gfx942}.json`` (or the
    relative ``{v1}/winners.json``) was parsed as JSON and refused, "tuning pack <text>: not valid JSON"."""
    folder = tmp_path / "{v1}"
    folder.mkdir()
    (folder / "winners.json").write_text(pack_text([good_entry()]))
    monkeypatch.chdir(tmp_path)
    for path in ("{v1}/winners.json", str(folder / "winners.json")):
        pack = st.read_pack(path)
        assert pack.source == path and [e.key for e in pack.entries] == ["k"]
        assert find_in_packs([path], "rms", "k").config == cfg(1)
    assert st.read_pack(pack_text([good_entry()])).source == "<text>"  # the text itself still reads as text
