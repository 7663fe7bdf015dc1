"""How a search decides: the default is protected within the measured noise, real wins are kept,
wrong outputs are rejected, broken timings are named, the budget is honoured."""

import threading

import pytest
import torch

import flyautotune as fat
from flyautotune.measurement import Measurement


class FixedTimes:
    """A CPU benchmark plugin: each config's time is a list of samples, one per timing call, cycled."""

    def __init__(self, times):
        self.times = {k: list(v) for k, v in times.items()}
        self.calls = []

    @fat.hookimpl(tryfirst=True)
    def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
        if setup is not None:
            setup()
        b = fn()
        self.calls.append(b)
        samples = self.times[b]
        ms = samples.pop(0)
        samples.append(ms)
        return Measurement(ms, spread=0.001, method="fixed", reps=rep)


def tuner(pm, name, default=1, space=(1, 2, 3), **kw):
    @fat.autotune(configs=[fat.Config(B=b) for b in space], key=["n"], plugin_manager=pm, name=name,
                  default=(lambda **a: fat.Config(B=default)) if default else None, **kw)
    def launch(x, n, B=None):
        return B

    return launch


def test_a_challenger_inside_the_noise_keeps_the_default(pm):
    # B=2 is 1% faster at the median, but its re-timings swing by +-3.5%: that is noise, not a win
    pm.register(FixedTimes({1: [1.0], 2: [0.96, 1.03, 0.99], 3: [1.5]}))
    sel = tuner(pm, "d_noise").select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=1) and sel.source == "search"
    assert sel.margin == 0.0 and sel.noise > 0.02
    rows = {r["config"]["kwargs"]["B"]: r for r in sel.timings}
    # a close call: first pass + the most interleaved rounds a search takes
    assert rows[1]["default"] and rows[2]["rounds"] == 7
    assert rows[2]["samples"] == [0.96, 1.03, 0.99, 0.96, 1.03, 0.99, 0.96]  # every round, in order, in the log


def test_each_re_timing_round_is_an_event_naming_its_finalists(pm):
    """After the first pass a ``retime`` event starts each round (what a progress display shows while the
    finalists are timed again), naming the finalists in the order the round times them."""
    pm.register(FixedTimes({1: [1.0], 2: [0.96, 1.03, 0.99], 3: [1.5], 4: [2.0]}))
    seen = []
    listener = fat.add_listener(lambda e: seen.append(e) if e["tuner"] == "d_retime" else None)
    try:
        tuner(pm, "d_retime", space=(1, 2, 3, 4)).select(torch.zeros(2), 2, force=True)
    finally:
        fat.remove_listener(listener)
    kinds = [e["event"] for e in seen]
    assert kinds[:6] == ["search_start"] + ["candidate"] * 4 + ["retime"] and "search_end" in kinds
    rounds = [e for e in seen if e["event"] == "retime"]
    assert [e["round"] for e in rounds] == [1, 2, 3, 4, 5, 6] and {e["most"] for e in rounds} == {6}
    b = [[f["kwargs"]["B"] for f in e["finalists"]] for e in rounds]
    assert b[:3] == [[1, 2, 3], [2, 3, 1], [3, 1, 2]]  # the default and the best two, each round starting one later
    assert kinds.index("search_end") > kinds.index("retime")


def test_a_real_win_over_the_default_is_chosen_and_its_margin_logged(pm, caplog):
    pm.register(FixedTimes({1: [1.0], 2: [0.96], 3: [0.97]}))
    with caplog.at_level("INFO", logger="flyautotune"):
        sel = tuner(pm, "d_win").select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=2)
    # each timing: 20 samples with a 0.1% spread, so the median is known to 0.93 * 0.1% / sqrt(20) = 0.021%
    assert sel.margin == pytest.approx(0.04, rel=1e-6)
    assert sel.noise == pytest.approx(2 ** 0.5 * 0.93 * 0.001 / 20 ** 0.5, rel=1e-3)
    assert "4.00% faster than the default (noise band 0.03%)" in caplog.text


def test_the_default_outside_the_space_is_timed_and_protected(pm):
    bench = FixedTimes({1: [1.2], 2: [1.1], 9: [1.0]})
    pm.register(bench)
    sel = tuner(pm, "d_outside", default=9, space=(1, 2)).select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=9) and 9 in bench.calls


def test_a_candidate_that_writes_wrong_values_is_rejected_and_never_wins(pm, counting_bench, caplog):
    @fat.autotune(configs=[fat.Config(BLOCK=b) for b in (2, 4)], key=["n"], plugin_manager=pm, name="d_wrong",
                  default=lambda **a: fat.Config(BLOCK=2),
                  do_bench=counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}[i]))
    def launch(x, out, n, BLOCK=None):
        blocks = n // BLOCK  # BLOCK=4 skips the tail block: the last 2 elements are never written
        for b in range(blocks if BLOCK == 4 else -(-n // BLOCK)):
            out[b * BLOCK:(b + 1) * BLOCK] = x[b * BLOCK:(b + 1) * BLOCK] * 2
        return out

    x, out = torch.arange(6.0), torch.empty(6)
    with caplog.at_level("WARNING"):
        sel = launch.select(x, out, 6, force=True)
    assert sel.config == fat.Config(BLOCK=2)  # the faster candidate was wrong
    bad = next(r for r in sel.timings if r["config"]["kwargs"]["BLOCK"] == 4)
    assert bad["ms"] is None and bad["error"].startswith("rejected: argument out differs from the reference")
    assert "BLOCK=4 failed: rejected" in caplog.text
    launch(x, out, 6)
    assert torch.equal(out, x * 2)


def test_output_checks_can_be_turned_off_or_given_a_reference(pm, counting_bench):
    seen = []

    def reference(result, x, n, **kw):
        seen.append(result)
        return result == 1  # only B=1 is "correct"

    t = tuner(pm, "d_check", default=None, space=(1, 2), check=reference,
              do_bench=counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}[i]))
    assert t.select(torch.zeros(2), 2, force=True).config == fat.Config(B=1) and seen == [1, 2]
    off = tuner(pm, "d_off", default=None, space=(1, 2), check=False,
                do_bench=counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}[i]))
    assert off.select(torch.zeros(2), 2, force=True).config == fat.Config(B=2)
    with pytest.raises(TypeError, match="check='yes'; expected True"):
        tuner(pm, "d_bad", check="yes")


