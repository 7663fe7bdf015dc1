"""What a user porting a ``@triton.autotune`` kernel writes first gets an answer that says how to write it here:
the decorated kernel, ``kernel[grid]``, ``triton.Config``, Triton's ``do_bench``, ``prune_configs_by`` dict and
``early_config_prune`` signature, the autotuner options with no counterpart, ``num_ctas``, a winner with a
``pre_hook``, and a split-K launch that accumulates without ``reset_to_zero``."""

import pytest
import torch
import triton
import triton.language as tl
import triton.testing
from triton.runtime.interpreter import InterpretedFunction

import flyautotune as fat


def _add(X, Y, OUT, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(OUT + offs, tl.load(X + offs, mask=offs < n) + tl.load(Y + offs, mask=offs < n), mask=offs < n)


@pytest.mark.parametrize("kernel", [triton.runtime.jit.JITFunction(_add), InterpretedFunction(_add)],
                         ids=["JITFunction", "InterpretedFunction"])
def test_decorating_a_triton_kernel_says_to_wrap_its_launch(kernel):
    with pytest.raises(TypeError, match=r"'_add' is a Triton kernel \((JITFunction|InterpretedFunction)\), not a "
                                        r"launch: flyautotune wraps the Python function that launches the kernel"):
        fat.autotune(configs=[fat.Config(BLOCK_SIZE=64)], key=["n"])(kernel)


def test_a_tuned_launch_indexed_by_a_grid_says_how_it_is_called(pm):
    @fat.autotune(configs=[fat.Config(BLOCK_SIZE=64)], key=["n"], name="t_grid_index", plugin_manager=pm)
    def add(x, y, out, n, BLOCK_SIZE=None):
        InterpretedFunction(_add)[lambda META: (triton.cdiv(n, META["BLOCK_SIZE"]),)](x, y, out, n,
                                                                                      BLOCK_SIZE=BLOCK_SIZE)

    with pytest.raises(TypeError, match=r"t_grid_index: a tuned launch is called as it is, add\(\.\.\.\), not "
                                        r"add\[grid\]\(\.\.\.\)"):
        add[(1,)]
    x = torch.randn(100)
    out = torch.empty_like(x)
    add(x, x, out, 100)  # called as it is, the grid a lambda of META inside it
    assert torch.equal(out, x + x)


def test_a_triton_config_is_spelled_out_as_the_config_that_means_the_same(pm):
    with pytest.raises(TypeError, match=r"got a triton\.Config \(.*\); write it as flyautotune\.Config\(BLOCK=64, "
                                        r"num_warps=8, num_stages=3, compile_hints=\{'num_ctas': 2\}\)"):
        fat.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=8, num_ctas=2)], key=["n"])(
            lambda x, n, BLOCK=None: None)
    computed = fat.autotune(configs=lambda **_: [triton.Config({"BLOCK": 64}, num_warps=4)], key=["n"],
                            name="t_computed_triton", plugin_manager=pm)(lambda x, n, BLOCK=None: None)
    with pytest.raises(TypeError, match=r"t_computed_triton: configs must be flyautotune\.Config objects, got a "
                                        r"triton\.Config .*write it as flyautotune\.Config\(BLOCK=64, num_warps=4"):
        computed(torch.ones(2), 2)


@pytest.mark.parametrize("do_bench", [triton.testing.do_bench, lambda fn, quantiles=None: 1.0],
                         ids=["triton.testing.do_bench", "fn-quantiles"])
def test_a_do_bench_without_setup_is_refused_where_it_is_given(do_bench):
    with pytest.raises(TypeError, match=r"do_bench=.* takes no setup= argument; the tuner calls "
                                        r"do_bench\(fn, setup=None\) -> milliseconds.*triton\.testing\.do_bench\("):
        fat.autotune(configs=[fat.Config(B=1)], key=["n"], do_bench=do_bench)(lambda n, B=None: None)
    for taking_setup in (lambda fn, setup=None: 1.0, lambda fn, **kwargs: 1.0):
        fat.autotune(configs=[fat.Config(B=1)], key=["n"], do_bench=taking_setup)(lambda n, B=None: None)


def test_a_do_bench_returning_quantiles_is_told_to_return_one_number(pm):
    tuned = fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], name="t_quantiles", plugin_manager=pm,
                         do_bench=lambda fn, setup=None: [1.0, 0.9, 1.1])(lambda n, B=None: B)
    with pytest.raises(fat.AutotuneError, match=r"do_bench for B=1 returned \[1\.0, 0\.9, 1\.1\]; expected the time "
                                                r"of one launch .*; several numbers, as triton\.testing\.do_bench"):
        tuned(3)


