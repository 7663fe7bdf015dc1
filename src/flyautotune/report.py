"""Static resource reports: cross-compile every candidate of an adopter for a
GPU target and read registers, spills, shared memory, occupancy and a hash of
the binary — on any machine, no GPU needed.

The dispatcher is backend-neutral: AMD targets (``gfx*``) go to the ROCm
plugin's ``flyautotune_rocm.report.compile_report``; NVIDIA targets (``sm_*``)
go to ``flyautotune_cuda.report.compile_report`` when that plugin provides one,
else to :func:`cuda_compile_report` here (Triton's NVIDIA backend + the
``cuobjdump`` Triton ships).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import os
import re
import subprocess
import tempfile
from typing import Any, Iterator, Mapping, Optional, Sequence

import attrs

from .config import Config
from .target import Target

#: AMD chips the ROCm plugin cross-compiles for (wave64 CDNA).
ROCM_TARGETS = ("gfx90a", "gfx942", "gfx950")


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


CUDA_TARGETS = {
    "sm_80": SmLimits(64, 32, 167936, 166912),
    "sm_86": SmLimits(48, 16, 102400, 101376),
    "sm_89": SmLimits(48, 24, 102400, 101376),
    "sm_90": SmLimits(64, 32, 233472, 232448),
}

TARGET_NAMES = ROCM_TARGETS + tuple(CUDA_TARGETS)


class ReportError(RuntimeError):
    """The report cannot be made (a missing plugin or toolchain); says what to install."""


def parse_target(text: str) -> Target:
    """``"gfx942"`` -> ``Target("rocm", "gfx942", 64)``; ``"sm_90"`` -> ``Target("cuda", "sm_90", 32)``.

    :raises ValueError: naming the value and the accepted targets.
    """
    name = str(text).strip().lower().replace("sm90", "sm_90")
    if name in ROCM_TARGETS:
        return Target("rocm", name, 64)
    m = re.fullmatch(r"sm_?(\d+)", name)
    if m and f"sm_{m.group(1)}" in CUDA_TARGETS:
        return Target("cuda", f"sm_{m.group(1)}", 32)
    raise ValueError(f"--target {text!r} is not a supported target; accepted: {', '.join(TARGET_NAMES)}")


@attrs.frozen
class ResourceRow:
    """What one candidate compiled to on one target (``error`` set when it could not be built)."""

    config: Config
    options: dict = attrs.field(factory=dict)  #: compile options the binary was built with
    registers: Optional[int] = None  #: VGPRs (AMD) or registers per thread (NVIDIA)
    sgprs: Optional[int] = None  #: scalar registers (AMD only)
    spills: Optional[int] = None  #: spilled registers (AMD: VGPR+SGPR) or spill bytes (NVIDIA)
    shared_bytes: Optional[int] = None  #: LDS (AMD) or shared memory (NVIDIA) per block
    occupancy: Optional[int] = None  #: waves per SIMD (AMD) or resident warps per SM (NVIDIA)
    occupancy_max: Optional[int] = None
    occupancy_unit: str = ""
    binary_sha256: Optional[str] = None
    error: Optional[str] = None
    details: dict = attrs.field(factory=dict)  #: everything else the backend reported

    def to_dict(self) -> dict:
        d = attrs.asdict(self, recurse=False)
        d["config"] = self.config.to_dict() if self.config.pre_hook is None else repr(self.config)
        d["options"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.options.items()}
        return d


# -- which configs --------------------------------------------------------------------


@contextlib.contextmanager
def for_target(target: Target) -> Iterator[None]:
    """Make ``flyautotune.current_target()`` return ``target`` on this thread, so a
    target-dependent config space is evaluated for the report's target, not this machine."""
    from .autotuner import target_context

    with target_context(target):
        yield


class _Captured(Exception):
    def __init__(self, tuner: Any, named: dict) -> None:
        super().__init__("captured")
        self.tuner = tuner
        self.named = named


