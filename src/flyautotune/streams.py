"""Launch streams: one spelling in, one torch stream object out.

``None`` -> the current stream of the inputs' device; raw ``0`` -> the device's
default stream; another int -> an external stream pointer; a stream object is
used as given. CPU devices have no streams (``None``).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator


def _torch():
    return sys.modules.get("torch")


def current_stream(device: Any) -> Any:
    return _torch().cuda.current_stream(device)


def default_stream(device: Any) -> Any:
    return _torch().cuda.default_stream(device)


def external_stream(pointer: int, device: Any) -> Any:
    return _torch().cuda.ExternalStream(pointer, device=device)


def resolve_stream(stream: Any, device: Any) -> Any:
    """Normalize a launch-stream spelling for ``device`` (see module docstring)."""
    if isinstance(stream, bool):
        raise TypeError(f"stream={stream!r}: expected a stream object, a raw stream pointer (int) or None")
    if device is None or getattr(device, "type", "cpu") == "cpu":
        if stream in (None, 0):
            return None
        if isinstance(stream, int):
            raise ValueError(f"stream={stream!r}: a raw stream pointer needs a GPU device, the inputs are on {device}")
        return stream
    if stream is None:
        return current_stream(device)
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"stream={stream!r}: a raw stream pointer must be >= 0 (0 = the device's default stream)")
        return default_stream(device) if stream == 0 else external_stream(stream, device)
    if not (hasattr(stream, "cuda_stream") or hasattr(stream, "stream_id")):
        raise TypeError(
            f"stream={stream!r}: expected a torch stream object, a raw stream pointer (int) or None"
        )
    return stream


@contextlib.contextmanager
def on_stream(stream: Any) -> Iterator[None]:
    """Make ``stream`` current for the block (no-op for ``None``)."""
    torch = _torch()
    if stream is None or torch is None or not hasattr(stream, "cuda_stream"):
        yield
        return
    with torch.cuda.stream(stream):
        yield
