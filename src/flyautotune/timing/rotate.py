"""How many copies of a launch's inputs to rotate so that each launch finds them cold.

Real use reads inputs that the previous kernels pushed out of the caches; timing
one launch over and over on the same inputs reads them from the last-level cache
instead. Launching round-robin over enough copies (their total above about twice
the last-level cache, or one for every launch of a graph replay where that is
fewer) keeps every launch cold. The cache size comes from the
device properties (``L2_cache_size``) unless a backend knows better: a cache the
properties do not report (a memory-side cache such as AMD's Infinity Cache) is
supplied by a probe registered with :func:`register_cache_probe`, or by the
caller as ``cache_bytes=``.
"""

from __future__ import annotations

import math
import numbers
import threading
from typing import Any, Callable, Optional

from .graph import MAX_LAUNCHES

#: Assumed when a device reports no cache size.
DEFAULT_CACHE_BYTES = 64 << 20
#: The most copies: as many as one graph replay launches, so no copy comes round twice in a replay. Under
#: that count, small inputs came round again within a replay still in the cache: with 64 copies (the old
#: cap) a 32 × 4096 bf16 row block (264 KB a set, 17 MB in all on an H200's 50 MB L2) was timed warm, and
#: the search ranked configs the other way round from cold graph replay.
MAX_ROTATIONS = MAX_LAUNCHES
#: The rotated footprint aims at this multiple of the last-level cache.
FOOTPRINT_FACTOR = 2.0

CacheProbe = Callable[[Any, Any], Optional[int]]
_probes: dict = {}
_lock = threading.Lock()


def register_cache_probe(name: str, probe: CacheProbe) -> None:
    """Let a backend report the last-level cache of its devices.

    :param name: the backend's name; registering the same name again replaces
        its probe (so re-importing a plugin is harmless).
    :param probe: ``probe(device, device_module) -> bytes or None``; None when
        the device is not the backend's.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_cache_probe: name={name!r}: expected a non-empty backend name")
    if not callable(probe):
        raise TypeError(f"register_cache_probe: probe={probe!r}: expected probe(device, device_module) -> int | None")
    from .engine import call_problem

    why = call_problem(probe, 2)
    if why:
        raise TypeError(f"register_cache_probe: probe={probe!r} cannot be called as probe(device, device_module) "
                        f"({why}); expected probe(device, device_module) -> int | None")
    with _lock:
        _probes[name] = probe


def unregister_cache_probe(name: str) -> None:
    """Forget the probe registered as ``name`` (no error if there is none)."""
    if not isinstance(name, str):
        raise TypeError(f"unregister_cache_probe: name={name!r}: expected the backend name the probe was "
                        f"registered under (a str)")
    with _lock:
        _probes.pop(name, None)


def last_level_cache_bytes(device: Any, module: Any = None) -> Optional[int]:
    """The largest cache between the device's memory and its cores, in bytes.

    The largest of the registered probes' answers and the device properties'
    ``L2_cache_size``; :data:`DEFAULT_CACHE_BYTES` when the device module reports
    nothing; None for a device without a device module (CPU).
    """
    if module is None:
        from .. import streams

        module = streams.device_module(device)
    with _lock:
        probes = list(_probes.items())
    sizes = []
    for name, probe in probes:
        size = probe(device, module)
        if size is None:
            continue
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0:
            raise ValueError(f"cache probe {name!r} returned {size!r} for device {device}; expected the "
                             f"last-level cache in bytes (an int >= 0), or None when the device is not its own")
        if size:
            sizes.append(int(size))
    if module is not None:
        try:
            props = module.get_device_properties(device)
            sizes.append(int(getattr(props, "L2_cache_size", 0) or 0))
        except Exception:  # a device module without properties: fall back to the default below
            pass
    best = max(sizes, default=0)
    if best > 0:
        return best
    return DEFAULT_CACHE_BYTES if module is not None else None


def rotation_count(
    device: Any,
    bytes_per_set: int,
    *,
    cache_bytes: Optional[int] = None,
    factor: float = FOOTPRINT_FACTOR,
    max_count: int = MAX_ROTATIONS,
) -> int:
    """How many copies of a launch's inputs (``rotations``, the original included) to launch round-robin.

    :param device: the torch device the launch runs on.
    :param bytes_per_set: bytes one launch reads and writes (one copy of its inputs
        and outputs).
    :param cache_bytes: the last-level cache size; None = :func:`last_level_cache_bytes`.
    :param factor: the rotated footprint aims at ``factor`` times the cache.
    :param max_count: the most copies returned.
    :returns: ``ceil(factor * cache / bytes_per_set)`` within ``[1, max_count]``;
        1 on a device without a cache size (CPU).
    """
    if isinstance(bytes_per_set, bool) or not isinstance(bytes_per_set, int) or bytes_per_set <= 0:
        raise ValueError(f"rotation_count: bytes_per_set={bytes_per_set!r}: expected the bytes of one input set, an int > 0")
    if cache_bytes is not None and (isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0):
        raise ValueError(f"rotation_count: cache_bytes={cache_bytes!r}: expected an int >= 0 or None")
    if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 1:
        raise ValueError(f"rotation_count: max_count={max_count!r}: expected an int >= 1")
    if not (isinstance(factor, (int, float)) and not isinstance(factor, bool) and math.isfinite(factor) and factor > 0):
        raise ValueError(f"rotation_count: factor={factor!r}: expected a finite number > 0")
    cache = last_level_cache_bytes(device) if cache_bytes is None else cache_bytes
    if not cache:
        return 1
    return max(1, min(max_count, math.ceil(factor * cache / bytes_per_set)))
