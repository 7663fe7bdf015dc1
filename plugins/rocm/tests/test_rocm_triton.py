"""Triton options from the lowering hook, checked by cross-compiling for gfx942 on the CPU."""

import pytest

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import flyautotune as fat  # noqa: E402
from flyautotune_rocm import compile_report, format_report, kernel_isa  # noqa: E402
from flyautotune_rocm.isa import computed_occupancy  # noqa: E402


@triton.jit
def row_rmsnorm(x_ptr, w_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    """A stand-in RMSNorm: one program per row, the whole row held in registers."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(y_ptr + row * N + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


SIGNATURE = {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "N": "i32", "eps": "fp32"}


@pytest.fixture(autouse=True)
def _quiet_triton(monkeypatch):
    # Triton 3.9 warns on every compile until this is set; the value is its current default.
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")


def options(pm, target, ir=None, **hints):
    return pm.hook.flyautotune_lower_compile_hints(ir=ir, hints=hints, target=target)


def test_hook_returns_triton_options(pm, gfx942):
    assert options(pm, gfx942, waves_per_eu=2, num_warps=8, num_stages=1) == {
        "waves_per_eu": 2, "num_warps": 8, "num_stages": 1}
    assert options(pm, gfx942, ir=row_rmsnorm, waves_per_eu=(3, 3)) == {"waves_per_eu": 3}
    # Triton's own option is exact-only; a range travels as an LLVM function attribute.
    assert options(pm, gfx942, waves_per_eu="2,4") == {"llvm_fn_attrs": (("amdgpu-waves-per-eu", "2,4"),)}
    assert options(pm, gfx942, waves_per_eu=0, num_warps=0) == {}
    assert options(pm, gfx942, matrix_instr_nonkdim=16, kpack=2) == {"matrix_instr_nonkdim": 16, "kpack": 2}


def test_hook_declines_what_it_does_not_own(pm, gfx942):
    assert options(pm, fat.Target("cuda", "sm_90", 32), waves_per_eu=2) is None
    assert options(pm, gfx942, ir="not a kernel", waves_per_eu=2) is None


def test_hook_refuses_hints_triton_on_rocm_cannot_honour(pm, gfx942):
    with pytest.raises(ValueError, match="'maxnreg'=64 is not supported on ROCm"):
        options(pm, gfx942, maxnreg=64)
    with pytest.raises(ValueError, match="exceeds the 8 wave slots per SIMD of gfx942"):
        options(pm, gfx942, waves_per_eu=9)


def test_options_through_the_core_api(gfx942):
    with fat.compile_hints(waves_per_eu=4, num_warps=4):
        with fat.compile_hints(waves_per_eu=2):
            assert fat.lower_compile_hints(ir=row_rmsnorm, target=gfx942) == {"waves_per_eu": 2, "num_warps": 4}


def test_waves_per_eu_reaches_gfx942_codegen():
    waves = (0, 1, 2, 4)
    configs = [fat.Config(BLOCK=16384, num_warps=4, waves_per_eu=w) for w in waves]
    reports = compile_report(row_rmsnorm, SIGNATURE, configs, arch="gfx942")
    print(format_report(reports))
    by_wpe = dict(zip(waves, reports))
    # Triton writes the attribute only for a positive value, exactly "N,N".
    assert by_wpe[0].waves_per_eu_attr is None
    for w in (1, 2, 4):
        assert by_wpe[w].waves_per_eu_attr == f"{w},{w}"
        # LLVM's own occupancy comment in the ISA follows the request.
        assert by_wpe[w].isa.occupancy == w and by_wpe[w].isa.occupancy_source == "llvm"
    # Four waves leave 128 VGPRs: the row no longer fits and spills.
    assert by_wpe[4].isa.vgpr_alloc <= 128 < by_wpe[0].isa.vgpr_alloc
    assert by_wpe[4].isa.vgpr_spills > 0 == by_wpe[0].isa.vgpr_spills
    assert len({r.binary_sha256 for r in reports}) == len(waves)


def test_occupancy_arithmetic_matches_llvm():
    # The MLIR path has no occupancy comment and relies on this arithmetic.
    configs = [fat.Config(BLOCK=b, num_warps=4, waves_per_eu=w) for b in (4096, 16384) for w in (0, 1, 2, 8)]
    for r in compile_report(row_rmsnorm, SIGNATURE, configs, arch="gfx942"):
        i = r.isa
        assert computed_occupancy("gfx942", i.vgpr_alloc, i.sgprs, i.lds_bytes, i.wavefront_size,
                                  i.max_flat_workgroup_size) == i.occupancy, r.config


def test_range_and_gfx950():
    span, exact = compile_report(
        row_rmsnorm, SIGNATURE,
        [{"BLOCK": 8192, "waves_per_eu": (2, 4)}, {"BLOCK": 8192, "waves_per_eu": 2}],
        arch="gfx950")
    assert span.arch == "gfx950" and span.waves_per_eu_attr == "2,4" and exact.waves_per_eu_attr == "2,2"
    assert 2 <= span.isa.occupancy <= 4 and exact.isa.occupancy == 2
    assert span.binary_sha256 != exact.binary_sha256


def test_report_rejects_a_kwarg_the_kernel_does_not_take():
    with pytest.raises(ValueError, match=r"config kwarg 'BLOCK_SIZE'=1024 is not an argument of row_rmsnorm"):
        compile_report(row_rmsnorm, SIGNATURE, [fat.Config(BLOCK_SIZE=1024)])


def test_kernel_isa_reads_one_kernel_by_name():
    (r,) = compile_report(row_rmsnorm, SIGNATURE, [fat.Config(BLOCK=1024)], arch="gfx942")
    assert r.kernel == "row_rmsnorm" and r.isa.name == "row_rmsnorm"
    assert r.isa.wavefront_size == 64 and r.isa.max_flat_workgroup_size == 256
    assert r.to_dict()["isa"]["vgprs"] == r.isa.vgprs
    with pytest.raises(KeyError, match="no kernel 'other'"):
        kernel_isa("", "other")


def test_compile_candidate_takes_ready_constexprs_and_hints():
    # The path an adopter's compile_spec(shape, dtype, config) feeds: constexprs already resolved.
    from flyautotune_rocm import compile_candidate

    r = compile_candidate(row_rmsnorm, SIGNATURE, constexprs={"BLOCK": 4096},
                          hints={"waves_per_eu": 2, "num_warps": 8}, arch="gfx942")
    assert r.waves_per_eu_attr == "2,2" and r.isa.occupancy == 2
    assert r.isa.max_flat_workgroup_size == 8 * 64
    assert r.config.hints == {"waves_per_eu": 2, "num_warps": 8}


def test_waves_per_eu_below_what_num_warps_puts_on_a_simd_is_refused(pm, gfx942, monkeypatch):
    # A workgroup of num_warps waves puts ceil(num_warps / 4) on each SIMD; LLVM ignores a lower minimum.
    with pytest.raises(ValueError) as info:
        pm.hook.flyautotune_validate_hints(hints={"num_warps": 16, "waves_per_eu": 3}, target=gfx942)
    msg = str(info.value)
    assert "'waves_per_eu': 3 with num_warps=16" in msg and "at least 4" in msg
    for hints in ({"num_warps": 8, "waves_per_eu": 1}, {"num_warps": 8, "waves_per_eu": (1, 4)}):
        with pytest.raises(ValueError, match="at least 2"):
            pm.hook.flyautotune_validate_hints(hints=hints, target=gfx942)
    for hints in ({"num_warps": 16, "waves_per_eu": 0}, {"num_warps": 16, "waves_per_eu": 4},
                  {"num_warps": 8, "waves_per_eu": (2, 8)}, {"num_warps": 4, "waves_per_eu": 1},
                  {"waves_per_eu": 1}, {"num_warps": 0, "waves_per_eu": 1}):
        pm.hook.flyautotune_validate_hints(hints=hints, target=gfx942)
    # The evidence: with the check out of the way, those values build the binary of no hint.
    import flyautotune_rocm.hints as rocm_hints

    monkeypatch.setattr(rocm_hints, "_check_waves_against_warps", lambda hints, target: None)
    waves = (0, 1, 3, (2, 8), 4)
    reports = compile_report(row_rmsnorm, SIGNATURE,
                             [fat.Config(BLOCK=16384, num_warps=16, waves_per_eu=w) for w in waves], arch="gfx942")
    shas = [r.binary_sha256 for r in reports]
    assert len(set(shas[:4])) == 1 and shas[4] != shas[0]


def test_the_same_rule_holds_on_rdna_and_counts_two_simds_in_cu_mode(pm, monkeypatch):
    # gfx10+: a workgroup processor (WGP mode, the default) has 4 SIMDs, a CU (wgp_cu_mode='cu') 2.
    gfx1100 = fat.Target("rocm", "gfx1100", 32)
    with pytest.raises(ValueError, match=r"'waves_per_eu': 1 with num_warps=8 on gfx1100: .* at least 2"):
        pm.hook.flyautotune_validate_hints(hints={"num_warps": 8, "waves_per_eu": 1}, target=gfx1100)
    with pytest.raises(ValueError, match=r"'waves_per_eu': 3 with num_warps=8 on gfx1100 in CU mode: .* at least 4"):
        pm.hook.flyautotune_validate_hints(hints={"num_warps": 8, "waves_per_eu": 3, "wgp_cu_mode": "cu"},
                                           target=gfx1100)
    for hints in ({"num_warps": 8, "waves_per_eu": 2}, {"num_warps": 8, "waves_per_eu": 4, "wgp_cu_mode": "cu"}):
        pm.hook.flyautotune_validate_hints(hints=hints, target=gfx1100)
    # The evidence: with the check out of the way, those values build the binary of no hint.
    import flyautotune_rocm.hints as rocm_hints

    monkeypatch.setattr(rocm_hints, "_check_waves_against_warps", lambda hints, target: None)
    for mode, waves in ((None, (0, 1, 2)), ("cu", (0, 3, 4))):
        extra = {"wgp_cu_mode": mode} if mode else {}
        reports = compile_report(row_rmsnorm, SIGNATURE, [fat.Config(BLOCK=16384, num_warps=8, waves_per_eu=w,
                                                                     compile_hints=extra) for w in waves],
                                 arch="gfx1100")
        unhinted, ignored, honoured = (r.binary_sha256 for r in reports)
        assert unhinted == ignored != honoured
