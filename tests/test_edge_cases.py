"""Edge cases of the call path: each was a bug once."""

import pytest
import torch

import flyautotune as fat
from flyautotune import store as fat_store

TWO = [fat.Config(B=1), fat.Config(B=2)]


def test_reset_to_zero_argument_may_be_none_on_cache_hits(pm, counting_bench):
    @fat.autotune(configs=TWO, key=["n"], reset_to_zero=["out"], do_bench=counting_bench(), plugin_manager=pm,
                  name="e_none_out")
    def launch(x, n, out, B=None):
        return B

    for _ in range(3):
        assert launch(torch.zeros(2), 2, None) in (1, 2)


def test_tensor_subclasses_key_by_dtype_on_every_path(pm, counting_bench):
    @fat.autotune(configs=TWO, key=["n"], do_bench=counting_bench(), plugin_manager=pm, name="e_param")
    def launch(w, n, B=None):
        return B

    p32 = torch.nn.Parameter(torch.zeros(4))
    p64 = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    launch(p32, 4)
    launch(p32, 4)
    launch(p64, 4)
    assert launch.search_count == 2


def test_numpy_scalar_key_values_key_by_value_in_the_store(pm, counting_bench):
    """``N = np.prod(shape)`` is a NumPy scalar: it keys by its value, as an int does, so a winner stored
    for N=8 is not served to N=4096 in the next process (it was keyed as an empty shape, one key for all)."""
    np = pytest.importorskip("numpy")

    @fat.autotune(configs=TWO, key=["n"], do_bench=counting_bench(), plugin_manager=pm, name="e_numpy")
    def launch(x, n, B=None):
        return B

    small = launch.select(torch.zeros(8), np.int64(8))
    launch.clear()  # a new process: only the store remembers
    big = launch.select(torch.zeros(4096), np.int64(4096))
    assert small.source == "search" and big.source in ("default", "search") and small.key != big.key
    assert '"n":4096' in big.key
    launch.clear()
    assert launch.select(torch.zeros(8), 8).source == "store"  # an int 8 and np.int64(8): one key


def test_a_callers_mistake_keeps_the_stored_winner(pm, counting_bench):
    @fat.autotune(configs=TWO, key=["n"], do_bench=counting_bench(), plugin_manager=pm, name="e_keep")
    def launch(n, B=None):
        return B

    launch(3)
    fresh = fat.autotune(configs=TWO, key=["n"], do_bench=counting_bench(), plugin_manager=pm,
                         name="e_keep")(launch.fn)
    with pytest.raises(fat.IncompatibleConfigError, match="which the caller also passed"):
        fresh(3, B=8)
    with pytest.raises(fat.IncompatibleConfigError, match=r"'B', which the caller also passed \(B=8\)"):
        fresh(3, 8)  # positionally too
    assert len(fat_store.get_store().entries("e_keep")) == 1


def test_single_path_strings_are_paths_not_characters(pm, counting_bench, tmp_path):
    src = tmp_path / "extra_kernel.py"
    src.write_text("x = 1\n")

    def launch(n, B=None):
        return B

    a = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, source_files=str(src), packs=str(tmp_path / "p.json"))(launch)
    src.write_text("x = 2\n")
    b = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, source_files=str(src))(launch)
    assert a.source_fingerprint != b.source_fingerprint
    assert a._packs == (str(tmp_path / "p.json"),)


def test_source_fingerprint_does_not_depend_on_where_the_files_are_installed(tmp_path):
    """A kernel and a shared file kept in another folder: the same two files installed under ``a`` and
    under ``d`` (one sorts before the shared folder ``c``, the other after it) give one fingerprint, so a
    pack tuned from one install is found by the other."""
    from flyautotune import keys

    shared = tmp_path / "c" / "alpha.py"
    shared.parent.mkdir()
    shared.write_text("SHARED = 1\n")
    installs = []
    for root in ("a", "d"):
        kernel = tmp_path / root / "pkg" / "zeta.py"
        kernel.parent.mkdir(parents=True)
        kernel.write_text("def launch(): pass\n")
        installs.append([str(kernel), str(shared)])
    before = keys.file_fingerprint(installs[0])
    assert before == keys.file_fingerprint(installs[1])
    assert before == keys.file_fingerprint(installs[0][::-1])  # given in any order
    shared.write_text("SHARED = 2\n")  # the contents still count
    assert keys.file_fingerprint(installs[0]) != before


