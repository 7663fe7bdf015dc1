"""Waves-per-EU lowering onto MLIR ``gpu.func`` kernels, for any MLIR Python binding.

ROCDL lowering copies a ``gpu.func``'s ``llvm.``-prefixed discardable
attributes onto the ``llvm.func`` it creates, so ``llvm.passthrough`` is the
attribute that reaches LLVM's ``amdgpu-waves-per-eu`` function attribute. The
minimum-only ``rocdl.waves_per_eu`` attribute is translated later and would
overwrite the passthrough value, so it is removed when a hint is applied.
"""

from __future__ import annotations

import importlib
import re
import sys
from types import ModuleType
from typing import Any, Iterator, Mapping, Optional

from .arch import base_arch
from .hints import lowest_waves_per_eu, waves_per_eu_range

PASSTHROUGH = "llvm.passthrough"
ROCDL_WAVES_PER_EU = "rocdl.waves_per_eu"
WAVES_PER_EU_KEY = "amdgpu-waves-per-eu"


def is_mlir_module(obj: Any) -> bool:
    """True for an MLIR ``Module``, or a ``builtin.module`` / ``gpu.module`` op, from any Python binding."""
    return mlir_op_name(obj) in ("builtin.module", "gpu.module")


def mlir_op_name(obj: Any) -> Optional[str]:
    """The operation name of an MLIR ``Module`` or op from any binding (``"gpu.func"``), or None for
    anything else."""
    if isinstance(obj, type) or not hasattr(obj, "operation"):
        return None
    try:
        name = obj.operation.name
    except AttributeError:
        return None
    return name if isinstance(name, str) else None


def binding_ir(module: Any) -> ModuleType:
    """The ``ir`` module of the binding ``module`` was built with.

    FlyDSL embeds its binding as ``flydsl._mlir``, upstream MLIR ships ``mlir``;
    attributes must be created by the binding that owns the module's context.
    """
    name = type(module.operation).__module__
    for marker in ("._mlir_libs", ".dialects"):
        if marker in name:
            return importlib.import_module(name.split(marker, 1)[0] + ".ir")
    mod = sys.modules.get(name)
    if mod is not None and hasattr(mod, "StringAttr") and hasattr(mod, "ArrayAttr"):
        return mod
    raise TypeError(f"cannot tell which MLIR Python binding built {module!r} (type from module {name!r})")


def _children(op: Any) -> Iterator[Any]:
    for region in op.regions:
        for block in region.blocks:
            yield from block.operations


def gpu_modules(module: Any) -> Iterator[Any]:
    """Every ``gpu.module`` op in ``module`` (itself included), also inside nested ``builtin.module`` ops."""
    if module.operation.name == "gpu.module":
        yield module
        return
    stack = [module.operation]
    while stack:
        for child in _children(stack.pop()):
            name = child.operation.name
            if name == "gpu.module":
                yield child
            elif name == "builtin.module":
                stack.append(child.operation)


#: How bindings spell the kernel marker of ``gpu.func``: recent MLIR keeps it as
#: ``kernel`` (printed as the ``kernel`` keyword), older releases as ``gpu.kernel``.
KERNEL_MARKERS = ("gpu.kernel", "kernel")


def kernel_funcs(module: Any) -> Iterator[Any]:
    """Entry-point ``gpu.func`` ops (those marked ``kernel``); device helpers are skipped."""
    for gpu_module in gpu_modules(module):
        for op in _children(gpu_module.operation):
            attrs = op.operation.attributes
            if op.operation.name == "gpu.func" and any(m in attrs for m in KERNEL_MARKERS):
                yield op


def _string_value(ir: ModuleType, attr: Any) -> Optional[str]:
    if isinstance(attr, ir.StringAttr):
        return attr.value
    try:
        return ir.StringAttr(attr).value
    except (TypeError, ValueError):
        return None


