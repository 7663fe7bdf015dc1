"""Property tests: key stability under argument spelling and order."""

import torch
from hypothesis import given, settings, strategies as st

import flyautotune as fat
from flyautotune.tuning.binding import memo_key
from flyautotune import keys


@settings(max_examples=50, deadline=None)
@given(st.permutations(["a", "b", "c", "d"]), st.integers(1, 5), st.integers(1, 5))
def test_memo_key_ignores_keyword_order(order, m, n):
    tuner = fat.Autotuner(lambda a, b, c, d, BLOCK=None: None, [fat.Config(BLOCK=1)], key=["a", "b"])
    values = {"a": m, "b": n, "c": torch.zeros(m, n), "d": torch.zeros(n)}
    reference = memo_key(tuner.name, tuner.key, tuner.sig.bind((), values), ())
    shuffled = {k: values[k] for k in order}
    assert memo_key(tuner.name, tuner.key, tuner.sig.bind((), shuffled), ()) == reference
    positional = tuple(values[k] for k in "abcd")
    assert memo_key(tuner.name, tuner.key, tuner.sig.bind(positional, {}), ()) == reference


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=4))
def test_stride_pattern_buckets(strides):
    class T:
        def stride(self):
            return tuple(strides)

    pattern = keys.stride_pattern(T())
    assert pattern == tuple(0 if s == 0 else 1 if s == 1 else 2 for s in strides)


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(st.sampled_from(["x", "y", "z"]), st.integers(0, 9)))
def test_canonical_json_is_order_independent(d):
    assert keys.canonical_json(dict(reversed(list(d.items())))) == keys.canonical_json(d)
