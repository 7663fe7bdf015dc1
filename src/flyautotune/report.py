"""Static resource reports: cross-compile every candidate of an adopter for a
GPU target and read registers, spills, shared memory, occupancy and a hash of
the binary — on any machine, no GPU needed.

The core only evaluates the config space and asks the backends: target names
come from the ``flyautotune_report_targets`` hook and each candidate is
compiled by the ``flyautotune_compile_report`` hook of the plugin that owns
the target.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable, ContextManager, Mapping, Optional, Sequence

import attrs

from .config import Config
from .progress import first_line
from .target import Target


class ReportError(RuntimeError):
    """The report cannot be made (a missing plugin or toolchain); says what to install."""


@attrs.frozen
class ResourceRow:
    """What one candidate compiled to on one target (``error`` set when it could not be built)."""

    config: Config
    options: dict = attrs.field(factory=dict)  #: compile options the binary was built with
    registers: Optional[int] = None  #: vector registers (AMD) or registers per thread (NVIDIA)
    sgprs: Optional[int] = None  #: scalar registers, where the backend has them
    spills: Optional[int] = None  #: spilled registers or spill bytes (the backend says which)
    shared_bytes: Optional[int] = None  #: shared memory (LDS) per block
    occupancy: Optional[int] = None  #: resident waves/warps, in ``occupancy_unit``
    occupancy_max: Optional[int] = None
    occupancy_unit: str = ""
    binary_sha256: Optional[str] = None
    error: Optional[str] = None
    details: dict = attrs.field(factory=dict)  #: everything else the backend reported
    #: column titles in the backend's words, by field name (``{"registers": "VGPRs"}``)
    labels: dict = attrs.field(factory=dict)

    def to_dict(self) -> dict:
        d = attrs.asdict(self, recurse=False)
        d["config"] = self.config.to_dict() if self.config.pre_hook is None else repr(self.config)
        d["options"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.options.items()}
        return d


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
    :param compiling: a callable returning the context manager the adopter's own launch compiles this
        kernel in (a compiler stage hook it sets, say), or ``None``; the report compiles inside it, so
        it reads the binary a launch builds.
    """

    kernel: Any
    signature: dict
    constexprs: dict
    options: dict = attrs.field(factory=dict)
    values: dict = attrs.field(factory=dict)
    compiling: Optional[Callable[[], ContextManager]] = None


# -- targets ----------------------------------------------------------------------------

#: Which distribution brings which target family, for the error message only.
_INSTALL_HINT = "NVIDIA sm_* targets come with flyautotune-cuda, AMD gfx* targets with flyautotune-rocm"


def report_targets(pm: Any = None) -> dict:
    """Every target name an installed plugin can compile reports for: name -> ``Target``, sorted."""
    from .plugins import plugin_manager

    pm = pm or plugin_manager()
    merged: dict = {}
    for answer in pm.hook.flyautotune_report_targets():
        for name, target in dict(answer or {}).items():
            if not isinstance(target, Target):
                raise TypeError(f"flyautotune_report_targets: {name!r} maps to {target!r}; expected a Target")
            merged.setdefault(str(name).lower(), target)
    return dict(sorted(merged.items()))


def parse_target(text: str, pm: Any = None) -> Target:
    """``"gfx942"`` -> the ``Target`` the installed plugin offers under that name
    (case, and ``_`` in names such as ``sm_90``, do not matter; an LLVM target id's feature settings,
    ``"gfx942:sramecc+:xnack-"``, are dropped).

    :raises ValueError: naming the value, the accepted names and what to install.
    """
    targets = report_targets(pm)
    name = str(text).strip().lower()
    if name in targets:
        return targets[name]
    squashed = {k.replace("_", ""): v for k, v in targets.items()}
    if name.replace("_", "") in squashed:
        return squashed[name.replace("_", "")]
    # An LLVM target id ("gfx942:sramecc+:xnack-", as rocminfo prints it): the processor before the feature
    # settings. Reports compile for the processor alone (Triton builds a code object for any setting).
    processor = name.split(":", 1)[0]
    if processor != name and processor in targets:
        return targets[processor]
    accepted = ", ".join(targets) or "none (no installed plugin compiles reports)"
    raise ValueError(f"--target {text!r} is not a supported target; accepted: {accepted} ({_INSTALL_HINT})")


# -- which configs ----------------------------------------------------------------------


#: Where a computed config space (or a default, a pruning) is evaluated: torch's ``meta`` device first
#: (shapes, strides and dtypes, no memory, so any shape), then the CPU, for an adopter whose ``example``,
#: ``bind`` or callables need real data (a ``.item()``, say). Neither is the report's target: a
#: target-dependent space asks ``current_target()``, which is the report's target while it is evaluated.
SPACE_DEVICES = ("meta", "cpu")


