"""Timing candidates on an AMD GPU: the core's timing engine on the launch stream.

ROCm builds of torch expose HIP streams, events and graphs through the same
device module as NVIDIA builds, so the engine (``flyautotune.timing``) runs
unchanged. What the engine cannot read from the device properties is the
memory-side Infinity Cache of CDNA3/4 chips (256 MiB on MI300X, far above their
4 MiB L2): :func:`infinity_cache_bytes` supplies it, so rotated inputs and
cache flushes are sized past it.
"""

from __future__ import annotations

from typing import Any, Optional

from flyautotune import timing

from .arch import base_arch

#: Memory-side last-level cache (AMD Infinity Cache / MALL) per arch, in bytes.
INFINITY_CACHE = {
    "gfx942": 256 << 20,  # MI300X, MI300A, MI325X
    "gfx950": 256 << 20,  # MI350X, MI355X
}


def infinity_cache_bytes(arch: str) -> Optional[int]:
    """The Infinity Cache of ``arch`` (e.g. ``"gfx942:sramecc+:xnack-"``), or None where none is known."""
    try:
        return INFINITY_CACHE.get(base_arch(arch))
    except ValueError:
        return None


def cache_probe(device: Any, module: Any) -> Optional[int]:
    """For :func:`flyautotune.timing.register_cache_probe`: the Infinity Cache of a ROCm GPU, else None."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not getattr(torch.version, "hip", None) or module is None:
        return None
    if getattr(device, "type", str(device).split(":", 1)[0]) != "cuda":
        return None
    try:
        props = module.get_device_properties(device)
    except Exception:  # no driver: the engine falls back to its default size
        return None
    return infinity_cache_bytes(getattr(props, "gcnArchName", "") or "")


timing.register_cache_probe("rocm", cache_probe)


#: One launch timed on its stream's device (see :func:`flyautotune.timing.time_on_stream`).
benchmark = timing.time_on_stream