@pytest.mark.parametrize("bad", [float("nan"), -1.0, None, float("inf"), True, "1.5", 0.0])
def test_a_broken_timing_names_the_candidate_and_the_search_goes_on(pm, bad, caplog):
    values = {1: 2.0, 2: bad, 3: 1.0}
    t = tuner(pm, "d_broken", default=None, do_bench=lambda fn, setup=None: values[fn()])
    with caplog.at_level("WARNING"):
        sel = t.select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=3)
    assert "candidate 2/3 B=2 failed: ValueError: do_bench for B=2 returned" in caplog.text


def test_the_search_budget_stops_new_candidates_and_keeps_the_default(pm, monkeypatch):
    import flyautotune.tuning.search as search_mod

    clock = iter(range(0, 1000, 10))  # every perf_counter call advances 10 s
    monkeypatch.setattr(search_mod.time, "perf_counter", lambda: float(next(clock)))
    pm.register(FixedTimes({1: [1.0], 2: [0.5], 3: [0.4]}))
    sel = tuner(pm, "d_budget", max_search_s=5).select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=1)
    skipped = [r for r in sel.timings if r["error"] and "budget" in r["error"]]
    assert len(skipped) == 2
    with pytest.raises(ValueError, match="max_search_s=0; expected seconds > 0"):
        tuner(pm, "d_budget0", max_search_s=0)


def test_candidates_the_budget_skips_are_reported_as_skipped(pm, monkeypatch, caplog):
    """A progress display and the log say which candidates the budget left untimed; the display said
    ``searched 3 candidates`` of a search that timed one."""
    import io

    import flyautotune.tuning.search as search_mod
    from flyautotune.progress import Progress

    clock = iter(range(0, 1000, 10))  # every perf_counter call advances 10 s
    monkeypatch.setattr(search_mod.time, "perf_counter", lambda: float(next(clock)))
    pm.register(FixedTimes({1: [1.0], 2: [0.5], 3: [0.4]}))
    shown = io.StringIO()
    progress = Progress("d_budget_shown", stream=shown, tty=False)
    listener = fat.add_listener(progress)
    try:
        with caplog.at_level("INFO", logger="flyautotune"):
            tuner(pm, "d_budget_shown", max_search_s=5).select(torch.zeros(2), 2, force=True)
    finally:
        fat.remove_listener(listener)
    lines = shown.getvalue().splitlines()
    assert [line.split(" (elapsed")[0] for line in lines[1:4]] == [
        "d_budget_shown: candidate 1 of 3 [B=1] 1.0000 ms",
        "d_budget_shown: candidate 2 of 3 [B=2] skipped: the search budget (max_search_s) ran out",
        "d_budget_shown: candidate 3 of 3 [B=3] skipped: the search budget (max_search_s) ran out"]
    assert lines[-1].startswith("d_budget_shown: searched 3 candidates in") and lines[-1].endswith(", 2 skipped")
    assert "d_budget_shown: 2 of 3 candidates skipped: the search budget (max_search_s) ran out" in caplog.text


def test_a_candidate_skipped_for_crashing_a_search_is_an_event(pm):
    import os
    import subprocess
    import sys

    from flyautotune.tuning import resume

    pm.register(FixedTimes({1: [1.0], 2: [0.5], 3: [0.7]}))
    launch = tuner(pm, "d_crash_event")
    key = launch.select(torch.zeros(2), 2, force=True).key
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    marker = resume.running_marker().replace(f"[pid {os.getpid()} ", f"[pid {gone.pid} ")
    launch.store().put_timing("d_crash_event", key, {"config": fat.Config(B=2).to_dict(), "ms": None, "error": marker})
    seen = []
    listener = fat.add_listener(lambda e: seen.append(e) if e["event"] == "candidate" else None)
    try:
        sel = launch.select(torch.zeros(2), 2, force=True)
    finally:
        fat.remove_listener(listener)
    assert [e["index"] for e in seen] == [1, 2, 3] and seen[1]["error"].startswith("skipped: it crashed")
    assert sel.config == fat.Config(B=3)


def test_a_config_listed_twice_is_one_candidate_timed_once(pm):
    # a generated grid that repeats the default (B=1) and B=2: each distinct config is timed once in the first
    # pass, in the order first listed (the default first), and has one row
    bench = FixedTimes({1: [1.0], 2: [0.96], 3: [1.5]})
    pm.register(bench)
    sel = tuner(pm, "d_twice", space=(2, 1, 2, 3, 1)).select(torch.zeros(2), 2, force=True)
    assert bench.calls[:3] == [1, 2, 3]
    assert [r["config"]["kwargs"]["B"] for r in sel.timings] == [1, 2, 3]
    assert [r.get("default", False) for r in sel.timings] == [True, False, False]
    assert sel.config == fat.Config(B=2)


def test_configs_that_differ_only_by_pre_hook_or_a_values_type_are_each_timed(pm):
    # equal as Python compares them, but not the same candidate: one runs another pre_hook (here the faster
    # one), and True is not 1 to a kernel factory (nor to the store)
    ran = []

    def hook_a(nargs):
        ran.append("a")

    def hook_b(nargs):
        ran.append("b")

    class ByHook(FixedTimes):
        @fat.hookimpl(tryfirst=True)
        def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
            ran.clear()
            m = FixedTimes.flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms)
            return Measurement(0.5 if ran == ["b"] else m.ms, spread=0.001, method="fixed", reps=rep)

    pm.register(ByHook({1: [1.0], 2: [1.0]}))  # B=True is timed as B=1 (True == 1 as a dict key)

    @fat.autotune(configs=[fat.Config(B=1, pre_hook=hook_a), fat.Config(B=1, pre_hook=hook_b), fat.Config(B=True),
                           fat.Config(B=2)], key=["n"], plugin_manager=pm, name="d_hooks",
                  default=lambda **a: fat.Config(B=2))
    def launch(x, n, B=None):
        return B

    sel = launch.select(torch.zeros(2), 2, force=True)
    assert len(sel.timings) == 4
    assert sel.config.pre_hook is hook_b and sel.margin == pytest.approx(0.5)


def test_a_copy_of_the_default_whose_pre_hook_is_a_bound_method_is_not_a_challenger(pm):
    # obj.method is a new object each time it is written: the default and its copy in the space run the same
    # hook, so they are one candidate (timed once, as the default); another instance's method is another hook
    class Hooks:
        def before(self, nargs):
            pass

    one, two = Hooks(), Hooks()
    bench = FixedTimes({1: [1.0], 2: [1.5]})
    pm.register(bench)

    @fat.autotune(configs=[fat.Config(B=1, pre_hook=one.before), fat.Config(B=2),
                           fat.Config(B=1, pre_hook=two.before)], key=["n"], plugin_manager=pm, name="d_bound",
                  default=lambda **a: fat.Config(B=1, pre_hook=one.before))
    def launch(x, n, B=None):
        return B

    sel = launch.select(torch.zeros(2), 2, force=True)
    assert [r.get("default", False) for r in sel.timings] == [True, False, False]
    assert bench.calls[:3] == [1, 2, 1]


