"""Compile hints: typed validation, merging and their hashable key form.

The thread-local ``compile_hints`` blocks live in :mod:`flyautotune.context`.

A hint is a request to the compiler (``waves_per_eu``, ``maxnreg``,
``num_warps``, ``num_stages``, or a backend-specific name). ``None`` inherits,
``0`` leaves the kernel's own attribute unchanged, a positive int is an exact
override. Hints never travel as kernel arguments: the backend that owns the
compiler lowers them (``flyautotune_lower_compile_hints``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

#: Hints the core knows and type-checks; other names pass to the backends.
KNOWN_HINTS = ("waves_per_eu", "maxnreg", "num_warps", "num_stages")
#: Hints that also accept a ``(min, max)`` pair or a ``"min,max"`` string.
RANGE_HINTS = frozenset({"waves_per_eu"})

_NON_NEGATIVE = "expected a non-negative int (0 keeps the kernel's own setting)"
_RANGE_FORMS = "a non-negative int, a (min, max) pair of ints, or a 'min,max' string"


def _check_int(name: str, value: Any, label: str | None = None) -> int:
    label = label or f"value {value!r}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"compile hint {name!r}: {label} is a {type(value).__name__}; {_NON_NEGATIVE}")
    if value < 0:
        raise ValueError(f"compile hint {name!r}: {label} is negative; {_NON_NEGATIVE}")
    return value


def normalize_hint(name: str, value: Any) -> Any:
    """Validate one hint value; return its canonical (hashable) form.

    Range hints (``waves_per_eu``) accept an int, a ``(min, max)`` pair or a
    ``"min,max"`` string and come back as an int or a ``(min, max)`` tuple.
    Raises ``TypeError``/``ValueError`` naming the hint and the value.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise TypeError(f"compile hint names must be identifiers, got {name!r}")
    if value is None:
        return None
    if name in RANGE_HINTS and isinstance(value, (tuple, list, str)):
        if isinstance(value, str):
            parts = [p.strip() for p in value.split(",")]
            if len(parts) != 2:
                raise ValueError(f"compile hint {name!r}: {value!r} is not a 'min,max' string; expected {_RANGE_FORMS}")
            try:
                pair = [int(p) for p in parts]
            except ValueError:
                raise ValueError(
                    f"compile hint {name!r}: {value!r} has non-integer parts; expected {_RANGE_FORMS}"
                ) from None
        else:
            pair = list(value)
        if len(pair) != 2:
            raise ValueError(f"compile hint {name!r}: {value!r} is not a (min, max) pair; expected {_RANGE_FORMS}")
        lo = _check_int(name, pair[0], f"minimum {pair[0]!r} of {value!r}")
        hi = _check_int(name, pair[1], f"maximum {pair[1]!r} of {value!r}")
        if lo > hi:
            raise ValueError(f"compile hint {name!r}: minimum {lo} > maximum {hi} in {value!r}")
        return (lo, hi)
    if name in KNOWN_HINTS:
        return _check_int(name, value)
    # Backend-specific hints: any scalar; the owning backend validates meaning.
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"compile hint {name!r}: value {value!r} is not a finite number")
    if isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(
        f"compile hint {name!r}: value {value!r} is a {type(value).__name__}; "
        f"expected an int, float, bool or str"
    )


def normalize_hints(hints: Mapping[str, Any] | None) -> dict:
    """Validate a mapping of hints; ``None`` values are kept (they inherit)."""
    if hints is None:
        return {}
    if not isinstance(hints, Mapping):
        raise TypeError(f"compile_hints must be a mapping of name -> value, got {hints!r}")
    return {name: normalize_hint(name, value) for name, value in hints.items()}


def merge_hints(*layers: Mapping[str, Any] | None) -> dict:
    """Shallow-merge hint layers; a later non-None value wins, None inherits.

    The result omits ``None`` entries and is a fresh dict (a detached snapshot).
    """
    merged: dict = {}
    for layer in layers:
        if not layer:
            continue
        for name, value in layer.items():
            if value is not None:
                merged[name] = value
    return merged


def hint_key(hints: Mapping[str, Any]) -> tuple:
    """A canonical, hashable form of a merged snapshot for cache keys."""
    return tuple(sorted((k, v) for k, v in hints.items() if v is not None))
