"""Launch streams: one spelling in, one torch stream object out.

``None`` -> the current stream of the inputs' device; raw ``0`` -> the device's
default stream; another int -> an external stream pointer; a stream object is
used as given. Devices without streams (CPU, meta, a type torch has no device
module for) get ``None``.

Everything goes through torch's device-module registry
(``torch.get_device_module(device)``): the same code serves every GPU build of
torch (NVIDIA and AMD share one module), and other devices never touch it.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator, Optional

#: Device types that never have streams.
_STREAMLESS = frozenset({"cpu", "meta"})


def _torch():
    return sys.modules.get("torch")


def _device_type(device: Any) -> Optional[str]:
    if device is None:
        return None
    if isinstance(device, str):
        return device.split(":", 1)[0]
    return getattr(device, "type", None)


def device_module(device: Any) -> Any:
    """torch's module for ``device``'s type (the one with ``Stream``, ``Event``, ``synchronize``), or None.

    None for CPU and meta devices, for a type torch registers no module for, and
    for a module without streams.
    """
    torch = _torch()
    kind = _device_type(device)
    if torch is None or kind is None or kind in _STREAMLESS:
        return None
    try:
        module = torch.get_device_module(kind)
    except (RuntimeError, AttributeError, ValueError):
        return None
    return module if hasattr(module, "current_stream") else None


def _require(module: Any, name: str, device: Any, spelling: str) -> Any:
    attr = getattr(module, name, None)
    if attr is None:
        raise ValueError(f"stream={spelling}: {getattr(module, '__name__', module)} has no {name} "
                         f"for device {device}; pass a stream object instead")
    return attr


def current_stream(device: Any) -> Any:
    return device_module(device).current_stream(device)


def default_stream(device: Any) -> Any:
    return _require(device_module(device), "default_stream", device, "0")(device)


def external_stream(pointer: int, device: Any) -> Any:
    return _require(device_module(device), "ExternalStream", device, str(pointer))(pointer, device=device)


#: Types of stream objects ``resolve_stream`` has returned as given: their next ones skip the checks (a stream
#: object is returned as given for every device, so only its type decides).
_AS_GIVEN: set = set()


def resolve_stream(stream: Any, device: Any) -> Any:
    """Normalize a launch-stream spelling for ``device`` (see module docstring)."""
    if type(stream) in _AS_GIVEN:
        return stream
    if isinstance(stream, bool):
        raise TypeError(f"stream={stream!r}: expected a stream object, a raw stream pointer (int) or None")
    if stream is not None and not isinstance(stream, int) and not (
            hasattr(stream, "stream_id") or hasattr(stream, "device_index")):
        raise TypeError(
            f"stream={stream!r}: expected a torch stream object, a raw stream pointer (int) or None"
        )
    if device_module(device) is None:
        if stream in (None, 0):
            return None
        if isinstance(stream, int):
            raise ValueError(f"stream={stream!r}: a raw stream pointer needs a GPU device, the inputs are on {device}")
        return _as_given(stream)
    if stream is None:
        return current_stream(device)
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"stream={stream!r}: a raw stream pointer must be >= 0 (0 = the device's default stream)")
        return default_stream(device) if stream == 0 else external_stream(stream, device)
    return _as_given(stream)


def _as_given(stream: Any) -> Any:
    if len(_AS_GIVEN) < 64:  # a handful of stream classes exist; never grow without bound
        _AS_GIVEN.add(type(stream))
    return stream


def stream_module(stream: Any) -> Any:
    """The device module that owns ``stream`` (from its ``device``), or None."""
    if stream is None:
        return None
    return device_module(getattr(stream, "device", None))


@contextlib.contextmanager
def on_stream(stream: Any) -> Iterator[None]:
    """Make ``stream`` current for the block (no-op for ``None``, a stream of no known device, or one that
    is already current on the current device)."""
    module = stream_module(stream)
    if module is None or already_current(stream, module):
        yield
        return
    with module.stream(stream):
        yield


def already_current(stream: Any, module: Any) -> bool:
    """True when ``stream`` is the current stream of the current device, told by two C calls on raw
    handles (CUDA and HIP builds: ``torch.cuda``'s getters); False where that cannot be told that cheaply.
    Entering ``torch.cuda.stream`` builds stream objects and sets them twice: 10-40 µs on an H200 host,
    more than the launch it surrounds, for a call that passes the stream it already runs on."""
    torch = _torch()
    handle = getattr(stream, "cuda_stream", None)
    index = getattr(stream, "device_index", None)
    if handle is None or index is None or torch is None or module is not getattr(torch, "cuda", None):
        return False
    C = torch._C
    try:
        return C._cuda_getDevice() == index and C._cuda_getCurrentRawStream(index) == handle
    except (AttributeError, RuntimeError):
        return False
