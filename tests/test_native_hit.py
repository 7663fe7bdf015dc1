"""The C hit path (``flyautotune.tuning._hit.HitPath``): what it serves itself, what it hands to the
generated Python ``call``, and that it holds no reference it should not. ``test_fast_path.py`` runs every
fast-path behaviour through it too (its "C hit path" runs)."""

import os
import sys
import threading

import pytest
import torch

import flyautotune as fat
from flyautotune import context
from flyautotune.tuning import fastpath

HitPath = fastpath.native_type()
needs_c = pytest.mark.skipif(HitPath is None, reason="the C hit path is not built here (no C compiler at "
                                "install, or FLYAUTOTUNE_NATIVE_HIT=0); test_fast_path.py covers the Python path")


class Tuner:
    """What the C path reads and writes on a tuner: ``_env_size``, ``_last``."""


class Plan:
    def __init__(self, direct=None):
        self.hit, self.direct = object(), direct


class Frame:
    def __init__(self, key):
        self.key = key


def make(direct=None, check=lambda *ts: True, types=(None, int, str), key_idx=(1, 2), tensor_idx=(0,)):
    """A HitPath over ``f(tensor, n: int, s: str)`` keyed by ``(n, s)``, with one memo entry for
    ``(3, (), 4, "a")``; records what reaches the fallback and ``launch_rest``."""
    tuner, memo, fell, rest = Tuner(), {}, [], []
    environ = {"A": "1"}
    tuner._env_size = len(environ)
    plan = Plan(direct)
    memo[(3, (), 4, "a")] = (check, plan)
    path = HitPath(types=types, key_idx=key_idx, key_shape=tuple(False for _ in key_idx), tensor_idx=tensor_idx,
                   tuner=tuner, memo=memo, state=context._local, environ=environ,
                   fallback=lambda *a, **k: fell.append((a, k)) or "fallback",
                   rest=lambda *a: rest.append(a) or "rest")
    return path, tuner, plan, memo, environ, fell, rest


@needs_c
def test_a_hit_calls_the_direct_launch_with_the_calls_arguments_and_records_it():
    got = []
    path, tuner, plan, _, _, fell, rest = make(direct=lambda *a: got.append(a) or "launched")
    x = torch.zeros(2)
    assert path(tuner, x, 4, "a") == "launched"
    assert got == [(x, 4, "a")] and fell == [] and rest == []
    assert tuner._last is plan.hit


@needs_c
@pytest.mark.parametrize("why", ["keyword", "arity", "type", "another tuner", "environment", "miss", "check fails",
                                 "check raises", "unhashable"])
def test_anything_but_a_plain_hit_goes_to_the_python_path_with_the_same_arguments(why):
    def check(*ts):
        if why == "check raises":
            raise RuntimeError("no")
        return why != "check fails"

    path, tuner, _, _, environ, fell, rest = make(direct=lambda *a: "launched", check=check)
    x = torch.zeros(2)
    args, kwargs = (tuner, x, 4, "a"), {}
    if why == "keyword":
        kwargs = {"stream": None}
    elif why == "arity":
        args = args[:-1]
    elif why == "type":
        args = (tuner, x, 4.0, "a")
    elif why == "another tuner":
        args = (Tuner(), x, 4, "a")
    elif why == "environment":
        environ["B"] = "2"
    elif why == "miss":
        args = (tuner, x, 5, "a")
    elif why == "unhashable":
        path, tuner, _, _, _, fell, _ = make(types=(None, list, str))
        args = (tuner, x, [4], "a")
    assert path(*args, **kwargs) == "fallback"
    assert fell == [(args, kwargs)] and rest == []


@needs_c
def test_an_open_hints_block_or_no_direct_launch_runs_launch_rest():
    path, tuner, plan, memo, _, fell, rest = make(direct=None)
    x = torch.zeros(2)
    assert path(tuner, x, 4, "a") == "rest"
    assert rest == [(plan, context._local.stack, x, 4, "a")] and fell == []
    # inside a block: the block's key leads the short key, and the launch needs the hints context
    path, tuner, plan, memo, _, fell, rest = make(direct=lambda *a: "launched")
    frame = Frame(("num_warps", 8))
    memo[(3, frame.key, 4, "a")] = memo.pop((3, (), 4, "a"))
    old = context._local.stack
    context._local.stack = [frame]
    try:
        assert path(tuner, x, 4, "a") == "rest"
        assert path(tuner, x, 5, "a") == "fallback"
    finally:
        context._local.stack = old
    assert rest == [(plan, [frame], x, 4, "a")] and len(fell) == 1
    assert path(tuner, x, 4, "a") == "fallback"  # the block closed: the key without hints is not stored


