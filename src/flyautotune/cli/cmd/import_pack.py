"""``flyautotune import FILE``: merge a pack's winners into the store, scoped and previewable."""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

import attrs

from ..common import (
    CommandError, UsageError, checked_store, config_text, out, plural, safe, store_error_text, tuner_names,
)
from .show import key_texts


def add_parser(sub) -> None:
    p = sub.add_parser("import", help="merge a JSON pack's winners into the store")
    p.add_argument("file", metavar="FILE", help="the JSON pack to read (as flyautotune export writes it)")
    p.add_argument("--adopter", metavar="ADOPTER", action="append",
                   help="import only this adopter's (or tuner name's) winners; repeat for several")
    p.add_argument("--dry-run", action="store_true", help="show what would change and change nothing")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--replace", action="store_true",
                       help="replace local winners even where the local one is newer and faster")
    which.add_argument("--keep", action="store_true", help="keep the store's own winner wherever both have one")
    p.add_argument("--strict", action="store_true",
                   help="change nothing and exit 1 if any entry is refused (a config its adopter would never run) "
                        "or malformed")


def run(args: argparse.Namespace) -> None:
    from ... import store as _store
    from ...store.imports import MALFORMED, REFUSED, check_keys

    if not os.path.isfile(args.file):
        raise UsageError(f"argument FILE: {safe(args.file)!r} does not exist or is not a file")
    the_store = checked_store(write=not args.dry_run)
    try:
        pack = _store.read_pack(args.file)  # a malformed entry is skipped on its own, with its reason
        check_keys(args.file, pack.entries)
        tuners = None
        if args.adopter:
            known = sorted({e.tuner for e in pack.entries} | {e.tuner for e in the_store.entries()})
            tuners = sorted({t for name in args.adopter for t in tuner_names(name, known)})
        plan = _store.plan_import(the_store, pack, tuners=tuners, replace=args.replace)
        refused = [item for item in plan.skipped if _reason(item).startswith((REFUSED, MALFORMED))]
        if args.keep:  # the store's winner stays wherever both have one
            plan = _evolve(plan, replaced=type(plan.replaced)(()),
                           kept=type(plan.kept)([*plan.kept, *plan.replaced]))
        _print_plan(plan, dry_run=args.dry_run)
        _print_unmatched(_store.unmatched([_entry(i) for i in (*plan.added, *plan.replaced)]), dry_run=args.dry_run)
        if refused and args.strict:
            raise CommandError(f"--strict: {plural(len(refused))} of {safe(args.file)} refused (listed above); "
                               f"nothing imported")
        if args.dry_run:
            return
        n = _store.apply_import(the_store, plan)
    except _store.PackError as exc:
        raise CommandError(str(exc)) from exc
    except _store.StoreError as exc:
        raise CommandError(store_error_text(the_store, exc)) from exc
    out(f"imported {plural(n)} from {safe(args.file)} into {the_store.path}")


def _print_plan(plan: Any, dry_run: bool) -> None:
    verbs = (("added", "add"), ("replaced", "replace"), ("kept", "keep the local winner for"),
             ("skipped", "skip"))
    counts = {name: len(getattr(plan, name)) for name, _ in verbs}
    lead = "would " if dry_run else ""
    out(f"{'dry run: ' if dry_run else ''}{lead}add {counts['added']}, {lead}replace {counts['replaced']}, "
        f"{lead}keep {counts['kept']} local, {lead}skip {counts['skipped']}")
    # The key texts of the whole plan at once: two keys told apart only by their strides read apart on
    # every line, whichever of them is listed (not just when both land in one group).
    every = [item for name, _ in verbs for item in getattr(plan, name) if _entry(item) is not None]
    texts = dict(zip(map(id, every), key_texts([(_entry(i).tuner, _entry(i).key) for i in every])))
    for name, verb in verbs:
        items = list(getattr(plan, name))
        if not items or (name == "added" and not dry_run):  # a replaced winner is named: it is gone after
            continue
        for item in items:
            e, reason = _entry(item), _reason(item)
            if e is None:  # an entry the pack could not give: its place and why
                out(f"  {verb} {safe(getattr(item, 'where', '?'))}" + (f" ({safe(reason)})" if reason else ""))
                continue
            key, where = texts[id(item)]
            # A kept line names the winner that stays: the store's own, not the pack's.
            shown = _local(item) if name == "kept" else None
            config = (shown if shown is not None else e).config
            # A replaced line names the store's winner it replaces too: after the import it is nowhere else.
            was = _local(item) if name == "replaced" else None
            if was is not None:
                reason = f"was {config_text(was.config)}" + (f"; {reason}" if reason else "")
            out(f"  {verb} {safe(e.tuner)} {safe(key)} on {safe(where)}: {safe(config_text(config))}"
                + (f" ({safe(reason)})" if reason else ""))


#: At most this many unmatched entries are listed one by one.
UNMATCHED_SHOWN = 10


def _print_unmatched(found: list, dry_run: bool) -> None:
    """Entries written that no lookup in this installation finds (another source or toolchain): said, since an
    import is usually meant to spare a search here."""
    if not found:
        return
    verb = "would be written" if dry_run else "written"
    out(f"note: {plural(len(found))} {verb} that this installation's lookups will not find (kept for the "
        f"machines they match; tune here to get winners for this one):")
    texts = key_texts([(e.tuner, e.key) for e, _ in found[:UNMATCHED_SHOWN]])
    for (e, why), (key, where) in zip(found, texts):
        out(f"  {safe(e.tuner)} {safe(key)} on {safe(where)}: tuned with {safe(why)}")
    if len(found) > UNMATCHED_SHOWN:
        out(f"  and {len(found) - UNMATCHED_SHOWN} more")


def _evolve(plan: Any, **changes: Any) -> Any:
    if attrs.has(type(plan)):
        return attrs.evolve(plan, **changes)
    if hasattr(plan, "_replace"):  # a NamedTuple
        return plan._replace(**changes)
    return dataclasses.replace(plan, **changes)


def _entry(item: Any) -> Any:
    """A plan item is an entry, or ``(entry, reason)`` for a skipped or kept one."""
    return item[0] if isinstance(item, tuple) else getattr(item, "entry", item)


def _local(item: Any) -> Any:
    """The store's winner a plan item was weighed against (None when unknown)."""
    return getattr(item, "local", None)


def _reason(item: Any) -> str:
    if isinstance(item, tuple) and len(item) > 1:
        return str(item[1])
    return str(getattr(item, "reason", "") or "")
