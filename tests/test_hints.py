import threading

import pytest
from hypothesis import given, strategies as st

import flyautotune as fat
from flyautotune.hints import merge_hints, normalize_hint


def test_contexts_nest_and_later_non_none_wins():
    assert fat.current_hints() == {}
    with fat.compile_hints(waves_per_eu=2, num_warps=4) as outer:
        assert outer == {"waves_per_eu": 2, "num_warps": 4}
        with fat.compile_hints(waves_per_eu=3, num_warps=None):
            assert fat.current_hints() == {"waves_per_eu": 3, "num_warps": 4}
        assert fat.current_hints() == {"waves_per_eu": 2, "num_warps": 4}
    assert fat.current_hints() == {}


def test_zero_is_kept_as_leave_the_kernel_alone():
    with fat.compile_hints(waves_per_eu=4):
        with fat.compile_hints(waves_per_eu=0):
            assert fat.current_hints() == {"waves_per_eu": 0}


def test_snapshot_is_detached():
    with fat.compile_hints(num_warps=4):
        snap = fat.current_hints()
        snap["num_warps"] = 99
        assert fat.current_hints() == {"num_warps": 4}


def test_contexts_are_thread_local():
    seen = {}
    entered = threading.Event()
    release = threading.Event()

    def other():
        entered.wait()
        seen["other"] = fat.current_hints()
        release.set()

    t = threading.Thread(target=other)
    t.start()
    with fat.compile_hints(num_warps=8):
        entered.set()
        release.wait()
    t.join()
    assert seen["other"] == {}


@pytest.mark.parametrize(
    "name, value, exc, message",
    [
        ("waves_per_eu", -1, ValueError, "'waves_per_eu': value -1 is negative"),
        ("num_warps", True, TypeError, "'num_warps': value True is a bool"),
        ("maxnreg", 1.5, TypeError, "'maxnreg': value 1.5 is a float"),
        ("waves_per_eu", (4, 2), ValueError, "minimum 4 > maximum 2"),
        ("waves_per_eu", "2,x", ValueError, "'2,x' has non-integer parts"),
        ("waves_per_eu", "2", ValueError, "'2' is not a 'min,max' string"),
        ("waves_per_eu", (-1, 2), ValueError, "minimum -1 of (-1, 2) is negative"),
        ("waves_per_eu", (1, 2, 3), ValueError, "pair"),
        ("num_stages", "3", TypeError, "'num_stages': value '3' is a str"),
    ],
)
def test_bad_values_name_the_hint_and_value(name, value, exc, message):
    with pytest.raises(exc, match=message.replace("(", r"\(").replace(")", r"\)")):
        with fat.compile_hints(**{name: value}):
            pass


def test_range_spellings_normalize_alike():
    assert normalize_hint("waves_per_eu", "1, 2") == (1, 2)
    assert normalize_hint("waves_per_eu", [1, 2]) == (1, 2)
    assert normalize_hint("waves_per_eu", 3) == 3


hint_values = st.one_of(st.none(), st.integers(min_value=0, max_value=64))
layers = st.lists(
    st.fixed_dictionaries({}, optional={n: hint_values for n in ("waves_per_eu", "num_warps", "maxnreg")}),
    max_size=5,
)


@given(layers)
def test_merge_equals_last_non_none_per_name(stack):
    merged = merge_hints(*stack)
    for name in ("waves_per_eu", "num_warps", "maxnreg"):
        expected = None
        for layer in stack:
            if layer.get(name) is not None:
                expected = layer[name]
        assert merged.get(name) == expected
    assert None not in merged.values()


@given(layers)
def test_nested_contexts_match_merge(stack):
    import contextlib

    with contextlib.ExitStack() as es:
        for layer in stack:
            es.enter_context(fat.compile_hints(**layer))
        assert fat.current_hints() == merge_hints(*stack)
    assert fat.current_hints() == {}


def test_current_key_matches_the_snapshot_without_copying():
    from flyautotune import current_hint_key as current_key
    from flyautotune.hints import hint_key

    assert current_key() == ()
    with fat.compile_hints(num_warps=4, waves_per_eu=(1, 2)):
        assert current_key() == hint_key(fat.current_hints()) == (("num_warps", 4), ("waves_per_eu", (1, 2)))
    assert current_key() == ()


def test_a_repeated_block_is_validated_by_value_and_type():
    with fat.compile_hints(num_warps=4):
        pass
    for bad in (4.0, True):  # equal to 4 or 1 as dict keys, but not valid hint values
        with pytest.raises(TypeError, match="num_warps"):
            with fat.compile_hints(num_warps=bad):
                pass
    with fat.compile_hints(num_warps=8):
        with fat.compile_hints(num_stages=2):
            assert fat.current_hints() == {"num_warps": 8, "num_stages": 2}
    with fat.compile_hints(num_stages=2):  # the same inner block over another outer one
        assert fat.current_hints() == {"num_stages": 2}
