"""Compile reports: cross-compile candidates for an AMD chip and read the ISA.

No GPU is needed: Triton's HIP backend and MLIR's ROCDL serializer both emit
AMDGCN for any ``gfx`` target on the CPU. Each candidate gets its register
use, spills, LDS, occupancy and a hash of its binary, so a user can see that
each config builds a different binary (and what it costs).
"""

from __future__ import annotations

import hashlib
import importlib
from typing import Any, Iterable, List, Mapping, Optional

import attrs
from flyautotune import Config, Target, hookimpl

from .arch import base_arch, max_waves_per_eu, warp_size
from .isa import KernelIsa, kernel_isa, llvm_fn_attribute
from .mlir import binding_ir, lower_module_hints
from .triton_opts import triton_compile_options


@attrs.frozen
class CandidateReport:
    """What one config compiled to."""

    config: Config
    arch: str
    kernel: str
    options: dict  #: compile options / hints the candidate was built with
    waves_per_eu_attr: Optional[str]  #: ``amdgpu-waves-per-eu`` in the LLVM IR, None when absent
    isa: KernelIsa
    binary_sha256: str

    def to_dict(self) -> dict:
        return {
            "config": self.config.to_dict(),
            "arch": self.arch,
            "kernel": self.kernel,
            "options": {k: list(v) if isinstance(v, tuple) else v for k, v in self.options.items()},
            "waves_per_eu_attr": self.waves_per_eu_attr,
            "isa": self.isa.to_dict(),
            "binary_sha256": self.binary_sha256,
        }


#: AMD chips reports cross-compile for (wave64 CDNA).
REPORT_TARGETS = ("gfx90a", "gfx942", "gfx950")


@hookimpl
def flyautotune_report_targets() -> dict:
    return {arch: _rocm_target(arch) for arch in REPORT_TARGETS}


@hookimpl
def flyautotune_compile_report(spec: Any, config: Config, hints: Mapping[str, Any], target: Target) -> Any:
    """A ``flyautotune.report.ResourceRow`` for one candidate on a ``gfx`` target, else None."""
    if target.backend != "rocm":
        return None
    from flyautotune.report import ReportError, ResourceRow

    try:
        import triton  # noqa: F401
    except ImportError:
        raise ReportError(f"--target {target.arch} needs Triton: pip install 'flyautotune-rocm[triton]'") from None
    # Config kwargs are the adopter's knobs, already folded into constexprs by compile_spec.
    r = compile_candidate(spec.kernel, spec.signature, constexprs=spec.constexprs,
                          hints=Config(compile_hints=dict(hints)).hints, arch=target.arch, config=config)
    details = r.isa.to_dict()
    details["waves_per_eu_attr"] = r.waves_per_eu_attr
    return ResourceRow(
        config=config,
        options=dict(r.options),
        # The allocation (VGPRs and AGPRs, .amdhsa_next_free_vgpr) is what the occupancy column follows;
        # the VGPR count alone (.vgpr_count) is in details["vgprs"].
        registers=r.isa.vgpr_alloc,
        sgprs=r.isa.sgprs,
        spills=r.isa.vgpr_spills + r.isa.sgpr_spills,
        shared_bytes=r.isa.lds_bytes,
        occupancy=r.isa.occupancy,
        occupancy_max=max_waves_per_eu(target.arch),
        occupancy_unit="waves/SIMD",
        binary_sha256=r.binary_sha256,
        details=details,
        labels={"registers": "VGPR alloc", "sgprs": "SGPRs", "spills": "spills", "shared_bytes": "LDS bytes"},
    )


def _as_config(cfg: Any) -> Config:
    if isinstance(cfg, Config):
        return cfg
    if isinstance(cfg, Mapping):
        return Config(**cfg)
    raise TypeError(f"configs must hold flyautotune.Config objects or keyword mappings, got {cfg!r}")


def _rocm_target(arch: str) -> Target:
    arch = base_arch(arch)
    return Target("rocm", arch, warp_size(arch))


