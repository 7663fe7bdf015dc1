"""Route flyautotune's hints into FlyDSL's compile pipeline.

FlyDSL calls its compile backend's ``lower_compile_hints(module, compile_hints=...)``
on the traced MLIR module just before the ROCDL lowering. The backend here runs
FlyDSL's own step, then asks flyautotune to lower the hint snapshot of the
current launch (``fat.current_hints()``) onto the same module, so a tuned
``waves_per_eu`` reaches codegen as ``"amdgpu-waves-per-eu"="N,N"``.
"""

from __future__ import annotations

from typing import Any, Optional

import flyautotune as fat

from .arch import base_arch, warp_size

#: The FlyDSL backend name to select with ``FLYDSL_COMPILE_BACKEND``.
BACKEND_NAME = "flyautotune-rocm"


def lower_current_hints(module: Any, arch: str) -> Any:
    """Lower this thread's flyautotune hint snapshot onto ``module`` through the plugin hooks."""
    arch = base_arch(arch)
    return fat.lower_compile_hints(ir=module, target=fat.Target("rocm", arch, warp_size(arch)))


def backend_class() -> type:
    """FlyDSL's ROCm backend with flyautotune's lowering added (needs ``flydsl``)."""
    from flydsl.compiler.backends.rocm import RocmBackend

    class FlyautotuneRocmBackend(RocmBackend):
        """FlyDSL ROCm backend that also applies flyautotune's merged compile hints."""

        def lower_compile_hints(self, module, *, compile_hints: dict) -> None:
            super().lower_compile_hints(module, compile_hints=compile_hints)
            lower_current_hints(module, self.target.arch)

    return FlyautotuneRocmBackend


def register_flydsl_backend(name: str = BACKEND_NAME, *, force: bool = False,
                            cls: Optional[type] = None) -> str:
    """Register the backend with FlyDSL under ``name``; select it with ``FLYDSL_COMPILE_BACKEND=name``."""
    from flydsl.compiler import register_backend

    register_backend(name, cls or backend_class(), force=force)
    return name
