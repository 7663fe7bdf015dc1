"""Tuning packs: canonical JSON files of winners, shipped with an adopter or
imported by hand. Every pack is untrusted input: parsing is bounded and every
entry is validated on its own."""

from __future__ import annotations

import importlib.resources
import json
import logging
import os
import stat
import threading
from typing import Any, Iterable, Mapping, Optional

import attrs

from .entries import PackError, StoreEntry, entry_from_json
from .files import read_regular_file
from .jsontext import MAX_PACK_BYTES, find_out_of_range, loads

log = logging.getLogger("flyautotune.store")

PACK_FORMAT = "flyautotune-pack"
PACK_VERSION = 1


@attrs.frozen
class Pack:
    """A parsed pack: its usable entries and the entries it refused.

    :param source: the file (or ``<text>``) it came from.
    :param entries: valid entries, in file order.
    :param rejected: ``(where, reason)`` for each entry that was refused, e.g.
        ``("entries[3]", "entries[3].created must be epoch seconds ...")``.
    """

    source: str
    entries: tuple = ()
    rejected: tuple = ()


def dump_pack(entries: Iterable[StoreEntry]) -> str:
    """The canonical pack text of ``entries``: ``format`` and ``version`` first, entries
    sorted by (tuner, key), keys sorted below, two-space indent, ASCII, trailing
    newline — equal content gives equal bytes."""
    items = sorted(entries, key=lambda e: (e.tuner, e.key))
    seen = set()
    for e in items:
        if (e.tuner, e.key) in seen:
            raise ValueError(f"dump_pack: two entries for tuner={e.tuner!r} key={e.key!r}")
        seen.add((e.tuner, e.key))
    # The identity leads the file; everything below it has sorted keys.
    doc = {"format": PACK_FORMAT, "version": PACK_VERSION,
           "entries": [_sorted_keys(e.to_pack_dict()) for e in items]}
    return json.dumps(doc, indent=2, ensure_ascii=True, allow_nan=False) + "\n"


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [_sorted_keys(v) for v in value]
    return value


def _read_source(path_or_text: Any) -> tuple:
    if isinstance(path_or_text, (bytes, bytearray)):
        return "<text>", bytes(path_or_text)
    if (isinstance(path_or_text, str) and path_or_text.lstrip("\ufeff").lstrip().startswith("{")
            and not os.path.lexists(path_or_text)):  # a file named "{gfx942}.json" is a path
        return "<text>", path_or_text
    if isinstance(path_or_text, (str, os.PathLike)):
        name = os.fspath(path_or_text)
        try:
            return name, read_regular_file(name, MAX_PACK_BYTES)
        except (OSError, ValueError) as exc:
            raise PackError(name, f"cannot read it ({exc})") from None
    if hasattr(path_or_text, "read_bytes"):  # an importlib.resources Traversable (e.g. inside a zip)
        name = str(path_or_text)
        try:
            with path_or_text.open("rb") as f:
                data = f.read(MAX_PACK_BYTES + 1)
        except OSError as exc:
            raise PackError(name, f"cannot read it ({exc})") from None
        if len(data) > MAX_PACK_BYTES:
            raise PackError(name, f"cannot read it (it is larger than {MAX_PACK_BYTES} bytes)")
        return name, data
    raise TypeError(f"load_pack: expected a path, a Traversable or pack text, got {type(path_or_text).__name__}")


