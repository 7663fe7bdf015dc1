"""The MLIR lowering checked on real codegen: ROCDL -> LLVM IR -> AMDGCN for gfx942 and gfx950."""

import re

import pytest

import flyautotune as fat
from flyautotune_rocm import (
    format_report,
    kernel_isa,
    llvm_fn_attribute,
    mlir_compile_report,
    mlir_to_amdgcn,
    mlir_to_llvm_ir,
)

WAVES = (0, 1, 2, 4, 8)


def descriptor(asm: str, kernel: str) -> str:
    m = re.search(rf"\.amdhsa_kernel {kernel}\n(.*?)\.end_amdhsa_kernel", asm, re.S)
    assert m, f"no kernel descriptor for {kernel}"
    return m.group(1)


def lower(module, target, **hints):
    return fat.lower_compile_hints(ir=module, target=target, hints=hints)


def test_passthrough_reaches_the_llvm_function(gfx942, two_kernel_module):
    module = lower(two_kernel_module(), gfx942, waves_per_eu=4)
    ll = mlir_to_llvm_ir(module, "gfx942")
    for kernel in ("k_passthrough", "k_rocdl"):
        assert llvm_fn_attribute(ll, kernel, "amdgpu-waves-per-eu") == "4,4"
    # Unrelated passthrough entries reach LLVM too.
    assert llvm_fn_attribute(ll, "k_passthrough", "denormal-fp-math-f32") == "preserve-sign"
    group = re.search(r"define amdgpu_kernel void @k_passthrough\(.*\) #(\d+)", ll).group(1)
    assert re.search(rf"^attributes #{group} = {{ nounwind ", ll, re.M)
    # The helper keeps its own attributes (its rocdl.waves_per_eu=1 is translated as "1").
    helper_group = re.search(r"define float @helper\(.*\) #(\d+)", ll).group(1)
    assert re.search(rf'^attributes #{helper_group} = {{ noinline "amdgpu-waves-per-eu"="1" }}', ll, re.M)


