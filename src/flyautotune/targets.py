"""Targets and backend key axes: what the plugins say about a device, cached per manager."""

from __future__ import annotations

import math
import sys
import weakref
from typing import Any, Mapping

from .target import Target

# Per plugin manager (weakly: a manager's id can be reused once it is collected).
_target_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_axes_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _pm(pm: Any) -> Any:
    if pm is not None:
        return pm
    from .plugins import plugin_manager

    return plugin_manager()


_ACCEPTED = "a torch.device, a device string such as 'cpu' or 'cuda:0', or None (cpu)"


def target_for(device: Any = None, pm: Any = None) -> Target:
    """The ``Target`` a backend plugin reports for ``device`` (cached per device).

    :param device: a ``torch.device``, a device string (``"cuda:0"``) or None (``"cpu"``).
    :raises LookupError: when no installed backend owns the device.
    :raises ValueError, TypeError: for a device string torch rejects, or a value that is no device.
    """
    pm = _pm(pm)
    if device is None:
        device = "cpu"
    torch = sys.modules.get("torch")
    if isinstance(device, str) and torch is not None:
        try:
            device = torch.device(device)
        except RuntimeError as e:
            raise ValueError(f"target_for: device={device!r} is not a device string torch knows ({e}); "
                             f"accepted: {_ACCEPTED}") from None
    elif isinstance(device, (bool, int, float, list, tuple, dict, Target)) or (
            torch is not None and isinstance(device, torch.Tensor)):
        hint = "; pass tensor.device" if torch is not None and isinstance(device, torch.Tensor) else ""
        raise TypeError(f"target_for: device={device!r} is a {type(device).__name__}{hint}; accepted: {_ACCEPTED}")
    per_pm = _target_cache.setdefault(pm, {})
    cache_key = str(device)
    target = per_pm.get(cache_key)
    if target is None:
        target = pm.hook.flyautotune_target(device=device)
        if target is None:
            if getattr(device, "type", None) == "meta":
                raise LookupError(f"target_for: device={device!r} has no compile target (meta tensors hold no "
                                  f"data and run nowhere); pass the device the kernel will run on")
            raise LookupError(
                f"no flyautotune backend owns device {device}: install a backend plugin "
                f"(see docs/write_backend.md) or check FLYAUTOTUNE_DISABLE_PLUGINS"
            )
        if not isinstance(target, Target):
            raise TypeError(f"flyautotune_target returned {target!r} for {device}; expected a flyautotune.Target")
        per_pm[cache_key] = target
    return target


def backend_axes(target: Target, pm: Any = None) -> dict:
    """Merged ``flyautotune_cache_key`` axes for ``target`` (cached per process until a module is imported)."""
    pm = _pm(pm)
    per_pm = _axes_cache.setdefault(pm, {})
    # Axes may depend on what is imported (torch, FlyDSL): one imported later is keyed from then on.
    cached = per_pm.get(target)
    axes = cached[1] if cached is not None and cached[0] == len(sys.modules) else None
    if axes is None:
        axes, owners = {}, {}
        # Oldest first (the core's built-ins, then plugins in the order they registered): an axis keeps the
        # value of the first plugin that sets it, and a later one that disagrees is said, not taken.
        for impl in pm.hook.flyautotune_cache_key.get_hookimpls():
            part = impl.function(target=target)
            if not part:
                continue
            if not isinstance(part, Mapping):
                raise TypeError(f"plugin {impl.plugin_name!r}: flyautotune_cache_key returned {part!r} "
                                f"({type(part).__name__}) for {target}; expected a mapping of axis name -> "
                                f"JSON value, or None")
            for k, v in part.items():
                name = str(k)
                if not _json_value(v):
                    raise TypeError(f"plugin {impl.plugin_name!r}: flyautotune_cache_key axis {name!r}={v!r} "
                                    f"({type(v).__name__}) is not a JSON value; accepted: str, int, finite "
                                    f"float, bool, None and lists or mappings of them (a value printed as its "
                                    f"repr would differ in every process, so no stored winner would be found)")
                if name in axes and axes[name] != v:
                    _warn_axis(target, name, owners[name], axes[name], impl.plugin_name, v)
                    continue
                axes.setdefault(name, v)
                owners.setdefault(name, impl.plugin_name)
        per_pm[target] = (len(sys.modules), axes)  # after the hooks, which may import (triton)
    return dict(axes)


def _json_value(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(map(_json_value, value))
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _json_value(v) for k, v in value.items())
    return False


def _warn_axis(target: Target, name: str, first: str, kept: Any, later: str, value: Any) -> None:
    import logging

    logging.getLogger("flyautotune").warning(
        "plugins %r and %r both set the cache-key axis %r for %s (%r and %r): keeping %r's; a plugin's axes "
        "should carry its name as a prefix (rocm.hip, cuda.driver)", first, later, name, target, kept, value, first)


def clear() -> None:
    """Forget cached targets and key axes (after plugins change)."""
    _target_cache.clear()
    _axes_cache.clear()