@needs_c
def test_each_thread_sees_its_own_hints_stack():
    path, tuner, plan, memo, _, fell, rest = make(direct=lambda *a: "launched")
    frame = Frame(("num_warps", 8))
    memo[(3, frame.key, 4, "a")] = (lambda *ts: True, plan)
    results = []

    def other():
        results.append(path(tuner, torch.zeros(2), 4, "a"))  # a fresh thread: no block open

    context._local.stack = [frame]
    try:
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert results == ["launched"] and path(tuner, torch.zeros(2), 4, "a") == "rest"
    finally:
        context._local.stack = []


@needs_c
def test_shapes_of_tensor_key_arguments_are_key_values():
    path, tuner, plan, memo, _, fell, _ = make(direct=lambda *a: "launched", types=(None, int, str),
                                               key_idx=(0, 2), tensor_idx=(0,))
    path = HitPath(types=(None, int, str), key_idx=(0, 2), key_shape=(True, False), tensor_idx=(0,), tuner=tuner,
                   memo={(3, (), torch.Size([2]), "a"): (lambda *ts: True, plan)}, state=context._local,
                   environ={"A": "1"}, fallback=lambda *a, **k: fell.append(a) or "fallback", rest=lambda *a: "rest")
    assert path(tuner, torch.zeros(2), 9, "a") == "launched"
    assert path(tuner, torch.zeros(3), 9, "a") == "fallback"


@needs_c
def test_errors_of_the_launch_propagate_and_nothing_leaks():
    def boom(*a):
        raise ValueError("launch failed")

    path, tuner, plan, _, _, fell, _ = make(direct=boom)
    x = torch.zeros(2)
    with pytest.raises(ValueError, match="launch failed"):
        path(tuner, x, 4, "a")
    assert fell == []
    ok_path, ok_tuner, ok_plan, *_ = make(direct=lambda *a: None)
    s = "a"
    for p, t, pl in ((ok_path, ok_tuner, ok_plan), (path, tuner, plan)):
        before = [sys.getrefcount(o) for o in (x, s, pl, t)]
        for _ in range(1000):
            try:
                p(t, x, 4, s)
            except ValueError:
                pass
        assert [sys.getrefcount(o) for o in (x, s, pl, t)] == before


@needs_c
def test_in_place_and_alternating_entries_are_checked_in_c():
    """An entry with a spec (fastpath.make_entry): each alternative ``(inner, pattern)`` in turn, ``inner``
    called with the distinct tensors ``pattern`` keeps, after the repeats it names are checked by identity;
    the entry's Python check is never called."""
    seen = []

    def inner(name, verdict=True):
        return lambda *ts: seen.append((name, ts)) or verdict

    def python_check(*ts):
        raise AssertionError("the Python check ran")

    x, w, y = torch.zeros(2), torch.zeros(2), torch.zeros(2)
    plan = Plan(direct=lambda *a: "launched")
    path, tuner, _, memo, _, fell, _ = make(types=(None, None, None, int), key_idx=(3,), tensor_idx=(0, 1, 2))
    key = (4, (), 7)
    # in place (out=x): pattern (0, 1, 0); then out of place: all three
    memo[key] = (python_check, plan, ((inner("in place"), (0, 1, 0)), (inner("out of place"), None)))
    assert path(tuner, x, w, x, 7) == "launched" and seen.pop() == ("in place", (x, w))
    assert path(tuner, x, w, y, 7) == "launched" and seen.pop() == ("out of place", (x, w, y))
    assert seen == [] and fell == []
    # every alternative fails: the Python path decides
    memo[key] = (python_check, plan, ((inner("a", False), (0, 1, 0)), (inner("b", False), None)))
    assert path(tuner, x, w, y, 7) == "fallback" and [n for n, _ in seen] == ["b"] and len(fell) == 1
    # a pattern of another length never passes; an entry of another shape is left to the Python path
    memo[key] = (python_check, plan, ((inner("c"), (0, 0)),))
    assert path(tuner, x, w, x, 7) == "fallback"
    memo[key] = (python_check, plan, "not a spec")
    assert path(tuner, x, w, y, 7) == "fallback"
    before = [sys.getrefcount(o) for o in (x, w, plan)]
    memo[key] = (python_check, plan, ((lambda *ts: True, (0, 1, 0)),))
    for _ in range(1000):
        path(tuner, x, w, x, 7)
    assert [sys.getrefcount(o) for o in (x, w, plan)] == before


