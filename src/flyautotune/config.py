"""``Config``: one point of a kernel's config space."""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Mapping, Optional

import attrs

from .hints import KNOWN_HINTS, normalize_hint, normalize_hints
from .keys import numpy_scalar

_JSON_SCALARS = (bool, int, float, str, type(None))


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _plain(value: Any) -> Any:
    """A NumPy scalar (``np.int64(4)``, what NumPy arithmetic gives) as its Python value, inside lists and
    tuples too: the same config to a kernel, and one a store can keep."""
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if numpy_scalar(value):
        return value.item()
    return value


def _nonfinite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):  # numpy float32, ...
        try:
            return not math.isfinite(float(value))
        except OverflowError:  # a Fraction too large for a float is still finite
            return False
    if isinstance(value, (list, tuple)):
        return any(map(_nonfinite, value))
    return False


def _json_ok(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(map(_json_ok, value))
    return isinstance(value, _JSON_SCALARS)


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


@attrs.frozen(init=False, repr=False)
class Config:
    """Structural kwargs for the kernel plus a compile-hint envelope.

    ``Config(BLOCK_THREADS=256, waves_per_eu=2)`` — the hint names in
    ``flyautotune.hints.KNOWN_HINTS`` are typed aliases that land in
    ``hints``; every other keyword is a kernel kwarg.
    ``Config(BLOCK=128, compile_hints={"maxnreg": 128})`` — any hint by name.

    Frozen and hashable by value. ``pre_hook`` (called with the launch's
    kwargs before each run) is never persisted.
    """

    _kwargs: tuple = attrs.field()
    _hints: tuple = attrs.field()
    pre_hook: Optional[Callable[[dict], Any]] = attrs.field(default=None, eq=False)

    def __init__(
        self,
        *positional: Any,
        compile_hints: Optional[Mapping[str, Any]] = None,
        pre_hook: Optional[Callable[[dict], Any]] = None,
        **kwargs: Any,
    ) -> None:
        if positional:
            # triton.Config({"BLOCK": 64}, num_warps=4) style: the dict would otherwise become compile hints
            raise TypeError(
                f"Config takes kernel kwargs by name: Config(BLOCK=64, num_warps=4) or Config(**kwargs), "
                f"and hints as compile_hints={{...}}; got the positional argument {positional[0]!r}"
            )
        hints = normalize_hints(compile_hints)
        for name in KNOWN_HINTS:
            if name in kwargs:
                value = normalize_hint(name, kwargs.pop(name))
                if hints.get(name) is not None and value is not None and hints[name] != value:
                    raise ValueError(
                        f"Config: hint {name!r} given twice with different values "
                        f"({value!r} and compile_hints[{name!r}]={hints[name]!r})"
                    )
                if value is not None or name not in hints:
                    hints[name] = value
        if pre_hook is not None and not callable(pre_hook):
            raise TypeError(f"Config: pre_hook must be callable, got {pre_hook!r}")
        for name, value in kwargs.items():
            if not name.isidentifier():
                raise ValueError(f"Config: kwarg name {name!r} is not an identifier; kernel kwargs are "
                                 f"parameter names such as BLOCK or num_stages_inner")
            if _nonfinite(value):
                raise ValueError(f"Config: kwarg {name}={value!r} is not a finite number")
            kwargs[name] = value = _plain(value)
            try:
                hash(_freeze(value))
            except TypeError:
                raise TypeError(
                    f"Config: kwarg {name}={value!r} is not hashable; use ints, floats, "
                    f"strings, bools or tuples"
                ) from None
        self.__attrs_init__(
            tuple(sorted((k, _freeze(v)) for k, v in kwargs.items())),
            tuple(sorted((k, v) for k, v in hints.items() if v is not None)),
            pre_hook,
        )

    @property
    def kwargs(self) -> dict:
        """The structural kwargs injected into the launch (a fresh dict)."""
        return dict(self._kwargs)

    @property
    def hints(self) -> dict:
        """The compile hints of this config, None entries dropped (a fresh dict)."""
        return dict(self._hints)

    def to_dict(self) -> dict:
        """A JSON-serializable form; ``Config.from_dict`` reverses it."""
        if self.pre_hook is not None:
            raise TypeError(
                f"Config.to_dict: {self!r} has a pre_hook ({self.pre_hook!r}); "
                f"functions are never persisted — drop pre_hook before exporting"
            )
        for name, value in self._kwargs:
            if not _json_ok(value):
                raise TypeError(
                    f"Config.to_dict: kwarg {name}={value!r} is not JSON-serializable; accepted: "
                    f"ints, floats, strings, bools, None and (nested) tuples or lists of them"
                )
        return {
            "kwargs": {k: _thaw(v) for k, v in self._kwargs},
            "compile_hints": {k: _thaw(v) for k, v in self._hints},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Config":
        """Build a Config from ``to_dict()`` output; rejects unknown fields."""
        if not isinstance(data, Mapping):
            raise TypeError(f"Config.from_dict: expected a mapping, got {data!r}")
        unknown = set(data) - {"kwargs", "compile_hints"}
        if unknown:
            raise ValueError(
                f"Config.from_dict: unknown field(s) {sorted(unknown)}; "
                f"accepted: 'kwargs', 'compile_hints'"
            )
        kwargs = data.get("kwargs", {})
        hints = data.get("compile_hints", {})
        if not isinstance(kwargs, Mapping) or not isinstance(hints, Mapping):
            raise TypeError(f"Config.from_dict: 'kwargs' and 'compile_hints' must be mappings in {data!r}")
        for name in kwargs:
            if not isinstance(name, str):
                raise TypeError(f"Config.from_dict: kwarg name {name!r} is a {type(name).__name__}; "
                                f"accepted: str kwarg names")
        clash = set(kwargs) & {"compile_hints", "pre_hook"}
        if clash:
            raise ValueError(f"Config.from_dict: reserved kwarg name(s) {sorted(clash)}")
        return cls(compile_hints=dict(hints), **dict(kwargs))

    def __repr__(self) -> str:
        parts = [f"{k}={v!r}" for k, v in self._kwargs]
        parts += [f"{k}={v!r}" for k, v in self._hints]
        return f"Config({', '.join(parts)})"

    def __str__(self) -> str:
        return ", ".join([f"{k}={v}" for k, v in self._kwargs] + [f"{k}={v}" for k, v in self._hints])


#: ``triton.Config`` attributes that are compile hints here, with the value Triton uses when none is given.
_TRITON_HINTS = (("num_warps", None), ("num_stages", None), ("maxnreg", None), ("num_ctas", 1))


def foreign_config(value: Any) -> str:
    """How to write ``value`` (something given where a :class:`Config` belongs) as one, for an error message:
    a ``triton.Config`` is spelled out as the ``Config(...)`` that means the same; anything else is named."""
    module = getattr(type(value), "__module__", None) or ""
    kwargs = getattr(value, "kwargs", None)
    if not (module == "triton" or module.startswith("triton.")) or not isinstance(kwargs, Mapping):
        return f"got {value!r}"
    parts = [f"{k}={v!r}" for k, v in kwargs.items()]
    hints = {}
    for name, unset in _TRITON_HINTS:
        v = getattr(value, name, None)
        if v is not None and v != unset:
            if name in KNOWN_HINTS:
                parts.append(f"{name}={v!r}")
            else:
                hints[name] = v
    if hints:
        parts.append(f"compile_hints={hints!r}")
    if getattr(value, "pre_hook", None) is not None:
        parts.append("pre_hook=...")
    return (f"got a triton.Config ({value}); write it as flyautotune.Config({', '.join(parts)}): kernel kwargs by "
            f"name, num_warps/num_stages/maxnreg as hints, other compiler options in compile_hints={{...}}")