def test_a_launcher_refusing_a_stored_winner_falls_back_to_the_default(pm, counting_bench, caplog):
    tuned = fat.autotune(configs=TWO, key=["n"], do_bench=counting_bench(cost=lambda i: float(3 - i)),
                         plugin_manager=pm, name="e_refuse")(lambda n, B=None: B)
    assert tuned(5) == 2

    def strict(n, B=None):
        if B == 2:
            raise fat.IncompatibleConfigError("B=2 needs a newer driver")
        return B

    again = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_refuse",
                         default=lambda **kw: fat.Config(B=1))(strict)
    with caplog.at_level("WARNING", logger="flyautotune"):
        assert again(5) == 1
    assert "B=2 needs a newer driver" in caplog.text
    assert again.last_source == "default"
    assert fat_store.get_store().entries("e_refuse") == []


def test_a_changed_space_keeps_the_winner_when_there_is_a_default(pm, counting_bench):
    fat.autotune(configs=TWO, key=["n"], do_bench=counting_bench(cost=lambda i: float(3 - i)), plugin_manager=pm,
                 name="e_space")(lambda n, B=None: B)(5)
    grown = fat.autotune(configs=TWO + [fat.Config(B=3)], key=["n"], plugin_manager=pm, name="e_space",
                         default=lambda **kw: fat.Config(B=1))(lambda n, B=None: B)
    assert grown(5) == 2 and grown.last_source == "store"


def test_var_positional_launch_keeps_its_defaults(pm, counting_bench):
    @fat.autotune(configs=TWO, key=["M"], do_bench=counting_bench(), plugin_manager=pm, name="e_varpos")
    def launch(x, *rest, M=4, B=None):
        return (M, B)

    assert launch(1)[0] == 4


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        ({"key": None}, TypeError, "key= must be an argument name or a list of names, got None"),
        ({"packs": 5}, TypeError, "packs= must be a path or a list of paths, got 5"),
        ({"hints": ["num_warps"]}, TypeError, r"hints= must be a mapping of hint name -> value, got \['num_warps'\]"),
        ({"tolerance": (-1, 0)}, ValueError, r"tolerance=\(-1, 0\); rtol and atol must be finite numbers >= 0"),
        ({"tolerance": {"torch.float16": (1e-3, "x")}}, TypeError,
         r"tolerance\['torch.float16'\]=\(0.001, 'x'\); expected \(rtol, atol\)"),
        ({"configs": []}, ValueError, "configs is empty; give at least one Config, or a callable that returns"),
        ({"key": ["B"]}, ValueError, r"key argument 'B' is a knob the configs set \(B=1\); the key names call "
                                     r"arguments that pick the winner"),
    ],
)
def test_decorator_arguments_are_named(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        fat.autotune(**{"configs": TWO, **kwargs})(lambda n, B=None: B)


def test_a_space_empty_for_a_call_runs_the_default_and_without_one_says_so(pm):
    """A computed space may be empty for some calls: a forced search then settles on the default (the only
    candidate); with no default either, the error says both are missing."""
    launch = fat.autotune(configs=lambda **a: [], key=["n"], plugin_manager=pm, name="e_empty",
                          default=lambda **a: fat.Config(B=3))(lambda n, B=None: B)
    assert launch.select(3, force=True).config == fat.Config(B=3) and launch(3) == 3
    bare = fat.autotune(configs=lambda **a: [], key=["n"], plugin_manager=pm, name="e_empty_bare")(
        lambda n, B=None: B)
    with pytest.raises(fat.AutotuneError, match="the config space is empty for this call, and there is no default"):
        bare(3)


def test_call_and_value_errors_are_named(pm):
    launch = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_msgs",
                          do_bench=lambda fn, setup=None: None)(lambda n, B=None: B)
    with pytest.raises(TypeError, match="unexpected keyword argument 'N'; <lambda> takes n, B"):
        launch(n=3, N=4)
    with pytest.raises(fat.AutotuneError, match="do_bench for B=1 returned None; expected the time of one launch"):
        launch(3)
    with pytest.raises(ValueError, match="'kpack': value nan is not a finite number"):
        fat.Config(compile_hints={"kpack": float("nan")})
    assert fat.Config(num_warps=4, compile_hints={"num_warps": None}).hints == {"num_warps": 4}