@needs_c
def test_a_stream_hit_calls_the_callable_that_takes_the_stream_with_the_resolved_one():
    """``stream=`` as the only keyword: the same checks, then ``plan.direct_stream(*args, stream=resolved)``
    with ``resolve(stream, the first tensor's device)``; ``stream=None`` is a plain hit; without a callable
    that takes the stream, inside a hints block, or with another keyword, the Python path decides."""
    got, resolved_for = [], []

    def resolve(stream, device):
        resolved_for.append((stream, device))
        return ("resolved", stream)

    x = torch.zeros(2)
    path, tuner, plan, memo, _, fell, rest = make(direct=lambda *a: "plain")
    path = HitPath(types=(None, int, str), key_idx=(1, 2), key_shape=(False, False), tensor_idx=(0,), tuner=tuner,
                   memo=memo, state=context._local, environ={"A": "1"}, rest=lambda *a: "rest",
                   fallback=lambda *a, **k: fell.append((a, k)) or "fallback", resolve=resolve)
    plan.direct_stream = lambda *a, stream: got.append((a, stream)) or "on the stream"
    s = object()
    assert path(tuner, x, 4, "a", stream=s) == "on the stream"
    assert got == [((x, 4, "a"), ("resolved", s))] and resolved_for == [(s, x.device)] and fell == []
    assert tuner._last is plan.hit
    assert path(tuner, x, 4, "a", stream=None) == "plain" and len(got) == 1  # a plain hit
    assert path(tuner, x, 4, "a", other=s) == "fallback"
    assert path(tuner, x, 4, "a", stream=s, other=1) == "fallback"
    frame = Frame(("num_warps", 8))
    memo[(3, frame.key, 4, "a")] = memo[(3, (), 4, "a")]
    context._local.stack = [frame]
    try:
        assert path(tuner, x, 4, "a", stream=s) == "fallback"  # hints in force: launch_on's context
    finally:
        context._local.stack = []
    plan.direct_stream = None
    assert path(tuner, x, 4, "a", stream=s) == "fallback"
    assert [k for _, k in fell] == [{"other": s}, {"stream": s, "other": 1}, {"stream": s}, {"stream": s}]
    # a stream the resolver refuses: its error, as the Python path raises it
    plan.direct_stream = lambda *a, stream: "never"

    def refuse(stream, device):
        raise TypeError(f"stream={stream!r}: expected a stream object")

    strict = HitPath(types=(None, int, str), key_idx=(1, 2), key_shape=(False, False), tensor_idx=(0,), tuner=tuner,
                     memo=memo, state=context._local, environ={"A": "1"}, rest=print, fallback=print, resolve=refuse)
    with pytest.raises(TypeError, match=r"stream=True: expected a stream object"):
        strict(tuner, x, 4, "a", stream=True)
    # a tuner whose function takes no stream (resolve None): every stream= call is the Python path's
    plain = HitPath(types=(None, int, str), key_idx=(1, 2), key_shape=(False, False), tensor_idx=(0,), tuner=tuner,
                    memo=memo, state=context._local, environ={"A": "1"}, rest=print,
                    fallback=lambda *a, **k: "python")
    assert plain(tuner, x, 4, "a", stream=s) == "python"
    plan.direct_stream = lambda *a, stream: None
    resolved_for.clear()
    path(tuner, x, 4, "a", stream=s)
    resolved_for.clear()  # the test's record of each resolve holds the stream: counted without it
    before = [sys.getrefcount(o) for o in (x, s, plan)]
    for _ in range(1000):
        path(tuner, x, 4, "a", stream=s)
        resolved_for.clear()
    assert [sys.getrefcount(o) for o in (x, s, plan)] == before


@needs_c
def test_a_wide_call_reaches_launch_rest_and_the_stream_launch_whole():
    """22 arguments: more than the argument array the C path keeps on its stack; every one arrives, in order."""
    n = 22
    x = torch.zeros(2)
    args = (x,) + tuple(range(1, n))
    tuner, plan = Tuner(), Plan(direct=None)
    tuner._env_size = 0
    got = []
    plan.direct_stream = lambda *a, stream: got.append((a, stream)) or "stream"
    path = HitPath(types=(None,) + (int,) * (n - 1), key_idx=(1,), key_shape=(False,), tensor_idx=(0,), tuner=tuner,
                   memo={(n, (), 1): (lambda *ts: True, plan, None)}, state=context._local, environ={},
                   fallback=print, rest=lambda *a: got.append(a) or "rest", resolve=lambda s, d: ("resolved", s))
    assert path(tuner, *args) == "rest" and got.pop() == (plan, context._local.stack) + args
    assert path(tuner, *args, stream=7) == "stream" and got.pop() == (args, ("resolved", 7))


