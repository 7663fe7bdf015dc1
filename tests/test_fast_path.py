"""The generated cache-hit path gives exactly the general path's answers."""

import pytest
import torch

import flyautotune as fat
from flyautotune.tuning import fastpath


@pytest.fixture(autouse=True, params=["C hit path", "C hit path, compiled check", "torch checks", "key reads"])
def tensor_checks(request, monkeypatch, hit_path):
    """Every test runs four times: hits served by the C hit path (``_hit.HitPath``), the same with the
    tensor check compiled against this torch (``flyautotune native build``), by the generated Python path
    with torch's C tensor checks (where torch has them), and by the attribute-read key that serves a torch
    without them (the C path needs torch's checks, so it stays off there too)."""
    if request.param == "C hit path, compiled check":
        request.getfixturevalue("use_compiled_check")
        hit_path("C hit path")
        return request.param
    if request.param == "key reads":
        monkeypatch.setattr(fastpath, "_guards", False)
    else:
        assert fastpath.tensor_guards() is not None, "this torch should offer its C tensor checks"
    hit_path(request.param)
    return request.param


def primed(pm, counting_bench, **kw):
    bench = counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}.get(i, 3.0))
    seen = []

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2, num_warps=8)], key=["n"], do_bench=bench,
                  plugin_manager=pm, **kw)
    def launch(x, n, B=None):
        seen.append((B, fat.current_hints(), fat.current_target()))
        return B

    launch(torch.zeros(4), 4)  # search
    launch(torch.zeros(4), 4)  # general path hit: fills the generated one
    return launch, seen, bench


def test_hits_skip_binding_and_still_see_hints_and_target(pm, counting_bench, monkeypatch):
    launch, seen, _ = primed(pm, counting_bench, name="t_fast_hit")

    def no_bind(*a, **k):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(launch.sig, "bind", no_bind)
    assert launch(torch.ones(4), 4) == 2
    assert launch.last_source == "memory"
    assert seen[-1][1] == {"num_warps": 8} and seen[-1][2].backend == "cpu"
    assert fat.current_hints() == {} and fat.current_target() is None


def test_every_key_part_still_misses(pm, counting_bench):
    launch, _, bench = primed(pm, counting_bench, name="t_fast_miss")
    searches = launch.search_count
    launch(torch.zeros(8), 8)                        # key value
    launch(torch.zeros(4, dtype=torch.float64), 4)   # dtype
    launch(torch.zeros(4, 4).t(), 4)                 # strides (and shape)
    assert launch.search_count == searches + 3


def test_zero_arguments_and_forced_search(pm, counting_bench, monkeypatch):
    bench = counting_bench()

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], do_bench=bench, plugin_manager=pm, name="t_fast0",
                  default=lambda **kw: fat.Config(B=1))
    def launch(B=None):
        return B

    launch()
    launch()
    assert launch() == 1 and launch.search_count == 0 and launch.last_source == "memory"
    monkeypatch.setenv("FLYAUTOTUNE", "1")
    launch()  # the default's plan is primed on the fast path, yet the forced search runs
    assert launch.search_count == 1 and launch.last_source == "search"


def test_hint_blocks_key_the_fast_path_and_survive_it(pm, counting_bench, monkeypatch):
    launch, seen, _ = primed(pm, counting_bench, name="t_fast_general")
    with fat.compile_hints(num_stages=3):
        launch(torch.zeros(4), 4)  # a new key: searched through the general path
        launch(torch.zeros(4), 4)  # fills the fast path for this block's key
    searches = launch.search_count
    with monkeypatch.context() as m:
        m.setattr(launch.sig, "bind", lambda *a, **k: (_ for _ in ()).throw(AssertionError("general path")))
        with fat.compile_hints(num_stages=3):
            launch(torch.zeros(4), 4)
            assert fat.current_hints() == {"num_stages": 3}  # the caller's block is back after the launch
        assert seen[-1][1]["num_stages"] == 3 and launch.search_count == searches
        launch(torch.zeros(4), 4)
        assert "num_stages" not in seen[-1][1]
    with fat.compile_hints(num_stages=5):
        launch(torch.zeros(4), 4)  # another block value misses and searches
    assert launch.search_count == searches + 1


