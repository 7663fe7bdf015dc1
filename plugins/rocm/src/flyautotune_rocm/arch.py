"""AMD GPU architecture facts the backend needs: names, wave size, wave slots."""

from __future__ import annotations

import re
from typing import Optional

_GFX = re.compile(r"^gfx([0-9a-f]+)$")

#: CDNA2/3/4 chips: unified 512-entry VGPR+AGPR file, 8 wave slots per SIMD.
CDNA_UNIFIED = frozenset({"gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"})


def base_arch(name: str) -> str:
    """``"gfx942:sramecc+:xnack-"`` -> ``"gfx942"``; also drops ``-strict``-style suffixes."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"AMD GPU arch must be a non-empty string like 'gfx942', got {name!r}")
    arch = name.strip().lower().split(":", 1)[0].split("-", 1)[0]
    if not _GFX.match(arch):
        raise ValueError(f"AMD GPU arch {name!r} is not a gfx name (expected e.g. 'gfx942' or 'gfx1100')")
    return arch


def gfx_major(arch: str) -> int:
    """The generation number: 9 for gfx9xx, 10/11/12 for gfx10xx/11xx/12xx."""
    digits = base_arch(arch)[3:]
    # The last two characters are minor and stepping (hex), the rest the major.
    return int(digits[:-2])


def warp_size(arch: str) -> int:
    """Wave64 on gfx9 (GCN/CDNA), wave32 by default on gfx10+ (RDNA)."""
    return 64 if gfx_major(arch) <= 9 else 32


def max_waves_per_eu(arch: str) -> int:
    """Wave slots per SIMD, as LLVM's AMDGPU backend counts them.

    A ``amdgpu-waves-per-eu`` value above this is ignored by LLVM with only a
    warning, so the backend rejects it up front.
    """
    arch = base_arch(arch)
    major = gfx_major(arch)
    if arch in CDNA_UNIFIED:
        return 8
    if major <= 9:
        return 10
    if arch.startswith("gfx101"):
        return 20
    return 16


def vgpr_file(arch: str) -> Optional[tuple]:
    """``(registers per lane, allocation granule)`` for the VGPR occupancy limit, or None if unknown."""
    arch = base_arch(arch)
    if arch in CDNA_UNIFIED:
        return (512, 8)
    if gfx_major(arch) == 9:
        return (256, 4)
    return None