@pytest.mark.parametrize("name, configs, prune, returned", [
    ("e_cfg_none", lambda **a: None, None, r"configs\(...\) returned None"),
    ("e_cfg_one", lambda **a: fat.Config(B=1), None, r"configs\(...\) returned Config\(B=1\)"),
    ("e_prune_none", TWO, lambda configs, **a: None, r"prune_configs_by\(...\) returned None"),
])
def test_a_callable_that_returns_no_list_of_configs_is_named(pm, counting_bench, name, configs, prune, returned):
    launch = fat.autotune(configs=configs, key=["n"], plugin_manager=pm, name=name, do_bench=counting_bench(),
                          prune_configs_by=prune)(lambda n, B=None: B)
    with pytest.raises(TypeError, match=rf"{name}: {returned}; expected a list of flyautotune.Config"):
        launch.select(3, force=True)


def test_hint_and_reset_arguments_are_named(pm):
    with pytest.raises(TypeError, match=r"compile_hints takes hints by name.*positional argument \{'num_warps': 4\}"):
        fat.compile_hints({"num_warps": 4})
    with pytest.raises(TypeError, match="lower_compile_hints: target='sm_90' must be a flyautotune.Target"):
        fat.lower_compile_hints(target="sm_90")
    launch = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_reset", reset_to_zero=["n"],
                          default=lambda **a: fat.Config(B=1))(lambda n, B=None: B)
    with pytest.raises(TypeError, match=r"reset_to_zero names 'n', which is 3 \(int\) in this call"):
        launch(3)
    launch = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_restore", restore_value=["n"],
                          default=lambda **a: fat.Config(B=1))(lambda n, B=None: B)
    with pytest.raises(TypeError, match=r"restore_value names 'n', which is 3 \(int\) in this call; "
                                        r"restore_value takes tensor arguments"):
        launch.select(3, force=True)


def test_a_broadcast_input_is_read_as_it_is_and_never_restored_into(pm, monkeypatch):
    """``x.expand(...)`` (stride 0) is a read-only view: the search's output checks and restores leave it
    alone (copying into it raised), and the copies the timing rotates over keep it as it is (a dense clone
    would be another memory pattern than the call's)."""
    from flyautotune import timing
    from flyautotune.measurement import Measurement
    from flyautotune.tuning import search

    class EveryCopy:  # runs the launch over every rotated copy, as the GPU timing does
        @fat.hookimpl(tryfirst=True)
        def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
            for run in rotations or [fn]:
                run()
            return Measurement(1.0, spread=0.001, method="fixed", reps=rep)

    monkeypatch.setattr(search, "rotates_on", lambda device: True)  # rotate on the host, as on a GPU
    monkeypatch.setattr(timing, "rotation_count", lambda device, per_set, **_: 3)
    pm.register(EveryCopy())
    seen = []

    @fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_broadcast", restore_value=["x"])
    def launch(x, out, n, B=None):
        seen.append((x.stride(), x.data_ptr(), out.data_ptr()))
        out.copy_(x * 2)

    x = torch.randn(1, 8).expand(4, 8)
    out = torch.empty(4, 8)
    sel = launch.select(x, out, 8, force=True)
    assert sel.source == "search" and all(t["error"] is None for t in sel.timings)
    assert {st for st, _, _ in seen} == {(0, 1)} and {xp for _, xp, _ in seen} == {x.data_ptr()}
    assert len({op for _, _, op in seen}) == 3  # the output still rotates
    launch(x, out, 8)
    assert torch.equal(out, x * 2)