def test_keywords_take_the_general_path(pm, counting_bench, monkeypatch):
    launch, seen, _ = primed(pm, counting_bench, name="t_fast_kw")
    binds = []
    real_bind = launch.sig.bind
    monkeypatch.setattr(launch.sig, "bind", lambda *a: binds.append(a) or real_bind(*a))
    launch(x=torch.zeros(4), n=4)
    assert launch.last_source == "memory" and len(binds) == 1
    launch(torch.zeros(4), 4)
    assert len(binds) == 1  # the positional spelling stays on the generated path


def test_reset_to_zero_on_the_fast_path(pm, counting_bench):
    @fat.autotune(configs=[fat.Config(S=1), fat.Config(S=2)], key=["n"], reset_to_zero=["out"],
                  do_bench=counting_bench(), plugin_manager=pm, name="t_fast_zero")
    def acc(out, n, S=None):
        out.add_(1)

    out = torch.zeros(3)
    for _ in range(4):
        out.fill_(5.0)
        acc(out, 3)
        assert torch.equal(out, torch.ones(3))


def test_specialize_makes_what_cache_hits_call(pm, counting_bench):
    made, ran = [], []

    def specialize(config, x, n, **_):
        made.append((config.kwargs["B"], n))
        b = config.kwargs["B"]

        def bound(x, n):
            ran.append(("bound", b, fat.current_hints()))
            return b * 10

        return bound

    bench = counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}.get(i, 3.0))

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2, num_warps=8)], key=["n"], do_bench=bench,
                  plugin_manager=pm, name="t_fast_spec", specialize=specialize)
    def launch(x, n, B=None):
        ran.append(("fn", B))
        return B

    assert launch(torch.zeros(4), 4) == 2  # the search and its launch: the tuned fn itself
    assert made == [(2, 4)]  # specialized once, for the cache hits that follow
    ran.clear()
    assert launch(torch.ones(4), 4) == 20 and launch(torch.ones(4), 4) == 20
    assert ran == [("bound", 2, {"num_warps": 8})] * 2  # the config's hints are current in the bound call
    assert made == [(2, 4)]
    assert launch(torch.ones(4), n=4) == 2  # keywords keep the general path: the tuned fn itself


@pytest.mark.parametrize("answer", ["none", "raises"])
def test_a_specialize_that_declines_or_fails_leaves_the_launch_itself(pm, counting_bench, answer, caplog):
    def specialize(config, x, n, **_):
        if answer == "raises":
            raise RuntimeError("cannot specialize here")
        return None

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], do_bench=counting_bench(),
                  plugin_manager=pm, name=f"t_fast_spec_{answer}", specialize=specialize)
    def launch(x, n, B=None):
        return B

    with caplog.at_level("WARNING", logger="flyautotune"):
        results = {launch(torch.zeros(4), 4) for _ in range(4)}
    assert len(results) == 1 and results <= {1, 2}
    assert launch.last_source == "memory"
    warned = [r.getMessage() for r in caplog.records if "specialize" in r.getMessage()]
    assert warned == (["t_fast_spec_raises: specialize(B=1) failed (RuntimeError: cannot specialize here); "
                       "cache hits call the launch itself"] if answer == "raises" else [])


def test_specialize_must_return_a_callable(pm, counting_bench):
    @fat.autotune(configs=[fat.Config(B=1)], key=["n"], do_bench=counting_bench(), plugin_manager=pm,
                  name="t_fast_spec_bad", specialize=lambda config, x, n, **_: 3)
    def launch(x, n, B=None):
        return B

    with pytest.raises(TypeError, match="specialize= returned 3; expected a callable or None"):
        launch(torch.zeros(4), 4)