@needs_c
def test_bad_construction_is_refused_by_name():
    path, tuner, plan, memo, *_ = make()
    common = dict(types=(None, int), key_shape=(False,), tuner=tuner, memo=memo, state=context._local,
                  environ={}, fallback=print, rest=print)
    with pytest.raises(ValueError, match="key_idx holds 5"):
        HitPath(key_idx=(5,), tensor_idx=(0,), **common)
    with pytest.raises(ValueError, match="key_shape and key_idx"):
        HitPath(key_idx=(1, 0), tensor_idx=(0,), **common)


@needs_c
def test_the_tuners_first_arity_call_is_the_c_path_and_binds_as_a_method(pm, counting_bench):
    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], do_bench=counting_bench(),
                  plugin_manager=pm, name="t_native_bind")
    def launch(x, n, B=None):
        return B

    x = torch.zeros(4)
    launch(x, 4), launch(x, 4)
    call = type(launch).__dict__["__call__"]
    assert isinstance(call, HitPath)
    assert launch.__call__(x, 4) == launch(x, 4) == launch.last_config.kwargs["B"]
    assert launch.__call__.__name__ == "__call__" and "Autotuner.__call__" in repr(launch.__call__)
    assert launch(x, n=4) == launch.last_config.kwargs["B"]  # a keyword: the Python path, same answer


@needs_c
@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_the_environment_turns_the_c_path_off(monkeypatch, pm, counting_bench, value):
    monkeypatch.setenv("FLYAUTOTUNE_NATIVE_HIT", value)
    monkeypatch.setattr(fastpath, "_native", None)  # read once per process: read it again
    assert fastpath.native_type() is None

    @fat.autotune(configs=[fat.Config(B=1)], key=["n"], do_bench=counting_bench(), plugin_manager=pm,
                  name=f"t_native_off_{value}")
    def launch(x, n, B=None):
        return B

    x = torch.zeros(4)
    assert launch(x, 4) == launch(x, 4) == launch(x, 4) == 1
    assert not isinstance(type(launch).__dict__["__call__"], HitPath)
    monkeypatch.setattr(fastpath, "_native", None)
    monkeypatch.delenv("FLYAUTOTUNE_NATIVE_HIT")
    assert fastpath.native_type() is HitPath


@needs_c
def test_a_tuner_the_c_path_refuses_keeps_the_python_one(monkeypatch, pm, counting_bench):
    def refuse(**kwargs):
        raise TypeError("HitPath: the tuner's __dict__ is not a dict")

    monkeypatch.setattr(fastpath, "_native", refuse)

    @fat.autotune(configs=[fat.Config(B=1)], key=["n"], do_bench=counting_bench(), plugin_manager=pm,
                  name="t_native_refused")
    def launch(x, n, B=None):
        return B

    x = torch.zeros(4)
    assert launch(x, 4) == launch(x, 4) == launch(x, 4) == 1
    assert callable(type(launch).__dict__["__call__"]) and launch.last_source == "memory"


@needs_c
@pytest.mark.parametrize("version", [None, fastpath.HIT_VERSION - 1])
def test_a_build_of_other_source_is_not_used(monkeypatch, pm, counting_bench, caplog, version):
    """An editable install keeps its first build of ``_hit.c`` across source updates: such a build, whose
    checks and key may not be this source's, leaves the hits to the Python path, and says why."""
    import types

    import flyautotune.tuning

    stale = types.ModuleType("flyautotune.tuning._hit")
    stale.HitPath = HitPath
    if version is not None:
        stale.VERSION = version
    monkeypatch.setitem(sys.modules, "flyautotune.tuning._hit", stale)
    monkeypatch.setattr(flyautotune.tuning, "_hit", stale)
    monkeypatch.setattr(fastpath, "_native", None)
    assert fastpath.native_type() is None
    assert "built from other source" in caplog.text and "built from other source" in fastpath.hit_path()[1]

    @fat.autotune(configs=[fat.Config(B=1)], key=["n"], do_bench=counting_bench(), plugin_manager=pm,
                  name="t_native_stale")
    def launch(x, n, B=None):
        return B

    x = torch.zeros(4)
    assert launch(x, 4) == launch(x, 4) == launch(x, 4) == 1
    assert not isinstance(type(launch).__dict__["__call__"], HitPath) and launch.last_source == "memory"


@pytest.mark.skipif(not os.environ.get("CI"), reason="only CI promises a C compiler at install")
def test_ci_installs_build_the_c_hit_path():
    assert HitPath is not None
