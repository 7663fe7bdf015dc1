"""Import planning: what merging a pack into a store would add, replace, keep or
skip, decided before anything is written (``flyautotune import --dry-run``)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

import attrs

from .entries import PackError, StoreEntry, entry_size_problem, is_finite, key_problem
from .packs import Pack


@attrs.frozen
class ImportItem:
    """One pack entry in an import plan.

    :param where: its place in the pack (``entries[3]``) or ``tuner/key``.
    :param reason: why it lands in its group, in words for a user.
    :param entry: the pack's entry (None for an entry that could not be read).
    :param local: the store's winner for the same (tuner, key), if any.
    """

    where: str
    reason: str
    entry: Optional[StoreEntry] = None
    local: Optional[StoreEntry] = None


@attrs.frozen
class ImportPlan:
    """What an import would do; ``apply_import`` writes ``added`` and ``replaced``.

    :param added: entries for keys the store has no winner for.
    :param replaced: entries that replace the store's winner.
    :param kept: the store's winner stays: it is newer and faster than the pack's
        (kept unless ``replace=True``), or identical.
    :param skipped: entries of tuners the import does not name, entries the
        pack could not give (malformed), entries their tuner would never run
        (``refused: ...``) and entries too large for the store's rows
        (``too large for the store: ...``), each with its reason.
    """

    added: tuple = ()
    replaced: tuple = ()
    kept: tuple = ()
    skipped: tuple = ()

    @property
    def to_write(self) -> list:
        """The entries ``apply_import`` writes."""
        return [item.entry for item in self.added + self.replaced]


def check_keys(source: str, entries: Iterable[StoreEntry]) -> None:
    """Raise ``PackError`` naming ``entries[i].key`` for the first entry whose key is not a tuner's key
    (the text of a JSON object, see ``entries.key_problem``): imported, it would only sit in the store,
    never found by a lookup. ``entries`` in pack order (``load_pack``'s list)."""
    for i, entry in enumerate(entries):
        problem = key_problem(entry.key)
        if problem:
            raise PackError(source, f"entries[{i}].key {problem}: {ascii(entry.key)[:120]}; a key is the "
                                    f"JSON object a tuner writes (see one with 'flyautotune export')")


def _where(entry: StoreEntry) -> str:
    return f"{entry.tuner} {ascii(entry.key)[:120]}"


#: How a plan's ``skipped`` item begins when a tuner would never run the entry's winner.
REFUSED = "refused: "
#: How a plan's ``skipped`` item begins when the pack could not give the entry (``read_pack``'s rejected).
MALFORMED = "malformed: "
#: How a plan's ``skipped`` item begins when the entry's row could never be read back from the store.
TOO_LARGE = "too large for the store: "


def plan_import(store: Any, entries: Any, *, tuners: Optional[Iterable[str]] = None,
                replace: bool = False, check_with: Optional[Mapping[str, Any]] = None) -> ImportPlan:
    """Decide what importing ``entries`` into ``store`` would change; writes nothing.

    :param store: any store (``get`` is the only method used).
    :param entries: a ``Pack`` from ``read_pack`` (its refused entries are listed as
        skipped) or an iterable of ``StoreEntry``.
    :param tuners: import only these tuners' entries (an import is scoped to the
        adopters it names); None imports every tuner in the pack.
    :param replace: also replace a local winner that is newer and faster.
    :param check_with: tuner name -> tuner, to check each entry's winner against
        (its space, the names it tunes, no ``stream``); default: the tuners of the
        installed adopters. An entry its tuner would never run is skipped with a
        reason starting ``refused:``.
    :returns: the ``ImportPlan``.
    """
    if isinstance(tuners, str):
        raise TypeError(f"tuners must be a list of tuner names, got the string {tuners!r}")
    wanted = None if tuners is None else frozenset(tuners)
    checkers = _installed_tuners() if check_with is None else check_with
    added, replaced, kept, skipped = [], [], [], []
    if isinstance(entries, Pack):
        skipped += [ImportItem(where, MALFORMED + reason) for where, reason in entries.rejected]
        entries = entries.entries
    for entry in entries:
        if not isinstance(entry, StoreEntry):
            raise TypeError(f"entries must hold StoreEntry objects, got {type(entry).__name__}")
        where = _where(entry)
        if wanted is not None and entry.tuner not in wanted:
            skipped.append(ImportItem(where, f"tuner {entry.tuner!r} is not among those imported "
                                             f"({', '.join(sorted(wanted)) or 'none'})", entry))
            continue
        refusal = _refusal(entry, checkers.get(entry.tuner))
        if refusal:
            skipped.append(ImportItem(where, REFUSED + refusal, entry))
            continue
        too_large = entry_size_problem(entry)
        if too_large:  # written, every reader would skip it as malformed: "added", then never found
            skipped.append(ImportItem(where, TOO_LARGE + too_large, entry))
            continue
        local = store.get(entry.tuner, entry.key)
        if local is None:
            added.append(ImportItem(where, "new key", entry))
        elif local.config == entry.config and local.timing_key == entry.timing_key:
            kept.append(ImportItem(where, "the local winner is the same config", entry, local))
        elif _newer_and_faster(local, entry) and not replace:
            kept.append(ImportItem(where, f"the local winner is newer and faster ({_ms(local)} vs "
                                          f"{_ms(entry)}); replace=True replaces it", entry, local))
        else:
            replaced.append(ImportItem(where, _why_replaced(local, entry, replace), entry, local))
    return ImportPlan(tuple(added), tuple(replaced), tuple(kept), tuple(skipped))


def _installed_tuners() -> dict:
    from ..plugins import plugin_manager

    return {a.tuner.name: a.tuner for a in plugin_manager().adopters().values()}


def _refusal(entry: StoreEntry, tuner: Any) -> str:
    """Why ``tuner`` would never run ``entry``'s winner, or ""."""
    if tuner is None:
        return ""
    from ..tuning.checks import IncompatibleConfigError

    try:
        tuner.check_winner(entry.config, entry.key)
    except IncompatibleConfigError as exc:
        return str(exc)
    return ""


def _ms(entry: StoreEntry) -> str:
    best = entry.best_ms()
    return f"{best:.4g} ms" if is_finite(best) else "unmeasured"


def _newer_and_faster(local: StoreEntry, entry: StoreEntry) -> bool:
    mine, theirs = local.best_ms(), entry.best_ms()
    return local.created > entry.created and mine is not None and (theirs is None or mine < theirs)


def _why_replaced(local: StoreEntry, entry: StoreEntry, replace: bool) -> str:
    if _newer_and_faster(local, entry):
        return "replace=True: replaces a newer, faster local winner"
    if local.created <= entry.created:
        return "the pack's winner is newer"
    return "the local winner is newer but not measured faster"


def unmatched(entries: Iterable[StoreEntry], check_with: Optional[Mapping[str, Any]] = None) -> list:
    """``(entry, why)`` for each entry whose key this installation never makes, so no lookup here finds it:
    the key holds another fingerprint of the kernel's source than the installed tuner's, or another
    Python, flyautotune or torch version than this environment's. Such an entry is still worth keeping
    (for the machines it was tuned on, or for a later export); this says it will not serve here."""
    import json

    from ..builtin import DefaultKeyAxes

    tuners = _installed_tuners() if check_with is None else check_with
    # The core's own axes, as a key made here holds them; torch's also where torch is not imported yet.
    here = dict(DefaultKeyAxes.flyautotune_cache_key(target=None))
    here.setdefault("torch", _installed_torch())
    out = []
    for entry in entries:
        try:
            key = json.loads(entry.key)
        except ValueError:
            continue
        if not isinstance(key, dict):
            continue
        why = []
        tuner = tuners.get(entry.tuner)
        source = getattr(tuner, "source_fingerprint", None)
        if source and key.get("source") not in (None, source):
            why.append(f"another version of its kernel's source (fingerprint {key.get('source')}, "
                       f"installed {source})")
        axes = key.get("backend") if isinstance(key.get("backend"), dict) else {}
        for name, mine in here.items():
            theirs = axes.get(name)
            if theirs is not None and mine is not None and theirs != mine:
                why.append(f"{name} {theirs} (here {mine})")
        if why:
            out.append((entry, "; ".join(why)))
    return out


def _installed_torch() -> Optional[str]:
    """The installed torch's version (its wheel's, as ``torch.__version__`` gives it), without importing it."""
    import importlib.metadata

    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def apply_import(store: Any, plan: ImportPlan) -> int:
    """Write the plan's added and replaced entries (one transaction on the SQLite
    store, which keeps their ``created`` time); returns how many were written.

    :raises StoreError: the store could not be written (SQLite store)."""
    entries = plan.to_write
    if not entries:
        return 0
    put_entries = getattr(store, "put_entries", None)
    if put_entries is not None:
        return put_entries(entries)
    for e in entries:  # any other store: its own put (created becomes now)
        store.put(e.tuner, e.key, e.timing_key, e.config, list(e.timings), e.provenance)
    return len(entries)
