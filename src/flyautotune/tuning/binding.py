"""A call's arguments bound by name once, and the keys built from them."""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Optional

from .. import keys
from ..target import Target
from ..targets import backend_axes


class Call:
    """One call's arguments, bound once: positional/keyword as given, by name,
    the tensors (sorted by name), their device and their (dtype, strides)."""

    __slots__ = ("args", "kwargs", "named", "device", "tensors", "layout")

    def __init__(self, args: tuple, kwargs: dict, named: dict, device: Any, tensors: list, layout: list) -> None:
        self.args = args
        self.kwargs = kwargs
        self.named = named
        self.device = device
        self.tensors = tensors
        self.layout = layout

    def given(self, positional: tuple) -> set:
        """Names the caller passed (positionally or by keyword)."""
        return set(self.kwargs).union(positional[:len(self.args)])


class Signature:
    """What the tuner needs to know about the launch's parameters."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        self.name = name
        self.fn_name = getattr(fn, "__name__", repr(fn))
        self.sig = inspect.signature(fn)
        params = self.sig.parameters
        self.params = tuple(params)
        self.var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
        self.var_pos = any(p.kind is p.VAR_POSITIONAL for p in params.values())
        self.positional = tuple(
            n for n, p in params.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        )
        self.defaults = {n: p.default for n, p in params.items() if p.default is not p.empty}
        self.has_stream = "stream" in params
        self.stream_pos = self.positional.index("stream") if "stream" in self.positional else 1 << 30
        self.var_kw_names = tuple(n for n, p in params.items() if p.kind is p.VAR_KEYWORD)

    def describe(self) -> str:
        return f"{self.fn_name}{self.sig}"

    def bind(self, args: tuple, kwargs: dict) -> Call:
        if self.var_pos:
            bound = self.sig.bind(*args, **kwargs)
            bound.apply_defaults()
            named = dict(bound.arguments)
        else:
            if len(args) > len(self.positional):
                raise TypeError(
                    f"{self.name}: takes {len(self.positional)} positional arguments but {len(args)} were given"
                )
            named = self.defaults.copy()
            if args:
                named.update(zip(self.positional, args))
            if kwargs:
                if not self.var_kw:
                    unknown = [k for k in kwargs if k not in self.sig.parameters]
                    if unknown:
                        raise TypeError(
                            f"{self.name}: unexpected keyword argument {unknown[0]!r}; "
                            f"{self.fn_name} takes {', '.join(self.params)}"
                        )
                named.update(kwargs)
        order = self.params
        if self.var_kw:
            for n in self.var_kw_names:
                extra = named.pop(n, None)
                if isinstance(extra, dict):
                    named.update(extra)
            order = sorted(named)
        tensor_cls = keys.tensor_type()
        tensors = []
        layout = []
        device = None
        if tensor_cls is not None:
            for n in order:
                v = named.get(n)
                if isinstance(v, tensor_cls):
                    tensors.append((n, v))
                    layout.append((n, v.dtype, v.stride()))
                    if device is None:
                        device = v.device
        return Call(args, kwargs, named, device, tensors, layout)

    def replaced(self, call: Call, values: dict) -> Call:
        """``call`` with some arguments (by name) replaced: for rotated input copies."""
        args = tuple(values.get(n, a) if n in values else a for n, a in zip(self.positional, call.args))
        kwargs = {k: values.get(k, v) for k, v in call.kwargs.items()}
        named = {**call.named, **{k: v for k, v in values.items() if k in call.named}}
        tensors = [(n, values.get(n, t)) for n, t in call.tensors]
        return Call(args, kwargs, named, call.device, tensors, call.layout)


def _key_part(name: str, value: Any, tuner: str) -> Any:
    """A key argument's contribution, refusing values that cannot key a winner."""
    kv = keys.key_value(value)
    _check_key_value(name, kv, value, tuner)
    return kv


def _check_key_value(name: str, kv: Any, original: Any, tuner: str) -> None:
    if isinstance(kv, float) and not math.isfinite(kv):
        raise ValueError(f"{tuner}: key argument {name}={original!r} is not a finite number; a key value "
                         f"must be finite")
    if isinstance(kv, tuple):
        for v in kv:
            _check_key_value(name, v, original, tuner)
        return
    if kv is None or isinstance(kv, (bool, int, float, str)):
        return
    if type(kv).__repr__ is object.__repr__:  # keyed by its memory address: every call a new key
        raise TypeError(
            f"{tuner}: key argument {name}={original!r} is a {type(original).__name__} without a value "
            f"representation; key on an int, float, str, tensor (its shape) or a tuple of those"
        )
    try:
        hash(kv)
    except TypeError:  # a set, a bytearray: the in-memory key cannot hold it
        raise TypeError(
            f"{tuner}: key argument {name}={original!r} holds a {type(kv).__name__}, which is unhashable; key on "
            f"an int, float, str, tensor (its shape) or a tuple of those"
        ) from None


def memo_key(sig_name: str, key_names: tuple, call: Call, snapshot: tuple) -> tuple:
    """The in-memory key: finer than the stored key (raw strides, not their
    pattern) — a memo miss falls through to the store, so this only trades memory for speed."""
    try:
        key_vals = tuple(typed(_key_part(k, call.named[k], sig_name)) for k in key_names)
    except KeyError as exc:
        raise TypeError(f"{sig_name}: key argument {exc.args[0]!r} was not given") from None
    return (call.device, key_vals, tuple(call.layout), snapshot)


def typed(kv: Any) -> Any:
    """A key value with the type of each of its parts: ``1``, ``True`` and ``1.0`` are equal in a dict,
    but the stored key tells them apart (``1``, ``true``, ``1.0``), so each has its own winner."""
    if isinstance(kv, tuple):
        return tuple(map(typed, kv))
    return kv.__class__, kv


def key_dict(key_names: tuple, call: Call, target: Target, snapshot: tuple, pm: Any, source: str) -> dict:
    """The full, persistent key of a call (what ``flyautotune show`` prints)."""
    tensors = sorted(call.tensors, key=lambda nt: nt[0])
    return {
        "args": {k: keys.key_value(call.named[k]) for k in sorted(key_names)},
        "dtypes": {n: str(t.dtype) for n, t in tensors},
        "strides": {n: list(keys.stride_pattern(t)) for n, t in tensors},
        "hints": [list(kv) for kv in snapshot],
        "target": target.to_dict(),
        "backend": backend_axes(target, pm),
        "source": source,
    }


def names_arg(what: str, names: Any) -> tuple:
    """``key=``-style arguments: one name or an iterable of names."""
    if isinstance(names, str):
        return (names,)
    try:
        out = tuple(names)
    except TypeError:
        raise TypeError(f"autotune: {what}= must be an argument name or a list of names, got {names!r}") from None
    for n in out:
        if not isinstance(n, str):
            raise TypeError(f"autotune: {what}= must hold argument names (str), got {n!r} in {names!r}")
    return out


def optional_callable(what: str, value: Optional[Callable]) -> Optional[Callable]:
    if value is not None and not callable(value):
        raise TypeError(f"autotune: {what}= must be callable or None, got {value!r}")
    return value
