"""Store entries: the ``StoreEntry`` value, the errors, and the validation of
entries and timings, whether a caller passes them or untrusted JSON holds them."""

from __future__ import annotations

import math
import time
from typing import Any, Iterable, Mapping, Optional

import attrs

from .jsontext import MAX_ENTRY_BYTES, canonical_config_json, compact_json, loads, text_problem

#: How far ahead of this machine's clock an entry's ``created`` may be (clock skew between machines).
#: One further ahead would pass for newer than every winner tuned here: it is refused.
CREATED_SLACK_S = 24 * 3600.0
#: The most characters of an error text a timing row keeps; the rest is cut, with a marker saying so.
MAX_ERROR_CHARS = 1000
_SECONDS_PER_YEAR = 365.2425 * 24 * 3600

ENTRY_FIELDS = frozenset({"tuner", "key", "timing_key", "config", "timings", "provenance", "created"})
TIMING_REQUIRED = frozenset({"config", "ms", "error"})
TIMING_STATS = ("spread", "method", "reps")
TIMING_FIELDS = TIMING_REQUIRED | frozenset(TIMING_STATS)


class StoreError(RuntimeError):
    """A maintenance command (``entries``, ``clear``, ``export_pack``,
    ``import_pack``) could not read or write the store; names the file and cause."""


class PackError(ValueError):
    """A tuning pack is malformed; the message names the pack and the problem."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"tuning pack {source}: {problem}")
        self.source = source
        self.problem = problem


@attrs.frozen
class StoreEntry:
    """One tuned winner: the config for ``(tuner, key)``, every candidate's timing
    and where it came from. Treat the dict fields as read-only.

    :param tuner: the tuner's name.
    :param key: the canonical key JSON of the call.
    :param config: the winner in ``Config.to_dict()`` form.
    :param timings: ``{"config": dict, "ms": float | None, "error": str | None}``
        per candidate of the search, fastest first, failures last; optional
        statistics ``spread`` (ms), ``method`` (str) and ``reps`` (int) when measured.
    :param provenance: what the tuner recorded (device, toolchain, versions, duration).
    :param created: when the winner was written (seconds since the epoch).
    :param timing_key: the key of the per-candidate timing pool it was searched with.
    :param origin: the store file or pack it was read from (not compared).
    """

    tuner: str
    key: str
    config: dict
    timings: tuple = ()
    provenance: dict = attrs.field(factory=dict)
    created: float = 0.0
    timing_key: str = ""
    origin: str = attrs.field(default="", eq=False)

    def to_pack_dict(self) -> dict:
        """The entry's JSON form inside a pack."""
        return {
            "tuner": self.tuner,
            "key": self.key,
            "timing_key": self.timing_key,
            "config": self.config,
            "timings": list(self.timings),
            "provenance": self.provenance,
            "created": self.created,
        }

    def best_ms(self) -> float | None:
        """The winner's own measured time, else the fastest candidate's; None if unmeasured."""
        times = [t["ms"] for t in self.timings if t.get("ms") is not None]
        own = [t["ms"] for t in self.timings if t.get("ms") is not None and t["config"] == self.config]
        return min(own or times) if (own or times) else None


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite(value: Any) -> bool:
    """A number (not a bool) that a float holds finitely: an integer too large for one (10**400) is
    refused like ``inf``, never an ``OverflowError``."""
    if not is_number(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def is_time(value: Any) -> bool:
    """A usable time: a finite number of milliseconds above zero (not a bool, not text)."""
    return is_finite(value) and value > 0


def latest_created(now: Optional[float] = None) -> float:
    """The latest ``created`` accepted now: this machine's clock plus ``CREATED_SLACK_S``."""
    return (time.time() if now is None else now) + CREATED_SLACK_S


def created_problem(created: Any, now: Optional[float] = None) -> str:
    """Why ``created`` cannot be an entry's time ('' when it can): epoch seconds from 0 to at most
    ``CREATED_SLACK_S`` ahead of now. A time in the future would rank the entry newer than every local
    winner (an import replacing them, a later write of a winner dropped as older)."""
    if is_finite(created) and 0 <= created <= latest_created(now):
        return ""
    year = f" (the year {int(1970 + created // _SECONDS_PER_YEAR)})" if is_finite(created) and created > 0 else ""
    return (f"must be epoch seconds from 0 to at most a day ahead of this machine's clock, "
            f"got {_short(created)}{year}")


def cap_error(error: str) -> str:
    """``error`` as a timing row keeps it: its first ``MAX_ERROR_CHARS`` characters and a marker
    when longer (a failure's text, one of thousands, must not make its winner's row unreadable)."""
    if len(error) <= MAX_ERROR_CHARS:
        return error
    return f"{error[:MAX_ERROR_CHARS]}... [{len(error) - MAX_ERROR_CHARS} more characters not stored]"


def check_text(name: str, value: Any) -> None:
    """Raise naming ``name`` unless ``value`` is a non-empty string of valid, printable text."""
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty string, got {value!r}")
    problem = text_problem(value)
    if problem:
        raise ValueError(f"{name} {problem}: {ascii(value)[:120]}")


def check_config(where: str, config: Any) -> None:
    if not isinstance(config, Mapping):
        raise TypeError(f"{where} must be a Config.to_dict() mapping, got {config!r}")
    try:
        canonical_config_json(config)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where} is not JSON-serializable ({exc}): {config!r}") from None


