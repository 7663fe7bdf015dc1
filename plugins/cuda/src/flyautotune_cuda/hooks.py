"""The flyautotune hooks of the NVIDIA CUDA backend.

Every hook acts only on NVIDIA CUDA: a ``cuda`` torch device on a build of
torch without HIP, or a ``Target`` whose backend is ``"cuda"``; otherwise it
returns ``None`` so another backend can answer.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Optional

from flyautotune import Target, hookimpl, timing
from flyautotune.devices import triton_interprets
from flyautotune.keys import triton_compiler_key

from .hints import check_hints, triton_options
from .report import flyautotune_compile_report, flyautotune_report_targets  # noqa: F401

BACKEND = "cuda"
WARP_SIZE = 32
#: Variables that never change generated code or timings (where files go, what is printed).
_ENV_IGNORED = frozenset({
    "TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR", "TRITON_PRINT_AUTOTUNING",
    "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH",
})
#: Variables without those prefixes that Triton's NVIDIA backend reads and that change the binary (Triton
#: keys its own cache on them): ptxas at -O0, LLVM's optimizer off, Hopper/Blackwell MMA paths off.
_ENV_NAMES = frozenset({"DISABLE_PTXAS_OPT", "DISABLE_LLVM_OPT", "DISABLE_MMA_V3", "DISABLE_MMA_V5"})


def _torch():
    return sys.modules.get("torch")


def _is_nvidia_cuda_device(device: Any) -> bool:
    torch = _torch()
    if torch is None or getattr(torch.version, "hip", None) is not None:
        return False
    if isinstance(device, str):
        device = torch.device(device)
    return getattr(device, "type", None) == "cuda"


def arch_for(device: Any) -> str:
    """``sm_XY`` from the device's compute capability."""
    torch = _torch()
    if isinstance(device, str):
        device = torch.device(device)
    try:
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
    except (AssertionError, RuntimeError) as exc:  # a torch without CUDA, no GPU, or an index out of range
        raise LookupError(f"device {device}: this torch cannot reach that CUDA device ({exc}); accepted: a "
                          f"CUDA device of this machine (torch.cuda.device_count() is "
                          f"{_device_count(torch)}), or the CPU") from None
    return f"sm_{major}{minor}"


def _device_count(torch: Any) -> int:
    try:
        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - only for the message
        return 0


@hookimpl
def flyautotune_target(device: Any) -> Optional[Target]:
    if not _is_nvidia_cuda_device(device):
        return None
    return Target(BACKEND, arch_for(device), WARP_SIZE)


@hookimpl
def flyautotune_validate_hints(hints: Mapping[str, Any], target: Target) -> None:
    if target.backend != BACKEND:
        return None
    check_hints(hints, target.arch)
    return None


def _is_mlir_module(ir: Any) -> bool:
    return hasattr(ir, "operation") and hasattr(ir, "context")


@hookimpl
def flyautotune_lower_compile_hints(ir: Any, hints: Mapping[str, Any], target: Target) -> Any:
    # Triton kernels (or ir=None): the compile-option dict to splat into the launch.
    if target.backend != BACKEND or _is_mlir_module(ir):
        return None
    return triton_options(hints, target.arch)


def driver_version() -> Optional[int]:
    """``cuDriverGetVersion`` (e.g. 13000), or None without a driver."""
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) == 0:
            return version.value
    return None


def triton_fingerprint() -> Optional[dict]:
    """Triton's version and a short hash of its compiler key (its own cache key)."""
    try:
        import triton
    except ImportError:
        return None
    out = {"version": triton.__version__}
    key = triton_compiler_key()
    if key is not None:
        out["key"] = key
    return out


def relevant_env(environ: Optional[Mapping[str, str]] = None) -> list:
    """``NAME=value`` for TRITON_* / CUDA_* / PTXAS_* variables and the Triton switches in
    :data:`_ENV_NAMES` that can change codegen, sorted."""
    environ = os.environ if environ is None else environ
    return sorted(
        f"{k}={v}" for k, v in environ.items()
        if (k.startswith(("TRITON_", "CUDA_", "PTXAS_")) and k not in _ENV_IGNORED) or k in _ENV_NAMES
    )


def devices_for(arch: str) -> list:
    """Visible GPUs of this arch: name and SM count (an H100 and an H200 share sm_90)."""
    torch = _torch()
    out = set()
    try:
        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            if f"sm_{major}{minor}" == arch:
                p = torch.cuda.get_device_properties(i)
                out.add(f"{p.name} ({p.multi_processor_count} SMs)")
    except Exception:  # no driver / no device: the key still carries arch and versions
        pass
    return sorted(out)


@hookimpl
def flyautotune_cache_key(target: Target) -> Optional[dict]:
    if target.backend != BACKEND:
        return None
    torch = _torch()
    axes: dict = {"cuda.arch": target.arch}
    if torch is not None:
        axes["cuda.runtime"] = torch.version.cuda
        axes["cuda.devices"] = devices_for(target.arch)
    axes["cuda.driver"] = driver_version()
    triton = triton_fingerprint()
    if triton is not None:
        axes["cuda.triton"] = triton
    axes["cuda.env"] = relevant_env()
    if triton_interprets():  # timed on the host through Triton's interpreter: no GPU run's winner
        axes["cuda.interpreter"] = True
    return axes


#: Graph replay over rotated inputs (device events where capture fails): the core's timing engine.
flyautotune_benchmark = timing.benchmark_hook(lambda target: target.backend == BACKEND)