def test_a_failing_key_is_searched_once_by_many_threads(pm, counting_bench):
    runs = []

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="d_fail32",
                  do_bench=counting_bench())
    def launch(x, n, B=None):
        runs.append(B)
        raise RuntimeError("no such kernel")

    errors = []

    def call():
        try:
            launch(torch.zeros(2), 2)
        except fat.AutotuneError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(32)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(errors) == 32 and runs == [1, 1, 2]  # one search: a probe run of the first config, then each


def test_an_in_place_launch_without_restore_is_not_rejected(pm, counting_bench, caplog):
    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="d_inplace",
                  do_bench=counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}[i]))
    def launch(x, n, B=None):
        x.add_(1)  # not idempotent and no restore_value: outputs after timing cannot be compared

    with caplog.at_level("INFO", logger="flyautotune"):
        sel = launch.select(torch.zeros(4), 4, force=True)
    assert sel.config == fat.Config(B=2) and all(r["error"] is None for r in sel.timings)
    assert "not idempotent" in caplog.text


def test_a_launch_that_reads_its_output_is_checked_without_poison(pm, counting_bench):
    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2), fat.Config(B=3)], key=["n"], plugin_manager=pm,
                  name="d_reads_out", restore_value=["acc"],
                  do_bench=counting_bench(cost=lambda i: {1: 3.0, 2: 1.0, 3: 2.0}[i]))
    def launch(acc, x, n, B=None):
        acc.add_(x if B != 2 else x * 2)  # reads acc; B=2 is fast and wrong

    sel = launch.select(torch.ones(4), torch.full((4,), 2.0), 4, force=True)
    rows = {r["config"]["kwargs"]["B"]: r for r in sel.timings}
    assert rows[2]["error"].startswith("rejected: argument acc differs") and rows[3]["error"] is None
    assert sel.config == fat.Config(B=3)


CRASHING_CHILD = """
import os, sys, torch
import flyautotune as fat

@fat.autotune(configs=[fat.Config(B=b) for b in (1, 2, 3)], key=["n"], name="d_crash",
              do_bench=lambda fn, setup=None: float(fn()))
def launch(x, n, B=None):
    if B == 2 and os.environ.get("CRASH"):
        os._exit(139)  # what a segfaulting kernel does to the process
    return {1: 3.0, 2: 1.0, 3: 2.0}[B]

sel = launch.select(torch.zeros(2), 2)
print(sel.config.kwargs["B"], [r["error"] for r in sel.timings])
"""