def _check_stats(where: str, t: Mapping) -> dict:
    out = {}
    spread, method, reps = (t.get(name) for name in TIMING_STATS)
    if spread is not None:
        if not (is_finite(spread) and spread >= 0):
            raise ValueError(f"{where}['spread'] must be a finite number of milliseconds >= 0, got {_short(spread)}")
        out["spread"] = float(spread)
    if method is not None:
        if not isinstance(method, str) or not method or text_problem(method):
            raise ValueError(f"{where}['method'] must be a short name such as 'graph', got {method!r}")
        out["method"] = method
    if reps is not None:
        if type(reps) is not int or reps < 1:
            raise ValueError(f"{where}['reps'] must be an integer >= 1, got {_short(reps)}")
        out["reps"] = reps
    return out


def normalize_timings(timings: Any, where: str = "timings") -> list:
    """Validated timing dicts from a caller, fastest first, failures last, ties by config text.

    A time that is not finite and above zero (``inf``, ``0``, ``-1``) is recorded
    as a failure with a message saying so; a time that is not a number raises.
    """
    if isinstance(timings, (str, bytes, Mapping)) or not isinstance(timings, Iterable):
        raise TypeError(f"{where} must be a list of timing dicts, got {timings!r}")
    rows = []
    for i, t in enumerate(timings):
        here = f"{where}[{i}]"
        if not isinstance(t, Mapping):
            raise TypeError(f"{here} must be a dict with 'config', 'ms', 'error', got {t!r}")
        if set(t) - TIMING_FIELDS or "config" not in t:
            raise ValueError(
                f"{here} = {t!r}: accepted fields are 'config' (required), 'ms', 'error', "
                f"'spread', 'method', 'reps'"
            )
        check_config(f"{here}['config']", t["config"])
        ms, error = t.get("ms"), t.get("error")
        if ms is not None and not is_number(ms):
            raise TypeError(f"{here}['ms'] must be a number of milliseconds or None, got {ms!r}")
        if error is not None and not isinstance(error, str):
            raise TypeError(f"{here}['error'] must be a string or None, got {error!r}")
        if ms is not None and not is_time(ms):
            # Only finite times above zero are times; anything else is recorded as a failure.
            ms, error = None, error or f"rejected time {_short(ms)} ms (times must be finite and > 0)"
        row = {"config": dict(t["config"]), "ms": None if ms is None else float(ms),
               "error": None if error is None else cap_error(error)}
        row.update(_check_stats(here, t))
        rows.append(row)
    rows.sort(key=lambda r: (r["ms"] is None, r["ms"] or 0.0, canonical_config_json(r["config"])))
    return rows


def _check_json_timing(where: str, t: Any) -> None:
    if type(t) is not dict or not TIMING_REQUIRED <= t.keys() <= TIMING_FIELDS:
        raise ValueError(
            f"{where} = {t!r}: expected the fields 'config', 'ms', 'error' "
            f"(and optionally 'spread', 'method', 'reps')"
        )
    ms, error = t["ms"], t["error"]
    if type(t["config"]) is not dict:
        raise TypeError(f"{where}['config'] must be a Config.to_dict() mapping, got {t['config']!r}")
    if ms is not None and type(ms) is not float and type(ms) is not int:
        raise TypeError(f"{where}['ms'] must be a number of milliseconds or None, got {ms!r}")
    if ms is not None and not is_time(ms):
        raise ValueError(f"{where}['ms'] must be a finite time above zero or None, got {_short(ms)}")
    if error is not None and type(error) is not str:
        raise TypeError(f"{where}['error'] must be a string or None, got {error!r}")
    _check_stats(where, t)


def key_problem(key: str) -> str:
    """Why ``key`` cannot be a key a tuner makes, or ``""``: a tuner's key is its call's key dict as JSON
    (``flyautotune.keys.canonical_json``), so anything but the text of a JSON object is never found by a
    lookup. Not enforced by packs themselves (tests and tools store short keys such as ``"k"``);
    ``flyautotune import`` refuses such entries. The canonical spelling (sorted, compact) is not required:
    hand-written packs of JSON-object keys were accepted before, and refusing them would break them."""
    try:
        parsed = loads(key, what="the key")  # the store's bounded, strict parser (packs are untrusted)
    except ValueError:
        return "is not JSON"
    if type(parsed) is not dict:
        return f"is JSON {type(parsed).__name__}, not a JSON object"
    return ""


