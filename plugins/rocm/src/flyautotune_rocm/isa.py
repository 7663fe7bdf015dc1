"""Read register use, spills, LDS and occupancy from AMDGCN assembly.

Sources, per kernel: the code-object metadata (``.vgpr_count``,
``.sgpr_count``, ``.*_spill_count``, ``.group_segment_fixed_size``,
``.private_segment_fixed_size``), the kernel descriptor
(``.amdhsa_next_free_vgpr``, which on CDNA counts VGPRs and AGPRs together),
and LLVM's ``; Occupancy: N`` comment when the assembly has it (Triton's
does; MLIR's ``gpu-module-to-binary{format=isa}`` output does not, so the
occupancy is then computed from the register counts).
"""

from __future__ import annotations

import re
from typing import List, Optional

import attrs

from . import arch as _arch

_META_START = re.compile(r"^\s*\.amdgpu_metadata\s*$", re.M)
_META_END = re.compile(r"^\s*\.end_amdgpu_metadata\s*$", re.M)
_KD = re.compile(r"^\s*\.amdhsa_kernel\s+(\S+)\s*$", re.M)
_KD_FIELD = re.compile(r"^\s*\.amdhsa_(\w+)\s+(\S+)\s*$", re.M)
_OCCUPANCY = re.compile(r"^\s*;\s*Occupancy:\s*(\d+)\s*$", re.M)
_TARGET = re.compile(r'\.amdgcn_target\s+"[^"]*-(gfx[0-9a-f]+)[^"]*"')

#: LDS bytes per CU (workgroup processor) for the LDS occupancy limit.
_LDS_PER_CU = {"gfx90a": 65536, "gfx940": 65536, "gfx941": 65536, "gfx942": 65536, "gfx950": 163840}
_SIMDS_PER_CU = 4


@attrs.frozen
class KernelIsa:
    """Resource use of one kernel, as the AMDGCN assembly states it."""

    name: str
    arch: Optional[str]
    vgprs: int  #: architected VGPRs (``.vgpr_count``)
    agprs: int  #: accumulation VGPRs (``.agpr_count``)
    vgpr_alloc: int  #: VGPRs allocated per lane, AGPRs included (``.amdhsa_next_free_vgpr``)
    sgprs: int  #: ``.sgpr_count``
    vgpr_spills: int
    sgpr_spills: int
    scratch_bytes: int  #: private segment bytes per lane (spill slots, stack)
    lds_bytes: int  #: static LDS per workgroup
    wavefront_size: int
    max_flat_workgroup_size: int
    occupancy: Optional[int]  #: waves per SIMD
    occupancy_source: str  #: ``"llvm"`` (the compiler's comment) or ``"computed"`` or ``"unknown"``

    @property
    def spills(self) -> int:
        return self.vgpr_spills + self.sgpr_spills

    def to_dict(self) -> dict:
        return attrs.asdict(self)


def _metadata_kernels(asm: str) -> List[dict]:
    start = _META_START.search(asm)
    if not start:
        return []
    end = _META_END.search(asm, start.end())
    block = asm[start.end(): end.start() if end else len(asm)]
    kernels: List[dict] = []
    in_kernels = False
    for line in block.splitlines():
        if line.startswith("amdhsa.kernels:"):
            in_kernels = True
            continue
        if in_kernels and line and not line.startswith(" "):
            in_kernels = False
        if not in_kernels:
            continue
        m = re.match(r"^  - \.([\w]+):\s*(.*)$", line)
        if m:
            kernels.append({m.group(1): m.group(2).strip()})
            continue
        m = re.match(r"^    \.([\w]+):\s*(.*)$", line)
        if m and kernels:
            kernels[-1][m.group(1)] = m.group(2).strip()
    return kernels


def _descriptors(asm: str) -> dict:
    """``{kernel: ({amdhsa field: value}, llvm occupancy or None)}``."""
    out = {}
    marks = list(_KD.finditer(asm))
    for i, mark in enumerate(marks):
        stop = marks[i + 1].start() if i + 1 < len(marks) else len(asm)
        region = asm[mark.end():stop]
        end = region.find(".end_amdhsa_kernel")
        fields = dict(_KD_FIELD.findall(region[: end if end >= 0 else len(region)]))
        # LLVM prints the function's resource comments after its descriptor.
        occ = _OCCUPANCY.search(region)
        out[mark.group(1)] = (fields, int(occ.group(1)) if occ else None)
    return out


def _int(value, default: int = 0) -> int:
    try:
        return int(str(value).strip().strip("'\""), 0)
    except (TypeError, ValueError):
        return default


