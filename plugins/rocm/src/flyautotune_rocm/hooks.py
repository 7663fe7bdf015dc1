"""flyautotune hook implementations for AMD ROCm targets (entry point ``rocm``)."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from flyautotune import Target, hookimpl, timing

from . import bench as _bench  # noqa: F401  (registers the Infinity Cache probe)
from .hints import validate_rocm_hints
from .report import flyautotune_compile_report, flyautotune_report_targets  # noqa: F401
from .keys import cache_key_axes
from .mlir import is_mlir_module, lower_module_hints, mlir_op_name
from .target import rocm_target
from .triton_opts import is_triton_kernel, triton_compile_options

BACKEND = "rocm"


def _ours(target: Any) -> bool:
    return getattr(target, "backend", None) == BACKEND


@hookimpl
def flyautotune_target(device: Any) -> Optional[Target]:
    return rocm_target(device)


@hookimpl
def flyautotune_validate_hints(hints: Mapping[str, Any], target: Target) -> None:
    if _ours(target):
        validate_rocm_hints(hints, target)


@hookimpl
def flyautotune_lower_compile_hints(ir: Any, hints: Mapping[str, Any], target: Target) -> Any:
    if not _ours(target):
        return None
    if is_mlir_module(ir):
        validate_rocm_hints(hints, target)
        return lower_module_hints(ir, hints, target.arch)
    op = mlir_op_name(ir)
    if op is not None:  # an op of the module (gpu.func, ...): lowering it alone would miss kernels
        raise TypeError(f"lower_compile_hints on ROCm takes an MLIR module (builtin.module or gpu.module) that "
                        f"holds gpu.func kernels; got a {op} op: pass the module around it")
    if ir is None or is_triton_kernel(ir):
        return triton_compile_options(hints, target)
    return None


@hookimpl
def flyautotune_cache_key(target: Target) -> Optional[dict]:
    return cache_key_axes(target) if _ours(target) else None


#: Graph replay over rotated inputs (device events where capture fails): the core's timing engine.
flyautotune_benchmark = timing.benchmark_hook(_ours)
