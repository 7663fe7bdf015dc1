"""flyautotune_lower_compile_hints on MLIR modules: the attributes it leaves on each function."""

import pytest

import flyautotune as fat
from flyautotune_rocm import kernel_funcs, passthrough
from flyautotune_rocm.mlir import binding_ir, is_mlir_module


def funcs(module):
    """{name: (llvm.passthrough as dict, other attribute names)} for every gpu.func."""
    out = {}
    for gm in module.body.operations[0].regions[0].blocks[0].operations:
        if gm.operation.name != "gpu.func":
            continue
        attrs = gm.operation.attributes
        names = {attrs[i].name for i in range(len(attrs))}
        out[gm.operation.attributes["sym_name"].value] = (passthrough(gm), names)
    return out


def lower(pm, module, target, **hints):
    return pm.hook.flyautotune_lower_compile_hints(ir=module, hints=hints, target=target)


def test_module_detection_and_binding(two_kernel_module, mlir_ir):
    module = two_kernel_module()
    assert is_mlir_module(module)
    assert binding_ir(module) is mlir_ir
    assert not is_mlir_module(None) and not is_mlir_module({"operation": 1})
    assert [k.operation.attributes["sym_name"].value for k in kernel_funcs(module)] == ["k_passthrough", "k_rocdl"]


def test_positive_value_becomes_exact_passthrough_on_kernels_only(pm, gfx942, two_kernel_module):
    module = two_kernel_module()
    before = funcs(module)
    result = lower(pm, module, gfx942, waves_per_eu=4)
    assert result is module  # changed in place and returned
    after = funcs(module)
    # Unrelated entries kept in order, the old amdgpu-waves-per-eu entry replaced (not duplicated).
    assert after["k_passthrough"][0] == {
        "nounwind": None, "denormal-fp-math-f32": "preserve-sign", "amdgpu-waves-per-eu": "4,4"}
    assert list(after["k_passthrough"][0]) == ["nounwind", "denormal-fp-math-f32", "amdgpu-waves-per-eu"]
    assert str(module).count('"amdgpu-waves-per-eu"') == 2
    # The minimum-only rocdl attribute is replaced by the exact passthrough entry.
    assert after["k_rocdl"][0] == {"amdgpu-waves-per-eu": "4,4"}
    assert "rocdl.waves_per_eu" in before["k_rocdl"][1]
    assert "rocdl.waves_per_eu" not in after["k_rocdl"][1]
    # The device helper is untouched, even its own rocdl attribute.
    assert after["helper"] == before["helper"]


@pytest.mark.parametrize("value, text", [((2, 6), "2,6"), ("1,8", "1,8"), ([3, 3], "3,3")])
def test_range_forms(pm, gfx942, two_kernel_module, value, text):
    module = lower(pm, two_kernel_module(), gfx942, waves_per_eu=value)
    after = funcs(module)
    assert after["k_passthrough"][0]["amdgpu-waves-per-eu"] == text
    assert after["k_rocdl"][0]["amdgpu-waves-per-eu"] == text


@pytest.mark.parametrize("hints", [{}, {"waves_per_eu": None}, {"waves_per_eu": 0}, {"waves_per_eu": (0, 0)}])
def test_none_and_zero_leave_the_kernels_as_they_are(pm, gfx942, two_kernel_module, hints):
    module = two_kernel_module()
    text = str(module)
    assert lower(pm, module, gfx942, **hints) is module
    assert str(module) == text


def test_lowering_twice_is_stable(pm, gfx942, two_kernel_module):
    module = two_kernel_module()
    lower(pm, module, gfx942, waves_per_eu=2)
    once = str(module)
    lower(pm, module, gfx942, waves_per_eu=2)
    assert str(module) == once


def test_nested_contexts_through_the_core(gfx942, two_kernel_module):
    # The installed plugin (entry point) handles fat.lower_compile_hints.
    with fat.compile_hints(waves_per_eu=2):
        with fat.compile_hints(waves_per_eu=None, num_warps=None):
            inherit = fat.lower_compile_hints(ir=two_kernel_module(), target=gfx942)
        with fat.compile_hints(waves_per_eu=6):
            inner = fat.lower_compile_hints(ir=two_kernel_module(), target=gfx942)
        with fat.compile_hints(waves_per_eu=0):
            keep = fat.lower_compile_hints(ir=two_kernel_module(), target=gfx942)
    assert funcs(inherit)["k_rocdl"][0] == {"amdgpu-waves-per-eu": "2,2"}
    assert funcs(inner)["k_rocdl"][0] == {"amdgpu-waves-per-eu": "6,6"}
    # waves_per_eu=0 in the inner context: the kernel's own rocdl.waves_per_eu stays.
    assert "rocdl.waves_per_eu" in funcs(keep)["k_rocdl"][1]
    assert funcs(keep)["k_passthrough"][0]["amdgpu-waves-per-eu"] == "3,3"


def test_other_targets_are_left_to_other_backends(pm, two_kernel_module):
    module = two_kernel_module()
    text = str(module)
    cuda = fat.Target("cuda", "sm_90", 32)
    assert lower(pm, module, cuda, waves_per_eu=4) is None
    assert str(module) == text


def test_hints_mlir_cannot_take_are_refused(pm, gfx942, two_kernel_module):
    with pytest.raises(ValueError, match=r"'num_warps'=4 cannot be applied to an MLIR module on ROCm"):
        lower(pm, two_kernel_module(), gfx942, waves_per_eu=2, num_warps=4)
    with pytest.raises(ValueError, match="'maxnreg'=96 is not supported on ROCm"):
        lower(pm, two_kernel_module(), gfx942, maxnreg=96)
    with pytest.raises(ValueError, match="exceeds the 8 wave slots"):
        lower(pm, two_kernel_module(), gfx942, waves_per_eu=12)


