"""Cache-key axes for ROCm targets: arch, HIP, compilers, codegen environment."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from typing import Any, Mapping, Optional

from flyautotune.devices import triton_interprets
from flyautotune.keys import triton_compiler_key

#: Prefixes of the environment variables keyed when set: every Triton variable (as the CUDA plugin
#: keys them), Triton's AMD backend toggles (``AMDGCN_*``) and FlyDSL's options (``FLYDSL_*``).
CODEGEN_ENV_PREFIXES = ("AMDGCN_", "FLYDSL_", "TRITON_")
#: Variables without those prefixes that change the AMDGCN: LLVM's optimizer switch, what picks the arch
#: and the device libraries.
CODEGEN_ENV_NAMES = ("DISABLE_LLVM_OPT", "HSA_OVERRIDE_GFX_VERSION", "ROCM_PATH")
#: Keyed only where FlyDSL can read them (see :func:`flydsl_loaded`): ``ARCH`` is FlyDSL's
#: ``compile.arch`` and wins over ``FLYDSL_GPU_ARCH``, but the name is too common to key otherwise.
FLYDSL_ENV_NAMES = ("ARCH",)
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
    out = {"version": getattr(triton, "__version__", None) or triton_version()}
    key = triton_compiler_key()
    if key is not None:
        out["key"] = key
    return out


def flydsl_loaded() -> bool:
    """Whether FlyDSL is imported in this process: only then can it have compiled a kernel here.

    The same rule as the core's ``torch`` axis: a Triton-only winner carries no FlyDSL axis, so it
    is found again where FlyDSL is not installed (or another version is).
    """
    return "flydsl" in sys.modules


def relevant_env(environ: Optional[Mapping[str, str]] = None, flydsl: Optional[bool] = None) -> dict:
    """The set variables that can change the AMDGCN (see :data:`CODEGEN_ENV_PREFIXES`), sorted by name;
    with ``flydsl`` (default: :func:`flydsl_loaded`) also :data:`FLYDSL_ENV_NAMES`."""
    env = os.environ if environ is None else environ
    names = CODEGEN_ENV_NAMES + (FLYDSL_ENV_NAMES if (flydsl_loaded() if flydsl is None else flydsl) else ())
    return {
        name: env[name] for name in sorted(env)
        if (name.startswith(CODEGEN_ENV_PREFIXES) or name in names) and name not in ENV_IGNORED
    }


def hip_version() -> Optional[str]:
    """HIP version of the installed ROCm torch build, or None without one."""
    torch = sys.modules.get("torch")
    return getattr(getattr(torch, "version", None), "hip", None) if torch is not None else None


def cache_key_axes(target: Any, environ: Optional[Mapping[str, str]] = None) -> dict:
    """Key axes for a ROCm ``target``; env vars appear only when set, ``rocm.flydsl`` (and ``ARCH``)
    only when FlyDSL is imported (:func:`flydsl_loaded`)."""
    flydsl = flydsl_loaded()
    axes = {
        "rocm.arch": target.arch,
        "rocm.warp_size": target.warp_size,
        "rocm.hip": hip_version(),
        # Each wheel pins the LLVM it generates AMDGCN with; the compiler key catches a rebuilt one.
        "rocm.triton": triton_fingerprint(),
    }
    if flydsl:
        axes["rocm.flydsl"] = dist_version("flydsl")
    axes["rocm.env"] = relevant_env(environ, flydsl)
    if triton_interprets():  # timed on the host through Triton's interpreter: no GPU run's winner
        axes["rocm.interpreter"] = True
    return axes