@pytest.mark.slow
def test_a_candidate_that_kills_the_process_is_skipped_when_the_search_restarts(tmp_path, isolated_store):
    import os
    import subprocess
    import sys

    script = tmp_path / "child.py"
    script.write_text(CRASHING_CHILD)
    env = dict(os.environ, FLYAUTOTUNE_CACHE_DIR=str(isolated_store), CRASH="1")
    first = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 139  # the process died in candidate B=2
    second = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    winner, errors = second.stdout.split(" ", 1)
    assert winner == "3"  # B=2 would have won, but it crashed a search: skipped and recorded as failed
    assert "skipped: it crashed an earlier search" in errors
    assert "B=2" in second.stderr and "crashed an earlier search" in second.stderr
    assert "flyautotune clear d_crash retries it" in second.stderr  # the skip names the command that retries it
    cleared = subprocess.run([sys.executable, "-m", "flyautotune", "clear", "d_crash"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert cleared.returncode == 0, cleared.stderr
    env.pop("CRASH")
    third = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert third.returncode == 0, third.stderr
    assert third.stdout.split(" ", 1) == ["2", "[None, None, None]\n"]  # retried, and it wins


class _NoDropStore:
    """A replacement store that records timings and failures but cannot delete a row (no ``drop_timing``)."""

    def __init__(self):
        from flyautotune.store import MemoryStore

        self.store = MemoryStore()
        self.store.drop_timing = None

    @fat.hookimpl
    def flyautotune_store(self):
        return self.store


class _MemoryStore(_NoDropStore):
    def __init__(self):
        from flyautotune.store import MemoryStore

        self.store = MemoryStore()


def _failures(store, tuner_name):
    """Every failure text ``store`` keeps for ``tuner_name`` (a crash marker among them)."""
    if hasattr(store, "_failures"):
        return [e for (t, _), rows in store._failures.items() if t == tuner_name for e in rows.values()]
    import sqlite3

    with sqlite3.connect(store.path) as conn:
        return [e for (e,) in conn.execute("SELECT error FROM timings WHERE tuner = ? AND error IS NOT NULL",
                                           (tuner_name,))]


@pytest.mark.parametrize("stop, store", [
    (KeyboardInterrupt, "sqlite"), (SystemExit, "sqlite"), (GeneratorExit, "sqlite"),
    (KeyboardInterrupt, "memory"), (KeyboardInterrupt, "no drop_timing"),
])
def test_an_interrupted_search_is_no_crash_the_next_search_times_the_candidate(pm, monkeypatch, stop, store):
    """Ctrl-C (or ``sys.exit``) while a candidate is timed stops the search, not the process: the candidate's
    crash marker goes before the exception does, so the next search, forced (``FLYAUTOTUNE=1``) or not, times
    it instead of skipping it, and what was measured before it stays."""
    import socket

    from flyautotune.tuning import resume

    # This process's markers read as those of a process that is gone: what the next process would find.
    gone = f"{resume.CRASHED} [pid {2**31 - 1} on {socket.gethostname()}]"
    monkeypatch.setattr(resume, "running_marker", lambda: gone)
    plugin = {"sqlite": None, "memory": _MemoryStore, "no drop_timing": _NoDropStore}[store]
    if plugin is not None:
        pm.register(plugin := plugin())
    stopping = {"on": True}
    timed = []

    def bench(fn, setup=None):
        b = fn()
        timed.append(b)
        if b == 2 and stopping["on"]:
            raise stop()
        return {1: 3.0, 2: 1.0, 3: 2.0}[b]

    launch = tuner(pm, "d_interrupt", do_bench=bench)
    with pytest.raises(stop):
        launch.select(torch.zeros(2), 2, force=True)
    assert timed == [1, 2]
    kept = _failures(plugin.store if plugin is not None else launch.store(), "d_interrupt")
    assert not [e for e in kept if e.startswith("crashed:")]
    assert kept == ([resume.INTERRUPTED] if store == "no drop_timing" else [])  # nothing else recorded as failed
    stopping["on"] = False
    sel = launch.select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=2) and [r["error"] for r in sel.timings] == [None] * 3


def test_an_interrupt_in_the_untimed_reference_run_leaves_no_crash_marker(pm, monkeypatch):
    import socket

    from flyautotune.tuning import resume

    gone = f"{resume.CRASHED} [pid {2**31 - 1} on {socket.gethostname()}]"
    monkeypatch.setattr(resume, "running_marker", lambda: gone)
    stopping = {"on": True}

    @fat.autotune(configs=[fat.Config(B=b) for b in (1, 2)], key=["n"], plugin_manager=pm, name="d_probe_stop",
                  do_bench=lambda fn, setup=None: {1: 2.0, 2: 1.0}[fn()])
    def launch(x, n, B=None):
        if stopping["on"]:
            raise KeyboardInterrupt  # Ctrl-C in the first run, the one whose outputs are the reference
        return B

    with pytest.raises(KeyboardInterrupt):
        launch.select(torch.zeros(2), 2)
    assert _failures(launch.store(), "d_probe_stop") == []
    stopping["on"] = False
    assert launch.select(torch.zeros(2), 2).config == fat.Config(B=2)


INTERRUPTED_CHILD = """
import os, signal, time, torch
import flyautotune as fat

def bench(fn, setup=None):
    b = fn()
    if b == 2 and os.environ.get("STOP"):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while this candidate is timed
        time.sleep(30)
    return {1: 3.0, 2: 1.0, 3: 2.0}[b]

@fat.autotune(configs=[fat.Config(B=b) for b in (1, 2, 3)], key=["n"], name="d_sigint", do_bench=bench,
              default=lambda **a: fat.Config(B=1))
def launch(x, n, B=None):
    return B

launch(torch.zeros(2), 2)  # FLYAUTOTUNE=1: a forced search
print(launch.select(torch.zeros(2), 2).config.kwargs["B"])
"""


@pytest.mark.slow
def test_a_search_stopped_by_sigint_is_searched_again_in_full(tmp_path, isolated_store):
    import os
    import subprocess
    import sys

    script = tmp_path / "child.py"
    script.write_text(INTERRUPTED_CHILD)
    env = dict(os.environ, FLYAUTOTUNE_CACHE_DIR=str(isolated_store), FLYAUTOTUNE="1", STOP="1")
    first = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode != 0 and "KeyboardInterrupt" in first.stderr
    env.pop("STOP")
    second = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "crashed" not in second.stderr and second.stdout == "2\n"  # B=2 timed again, and it wins


def test_candidates_compile_ahead_in_a_pool_with_their_hints_and_target(pm, counting_bench):
    import threading as th

    compiled = []
    timed = []

    def precompile(config, x, n, **_):
        compiled.append((config.kwargs["B"], th.current_thread().name, fat.current_target().backend,
                         fat.current_hints().get("num_warps")))
        if config.kwargs["B"] == 3:
            raise RuntimeError("this one only fails when it runs")

    def bench(fn, setup=None):
        timed.append(len(compiled))
        return float(fn())

    @fat.autotune(configs=[fat.Config(B=b, num_warps=4 * b) for b in (1, 2, 3)], key=["n"], plugin_manager=pm,
                  name="d_precompile", do_bench=bench, precompile=precompile)
    def launch(x, n, B=None):
        return {1: 3.0, 2: 1.0, 3: 2.0}[B]

    sel = launch.select(torch.zeros(2), 2, force=True)
    assert sel.config.kwargs["B"] == 2
    assert sorted(c[0] for c in compiled) == [1, 2, 3]
    assert all(name.startswith("flyautotune-precompile") and backend == "cpu" for _, name, backend, _ in compiled)
    assert {(b, w) for b, _, _, w in compiled} == {(1, 4), (2, 8), (3, 12)}  # each candidate's own hints
    assert all(n >= 1 for n in timed)  # a candidate is timed only after it was compiled
    with pytest.raises(TypeError, match="precompile= must be callable"):
        fat.autotune(configs=[fat.Config(B=1)], precompile=3)(lambda B=None: B)


def test_candidates_whose_builds_precompile_names_alike_are_timed_once(pm, caplog):
    # B=2 builds the default's program and B=4 builds B=3's (a knob the compiler ignores): timing the twins
    # again would only let noise pick one. Their made-up times here would win, so a timed twin shows.
    bench = FixedTimes({1: [1.0], 2: [0.5], 3: [0.8], 4: [0.4]})
    pm.register(bench)
    names = {1: "build-a", 2: "build-a", 3: "build-b", 4: "build-b"}
    launch = tuner(pm, "d_twins", space=(1, 2, 3, 4), precompile=lambda config, **_: names[config.kwargs["B"]])
    with caplog.at_level("INFO", logger="flyautotune"):
        sel = launch.select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=3)
    assert 2 not in bench.calls and 4 not in bench.calls
    rows = {r["config"]["kwargs"]["B"]: r for r in sel.timings}
    assert rows[2]["ms"] is None and rows[2]["error"].startswith("skipped: same build as B=1 ")
    assert rows[4]["ms"] is None and rows[4]["error"].startswith("skipped: same build as B=3 ")
    assert rows[1]["ms"] == 1.0 and rows[3]["ms"] == 0.8
    assert "same build as B=3" in caplog.text
    # the stored timings keep why the twin has no time
    stored = {t["config"]["kwargs"]["B"]: t for t in launch.store().get("d_twins", sel.key).timings}
    assert stored[4]["error"] == rows[4]["error"]


def test_what_precompile_returns_other_than_a_string_names_no_build(pm):
    # a compiled-kernel object, a dict, None: nothing says two of them are the same program, so all are timed
    bench = FixedTimes({1: [1.0], 2: [0.9], 3: [0.8]})
    pm.register(bench)
    shared = object()
    returns = {1: shared, 2: shared, 3: None}
    sel = tuner(pm, "d_no_names", precompile=lambda config, **_: returns[config.kwargs["B"]]).select(
        torch.zeros(2), 2, force=True)
    assert sorted(set(bench.calls)) == [1, 2, 3] and sel.config == fat.Config(B=3)
    assert all(r["error"] is None for r in sel.timings)