def test_a_hit_that_raises_restores_the_callers_launch_context(pm, counting_bench, monkeypatch):
    """The inlined hit (no hints on either side) sets the plan's target for the launch only: after a launch
    that raises, the caller sees no target again, and the next hit still runs."""
    bench = counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}.get(i, 3.0))
    fail = []

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], do_bench=bench, plugin_manager=pm,
                  name="t_fast_raise")
    def launch(x, n, B=None):
        if fail:
            raise RuntimeError("launch failed")
        return fat.current_target()

    launch(torch.zeros(4), 4)
    launch(torch.zeros(4), 4)
    monkeypatch.setattr(launch.sig, "bind", lambda *a, **k: pytest.fail("the general path ran"))
    fail.append(1)
    with pytest.raises(RuntimeError, match="launch failed"):
        launch(torch.ones(4), 4)
    assert fat.current_target() is None
    fail.clear()
    assert launch(torch.ones(4), 4).backend == "cpu" and fat.current_target() is None


def test_specialize_runs_in_the_launch_context_and_its_result_is_called_as_is(pm, counting_bench):
    """specialize= sees the call's target and the config's hints, so it can resolve what depends on them
    once; with no hints in force, hits call what it returned directly."""
    seen, ran = [], []

    def specialize(config, x, n, **_):
        seen.append((fat.current_target().backend, fat.current_hints()))
        target = fat.current_target()
        return lambda x, n: ran.append(target.backend) or config.kwargs["B"]

    bench = counting_bench(cost=lambda i: {1: 1.0, 2: 2.0}.get(i, 3.0))

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2, num_warps=8)], key=["n"], do_bench=bench,
                  plugin_manager=pm, name="t_fast_spec_ctx", specialize=specialize)
    def launch(x, n, B=None):
        return B

    assert [launch(torch.zeros(4), 4) for _ in range(3)] == [1, 1, 1]
    assert seen == [("cpu", {})] and ran == ["cpu", "cpu"]
    with fat.compile_hints(num_stages=3):  # another key; the block's hints reach specialize
        assert [launch(torch.zeros(4), 4) for _ in range(3)] == [1, 1, 1]
    assert seen[-1] == ("cpu", {"num_stages": 3}) and len(ran) == 4
    assert fat.current_target() is None and fat.current_hints() == {}


def test_each_arity_keeps_its_generated_path_and_clear_resets_them(pm, counting_bench, monkeypatch):
    """A tuner called with two spellings (an optional argument given or not) answers both from its
    generated paths; two tuners do not share theirs; clear() sends the next call to the general path."""
    bench = counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}.get(i, 3.0))

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], do_bench=bench, plugin_manager=pm,
                  name="t_fast_arity")
    def launch(x, n, scale=1, B=None):
        return (B, scale)

    @fat.autotune(configs=[fat.Config(C=5)], key=["n"], do_bench=bench, plugin_manager=pm, name="t_fast_arity2")
    def other(x, n, C=None):
        return C

    x = torch.zeros(4)
    for _ in range(2):
        launch(x, 4), launch(x, 4, 3), other(x, 4)
    binds = []
    for t in (launch, other):
        real = t.sig.bind
        monkeypatch.setattr(t.sig, "bind", lambda *a, _real=real: binds.append(a) or _real(*a))
    for _ in range(3):
        assert launch(x, 4) == (2, 1) and launch(x, 4, 3) == (2, 3) and other(x, 4) == 5
    assert binds == []
    launch.clear()
    assert launch(x, 4) == (2, 1) and len(binds) == 1  # the general path (the store answers), filling it again
    assert launch(x, 4) == (2, 1) and other(x, 4) == 5 and launch(x, 4, 3) == (2, 3) and len(binds) == 2
    assert launch(x, 4) == (2, 1) and launch(x, 4, 3) == (2, 3) and len(binds) == 2
    assert isinstance(launch, fat.Autotuner) and type(launch) is not type(other)


def _stride_tuned(pm, name):
    """A tuner whose winner depends on the stride pattern: B=1 for contiguous rows, B=2 for columns."""
    picks = {}

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name=name,
                  default=lambda x, n, **_: fat.Config(B=1 if x.stride(-1) == 1 else 2))
    def launch(x, n, B=None):
        picks.setdefault(x.stride(), set()).add(B)
        return B

    return launch, picks