def entry_from_json(where: str, data: Any, origin: str) -> StoreEntry:
    """Build an entry from parsed, untrusted JSON (a store row or a pack item).

    :raises ValueError, TypeError: naming the bad field. Parsed JSON holds only
        finite numbers (see ``jsontext.loads``), so shapes, types and ranges are checked here.
    """
    if type(data) is not dict:
        raise TypeError(f"{where} must be a JSON object, got {_short(data)}")
    if data.keys() != ENTRY_FIELDS:
        raise ValueError(
            f"{where}: missing field(s) {sorted(ENTRY_FIELDS - set(data))}, unknown field(s) "
            f"{sorted(set(data) - ENTRY_FIELDS)}; accepted: {sorted(ENTRY_FIELDS)}"
        )
    for name in ("tuner", "key", "timing_key"):
        value = data[name]
        if type(value) is not str or not value:
            raise TypeError(f"{where}.{name} must be a non-empty string, got {_short(value)}")
        problem = text_problem(value)
        if problem:
            raise ValueError(f"{where}.{name} {problem}: {ascii(value)[:120]}")
    if type(data["config"]) is not dict:
        raise TypeError(f"{where}.config must be a Config.to_dict() mapping, got {_short(data['config'])}")
    if type(data["provenance"]) is not dict:
        raise TypeError(f"{where}.provenance must be a JSON object, got {_short(data['provenance'])}")
    created = data["created"]
    if type(created) is not float and type(created) is not int:
        raise TypeError(f"{where}.created must be a number (epoch seconds), got {_short(created)}")
    problem = created_problem(created)
    if problem:
        raise ValueError(f"{where}.created {problem}")
    timings = data["timings"]
    if type(timings) is not list:
        raise TypeError(f"{where}.timings must be a list of timing dicts, got {_short(timings)}")
    for i, t in enumerate(timings):
        _check_json_timing(f"{where}.timings[{i}]", t)
    return StoreEntry(
        tuner=data["tuner"],
        key=data["key"],
        config=data["config"],
        timings=tuple(timings),
        provenance=data["provenance"],
        created=float(created),
        timing_key=data["timing_key"],
        origin=origin,
    )


def entry_from_row(row: Any, origin: str) -> StoreEntry:
    """Build an entry from a store row ``(tuner, key, timing_key, config_json, timings_json,
    provenance_json, created)``; raises like ``entry_from_json``."""
    tuner, key, timing_key, config_json, timings_json, provenance_json, created = row
    data = {
        "tuner": tuner, "key": key, "timing_key": timing_key,
        "config": loads(config_json, what="config_json"), "timings": loads(timings_json, what="timings_json"),
        "provenance": loads(provenance_json, what="provenance_json"), "created": created,
    }
    return entry_from_json("entry", data, origin)


def entry_row(entry: StoreEntry) -> tuple:
    """The store row of a whole entry: ``(tuner, key, timing_key, config_json, timings_json,
    provenance_json, created)``."""
    return (entry.tuner, entry.key, entry.timing_key, canonical_config_json(entry.config),
            compact_json(list(entry.timings)), compact_json(entry.provenance), entry.created)


def row_size_problem(config_json: str, timings_json: str, provenance_json: str) -> str:
    """Why a winner row with these JSON columns could never be read back ('' when it can): the store
    reads each of them with at most ``MAX_ENTRY_BYTES`` characters (``jsontext.loads``)."""
    for name, text in (("config", config_json), ("timings", timings_json), ("provenance", provenance_json)):
        if len(text) > MAX_ENTRY_BYTES:
            return (f"its {name} is {len(text)} characters of JSON, and the store reads at most {MAX_ENTRY_BYTES} "
                    f"per field: it could never be read back")
    return ""


def entry_size_problem(entry: StoreEntry) -> str:
    """``row_size_problem`` of a whole entry (an import)."""
    return row_size_problem(*entry_row(entry)[3:6])


def _short(value: Any) -> str:
    """A bounded repr for messages (a huge number or list would flood the terminal)."""
    if type(value) is int and abs(value) >= 10**30:
        return f"an integer of {len(str(abs(value)))} digits"
    return ascii(value)[:120]


def check_put(tuner: Any, key: Any, timing_key: Any, config: Any, timings: Any, provenance: Any) -> list:
    """Validate the arguments of a store's ``put``; returns the normalized timing rows.

    :raises TypeError, ValueError: naming the malformed argument (a caller bug, not an I/O problem).
    """
    for name, value in (("tuner", tuner), ("key", key), ("timing_key", timing_key)):
        check_text(name, value)
    check_config("config", config)
    rows = normalize_timings(timings)
    if not isinstance(provenance, Mapping):
        raise TypeError(f"provenance must be a mapping, got {provenance!r}")
    return rows
