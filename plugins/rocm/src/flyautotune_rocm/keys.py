"""Cache-key axes for ROCm targets: arch, HIP, compilers, codegen environment."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from typing import Any, Optional

#: Environment variables that change the AMDGCN a kernel compiles to (sorted).
#: Triton HIP backend toggles, FlyDSL compile options, and what picks the
#: arch or the device bitcode libraries.
CODEGEN_ENV_VARS = (
    "AMDGCN_ANALYZE_SMALL_TENSOR_RANGE",
    "AMDGCN_SCALARIZE_PACKED_FOPS",
    "AMDGCN_USE_BUFFER_ATOMICS",
    "AMDGCN_USE_BUFFER_OPS",
    "DISABLE_LLVM_OPT",
    "FLYDSL_COMPILE_BACKEND",
    "FLYDSL_COMPILE_LLVM_DIR",
    "FLYDSL_COMPILE_OPT_LEVEL",
    "FLYDSL_DEBUG_ENABLE_DEBUG_INFO",
    "FLYDSL_EXTRA_SOURCE_DIRS",
    "FLYDSL_GPU_ARCH",
    "FLYDSL_KTRACE_BLOCKS",
    "FLYDSL_KTRACE_BUFFER_BYTES",
    "FLYDSL_KTRACE_ENABLE",
    "HSA_OVERRIDE_GFX_VERSION",
    "ROCM_PATH",
    "TRITON_AMD_CODEGEN_PATH",
    "TRITON_DEFAULT_FP_FUSION",
    "TRITON_ENABLE_ASAN",
    "TRITON_FORCE_DISABLE_FP_FUSION",
    "TRITON_HIP_USE_ASYNC_COPY",
    "TRITON_HIP_USE_BLOCK_PINGPONG",
    "TRITON_HIP_USE_COEXEC_SCHEDULER",
    "TRITON_HIP_USE_EXPERT_SCHEDULING",
    "TRITON_HIP_USE_IN_THREAD_TRANSPOSE",
    "TRITON_OVERRIDE_ARCH",
    "TRITON_SWAP_MIR",
)


def dist_version(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def hip_version() -> Optional[str]:
    """HIP version of the installed ROCm torch build, or None without one."""
    torch = sys.modules.get("torch")
    return getattr(getattr(torch, "version", None), "hip", None) if torch is not None else None


def cache_key_axes(target: Any, environ: Optional[dict] = None) -> dict:
    """Key axes for a ROCm ``target``; env vars appear only when set."""
    env = os.environ if environ is None else environ
    return {
        "rocm.arch": target.arch,
        "rocm.warp_size": target.warp_size,
        "rocm.hip": hip_version(),
        # Each wheel pins the LLVM it generates AMDGCN with.
        "rocm.triton": dist_version("triton"),
        "rocm.flydsl": dist_version("flydsl"),
        "rocm.env": {name: env[name] for name in CODEGEN_ENV_VARS if name in env},
    }
