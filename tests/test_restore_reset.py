"""restore_value / reset_to_zero: the caller always sees one clean run."""

import torch

import flyautotune as fat

SPACE = [fat.Config(SCALE=s) for s in (1, 2, 3)]


def test_restore_value_gives_single_run_result_after_tuning_and_on_hit(pm, counting_bench):
    bench = counting_bench()

    @fat.autotune(configs=SPACE, key=["n"], restore_value=["acc"], do_bench=bench, plugin_manager=pm,
                  name="t_restore")
    def accumulate(acc, x, n, SCALE=None):
        acc.add_(x)  # every config computes the same function

    acc = torch.ones(4)
    accumulate(acc, torch.full((4,), 2.0), 4)
    assert len(bench.calls) == 3
    assert torch.equal(acc, torch.full((4,), 3.0))
    accumulate(acc, torch.full((4,), 2.0), 4)  # cache hit: one more accumulation
    assert torch.equal(acc, torch.full((4,), 5.0))


def test_reset_to_zero_before_every_rep_and_the_real_call(pm, counting_bench):
    observed = []

    @fat.autotune(configs=SPACE, key=["n"], reset_to_zero=["out"], do_bench=counting_bench(),
                  plugin_manager=pm, name="t_reset")
    def accumulate(out, x, n, SCALE=None):
        observed.append(out.clone())
        out.add_(x)

    out = torch.full((4,), 7.0)
    accumulate(out, torch.ones(4), 4)
    assert all(torch.equal(o, torch.zeros(4)) for o in observed)
    assert torch.equal(out, torch.ones(4))
    out.fill_(9.0)
    accumulate(out, torch.ones(4), 4)  # cache hit still zeroes first
    assert torch.equal(out, torch.ones(4))


def test_reset_to_zero_on_default_path(pm, counting_bench):
    @fat.autotune(configs=SPACE, key=["n"], reset_to_zero=["out"], default=lambda **kw: fat.Config(SCALE=1),
                  plugin_manager=pm, name="t_reset_default")
    def accumulate(out, x, n, SCALE=None):
        out.add_(x)

    out = torch.full((4,), 7.0)
    accumulate(out, torch.ones(4), 4)
    assert torch.equal(out, torch.ones(4))
