"""The autotuner with its store: timing reuse, stale winners, packs, processes."""

import json
import multiprocessing
import os
import textwrap

import pytest
import torch

import flyautotune as fat
from flyautotune import store as fat_store


def tuner(pm, bench, configs, name, **kw):
    @fat.autotune(configs=configs, key=["n"], do_bench=bench, plugin_manager=pm, name=name, **kw)
    def launch(x, n, BLOCK=None):
        return BLOCK

    return launch


def test_adding_one_config_benchmarks_only_the_new_candidate(pm, counting_bench):
    bench = counting_bench(cost=lambda i: 5.0 - i)
    first = tuner(pm, bench, [fat.Config(BLOCK=b) for b in (1, 2, 3)], "t_reuse")
    first(torch.zeros(2), 2)
    assert sorted(bench.calls) == [1, 2, 3]
    bench2 = counting_bench(cost=lambda i: 0.5)
    grown = tuner(pm, bench2, [fat.Config(BLOCK=b) for b in (1, 2, 3, 4)], "t_reuse")
    assert grown(torch.zeros(2), 2) == 4  # the new config is fastest
    assert grown.last_source == "search"
    assert bench2.calls == [4]
    entry = fat_store.get_store().entries("t_reuse")[0]
    assert {t["config"]["kwargs"]["BLOCK"]: t["ms"] for t in entry.timings} == {1: 4.0, 2: 3.0, 3: 2.0, 4: 0.5}


def test_forced_search_rebenchmarks_everything(pm, counting_bench, monkeypatch):
    bench = counting_bench()
    tuner(pm, bench, [fat.Config(BLOCK=b) for b in (1, 2)], "t_force_all")(torch.zeros(2), 2)
    monkeypatch.setenv("FLYAUTOTUNE", "1")
    bench2 = counting_bench()
    tuner(pm, bench2, [fat.Config(BLOCK=b) for b in (1, 2, 3)], "t_force_all")(torch.zeros(2), 2)
    assert sorted(bench2.calls) == [1, 2, 3]


def test_stale_winner_degrades_to_default_and_is_dropped(pm, counting_bench, caplog):
    bench = counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}[i])

    @fat.autotune(configs=[fat.Config(BLOCK=1), fat.Config(BLOCK=2)], key=["n"], do_bench=bench,
                  plugin_manager=pm, name="t_stale")
    def old(x, n, BLOCK=None):
        return BLOCK

    old(torch.zeros(2), 2)
    assert len(fat_store.get_store().entries("t_stale")) == 1

    # The kernel was refactored: BLOCK became TILE. The stored winner no longer fits.
    @fat.autotune(configs=lambda **kw: [fat.Config(TILE=1), fat.Config(TILE=2)], key=["n"], do_bench=bench,
                  plugin_manager=pm, name="t_stale", default=lambda **kw: fat.Config(TILE=8))
    def new(x, n, TILE=None):
        return TILE

    with caplog.at_level("WARNING", logger="flyautotune"):
        assert new(torch.zeros(2), 2) == 8
    assert new.last_source == "default"
    assert "ignoring the stored winner" in caplog.text and "BLOCK=2, which is not one of the tuner's tunable names" in caplog.text
    assert fat_store.get_store().entries("t_stale") == []


def test_real_launch_error_of_a_stored_winner_propagates(pm, counting_bench):
    bench = counting_bench()
    tuner(pm, bench, [fat.Config(BLOCK=1), fat.Config(BLOCK=2)], "t_real_err")(torch.zeros(2), 2)

    @fat.autotune(configs=[fat.Config(BLOCK=1), fat.Config(BLOCK=2)], key=["n"], do_bench=bench,
                  plugin_manager=pm, name="t_real_err", default=lambda **kw: fat.Config(BLOCK=1))
    def broken(x, n, BLOCK=None):
        raise RuntimeError("illegal memory access")

    with pytest.raises(RuntimeError, match="illegal memory access"):
        broken(torch.zeros(2), 2)
    assert broken.last_source == "store"
    assert len(fat_store.get_store().entries("t_real_err")) == 1


def test_shipped_pack_is_used_after_the_store_and_before_the_default(pm, counting_bench, tmp_path):
    bench = counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}[i])
    space = [fat.Config(BLOCK=1), fat.Config(BLOCK=2)]
    tuner(pm, bench, space, "t_pack")(torch.zeros(2), 2)
    pack = tmp_path / "shipped.json"
    assert fat_store.get_store().export_pack(pack, tuner="t_pack") == 1
    fat_store.get_store().clear()
    bench2 = counting_bench()
    shipped = tuner(pm, bench2, space, "t_pack", packs=[pack], default=lambda **kw: fat.Config(BLOCK=1))
    assert shipped(torch.zeros(2), 2) == 2
    assert shipped.last_source == "pack" and bench2.calls == []