def _entry_key(ir: ModuleType, entry: Any) -> Optional[str]:
    """The attribute name of one passthrough entry: ``"name"`` or ``["name", "value"]``."""
    name = _string_value(ir, entry)
    if name is not None:
        return name
    try:
        pair = entry if isinstance(entry, ir.ArrayAttr) else ir.ArrayAttr(entry)
    except (TypeError, ValueError):
        return None
    return _string_value(ir, pair[0]) if len(pair) else None


def set_passthrough(func_op: Any, key: str, value: str, ir: Optional[ModuleType] = None) -> None:
    """Set ``[key, value]`` in ``func_op``'s ``llvm.passthrough``, replacing any entry for ``key``."""
    ir = ir or binding_ir(func_op)
    attrs = func_op.operation.attributes
    kept = []
    if PASSTHROUGH in attrs:
        kept = [entry for entry in ir.ArrayAttr(attrs[PASSTHROUGH]) if _entry_key(ir, entry) != key]
    entry = ir.ArrayAttr.get([ir.StringAttr.get(key), ir.StringAttr.get(value)])
    attrs[PASSTHROUGH] = ir.ArrayAttr.get([*kept, entry])


def passthrough(func_op: Any) -> dict:
    """``llvm.passthrough`` of an op as ``{name: value or None}`` (for reading and tests)."""
    ir = binding_ir(func_op)
    attrs = func_op.operation.attributes
    out: dict = {}
    if PASSTHROUGH not in attrs:
        return out
    for entry in ir.ArrayAttr(attrs[PASSTHROUGH]):
        name = _string_value(ir, entry)
        if name is not None:
            out[name] = None
            continue
        pair = ir.ArrayAttr(entry)
        out[_string_value(ir, pair[0])] = _string_value(ir, pair[1]) if len(pair) > 1 else None
    return out


def lower_waves_per_eu(module: Any, waves_per_eu: Any, arch: Optional[str] = None) -> Any:
    """Materialize ``waves_per_eu`` on every kernel ``gpu.func`` of ``module``; return ``module``.

    ``None`` and ``0`` leave the module as it is. ``N`` becomes the passthrough
    entry ``["amdgpu-waves-per-eu", "N,N"]``, ``(lo, hi)`` / ``"lo,hi"`` become
    ``"lo,hi"``. Device helper functions are not touched.
    """
    span = waves_per_eu_range(waves_per_eu, arch)
    if span is None:
        return module
    ir = binding_ir(module)
    value = f"{span[0]},{span[1]}"
    with module.context:
        kernels = list(kernel_funcs(module))
        if not kernels:
            raise ValueError(f"compile hint 'waves_per_eu'={waves_per_eu!r}: {_no_kernel(module)}")
        if arch is not None:
            for func_op in kernels:  # all checked before any is changed
                _check_waves_against_workgroup(func_op, span, waves_per_eu, arch, ir)
        for func_op in kernels:
            set_passthrough(func_op, WAVES_PER_EU_KEY, value, ir)
            attrs = func_op.operation.attributes
            if ROCDL_WAVES_PER_EU in attrs:
                del attrs[ROCDL_WAVES_PER_EU]
    return module


def workgroup_threads(func_op: Any, ir: Optional[ModuleType] = None) -> Optional[int]:
    """The most threads a workgroup of kernel ``func_op`` may have, as ROCDL lowering tells LLVM
    (``amdgpu-flat-work-group-size``'s maximum), or None where the IR leaves lowering's default (256).

    Read as lowering ranks them: ``known_block_size`` (or ``rocdl.reqd_work_group_size``), then
    ``rocdl.max_flat_work_group_size``, ``rocdl.flat_work_group_size``, a ``llvm.passthrough`` entry.
    """
    ir = ir or binding_ir(func_op)
    attrs = func_op.operation.attributes
    for name in ("known_block_size", "rocdl.reqd_work_group_size"):
        if name in attrs:  # array<i32: x, y, z>
            threads = 1
            for dim in re.findall(r"\d+", str(attrs[name]).split(":", 1)[-1]):
                threads *= int(dim)
            return threads
    if "rocdl.max_flat_work_group_size" in attrs:  # 1024 : i32
        return int(str(attrs["rocdl.max_flat_work_group_size"]).split(":", 1)[0])
    flat = None
    if "rocdl.flat_work_group_size" in attrs:
        flat = _string_value(ir, attrs["rocdl.flat_work_group_size"])
    elif PASSTHROUGH in attrs:
        flat = passthrough(func_op).get("amdgpu-flat-work-group-size")
    return int(flat.split(",")[-1]) if flat else None


