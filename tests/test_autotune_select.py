"""Config selection: memory -> store -> default -> search, forced search, keys."""

import importlib
import sys
import textwrap

import pytest
import torch

import flyautotune as fat

SPACE = [fat.Config(BLOCK=b) for b in (1, 2, 4)]


def make_tuner(pm, bench, configs=SPACE, **kw):
    ran = []

    @fat.autotune(configs=configs, key=["n"], do_bench=bench, plugin_manager=pm, **kw)
    def launch(x, n, BLOCK=None):
        ran.append(BLOCK)
        return BLOCK

    return launch, ran


def test_default_path_runs_zero_benchmarks(pm, counting_bench):
    bench = counting_bench()
    launch, ran = make_tuner(pm, bench, default=lambda **kw: fat.Config(BLOCK=2), name="t_default")
    x = torch.zeros(4)
    assert launch(x, 4) == 2
    assert launch(x, 4) == 2
    assert bench.calls == []
    assert launch.last_source == "memory"


def test_miss_without_default_searches_once_and_picks_the_fastest(pm, counting_bench):
    bench = counting_bench(cost=lambda i: {1: 3.0, 2: 1.0, 3: 2.0}[i])
    launch, ran = make_tuner(pm, bench, name="t_search")
    x = torch.zeros(4)
    assert launch(x, 4) == 2  # second candidate (BLOCK=2) was fastest
    assert len(bench.calls) == 3
    assert launch.last_source == "search"
    assert launch(x, 4) == 2
    assert len(bench.calls) == 3


def test_winner_is_reused_by_a_new_tuner_from_the_store(pm, counting_bench):
    bench = counting_bench(cost=lambda i: {1: 3.0, 2: 1.0, 3: 2.0}[i])
    first, _ = make_tuner(pm, bench, name="t_persist")
    first(torch.zeros(4), 4)
    bench2 = counting_bench()
    second, _ = make_tuner(pm, bench2, name="t_persist")
    assert second(torch.zeros(4), 4) == 2
    assert second.last_source == "store"
    assert bench2.calls == []


def test_forced_search_bypasses_store_and_default(pm, counting_bench, monkeypatch):
    bench = counting_bench(cost=lambda i: {1: 3.0, 2: 1.0, 3: 2.0}[i])
    first, _ = make_tuner(pm, bench, name="t_forced")
    first(torch.zeros(4), 4)  # stores BLOCK=2
    monkeypatch.setenv("FLYAUTOTUNE", "yes")
    # The default (BLOCK=8, outside the space) is timed first: it is what a search must beat.
    bench2 = counting_bench(times={8: 3.0, 1: 0.5, 2: 1.0, 4: 2.0})
    forced, _ = make_tuner(pm, bench2, name="t_forced", default=lambda **kw: fat.Config(BLOCK=8))
    assert forced(torch.zeros(4), 4) == 1
    assert forced.last_source == "search"
    # each timed once, then the default and the best two again side by side in three rounds
    assert bench2.calls == [8, 1, 2, 4] + [8, 1, 2] + [1, 2, 8] + [2, 8, 1]
    forced(torch.zeros(4), 4)  # this process's fresh winner is reused
    assert len(bench2.calls) == 13


def test_callable_configs_only_evaluated_for_a_search(pm, counting_bench):
    calls = []

    def space(**named):
        calls.append(named["n"])
        return SPACE

    bench = counting_bench()
    launch, _ = make_tuner(pm, bench, configs=space, name="t_callable", default=lambda **kw: fat.Config(BLOCK=1))
    launch(torch.zeros(4), 4)
    assert calls == []  # default path: no search, so no evaluation
    tuned, _ = make_tuner(pm, bench, configs=space, name="t_callable2")
    tuned(torch.zeros(4), 4)
    tuned(torch.zeros(4), 4)
    assert calls == [4]


def test_single_candidate_is_not_benchmarked(pm, counting_bench):
    bench = counting_bench()
    launch, _ = make_tuner(pm, bench, configs=[fat.Config(BLOCK=8)], name="t_single")
    assert launch(torch.zeros(2), 2) == 8
    assert bench.calls == []


