"""The NVIDIA report hooks: target names, ownership, and the occupancy calculator."""

from __future__ import annotations

import pytest

import flyautotune as fat
from flyautotune_cuda.report import CUDA_TARGETS, cuda_occupancy, flyautotune_compile_report, \
    flyautotune_report_targets


def test_offers_the_sm_targets_it_has_tables_for():
    targets = flyautotune_report_targets()
    assert set(targets) == {"sm_80", "sm_86", "sm_89", "sm_90"}
    assert targets["sm_90"] == fat.Target("cuda", "sm_90", 32)


def test_leaves_other_backends_alone():
    assert flyautotune_compile_report(spec=None, config=fat.Config(), hints={},
                                      target=fat.Target("rocm", "gfx942", 64)) is None


def test_the_installed_plugin_answers_the_hook():
    pm = fat.build_plugin_manager()
    if "cuda" not in pm.plugin_infos:
        pytest.skip("flyautotune-cuda is not installed in this environment")
    merged = {k: v for d in pm.hook.flyautotune_report_targets() for k, v in (d or {}).items()}
    assert "sm_90" in merged


def test_cuda_occupancy_follows_the_occupancy_calculator():
    h100 = CUDA_TARGETS["sm_90"]
    # 154 registers -> 4928 per warp, allocated as 5120: 12 warps fit in 65536 registers
    assert cuda_occupancy(h100, 154, 1024, 4) == (12, "registers")
    # 32 registers, 4 warps: 16 blocks by registers, 16 by warps, 32 by blocks -> 64 warps
    assert cuda_occupancy(h100, 32, 0, 4)[0] == 64
    # 100 KiB of shared memory per block: two blocks fit in 228 KiB
    assert cuda_occupancy(h100, 32, 100 * 1024, 4) == (8, "shared")
    # more shared memory than one block may have: nothing runs
    assert cuda_occupancy(h100, 32, 240 * 1024, 4) == (0, "shared")
    assert cuda_occupancy(CUDA_TARGETS["sm_86"], 32, 0, 1) == (16, "blocks")


@pytest.mark.parametrize("registers,num_warps,warps", [(192, 1, 8), (192, 2, 8), (192, 4, 8), (80, 1, 24), (80, 2, 24)])
def test_registers_are_shared_out_per_sub_partition(registers, num_warps, warps):
    """cuda_occupancy.h: each of the 4 schedulers holds 16384 registers and a warp's registers lie in one, so
    192 registers (6144 a warp) fit 2 warps a quarter, 8 an SM, however few warps a block has."""
    assert cuda_occupancy(CUDA_TARGETS["sm_90"], registers, 0, num_warps) == (warps, "registers")