def test_alternating_layouts_of_one_key_each_get_their_own_winner(pm):
    """The same key values with two stride patterns, called in turn: each call runs its own layout's
    config, on the fast path after the first of each."""
    launch, picks = _stride_tuned(pm, "t_fast_layouts")
    rows, cols = torch.zeros(4, 4), torch.zeros(4, 4).t()
    got = [(launch(rows, 4), launch(cols, 4)) for _ in range(5)]
    assert got == [(1, 2)] * 5 and picks == {(4, 1): {1}, (1, 4): {2}}
    assert launch.last_source == "memory"


def test_requires_grad_and_inference_mode_keep_their_hits(pm, counting_bench, monkeypatch):
    """Tensor state the key ignores (requires_grad, the thread's inference mode) gives the same winner and,
    after one call, the fast path again."""
    launch, seen, _ = primed(pm, counting_bench, name="t_fast_modes")
    binds = []
    real_bind = launch.sig.bind
    monkeypatch.setattr(launch.sig, "bind", lambda *a: binds.append(a) or real_bind(*a))
    assert launch(torch.zeros(4, requires_grad=True), 4) == 2
    with torch.inference_mode():
        assert [launch(torch.zeros(4), 4) for _ in range(3)] == [2, 2, 2]
    assert [launch(torch.zeros(4), 4) for _ in range(3)] == [2, 2, 2]
    assert binds == [] and launch.last_source == "memory"


def test_generated_parameters_are_positional_only(pm, counting_bench):
    """The first arity's ``__call__`` names its parameters a0, a1...; a keyword of that name is still an
    unknown keyword of the tuned function, and a short call still reaches its own path."""
    launch, _, _ = primed(pm, counting_bench, name="t_fast_posonly")
    with pytest.raises(TypeError, match="a0"):
        launch(a0=torch.zeros(4), a1=4)
    assert launch(torch.zeros(4), n=4) == 2
    with pytest.raises(TypeError):
        launch(torch.zeros(4))


def test_arities_with_other_tensors_keep_their_own_hits(pm, counting_bench, monkeypatch):
    """Two spellings of one key (an optional tensor given or not) called in turn: each stays on its
    generated path; the tensors one spelling checks never answer for the other's."""
    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], do_bench=counting_bench(),
                  plugin_manager=pm, name="t_fast_arity_tensors")
    def launch(x, n, out=None, B=None):
        return (B, out is None)

    x, out = torch.zeros(4), torch.zeros(4)
    for _ in range(2):
        launch(x, 4), launch(x, 4, out)
    binds = []
    real = launch.sig.bind
    monkeypatch.setattr(launch.sig, "bind", lambda *a: binds.append(a) or real(*a))
    picked = launch(x, 4)[0]
    for _ in range(3):
        assert launch(x, 4) == (picked, True) and launch(x, 4, out) == (picked, False)
    assert binds == []


def _in_place_tuned(pm, counting_bench, monkeypatch, name):
    """A tuner with two tensor arguments, called out of place and in place (``out`` is ``x``); returns it
    and a list that grows by one for each tensor check it makes (none where torch has no such checks)."""
    made = []
    real = fastpath.tensor_guards()
    if real is not None:  # before the first call: the generated path keeps the maker it was built with
        monkeypatch.setattr(fastpath, "_guards", lambda ts: made.append(len(ts)) or real(ts))

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], do_bench=counting_bench(),
                  plugin_manager=pm, name=name)
    def launch(x, out, n, B=None):
        return (B, x is out)

    return launch, made


def test_in_place_calls_stay_on_the_fast_path(pm, counting_bench, monkeypatch):
    """``launch(x, x, n)`` (one tensor in two places, as ``out=x`` passes it) is served by the generated
    path after its first call, without remaking a tensor check per call."""
    launch, made = _in_place_tuned(pm, counting_bench, monkeypatch, "t_fast_in_place")
    x = torch.zeros(4)
    picked = launch(x, x, 4)[0]
    launch(x, x, 4)
    before = len(made)
    monkeypatch.setattr(launch.sig, "bind", lambda *a, **k: pytest.fail("the general path ran"))
    for _ in range(5):
        y = torch.ones(4)
        assert launch(y, y, 4) == (picked, True)
    assert len(made) == before and launch.last_source == "memory"


