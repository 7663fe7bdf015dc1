"""Targets and backend key axes: what the plugins say about a device, cached per manager."""

from __future__ import annotations

import sys
import weakref
from typing import Any

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
    """Merged ``flyautotune_cache_key`` axes for ``target`` (cached per process)."""
    pm = _pm(pm)
    per_pm = _axes_cache.setdefault(pm, {})
    axes = per_pm.get(target)
    if axes is None:
        axes = {}
        # pluggy returns results last-registered first; merge oldest first so
        # a later plugin's axis is visible next to, not silently over, another's
        for part in reversed(pm.hook.flyautotune_cache_key(target=target)):
            if part:
                axes.update({str(k): v for k, v in part.items()})
        per_pm[target] = axes
    return dict(axes)


def clear() -> None:
    """Forget cached targets and key axes (after plugins change)."""
    _target_cache.clear()
    _axes_cache.clear()
