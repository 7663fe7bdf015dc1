"""The command line run in-process (``flyautotune.cli.main``) against a fresh plugin
manager and an isolated store: what a user sees from show, clear, import, tune on
the CPU, and the progress receiver on the tuning-event hook."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import attrs
import pytest

import flyautotune as fat
from flyautotune import store as store_mod
from flyautotune.cli import build_parser, main
from flyautotune.progress import Progress

ROOT = Path(__file__).resolve().parents[1]


def _launch(x, out, n, BLOCK=None):
    if BLOCK == 3:
        raise ValueError("BLOCK=3 does not divide the rows")
    out[:] = [v * 2.0 for v in x]
    return BLOCK


def _bench(fn, setup=None):
    if setup is not None:
        setup()
    return {1: 4.0, 2: 3.0, 4: 1.0}[fn()]


@pytest.fixture
def demo(pm):
    """An adopter ``demo`` (four configs, BLOCK=4 fastest, BLOCK=3 fails) on the test's manager."""
    tuned = fat.autotune(configs=[fat.Config(BLOCK=b) for b in (1, 2, 3, 4)], key=["n"], name="demo",
                         default=lambda n, **_: fat.Config(BLOCK=1), do_bench=_bench)(_launch)
    adopter = fat.Adopter(
        name="demo", tuner=tuned, entry=lambda x: tuned(x, [0.0] * len(x), len(x)),
        tuner_args=lambda x: ((x, [0.0] * len(x), len(x)), {}),
        example=lambda shape, dtype, device: (([1.0] * (shape[0] * shape[1]),), {}),
    )
    pm.register_adopter(adopter)
    return adopter


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _key(n=16, dtype="torch.bfloat16", strides=(2, 1), hints=()):
    return fat_key({"args": {"n": n}, "dtypes": {"x": dtype}, "strides": {"x": list(strides)},
                    "hints": list(hints), "target": {"backend": "cpu", "arch": "x86_64", "warp_size": 1}})


def fat_key(d):
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


def _put(tuner, key, block=4, ms=1.0):
    cfg = {"kwargs": {"BLOCK": block}, "compile_hints": {}}
    assert store_mod.get_store().put(tuner, key, key, cfg, [{"config": cfg, "ms": ms, "error": None}], {})


# -- show ----------------------------------------------------------------------------------


def test_show_keeps_keys_that_differ_only_in_dtype_or_strides_apart(pm, capsys):
    _put("demo", _key(dtype="torch.bfloat16"))
    _put("demo", _key(dtype="torch.float16"))
    _put("demo", _key(dtype="torch.float16", strides=(1, 2)))
    status, out, _ = run(capsys, "show")
    assert status == 0
    rows = [line for line in out.splitlines() if line.startswith("demo ")]
    assert len(rows) == 3 and len(set(rows)) == 3, out
    assert any("tensors=bf16" in r for r in rows) and sum("tensors=fp16" in r for r in rows) == 2
    fp16 = [r for r in rows if "tensors=fp16" in r]
    assert any("strides=x:2x1" in r for r in fp16) and any("strides=x:1x2" in r for r in fp16)


def test_show_of_a_plain_key_stays_short(pm, capsys):
    _put("demo", _key())
    status, out, _ = run(capsys, "show")
    row = next(line for line in out.splitlines() if line.startswith("demo "))
    assert "n=16 tensors=bf16" in row and "strides" not in row and "cpu/x86_64" in row


def test_show_survives_keys_that_are_not_json_objects(pm, capsys):
    _put("odd", "[1, 2]")
    _put("odd", "not json at all")
    _put("demo", _key())
    status, out, _ = run(capsys, "show")
    assert status == 0 and "3 tuned entries" in out
    assert any(line.startswith("odd ") and "[1, 2]" in line for line in out.splitlines())
    assert any(line.startswith("demo ") and "n=16" in line for line in out.splitlines())


def test_names_from_the_store_are_printed_escaped(pm, capsys):
    import sqlite3

    _put("plain", _key())  # the store refuses such a name now; an older file can still hold one
    db = store_mod.get_store().path
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE entries SET tuner = ?", ("evil\x1b]0;owned\x07\u202e",))
    status, out, _ = run(capsys, "show")
    assert status == 0
    # the row is refused on read or printed escaped: the terminal never sees the raw characters
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out