def compile_report(
    kernel: Any,
    signature: Mapping[str, str],
    configs: Iterable[Any],
    *,
    arch: str = "gfx942",
    constexprs: Optional[Mapping[str, Any]] = None,
) -> List[CandidateReport]:
    """Cross-compile a Triton kernel once per config for ``arch``; report each binary.

    :param kernel: a ``@triton.jit`` function.
    :param signature: Triton types of the runtime arguments, e.g.
        ``{"x_ptr": "*bf16", "N": "i32"}`` (constexpr arguments may be left out).
    :param configs: ``flyautotune.Config`` objects (or keyword mappings): their
        kwargs fill constexpr arguments, their hints are lowered exactly as a
        launch lowers them (``waves_per_eu``, ``num_warps``, ...).
    :param arch: the AMD chip, e.g. ``"gfx942"`` or ``"gfx950"``.
    :param constexprs: constexpr values shared by every config.
    :returns: one :class:`CandidateReport` per config, in order.
    """
    arg_names = list(getattr(kernel, "arg_names", ()))
    reports = []
    for raw in configs:
        cfg = _as_config(raw)
        consts = dict(constexprs or {})
        for name, value in cfg.kwargs.items():
            if arg_names and name not in arg_names:
                raise ValueError(f"config kwarg {name!r}={value!r} is not an argument of {kernel.__name__}; "
                                 f"arguments: {', '.join(arg_names)}")
            consts[name] = value
        reports.append(compile_candidate(kernel, signature, constexprs=consts, hints=cfg.hints,
                                         arch=arch, config=cfg))
    return reports


def compile_candidate(
    kernel: Any,
    signature: Mapping[str, str],
    *,
    constexprs: Optional[Mapping[str, Any]] = None,
    hints: Optional[Mapping[str, Any]] = None,
    arch: str = "gfx942",
    config: Optional[Config] = None,
) -> CandidateReport:
    """Cross-compile one Triton specialization with ``hints`` lowered for ``arch``.

    For callers that already turned a config into constexpr values (an
    adopter's ``compile_spec``); ``config`` is only recorded in the report.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = _rocm_target(arch)
    hints = dict(hints or {})
    consts = dict(constexprs or {})
    sig = dict(signature)
    for name in consts:
        sig[name] = "constexpr"
    options = triton_compile_options(hints, target)
    compiled = triton.compile(
        ASTSource(fn=kernel, signature=sig, constexprs=consts),
        target=GPUTarget("hip", target.arch, target.warp_size),
        options=options,
    )
    name = compiled.metadata.name
    return CandidateReport(
        config=config if config is not None else Config(compile_hints=hints),
        arch=target.arch,
        kernel=name,
        options=options,
        waves_per_eu_attr=llvm_fn_attribute(compiled.asm["llir"], name, "amdgpu-waves-per-eu"),
        isa=kernel_isa(compiled.asm["amdgcn"], name, target.arch),
        binary_sha256=hashlib.sha256(compiled.asm["hsaco"]).hexdigest(),
    )


# -- MLIR ---------------------------------------------------------------------

def rocdl_pipeline(arch: str, fmt: str = "isa", opt_level: int = 3) -> str:
    """The upstream MLIR pipeline from ``gpu.func`` kernels to a ``gpu.binary`` for ``arch``."""
    arch = base_arch(arch)
    wave64 = "true" if warp_size(arch) == 64 else "false"
    return (
        "builtin.module("
        "gpu.module(convert-scf-to-cf,"
        f"convert-gpu-to-rocdl{{chipset={arch} index-bitwidth=0 runtime=HIP use-bare-ptr-memref-call-conv=true}}),"
        f"rocdl-attach-target{{chip={arch} O={opt_level} wave64={wave64}}},"
        "reconcile-unrealized-casts"
        + (f",gpu-module-to-binary{{format={fmt}}}" if fmt else "")
        + ")"
    )


def _binding_submodule(module: Any, name: str) -> Any:
    """``<binding root>.<name>`` (e.g. ``flydsl._mlir.passmanager``) for the module's binding."""
    return importlib.import_module(binding_ir(module).__name__.rsplit(".", 1)[0] + "." + name)


def _clone(module: Any) -> Any:
    ir = binding_ir(module)
    return ir.Module.parse(str(module), context=module.context)


def _run(module: Any, pipeline: str) -> None:
    with module.context:
        _binding_submodule(module, "passmanager").PassManager.parse(pipeline).run(module.operation)


