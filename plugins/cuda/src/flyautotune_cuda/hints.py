"""Compile hints on NVIDIA: which are honoured, in what range, and how they lower.

Triton's NVIDIA backend takes ``num_warps``, ``num_stages``, ``maxnreg``
(PTX ``.maxnreg``) and ``num_ctas`` as compile options; those are the hints
this backend accepts. ``0`` keeps the kernel's own setting (nothing is passed).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

#: Registers a thread can address on sm_50 and later; ptxas treats a larger ``.maxnreg`` as this.
MAXNREG_MAX = 255
#: ptxas raises a smaller ``.maxnreg`` to 24 without a word (seen with the sm_90 ptxas).
MAXNREG_MIN = 24
#: Registers in one SM's register file (sm_70 .. sm_120): threads x maxnreg must fit.
REGISTER_FILE = 65536
#: Warps one CTA may hold (1024 threads / 32).
MAX_WARPS = 32
#: Thread-block cluster size Triton accepts through ``num_ctas`` (Hopper and later).
MAX_CTAS = 16
#: The first compute capability with thread-block clusters: Triton refuses ``num_ctas > 1`` below it.
CLUSTER_MIN_CAPABILITY = 90

#: Hint name -> Triton compile-option name.
TRITON_OPTIONS = {
    "num_warps": "num_warps",
    "num_stages": "num_stages",
    "maxnreg": "maxnreg",
    "num_ctas": "num_ctas",
}

_ROCM_ONLY = {
    "waves_per_eu": "it is an AMD (ROCm) occupancy hint with no NVIDIA equivalent; bound registers per "
                    "thread with 'maxnreg' instead",
    "matrix_instr_nonkdim": "it selects AMD MFMA instruction shapes; NVIDIA has no such option",
    "kpack": "it is an AMD (ROCm) MFMA packing option; NVIDIA has no such option",
}


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def capability(arch: str) -> Optional[int]:
    """The compute capability of ``sm_90``, ``sm_90a``, ... as a number (90); None for another name."""
    m = re.fullmatch(r"sm_(\d+)[a-z]?", arch)
    return int(m.group(1)) if m else None


def _int_hint(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"cuda: compile hint {name}={value!r} must be an int")
    return value


def check_hints(hints: Mapping[str, Any], arch: str = "") -> None:
    """Raise ``ValueError``/``TypeError`` for a hint NVIDIA cannot honour.

    The message names the hint, the value and what would be accepted.
    """
    where = f" on {arch}" if arch else ""
    for name, value in hints.items():
        if value is None:
            continue
        if name in _ROCM_ONLY:
            if value in (0, (0, 0)):
                continue  # 0 asks for nothing: harmless in a space shared with ROCm
            raise ValueError(f"cuda: compile hint {name}={value!r} is not supported{where}: {_ROCM_ONLY[name]}")
        if name not in TRITON_OPTIONS:
            raise ValueError(
                f"cuda: unknown compile hint {name}={value!r}{where}; NVIDIA accepts "
                f"{', '.join(sorted(TRITON_OPTIONS))}"
            )
        v = _int_hint(name, value)
        if v == 0:
            continue
        if name == "num_warps" and (not _is_pow2(v) or v > MAX_WARPS):
            raise ValueError(
                f"cuda: compile hint num_warps={v!r}{where} must be a power of two from 1 to {MAX_WARPS} "
                f"(at most 1024 threads per CTA)"
            )
        if name == "maxnreg" and not MAXNREG_MIN <= v <= MAXNREG_MAX:
            raise ValueError(
                f"cuda: compile hint maxnreg={v!r}{where} is outside what ptxas honours "
                f"(it silently clamps to {MAXNREG_MIN}..{MAXNREG_MAX}): accepted {MAXNREG_MIN}..{MAXNREG_MAX}"
            )
        if name == "num_stages" and not 1 <= v <= 16:
            raise ValueError(f"cuda: compile hint num_stages={v!r}{where}: accepted 1..16 (0 keeps the default)")
        if name == "num_ctas" and (not _is_pow2(v) or v > MAX_CTAS):
            raise ValueError(
                f"cuda: compile hint num_ctas={v!r}{where} must be a power of two from 1 to {MAX_CTAS}"
            )
        if name == "num_ctas" and v > 1 and (capability(arch) or CLUSTER_MIN_CAPABILITY) < CLUSTER_MIN_CAPABILITY:
            raise ValueError(
                f"cuda: compile hint num_ctas={v!r}{where} needs thread-block clusters (sm_90 and later); "
                f"accepted on {arch}: 1 (or 0 to keep the kernel's own setting)"
            )
    warps = hints.get("num_warps") or 0
    nreg = hints.get("maxnreg") or 0
    if warps and nreg and warps * 32 * nreg > REGISTER_FILE:
        raise ValueError(
            f"cuda: compile hints maxnreg={nreg} with num_warps={warps}{where} need {warps * 32 * nreg} "
            f"registers per CTA, more than the {REGISTER_FILE} an SM has: the launch would fail; "
            f"use maxnreg <= {REGISTER_FILE // (warps * 32)} for {warps} warps"
        )


def triton_options(hints: Mapping[str, Any], arch: str = "") -> dict:
    """The Triton compile options for a hint snapshot (0 and None omitted)."""
    check_hints(hints, arch)
    options = {}
    for name, value in hints.items():
        option = TRITON_OPTIONS.get(name)
        if option is not None and value:
            options[option] = value
    return options
