"""JSON text for the store and packs: canonical output, and bounded strict parsing
of untrusted input (depth, size, finite numbers, valid text)."""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any, Mapping

MAX_DEPTH = 32
MAX_PACK_BYTES = 64 * 1024 * 1024
MAX_ENTRY_BYTES = 4 * 1024 * 1024

# A JSON string literal (escapes included), so brackets inside strings are not counted.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}.__getitem__


def canonical_config_json(config: Mapping[str, Any]) -> str:
    """The canonical text of a ``Config.to_dict()`` form: the identity of a candidate."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)


compact_json = canonical_config_json  # one canonical encoder for every stored JSON column


def jsonable(value: Any) -> Any:
    """Provenance made strict JSON: informational, so odd values become their repr, never an error."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range (JSON numbers must be finite)")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def nesting_depth(text: str) -> int:
    """How deeply arrays/objects nest in JSON ``text`` (no recursion, linear time)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0  # the fast path for small rows: cannot exceed the limit
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP, brackets)), default=0)


def loads(text: Any, *, limit: int = MAX_ENTRY_BYTES, what: str = "JSON") -> Any:
    """Strict, bounded JSON: at most ``limit`` characters and ``MAX_DEPTH`` levels,
    finite numbers only (no NaN, Infinity or 1e999).

    :raises ValueError: naming the problem; never RecursionError.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{what} is not UTF-8 text ({exc})") from None
    if not isinstance(text, str):
        raise TypeError(f"expected JSON text, got {type(text).__name__}")
    if len(text) > limit:
        raise ValueError(f"{what} is {len(text)} characters; at most {limit} are accepted")
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise ValueError(f"{what} nests {depth} levels deep; at most {MAX_DEPTH} are accepted")
    try:
        return _DECODER.decode(text)
    except RecursionError:  # pragma: no cover - the depth check runs first
        raise ValueError(f"{what} nests too deeply") from None


def text_problem(value: str) -> str:
    """Why ``value`` cannot be a name or key ('' when it can): lone surrogates and
    control characters (terminal escapes) are refused."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start:exc.end].encode("unicode_escape").decode("ascii")
        return f"contains a lone surrogate ({bad}), which is not valid text"
    bad_char = _CONTROL.search(value)
    if bad_char:
        return f"contains the control character {bad_char.group()!r}"
    return ""