def computed_occupancy(arch: str, vgpr_alloc: int, sgprs: int, lds_bytes: int = 0,
                       wavefront_size: int = 64, max_flat_workgroup_size: int = 0) -> Optional[int]:
    """Waves per SIMD from register and LDS use, by LLVM's rules for gfx9/CDNA; None elsewhere."""
    regfile = _arch.vgpr_file(arch)
    if regfile is None:
        return None
    regs, granule = regfile
    alloc = max(granule, -(-max(vgpr_alloc, 1) // granule) * granule)
    waves = min(_arch.max_waves_per_eu(arch), regs // alloc)
    # GFX8/9 SGPR limits (LLVM GCNSubtarget::getOccupancyWithNumSGPRs).
    sgpr_waves = 10 if sgprs <= 80 else 9 if sgprs <= 88 else 8 if sgprs <= 100 else 7
    waves = min(waves, sgpr_waves)
    lds_total = _LDS_PER_CU.get(_arch.base_arch(arch))
    if lds_bytes and lds_total and max_flat_workgroup_size:
        groups = lds_total // lds_bytes
        waves_per_group = -(-max_flat_workgroup_size // wavefront_size)
        waves = min(waves, max(1, groups * waves_per_group // _SIMDS_PER_CU))
    return waves


def parse_amdgcn(asm: str, arch: Optional[str] = None) -> List[KernelIsa]:
    """One :class:`KernelIsa` per kernel in an AMDGCN assembly file."""
    if arch is None:
        m = _TARGET.search(asm)
        arch = m.group(1) if m else None
    descriptors = _descriptors(asm)
    result = []
    for meta in _metadata_kernels(asm):
        name = meta.get("name", "").strip("'\"")
        fields, llvm_occ = descriptors.get(name, ({}, None))
        wave = _int(meta.get("wavefront_size"), 64)
        vgprs = _int(meta.get("vgpr_count"))
        vgpr_alloc = _int(fields.get("next_free_vgpr"), vgprs)
        sgprs = _int(meta.get("sgpr_count"))
        lds = _int(meta.get("group_segment_fixed_size"))
        wg = _int(meta.get("max_flat_workgroup_size"))
        if llvm_occ is not None:
            occ, source = llvm_occ, "llvm"
        else:
            occ = computed_occupancy(arch, vgpr_alloc, sgprs, lds, wave, wg) if arch else None
            source = "computed" if occ is not None else "unknown"
        result.append(KernelIsa(
            name=name,
            arch=arch,
            vgprs=vgprs,
            agprs=_int(meta.get("agpr_count")),
            vgpr_alloc=vgpr_alloc,
            sgprs=sgprs,
            vgpr_spills=_int(meta.get("vgpr_spill_count")),
            sgpr_spills=_int(meta.get("sgpr_spill_count")),
            scratch_bytes=_int(meta.get("private_segment_fixed_size")),
            lds_bytes=lds,
            wavefront_size=wave,
            max_flat_workgroup_size=wg,
            occupancy=occ,
            occupancy_source=source,
        ))
    return result


def kernel_isa(asm: str, name: Optional[str] = None, arch: Optional[str] = None) -> KernelIsa:
    """The :class:`KernelIsa` of kernel ``name`` (or of the only kernel)."""
    kernels = parse_amdgcn(asm, arch)
    if name is None:
        if len(kernels) != 1:
            raise ValueError(f"assembly holds {len(kernels)} kernels {[k.name for k in kernels]}; pass name=")
        return kernels[0]
    for k in kernels:
        if k.name == name:
            return k
    raise KeyError(f"no kernel {name!r} in the assembly; kernels: {[k.name for k in kernels]}")


def llvm_fn_attribute(llvm_ir: str, function: str, attribute: str) -> Optional[str]:
    """The value of string attribute ``attribute`` on kernel ``function`` in textual LLVM IR."""
    head = re.compile(rf"^define\s.*\bamdgpu_kernel\s.*@\"?{re.escape(function)}\"?\(", re.M)
    m = head.search(llvm_ir)
    line = llvm_ir[m.start(): llvm_ir.find("\n", m.start())] if m else ""
    # Arguments never contain '#', so the first '#N' on the line is the attribute group.
    ref = re.search(r"#(\d+)", line)
    if not ref:
        raise KeyError(f"no amdgpu_kernel @{function} with an attribute group in the LLVM IR")
    group = re.search(rf"^attributes #{ref.group(1)} = \{{(.*)\}}\s*$", llvm_ir, re.M)
    if not group:
        return None
    value = re.search(rf'"{re.escape(attribute)}"="([^"]*)"', group.group(1))
    return value.group(1) if value else None