def named_arguments(tuner: Any, args: Sequence, kwargs: Mapping) -> dict:
    """A tuned launch's arguments by name, defaults filled in (what ``configs(**named)`` receives)."""
    bound = inspect.signature(tuner.fn).bind(*args, **kwargs)
    bound.apply_defaults()
    named = {}
    for name, value in bound.arguments.items():
        param = bound.signature.parameters[name]
        if param.kind is param.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return named


@contextlib.contextmanager
def watch_tuners(stop: bool = False) -> Iterator[list]:
    """Record every ``Autotuner`` called inside the block as ``(tuner, named_args)``.

    :param stop: raise at the first tuned call instead of running it (no kernel
        runs, nothing is tuned or stored); the caller catches the stop with
        :func:`tuned_call`.
    """
    from .autotuner import Autotuner

    seen: list = []
    original = Autotuner.__call__

    def watched(self, *args, **kwargs):
        try:
            named = named_arguments(self, args, kwargs)
        except TypeError:  # the real call below raises the tuner's own, clearer error
            named = {}
        seen.append((self, named))
        if stop:
            raise _Captured(self, named)
        return original(self, *args, **kwargs)

    Autotuner.__call__ = watched
    try:
        yield seen
    finally:
        Autotuner.__call__ = original


def tuned_call(entry: Any, args: Sequence, kwargs: Mapping) -> tuple:
    """``(tuner, named_args)`` of the tuned launch ``entry(*args, **kwargs)`` reaches, without running it.

    Adopters' entries usually prepare their arguments (shapes, strides, dtype
    names) before the tuned launch, so this is how the launch's own arguments
    are seen from the outside.
    """
    try:
        with watch_tuners(stop=True):
            entry(*args, **kwargs)
    except _Captured as c:
        return c.tuner, c.named
    raise ReportError(f"{getattr(entry, '__name__', entry)!r} returned without calling a flyautotune tuner")


def candidate_configs(adopter: Any, shape: tuple, dtype: str, target: Target) -> list:
    """The configs a search of ``adopter`` would try for ``shape``/``dtype`` on ``target``."""
    if not callable(adopter.configs):
        return list(adopter.configs)
    if adopter.example is None or adopter.entry is None:
        raise ReportError(
            f"adopter {adopter.name!r} has a computed config space but no example()/entry to evaluate it with"
        )
    args, kwargs = adopter.example(shape, dtype, "cpu")
    tuner, named = tuned_call(adopter.entry, args, kwargs)
    with for_target(target):
        space = tuner.configs(**named) if callable(tuner.configs) else tuner.configs
        configs = list(space)
        if tuner.prune_configs_by is not None and len(configs) > 1:
            configs = list(tuner.prune_configs_by(configs, **named))
    return configs


# -- compiling ------------------------------------------------------------------------


@attrs.frozen
class KernelSpec:
    """What ``Adopter.compile_spec`` describes: the Triton kernel one config builds.

    :param kernel: the ``JITFunction``.
    :param signature: Triton types of its arguments (``{"X": "*bf16", "n": "i32"}``).
    :param constexprs: constexpr values.
    :param options: compile options the launch derives from the config itself
        (e.g. ``{"num_warps": 8}`` from a ``BLOCK_THREADS`` knob); config hints override them.
    :param values: runtime scalar arguments of a launch of this shape
        (``{"n": 16777216}``), so the report specializes them as a launch does.
    """

    kernel: Any
    signature: dict
    constexprs: dict
    options: dict = attrs.field(factory=dict)
    values: dict = attrs.field(factory=dict)


def _compile_spec(adopter: Any, shape: tuple, dtype: str, config: Config, target: Target) -> KernelSpec:
    """The adopter's ``compile_spec`` answer as a :class:`KernelSpec`.

    ``compile_spec`` may take ``target=`` and returns ``(kernel, signature,
    constexprs)`` or ``(kernel, signature, constexprs, extra)`` where ``extra``
    holds ``"options"`` and/or ``"values"`` (a plain dict of compile options is
    read as ``"options"``).
    """
    fn = adopter.compile_spec
    try:
        params = inspect.signature(fn).parameters
        takes_target = "target" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        takes_target = False
    spec = fn(shape, dtype, config, target=target) if takes_target else fn(shape, dtype, config)
    if isinstance(spec, KernelSpec):
        return spec
    if not isinstance(spec, (tuple, list)) or len(spec) not in (3, 4):
        raise TypeError(
            f"adopter {adopter.name!r}: compile_spec returned {spec!r}; expected "
            f"(kernel, signature, constexprs) or (kernel, signature, constexprs, extra)"
        )
    kernel, signature, constexprs = spec[:3]
    extra = dict(spec[3] or {}) if len(spec) == 4 else {}
    if extra and set(extra) <= {"options", "values"}:
        options, values = dict(extra.get("options") or {}), dict(extra.get("values") or {})
    else:
        options, values = extra, {}
    return KernelSpec(kernel, dict(signature), dict(constexprs or {}), options, values)