def read_pack(path_or_text: Any) -> Pack:
    """Parse a pack (a path, a Traversable, or the JSON text itself), keeping every
    valid entry and listing the refused ones with their reasons.

    Bounded: at most ``MAX_PACK_BYTES``, ``MAX_DEPTH`` levels of nesting, finite
    numbers; a path must be a regular file. A leading UTF-8 byte order mark is skipped.

    :raises PackError: the pack as a whole is unusable (unreadable, not JSON,
        wrong format or version).
    """
    name, text = _read_source(path_or_text)
    out_of_range: list = []  # numbers no float holds: each refuses the entry that holds it
    try:
        doc = loads(text, limit=MAX_PACK_BYTES, what="the pack", out_of_range=out_of_range)
    except ValueError as exc:
        raise PackError(name, f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise PackError(name, f"expected a JSON object at the top, got {type(doc).__name__}")
    if doc.get("format") != PACK_FORMAT:
        raise PackError(name, f"'format' is {ascii(doc.get('format'))[:80]}; expected {PACK_FORMAT!r}")
    version = doc.get("version")
    if type(version) is not int or version < 1:
        raise PackError(name, f"'version' is {ascii(version)[:80]}; expected {PACK_VERSION}")
    if version > PACK_VERSION:
        raise PackError(
            name, f"version {version} was written by a newer flyautotune; this one reads version {PACK_VERSION}"
        )
    unknown = sorted(ascii(k) for k in set(doc) - {"format", "version", "entries"})
    if unknown:
        raise PackError(name, f"unknown top-level field(s) [{', '.join(unknown)}]; "
                              f"accepted: 'format', 'version', 'entries'")
    raw = doc.get("entries")
    if not isinstance(raw, list):
        raise PackError(name, f"'entries' must be a list, got {ascii(raw)[:80]}")
    entries, rejected, seen = [], [], set()
    for i, item in enumerate(raw):
        where = f"entries[{i}]"
        bad_number = find_out_of_range(item) if out_of_range else None
        if bad_number is not None:
            rejected.append((where, f"{where}: {bad_number.problem}"))
            continue
        try:
            entry = entry_from_json(where, item, name)
        except (TypeError, ValueError, OverflowError) as exc:
            rejected.append((where, str(exc)))
            continue
        if (entry.tuner, entry.key) in seen:
            rejected.append((where, f"{where} repeats tuner={entry.tuner!r} key={entry.key!r}"))
            continue
        seen.add((entry.tuner, entry.key))
        entries.append(entry)
    return Pack(source=name, entries=tuple(entries), rejected=tuple(rejected))


def load_pack(path_or_text: Any) -> list:
    """Parse and validate a whole pack (a path, a Traversable, or the JSON text itself).

    :returns: its entries as ``StoreEntry`` objects, in file order.
    :raises PackError: naming the pack and the first problem (bad JSON, wrong format
        or version, a malformed or duplicate entry). ``read_pack`` keeps the valid
        entries of a pack instead.
    """
    pack = read_pack(path_or_text)
    if pack.rejected:
        raise PackError(pack.source, pack.rejected[0][1])
    return list(pack.entries)


class PackIndex:
    """Shipped packs, each parsed once per process and re-read when its file changes
    (mtime or size). A malformed or missing pack is skipped with one warning; in a
    pack with some malformed entries, the valid ones are still used."""

    def __init__(self) -> None:
        self._packs: dict = {}  # name -> (stamp, {(tuner, key): StoreEntry} or None)
        self._lock = threading.Lock()

    def find(self, pack_paths: Iterable[Any], tuner: str, key: str) -> Optional[StoreEntry]:
        """The winner for ``(tuner, key)`` from the first pack in ``pack_paths`` that has one."""
        for pack in pack_paths:
            table = self._table(pack)
            if table:
                entry = table.get((tuner, key))
                if entry is not None:
                    return entry
        return None

    def other_source(self, pack_paths: Iterable[Any], tuner: str, key: str) -> Optional[tuple]:
        """``(pack, its source fingerprint)`` for the first pack with a winner whose key is ``key`` in all
        but the kernel's source fingerprint (``"source"``): tuned from another version of the kernel's
        file, so never used for this key. None when there is no such winner (or ``key`` has no source)."""
        try:
            wanted = json.loads(key)
        except ValueError:
            return None
        if not isinstance(wanted, dict) or "source" not in wanted:
            return None
        source = wanted.pop("source")
        for pack in pack_paths:
            table = self._table(pack)
            for (name, other), _ in (table or {}).items():
                if name != tuner or other == key:
                    continue
                try:
                    found = json.loads(other)
                except ValueError:
                    continue
                if not isinstance(found, dict):
                    continue
                theirs = found.pop("source", source)
                if theirs != source and found == wanted:
                    return str(pack), theirs
        return None

    def _table(self, pack: Any) -> Optional[dict]:
        if isinstance(pack, (str, os.PathLike)):
            name = os.fspath(pack)
            try:
                st = os.stat(name)
                stamp: Any = (st.st_mtime_ns, st.st_size)
            except OSError:
                stamp = "missing"
        else:
            name, stamp = str(pack), "resource"  # a Traversable: its content cannot change in-process
        cached = self._packs.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        with self._lock:
            cached = self._packs.get(name)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            table = None
            if stamp == "missing":
                log.warning("flyautotune: skipping tuning pack %s: the file does not exist", name)
            else:
                try:
                    parsed = read_pack(pack)
                    table = {(e.tuner, e.key): e for e in parsed.entries}
                    for _, reason in parsed.rejected:
                        log.warning("flyautotune: tuning pack %s: skipping a malformed entry: %s", name, reason)
                except (PackError, TypeError) as exc:
                    log.warning("flyautotune: skipping tuning pack %s: %s", name, exc)
            self._packs[name] = (stamp, table)
            return table

    def clear(self) -> None:
        """Forget every parsed pack (the next lookup re-reads them)."""
        with self._lock:
            self._packs.clear()


_PACKS = PackIndex()
_WARNED: set = set()


def find_in_packs(pack_paths: Iterable[Any], tuner: str, key: str) -> Optional[StoreEntry]:
    """The shipped winner for ``(tuner, key)`` from the first of ``pack_paths``
    (paths or Traversables) that has one, using the process-wide ``PackIndex``."""
    return _PACKS.find(pack_paths, tuner, key)


def pack_with_other_source(pack_paths: Iterable[Any], tuner: str, key: str) -> Optional[tuple]:
    """``(pack, source fingerprint)`` of a shipped winner for ``(tuner, key)`` tuned from another
    version of the kernel's source (see ``PackIndex.other_source``), or None."""
    return _PACKS.other_source(pack_paths, tuner, key)


def package_packs(package: str, folder: str = "packs") -> list:
    """The ``*.json`` packs an adopter ships as package data under ``package/folder``,
    sorted by name (Traversables; plain paths for a normal install).

    Only regular files inside that folder count: a symlink (to ``/dev/zero``, or
    out of the package) or any other special file is skipped with a warning."""
    root = importlib.resources.files(package) / folder
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        if not p.name.endswith(".json"):
            continue
        problem = _shipped_file_problem(root, p)
        if problem:
            if str(p) not in _WARNED:  # adopters list their packs on every cold lookup
                _WARNED.add(str(p))
                log.warning("flyautotune: skipping tuning pack %s: %s", p, problem)
        elif p.is_file():
            out.append(p)
    return sorted(out, key=lambda p: p.name)


def _shipped_file_problem(root: Any, item: Any) -> str:
    if not isinstance(item, os.PathLike):
        return ""  # inside a zip: no links or devices there
    try:
        st = os.lstat(item)
    except OSError as exc:
        return f"cannot read it ({exc})"
    if stat.S_ISLNK(st.st_mode):
        return f"it is a symbolic link (to {os.readlink(item)}); packs must be regular files in the package"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if os.path.dirname(os.path.realpath(item)) != os.path.realpath(root):
        return "it is outside the package folder"
    return ""
