"""Cache-key axes for ROCm targets: arch, HIP, compilers, codegen environment."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from typing import Any, Mapping, Optional

#: Prefixes of the environment variables keyed when set: every Triton variable (as the CUDA plugin
#: keys them), Triton's AMD backend toggles (``AMDGCN_*``) and FlyDSL's options (``FLYDSL_*``).
CODEGEN_ENV_PREFIXES = ("AMDGCN_", "FLYDSL_", "TRITON_")
#: Variables without those prefixes that change the AMDGCN: LLVM's optimizer switch, what picks the arch
#: (``ARCH`` is FlyDSL's ``compile.arch`` and wins over ``FLYDSL_GPU_ARCH``) and the device libraries.
CODEGEN_ENV_NAMES = ("ARCH", "DISABLE_LLVM_OPT", "HSA_OVERRIDE_GFX_VERSION", "ROCM_PATH")
#: Variables of those prefixes that never change generated code or timings (where files go, what is
#: printed), left out as the CUDA plugin leaves them out.
ENV_IGNORED = frozenset({
    "TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR", "TRITON_PRINT_AUTOTUNING",
    "TRITON_INTERPRET", "FLYDSL_DUMP_DIR", "FLYDSL_RUNTIME_CACHE_DIR", "FLYDSL_AUTOTUNE_CACHE_DIR",
})


def dist_version(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def relevant_env(environ: Optional[Mapping[str, str]] = None) -> dict:
    """The set variables that can change the AMDGCN (see :data:`CODEGEN_ENV_PREFIXES`), sorted by name."""
    env = os.environ if environ is None else environ
    return {
        name: env[name] for name in sorted(env)
        if (name.startswith(CODEGEN_ENV_PREFIXES) or name in CODEGEN_ENV_NAMES) and name not in ENV_IGNORED
    }


def hip_version() -> Optional[str]:
    """HIP version of the installed ROCm torch build, or None without one."""
    torch = sys.modules.get("torch")
    return getattr(getattr(torch, "version", None), "hip", None) if torch is not None else None


def cache_key_axes(target: Any, environ: Optional[Mapping[str, str]] = None) -> dict:
    """Key axes for a ROCm ``target``; env vars appear only when set."""
    return {
        "rocm.arch": target.arch,
        "rocm.warp_size": target.warp_size,
        "rocm.hip": hip_version(),
        # Each wheel pins the LLVM it generates AMDGCN with.
        "rocm.triton": dist_version("triton"),
        "rocm.flydsl": dist_version("flydsl"),
        "rocm.env": relevant_env(environ),
    }
