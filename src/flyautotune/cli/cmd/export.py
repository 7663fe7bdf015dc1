"""``flyautotune export FILE``: write the store's winners to a canonical JSON pack."""

from __future__ import annotations

import argparse
import os

from ..common import CommandError, UsageError, entries, out, plural, safe, store


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="write the store's winners to a JSON pack")
    p.add_argument("file", metavar="FILE", help="the pack to write (its folder must exist), e.g. winners.json")
    p.add_argument("--adopter", metavar="ADOPTER", help="only this adopter (or tuner name)")


def run(args: argparse.Namespace) -> None:
    from ...store import dump_pack, write_atomic
    from ...store.recovery import DB_LOCK_SUFFIX

    found = entries(args.adopter)
    parent = os.path.dirname(os.path.abspath(args.file))
    if not os.path.isdir(parent):
        raise UsageError(f"argument FILE: the folder of {safe(args.file)!r} does not exist")
    if os.path.isdir(args.file):
        raise UsageError(f"argument FILE: {safe(args.file)!r} is a folder; give a file to write, such as "
                         f"{safe(os.path.join(args.file, 'winners.json'))!r}")
    own = getattr(store(), "path", None)
    if own is not None and os.path.realpath(args.file) in {os.path.realpath(own) + suffix for suffix in
                                                          ("", "-journal", "-wal", "-shm", DB_LOCK_SUFFIX)}:
        # the store's file, one of SQLite's journals or the store's lock: the pack would replace what it holds
        raise UsageError(f"argument FILE: {safe(args.file)!r} is the store's own file ({safe(str(own))}); "
                         f"give a new file for the pack, such as 'winners.json'")
    try:
        write_atomic(args.file, dump_pack(found))
    except OSError as exc:
        raise CommandError(f"cannot write {safe(args.file)!r}: {exc}") from exc
    out(f"exported {plural(len(found))} to {safe(args.file)}")
