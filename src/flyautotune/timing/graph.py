"""Timing a launch as graph replays of round-robin launches over rotated inputs.

One graph holds many launches back to back, over distinct copies of the inputs
(so each launch reads cold memory, as in real use); replaying it runs them with
no host in between. Device events around each replay give one sample; the time
of one launch is the median replay over the launches per replay.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Sequence

from . import stats

#: A replay should run at least this long, so event resolution and replay overhead vanish.
MIN_REPLAY_MS = 1.0
#: The most launches captured into one graph.
MAX_LAUNCHES = 512
#: A replay this many times faster than one eager launch means the launch escaped the capture.
_ESCAPE_RATIO = 100.0


class CaptureError(RuntimeError):
    """The launch cannot be timed from a graph (capture failed or captured nothing)."""


def graph_class(module: Any) -> Any:
    """The device module's graph class (``<MODULE>Graph``, e.g. the one ``module.graph`` captures into), or None."""
    prefix = getattr(module, "__name__", "").rsplit(".", 1)[-1].upper()
    return getattr(module, prefix + "Graph", None) or getattr(module, "Graph", None)


def can_capture(module: Any) -> bool:
    """True when ``module`` has graph capture (a graph class and a ``graph`` context)."""
    return graph_class(module) is not None and callable(getattr(module, "graph", None))


def launches_per_replay(n_copies: int, est_ms: float, *, min_replay_ms: float = MIN_REPLAY_MS,
                        max_launches: int = MAX_LAUNCHES, flushed: bool = False) -> int:
    """Launches in one graph: enough for ``min_replay_ms``, a whole number of rounds over the copies.

    ``flushed`` (the cache is flushed before every replay): no whole rounds, at most ``max_launches``. Each
    copy the replay reaches is cold after the flush, so a replay of a slow launch need not visit every
    copy (with 512 copies of small inputs a 10 µs launch would replay for 5 ms, not 1); copies come
    round again within a replay only where there are fewer than it launches, which twice the cache's
    footprint bounds (``rotate.rotation_count``)."""
    wanted = math.ceil(min_replay_ms / max(est_ms, 1e-4))
    if flushed:
        return max(1, min(wanted, max_launches))
    wanted = min(max(wanted, n_copies), max(max_launches, n_copies))
    return n_copies * math.ceil(wanted / n_copies)


def _is_default(module: Any, stream: Any, device: Any) -> bool:
    default = getattr(module, "default_stream", None)
    if default is None:
        return True  # unknown: capture on a side stream, never on a possibly special stream
    try:
        return stream == default(device)
    except Exception:
        return True


def _capture_context(module: Any, graph: Any, stream: Any):
    kwargs = {"stream": stream}
    try:
        if "capture_error_mode" in inspect.signature(module.graph).parameters:
            # Only this thread's unsafe calls break the capture; other threads keep working.
            kwargs["capture_error_mode"] = "thread_local"
    except (TypeError, ValueError):
        pass
    return module.graph(graph, **kwargs)


def time_graph(
    launches: Sequence[Callable[[], Any]],
    *,
    module: Any,
    stream: Any,
    device: Any,
    rep: int,
    est_ms: float,
    flush: Any = None,
) -> tuple:
    """Capture round-robin ``launches`` into one graph and time ``rep`` replays on ``stream``.

    The launches per replay come from ``est_ms`` (one eager launch); when the first replay
    shows the graph far shorter than ``MIN_REPLAY_MS`` (an eager launch also times host gaps
    between a launch's kernels), it is captured once more with enough launches. ``flush``, a
    buffer, is zeroed (untimed) before every timed replay, as Triton's ``do_bench`` does before
    each of its repetitions: a replay starts with the cache full of another kernel's dirty lines.

    :returns: ``(ms, spread, replays, launches_per_replay)``: ms of one launch
        (median replay / launches), relative interquartile range over replays.
    :raises CaptureError: with the reason, when capture fails or records nothing.
    """
    cls = graph_class(module)
    if cls is None or not callable(getattr(module, "graph", None)):
        raise CaptureError(f"{getattr(module, '__name__', module)} has no graph capture")
    n = len(launches)
    per = launches_per_replay(n, est_ms, flushed=flush is not None)
    side = _is_default(module, stream, device)
    capture_stream = module.Stream(device=device) if side else stream
    try:
        if side:
            capture_stream.wait_stream(stream)
        # Warm every copy on the capture stream first: lazy initialisations must not happen inside the capture.
        with module.stream(capture_stream):
            for launch in launches:
                launch()
        capture_stream.synchronize()
    except Exception as exc:
        _settle(module, device)
        raise CaptureError(f"graph capture failed: {type(exc).__name__}: {exc}") from exc
    graph = _capture(cls, module, device, capture_stream, launches, per)
    try:
        with module.stream(stream):
            if side:
                stream.wait_stream(capture_stream)
            first = _time_replays(module, stream, graph, 1, flush)[0]  # also uploads the graph
            if 0 < first < MIN_REPLAY_MS / 2 and per < MAX_LAUNCHES:
                longer = launches_per_replay(n, first / per, flushed=flush is not None)
                if longer > per:
                    _reset(graph)
                    graph, per = None, longer
                    graph = _capture(cls, module, device, capture_stream, launches, per)
                    if side:
                        stream.wait_stream(capture_stream)
                    graph.replay()  # untimed: uploads the new graph
            samples = [t / per for t in _time_replays(module, stream, graph, rep, flush)]
    finally:
        if graph is not None:
            _reset(graph)
    ms = stats.median(samples)
    if ms * _ESCAPE_RATIO < est_ms:
        raise CaptureError(f"a graph replay took {ms:.6f} ms per launch, far less than one eager launch "
                           f"({est_ms:.6f} ms): the launch did not run inside the capture")
    return ms, stats.relative_iqr(samples), rep, per


def _capture(cls: Any, module: Any, device: Any, capture_stream: Any, launches: Sequence[Callable[[], Any]],
             per: int) -> Any:
    """A graph of ``per`` round-robin launches; :class:`CaptureError` when capture fails."""
    try:
        graph = cls()
        with _capture_context(module, graph, capture_stream):
            for i in range(per):
                launches[i % len(launches)]()
        return graph
    except Exception as exc:
        _settle(module, device)
        raise CaptureError(f"graph capture failed: {type(exc).__name__}: {exc}") from exc


def _time_replays(module: Any, stream: Any, graph: Any, rep: int, flush: Any = None) -> list:
    """Milliseconds of each of ``rep`` replays on ``stream``; back to back, or each after zeroing ``flush``."""
    if flush is None:
        marks = [module.Event(enable_timing=True) for _ in range(rep + 1)]
        marks[0].record(stream)
        for i in range(rep):
            graph.replay()
            marks[i + 1].record(stream)
        marks[-1].synchronize()
        return [a.elapsed_time(b) for a, b in zip(marks, marks[1:])]
    pairs = [(module.Event(enable_timing=True), module.Event(enable_timing=True)) for _ in range(rep)]
    for start, end in pairs:
        flush.zero_()
        start.record(stream)
        graph.replay()
        end.record(stream)
    pairs[-1][1].synchronize()
    return [a.elapsed_time(b) for a, b in pairs]


def _reset(graph: Any) -> None:
    reset = getattr(graph, "reset", None)
    if reset is not None:
        reset()


def _settle(module: Any, device: Any) -> None:
    """Let a failed capture's stream drain so the fallback starts clean."""
    try:
        module.synchronize(device)
    except Exception:  # the capture error is what the caller reports
        pass
