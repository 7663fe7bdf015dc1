"""JSON text for the store and packs: canonical output, and bounded strict parsing
of untrusted input (depth, size, finite numbers, valid text)."""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any, Mapping, Optional

MAX_DEPTH = 32
MAX_PACK_BYTES = 64 * 1024 * 1024
MAX_ENTRY_BYTES = 4 * 1024 * 1024
#: The most digits a JSON integer may have: every such integer converts to a finite float (below 1e308).
MAX_INT_DIGITS = 308

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


def _bounded_int(text: str) -> int:
    # Unbounded in JSON and in Python, but a number of the store is compared with and formatted as a float:
    # an integer too long to convert to one (10**400) is refused like 1e999, not an OverflowError later.
    if len(text) <= MAX_INT_DIGITS:
        return int(text)
    digits = len(text.lstrip("-"))
    if digits <= MAX_INT_DIGITS:
        return int(text)
    raise ValueError(f"the number {text[:20]}... ({digits} digits) is out of range "
                     f"(JSON numbers must be finite, at most {MAX_INT_DIGITS} digits)")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int)
# A text too short to hold an integer of more than MAX_INT_DIGITS digits skips the check (most rows' columns).
_SHORT_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


class OutOfRange:
    """Left in place of a number no float holds (``1e999``, ``10**400``) by ``loads(..., out_of_range=[])``,
    so that a pack refuses the entry holding it, not the whole pack (see ``find_out_of_range``)."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem

    def __repr__(self) -> str:
        return f"<{self.problem}>"


def _marking_decoder(found: list) -> json.JSONDecoder:
    def parse_float(text: str) -> Any:
        value = float(text)
        return value if value - value == 0 else _mark(text, _finite_float)  # inf - inf and nan are nan

    def parse_int(text: str) -> Any:
        return int(text) if len(text) <= MAX_INT_DIGITS else _mark(text, _bounded_int)

    def _mark(text: str, parse: Any) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            found.append(OutOfRange(str(exc)))
            return found[-1]

    return json.JSONDecoder(parse_constant=_reject_constant, parse_float=parse_float, parse_int=parse_int)


def find_out_of_range(value: Any) -> Any:
    """The first ``OutOfRange`` inside parsed ``value``, or None."""
    if type(value) is OutOfRange:
        return value
    children = value.values() if type(value) is dict else value if type(value) is list else ()
    for child in children:
        found = find_out_of_range(child)
        if found is not None:
            return found
    return None


def nesting_depth(text: str) -> int:
    """How deeply arrays/objects nest in JSON ``text`` (no recursion, linear time)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0  # the fast path for small rows: cannot exceed the limit
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP, brackets)), default=0)


def loads(text: Any, *, limit: int = MAX_ENTRY_BYTES, what: str = "JSON", out_of_range: Optional[list] = None) -> Any:
    """Strict, bounded JSON: at most ``limit`` characters and ``MAX_DEPTH`` levels,
    finite numbers only (no NaN, Infinity, 1e999 or integers of more than ``MAX_INT_DIGITS`` digits).
    A leading UTF-8 byte order mark (a file saved by Notepad) is skipped.

    :param out_of_range: a list: a number out of range does not raise; an ``OutOfRange`` takes its place
        and is appended to the list (the caller refuses what holds it).
    :raises ValueError: naming the problem; never RecursionError.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8-sig")  # a byte order mark is not part of the JSON
        except UnicodeDecodeError as exc:
            raise ValueError(f"{what} is not UTF-8 text ({exc})") from None
    if not isinstance(text, str):
        raise TypeError(f"expected JSON text, got {type(text).__name__}")
    if text.startswith("\ufeff"):
        text = text[1:]
    if len(text) > limit:
        raise ValueError(f"{what} is {len(text)} characters; at most {limit} are accepted")
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise ValueError(f"{what} nests {depth} levels deep; at most {MAX_DEPTH} are accepted")
    try:
        if out_of_range is not None:
            return _marking_decoder(out_of_range).decode(text)
        return (_DECODER if len(text) > MAX_INT_DIGITS else _SHORT_DECODER).decode(text)
    except RecursionError:  # pragma: no cover - the depth check runs first
        raise ValueError(f"{what} nests too deeply") from None


def clip(value: Any, limit: int = 1000) -> str:
    """``ascii(value)`` for a message, in full up to ``limit`` characters; longer, its head and its tail
    around a count of what was left out (the end of a key, its strides or target, tells keys apart)."""
    text = ascii(value)
    if len(text) <= limit:
        return text
    half = max((limit - 40) // 2, 1)
    return f"{text[:half]}...[{len(text) - 2 * half} characters]...{text[-half:]}"


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
