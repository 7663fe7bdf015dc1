"""The core's own behaviour, registered as ordinary plugins (all ``trylast``),
so a third-party plugin can replace any of it."""

from __future__ import annotations

import difflib
import platform
import sys
from typing import Any, Callable, Optional

from . import timing
from ._markers import hookimpl
from .hints import KNOWN_HINTS
from .measurement import Measurement
from .target import Target


class CpuBackend:
    """Owns ``torch.device("cpu")``: Triton's interpreter and plain Python launches."""

    __name__ = "flyautotune.builtin.CpuBackend"

    @staticmethod
    @hookimpl(trylast=True)
    def flyautotune_target(device: Any) -> Optional[Target]:
        if getattr(device, "type", device) == "cpu":
            return Target("cpu", platform.machine() or "unknown", 1)
        return None

    @staticmethod
    @hookimpl(trylast=True)
    def flyautotune_validate_hints(hints, target) -> None:
        # The CPU backend ignores compile hints: every candidate runs the same code. A name
        # spelled close to a hint the core knows is a typo, silent here and refused on a GPU.
        if target.backend != "cpu":
            return None
        for name in hints:
            if name in KNOWN_HINTS:
                continue
            close = difflib.get_close_matches(name, KNOWN_HINTS, n=1, cutoff=0.85)
            if close:
                raise ValueError(f"cpu: unknown compile hint {name}={hints[name]!r} (did you mean {close[0]!r}?); "
                                 f"the hints the core knows are {', '.join(KNOWN_HINTS)}")
        return None


class PerfCounterBenchmark:
    """Host wall-clock timing: right for synchronous (CPU / interpreter) launches."""

    __name__ = "flyautotune.builtin.PerfCounterBenchmark"

    @staticmethod
    @hookimpl(trylast=True)
    def flyautotune_benchmark(fn: Callable[[], Any], setup: Optional[Callable[[], Any]], target: Target,
                              warmup: int, rep: int, cutoff_ms: Optional[float]) -> Optional[Measurement]:
        # synchronous launches: no stream, and nothing to rotate (the host clock sees every launch)
        if target.backend != "cpu":
            return None
        return timing.benchmark(fn, setup=setup, warmup=warmup, rep=rep, method="wall", warm=False,
                                cutoff_ms=cutoff_ms)


class DefaultKeyAxes:
    """Python, torch and flyautotune versions: any of them can change codegen."""

    __name__ = "flyautotune.builtin.DefaultKeyAxes"

    @staticmethod
    @hookimpl(trylast=True)
    def flyautotune_cache_key(target: Target) -> dict:
        from . import __version__

        axes = {
            "python": "%d.%d" % sys.version_info[:2],
            "flyautotune": __version__,
        }
        torch = sys.modules.get("torch")
        if torch is not None:
            axes["torch"] = torch.__version__
        return axes


def builtin_plugins() -> tuple:
    """``(name, plugin)`` pairs the plugin manager registers after the installed plugins."""
    from .events import LISTENERS, EventLog
    from .store.plugin import SqliteStorePlugin

    return (
        ("flyautotune.cpu", CpuBackend),
        ("flyautotune.benchmark", PerfCounterBenchmark),
        ("flyautotune.keys", DefaultKeyAxes),
        ("flyautotune.store", SqliteStorePlugin),
        ("flyautotune.eventlog", EventLog()),
        ("flyautotune.listeners", LISTENERS),
    )
