"""``flyautotune clear ADOPTER | --all``: delete winners and their timings from the store."""

from __future__ import annotations

import argparse

from ..common import (
    CommandError, UsageError, checked_store, entries, out, plural, safe, store_error_text, tuner_names,
)


def add_parser(sub) -> None:
    p = sub.add_parser("clear", help="delete winners (and their timings) of one adopter, or of every "
                                     "tuner with --all")
    p.add_argument("adopter", metavar="ADOPTER", nargs="?", help="only this adopter (or tuner name)")
    p.add_argument("--all", action="store_true", help="delete every tuner's winners")


def run(args: argparse.Namespace) -> None:
    from ...store import StoreError

    if args.adopter is not None and args.all:
        raise UsageError("give ADOPTER or --all, not both")
    the_store = checked_store(write=args.all or args.adopter is not None)
    if args.adopter is None and not args.all:
        found = entries(None)
        tuners = sorted({e.tuner for e in found})
        which = f" (tuners: {', '.join(safe(t) for t in tuners)})" if tuners else ""
        raise UsageError(f"clear needs ADOPTER or --all; --all would delete {plural(len(found))}{which} "
                         f"from {the_store.path}")
    try:
        if args.all:
            n = the_store.clear()
        else:
            n = 0
            for tuner in tuner_names(args.adopter, sorted({e.tuner for e in entries(None)})):
                n += the_store.clear(tuner)
    except StoreError as exc:
        raise CommandError(store_error_text(the_store, exc)) from exc
    what = f" of {safe(args.adopter)}" if args.adopter else ""
    out(f"removed {plural(n)}{what} from {the_store.path}")
