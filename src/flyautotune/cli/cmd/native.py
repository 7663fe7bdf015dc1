"""``flyautotune native [build|status]``: the cache hit's tensor check compiled against this torch."""

from __future__ import annotations

import argparse
import json
import time

from ...store.location import store_dir_problem
from ..common import CommandError, UsageError, folder_text, out


def add_parser(sub) -> None:
    p = sub.add_parser("native", help="build (once per torch) or show the compiled tensor check that "
                                      "cache hits use instead of torch's TensorGuards")
    p.add_argument("action", nargs="?", default="status", choices=["build", "status"],
                   help="build: compile it into the user cache now (10-40 s, needs a C++ compiler; without "
                        "it the first cache hit compiles it in the background); status (default): say which "
                        "check serves hits, and whether a build is running or failed")
    p.add_argument("--force", action="store_true", help="with build: compile again even where it exists")
    p.add_argument("--json", action="store_true", help="print JSON instead of a sentence")


def run(args: argparse.Namespace) -> None:
    from ...tuning import tcheck

    try:
        import torch  # noqa: F401 - the check is built against, and read under, this torch
    except ImportError as exc:
        raise CommandError("the compiled tensor check needs torch: pip install torch") from exc
    if args.force and args.action != "build":
        raise UsageError("--force goes with build")
    built = None
    if args.action == "build":
        folder = tcheck.build_path(torch).parent
        where = folder_text(tcheck.DIR_ENV, folder, "the folder")
        problem = store_dir_problem(folder, write=True)
        if problem:
            raise UsageError(f"{where} {problem}: the compiled tensor check is built into a folder "
                             f"(set {tcheck.DIR_ENV} to one you can write)")
        existed = tcheck.build_path(torch).is_file() and not args.force
        start = time.monotonic()
        try:
            path = tcheck.build(force=args.force)
        except RuntimeError as exc:
            raise CommandError(f"could not build the tensor check: {exc}") from exc
        except OSError as exc:
            raise CommandError(f"could not build the tensor check in {where}: {exc}") from exc
        built = {"path": str(path), "seconds": round(time.monotonic() - start, 1), "existed": existed}
    kind, why = tcheck.status()
    if args.json:
        out(json.dumps({"check": kind, "why": why, "torch": torch.__version__, "built": built}, indent=2))
        return
    if built is not None and built["existed"]:
        out(f"already built: {built['path']} (--force compiles it again)")
    elif built is not None:
        out(f"built {built['path']} in {built['seconds']} s")
    if kind == "compiled":
        out(f"Cache hits check tensors with the compiled check (torch {torch.__version__}): {why}.")
    else:
        out(f"Cache hits check tensors with torch's TensorGuards ({why}).")