def test_safe_escapes_lone_surrogates_and_control_characters():
    from flyautotune.cli.common import safe

    assert safe("ok name") == "ok name"
    assert safe("a\ud800b") == "a\\ud800b"
    assert safe("tab\tnew\nline\x9b") == "tab\\x09new\\x0aline\\x9b"
    safe("a\ud800b").encode("utf-8")  # printable on any UTF-8 terminal


# -- clear ---------------------------------------------------------------------------------


def test_clear_without_an_adopter_needs_all_and_says_what_would_go(pm, capsys):
    _put("demo", _key(n=16))
    _put("other", _key(n=32))
    status, out, err = run(capsys, "clear")
    assert status == 2 and out == ""
    assert "clear needs ADOPTER or --all; --all would delete 2 entries (tuners: demo, other) from " in err
    assert len(store_mod.get_store().entries()) == 2  # nothing went
    status, out, _ = run(capsys, "clear", "--all")
    assert status == 0 and out.startswith("removed 2 entries from ")
    assert store_mod.get_store().entries() == []


def test_clear_adopter_and_all_together_is_bad_input(pm, capsys):
    status, _, err = run(capsys, "clear", "demo", "--all")
    assert status == 2 and "give ADOPTER or --all, not both" in err


# -- import --------------------------------------------------------------------------------


@attrs.frozen
class _Plan:
    added: tuple = ()
    replaced: tuple = ()
    kept: tuple = ()
    skipped: tuple = ()


@pytest.fixture
def fake_planner(monkeypatch):
    """Stands in for the store's plan_import/apply_import: records how the command called them."""
    calls = {}

    def plan_import(store, entries, *, tuners=None, replace=False):
        entries = getattr(entries, "entries", entries)  # a Pack from read_pack, as the command passes it
        calls["plan"] = {"tuners": tuners, "replace": replace, "n": len(entries)}
        chosen = [e for e in entries if tuners is None or e.tuner in tuners]
        return _Plan(added=tuple(chosen[:1]), replaced=tuple(chosen[1:]),
                     skipped=tuple((e, "not in --adopter") for e in entries if e not in chosen))

    def apply_import(store, plan):
        calls["applied"] = plan
        return len(plan.added) + len(plan.replaced)

    monkeypatch.setattr(store_mod, "plan_import", plan_import, raising=False)
    monkeypatch.setattr(store_mod, "apply_import", apply_import, raising=False)
    return calls


def _pack(tmp_path):
    for tuner, n in (("demo", 16), ("demo", 32), ("other", 16)):
        _put(tuner, _key(n=n))
    path = tmp_path / "pack.json"
    path.write_text(store_mod.dump_pack(store_mod.get_store().entries()))
    store_mod.get_store().clear()
    return path


def test_import_dry_run_shows_the_plan_and_changes_nothing(pm, demo, capsys, tmp_path, fake_planner):
    pack = _pack(tmp_path)
    status, out, _ = run(capsys, "import", pack, "--adopter", "demo", "--dry-run")
    assert status == 0, out
    assert fake_planner["plan"] == {"tuners": ["demo"], "replace": False, "n": 3}
    assert "applied" not in fake_planner
    assert out.splitlines()[0] == "dry run: would add 1, would replace 1, would keep 0 local, would skip 1"
    assert re.search(r"^  add demo n=16 tensors=bf16 on cpu/x86_64: BLOCK=4$", out, re.M), out
    assert re.search(r"^  skip other n=16 .*\(not in --adopter\)$", out, re.M), out


def test_import_replace_and_keep(pm, demo, capsys, tmp_path, fake_planner):
    pack = _pack(tmp_path)
    status, out, _ = run(capsys, "import", pack, "--replace")
    assert status == 0 and fake_planner["plan"]["replace"] is True and fake_planner["plan"]["tuners"] is None
    assert out.splitlines()[-1].startswith(f"imported 3 entries from {pack} into ")
    status, out, _ = run(capsys, "import", pack, "--keep")
    assert status == 0 and fake_planner["applied"].replaced == () and len(fake_planner["applied"].kept) == 2
    status, _, err = run(capsys, "import", pack, "--keep", "--replace")
    assert status == 2 and "not allowed with argument" in err


