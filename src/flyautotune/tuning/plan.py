"""A picked config prepared once, and how a launch runs it."""

from __future__ import annotations

from typing import Any, Optional

from .. import context, hints as _hints, streams
from ..config import Config
from ..target import Target
from .binding import Call, Signature


class Last:
    """What ``last_source``/``last_config`` report; one attribute store per call."""

    __slots__ = ("config", "source")

    def __init__(self, config: Optional[Config], source: Optional[str]) -> None:
        self.config = config
        self.source = source


class Plan:
    """A picked config, prepared once so a cache hit does no merging."""

    __slots__ = ("config", "target", "source", "kwargs", "layers", "launch", "hit", "key", "selection", "min_pos",
                 "bound", "bound_kwargs", "direct", "direct_stream", "agreed")

    def __init__(self, config: Config, target: Target, source: str, snapshot: tuple, pm: Any,
                 key: Optional[str] = None, selection: Any = None) -> None:
        self.key = key
        self.config = config
        self.target = target
        self.source = source
        self.kwargs = config.kwargs
        effective = _hints.merge_hints(dict(snapshot), config.hints)
        self.layers = [context.Frame(effective)] if effective else []
        self.launch = (target, pm)
        self.hit = Last(config, "memory")
        self.selection = selection
        self.min_pos = 1 << 30  # the first positional slot a tuned kwarg occupies (set by the tuner)
        # what a cache hit calls: the tuned fn with the config's kwargs, or what specialize= made of them
        self.bound: Any = None
        self.bound_kwargs: dict = self.kwargs
        # what specialize= made, when no hints are in force: a hit calls it with no launch context
        self.direct: Any = None
        # the same, where it takes ``stream=``: a hit with a stream passes it the resolved stream and does not
        # make it current (nothing to zero on it)
        self.direct_stream: Any = None
        # the group (``fat.distributed``'s token) whose ranks agreed on this config; None: chosen alone
        self.agreed: Optional[int] = None


def run_plan(fn: Any, sig: Signature, plan: Plan, call: Call, stream: Any) -> Any:
    """Launch ``plan``'s config with ``call``'s arguments on ``stream`` (None: the launch's own)."""
    args, kwargs = call.args, call.kwargs
    if plan.kwargs:
        kwargs = {**kwargs, **plan.kwargs}
    if stream is not None and sig.has_stream:
        if sig.stream_pos < len(args):  # passed positionally: replace it there
            args = args[:sig.stream_pos] + (stream,) + args[sig.stream_pos + 1:]
        else:
            kwargs = {**kwargs, "stream": stream}
    if plan.config.pre_hook is not None:
        plan.config.pre_hook({**call.named, **kwargs})
    return context.launch_with(plan.layers, plan.launch, fn, args, kwargs)


def zero(names: tuple, call: Call) -> None:
    """Zero the ``reset_to_zero`` tensors of a call."""
    for n in names:
        t = call.named.get(n)
        if t is not None:
            zero_ = getattr(t, "zero_", None)
            if zero_ is None:
                raise TypeError(f"reset_to_zero names {n!r}, which is {t!r} ({type(t).__name__}) in this call; "
                                f"reset_to_zero takes tensor arguments")
            zero_()


def launch_stream(sig: Signature, call: Call) -> Any:
    """The call's own stream spelling, resolved (None when omitted: the launch's current stream)."""
    stream = call.named.get("stream") if sig.has_stream else None
    if stream is not None:
        stream = streams.resolve_stream(stream, call.device)
    return stream
