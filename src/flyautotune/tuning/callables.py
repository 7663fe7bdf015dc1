"""The tuner's user callables (``default=``, ``configs=``, ``prune_configs_by=``, ``validate=``, ``check=``,
``precompile=``, ``specialize=``): the call's arguments each receives, and errors that name it."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

from .binding import Call


def named_for(t: Any, fn: Callable[..., Any], call: Call) -> dict:
    """The call's arguments as the tuner's callable ``fn`` receives them (``fn(..., **named)``): those the
    caller passed, and the launch's defaults for the others, except the knobs a config sets (the tuner
    chooses them; their default, ``BLOCK=None``, is no argument of the call). A knob of a static space is
    left out unless the caller passed it; a computed space's knobs are known only once it has run, so any
    default that ``fn`` does not take (no such parameter, no ``**kwargs``) is left out too."""
    given = call.given(t.sig.positional)
    takes = _takes(t, fn)
    drop = [k for k in call.named if k not in given and (k in t._knobs or (takes is not None and k not in takes))]
    if not drop:
        return call.named
    return {k: v for k, v in call.named.items() if k not in drop}


def _takes(t: Any, fn: Callable[..., Any]) -> Optional[frozenset]:
    """The keyword names ``fn`` takes, or None where it takes any (``**kwargs``, or no signature to read)."""
    cached = t._takes.get(id(fn))
    if cached is not None and cached[0] is fn:
        return cached[1]
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        names = None
    else:
        names = None if any(p.kind is p.VAR_KEYWORD for p in params) else frozenset(
            p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    t._takes[id(fn)] = (fn, names)
    return names


def run_callable(t: Any, what: str, fn: Callable[..., Any], call: Call, *args: Any) -> Any:
    """``fn(*args, **named)`` for one of the tuner's own callables; what it raises is raised again, of the
    same type where that type takes a message, with ``what`` and the tuner named: ``softmax: default(...)
    raised RuntimeError: factory exploded`` (the original is its cause)."""
    try:
        return fn(*args, **named_for(t, fn, call))
    except Exception as exc:
        named = naming_error(t.name, what, exc)
        if named is None:
            raise
        raise named from exc


def naming_error(tuner: str, what: str, exc: Exception) -> Optional[Exception]:
    """``exc`` again, of its own type, its message saying which tuner's callable raised it; None where the
    type cannot be made from a message (the original then propagates as it is, with a note)."""
    text = f"{tuner}: {what} raised {type(exc).__name__}: {exc}"
    try:
        named = type(exc)(text)
    except Exception:  # noqa: BLE001 - a type whose constructor wants more than a message
        named = None
    if type(named) is not type(exc):
        if hasattr(exc, "add_note"):  # Python 3.11+
            exc.add_note(f"(raised by {tuner}'s {what})")
        return None
    try:
        named.__dict__.update(exc.__dict__)  # attributes the type carries beside its message
    except (AttributeError, TypeError):
        pass
    return named