def test_import_of_an_unknown_adopter_is_bad_input(pm, demo, capsys, tmp_path, fake_planner):
    status, _, err = run(capsys, "import", _pack(tmp_path), "--adopter", "nosuch")
    assert status == 2 and "unknown adopter 'nosuch'" in err


@pytest.mark.skipif(not hasattr(store_mod, "plan_import"), reason="the store's plan_import is not merged yet")
def test_import_scoped_to_one_adopter_leaves_the_others_alone(pm, demo, capsys, tmp_path):
    pack = _pack(tmp_path)
    status, out, _ = run(capsys, "import", pack, "--adopter", "demo")
    assert status == 0, out
    assert {e.tuner for e in store_mod.get_store().entries()} == {"demo"}


def test_import_names_each_local_winner_it_replaces(pm, demo, capsys, tmp_path):
    """The store's winner an import replaces is gone afterwards: the import names it, not only a count."""
    _put("demo", _key(n=16), block=2, ms=3.0)
    mine = store_mod.get_store().get("demo", _key(n=16))
    theirs = attrs.evolve(mine, config={"kwargs": {"BLOCK": 4}, "compile_hints": {}}, created=mine.created + 60,
                          timings=({"config": {"kwargs": {"BLOCK": 4}, "compile_hints": {}}, "ms": 1.0, "error": None},))
    pack = tmp_path / "pack.json"
    pack.write_text(store_mod.dump_pack([theirs]))
    status, out, _ = run(capsys, "import", pack)
    assert status == 0, out
    assert out.splitlines()[:2] == [
        "add 0, replace 1, keep 0 local, skip 0",
        "  replace demo n=16 tensors=bf16 on cpu/x86_64: BLOCK=4 (was BLOCK=2; the pack's winner is newer)"]
    assert store_mod.get_store().get("demo", _key(n=16)).config["kwargs"] == {"BLOCK": 4}


# -- tune ------------------------------------------------------------------------------------


def test_tune_on_cpu_refuses_a_shape_the_interpreter_cannot_finish(pm, demo, capsys):
    status, out, err = run(capsys, "tune", "demo", "--shape", "1x1000000000", "--device", "cpu")
    assert status == 2 and out == ""
    assert err.strip().splitlines() == [
        "flyautotune: error: argument --shape: 1x1000000000 has 1000000000 elements, more than the 4194304 "
        "Triton's CPU interpreter finishes in reasonable time; use a GPU (--device cuda:0), a smaller shape, "
        "or --allow-slow"]


def test_tune_says_it_started_before_the_first_candidate(pm, demo, capsys):
    status, out, err = run(capsys, "tune", "demo", "--shape", "2x8", "--device", "cpu", "--allow-slow")
    assert status == 0, err
    lines = [line for line in err.splitlines() if line.startswith("demo 2x8 bf16: ")]
    assert lines[0] == "demo 2x8 bf16: picking a config on cpu (Triton interpreter)"
    assert lines[1] == "demo 2x8 bf16: searching 4 candidates"
    assert "* winner: BLOCK=4" in out


def test_a_long_error_is_cut_in_the_table_and_given_in_full_below(capsys):
    from flyautotune.cli.cmd.tune import ERROR_CELL, print_result

    long_error = "CompilationError: " + "x" * 300 + "\nsecond line of the error"
    rows = [{"config": {"kwargs": {"BLOCK": 1}, "compile_hints": {}}, "ms": 1.0, "error": None},
            {"config": {"kwargs": {"BLOCK": 2}, "compile_hints": {}}, "ms": None, "error": long_error}]
    winner = rows[0]["config"]
    print_result("demo 2x8 bf16", "cpu", rows, winner, None, "searched 2 candidates")
    out = capsys.readouterr().out
    table = out.split("* winner", 1)[0].splitlines()[1:]
    assert max(len(line) for line in table) <= len("   BLOCK=1  time (ms)  speed vs best") + ERROR_CELL
    below = out.split("failed candidates:\n", 1)[1]
    assert below.startswith("  BLOCK=2: CompilationError: " + "x" * 300)
    assert "second line" not in out
    print_result("demo 2x8 bf16", "cpu", rows, winner, None, "searched 2 candidates", verbose=1)
    assert "    second line of the error" in capsys.readouterr().out


