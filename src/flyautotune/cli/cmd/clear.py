"""``flyautotune clear ADOPTER | --all | --stale``: delete winners (and their timings) from the store."""

from __future__ import annotations

import argparse

from ..common import (
    CommandError, UsageError, checked_store, entries, out, plural, safe, store_error_text, tuner_names,
)
from .show import stale


def add_parser(sub) -> None:
    p = sub.add_parser("clear", help="delete winners (and their timings) of one adopter, or of every "
                                     "tuner with --all")
    p.add_argument("adopter", metavar="ADOPTER", nargs="?", help="only this adopter (or tuner name)")
    p.add_argument("--all", action="store_true", help="delete every tuner's winners")
    p.add_argument("--stale", action="store_true",
                   help="delete only the winners no lookup in this installation finds (those `flyautotune show "
                        "--stale` lists), of ADOPTER or of every tuner")


def run(args: argparse.Namespace) -> None:
    from ...store import StoreError

    if args.adopter is not None and args.all:
        raise UsageError("give ADOPTER or --all, not both")
    if args.stale and args.all:
        raise UsageError("give --stale or --all, not both (--stale alone covers every tuner)")
    the_store = checked_store(write=args.all or args.stale or args.adopter is not None)
    if args.stale:
        return _clear_stale(the_store, args.adopter)
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


def _clear_stale(the_store, adopter) -> None:
    from ...store import StoreError

    found = entries(adopter)
    why = stale(found)
    what = f" of {safe(adopter)}" if adopter else ""
    try:
        for e in found:
            if (e.tuner, e.key) in why:
                the_store.delete(e.tuner, e.key)
    except StoreError as exc:
        raise CommandError(store_error_text(the_store, exc)) from exc
    out(f"removed {plural(len(why), 'stale winner', 'stale winners')}{what} from {the_store.path}; {plural(len(found) - len(why))} "
        f"kept")
