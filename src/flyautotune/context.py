"""The one thread-local context: open ``compile_hints`` blocks, the target of
the launch running on this thread, and ``lower_compile_hints``.

Nothing else reads or writes the thread-local state; the tuning pipeline runs
a launch through :func:`launch_with`.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Mapping, Optional

from . import hints as _hints
from .target import Target

class _State(threading.local):
    """Per-thread state; class-level defaults make a read on a fresh thread an attribute hit
    (a missing ``threading.local`` attribute costs an exception on every hot-path read)."""

    stack: Optional[list] = None
    launch: Optional[tuple] = None


_local = _State()


class Frame:
    """One layer of hints in force: the merged snapshot and its key form."""

    __slots__ = ("merged", "key", "layer")

    def __init__(self, merged: dict, layer: Optional[dict] = None) -> None:
        self.merged = merged
        self.key = _hints.hint_key(merged)
        self.layer = layer  # the block's own hints that made it (``compile_hints`` checks its exit by it)


# Blocks repeat: the same hints over the same outer block give the same frame, so validation,
# merging and key building run once per distinct block (bounded, as shapes of use are few).
_layers: dict = {}
_frames: dict = {}
_CACHE_MAX = 1024


def _remember(cache: dict, key: Any, value: Any) -> None:
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value


class compile_hints:
    """Thread-local compile hints for everything compiled inside the block.

    ``with compile_hints(waves_per_eu=2) as snapshot: ...`` — blocks nest: an
    inner block shallow-merges over the outer ones (later non-None wins,
    ``None`` inherits). ``snapshot`` is a copy of the merged hints in force.
    Values are validated when the block is created.
    """

    __slots__ = ("_layer", "_lkey")

    def __init__(self, *positional: Any, **hints: Any) -> None:
        if positional:
            raise TypeError(f"compile_hints takes hints by name, e.g. compile_hints(num_warps=4) or "
                            f"compile_hints(**hints); got the positional argument {positional[0]!r}")
        try:
            # the value's type is part of the key: 1, 1.0 and True are equal but only 1 is a valid hint
            if len(hints) == 1:  # the common block, without a comprehension's frame
                (k, v), = hints.items()
                lkey = ((k, v.__class__, v),)
            else:
                lkey = tuple([(k, v.__class__, v) for k, v in hints.items()])
            layer = _layers.get(lkey)
        except TypeError:  # an unhashable value: validated below, which names it
            lkey, layer = None, None
        if layer is None:
            layer = _hints.normalize_hints(hints)
            if lkey is not None:
                _remember(_layers, lkey, layer)
        self._layer = layer
        self._lkey = lkey

    def __enter__(self) -> dict:
        stack = _local.stack
        if stack is None:
            stack = _local.stack = []
        parent = stack[-1] if stack else None
        ck = (parent.key if parent is not None else (), self._lkey)
        frame = _frames.get(ck) if self._lkey is not None else None
        if frame is None:
            frame = Frame(_hints.merge_hints(parent.merged if parent is not None else None, self._layer),
                          self._layer)
            if self._lkey is not None:
                _remember(_frames, ck, frame)
        stack.append(frame)
        return dict(frame.merged)

    def __exit__(self, *exc: Any) -> None:
        stack = _local.stack
        try:
            top = stack.pop()
        except (AttributeError, IndexError):  # None or empty: no block open on this thread
            raise RuntimeError(f"compile_hints({self._layer}) exited with no block open on this thread: "
                               f"exit each block once, on the thread that entered it") from None
        if top.layer is not self._layer:  # the top frame is made from this block's hints (one cached dict)
            stack.append(top)
            self._check_top(stack)  # rare: a cleared cache, or an out-of-order exit
            stack.pop()

    def _check_top(self, stack: list) -> None:
        # the top frame must be this block merged over the one below it; else blocks exit out of order
        parent = stack[-2] if len(stack) > 1 else None
        top = stack[-1]
        if top.key != _hints.hint_key(_hints.merge_hints(parent.merged if parent is not None else None,
                                                         self._layer)):
            raise RuntimeError(f"compile_hints({self._layer}) exited while an inner block "
                               f"({top.merged}) is still open: exit blocks innermost first "
                               f"(use with-statements or contextlib.ExitStack)")


def current_hints() -> dict:
    """The merged hint snapshot in force on this thread (a copy)."""
    stack = _local.stack
    return dict(stack[-1].merged) if stack else {}


def current_hint_key() -> tuple:
    """The hashable form of ``current_hints()`` without copying it: what a
    launcher caches lowered compile options by."""
    stack = _local.stack
    return stack[-1].key if stack else ()


def open_hints() -> Optional[dict]:
    """The merged snapshot of the caller's open blocks (not a copy), or None."""
    stack = _local.stack
    return stack[-1].merged if stack else None