def test_values_every_candidate_shares_are_said_once_above_the_table(capsys):
    """The rows show what tells the candidates apart; what they all share is one line above the table, and
    the winner's line keeps the whole config (what a user copies)."""
    from flyautotune.cli.cmd.tune import print_result

    def row(rpp, ms, **hints):
        return {"config": {"kwargs": {"BLOCK_THREADS": 128, "ROWS_PER_PROGRAM": rpp, "VEC": 16},
                           "compile_hints": {"num_warps": 4, **hints}}, "ms": ms, "error": None}

    rows = [row(1, 2.0), row(4, 1.0, maxnreg=128), row(2, 1.5)]
    print_result("demo 2x8 bf16", "cpu", rows, rows[1]["config"], None, "searched 3 candidates")
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "every candidate: BLOCK_THREADS=128, VEC=16, num_warps=4"
    body = [line.split("  ")[1] if line.startswith("*") else line.split()[0] for line in lines[3:6]]
    assert body == ["ROWS_PER_PROGRAM=4, maxnreg=128", "ROWS_PER_PROGRAM=2", "ROWS_PER_PROGRAM=1"]
    assert lines[6] == "* winner: BLOCK_THREADS=128, ROWS_PER_PROGRAM=4, VEC=16, maxnreg=128, num_warps=4"
    print_result("demo 2x8 bf16", "cpu", rows[:1], rows[0]["config"], None, "one candidate")
    one = capsys.readouterr().out  # a single row is shown whole, with no shared line
    assert "every candidate" not in one and "*  BLOCK_THREADS=128, ROWS_PER_PROGRAM=1, VEC=16, num_warps=4" in one


def test_a_candidate_the_search_skipped_reads_skipped_not_failed(capsys):
    from flyautotune.cli.cmd.tune import print_result

    why = "skipped: same build as BLOCK=1 (precompile named both builds alike)"
    rows = [{"config": {"kwargs": {"BLOCK": 1}, "compile_hints": {}}, "ms": 1.0, "error": None},
            {"config": {"kwargs": {"BLOCK": 2}, "compile_hints": {}}, "ms": None, "error": why},
            {"config": {"kwargs": {"BLOCK": 3}, "compile_hints": {}}, "ms": None, "error": "ValueError: no"}]
    print_result("demo 2x8 bf16", "cpu", rows, rows[0]["config"], None, "searched 3 candidates")
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("   BLOCK=")}
    assert lines["BLOCK=2"].split()[1] == "skipped" and lines["BLOCK=3"].split()[1] == "failed"
    below = out.split("skipped candidates:\n", 1)[1]  # the message is longer than its cell: given in full
    assert below.startswith(f"  BLOCK=2: {why}")
    assert "failed candidates:" not in out  # BLOCK=3's error fits its cell


def test_progress_counts_skipped_candidates_apart_from_failed_ones():
    stream = io.StringIO()
    progress = Progress("demo 2x8 bf16", stream=stream, tty=False)
    progress({"event": "search_start", "candidates": 3})
    for i, error in enumerate([None, "skipped: same build as BLOCK=1 (...)", "ValueError: no"], 1):
        progress({"event": "candidate", "index": i, "total": 3, "ms": None if error else 1.0, "error": error,
                  "reused": False, "config": {"kwargs": {"BLOCK": i}, "compile_hints": {}}})
    progress({"event": "search_end", "duration_s": 0.25})
    lines = stream.getvalue().splitlines()
    assert "[BLOCK=2] skipped: same build as BLOCK=1 (...) (elapsed " in lines[2]
    assert "[BLOCK=3] failed: ValueError: no (elapsed " in lines[3]
    assert lines[4] == "demo 2x8 bf16: searched 3 candidates in 0.2 s, 1 failed, 1 skipped"


# -- progress on the tuning-event hook ----------------------------------------------------------


