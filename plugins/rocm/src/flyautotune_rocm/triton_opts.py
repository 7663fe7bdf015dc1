"""Compile options for Triton's HIP backend from a hint snapshot."""

from __future__ import annotations

import sys
from typing import Any, Mapping

from .hints import TRITON_HIP_HINTS, validate_rocm_hints, waves_per_eu_range


def is_triton_kernel(obj: Any) -> bool:
    """True for a Triton ``@jit`` function or one of its wrappers (autotuner, heuristics)."""
    jit = sys.modules.get("triton.runtime.jit")
    return jit is not None and isinstance(obj, getattr(jit, "KernelInterface", ()))


def triton_compile_options(hints: Mapping[str, Any], target: Any) -> dict:
    """The keyword options to pass to ``kernel[grid](..., **options)`` on ``target``.

    ``waves_per_eu=N`` maps to Triton's ``waves_per_eu`` (Triton emits
    ``"amdgpu-waves-per-eu"="N,N"``); a ``(lo, hi)`` range, which Triton's own
    option cannot express, goes through ``llvm_fn_attrs``. ``0``/``None`` hints
    are left out so Triton keeps its defaults.
    """
    validate_rocm_hints(hints, target)
    options: dict = {}
    span = waves_per_eu_range(hints.get("waves_per_eu"), target.arch)
    if span is not None:
        lo, hi = span
        if lo == hi:
            options["waves_per_eu"] = lo
        else:
            options["llvm_fn_attrs"] = (("amdgpu-waves-per-eu", f"{lo},{hi}"),)
    for name in ("num_warps", "num_stages"):
        if hints.get(name):
            options[name] = hints[name]
    for name in TRITON_HIP_HINTS:
        if hints.get(name) is not None:
            options[name] = hints[name]
    return options
