"""Validation of compile hints for ROCm targets.

ROCm honours ``waves_per_eu`` (occupancy, hence the VGPR budget), and for
Triton kernels ``num_warps``, ``num_stages`` and a few AMD-only Triton options.
``maxnreg`` has no AMDGPU equivalent that reaches codegen and is rejected, except ``0``,
which (as for every int hint) keeps the kernel's own setting and asks for nothing.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Mapping, Optional, Tuple

from flyautotune import normalize_hint

from . import arch as _arch
from .keys import triton_version

#: Triton HIP options (``HIPOptions``) that make sense to tune per config.
TRITON_HIP_HINTS = (
    "allow_flush_denorm",
    "enable_fp_fusion",
    "kpack",
    "matrix_instr_nonkdim",
    "schedule_hint",
    "wgp_cu_mode",
)
#: The values Triton's HIP backend can use for its integer MFMA options. ``HIPOptions`` takes any int and
#: hands it to the ``accelerate_matmul`` pass: ``kpack`` is 1 or 2 there (2 means ds_read_b128, the widest
#: LDS load; gfx950 overrides anything but 1 with a warning), ``matrix_instr_nonkdim`` is the MFMA
#: instruction's M/N size, 16 or 32, or 0 to let the compiler choose.
TRITON_HIP_CHOICES = {
    "kpack": (1, 2),
    "matrix_instr_nonkdim": (0, 16, 32),
}
#: Triton HIP options that are switches: only ``True`` or ``False`` (``None`` leaves Triton's default).
#: ``0``/``1`` and strings are refused: they are not int hints, for which ``0`` keeps the default, and a
#: ``0`` would turn the switch off (or a ``"no"`` on) in Triton under another cache key.
TRITON_HIP_BOOL_HINTS = ("allow_flush_denorm", "enable_fp_fusion")
#: Chips where Triton's HIP backend overwrites ``kpack`` to 1 (with only a warning): any other value builds
#: the binary of ``kpack=1``.
KPACK_ONE_ONLY = frozenset({"gfx950"})
#: Every hint name a ROCm target accepts.
ROCM_HINTS = ("num_stages", "num_warps", "waves_per_eu", *TRITON_HIP_HINTS)

MAXNREG_REASON = (
    "compile hint 'maxnreg'={value!r} is not supported on ROCm: AMDGPU has no per-kernel "
    "register cap that reaches codegen (amdgpu-num-vgpr is deprecated and counts VGPR+AGPR "
    "on gfx90a/gfx942/gfx950); use waves_per_eu to bound registers through occupancy"
)

def waves_per_eu_range(value: Any, arch: Optional[str] = None) -> Optional[Tuple[int, int]]:
    """The ``(min, max)`` waves-per-EU range a hint asks for, or None to keep the kernel's own.

    ``None`` and ``0`` (or ``(0, 0)``) return None. An int ``N`` means exactly
    ``N`` (``(N, N)``). The spellings (int, pair, ``"min,max"``) are parsed by
    the core (``flyautotune.hints.normalize_hint``); this adds ROCm's rules: a
    range needs a minimum of at least 1, and with ``arch`` a value above the
    chip's wave slots is rejected, because LLVM would ignore it with only a warning.

    :raises TypeError: for a bool, float or other non-int value.
    :raises ValueError: for a negative value, min > max, a malformed string, a
        zero minimum with a positive maximum, or a value over the chip's limit.
    """
    norm = normalize_hint("waves_per_eu", value)
    if norm is None:
        return None
    if isinstance(norm, tuple):
        lo, hi = norm
        if hi == 0:
            return None
        if lo == 0:
            raise ValueError(
                f"compile hint 'waves_per_eu': {value!r} has minimum 0 with maximum {hi}; "
                f"a range needs a minimum >= 1 (use 0 alone to keep the kernel's own setting)"
            )
    else:
        lo = hi = norm
        if lo == 0:
            return None
    if arch is not None:
        limit = _arch.max_waves_per_eu(arch)
        if hi > limit:
            raise ValueError(
                f"compile hint 'waves_per_eu': {value!r} exceeds the {limit} wave slots per SIMD of "
                f"{_arch.base_arch(arch)}; LLVM would ignore it (accepted: 0..{limit})"
            )
    return (lo, hi)


def validate_rocm_hints(hints: Mapping[str, Any], target: Any) -> None:
    """Raise for any hint a ROCm ``target`` cannot honour; return None when all are fine."""
    for name, value in hints.items():
        if value is None:
            continue
        if name == "maxnreg":
            if isinstance(value, int) and not isinstance(value, bool) and value == 0:
                continue  # 0 keeps the kernel's own setting: nothing to honour (a space shared with CUDA)
            raise ValueError(MAXNREG_REASON.format(value=value))
        if name not in ROCM_HINTS:
            raise ValueError(
                f"compile hint {name!r}={value!r} is not understood by the ROCm backend; "
                f"accepted: {', '.join(ROCM_HINTS)}"
            )
        if name == "waves_per_eu":
            waves_per_eu_range(value, target.arch)
        elif name == "num_warps":
            _check_num_warps(value, target)
        elif name == "num_stages":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"compile hint 'num_stages': {value!r} is not a non-negative int")
        elif name == "wgp_cu_mode":
            if value not in ("wgp", "cu"):
                raise ValueError(f"compile hint 'wgp_cu_mode': {value!r} is not one of 'wgp', 'cu'")
            if _arch.base_arch(target.arch).startswith("gfx9"):
                raise ValueError(f"compile hint 'wgp_cu_mode': {target.arch} is a CDNA/GCN chip with no "
                                 f"workgroup processors, so 'wgp' and 'cu' build the same binary; the hint is "
                                 f"for RDNA targets (gfx10 and later)")
        elif name == "schedule_hint" and not triton_reads_option("schedule_hint"):
            raise ValueError(f"compile hint 'schedule_hint': the installed Triton's HIP backend declares it but "
                             f"no pass reads it, so every value builds the same binary; drop it from the "
                             f"space (Triton {triton_version() or 'not installed'})")
        elif name in TRITON_HIP_BOOL_HINTS:
            if not isinstance(value, bool):
                raise ValueError(f"compile hint {name!r}: {value!r} is not a switch Triton's HIP backend takes; "
                                 f"accepted: True, False (or None to keep Triton's default)")
        elif name in TRITON_HIP_CHOICES:
            choices = TRITON_HIP_CHOICES[name]
            if isinstance(value, bool) or not isinstance(value, int) or value not in choices:
                raise ValueError(f"compile hint {name!r}: {value!r} is not accepted by Triton's HIP backend; "
                                 f"accepted: {', '.join(map(str, choices))}")
            if name == "kpack" and value != 1 and _arch.base_arch(target.arch) in KPACK_ONE_ONLY:
                raise ValueError(f"compile hint 'kpack': {value!r} on {_arch.base_arch(target.arch)}: Triton's HIP "
                                 f"backend overwrites kpack to 1 there (deprecated from gfx950), so it builds the "
                                 f"binary of kpack=1; accepted on {_arch.base_arch(target.arch)}: 1")
    _check_waves_against_warps(hints, target)


#: SIMDs (EUs) that share one workgroup's waves, as LLVM's AMDGPU backend counts them: the 4 of a gfx9 CU
#: or of a gfx10+ workgroup processor (WGP mode, the default), the 2 of a gfx10+ CU in CU mode.
EUS_PER_CU = 4
EUS_PER_CU_MODE = 2


def lowest_waves_per_eu(num_warps: int, arch: str, cu_mode: bool = False) -> Optional[int]:
    """The fewest waves per SIMD a workgroup of ``num_warps`` waves puts there: ``ceil(num_warps / 4)``,
    or ``ceil(num_warps / 2)`` on gfx10+ in CU mode (``cu_mode``); None for no ``num_warps``.

    LLVM ignores an ``amdgpu-waves-per-eu`` whose minimum is below it, with only a warning.
    """
    if not num_warps:
        return None
    eus = EUS_PER_CU_MODE if cu_mode and _arch.gfx_major(arch) >= 10 else EUS_PER_CU
    return -(-num_warps // eus)


def _check_waves_against_warps(hints: Mapping[str, Any], target: Any) -> None:
    warps = hints.get("num_warps")
    if isinstance(warps, bool) or not isinstance(warps, int):
        return
    span = waves_per_eu_range(hints.get("waves_per_eu"), target.arch)
    cu_mode = hints.get("wgp_cu_mode") == "cu"
    lowest = lowest_waves_per_eu(warps, target.arch, cu_mode)
    if span is None or lowest is None or span[0] >= lowest:
        return
    mode = " in CU mode" if cu_mode and _arch.gfx_major(target.arch) >= 10 else ""
    raise ValueError(
        f"compile hint 'waves_per_eu': {hints['waves_per_eu']!r} with num_warps={warps} on "
        f"{_arch.base_arch(target.arch)}{mode}: a workgroup of {warps} waves puts at least {lowest} on each SIMD, so "
        f"LLVM ignores a minimum below {lowest} and builds the kernel as without the hint; accepted: 0 "
        f"(the kernel's own) or a minimum of at least {lowest}"
    )


@functools.lru_cache(maxsize=None)
def triton_reads_option(name: str) -> bool:
    """Whether the installed Triton's HIP backend reads ``options.<name>`` when it compiles (a field it only
    declares changes nothing). True when that cannot be told (no AMD backend, no source)."""
    try:
        from triton.backends.amd import compiler

        source = inspect.getsource(compiler)
    except (ImportError, OSError, TypeError):
        return True
    return f"options.{name}" in source


def _check_num_warps(value: Any, target: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"compile hint 'num_warps': {value!r} is not a non-negative int")
    if value == 0:
        return
    most = 1024 // target.warp_size
    if value & (value - 1) or value > most:
        raise ValueError(
            f"compile hint 'num_warps': {value!r} on {target.arch} (wave{target.warp_size}) must be a "
            f"power of two up to {most} (1024 threads per workgroup)"
        )