def specialization_attrs(kernel: Any, signature: Mapping[str, str], values: Mapping[str, Any]) -> dict:
    """Triton's value specialization of a launch, as ``ASTSource`` attrs: pointers
    16-byte aligned (what a torch allocation is), integers divisible by 16 where
    ``values`` says so; arguments the kernel marks ``do_not_specialize`` are left alone."""
    names = list(getattr(kernel, "arg_names", ()))
    params = {getattr(p, "name", None): p for p in getattr(kernel, "params", ())}
    out = {}
    for name, ty in signature.items():
        if ty == "constexpr" or name not in names:
            continue
        p = params.get(name)
        if p is not None and getattr(p, "do_not_specialize", False):
            continue
        if ty.startswith("*"):
            if p is not None and getattr(p, "do_not_specialize_on_alignment", False):
                continue
            out[(names.index(name),)] = [["tt.divisibility", 16]]
        elif ty[:1] in ("i", "u") and isinstance(values.get(name), int) and values[name] % 16 == 0:
            out[(names.index(name),)] = [["tt.divisibility", 16]]
    return out


def resource_report(adopter: Any, shape: tuple, dtype: str, target: Target, pm: Any = None) -> list:
    """One :class:`ResourceRow` per candidate of ``adopter`` for ``shape``/``dtype`` on ``target``.

    :raises ReportError: the adopter has no ``compile_spec``, or the backend's
        compiler is not installed.
    """
    from .plugins import plugin_manager

    pm = pm or plugin_manager()
    if adopter.compile_spec is None:
        raise ReportError(
            f"adopter {adopter.name!r} has no compile_spec, so its kernels cannot be compiled for a report"
        )
    compile_one = _backend_compiler(target)
    rows = []
    for config in candidate_configs(adopter, shape, dtype, target):
        try:
            spec = _compile_spec(adopter, shape, dtype, config, target)
            hints = {**spec.options, **config.hints}
            pm.hook.flyautotune_validate_hints(hints=hints, target=target)
            rows.append(compile_one(config, spec, hints, target, pm))
        except ReportError:
            raise
        except Exception as exc:  # one candidate that does not build is a row, not the end of the report
            rows.append(ResourceRow(config=config, error=f"{type(exc).__name__}: {_first_line(exc)}"))
    return rows


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def _backend_compiler(target: Target):
    if target.backend == "rocm":
        try:
            rocm_report = importlib.import_module("flyautotune_rocm.report")
        except ImportError:
            raise ReportError(
                f"--target {target.arch} needs the ROCm backend: pip install 'flyautotune-rocm[triton]'"
            ) from None
        return _rocm_compiler(rocm_report)
    if target.backend == "cuda":
        _require_triton()
        try:
            cuda_report = importlib.import_module("flyautotune_cuda.report")
        except ImportError:
            cuda_report = None
        if cuda_report is not None and hasattr(cuda_report, "compile_report"):
            return _plugin_cuda_compiler(cuda_report)
        return _cuda_compiler
    raise ReportError(f"no report compiler for backend {target.backend!r}")


def _require_triton() -> None:
    try:
        importlib.import_module("triton")
    except ImportError:
        raise ReportError("compile reports need Triton: pip install triton") from None


