"""flyautotune-rocm: the AMD ROCm backend plugin for flyautotune.

Installed, it is found through the ``flyautotune`` entry point ``rocm``
(:mod:`flyautotune_rocm.hooks`). The helpers below are for reports and tests.
"""

__version__ = "0.1.0"

from .arch import base_arch, max_waves_per_eu, warp_size  # noqa: E402
from .hints import MAXNREG_REASON, ROCM_HINTS, validate_rocm_hints, waves_per_eu_range  # noqa: E402
from .isa import KernelIsa, kernel_isa, llvm_fn_attribute, parse_amdgcn  # noqa: E402
from .mlir import kernel_funcs, lower_module_hints, lower_waves_per_eu, passthrough  # noqa: E402
from .report import (  # noqa: E402
    CandidateReport,
    compile_candidate,
    compile_report,
    format_report,
    mlir_compile_report,
    mlir_to_amdgcn,
    mlir_to_llvm_ir,
)
from .triton_opts import triton_compile_options  # noqa: E402

__all__ = [
    "CandidateReport",
    "KernelIsa",
    "MAXNREG_REASON",
    "ROCM_HINTS",
    "__version__",
    "base_arch",
    "compile_candidate",
    "compile_report",
    "format_report",
    "kernel_funcs",
    "kernel_isa",
    "llvm_fn_attribute",
    "lower_module_hints",
    "lower_waves_per_eu",
    "max_waves_per_eu",
    "mlir_compile_report",
    "mlir_to_amdgcn",
    "mlir_to_llvm_ir",
    "parse_amdgcn",
    "passthrough",
    "triton_compile_options",
    "validate_rocm_hints",
    "warp_size",
    "waves_per_eu_range",
]