def test_prune_configs_by_narrows_the_search(pm, counting_bench):
    bench = counting_bench()
    seen = {}

    def prune(configs, **named):
        seen["n"] = named["n"]
        return [c for c in configs if c.kwargs["BLOCK"] <= named["n"]]

    launch, _ = make_tuner(pm, bench, prune_configs_by=prune, name="t_prune")
    launch(torch.zeros(2), 2)
    assert seen == {"n": 2}
    assert sorted(bench.calls) == [1, 2]


def test_keyword_order_and_spelling_give_one_key(pm, counting_bench):
    bench = counting_bench()
    launch, _ = make_tuner(pm, bench, name="t_spelling")
    x = torch.zeros(4)
    launch(x, 4)
    launch(x, n=4)
    launch(n=4, x=x)
    launch(x=x, n=4)
    assert launch.search_count == 1


def test_strided_input_gets_its_own_key(pm, counting_bench):
    bench = counting_bench()
    launch, _ = make_tuner(pm, bench, name="t_stride")
    a = torch.zeros(4, 4)
    launch(a, 4)
    launch(a.t(), 4)  # same shape, transposed strides
    launch(torch.ones(4, 4), 4)  # same pattern as a: a hit
    assert launch.search_count == 2


def test_dtype_gets_its_own_key(pm, counting_bench):
    bench = counting_bench()
    launch, _ = make_tuner(pm, bench, name="t_dtype")
    launch(torch.zeros(4, dtype=torch.float32), 4)
    launch(torch.zeros(4, dtype=torch.float16), 4)
    launch(torch.zeros(4, dtype=torch.float32), 4)
    assert launch.search_count == 2


def test_key_values_and_tensor_shapes_key_winners(pm, counting_bench):
    bench = counting_bench()

    @fat.autotune(configs=SPACE, key=["x"], do_bench=bench, plugin_manager=pm, name="t_shape")
    def launch(x, BLOCK=None):
        return BLOCK

    launch(torch.zeros(4))
    launch(torch.zeros(8))
    launch(torch.ones(8))
    assert launch.search_count == 2


def test_compile_hint_context_is_part_of_the_key(pm, counting_bench):
    bench = counting_bench()
    launch, _ = make_tuner(pm, bench, name="t_hintkey")
    launch(torch.zeros(4), 4)
    with fat.compile_hints(num_warps=8):
        launch(torch.zeros(4), 4)
    assert launch.search_count == 2


def test_editing_the_kernel_source_changes_the_key(pm, counting_bench, tmp_path, monkeypatch):
    mod = tmp_path / "user_kernel.py"
    body = textwrap.dedent(
        """
        import flyautotune as fat
        def build(pm, bench):
            @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], do_bench=bench,
                          plugin_manager=pm, name="user_kernel")
            def launch(n, B=None):
                return B  # VERSION
            return launch
        """
    )
    mod.write_text(body.replace("VERSION", "v1"))
    monkeypatch.syspath_prepend(str(tmp_path))
    bench = counting_bench()
    m = importlib.import_module("user_kernel")
    first = m.build(pm, bench)
    first(3)
    assert len(bench.calls) == 2
    again = m.build(pm, bench)
    again(3)
    assert again.last_source == "store" and len(bench.calls) == 2
    mod.write_text(body.replace("VERSION", "v2"))
    m = importlib.reload(m)
    edited = m.build(pm, bench)
    edited(3)
    assert edited.last_source == "search" and len(bench.calls) == 4
    sys.modules.pop("user_kernel", None)


def test_unconsumed_kwarg_fails_before_any_benchmark(pm, counting_bench):
    bench = counting_bench()
    launch, _ = make_tuner(pm, bench, configs=[fat.Config(BLOCK=1), fat.Config(BLCOK=2)], name="t_typo")
    with pytest.raises(fat.IncompatibleConfigError, match="'BLCOK', which nothing consumes"):
        launch(torch.zeros(2), 2)
    assert bench.calls == []