def candidate_configs(adopter: Any, shape: tuple, dtype: str, target: Target,
                      devices: Sequence[str] = SPACE_DEVICES) -> list:
    """The configs a search of ``adopter`` would time for ``shape``/``dtype`` on ``target``, in its order
    (the search's own :func:`~flyautotune.tuning.lookup.search_configs`: the default first, also where the
    space lacks it, then the space, evaluated and pruned), evaluated on the first of ``devices`` where the
    adopter's example inputs, ``bind`` and the tuner's callables all run; the last device's error is raised
    when none does."""
    if not isinstance(devices, (list, tuple)) or not devices or not all(isinstance(d, str) for d in devices):
        raise ValueError(f"candidate_configs: devices={devices!r} is not a non-empty list or tuple of device names; "
                         f"expected e.g. {SPACE_DEVICES!r} or ('meta',)")
    tuner = adopter.tuner
    needs = needs_inputs(tuner)
    if not needs:
        return list(tuner.configs)
    if adopter.example is None:
        raise ReportError(f"adopter {adopter.name!r} has {needs} but no example() to evaluate it for a shape")
    for device in devices[:-1]:
        try:
            return _space_on(adopter, shape, dtype, target, device)
        except Exception:  # noqa: BLE001 - the next device is tried; the last one's error is the report's
            pass
    return _space_on(adopter, shape, dtype, target, devices[-1])


def needs_inputs(tuner: Any) -> str:
    """What makes the configs a search times depend on the call's arguments (a computed space, a default,
    a pruning), in words; ``""`` where they are the static space as it is."""
    pruned = tuner.prune_configs_by is not None and (callable(tuner.configs) or len(tuner.configs) > 1)
    what = [f"{name}=" for name, present in (("configs", callable(tuner.configs)),
                                             ("default", tuner.default is not None),
                                             ("prune_configs_by", pruned)) if present]
    return " and ".join(what)


def _space_on(adopter: Any, shape: tuple, dtype: str, target: Target, device: str) -> list:
    from . import target_context
    from .tuning.lookup import search_configs

    tuner = adopter.tuner
    args, kwargs = adopter.example(shape, dtype, device)
    targs, tkwargs = adopter.bind(*args, **kwargs)
    call = tuner.sig.bind(tuple(targs), dict(tkwargs))
    # A target-dependent space (and default) is evaluated for the report's target, not this machine.
    with target_context(target):
        return search_configs(tuner, call)


# -- compiling --------------------------------------------------------------------------


def compile_spec(adopter: Any, shape: tuple, dtype: str, config: Config, target: Target) -> KernelSpec:
    """The adopter's ``compile_spec`` answer as a :class:`KernelSpec`.

    ``compile_spec`` may take ``target=`` and returns ``(kernel, signature,
    constexprs)`` or ``(kernel, signature, constexprs, extra)`` where ``extra``
    holds ``"options"``, ``"values"`` and/or ``"compiling"`` (a plain dict of
    compile options is read as ``"options"``).
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
    compiling = None
    if extra and set(extra) <= {"options", "values", "compiling"}:
        options, values = dict(extra.get("options") or {}), dict(extra.get("values") or {})
        compiling = extra.get("compiling")
        if compiling is not None and not callable(compiling):
            raise TypeError(f"adopter {adopter.name!r}: compile_spec's extra['compiling'] is {compiling!r}; "
                            f"expected a callable that returns a context manager, or None")
    else:
        options, values = extra, {}
    return KernelSpec(kernel, dict(signature), dict(constexprs or {}), options, values, compiling)


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


def resource_report(adopter: Any, shape: tuple, dtype: str, target: Target, pm: Any = None,
                    configs: Optional[Sequence[Config]] = None) -> list:
    """One :class:`ResourceRow` per candidate of ``adopter`` for ``shape``/``dtype`` on ``target``
    (``configs``: the candidates, where the caller has evaluated them already; else :func:`candidate_configs`).

    :raises ReportError: the adopter has no ``compile_spec``, no installed
        plugin compiles for ``target``, or the backend's compiler is missing.
    """
    from .plugins import plugin_manager

    pm = pm or plugin_manager()
    if adopter.compile_spec is None:
        raise ReportError(
            f"adopter {adopter.name!r} has no compile_spec, so its kernels cannot be compiled for a report"
        )
    rows = []
    for config in (candidate_configs(adopter, shape, dtype, target) if configs is None else configs):
        try:
            spec = compile_spec(adopter, shape, dtype, config, target)
            hints = {**spec.options, **config.hints}
            pm.hook.flyautotune_validate_hints(hints=hints, target=target)
            with spec.compiling() if spec.compiling is not None else contextlib.nullcontext():
                row = pm.hook.flyautotune_compile_report(spec=spec, config=config, hints=hints, target=target)
        except ReportError:
            raise
        except Exception as exc:  # one candidate that does not build is a row, not the end of the report
            rows.append(ResourceRow(config=config, error=f"{type(exc).__name__}: {first_line(str(exc))}"))
            continue
        if row is None:
            raise ReportError(f"no installed plugin compiles reports for {target.backend}/{target.arch} "
                              f"({_INSTALL_HINT})")
        rows.append(row if row.config == config else attrs.evolve(row, config=config))
    return rows
