"""flyautotune_validate_hints on ROCm targets: accepted forms and the error text."""

import pytest

import flyautotune as fat
from flyautotune_rocm import hints as rh


@pytest.mark.parametrize(
    "value, span",
    [(None, None), (0, None), ((0, 0), None), (1, (1, 1)), (8, (8, 8)), ((2, 4), (2, 4)),
     ([1, 8], (1, 8)), ("2,4", (2, 4)), (" 3 , 3 ", (3, 3))],
)
def test_waves_per_eu_forms(value, span):
    assert rh.waves_per_eu_range(value, "gfx942") == span


@pytest.mark.parametrize(
    "value, exc, words",
    [
        (-1, ValueError, ["waves_per_eu", "-1", "negative"]),
        (True, TypeError, ["waves_per_eu", "True", "bool"]),
        (2.0, TypeError, ["waves_per_eu", "2.0", "float"]),
        ((4, 2), ValueError, ["minimum 4 > maximum 2", "(4, 2)"]),
        ("4,2", ValueError, ["minimum 4 > maximum 2", "'4,2'"]),
        ("two,four", ValueError, ["'two,four'", "non-integer"]),
        ("2", ValueError, ["'2'", "'min,max' string"]),
        ((1, 2, 3), ValueError, ["(1, 2, 3)", "(min, max) pair"]),
        ((0, 4), ValueError, ["(0, 4)", "minimum 0"]),
        ((-1, 2), ValueError, ["(-1, 2)", "negative"]),
        (9, ValueError, ["9", "exceeds the 8 wave slots", "gfx942", "0..8"]),
        ((1, 10), ValueError, ["(1, 10)", "exceeds the 8 wave slots"]),
    ],
)
def test_waves_per_eu_errors_name_the_value(pm, gfx942, value, exc, words):
    with pytest.raises(exc) as info:
        pm.hook.flyautotune_validate_hints(hints={"waves_per_eu": value}, target=gfx942)
    for word in words:
        assert word in str(info.value)


def test_wave_slot_limit_depends_on_arch(pm):
    # RDNA3 has 16 wave slots per SIMD, CDNA3 has 8.
    pm.hook.flyautotune_validate_hints(hints={"waves_per_eu": 16}, target=fat.Target("rocm", "gfx1100", 32))
    with pytest.raises(ValueError, match="16 wave slots per SIMD of gfx1100"):
        pm.hook.flyautotune_validate_hints(hints={"waves_per_eu": 17}, target=fat.Target("rocm", "gfx1100", 32))


def test_maxnreg_is_rejected_with_a_one_line_reason(pm, gfx942):
    with pytest.raises(ValueError) as info:
        pm.hook.flyautotune_validate_hints(hints={"maxnreg": 128}, target=gfx942)
    msg = str(info.value)
    assert "\n" not in msg
    assert "'maxnreg'=128 is not supported on ROCm" in msg
    assert "use waves_per_eu" in msg


def test_unknown_hint_lists_what_rocm_accepts(pm, gfx942):
    with pytest.raises(ValueError, match=r"'unroll'=4 is not understood by the ROCm backend; accepted: .*waves_per_eu"):
        pm.hook.flyautotune_validate_hints(hints={"unroll": 4}, target=gfx942)


@pytest.mark.parametrize("value, ok", [(0, True), (1, True), (4, True), (16, True), (3, False), (32, False)])
def test_num_warps_power_of_two_within_a_workgroup(pm, gfx942, value, ok):
    call = lambda: pm.hook.flyautotune_validate_hints(hints={"num_warps": value}, target=gfx942)  # noqa: E731
    if ok:
        call()
    else:
        with pytest.raises(ValueError, match=rf"'num_warps': {value} on gfx942 \(wave64\) must be a power of two up to 16"):
            call()


def test_other_backends_hints_are_not_judged(pm):
    # maxnreg is fine on a CUDA target: this plugin does not own it.
    pm.hook.flyautotune_validate_hints(hints={"maxnreg": 128}, target=fat.Target("cuda", "sm_90", 32))


def test_config_hints_validate_as_a_config_would_send_them(pm, gfx942):
    cfg = fat.Config(BLOCK=1024, waves_per_eu=(2, 4), num_warps=8)
    pm.hook.flyautotune_validate_hints(hints=cfg.hints, target=gfx942)


def test_maxnreg_zero_keeps_the_default_and_is_a_no_op(pm, gfx942):
    # 0 means "unset" for int hints (core docs); CUDA takes waves_per_eu=0 the same way.
    pm.hook.flyautotune_validate_hints(hints={"maxnreg": 0}, target=gfx942)
    with fat.compile_hints(maxnreg=0, num_warps=4):
        assert fat.lower_compile_hints(ir=None, target=gfx942) == {"num_warps": 4}
    for bad in (64, 1):
        with pytest.raises(ValueError, match=f"'maxnreg'={bad} is not supported on ROCm"):
            pm.hook.flyautotune_validate_hints(hints={"maxnreg": bad}, target=gfx942)
    with pytest.raises(ValueError, match="'maxnreg'=False is not supported on ROCm"):
        pm.hook.flyautotune_validate_hints(hints={"maxnreg": False}, target=gfx942)


def test_maxnreg_zero_on_an_mlir_module(pm, gfx942, mlir_ir):
    module = mlir_ir.Module.parse("module attributes {gpu.container_module} { gpu.module @m { "
                                  "gpu.func @k() kernel { gpu.return } } }", context=mlir_ir.Context())
    with fat.compile_hints(maxnreg=0, waves_per_eu=2):
        assert fat.lower_compile_hints(ir=module, target=gfx942) is module