def test_a_name_used_by_a_tuner_of_another_function_is_warned_about_once(pm, caplog):
    """A copy-pasted tuner that kept the first one's name= would run its winners (one store entry per
    name and key; in one file even the key is the same): said when the second tuner is made, naming both
    functions. Decorating the same function again (a notebook cell run twice) is not warned about."""
    def forward(x, n, B=None):
        return B

    def backward(x, n, B=None):
        return B

    with caplog.at_level("WARNING", logger="flyautotune"):
        for _ in range(2):  # the same cell run twice: a new function object, the same module and qualname
            def again(x, n, B=None):
                return B
            fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_shared_again")(again)
        assert caplog.records == []
        fwd = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_shared")(forward)
        fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_shared")(forward)
        assert caplog.records == []
        bwd = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_shared")(backward)
        assert len(caplog.records) == 1
        said = caplog.records[0].getMessage()
        assert said.startswith("e_shared: two tuners of different functions have this name=")
        assert f"{__name__}.{forward.__qualname__}" in said and f"{__name__}.{backward.__qualname__}" in said
        assert "Winners are shared by name" in said
        fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_shared")(backward)
        assert len(caplog.records) == 1  # once
    assert fwd.name == bwd.name == "e_shared"  # a warning, not an error: sharing may be meant


def test_the_tuners_callables_get_the_calls_arguments_not_the_knobs(pm, counting_bench):
    """``default``, ``configs``, ``prune_configs_by`` and ``validate`` get the call's arguments by name:
    written for them alone (no ``**kwargs``), they are not handed the knob a config sets as the launch's
    default (``B=None``), with a static space and with a computed one."""
    seen = {}

    def default(x, n):
        seen["default"] = n
        return fat.Config(B=2)

    def space(x, n):
        seen["configs"] = n
        return TWO

    def prune(configs, x, n):
        seen["prune"] = n
        return configs

    def validate(config, x, n):
        seen["validate"] = n
        return True

    for name, configs in (("e_args_static", TWO), ("e_args_computed", space)):
        launch = fat.autotune(configs=configs, key=["n"], plugin_manager=pm, name=name, default=default,
                              prune_configs_by=prune, validate=validate, do_bench=counting_bench())(
            lambda x, n, B=None: B)
        assert launch(torch.zeros(2), 2) == 2 and launch.last_source == "default"
        assert launch.select(torch.zeros(2), 2, force=True).source == "search"
        launch.clear()  # a new process: the store's winner, checked by validate
        launch(torch.zeros(2), 2)
        assert launch.last_source == "store"
        assert seen == {"default": 2, "configs": 2, "prune": 2, "validate": 2} if configs is space else \
            seen == {"default": 2, "prune": 2, "validate": 2}, seen
        seen.clear()

    got = []  # with **kwargs: a static space's knob is not among them either; other defaults are
    launch = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_args_kwargs",
                          default=lambda **named: got.append(named) or fat.Config(B=1))(
        lambda x, n, scale=1.0, B=None: B)
    launch(torch.zeros(2), 2)
    assert sorted(got[0]) == ["n", "scale", "x"]


class _TwoArgError(Exception):
    def __init__(self, code, why):
        super().__init__(code, why)


@pytest.mark.parametrize("what", ["default", "configs", "prune_configs_by"])
def test_what_the_tuners_callables_raise_names_the_callable(pm, counting_bench, what):
    def broken(*args, **named):
        raise RuntimeError("factory exploded")

    options = {"configs": TWO, "default": lambda **a: fat.Config(B=1), what: broken}
    launch = fat.autotune(key=["n"], plugin_manager=pm, name=f"e_raise_{what}", do_bench=counting_bench(),
                          **options)(lambda n, B=None: B)
    with pytest.raises(RuntimeError, match=rf"^e_raise_{what}: {what}\(...\) raised RuntimeError: factory "
                                           r"exploded$") as info:
        launch.select(3, force=what != "default")
    assert str(info.value.__cause__) == "factory exploded"  # the original, as the cause

    def odd(**named):  # a type that cannot be made from a message propagates as it is, with a note
        raise _TwoArgError(7, "no")

    launch = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_raise_odd", default=odd)(
        lambda n, B=None: B)
    with pytest.raises(_TwoArgError) as info:
        launch(3)
    assert info.value.args == (7, "no") and "e_raise_odd's default(...)" in info.value.__notes__[0]


