"""Compile reports for NVIDIA chips: cross-compile a candidate with Triton's
NVIDIA backend on the CPU, read its resources with the ``cuobjdump`` Triton
ships, and compute the occupancy they allow. No GPU is needed.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from typing import Any, Mapping, Optional, Sequence

import attrs
from flyautotune import Config, Target, hookimpl
from flyautotune.report import KernelSpec, ReportError, ResourceRow, specialization_attrs

from .hints import capability, triton_options

BACKEND = "cuda"
_TRITON_CUDA_OPTIONS = ("num_warps", "num_stages", "maxnreg", "num_ctas")


@attrs.frozen
class SmLimits:
    """Per-SM resources of one NVIDIA architecture (the CUDA occupancy calculator's table)."""

    max_warps: int
    max_blocks: int
    shared_per_sm: int
    shared_per_block: int
    registers: int = 65536
    reserved_shared: int = 1024  # the driver keeps 1 KiB per block on sm_80+
    register_unit: int = 256  # registers are allocated per warp in units of 256
    sub_partitions: int = 4  # the register file is split among the SM's schedulers; a warp lives in one


CUDA_TARGETS = {
    "sm_80": SmLimits(64, 32, 167936, 166912),
    "sm_86": SmLimits(48, 16, 102400, 101376),
    "sm_89": SmLimits(48, 24, 102400, 101376),
    "sm_90": SmLimits(64, 32, 233472, 232448),
}


@hookimpl
def flyautotune_report_targets() -> dict:
    return {arch: Target(BACKEND, arch, 32) for arch in CUDA_TARGETS}


@hookimpl
def flyautotune_compile_report(spec: KernelSpec, config: Config, hints: Mapping[str, Any],
                               target: Target) -> Optional[ResourceRow]:
    if target.backend != BACKEND:
        return None
    if target.arch not in CUDA_TARGETS:
        raise ReportError(f"no occupancy table for {target.arch}; reports cover {', '.join(CUDA_TARGETS)}")
    try:
        import triton  # noqa: F401
    except ImportError:
        raise ReportError("compile reports need Triton: pip install triton") from None
    (row,) = cuda_compile_report(spec.kernel, spec.signature, [triton_options(hints, target.arch)],
                                 arch=target.arch, constexprs=spec.constexprs, values=spec.values)
    return attrs.evolve(row, config=config)


def cuda_compile_report(
    kernel: Any,
    signature: Mapping[str, str],
    options: Sequence[Mapping[str, Any]],
    *,
    arch: str = "sm_90",
    constexprs: Optional[Mapping[str, Any]] = None,
    values: Optional[Mapping[str, Any]] = None,
) -> list:
    """Cross-compile a Triton kernel for an NVIDIA ``arch`` once per option set, on the CPU.

    :param kernel: a ``@triton.jit`` function (a ``JITFunction``).
    :param signature: Triton types of the arguments (constexprs may be left out).
    :param options: Triton compile options per candidate (``num_warps``, ``maxnreg`` ...).
    :param constexprs: constexpr values.
    :param values: runtime integer arguments of a real launch, specialized as
        Triton specializes a launch, so the binary is the one the GPU would run.
    :returns: one ``ResourceRow`` per option set: registers and spill bytes
        (from ``cuobjdump -res-usage`` on the cubin), shared bytes, the occupancy
        these allow (resident warps per SM) and the cubin's sha256.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    limits = CUDA_TARGETS[arch]
    cc = capability(arch)
    consts = dict(constexprs or {})
    sig = dict(signature)
    for name in consts:
        sig[name] = "constexpr"
    spec_attrs = specialization_attrs(kernel, sig, dict(values or {}))
    source = ASTSource
    if getattr(kernel, "is_gluon", lambda: False)():  # Gluon kernels (explicit layouts) have their own
        from triton.experimental.gluon._runtime import GluonASTSource as source
    rows = []
    for opts in options:
        opts = dict(opts)
        compiled = triton.compile(source(fn=kernel, signature=sig, constexprs=consts, attrs=spec_attrs),
                                  target=GPUTarget("cuda", cc, 32), options=opts)
        cubin = compiled.asm["cubin"]
        usage = cubin_resources(cubin)
        num_warps = compiled.metadata.num_warps
        shared = max(int(compiled.metadata.shared), usage.get("shared", 0))
        warps, limiter = cuda_occupancy(limits, usage["registers"], shared, num_warps)
        rows.append(ResourceRow(
            config=Config(compile_hints={k: v for k, v in opts.items() if k in _TRITON_CUDA_OPTIONS}),
            options=dict(opts, num_warps=num_warps),
            registers=usage["registers"],
            spills=usage["local"],
            shared_bytes=shared,
            occupancy=warps,
            occupancy_max=limits.max_warps,
            occupancy_unit="warps/SM",
            binary_sha256=hashlib.sha256(cubin).hexdigest(),
            details={"kernel": compiled.metadata.name, "stack_bytes": usage["stack"],
                     "occupancy_limiter": limiter, "arch": arch},
            labels={"registers": "registers", "spills": "spill bytes", "shared_bytes": "shared bytes"},
        ))
    return rows


def cubin_resources(cubin: bytes) -> dict:
    """``registers``, ``stack``, ``shared``, ``local`` (spill) bytes of the one kernel in a cubin."""
    tool = _nvidia_tool("cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        out = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)", out)
    if not m:
        raise ReportError(f"cuobjdump -res-usage printed no resource line: {out.strip()!r}")
    regs, stack, shared, local = (int(g) for g in m.groups())
    return {"registers": regs, "stack": stack, "shared": shared, "local": local}


def _nvidia_tool(name: str) -> str:
    try:
        import triton.backends.nvidia as nv
    except ImportError:
        raise ReportError("this Triton has no NVIDIA backend; sm_* reports need it") from None
    path = os.path.join(os.path.dirname(nv.__file__), "bin", name)
    if not os.path.exists(path):
        raise ReportError(f"Triton's NVIDIA backend lacks {name} ({path})")
    return path


def cuda_occupancy(limits: SmLimits, registers: int, shared: int, num_warps: int) -> tuple:
    """Resident warps per SM for a kernel, and what limits them (``warps``, ``blocks``,
    ``registers`` or ``shared``), by the CUDA occupancy calculator's rules."""
    if num_warps <= 0 or num_warps > limits.max_warps:
        return 0, "warps"
    per_warp = -(-max(registers, 1) * 32 // limits.register_unit) * limits.register_unit
    by = {
        "warps": limits.max_warps // num_warps,
        "blocks": limits.max_blocks,
        "registers": (limits.registers // limits.sub_partitions // per_warp) * limits.sub_partitions // num_warps,
    }
    if shared:
        need = shared + limits.reserved_shared
        by["shared"] = 0 if shared > limits.shared_per_block else limits.shared_per_sm // need
    limiter = min(by, key=lambda k: by[k])
    return by[limiter] * num_warps, limiter