class RejectsMaxnreg:
    @fat.hookimpl
    def flyautotune_validate_hints(self, hints, target):
        if "maxnreg" in hints:
            raise ValueError(f"maxnreg={hints['maxnreg']!r} is not supported here")


def test_backend_rejected_hint_fails_before_any_benchmark(pm, counting_bench):
    pm.register(RejectsMaxnreg())
    bench = counting_bench()
    launch, _ = make_tuner(pm, bench, configs=[fat.Config(BLOCK=1), fat.Config(BLOCK=2, maxnreg=64)],
                           name="t_reject")
    with pytest.raises(fat.IncompatibleConfigError, match="maxnreg=64 is not supported here"):
        launch(torch.zeros(2), 2)
    assert bench.calls == []


def test_failing_candidate_is_skipped_and_reported(pm, counting_bench, caplog):
    bench = counting_bench()

    @fat.autotune(configs=SPACE, key=["n"], do_bench=bench, plugin_manager=pm, name="t_fail1")
    def launch(x, n, BLOCK=None):
        if BLOCK == 1:
            raise RuntimeError("out of resources")
        return BLOCK

    with caplog.at_level("WARNING", logger="flyautotune"):
        assert launch(torch.zeros(2), 2) == 2
    assert "BLOCK=1 failed: RuntimeError: out of resources" in caplog.text


def test_all_failing_names_every_failure_and_chains_the_last(pm, counting_bench):
    bench = counting_bench()

    @fat.autotune(configs=SPACE, key=["n"], do_bench=bench, plugin_manager=pm, name="t_fail_all")
    def launch(x, n, BLOCK=None):
        raise RuntimeError(f"boom {BLOCK}")

    with pytest.raises(fat.AutotuneError) as info:
        launch(torch.zeros(2), 2)
    msg = str(info.value)
    assert "all 3 configs failed" in msg
    for b in (1, 2, 4):
        assert f"BLOCK={b}: RuntimeError: boom {b}" in msg
    assert isinstance(info.value.__cause__, RuntimeError) and str(info.value.__cause__) == "boom 4"


def test_caller_cannot_pass_a_tuned_argument(pm, counting_bench):
    launch, _ = make_tuner(pm, counting_bench(), name="t_conflict")
    with pytest.raises(fat.IncompatibleConfigError, match="which the caller also passed"):
        launch(torch.zeros(2), 2, BLOCK=4)


def test_resolve_config_tunes_without_launching(pm, counting_bench):
    bench = counting_bench(cost=lambda i: {1: 3.0, 2: 1.0, 3: 2.0}[i])
    launch, ran = make_tuner(pm, bench, name="t_resolve")
    assert launch.resolve_config(torch.zeros(2), 2) == fat.Config(BLOCK=2)
    assert ran == [1, 1, 2, 4]  # a probe run of the first config, then the benchmark; no final launch
    assert launch.resolve_config(torch.zeros(2), 2) == fat.Config(BLOCK=2)
    assert ran == [1, 1, 2, 4]


def test_hints_reach_the_launch_and_caller_contexts_survive(pm, counting_bench):
    seen = []

    @fat.autotune(configs=[fat.Config(B=1, num_warps=4), fat.Config(B=2, num_warps=8)], key=[],
                  do_bench=counting_bench(), plugin_manager=pm, name="t_hints", hints={"num_stages": 2})
    def launch(B=None):
        seen.append((B, fat.current_hints(), fat.current_target()))

    with fat.compile_hints(num_stages=3, waves_per_eu=1):
        launch()
        assert fat.current_hints() == {"num_stages": 3, "waves_per_eu": 1}
    b, h, target = seen[-1]
    assert h == {"num_stages": 3, "waves_per_eu": 1, "num_warps": 4 if b == 1 else 8}
    assert target.backend == "cpu"
    assert fat.current_target() is None


