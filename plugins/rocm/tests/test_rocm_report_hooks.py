"""The ROCm report hooks: gfx target names, ownership, and one candidate compiled through the hook."""

from __future__ import annotations

import pytest

import flyautotune as fat
from flyautotune_rocm.report import flyautotune_compile_report, flyautotune_report_targets


def test_offers_the_gfx_targets():
    targets = flyautotune_report_targets()
    assert set(targets) == {"gfx90a", "gfx942", "gfx950"}
    assert targets["gfx942"] == fat.Target("rocm", "gfx942", 64)


def test_leaves_other_backends_alone():
    assert flyautotune_compile_report(spec=None, config=fat.Config(), hints={},
                                      target=fat.Target("cuda", "sm_90", 32)) is None


def test_compiles_one_candidate_into_a_resource_row():
    triton = pytest.importorskip("triton")
    pytest.importorskip("triton.backends.amd")
    import triton.language as tl

    from flyautotune.report import KernelSpec

    def _copy(X, Y, SIZE: tl.constexpr):
        offs = tl.arange(0, SIZE)
        tl.store(Y + offs, tl.load(X + offs) * 2.0)

    spec = KernelSpec(triton.runtime.jit.JITFunction(_copy), {"X": "*fp32", "Y": "*fp32"}, {"SIZE": 64})
    config = fat.Config(BLOCK=2, waves_per_eu=2)
    row = flyautotune_compile_report(spec=spec, config=config, hints={"num_warps": 2, "waves_per_eu": 2},
                                     target=fat.Target("rocm", "gfx942", 64))
    assert row.config == config and row.error is None
    assert row.registers > 0 and row.sgprs > 0 and row.occupancy_max == 8 and row.occupancy_unit == "waves/SIMD"
    assert row.labels["registers"] == "VGPR alloc" and len(row.binary_sha256) == 64
    assert row.details["waves_per_eu_attr"] == "2,2"


def test_report_target_takes_the_target_id_rocminfo_prints(pm):
    from flyautotune.report import parse_target

    for text in ("gfx942:sramecc+:xnack-", "GFX942:xnack+", "gfx950:sramecc-"):
        assert parse_target(text, pm) == fat.Target("rocm", text.lower().split(":")[0], 64)
    with pytest.raises(ValueError, match="is not a supported target"):
        parse_target("gfx9999:xnack-", pm)


def test_the_register_column_is_the_allocation_occupancy_follows():
    """With AGPRs in use the VGPR count (.vgpr_count) is below the allocation the occupancy comes from."""
    triton = pytest.importorskip("triton")
    pytest.importorskip("triton.backends.amd")
    import sys
    from pathlib import Path

    from flyautotune.report import KernelSpec

    sys.path.insert(0, str(Path(__file__).parent))
    from test_rocm_triton import SIGNATURE, row_rmsnorm

    spec = KernelSpec(row_rmsnorm, SIGNATURE, {"BLOCK": 16384})
    row = flyautotune_compile_report(spec=spec, config=fat.Config(), hints={"num_warps": 4, "waves_per_eu": 1},
                                     target=fat.Target("rocm", "gfx942", 64))
    assert row.details["vgprs"] < row.details["vgpr_alloc"]  # 242 VGPRs, 257 allocated (AGPRs)
    assert row.registers == row.details["vgpr_alloc"] and row.labels["registers"] == "VGPR alloc"
    assert row.occupancy == 1