def launch_with(layers: list, launch: tuple, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Run ``fn(*args, **kwargs)`` with exactly ``layers`` as this thread's hints
    and ``launch = (target, plugin_manager)`` as its launch; restore both after.

    The launch sees the effective snapshot only (a fresh list: it may nest
    blocks of its own); the caller's blocks are back when it returns.
    """
    local = _local
    stack = local.stack
    old = local.launch
    local.launch = launch
    if layers or stack:
        local.stack = layers.copy()
        try:
            return fn(*args, **kwargs)
        finally:
            local.stack = stack if stack is not None else []
            local.launch = old
    try:
        return fn(*args, **kwargs)
    finally:
        local.launch = old


def current_target() -> Optional[Target]:
    """The target of the launch running on this thread (inside a tuned call), else None."""
    launch = _local.launch
    return launch[0] if launch else None


@contextlib.contextmanager
def target_context(target: Target, plugin_manager: Any = None) -> Iterator[Target]:
    """Make ``current_target()`` (and ``lower_compile_hints``' default target)
    return ``target`` inside the block — for compiling outside a tuned launch,
    e.g. cross-compiled reports. Nests; thread-local."""
    if not isinstance(target, Target):
        raise TypeError(f"target_context: expected a flyautotune.Target, got {target!r}")
    if plugin_manager is not None and not hasattr(plugin_manager, "hook"):
        raise TypeError(f"target_context: plugin_manager={plugin_manager!r}; accepted: None (the process-wide "
                        f"manager) or a flyautotune plugin manager (flyautotune.build_plugin_manager())")
    old = _local.launch
    mine = _local.launch = (target, plugin_manager)
    try:
        yield target
    finally:
        if _local.launch is not mine:
            raise RuntimeError(f"target_context({target!r}) exited while an inner target_context or launch "
                               f"is still open: exit blocks innermost first, on the thread that entered them")
        _local.launch = old


def lower_compile_hints(ir: Any = None, target: Optional[Target] = None, hints: Optional[Mapping] = None) -> Any:
    """Ask the backend to materialize the current hint snapshot onto ``ir``.

    :param ir: an MLIR module (returned changed in place), a Triton kernel or
        ``None`` (a dict of compile options comes back).
    :param target: defaults to the target of the tuned launch running now.
    :param hints: defaults to ``current_hints()`` (the effective snapshot).
    :returns: the backend's result; ``ir`` unchanged, or ``{}`` when ``ir`` is
        None, if no backend lowers anything (for a GPU target given hints, a
        warning says so, once per kind of call: the hints have no effect).
    """
    from .plugins import plugin_manager

    if target is None:
        target = current_target()
        if target is None:
            raise ValueError(
                "lower_compile_hints: target=None outside a tuned launch; pass target= "
                "(e.g. flyautotune.target_for(device))"
            )
    elif not isinstance(target, Target):
        raise TypeError(f"lower_compile_hints: target={target!r} must be a flyautotune.Target, e.g. "
                        f"flyautotune.target_for(device) (or None inside a tuned launch)")
    snapshot = current_hints() if hints is None else _hints.merge_hints(_hints.normalize_hints(hints))
    launch = _local.launch
    pm = (launch[1] if launch else None) or plugin_manager()
    result = pm.hook.flyautotune_lower_compile_hints(ir=ir, hints=snapshot, target=target)
    if result is None:
        if snapshot and target.backend != "cpu":
            _unlowered(target, ir, snapshot, pm)
        return {} if ir is None else ir
    if ir is None and not isinstance(result, Mapping):
        owners = [impl.plugin_name for impl in pm.hook.flyautotune_lower_compile_hints.get_hookimpls()]
        raise TypeError(f"flyautotune_lower_compile_hints returned {result!r} ({type(result).__name__}) for "
                        f"{target} with ir=None; expected a dict of compile options (plugins implementing it: "
                        f"{', '.join(owners)})")
    return result


#: (backend, what was lowered, hint names) already warned about: once each per process.
_unlowered_said: set = set()


def _unlowered(target: Target, ir: Any, snapshot: Mapping, pm: Any) -> None:
    """Warn, once per kind of object and hint names, that no backend lowered hints for a GPU target: without
    the backend's plugin, or for an IR it does not know (MLIR as text, say), they would have no effect."""
    what = "compile options (ir=None)" if ir is None else f"a {type(ir).__module__}.{type(ir).__qualname__}"
    said = (target.backend, what, tuple(sorted(snapshot)))
    if said in _unlowered_said:
        return
    _unlowered_said.add(said)
    owners = [impl.plugin_name for impl in pm.hook.flyautotune_lower_compile_hints.get_hookimpls()]
    import logging

    logging.getLogger("flyautotune").warning(
        "lower_compile_hints: no plugin lowered %s onto %s for %s, so they have no effect; plugins implementing "
        "the hook: %s. Install the backend's plugin (flyautotune-%s), or give it an IR it lowers (an MLIR "
        "module object, a Triton kernel, or ir=None for Triton's compile options)",
        ", ".join(f"{k}={v!r}" for k, v in sorted(snapshot.items())), what, target,
        ", ".join(owners) or "none", target.backend)