def test_a_three_percent_win_is_kept_at_a_realistic_spread(pm):
    # graph timings of a small kernel: replays spread by 3%, 20 of them per measurement, rounds within 0.5%
    class Spread(FixedTimes):
        @fat.hookimpl(tryfirst=True)
        def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
            m = FixedTimes.flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms)
            return Measurement(m.ms, spread=0.03, method="graph", reps=20)

    pm.register(Spread({1: [1.0, 1.004, 0.998], 2: [0.97, 0.968, 0.972], 3: [1.2]}))
    sel = tuner(pm, "d_three").select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=2) and sel.margin == pytest.approx(0.03, abs=1e-3) and sel.noise < 0.03
    rows = {r["config"]["kwargs"]["B"]: r for r in sel.timings}
    assert rows[2]["rounds"] == 4  # settled after the three rounds every search takes


def test_drift_that_slows_every_candidate_alike_does_not_hide_a_win(pm):
    # the device slows down round after round (clocks, heat): each round's challenger is 2.5% faster than
    # the default timed beside it, though the medians' ranges overlap by far more than 2.5%
    drift = [1.0, 1.08, 1.16]
    pm.register(FixedTimes({1: drift, 2: [0.975 * t for t in drift], 3: [1.5]}))
    sel = tuner(pm, "d_drift").select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=2) and sel.margin == pytest.approx(0.025, abs=1e-6)
    assert sel.noise < 0.025


def test_one_disturbed_round_does_not_hide_a_twofold_win(pm):
    # seen on an H200 (1 x 65536 bf16): both finalists twice as fast as the default, one re-timing of
    # each hit by a 10x hiccup; the median ratios say 0.5, a disturbed round must not drown that
    pm.register(FixedTimes({1: [5.4, 5.4, 5.4], 2: [2.7, 2.7, 27.0], 3: [2.8, 28.0, 2.8]}))
    sel = tuner(pm, "d_hiccup").select(torch.zeros(2), 2, force=True)
    assert sel.config in (fat.Config(B=2), fat.Config(B=3)) and sel.margin > 0.45


def test_one_disturbed_round_does_not_fake_a_win_either(pm):
    # the default hit by a hiccup in one round: the challengers are 1% slower in every other round
    pm.register(FixedTimes({1: [1.0, 10.0, 1.0], 2: [1.01], 3: [1.012]}))
    sel = tuner(pm, "d_hiccup_default").select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=1) and sel.margin == 0.0


def test_a_cold_first_pass_of_the_default_does_not_hide_a_steady_win(pm):
    # seen on an H200 (65536 x 128 bf16, graph replay, µs): the default's first-pass timing ran cold, 21%
    # slow; in every one of the six interleaved rounds after it the challenger is 1.6-1.7% faster. The
    # first pass pairs with nothing (it timed each candidate at its own moment), so it is no round.
    pm.register(FixedTimes({
        1: [12.096, 9.953, 9.957, 9.953, 9.968, 9.959, 9.963],
        2: [9.796, 9.793, 9.791, 9.797, 9.791, 9.789, 9.802],
        3: [9.803, 9.821, 9.813, 9.816, 9.814, 9.816, 9.82],
    }))
    sel = tuner(pm, "d_cold_default").select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=2)
    assert sel.margin == pytest.approx(0.0165, abs=0.001) and sel.noise < 0.005


def test_the_first_pass_ranks_with_half_the_replays_and_the_rounds_use_all(pm):
    class RecordingRep(FixedTimes):
        reps = []

        @fat.hookimpl(tryfirst=True)
        def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
            self.reps.append(rep)
            return super().flyautotune_benchmark(fn, setup, target, stream, warmup, rep, rotations, cutoff_ms)

    bench = RecordingRep({1: [1.0], 2: [0.9], 3: [0.95]})
    pm.register(bench)
    sel = tuner(pm, "d_first_rep", rep=30).select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=2)
    assert bench.reps[:3] == [15, 15, 15] and set(bench.reps[3:]) == {30}  # first pass, then the rounds
    assert {r["reps"] for r in sel.timings} == {30}  # the rows (and the noise floor) are the rounds' timings
    bench.reps.clear()
    tuner(pm, "d_first_rep_small", rep=6).select(torch.zeros(2), 2, force=True)
    assert bench.reps[:3] == [5, 5, 5]  # never fewer than five


class SeenTensors:
    """A CPU benchmark plugin that runs the launch over every rotated copy and records the tensors it saw."""

    def __init__(self):
        self.seen = []

    @fat.hookimpl(tryfirst=True)
    def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
        for run in rotations or [fn]:
            run()
        return Measurement(1.0, spread=0.001, method="fixed", reps=rep)


def _rotating_search(pm, monkeypatch, name, **kw):
    """A forced search whose rotations run on the host (as they do on a GPU), three copies; returns the
    ``(x, y)`` pointers each launch saw."""
    from flyautotune import timing
    from flyautotune.tuning import search

    monkeypatch.setattr(search, "rotates_on", lambda device: True)
    monkeypatch.setattr(timing, "rotation_count", lambda device, per_set, **_: 3)
    seen = []
    pm.register(SeenTensors())

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name=name,
                  default=lambda **a: fat.Config(B=1), **kw)
    def launch(x, y, n, B=None):
        seen.append((x.data_ptr(), y.data_ptr()))
        y.copy_(x * 2)
        return y

    x, y = torch.arange(4.0), torch.zeros(4)
    launch.select(x, y, 4, force=True)
    return seen, x, y


def test_outputs_are_written_in_place_while_the_inputs_rotate(pm, monkeypatch):
    # outputs=: every timed launch writes the caller's y (an output allocated per call lands in a warm block),
    # while x rotates over cold copies
    seen, x, y = _rotating_search(pm, monkeypatch, "d_outputs", outputs=["y"])
    assert len({xp for xp, _ in seen}) == 3
    assert {yp for _, yp in seen} == {y.data_ptr()}
    # without it every tensor argument rotates, outputs included
    seen, x, y = _rotating_search(pm, monkeypatch, "d_outputs_all")
    assert len({xp for xp, _ in seen}) == 3 and len({yp for _, yp in seen}) == 3


