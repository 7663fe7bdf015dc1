"""Which torch device to run on, asked of torch's accelerator registry (no backend named here)."""

from __future__ import annotations

import sys
from typing import Any, Optional


def _accelerator() -> Optional[Any]:
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            return None
    acc = getattr(torch, "accelerator", None)
    if acc is None or not acc.is_available():
        return None
    return acc


def accelerator_type() -> Optional[str]:
    """The device type of this machine's accelerator (what ``torch.accelerator`` reports), or None."""
    acc = _accelerator()
    return None if acc is None else acc.current_accelerator().type


def device_count() -> int:
    """How many accelerator devices torch sees (0 without one)."""
    acc = _accelerator()
    return 0 if acc is None else int(acc.device_count())


def default_device() -> str:
    """``<accelerator>:0`` when torch sees an accelerator, else ``cpu``."""
    kind = accelerator_type()
    return f"{kind}:0" if kind else "cpu"


def current_device() -> Any:
    """The current accelerator device (a ``torch.device``), or the CPU."""
    import torch

    acc = _accelerator()
    if acc is None:
        return torch.device("cpu")
    return torch.device(acc.current_accelerator().type, acc.current_device_index())


def use_triton_interpreter() -> None:
    """Run Triton kernels under Triton's interpreter on the CPU (``TRITON_INTERPRET=1``, unless the
    user set it): the one place flyautotune sets a variable, before Triton's ``@jit`` reads it."""
    import os

    os.environ.setdefault("TRITON_INTERPRET", "1")