def test_bad_decorator_arguments_are_named(pm):
    with pytest.raises(ValueError, match="key argument 'm' is not a parameter"):
        fat.autotune(configs=SPACE, key=["m"])(lambda x, BLOCK=None: None)
    with pytest.raises(ValueError, match="reset_to_zero names 'y'"):
        fat.autotune(configs=SPACE, reset_to_zero=["y"])(lambda x, BLOCK=None: None)
    with pytest.raises(TypeError, match="configs must hold flyautotune.Config"):
        fat.autotune(configs=[{"BLOCK": 1}])(lambda x, BLOCK=None: None)
    with pytest.raises(ValueError, match="rep must be an int >= 1"):
        fat.autotune(configs=SPACE, rep=0)(lambda x, BLOCK=None: None)


def test_target_context_sets_the_target_outside_a_launch(pm):
    amd = fat.Target("rocm", "gfx942", 64)
    assert fat.current_target() is None
    with fat.target_context(amd):
        assert fat.current_target() == amd
        with fat.target_context(fat.Target("cuda", "sm_90", 32)):
            assert fat.current_target().arch == "sm_90"
        assert fat.current_target() == amd
    assert fat.current_target() is None
    with pytest.raises(TypeError, match="expected a flyautotune.Target"):
        with fat.target_context("gfx942"):
            pass


def test_events_name_where_each_config_came_from(pm, counting_bench):
    seen = []
    fat.add_listener(seen.append)
    try:
        single, _ = make_tuner(pm, counting_bench(), configs=[fat.Config(BLOCK=8)], name="t_ev_single")
        single(torch.zeros(2), 2)
        searched, _ = make_tuner(pm, counting_bench(), name="t_ev_search")
        searched(torch.zeros(2), 2)
        searched(torch.zeros(2), 2)  # memory hit: no event
    finally:
        fat.remove_listener(seen.append)
    kinds = [(e["event"], e.get("source")) for e in seen]
    assert kinds == [("select", "search"), ("search_start", None)] + [("candidate", None)] * 3 + [
        ("search_end", None), ("select", "search")]


def test_list_and_dict_key_values_key_winners(pm, counting_bench):
    bench = counting_bench()

    @fat.autotune(configs=SPACE, key=["dims", "opts"], do_bench=bench, plugin_manager=pm, name="t_listkey")
    def launch(dims, opts, BLOCK=None):
        return BLOCK

    launch([4, 8], {"mode": "a"})
    launch([4, 8], {"mode": "a"})
    launch(dims=[4, 8], opts={"mode": "a"})
    assert launch.search_count == 1
    launch([4, 16], {"mode": "a"})
    launch([4, 8], {"mode": "b"})
    assert launch.search_count == 3


@pytest.mark.parametrize("typo, meant", [("num_warp", "num_warps"), ("maxreg", "maxnreg"), ("waves_per_cu", "waves_per_eu")])
def test_a_misspelled_hint_is_refused_on_the_cpu_too(pm, counting_bench, typo, meant):
    # the CPU ignores hints, so a typo would pass every laptop run and fail first on a GPU
    bench = counting_bench()
    launch, _ = make_tuner(pm, bench, configs=[fat.Config(BLOCK=1), fat.Config(BLOCK=2, compile_hints={typo: 4})],
                           name=f"t_typo_{typo}")
    with pytest.raises(fat.IncompatibleConfigError, match=f"cpu: unknown compile hint {typo}=4 "
                                                          rf"\(did you mean '{meant}'\?\)"):
        launch(torch.zeros(2), 2)
    assert bench.calls == []


def test_backend_specific_hints_pass_the_cpu(pm, counting_bench):
    # names only another backend knows (AMD's kpack, NVIDIA's num_ctas) run on the CPU as before
    bench = counting_bench()
    launch, _ = make_tuner(pm, bench, configs=[fat.Config(BLOCK=1, compile_hints={"kpack": 2}),
                                                 fat.Config(BLOCK=2, compile_hints={"num_ctas": 1})],
                           name="t_backend_names")
    assert launch(torch.zeros(2), 2) in (1, 2)