@pytest.mark.parametrize("make_x, strides", [
    # a slice of a wider tensor keeps its strides: a dense copy would hit another build of a kernel specialized
    # on strides (Triton: stride 1, divisible by 16) than the call runs, and the timing would mix the two
    (lambda: torch.arange(64.0).reshape(4, 16)[:, :8], {(16, 1)}),
    # rows that share memory (each half the next) are copied as they are, with the same values
    (lambda: torch.arange(40.0).as_strided((4, 8), (4, 1)), {(4, 1)}),
], ids=["slice", "overlapping-rows"])
def test_rotated_copies_keep_the_strides_of_the_input_where_they_can(pm, monkeypatch, make_x, strides):
    from flyautotune import timing
    from flyautotune.tuning import search

    monkeypatch.setattr(search, "rotates_on", lambda device: True)
    monkeypatch.setattr(timing, "rotation_count", lambda device, per_set, **_: 3)
    pm.register(SeenTensors())
    seen = []

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="d_strides",
                  default=lambda **a: fat.Config(B=1))
    def launch(x, y, n, B=None):
        seen.append((x.data_ptr(), x.stride()))
        y.copy_(x * 2)

    x, y = make_x(), torch.zeros(4, 8)
    sel = launch.select(x, y, 8, force=True)
    assert sel.source == "search" and all(t["error"] is None for t in sel.timings)
    assert len({p for p, _ in seen}) == 3 and {st for _, st in seen} == strides


def test_input_copies_that_do_not_fit_in_memory_leave_the_search_on_the_inputs_it_has(pm, monkeypatch, caplog):
    """A copy of an input too large for the device's memory for a second one is an out-of-memory error: the
    search times over the copies that fit (here none but the call's own inputs) and says so; it failed."""
    from flyautotune import timing
    from flyautotune.tuning import search

    armed = []  # the first allocation after the copies are counted fails, as the first copy of a huge input would

    def one_fails(real):
        def allocate(*args, **kwargs):
            if armed:
                armed.clear()
                raise torch.OutOfMemoryError("out of memory: tried to allocate 40.00 GiB")
            return real(*args, **kwargs)
        return allocate

    def three(device, per_set, **_):
        armed.append(True)
        return 3

    monkeypatch.setattr(search, "rotates_on", lambda device: True)
    monkeypatch.setattr(timing, "rotation_count", three)
    monkeypatch.setattr(torch, "empty_strided", one_fails(torch.empty_strided))
    monkeypatch.setattr(torch.Tensor, "clone", one_fails(torch.Tensor.clone))
    pm.register(SeenTensors())
    seen = []

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="d_no_room",
                  default=lambda **a: fat.Config(B=1))
    def launch(x, y, n, B=None):
        seen.append(x.data_ptr())
        y.copy_(x * 2)

    x, y = torch.arange(4.0), torch.zeros(4)
    with caplog.at_level("WARNING", logger="flyautotune"):
        sel = launch.select(x, y, 4, force=True)
    assert sel.source == "search" and all(t["error"] is None for t in sel.timings)
    assert set(seen) == {x.data_ptr()}
    assert "1 of 3 input copies for cold-cache timing fit in memory" in caplog.text
    assert "timing over the call's own inputs" in caplog.text


def test_outputs_must_name_write_only_parameters(pm):
    def launch(x, y, n, B=None):
        return y

    with pytest.raises(ValueError, match=r"outputs names 'z', which is not a parameter"):
        fat.autotune(configs=[fat.Config(B=1)], key=["n"], outputs=["z"], plugin_manager=pm)(launch)
    with pytest.raises(ValueError, match=r"outputs names 'y', which restore_value or reset_to_zero also names"):
        fat.autotune(configs=[fat.Config(B=1)], key=["n"], outputs=["y"], restore_value=["y"],
                     plugin_manager=pm)(launch)


def test_a_search_gives_the_cache_flush_buffers_back_when_it_ends(pm):
    """The graph timing's flush buffers (twice the last-level cache per device: 100 MB on an H200, 512 MB on
    an MI300) belong to the search: when it ends they are released for the caller's tensors; the next timing
    that needs one makes it again."""
    from flyautotune.timing import events as timing_events

    seen = []

    class Flushing(FixedTimes):
        @fat.hookimpl(tryfirst=True)
        def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
            with timing_events._flush_lock:
                timing_events._flush_buffers[("fake", 0)] = torch.empty(16, dtype=torch.int8)  # as a GPU timing would
            seen.append(len(timing_events._flush_buffers))
            return FixedTimes.flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms)

    pm.register(Flushing({1: [1.0], 2: [0.9], 3: [1.1]}))
    sel = tuner(pm, "d_flush_release").select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=2) and seen and all(seen)
    assert timing_events._flush_buffers == {}


def test_a_forced_search_replaces_what_later_calls_in_this_process_run(pm):
    # the default ran (and its cache hits took the fast path) before a forced search found a faster config:
    # every later call of this key runs the new winner, not the one the process had remembered
    pm.register(FixedTimes({1: [1.0], 2: [0.5], 3: [1.5]}))
    launch = tuner(pm, "d_replaced")
    x = torch.zeros(2)
    assert [launch(x, 2), launch(x, 2), launch(x, 2)] == [1, 1, 1]
    assert launch.select(x, 2, force=True).config == fat.Config(B=2)
    assert [launch(x, 2), launch(x, 2)] == [2, 2] and launch.last_config == fat.Config(B=2)
    assert launch(torch.zeros(3), 3) == 1  # another key: untouched by the search


# -- a tuner's own do_bench= ----------------------------------------------------------------------------------


class OwnBench:
    """A ``do_bench=`` of the user's, timing nothing: a config's first call returns ``first[B]``, every later
    one ``rounds.get(B, first[B])``; records each call's config."""

    def __init__(self, first, rounds=None):
        self.first, self.rounds = first, rounds or {}
        self.calls = []

    def __call__(self, fn, setup=None):
        b = fn()
        seen = b in self.calls
        self.calls.append(b)
        return self.rounds.get(b, self.first[b]) if seen else self.first[b]

    def per_config(self):
        return {b: self.calls.count(b) for b in self.first}


