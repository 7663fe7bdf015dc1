"""Which torch devices are ROCm GPUs, and what they compile for."""

from __future__ import annotations

from typing import Any, Optional

from flyautotune import Target

from .arch import base_arch, warp_size


def rocm_target(device: Any) -> Optional[Target]:
    """``Target("rocm", "gfx942", 64)`` for a GPU of a ROCm torch build, else None.

    ROCm builds of torch report GPUs as device type ``cuda``; ``torch.version.hip``
    tells them apart from NVIDIA builds.
    """
    try:
        import torch
    except ImportError:
        return None
    if not getattr(torch.version, "hip", None):
        return None
    if isinstance(device, str):
        device = torch.device(device)
    if getattr(device, "type", None) != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    arch = base_arch(getattr(props, "gcnArchName", "") or "")
    return Target("rocm", arch, warp_size(arch))
