"""``benchmark()``: the time of one launch, taken the way real use runs it.

On a device with graph capture and no per-launch setup: warm the clocks, then
graph replays of round-robin launches over rotated inputs, each replay behind a
cache flush (``"graph"``). When
capture fails, or ``setup`` must run between launches: per-launch device events
(``"events"``), with a cache flush when there are no rotated inputs, and the
reason in ``Measurement.note``. On a device without a device module (CPU): the
host clock (``"wall"``). A launch slower than the cutoff is timed once
(``"cutoff"``): one graph replay where graphs are the method (an eager launch
also times the host between the kernels of a multi-kernel launch), else one
launch.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import sys
import threading
from collections.abc import Iterable
from typing import Any, Callable, Iterator, Optional, Sequence

from .. import streams
from ..measurement import Measurement
from . import clocks, events, graph, wall

METHODS = ("graph", "events", "wall")
_local = threading.local()


@contextlib.contextmanager
def cutoff_after(ms: Optional[float]) -> Iterator[None]:
    """Within the block, :func:`benchmark` calls on this thread cut a launch slower than ``ms`` short.

    For callers that reach the engine through a plugin hook (which has no cutoff
    argument). None lifts the cutoff. Nests; the innermost value wins.
    """
    _check_cutoff(ms)
    previous = getattr(_local, "cutoff", None)
    _local.cutoff = ms
    try:
        yield
    finally:
        _local.cutoff = previous


def current_cutoff() -> Optional[float]:
    """The cutoff set by the innermost :func:`cutoff_after` on this thread, or None."""
    return getattr(_local, "cutoff", None)


def _check_cutoff(ms: Any) -> None:
    if ms is not None and (isinstance(ms, bool) or not isinstance(ms, (int, float))
                           or not math.isfinite(ms) or ms <= 0):
        raise ValueError(f"cutoff_ms={ms!r}: expected a finite time in milliseconds > 0, or None")


def _check_launch(arg: str, value: Any) -> None:
    """``value`` runs one launch when called with no arguments, or a clear error naming ``arg``."""
    if inspect.iscoroutinefunction(value) or inspect.isgeneratorfunction(value) or inspect.isasyncgenfunction(value):
        raise TypeError(f"benchmark: {arg}={value!r}: an async or generator function returns without running "
                        f"its body, so its launch would not be timed; accepted: a plain callable")
    why = call_problem(value, 0)
    if why:
        raise TypeError(f"benchmark: {arg}={value!r} cannot be called with no arguments ({why}); accepted: a "
                        f"callable taking none, e.g. lambda: kernel[grid](x, y)")


def call_problem(fn: Callable, nargs: int) -> str:
    """Why ``fn`` cannot be called with ``nargs`` positional arguments (Python's own words), or ``""``; also
    ``""`` where it has no signature to read (a builtin): calling it tells then."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return ""
    try:
        signature.bind(*[None] * nargs)
    except TypeError as exc:
        return str(exc)
    return ""


def _check_args(fn, warmup, rep, rotations, method, setup=None, stream=None, warm=True) -> list:
    if not callable(fn):
        raise TypeError(f"benchmark: fn={fn!r}: expected a callable that runs one launch")
    _check_launch("fn", fn)
    if setup is not None:
        if not callable(setup):
            raise TypeError(f"benchmark: setup={setup!r}: expected a callable run untimed before every launch, "
                            f"or None")
        _check_launch("setup", setup)
    for arg, value, low in (("warmup", warmup, 0), ("rep", rep, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"benchmark: {arg}={value!r}: expected an int >= {low}")
    if method is not None and method not in METHODS:
        raise ValueError(f"benchmark: method={method!r}: expected one of {', '.join(METHODS)} or None (automatic)")
    if not isinstance(warm, bool):
        raise TypeError(f"benchmark: warm={warm!r}: expected True (warm the clocks first) or False")
    if stream is not None and (isinstance(stream, bool) or (isinstance(stream, int) and stream < 0) or (
            not isinstance(stream, int) and not (hasattr(stream, "stream_id") or hasattr(stream, "device_index")))):
        raise TypeError(f"benchmark: stream={stream!r}: expected a torch stream object, a raw stream pointer "
                        f"(an int >= 0) or None")
    if rotations is None:
        rotations = ()
    if isinstance(rotations, (str, bytes)) or callable(rotations) or not isinstance(rotations, Iterable):
        raise TypeError(f"benchmark: rotations={rotations!r}: expected a sequence of callables, each one launch "
                        f"over its own input copy (rotations[0] is fn), or () for fn alone")
    launches = list(rotations)
    bad = [r for r in launches if not callable(r)]
    if bad:
        raise TypeError(f"benchmark: rotations contains {bad[0]!r}: expected callables, each one launch")
    return launches


def _check_device(device: Any) -> Any:
    """``device`` as a torch device (or an object with a device ``type``), or a clear error; None stays None."""
    if device is None or (not isinstance(device, (str, int)) and isinstance(getattr(device, "type", None), str)):
        return device
    accepted = "accepted: a torch.device, a device string such as 'cuda:0' or 'cpu', an accelerator index, or None"
    if isinstance(device, bool) or not isinstance(device, (str, int)):
        raise TypeError(f"benchmark: device={device!r}: {accepted}")
    import torch

    try:
        return torch.device(device)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise ValueError(f"benchmark: device={device!r}: {exc}; {accepted}") from None


def _check_module(module: Any) -> None:
    if module is not None and not all(callable(getattr(module, attr, None))
                                      for attr in ("current_stream", "stream", "Event")):
        raise TypeError(f"benchmark: module={module!r}: expected a torch device module such as torch.cuda (with "
                        f"current_stream, stream and Event), or None (the device's own)")


def _default_device(stream: Any) -> Any:
    if stream is not None and not isinstance(stream, int):
        return getattr(stream, "device", None)
    accelerator = getattr(sys.modules.get("torch"), "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return accelerator.current_accelerator()
    return None


def _checked(ms: Any, name: str, how: str) -> float:
    """A timing the device reported, as a positive float, or a clear error naming the candidate."""
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
        raise ValueError(f"{name}: {how} timing gave {ms!r} ms; the device clock returned no usable time")
    return ms if ms > 1e-6 else 1e-6  # shorter than the clock's tick: report the tick, never 0


def _cut(ms: float, cutoff: float, what: str) -> Measurement:
    return Measurement(ms, None, "cutoff", 1, f"cut short after {what}: {ms:.4g} ms > cutoff {cutoff:.4g} ms")


def benchmark(
    fn: Callable[[], Any],
    *,
    setup: Optional[Callable[[], Any]] = None,
    stream: Any = None,
    device: Any = None,
    warmup: int = 5,
    rep: int = 20,
    rotations: Sequence[Callable[[], Any]] = (),
    cutoff_ms: Optional[float] = None,
    method: Optional[str] = None,
    warm: bool = True,
    module: Any = None,
    name: str = "candidate",
    flush: bool = True,
) -> Measurement:
    """The time of one ``fn()`` launch, with its spread and how it was taken.

    :param fn: runs one launch on the current stream (or on ``stream``).
    :param setup: untimed before every timed launch; forces event timing.
    :param stream: the launch stream (a stream object, a raw pointer, or None =
        the device's current stream).
    :param device: the torch device; None = the stream's device, else the
        current accelerator, else the host.
    :param warmup: untimed launches before event or host timing.
    :param rep: graph replays, or timed launches (event and host timing).
    :param rotations: the same launch over distinct input copies (``rotations[0]``
        is ``fn``), launched round-robin; empty = ``fn`` alone.
    :param cutoff_ms: when the first timed launch takes longer, stop there and
        return it with method ``"cutoff"``; None = :func:`current_cutoff`.
    :param method: force ``"graph"`` (still falls back to events when capture
        fails), ``"events"`` or ``"wall"``; None = automatic.
    :param warm: warm the clocks first (once per process and device, again after idling).
    :param module: the device module to use; None = ``torch.get_device_module(device)``.
    :param name: names the candidate in error messages.
    :param flush: graph timing zeroes a buffer twice the last-level cache before every replay
        (untimed), so each replay starts behind another kernel's dirty lines, as in real use and as
        Triton's ``do_bench`` times (False: replays back to back, the cache holding only the
        launch's own lines).
    :returns: a :class:`flyautotune.Measurement` (``ms`` > 0 and finite,
        ``spread`` >= 0, ``method``, ``reps``, ``note``).
    """
    launches = _check_args(fn, warmup, rep, rotations, method, setup, stream, warm)
    device = _check_device(device)
    _check_module(module)
    if not isinstance(flush, bool):
        raise TypeError(f"benchmark: flush={flush!r}: expected True (flush the cache before each graph replay) or False")
    cutoff = current_cutoff() if cutoff_ms is None else cutoff_ms
    _check_cutoff(cutoff)
    device = device if device is not None else _default_device(stream)
    module = module if module is not None else (None if method == "wall" else streams.device_module(device))
    if setup is not None or not launches:
        launches = [fn]  # setup prepares fn's own tensors, not the copies'
    if module is None:
        asked = (f"method={method!r} was asked for, but {device if device is not None else 'the CPU'} has no "
                 f"device clock: timed with the host clock") if method in ("graph", "events") else ""
        return _host(launches, setup, warmup, rep, cutoff, name, asked)
    if stream is None:
        stream = module.current_stream(device)
    elif isinstance(stream, int):
        stream = streams.resolve_stream(stream, device)
    with module.stream(stream):
        if warm:
            clocks.warm_clocks(device, module, stream=stream)
        if setup is not None:
            setup()
        fn()  # untimed: compilation and lazy initialisation
        if setup is not None:
            setup()
        first = _checked(events.time_one(fn, module, stream), name, "event")
        clocks.mark_busy(device)
        graphable = method in (None, "graph") and setup is None and graph.can_capture(module)
        if cutoff is not None and first > cutoff:
            # One eager launch also times the host between the kernels of a launch that runs several:
            # where real use is a graph replay, one replay (about max(1 ms, one launch)) decides.
            if not graphable:
                return _cut(first, cutoff, "one timed launch (events)")
            try:
                short = _checked(graph.time_graph([fn], module=module, stream=stream, device=device, rep=1,
                                                  est_ms=first)[0], name, "graph")
            except graph.CaptureError:
                return _cut(first, cutoff, "one timed launch (events)")
            if short > cutoff:
                return _cut(short, cutoff, "one graph replay")
        note = ""
        if method in (None, "graph"):
            if setup is not None:
                note = "setup runs before every launch, so launches are timed one by one with events"
            elif not graph.can_capture(module):
                note = f"{getattr(module, '__name__', 'the device module')} has no graph capture; timed with events"
            else:
                try:
                    buf, why = _flush(device, module) if flush else (None, "")
                    ms, spread, reps, per = graph.time_graph(launches, module=module, stream=stream,
                                                             device=device, rep=rep, est_ms=first, flush=buf)
                except graph.CaptureError as exc:
                    note = f"{exc}; timed with events"
                else:
                    clocks.mark_busy(device)
                    copies = f"{len(launches)} input copies" if len(launches) > 1 else "1 input set (no rotations)"
                    flushed = ", the cache flushed before each replay" if buf is not None else why
                    return Measurement(_checked(ms, name, "graph"), spread, "graph", reps,
                                       f"{per} launches per replay over {copies}{flushed}")
        buf, why = _flush(device, module) if len(launches) == 1 else (None, "")
        note = "; ".join(n for n in (note, why.lstrip(", ")) if n)
        ms, spread, reps = events.time_events(launches, module=module, stream=stream, setup=setup, flush=buf,
                                              warmup=warmup, rep=rep, est_ms=first)
        clocks.mark_busy(device)
    return Measurement(_checked(ms, name, "event"), spread, "events", reps, note)


def _flush(device: Any, module: Any) -> tuple:
    """``(buffer, "")``: the device's cache-flush buffer; ``(None, why)`` where it cannot be allocated (a GPU
    nearly full): the timing goes on without a flush and its note says so, rather than failing the search."""
    try:
        return events.flush_buffer(device, module), ""
    except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        return None, f", without a cache flush (its buffer could not be allocated: {type(exc).__name__})"


def _host(launches, setup, warmup, rep, cutoff, name, note: str = "") -> Measurement:
    ms, spread, reps = wall.time_wall(launches, setup=setup, warmup=warmup, rep=rep, cutoff_ms=cutoff)
    ms = _checked(ms, name, "host clock")
    if cutoff is not None and reps == 1 and ms > cutoff:
        return _cut(ms, cutoff, "one timed launch (host clock)")
    return Measurement(ms, spread, "wall", reps, note)