def test_a_do_bench_of_the_users_re_times_the_finalists_and_keeps_the_default_on_a_tie(pm):
    # @triton.autotune's do_bench ported as it is: the first pass makes B=2 look 5% faster than the default,
    # but timed beside it, round after round, the two are the same
    bench = OwnBench({1: 1.0, 2: 0.95, 3: 1.2, 4: 2.0}, rounds={2: 1.0})
    seen = []
    listener = fat.add_listener(lambda e: seen.append(e) if e["tuner"] == "d_own_tie" else None)
    try:
        sel = tuner(pm, "d_own_tie", space=(1, 2, 3, 4), do_bench=bench).select(torch.zeros(2), 2, force=True)
    finally:
        fat.remove_listener(listener)
    assert sel.config == fat.Config(B=1) and sel.source == "search" and sel.margin == 0.0
    # the default and the best two challengers: timed once, then in three rounds side by side (two were not
    # enough to settle a 5% first-pass gap); B=4 is no finalist
    assert bench.per_config() == {1: 4, 2: 4, 3: 4, 4: 1}
    assert [e["round"] for e in seen if e["event"] == "retime"] == [1, 2, 3]  # what a progress display shows
    rows = {r["config"]["kwargs"]["B"]: r for r in sel.timings}
    assert rows[2]["samples"] == [0.95, 1.0, 1.0, 1.0] and rows[2]["ms"] == 1.0
    assert {r["method"] for r in sel.timings} == {"do_bench"}  # in the stored rows, and in `flyautotune show`


def test_a_do_bench_of_the_users_keeps_the_default_against_a_gain_below_the_least_band(pm):
    # a bare number carries no spread, and rounds that agree exactly have none either: a 0.2% gain in every
    # round is no win (the band is never below 0.5% then), where a band of zero would make any gain one
    bench = OwnBench({1: 1.0, 2: 0.998, 3: 1.2})
    sel = tuner(pm, "d_own_floor", do_bench=bench).select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=1) and sel.margin == 0.0 and sel.noise == pytest.approx(0.005)
    assert bench.per_config() == {1: 4, 2: 4, 3: 4}  # a band that narrow is settled after three rounds


@pytest.mark.parametrize("spread", [0.0, None])
def test_a_benchmark_that_reports_no_spread_gets_the_least_band_too(pm, spread):
    # a benchmark plugin that times one sample says spread=0.0 (or None): it knows nothing of the noise, so a
    # 0.2% gain in every round is no win, as for a do_bench's bare number (a band of zero made it one)
    class NoSpread(FixedTimes):
        @fat.hookimpl(tryfirst=True)
        def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
            m = FixedTimes.flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms)
            return Measurement(m.ms, spread=spread, method="one sample", reps=1)

    pm.register(NoSpread({1: [1.0], 2: [0.998], 3: [1.2]}))
    sel = tuner(pm, f"d_no_spread_{spread}").select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=1) and sel.margin == 0.0 and sel.noise == pytest.approx(0.005)
    pm.register(NoSpread({1: [1.0], 2: [0.99], 3: [1.2]}), name="wider")  # 1% is beyond that band: it wins
    sel = tuner(pm, f"d_no_spread_win_{spread}").select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=2) and sel.margin == pytest.approx(0.01)


def test_a_do_bench_of_the_users_lets_a_clear_win_replace_the_default(pm, caplog):
    bench = OwnBench({1: 1.0, 2: 0.5, 3: 0.9})
    with caplog.at_level("INFO", logger="flyautotune"):
        sel = tuner(pm, "d_own_win", do_bench=bench).select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=2) and sel.margin == pytest.approx(0.5) and sel.noise < 0.5
    assert bench.per_config() == {1: 4, 2: 4, 3: 4}  # the first pass and the three rounds every search takes
    assert "50.00% faster than the default (noise band 0.50%)" in caplog.text


def test_a_do_bench_that_takes_warmup_and_rep_gets_the_tuners(pm, caplog):
    got = []

    def bench(fn, setup=None, warmup=25, rep=100):  # triton.testing.do_bench's names
        got.append((fn(), warmup, rep))
        return {1: 1.0, 2: 0.9, 3: 1.1}[got[-1][0]]

    with caplog.at_level("WARNING", logger="flyautotune"):
        sel = tuner(pm, "d_own_rep", do_bench=bench, warmup=10, rep=40).select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=2) and "ignored" not in caplog.text
    # the first pass ranks every candidate with half of rep; the rounds take all of it
    assert got[:3] == [(1, 10, 20), (2, 10, 20), (3, 10, 20)]
    assert len(got) > 3 and {(w, r) for _, w, r in got[3:]} == {(10, 40)}
    # only what it takes (rep= alone), and only what was given: the tuner's defaults are counts, and a
    # do_bench's own defaults (Triton's milliseconds) stand where the tuner was given none
    reps = []
    tuner(pm, "d_own_rep_only", do_bench=lambda fn, setup=None, rep=100: reps.append((fn(), rep)) or 1.0,
          warmup=10, rep=40).select(torch.zeros(2), 2, force=True)
    assert reps[:3] == [(1, 20), (2, 20), (3, 20)] and {r for _, r in reps[3:]} == {40}
    kwargs = []
    tuner(pm, "d_own_kwargs", do_bench=lambda fn, setup=None, **kw: kwargs.append(kw) or 1.0, rep=40
          ).select(torch.zeros(2), 2, force=True)
    assert kwargs[0] == {"rep": 20} and kwargs[-1] == {"rep": 40}
    untold = []
    tuner(pm, "d_own_untold", do_bench=lambda fn, setup=None, warmup=25, rep=100: untold.append((warmup, rep)) or 1.0
          ).select(torch.zeros(2), 2, force=True)
    assert len(untold) > 3 and set(untold) == {(25, 100)}


def test_warmup_and_rep_a_do_bench_cannot_take_are_said_to_be_ignored_once(pm, caplog):
    bench = OwnBench({1: 1.0, 2: 0.5, 3: 0.9})
    with caplog.at_level("WARNING", logger="flyautotune"):
        launch = tuner(pm, "d_own_ignored", do_bench=bench, warmup=25, rep=100)
        launch.select(torch.zeros(2), 2, force=True)
        launch.select(torch.zeros(3), 3, force=True)
    said = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("d_own_ignored: warmup=25 and rep=100 are ignored: do_bench=")
    assert "takes no warmup= or rep= keyword" in said[0]
    assert "do_bench(fn, setup=None, warmup=..., rep=...)" in said[0]
    assert bench.calls  # still called as it is, do_bench(fn, setup=None)
    caplog.clear()
    with caplog.at_level("WARNING", logger="flyautotune"):
        tuner(pm, "d_own_ignored_rep", do_bench=bench, rep=100)  # only what was given is named
        tuner(pm, "d_own_not_given", do_bench=bench)  # nothing given: nothing to say
        tuner(pm, "d_own_taken", do_bench=lambda fn, setup=None, rep=100: 1.0, rep=100)
    said = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("d_own_ignored_rep: rep=100 is ignored: ")
    assert "takes no rep= keyword" in said[0]