def test_progress_receives_events_through_the_hook(pm):
    stream = io.StringIO()
    progress = Progress("demo 2x8 bf16", stream=stream, tty=False)
    pm.register(progress, name="test-progress")
    try:
        pm.hook.flyautotune_tuning_event(event={"event": "search_start", "candidates": 2})
        event = {"event": "candidate", "index": 1, "total": 2, "ms": 1.5, "error": None, "reused": False,
                 "config": {"kwargs": {"BLOCK": 1}, "compile_hints": {}}}
        pm.hook.flyautotune_tuning_event(event=event)
        progress(event)  # the same event through a listener too: printed once
        pm.hook.flyautotune_tuning_event(event={"event": "search_end", "duration_s": 0.25})
    finally:
        pm.unregister(name="test-progress")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "demo 2x8 bf16: searching 2 candidates"
    assert lines[1].startswith("demo 2x8 bf16: candidate 1 of 2 [BLOCK=1] 1.5000 ms (elapsed ")
    assert lines[2] == "demo 2x8 bf16: searched 2 candidates in 0.2 s"
    assert len(lines) == 3


# -- docs and --help agree ---------------------------------------------------------------------


def test_every_option_of_every_command_is_documented():
    docs = (ROOT / "docs" / "cli.md").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, command in sub.choices.items():
        assert f"flyautotune {name}" in docs, name
        for action in command._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    assert f"`{option}" in docs, f"{name} {option} is not in docs/cli.md"
    assert "FLYAUTOTUNE=1" in parser.epilog and "`FLYAUTOTUNE=1`" in docs


def test_tune_of_a_single_candidate_times_it_and_stores_nothing(pm, capsys):
    tuned = fat.autotune(configs=[fat.Config(BLOCK=4)], key=["n"], name="single")(_launch)
    pm.register_adopter(fat.Adopter(name="single", tuner=tuned,
                                    example=lambda shape, dtype, device: (([1.0] * 4, [0.0] * 4, 4), {})))
    status, out, err = run(capsys, "tune", "single", "--shape", "2x2", "--device", "cpu")
    assert status == 0, err
    assert "only one candidate fits this shape on this backend: nothing to search, nothing stored" in out
    row = next(line for line in out.splitlines() if line.startswith("*  BLOCK=4"))
    assert float(row.split()[2]) >= 0 and row.rstrip().endswith("1.00x")
    assert store_mod.get_store().entries() == []


def test_import_refuses_winners_the_adopter_would_never_run(pm, capsys, tmp_path):
    from flyautotune_rmsnorm import api

    pm.register_adopter(fat.Adopter(name="rmsnorm", tuner=api.tuned_launch, entry=api.rmsnorm_autotuned,
                                    tuner_args=api.tuner_args))
    key = json.dumps({"args": {"M": 4, "N": 64, "dtype": "bf16"}})
    good = api.space.default_config(4, 64, "bf16", "cpu").to_dict()
    bad = [{"kwargs": {**good["kwargs"], "BLOCK_THREADS": 7}, "compile_hints": {}},
           {"kwargs": {**good["kwargs"], "stream": 3735928559}, "compile_hints": {}},
           {"kwargs": {"BLOCK_THREADS": "banana"}, "compile_hints": {}}]
    entries = [store_mod.StoreEntry(tuner="rmsnorm", key=f"{key[:-1]},\"i\":{i}}}", config=c,
                                    timings=({"config": c, "ms": 1.0, "error": None},), provenance={},
                                    created=1.0, timing_key="t") for i, c in enumerate([good] + bad)]
    path = tmp_path / "pack.json"
    path.write_text(store_mod.dump_pack(entries))
    status, out, err = run(capsys, "import", str(path), "--strict")
    assert status == 1 and store_mod.get_store().entries("rmsnorm") == []  # --strict: nothing imported
    assert out.count("refused: rmsnorm:") == 3
    assert f"--strict: 3 entries of {path} refused (listed above); nothing imported" in err
    status, out, _ = run(capsys, "import", str(path))
    assert status == 0
    assert "add 1," in out and "skip 3" in out
    assert out.count("refused: rmsnorm:") == 3 and "may not set the launch stream" in out
    assert len(store_mod.get_store().entries("rmsnorm")) == 1
    status, out, err = run(capsys, "import", str(path), "--strict", "--dry-run")
    assert status == 1 and "nothing imported" in err  # a dry run says what --strict would do
    path.write_text(store_mod.dump_pack(entries[:1]))
    status, out, err = run(capsys, "import", str(path), "--strict")
    assert status == 0 and "refused" not in out + err  # nothing refused: --strict imports as usual
