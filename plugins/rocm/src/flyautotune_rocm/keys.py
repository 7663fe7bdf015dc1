"""Cache-key axes for ROCm targets: arch, HIP, compilers, codegen environment."""

from __future__ import annotations

import hashlib
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
#: The distributions Triton ships as: upstream wheels, and ROCm PyTorch's own build.
TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton-rocm", "triton-rocm")


def dist_version(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def triton_version() -> Optional[str]:
    """The installed Triton's version, under whichever distribution name it came."""
    for name in TRITON_DISTRIBUTIONS:
        version = dist_version(name)
        if version is not None:
            return version
    return None


def triton_fingerprint() -> Optional[dict]:
    """Triton's version and a short hash of its compiler key (its own cache key), or None without Triton.

    The version is the imported module's, else that of whichever of :data:`TRITON_DISTRIBUTIONS` is
    installed (ROCm PyTorch ships Triton as ``pytorch-triton-rocm``).
    """
    try:
        import triton
    except ImportError:
        version = triton_version()
        return None if version is None else {"version": version}
    key = None
    for module in ("triton.runtime.cache", "triton.compiler.compiler"):
        try:
            mod = __import__(module, fromlist=["triton_key"])
            key = mod.triton_key()
            break
        except (ImportError, AttributeError):
            continue
    out = {"version": getattr(triton, "__version__", None) or triton_version()}
    if key is not None:
        out["key"] = hashlib.sha256(str(key).encode()).hexdigest()[:16]
    return out


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
        # Each wheel pins the LLVM it generates AMDGCN with; the compiler key catches a rebuilt one.
        "rocm.triton": triton_fingerprint(),
        "rocm.flydsl": dist_version("flydsl"),
        "rocm.env": relevant_env(environ),
    }