def test_gpu_modules_nested_in_builtin_modules(pm, gfx942, parse, mlir_text):
    inner = mlir_text.module(mlir_text.rownorm("k", 16))
    module = parse("module {\n" + inner.replace("module attributes", "builtin.module attributes", 1) + "}\n")
    lower(pm, module, gfx942, waves_per_eu=3)
    assert '["amdgpu-waves-per-eu", "3,3"]' in str(module)


def test_a_gpu_module_op_on_its_own(pm, gfx942, two_kernel_module):
    module = two_kernel_module()
    gpu_module = module.body.operations[0]
    assert gpu_module.operation.name == "gpu.module"
    assert lower(pm, gpu_module, gfx942, waves_per_eu=5) is gpu_module
    assert funcs(module)["k_rocdl"][0] == {"amdgpu-waves-per-eu": "5,5"}


def test_a_hint_that_reaches_no_kernel_is_an_error_saying_why(pm, gfx942, parse, mlir_text):
    """A module in which no kernel takes ``waves_per_eu`` would come back unchanged and the hint would be
    lost: only helpers, no gpu.module, or a module lowered past convert-gpu-to-rocdl each say so."""
    helpers_only = parse(mlir_text.module(mlir_text.helper))
    with pytest.raises(ValueError, match=r"'waves_per_eu'=2: its 1 gpu.module op\(s\) hold no gpu.func marked "
                                         r"kernel \(only device helpers\)"):
        lower(pm, helpers_only, gfx942, waves_per_eu=2)
    lowered = parse("module {\n  llvm.func @k() {\n    llvm.return\n  }\n}\n")
    with pytest.raises(ValueError, match=r"it was lowered already \(convert-gpu-to-rocdl ran\)"):
        lower(pm, lowered, gfx942, waves_per_eu=2)
    assert lower(pm, lowered, gfx942, waves_per_eu=0) is lowered  # no hint asked: nothing to miss


def test_a_module_through_the_real_convert_gpu_to_rocdl_pass_says_it_was_lowered(pm, gfx942, two_kernel_module):
    """After the real pass the kernels are llvm.func ops (rocdl.kernel) inside the gpu.module: the message says
    the module was lowered already, not that it holds only device helpers."""
    from flydsl._mlir.passmanager import PassManager

    module = two_kernel_module()
    with module.context:
        PassManager.parse("builtin.module(gpu.module(convert-gpu-to-rocdl{chipset=gfx942}))").run(module.operation)
    with pytest.raises(ValueError) as info:
        lower(pm, module, gfx942, waves_per_eu=2)
    msg = str(info.value)
    assert "lowered already (convert-gpu-to-rocdl ran)" in msg and "2 marked rocdl.kernel" in msg
    assert "only device helpers" not in msg


def test_a_kernel_op_passed_alone_is_refused(pm, gfx942, two_kernel_module):
    kernel = next(iter(kernel_funcs(two_kernel_module())))
    assert not is_mlir_module(kernel)
    with pytest.raises(TypeError, match=r"takes an MLIR module \(builtin.module or gpu.module\) that holds gpu.func "
                                        r"kernels; got a gpu.func op: pass the module around it"):
        lower(pm, kernel, gfx942, waves_per_eu=2)


def test_a_false_hint_is_a_setting_the_mlir_module_cannot_take(pm, gfx942, two_kernel_module):
    with pytest.raises(ValueError, match=r"'enable_fp_fusion'=False cannot be applied to an MLIR module on ROCm"):
        lower(pm, two_kernel_module(), gfx942, waves_per_eu=2, enable_fp_fusion=False)


@pytest.mark.parametrize("attrs, lowest", [
    ("known_block_size = array<i32: 32, 8, 2>", 2),
    ("rocdl.reqd_work_group_size = array<i32: 1024, 1, 1>", 4),
    ("rocdl.max_flat_work_group_size = 768 : i32", 3),
    ('rocdl.flat_work_group_size = "1,1024"', 4),
    ('llvm.passthrough = ["nounwind", ["amdgpu-flat-work-group-size", "1,512"]]', 2),
])
def test_the_workgroup_size_in_the_ir_bounds_the_minimum(pm, gfx942, parse, mlir_text, attrs, lowest):
    text = mlir_text.module(mlir_text.rownorm("small", 16), mlir_text.rownorm("big", 16, attrs))
    module = parse(text)
    with pytest.raises(ValueError, match=f"kernel 'big' .* a minimum of at least {lowest}"):
        lower(pm, module, gfx942, waves_per_eu=lowest - 1)
    assert str(module) == str(parse(text))  # refused before any kernel was changed
    after = funcs(lower(pm, module, gfx942, waves_per_eu=(lowest, 8)))
    assert after["big"][0]["amdgpu-waves-per-eu"] == after["small"][0]["amdgpu-waves-per-eu"] == f"{lowest},8"
    # gfx10+: the wave size is picked later, so the bound is counted in waves of 64 (the lower one).
    with pytest.raises(ValueError, match=f"on gfx1100: kernel 'big' .* a minimum of at least {lowest}"):
        lower(pm, parse(text), fat.Target("rocm", "gfx1100", 32), waves_per_eu=lowest - 1)