def test_in_place_and_out_of_place_calls_in_turn(pm, counting_bench, monkeypatch):
    """Alternating in-place and out-of-place calls of one key each keep their answer and, after the first
    of each kind, neither the general path nor a new tensor check per call."""
    launch, made = _in_place_tuned(pm, counting_bench, monkeypatch, "t_fast_in_turn")
    x, out = torch.zeros(4), torch.zeros(4)
    picked = launch(x, out, 4)[0]
    launch(x, out, 4), launch(x, x, 4), launch(x, out, 4), launch(x, x, 4)
    before = len(made)
    monkeypatch.setattr(launch.sig, "bind", lambda *a, **k: pytest.fail("the general path ran"))
    for _ in range(4):
        assert launch(x, out, 4) == (picked, False) and launch(out, out, 4) == (picked, True)
    assert len(made) == before


def test_an_in_place_call_with_another_layout_misses(pm):
    """The check made for an in-place call still tells layouts apart: the same tensor in both places but
    with columns for rows gets its own winner."""
    picks = []

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="t_fast_alias_layout",
                  default=lambda x, out, n, **_: fat.Config(B=1 if x.stride(-1) == 1 else 2))
    def launch(x, out, n, B=None):
        picks.append(B)
        return B

    rows, cols = torch.zeros(4, 4), torch.zeros(4, 4).t()
    got = [(launch(rows, rows, 4), launch(cols, cols, 4), launch(rows, cols, 4)) for _ in range(3)]
    assert got == [(1, 2, 1)] * 3


def test_a_check_made_for_repeated_tensors_wants_the_same_repeats(monkeypatch):
    a, b = torch.zeros(2), torch.zeros(2)
    assert fastpath.alias_pattern((a, b, a)) == (0, 1, 0)
    assert fastpath.alias_pattern((a, b, b, a)) == (0, 1, 1, 0)
    assert fastpath.alias_pattern((a, b)) == (0, 1)
    monkeypatch.setattr(fastpath, "_guards", None)  # this test is about torch's checks in either mode
    check = fastpath.tensor_guards()((a, b, a))
    c = torch.zeros(2)
    assert check(c, b, c) and not check(c, b, a) and not check(c, c, c) and not check(c, b)
    assert not check(c.double(), b, c.double())


@pytest.mark.parametrize("values", [(1, True, 1.0), (0.0, False, 0), ((1, 2), (1.0, 2), (True, 2), ((1,), 2))],
                         ids=["one", "zero", "tuples"])
def test_equal_key_values_of_other_types_keep_their_own_winners(pm, values):
    """1, True and 1.0 are equal in a dict, but the stored key tells them apart (1, true, 1.0): each call
    runs its own value's winner, whichever came first, on every path."""
    pick = {repr(v): b for b, v in enumerate(values, 1)}

    @fat.autotune(configs=[fat.Config(B=b) for b in pick.values()], key=["n"], plugin_manager=pm,
                  name="t_fast_typed_key", default=lambda x, n, **_: fat.Config(B=pick[repr(n)]))
    def launch(x, n, B=None):
        return B

    x = torch.zeros(4)
    got = [[launch(x, v) for v in values] for _ in range(3)]
    assert got == [list(pick.values())] * 3
    assert [launch.resolve_config(x, v).kwargs["B"] for v in values] == list(pick.values())


def test_minus_zero_and_zero_are_one_key(pm, counting_bench):
    """-0.0 == 0.0 shares a winner in memory, so the store keys them as one too: a later process finds
    the winner of either under the other instead of searching again."""

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["s"], do_bench=counting_bench(),
                  plugin_manager=pm, name="t_fast_minus_zero")
    def launch(x, s, B=None):
        return B

    x = torch.zeros(4)
    picked = [launch(x, -0.0) for _ in range(3)]
    launch.clear()  # a new process: the store alone
    assert [launch(x, 0.0) for _ in range(3)] == picked and launch.search_count == 1
