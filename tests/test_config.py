import json

import pytest

import flyautotune as fat


def test_hint_aliases_land_in_hints_and_kwargs_stay_kwargs():
    cfg = fat.Config(BLOCK_THREADS=256, waves_per_eu=2, num_warps=4)
    assert cfg.kwargs == {"BLOCK_THREADS": 256}
    assert cfg.hints == {"waves_per_eu": 2, "num_warps": 4}


def test_compile_hints_envelope_and_alias_agree():
    cfg = fat.Config(BLOCK=128, compile_hints={"maxnreg": 128, "num_warps": 4})
    assert cfg.hints == {"maxnreg": 128, "num_warps": 4}
    with pytest.raises(ValueError, match="'num_warps' given twice"):
        fat.Config(num_warps=8, compile_hints={"num_warps": 4})


def test_round_trip_through_json():
    cfg = fat.Config(BLOCK=128, TILE=(2, 4), waves_per_eu=(1, 2), compile_hints={"kpack": 2})
    again = fat.Config.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    assert hash(again) == hash(cfg)
    assert again.kwargs == {"BLOCK": 128, "TILE": (2, 4)}


def test_equal_configs_hash_alike_regardless_of_keyword_order():
    assert fat.Config(A=1, B=2, num_warps=4) == fat.Config(num_warps=4, B=2, A=1)
    assert len({fat.Config(A=1, B=2), fat.Config(B=2, A=1)}) == 1


def test_pre_hook_is_never_persisted():
    cfg = fat.Config(BLOCK=1, pre_hook=lambda kw: None)
    with pytest.raises(TypeError, match="pre_hook"):
        cfg.to_dict()


@pytest.mark.parametrize(
    "data, message",
    [
        ({"kwargs": {}, "hints": {}}, "unknown field"),
        ({"kwargs": [1]}, "must be mappings"),
        ({"kwargs": {"pre_hook": 1}}, "reserved"),
        ({"compile_hints": {"num_warps": -1}}, "negative"),
    ],
)
def test_from_dict_rejects_bad_data(data, message):
    with pytest.raises((TypeError, ValueError), match=message):
        fat.Config.from_dict(data)


def test_unhashable_kwarg_is_a_clear_error():
    with pytest.raises(TypeError, match=r"kwarg BLOCK=\{'a': 1\} is not hashable"):
        fat.Config(BLOCK={"a": 1})
    assert fat.Config(BLOCK=[1, 2]).kwargs == {"BLOCK": (1, 2)}  # lists freeze to tuples


def test_numpy_scalar_kwargs_become_their_python_values():
    """``fat.Config(BLOCK=np.int64(4))`` (NumPy arithmetic's result) is ``fat.Config(BLOCK=4)``: the same config to a
    kernel, equal to it, and one a store can keep (to_dict refused it, deep inside a search)."""
    np = pytest.importorskip("numpy")
    c = fat.Config(BLOCK=np.int64(4), SIZES=[np.int32(1), 2], F=np.float32(0.5))
    assert c == fat.Config(BLOCK=4, SIZES=(1, 2), F=0.5) and type(c.kwargs["BLOCK"]) is int
    assert c.to_dict() == {"kwargs": {"BLOCK": 4, "F": 0.5, "SIZES": [1, 2]}, "compile_hints": {}}
    with pytest.raises(ValueError, match="not a finite number"):
        fat.Config(F=np.float64("nan"))