def mlir_to_amdgcn(module: Any, arch: str = "gfx942", opt_level: int = 3) -> str:
    """AMDGCN assembly for the ``gpu.module``s of an MLIR module (the module is not changed).

    Runs ``convert-gpu-to-rocdl``, ``rocdl-attach-target`` and
    ``gpu-module-to-binary{format=isa}`` with the binding the module came from.
    """
    work = _clone(module)
    _run(work, rocdl_pipeline(arch, "isa", opt_level))
    ir = binding_ir(work)
    gpu = _binding_submodule(work, "dialects.gpu")
    texts = []
    for op in work.body.operations:
        if op.operation.name == "gpu.binary":
            for obj in ir.ArrayAttr(op.operation.attributes["objects"]):
                texts.append(gpu.ObjectAttr(obj).object.decode())
    if not texts:
        raise ValueError("the module has no gpu.module to serialize")
    return "\n".join(texts)


def mlir_to_llvm_ir(module: Any, arch: str = "gfx942") -> str:
    """Textual LLVM IR of the ROCDL-lowered ``gpu.module``s (before AMDGPU codegen).

    Needs a binding that exposes ``translate_module_to_llvmir`` (FlyDSL's does).
    """
    work = _clone(module)
    _run(work, rocdl_pipeline(arch, fmt="", opt_level=3))
    try:
        translate = _binding_submodule(work, "_mlir_libs._mlirDialectsLLVM").translate_module_to_llvmir
    except (ImportError, AttributeError):
        raise NotImplementedError(
            f"the MLIR binding of {type(work).__module__!r} has no translate_module_to_llvmir") from None
    return "\n".join(translate(op.operation) for op in work.body.operations
                     if op.operation.name == "gpu.module")


def mlir_compile_report(
    build_module: Any,
    configs: Iterable[Any],
    *,
    arch: str = "gfx942",
    kernel: Optional[str] = None,
) -> List[CandidateReport]:
    """Like :func:`compile_report` for an MLIR kernel.

    :param build_module: a callable ``(**config.kwargs) -> module`` that builds a
        fresh MLIR module for a config; its hints are lowered with this backend's
        MLIR lowering before ROCDL codegen.
    :param kernel: which kernel to report when the module holds several.
    """
    target = _rocm_target(arch)
    reports = []
    for raw in configs:
        cfg = _as_config(raw)
        module = build_module(**cfg.kwargs)
        lower_module_hints(module, cfg.hints, target.arch)
        asm = mlir_to_amdgcn(module, target.arch)
        isa = kernel_isa(asm, kernel, target.arch)
        reports.append(CandidateReport(
            config=cfg,
            arch=target.arch,
            kernel=isa.name,
            options=dict(cfg.hints),
            waves_per_eu_attr=_mlir_wpe_attr(cfg.hints.get("waves_per_eu")),
            isa=isa,
            # The assembly text fully determines the code object it assembles to.
            binary_sha256=hashlib.sha256(asm.encode()).hexdigest(),
        ))
    return reports


def _mlir_wpe_attr(value: Any) -> Optional[str]:
    from .hints import waves_per_eu_range

    span = waves_per_eu_range(value)
    return None if span is None else f"{span[0]},{span[1]}"


def format_report(reports: Iterable[CandidateReport]) -> str:
    """A Markdown table of reports (one row per candidate)."""
    lines = [
        "| config | arch | amdgpu-waves-per-eu | VGPRs | AGPRs | VGPR alloc | SGPRs | spills (V/S) "
        "| scratch B | LDS B | occupancy | binary sha256 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        i = r.isa
        cfg = ", ".join(f"{k}={v}" for k, v in {**r.config.kwargs, **r.config.hints}.items()) or "(default)"
        occ = "?" if i.occupancy is None else f"{i.occupancy}" + ("" if i.occupancy_source == "llvm" else "*")
        lines.append(
            f"| {cfg} | {r.arch} | {r.waves_per_eu_attr or '-'} | {i.vgprs} | {i.agprs} | {i.vgpr_alloc} "
            f"| {i.sgprs} | {i.vgpr_spills}/{i.sgpr_spills} | {i.scratch_bytes} | {i.lds_bytes} | {occ} "
            f"| {r.binary_sha256[:12]} |"
        )
    return "\n".join(lines)