def test_check_precompile_and_specialize_get_the_calls_arguments_not_the_knobs(pm, counting_bench, caplog):
    """``check``, ``precompile`` and ``specialize`` get the call's arguments as ``default`` and the others
    do: written for them alone (no ``**kwargs``), they are not handed the knob a config sets as the
    launch's default (``B=None``), with a static space and with a computed one."""
    seen = []

    def check(result, x, n):
        seen.append(("check", n))
        return True

    def precompile(config, x, n):
        seen.append(("precompile", n))

    def specialize(config, x, n):
        seen.append(("specialize", n))
        return lambda x, n: ("specialized", config.kwargs["B"])

    for name, configs in (("e_more_static", TWO), ("e_more_computed", lambda x, n: TWO)):
        launch = fat.autotune(configs=configs, key=["n"], plugin_manager=pm, name=name, check=check,
                              precompile=precompile, specialize=specialize, do_bench=counting_bench())(
            lambda x, n, B=None: B)
        with caplog.at_level("DEBUG", logger="flyautotune"):
            winner = launch(torch.zeros(2), 2)  # the search: both candidates precompiled and checked
            assert launch(torch.zeros(2), 2) == ("specialized", winner)  # a hit: what specialize made
        assert sorted(seen) == [("check", 2)] * 2 + [("precompile", 2)] * 2 + [("specialize", 2)], seen
        assert not [r for r in caplog.records if "raised" in r.getMessage() or "failed" in r.getMessage()]
        seen.clear()
        caplog.clear()

    got = {}  # with **kwargs: the static space's knob is not among them either; the launch's other defaults are

    def record(what, value=None):
        return lambda first, **named: got.setdefault(what, sorted(named)) and value

    launch = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_more_kwargs", do_bench=counting_bench(),
                          check=record("check", True), precompile=record("precompile"),
                          specialize=record("specialize", lambda x, n: "specialized"))(
        lambda x, n, scale=1.0, B=None: B)
    launch(torch.zeros(2), 2)
    assert launch(torch.zeros(2), 2) == "specialized"
    assert got == {what: ["n", "scale", "x"] for what in ("check", "precompile", "specialize")}


def test_specialize_gets_a_stream_passed_by_keyword_as_the_hits_it_serves_do(pm, counting_bench):
    """A call whose only keyword is ``stream=`` fills the cache-hit path, whose hits pass no stream or
    their own: ``specialize`` gets the stream's default, where it takes a ``stream``, and no stream at all
    where it does not (it was handed ``stream=`` and the knob, and failed)."""
    made = []

    def without_stream(config, x, n):
        made.append(("without", n))
        return lambda x, n: "specialized"

    def with_stream(config, x, n, stream=None):
        made.append(("with", n, stream))
        return lambda x, n: "specialized"

    for specialize in (without_stream, with_stream):
        launch = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name=f"e_stream_{specialize.__name__}",
                              specialize=specialize, do_bench=counting_bench())(lambda x, n, B=None, stream=None: B)
        assert launch(torch.zeros(2), 2, stream=0) in (1, 2)
        assert launch(torch.zeros(2), 2) == "specialized"
    assert made == [("without", 2), ("with", 2, None)]


def test_what_check_validate_and_precompile_raise_names_the_callable(pm, counting_bench, caplog):
    def check(result, **named):
        raise RuntimeError("cannot compare")

    launch = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_raise_check", check=check,
                          do_bench=counting_bench())(lambda n, B=None: B)
    with pytest.raises(fat.AutotuneError) as info:
        launch(3)
    assert "B=1: rejected: check(...) raised RuntimeError: cannot compare" in str(info.value)

    def validate(config, **named):
        raise RuntimeError("validator exploded")

    launch = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_raise_validate", validate=validate,
                          do_bench=counting_bench())(lambda n, B=None: B)
    launch(3)
    launch.clear()  # a new process: the store's winner, checked by validate
    with pytest.raises(RuntimeError, match=r"^e_raise_validate: validate\(...\) raised RuntimeError: validator "
                                           r"exploded$") as info:
        launch(3)
    assert str(info.value.__cause__) == "validator exploded"

    def precompile(config, **named):
        raise RuntimeError("no compiler")

    launch = fat.autotune(configs=TWO, key=["n"], plugin_manager=pm, name="e_raise_precompile",
                          precompile=precompile, do_bench=counting_bench())(lambda n, B=None: B)
    with caplog.at_level("DEBUG", logger="flyautotune"):
        launch(3)  # left for the timed run to report: the launch itself runs
    assert "e_raise_precompile: precompile(...) of B=1 raised RuntimeError: no compiler" in caplog.text