def _rocm_compiler(rocm_report: Any):
    takes_attrs = "attrs" in inspect.signature(rocm_report.compile_report).parameters

    def compile_one(config, spec, hints, target, pm) -> ResourceRow:
        # Config kwargs are the adopter's knobs, already folded into constexprs by compile_spec.
        extra = {}
        if takes_attrs:  # the launch's specialization, where the ROCm plugin can take it
            sig = {**spec.signature, **{k: "constexpr" for k in spec.constexprs}}
            extra["attrs"] = specialization_attrs(spec.kernel, sig, spec.values)
        (r,) = rocm_report.compile_report(
            spec.kernel, spec.signature, [Config(compile_hints=hints)], arch=target.arch,
            constexprs=spec.constexprs, **extra,
        )
        isa = r.isa
        from flyautotune_rocm.arch import max_waves_per_eu

        details = isa.to_dict()
        details["waves_per_eu_attr"] = r.waves_per_eu_attr
        return ResourceRow(
            config=config,
            options=dict(r.options),
            registers=isa.vgprs,
            sgprs=isa.sgprs,
            spills=isa.vgpr_spills + isa.sgpr_spills,
            shared_bytes=isa.lds_bytes,
            occupancy=isa.occupancy,
            occupancy_max=max_waves_per_eu(target.arch),
            occupancy_unit="waves/SIMD",
            binary_sha256=r.binary_sha256,
            details=details,
        )

    return compile_one


def _plugin_cuda_compiler(cuda_report: Any):
    def compile_one(config, spec, hints, target, pm) -> ResourceRow:
        (r,) = cuda_report.compile_report(
            spec.kernel, spec.signature, [Config(compile_hints=hints)], arch=target.arch, constexprs=spec.constexprs
        )
        d = r.to_dict() if hasattr(r, "to_dict") else dict(vars(r))
        return ResourceRow(
            config=config,
            options=dict(d.get("options") or {}),
            registers=d.get("registers", d.get("n_regs")),
            spills=d.get("spills", d.get("n_spills")),
            shared_bytes=d.get("shared_bytes", d.get("shared")),
            occupancy=d.get("occupancy"),
            occupancy_max=d.get("occupancy_max"),
            occupancy_unit=d.get("occupancy_unit", "warps/SM"),
            binary_sha256=d.get("binary_sha256"),
            details=d,
        )

    return compile_one


def _cuda_compiler(config, spec, hints, target, pm) -> ResourceRow:
    lowered = pm.hook.flyautotune_lower_compile_hints(ir=None, hints=dict(hints), target=target)
    if lowered is None:  # no NVIDIA backend plugin installed: Triton's option names are the hint names
        lowered = {k: v for k, v in hints.items() if k in _TRITON_CUDA_OPTIONS and v}
    (info,) = cuda_compile_report(spec.kernel, spec.signature, [dict(lowered)], arch=target.arch,
                                  constexprs=spec.constexprs, values=spec.values)
    return attrs.evolve(info, config=config)


_TRITON_CUDA_OPTIONS = ("num_warps", "num_stages", "maxnreg", "num_ctas")


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
    :param values: runtime integer arguments of a real launch: specialized as
        Triton specializes a launch (see :func:`specialization_attrs`), so the
        binary is the one the GPU would run.
    :returns: one :class:`ResourceRow` per option set: registers and spill bytes
        (from ``cuobjdump -res-usage`` on the cubin), shared bytes, the occupancy
        these allow (resident warps per SM) and the cubin's sha256.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    limits = CUDA_TARGETS[arch]
    capability = int(arch.split("_", 1)[1])
    consts = dict(constexprs or {})
    sig = dict(signature)
    for name in consts:
        sig[name] = "constexpr"
    spec_attrs = specialization_attrs(kernel, sig, dict(values or {}))
    rows = []
    for opts in options:
        opts = dict(opts)
        compiled = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=spec_attrs),
                                  target=GPUTarget("cuda", capability, 32), options=opts)
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
        "registers": (limits.registers // per_warp) // num_warps,
    }
    if shared:
        need = shared + limits.reserved_shared
        by["shared"] = 0 if shared > limits.shared_per_block else limits.shared_per_sm // need
    limiter = min(by, key=lambda k: by[k])
    return by[limiter] * num_warps, limiter