def _check_waves_against_workgroup(func_op: Any, span: tuple, value: Any, arch: str, ir: ModuleType) -> None:
    """Refuse a minimum LLVM would ignore: a kernel's workgroup puts at least ``ceil(waves / 4)`` waves on each
    SIMD, and a lower ``amdgpu-waves-per-eu`` minimum builds the binary of no hint."""
    threads = workgroup_threads(func_op, ir)
    if threads is None:
        return
    # Counted in waves of 64: exact on gfx9; on gfx10+ the wave size is picked later (rocdl-attach-target),
    # and wave64 gives the lower bound, so only what LLVM ignores in either mode is refused.
    lowest = lowest_waves_per_eu(-(-threads // 64), arch)
    if lowest is None or span[0] >= lowest:
        return
    name = _string_value(ir, func_op.operation.attributes["sym_name"])
    raise ValueError(
        f"compile hint 'waves_per_eu': {value!r} on {base_arch(arch)}: kernel {name!r} has workgroups of "
        f"{threads} threads, which put at least {lowest} waves on each SIMD, so LLVM ignores a minimum below "
        f"{lowest} and builds the kernel as without the hint; accepted: 0 (the kernel's own) or a minimum of at "
        f"least {lowest}"
    )


def _no_kernel(module: Any) -> str:
    """Why a module has no kernel ``gpu.func`` to put a hint on, in words for its author."""
    gpu = list(gpu_modules(module))
    if not gpu:
        lowered = any(op.operation.name == "llvm.func" for op in _children(module.operation))
        if lowered:
            return ("the module holds llvm.func ops and no gpu.module: it was lowered already (convert-gpu-to-rocdl "
                    "ran), so no kernel takes the hint; apply hints to the module before that pass")
        return "the module holds no gpu.module, so no kernel takes the hint; pass the module with the kernels"
    inner = [op for g in gpu for op in _children(g.operation) if op.operation.name == "llvm.func"]
    if inner:
        kernels = sum(1 for op in inner if "rocdl.kernel" in op.operation.attributes)
        return (f"its gpu.module op(s) hold llvm.func ops ({kernels} marked rocdl.kernel) and no gpu.func kernel: "
                f"the module was lowered already (convert-gpu-to-rocdl ran), so no kernel takes the hint; apply "
                f"hints to the module before that pass")
    return (f"its {len(gpu)} gpu.module op(s) hold no gpu.func marked kernel (only device helpers), so no "
            f"kernel takes the hint")


def lower_module_hints(module: Any, hints: Mapping[str, Any], arch: Optional[str] = None) -> Any:
    """Apply a hint snapshot to an MLIR module; only ``waves_per_eu`` has an MLIR form.

    :raises ValueError: for a set hint (other than ``waves_per_eu``) that an
        MLIR kernel cannot take, since its launch shape is fixed in the IR.
    """
    for name, value in hints.items():
        unset = value is None or (value == 0 and not isinstance(value, bool))  # False is a setting, not "unset"
        if name != "waves_per_eu" and not unset:
            raise ValueError(
                f"compile hint {name!r}={value!r} cannot be applied to an MLIR module on ROCm: "
                f"only waves_per_eu is lowered onto gpu.func kernels (tune launch shape as a kernel kwarg)"
            )
    return lower_waves_per_eu(module, hints.get("waves_per_eu"), arch)