def test_without_lowering_rocdl_attribute_wins_and_plain_passthrough_is_dropped(parse, mlir_text):
    # Why the lowering writes llvm.passthrough and removes rocdl.waves_per_eu:
    # upstream ROCDL lowering ignores an unprefixed passthrough, and the
    # minimum-only rocdl attribute overrides the passthrough value.
    module = parse(mlir_text.module(
        mlir_text.rownorm("plain", 16, 'passthrough = [["amdgpu-waves-per-eu", "3,3"]]'),
        mlir_text.rownorm("both", 16, 'llvm.passthrough = [["amdgpu-waves-per-eu", "2,2"]], rocdl.waves_per_eu = 1 : i32'),
    ))
    ll = mlir_to_llvm_ir(module, "gfx942")
    assert llvm_fn_attribute(ll, "plain", "amdgpu-waves-per-eu") is None
    assert llvm_fn_attribute(ll, "both", "amdgpu-waves-per-eu") == "1"


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_register_budget_follows_waves_per_eu(arch, parse, mlir_text):
    def build(n):
        return parse(mlir_text.module(mlir_text.rownorm("rownorm", n)))

    reports = mlir_compile_report(build, [fat.Config(n=128, waves_per_eu=w) for w in WAVES], arch=arch)
    print(format_report(reports))
    by_wpe = {w: r for w, r in zip(WAVES, reports)}
    # The unhinted kernel needs more than the 128 VGPRs that 4 waves per SIMD leave.
    assert by_wpe[0].isa.vgpr_alloc > 128 and by_wpe[0].waves_per_eu_attr is None
    for w in (1, 2, 4, 8):
        isa = by_wpe[w].isa
        assert by_wpe[w].waves_per_eu_attr == f"{w},{w}"
        # 512 VGPRs per lane on CDNA3/4, shared by the waves of a SIMD.
        assert isa.vgpr_alloc <= min(512 // w, 257)
        assert isa.occupancy == w
    # The budget is capped as waves_per_eu rises, and the cap costs spills.
    assert by_wpe[4].isa.vgpr_alloc <= 128 < by_wpe[0].isa.vgpr_alloc
    assert by_wpe[8].isa.vgpr_alloc <= 64
    assert by_wpe[8].isa.vgpr_spills > by_wpe[4].isa.vgpr_spills > 0 == by_wpe[0].isa.vgpr_spills
    assert by_wpe[8].isa.scratch_bytes > by_wpe[4].isa.scratch_bytes > 0
    # Every candidate is a distinct binary.
    assert len({r.binary_sha256 for r in reports}) == len(WAVES)


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_kernel_descriptor_differs_and_unhinted_kernel_is_unchanged(arch, parse, mlir_text):
    text = mlir_text.module(mlir_text.rownorm("rownorm", 128))
    target = fat.Target("rocm", arch, 64)
    original = mlir_to_amdgcn(parse(text), arch)
    for hints in ({}, {"waves_per_eu": None}, {"waves_per_eu": 0}):
        assert mlir_to_amdgcn(lower(parse(text), target, **hints), arch) == original
    hinted = mlir_to_amdgcn(lower(parse(text), target, waves_per_eu=4), arch)
    assert descriptor(hinted, "rownorm") != descriptor(original, "rownorm")
    assert f'.amdgcn_target "amdgcn-amd-amdhsa-unknown-{arch}"' in hinted
    assert kernel_isa(hinted, "rownorm").vgpr_alloc < kernel_isa(original, "rownorm").vgpr_alloc


def test_range_gives_the_compiler_room_between_bounds(parse, mlir_text):
    def build(n):
        return parse(mlir_text.module(mlir_text.rownorm("rownorm", n)))

    exact2, exact4, span = mlir_compile_report(
        build, [fat.Config(n=128, waves_per_eu=2), fat.Config(n=128, waves_per_eu=4),
                fat.Config(n=128, waves_per_eu=(2, 4))], arch="gfx942")
    assert span.waves_per_eu_attr == "2,4"
    assert 2 <= span.isa.occupancy <= 4
    assert span.binary_sha256 not in (exact2.binary_sha256, exact4.binary_sha256)


@pytest.mark.parametrize("arch, slots", [("gfx942", 8), ("gfx950", 8), ("gfx908", 10), ("gfx1030", 16), ("gfx1010", 20)])
def test_llvm_ignores_waves_per_eu_above_the_wave_slots(arch, slots, parse, mlir_text):
    # Why validation rejects waves_per_eu above max_waves_per_eu(arch): LLVM
    # only warns and compiles the kernel as if there were no hint.
    def isa(w):
        attrs = f'llvm.passthrough = [["amdgpu-waves-per-eu", "{w},{w}"]]' if w else ""
        return kernel_isa(mlir_to_amdgcn(parse(mlir_text.module(mlir_text.rownorm("k", 64, attrs))), arch), "k")

    unhinted, at_limit, over = isa(0), isa(slots), isa(slots + 1)
    assert at_limit.vgpr_alloc < unhinted.vgpr_alloc
    assert over.vgpr_alloc == unhinted.vgpr_alloc and over.vgpr_spills == unhinted.vgpr_spills == 0
    target = fat.Target("rocm", arch, 64 if arch.startswith("gfx9") else 32)
    with pytest.raises(ValueError, match=f"exceeds the {slots} wave slots per SIMD of {arch}"):
        lower(parse(mlir_text.module(mlir_text.rownorm("k", 64))), target, waves_per_eu=slots + 1)


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_a_minimum_below_what_the_kernels_workgroup_implies_is_refused(arch, parse, mlir_text):
    # A 1024-thread workgroup is 16 waves: at least 4 on each of a CU's 4 SIMDs. LLVM ignores a lower
    # minimum and builds the kernel of no hint, so those candidates would time one binary.
    text = mlir_text.module(mlir_text.rownorm("k", 128, "known_block_size = array<i32: 1024, 1, 1>"))
    target = fat.Target("rocm", arch, 64)

    def isa(w):
        module = parse(text)
        if w:  # written directly, as the lowering would have before it refused
            module = parse(text.replace("known_block_size", f'llvm.passthrough = [["amdgpu-waves-per-eu", "{w},{w}"]], '
                                                             "known_block_size"))
        return mlir_to_amdgcn(module, arch)

    unhinted = isa(0)
    assert isa(3) == unhinted != isa(4)
    for value in (1, 3, (2, 8)):
        with pytest.raises(ValueError, match=rf"compile hint 'waves_per_eu': {re.escape(repr(value))} on {arch}: "
                                             r"kernel 'k' has workgroups of 1024 threads, which put at least 4 waves on each SIMD.*"
                                             r"accepted: 0 \(the kernel's own\) or a minimum of at least 4"):
            lower(parse(text), target, waves_per_eu=value)
    assert mlir_to_amdgcn(lower(parse(text), target, waves_per_eu=4), arch) == isa(4)