@pytest.mark.parametrize("option, counterpart", [
    ("pre_hook", r"restore_value= and reset_to_zero= do what Triton's own one does.*Config\(\.\.\., pre_hook=fn\)"),
    ("post_hook", r"do_bench= of your own"),
    ("use_cuda_graph", r"graph replay wherever capture works"),
    ("cache_results", r"always kept, across processes"),
])
def test_autotune_options_of_triton_name_what_does_their_work_here(option, counterpart):
    with pytest.raises(TypeError, match=rf"autotune: got an unexpected keyword argument '{option}': .*{counterpart}"):
        fat.autotune(configs=[fat.Config(B=1)], key=["n"], **{option: True})


def test_prune_configs_by_in_triton_form_says_how_to_write_it(pm):
    def early_config_prune(configs, named_args, **kwargs):
        return [c for c in configs if c.kwargs["B"] <= named_args["n"]]

    with pytest.raises(TypeError, match=r"prune_configs_by= takes one callable, prune\(configs, \*\*named_args\) -> "
                                        r"configs, got the mapping .*early_config_prune, perf_model and top_k"):
        fat.autotune(configs=[fat.Config(B=1)], key=["n"],
                     prune_configs_by={"early_config_prune": early_config_prune, "perf_model": None, "top_k": None})(
            lambda n, B=None: B)
    with pytest.raises(TypeError, match=r"prune_configs_by=.* requires the argument 'named_args', which is not a "
                                        r"parameter of <lambda>\(n, B=None\).*lambda configs, \*\*named: "
                                        r"early_config_prune\(configs, named\)"):
        fat.autotune(configs=[fat.Config(B=1)], key=["n"], prune_configs_by=early_config_prune)(lambda n, B=None: B)
    # what the message says to write works
    tuned = fat.autotune(configs=[fat.Config(B=1), fat.Config(B=4)], key=["n"], name="t_prune_translated",
                         plugin_manager=pm,
                         prune_configs_by=lambda configs, **named: early_config_prune(configs, named))(
        lambda n, B=None: B)
    assert tuned(2) == 1 and tuned.last_source == "search"


def test_a_compiler_option_given_as_a_kwarg_points_at_compile_hints(pm):
    tuned = fat.autotune(configs=[fat.Config(B=1, num_ctas=2)], key=["n"], name="t_num_ctas", plugin_manager=pm)(
        lambda n, B=None: B)
    with pytest.raises(fat.IncompatibleConfigError, match=r"sets 'num_ctas', which nothing consumes: <lambda> takes "
                                                          r"n, B\. .*a compiler option goes in "
                                                          r"compile_hints=\{'num_ctas': 2\}"):
        tuned(3)


def test_a_winner_with_a_pre_hook_is_not_stored_and_the_tuner_says_so(pm, counting_bench, caplog):
    zeroed = []

    def launch(x, out, n, S=None):
        out.add_(x)  # accumulates: the pre_hook zeroes out first
        return S

    def make():
        return fat.autotune(configs=[fat.Config(S=s, pre_hook=lambda nargs: zeroed.append(nargs["out"].zero_()))
                                     for s in (1, 2)], key=["n"], name="t_pre_hook_winner", plugin_manager=pm,
                            do_bench=counting_bench(cost=lambda i: float(i)))(launch)

    x, out = torch.ones(4), torch.zeros(4)
    with caplog.at_level("WARNING", logger="flyautotune"):
        tuned = make()
        tuned(x, out, 4)
        tuned(x, out, 4)
    assert torch.equal(out, x) and zeroed  # the hook ran on the call too
    assert caplog.text.count("has a pre_hook, and a function is never stored") == 1
    assert "every new process searches this key again" in caplog.text and "reset_to_zero=[...]" in caplog.text
    assert tuned.store().entries("t_pre_hook_winner") == []
    fresh = make()  # as a new process's tuner: nothing stored, so it searches again
    fresh(x, out, 4)
    assert fresh.last_source == "search"


def test_an_accumulating_candidate_rejected_after_the_nan_fill_is_told_about_reset_to_zero(pm, counting_bench):
    def launch(x, out, n, SPLIT=None):
        if SPLIT == 1:
            out.copy_(x)
        else:  # a split-K-like launch: adds its partial results into out, which must start at zero
            out.add_(x)

    configs = [fat.Config(SPLIT=1), fat.Config(SPLIT=2)]
    x = torch.ones(8)
    bare = fat.autotune(configs=configs, key=["n"], name="t_split_bare", plugin_manager=pm,
                        do_bench=counting_bench())(launch)
    rows = {r["config"]["kwargs"]["SPLIT"]: r for r in bare.select(x, torch.zeros(8), 8, force=True).timings}
    assert rows[2]["error"].startswith("rejected: argument out differs from the reference")
    assert ("it was filled with NaN before this candidate ran, and NaN came out where the reference has numbers: if "
            "the launch adds into out, with atomics or +=, declare reset_to_zero=['out']") in rows[2]["error"]
    zeroed = fat.autotune(configs=configs, key=["n"], name="t_split_zeroed", plugin_manager=pm, reset_to_zero=["out"],
                          do_bench=counting_bench())(launch)
    rows = zeroed.select(x, torch.zeros(8), 8, force=True).timings
    assert [r["error"] for r in rows] == [None, None]