def test_a_pack_tuned_from_another_version_of_the_kernel_is_named_once_and_not_used(pm, counting_bench, tmp_path,
                                                                                     caplog):
    # the pack was exported, then the kernel's file was edited (as adding packs= to it is): the winner's key
    # holds the old source's fingerprint, so it must not run, and the author is told why, once
    src = tmp_path / "kernel_body.py"
    src.write_text("BODY = 1\n")
    space = [fat.Config(BLOCK=1), fat.Config(BLOCK=2)]
    for n in (2, 3):  # BLOCK=2 (the second candidate timed) wins both
        bench = counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}[i])
        assert tuner(pm, bench, space, "t_edited", source_files=[str(src)])(torch.zeros(n), n) == 2
    pack = tmp_path / "shipped.json"
    assert fat_store.get_store().export_pack(pack, tuner="t_edited") == 2
    fat_store.get_store().clear()
    default = lambda **kw: fat.Config(BLOCK=1)  # noqa: E731
    same = tuner(pm, counting_bench(), space, "t_edited", source_files=[str(src)], packs=[pack], default=default)
    with caplog.at_level("WARNING", logger="flyautotune"):
        assert same(torch.zeros(2), 2) == 2 and same.last_source == "pack"
    assert "another version" not in caplog.text

    src.write_text("BODY = 2\n")
    edited = tuner(pm, counting_bench(), space, "t_edited", source_files=[str(src)], packs=[pack], default=default)
    with caplog.at_level("WARNING", logger="flyautotune"):
        assert edited(torch.zeros(2), 2) == 1 and edited.last_source == "default"
        assert edited(torch.zeros(3), 3) == 1 and edited.last_source == "default"  # said once, not per shape
        assert edited(torch.zeros(5), 5) == 1  # a shape the pack never had: nothing to say
    said = [r.getMessage() for r in caplog.records if "another version" in r.getMessage()]
    assert len(said) == 1
    assert str(pack) in said[0] and same.source_fingerprint in said[0] and edited.source_fingerprint in said[0]


def test_store_on_a_read_only_path_still_returns_the_winner(pm, counting_bench, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(blocker / "cache"))
    bench = counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}[i])
    with caplog.at_level("WARNING"):
        assert tuner(pm, bench, [fat.Config(BLOCK=1), fat.Config(BLOCK=2)], "t_ro")(torch.zeros(2), 2) == 2
    assert "flyautotune.store" in {r.name for r in caplog.records}


def test_cache_dir_change_is_honoured_on_the_next_call(pm, counting_bench, tmp_path, monkeypatch):
    bench = counting_bench()
    launch = tuner(pm, bench, [fat.Config(BLOCK=1), fat.Config(BLOCK=2)], "t_dirs")
    launch(torch.zeros(2), 2)
    assert launch.search_count == 1
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(tmp_path / "elsewhere"))
    fat.clear_caches()  # a value changed in place is noticed after clear_caches (a new variable without it)
    launch(torch.zeros(2), 2)
    assert launch.search_count == 2  # a new, empty store: the memory front was dropped too


def test_a_cache_dir_set_after_the_first_call_is_noticed(pm, counting_bench, tmp_path, monkeypatch):
    monkeypatch.delenv("FLYAUTOTUNE_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    launch = tuner(pm, counting_bench(), [fat.Config(BLOCK=1), fat.Config(BLOCK=2)], "t_dirs_new")
    launch(torch.zeros(2), 2)
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(tmp_path / "elsewhere"))
    launch(torch.zeros(2), 2)  # a new variable: noticed on the fast path without clear_caches
    assert launch.search_count == 2


CHILD = textwrap.dedent(
    """
    import json, sys, time
    import torch
    import flyautotune as fat

    ran = {}

    def bench(fn, setup=None):
        fn()
        time.sleep(0.05)
        # by config, not by call: a process that finds the other's stored timing of a config times fewer
        return {1: 2.0, 2: 1.0, 3: 3.0}[ran["B"]]

    @fat.autotune(configs=[fat.Config(B=b) for b in (1, 2, 3)], key=["n"], do_bench=bench, name="t_two_procs")
    def launch(x, n, B=None):
        ran["B"] = B
        return B

    print("ready", flush=True)
    sys.stdin.readline()  # start together
    print(json.dumps({"winner": launch(torch.zeros(3), 3), "source": launch.last_source}))
    """
)


@pytest.mark.slow
def test_two_processes_tuning_one_cold_key(tmp_path, isolated_store):
    import subprocess
    import sys

    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, FLYAUTOTUNE_CACHE_DIR=str(isolated_store))
    procs = [subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    for p in procs:  # both have imported everything: the race starts at "go"
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    outs = []
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert [o["winner"] for o in outs] == [2, 2]
    entries = fat_store.get_store(isolated_store).entries("t_two_procs")
    assert len(entries) == 1
    assert entries[0].config == {"kwargs": {"B": 2}, "compile_hints": {}}
    assert len(entries[0].timings) == 3


def test_a_stored_failure_is_retried_not_reused(pm, counting_bench):
    attempts = []
    flaky = {"fail": True}

    def make(configs):
        @fat.autotune(configs=configs, key=["n"], do_bench=counting_bench(cost=lambda i: 1.0), plugin_manager=pm,
                      name="t_retry")
        def launch(x, n, BLOCK=None):
            attempts.append(BLOCK)
            if BLOCK == 2 and flaky["fail"]:
                raise RuntimeError("CUDA out of memory (another process held it)")
            return BLOCK

        return launch

    make([fat.Config(BLOCK=1), fat.Config(BLOCK=2)])(torch.zeros(2), 2)
    flaky["fail"] = False
    attempts.clear()
    make([fat.Config(BLOCK=1), fat.Config(BLOCK=2), fat.Config(BLOCK=3)])(torch.zeros(2), 2)
    assert 1 not in attempts[:-1]  # BLOCK=1's stored timing was reused
    assert 2 in attempts and 3 in attempts