class FailsWhenRetimed(FixedTimes):
    """:class:`FixedTimes`, but the configs in ``flaky`` raise from their second timing on (a kernel that
    ran once and then lost its device)."""

    def __init__(self, times, flaky):
        super().__init__(times)
        self.flaky = set(flaky)

    @fat.hookimpl(tryfirst=True)
    def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
        m = FixedTimes.flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms)
        if self.calls[-1] in self.flaky and self.calls.count(self.calls[-1]) > 1:
            raise RuntimeError(f"B={self.calls[-1]} lost its device")
        return m


def test_when_every_challenger_fails_its_re_timing_a_config_never_re_timed_does_not_win(pm, caplog):
    # B=2 and B=3 are the finalists and fail when re-timed; B=4 looked 5% faster than the default in the
    # first pass only (0.95 once, then 1.0 like the default): never re-timed, it has no evidence and must
    # not replace the default on its first timing alone
    pm.register(FailsWhenRetimed({1: [1.0], 2: [0.8], 3: [0.85], 4: [0.95, 1.0]}, flaky=(2, 3)))
    with caplog.at_level("WARNING", logger="flyautotune"):
        sel = tuner(pm, "d_all_finalists_fail", space=(1, 2, 3, 4)).select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=1) and sel.source == "search" and sel.margin == 0.0
    rows = {r["config"]["kwargs"]["B"]: r for r in sel.timings}
    assert "failed when re-timed" in rows[2]["error"] and "failed when re-timed" in rows[3]["error"]
    # the log says why the fastest of the first pass is not the winner
    assert "d_all_finalists_fail: finalist B=2 failed when re-timed: RuntimeError: B=2 lost its device" in caplog.text


class Jitter:
    """A CPU benchmark plugin whose timings wander: each config's true time times ``1 + gauss(0, sigma)``,
    from a seeded generator, with a within-timing spread that says nothing of it (as a GPU's replays agree
    closely within one timing while clocks move between timings)."""

    def __init__(self, true, sigma, seed):
        import random

        self.true, self.sigma, self.rng = true, sigma, random.Random(seed)

    @fat.hookimpl(tryfirst=True)
    def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
        if setup is not None:
            setup()
        return Measurement(self.true[fn()] * (1 + self.rng.gauss(0, self.sigma)), spread=0.001, method="jitter",
                           reps=rep)


@pytest.mark.parametrize("sigma", [0.003, 0.01])
def test_a_tie_seldom_replaces_the_default_when_timings_wander(pm, sigma):
    # three configs of the same speed, each timing off by sigma at random: the decision must see that as noise;
    # it read two rounds (or three, at two standard errors) as evidence, and a tie replaced the default in 24-35 %
    # of these searches (bench/decision.py)
    pm.register(Jitter({1: 1.0, 2: 1.0, 3: 1.0, 4: 1.2}, sigma, seed=11))
    launch = tuner(pm, f"d_tie_{sigma}", space=(1, 2, 3, 4))
    replaced = sum(launch.select(torch.zeros(2), 2, force=True).config != fat.Config(B=1) for _ in range(100))
    assert replaced <= 8


def test_a_three_percent_win_still_wins_when_timings_wander(pm):
    pm.register(Jitter({1: 1.0, 2: 0.97, 3: 0.985, 4: 1.2}, 0.01, seed=12))
    launch = tuner(pm, "d_wander_win", space=(1, 2, 3, 4))
    won = sum(launch.select(torch.zeros(2), 2, force=True).config != fat.Config(B=1) for _ in range(100))
    assert won >= 85


class Sequence:
    """A CPU benchmark plugin: ``times[B]`` is the ms of each call in turn (the last repeats); ``raise_on`` maps
    ``(B, call number)`` to what that call raises."""

    def __init__(self, times, raise_on=None, sleep_s=0.0):
        self.times, self.raise_on, self.sleep_s, self.n = times, raise_on or {}, sleep_s, {}

    @fat.hookimpl(tryfirst=True)
    def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
        import time

        time.sleep(self.sleep_s)
        if setup is not None:
            setup()
        b = fn()
        k = self.n[b] = self.n.get(b, 0) + 1
        if (b, k) in self.raise_on:
            raise self.raise_on[(b, k)]
        seq = self.times[b]
        return Measurement(seq[min(k, len(seq)) - 1], spread=0.001, method="fixed", reps=rep)


def test_a_budget_spent_before_three_rounds_keeps_the_default(pm):
    # the default's first timing is 2 % slow (cold clocks); side by side B=2 is exactly as fast: with the budget
    # gone before the rounds, the first-pass times (taken at different moments) are no evidence for a win
    pm.register(Sequence({1: [1.02, 1.0], 2: [1.0], 3: [1.5]}, sleep_s=0.2))
    sel = tuner(pm, "d_budget_rounds", max_search_s=0.3).select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=1) and sel.margin == 0.0


def test_a_default_that_fails_once_when_re_timed_is_timed_again_and_kept(pm, caplog):
    # the default is the fastest (1.0); its first re-timing raises once: a hiccup of what runs untuned must not
    # hand the decision to a challenger 5 % slower
    pm.register(Sequence({1: [1.0], 2: [1.05], 3: [1.10]}, raise_on={(1, 2): RuntimeError("transient")}))
    with caplog.at_level("WARNING", logger="flyautotune"):
        sel = tuner(pm, "d_default_hiccup").select(torch.zeros(2), 2, force=True)
    assert sel.config == fat.Config(B=1) and sel.margin == 0.0
    assert "d_default_hiccup: the default B=1 failed when re-timed (RuntimeError: transient); timing it once more" \
        in caplog.text
    rows = {r["config"]["kwargs"]["B"]: r for r in sel.timings}
    assert rows[1]["error"] is None and rows[1]["rounds"] == 4


def test_a_default_that_fails_every_time_it_is_re_timed_leaves_the_challengers_to_decide(pm):
    pm.register(Sequence({1: [1.0], 2: [1.05], 3: [1.10]},
                         raise_on={(1, 2): RuntimeError("lost"), (1, 3): RuntimeError("lost again")}))
    sel = tuner(pm, "d_default_broken").select(torch.zeros(2), 2, force=True)
    rows = {r["config"]["kwargs"]["B"]: r for r in sel.timings}
    assert "failed when re-timed: RuntimeError: lost again" in rows[1]["error"]
    assert sel.config == fat.Config(B=2)  # the fastest that stood; the broken default is not run
