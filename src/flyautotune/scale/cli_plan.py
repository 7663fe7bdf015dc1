"""``flyautotune plan PLAN.toml``: tune a whole plan, serially or on Ray, and export one pack."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional

from ..devices import use_triton_interpreter

HELP = "tune every adopter x shape x dtype of a plan file (serially, or on Ray) and export one pack"


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a worker count; expected a positive integer")
    return n


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``plan`` command to ``flyautotune``'s subparsers; returns its parser."""
    p = subparsers.add_parser("plan", help=HELP, description=HELP + ". See docs/scale_out.md.")
    p.add_argument("plan", help="the plan file (TOML)")
    engine = p.add_mutually_exclusive_group()  # each names where the keys run: both at once is no choice
    engine.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="run on Ray: a cluster address, or none for a local instance ($RAY_ADDRESS also "
                             "selects a cluster); needs pip install 'flyautotune[ray]'")
    engine.add_argument("--serial", action="store_true", help="run in this process even when Ray is installed")
    p.add_argument("--workers", type=_workers, default=None,
                   help="CPU workers of a local Ray instance on a machine without a GPU (default 2)")
    p.add_argument("--device", default=None, help="the serial runner's device (default: cuda:0 if visible, else cpu)")
    p.add_argument("--pack", default=None, help="where to write the pack (default: the plan's [options] pack, "
                                                "else PLAN.pack.json beside the plan)")
    p.add_argument("--force", action="store_true", default=None, help="search every key again, stored or not")
    p.add_argument("--check", action="store_true", help="validate the plan and list its keys; tune nothing")
    return p


def _keys(n: int) -> str:
    return f"{n} key" + ("" if n == 1 else "s")


def _say(text: str = "") -> None:
    print(text, file=sys.stdout, flush=True)


class _NoRay(RuntimeError):
    """A Ray address was given where Ray is not installed."""


def _engine(args: argparse.Namespace, plan: Any) -> tuple:
    """``(use_ray, address, note)``: Ray for an address, several local GPUs or
    several CPU workers; otherwise (or without Ray) serial, with a note on why."""
    from .ray_engine import ADDRESS_ENV, INSTALL_HINT, local_gpus, ray_installed

    address = args.ray or os.environ.get(ADDRESS_ENV) or None
    wanted = args.ray is not None or address is not None
    if args.serial:
        return False, None, None
    if not ray_installed():
        if address:  # a cluster was named: running here instead is not what was asked
            raise _NoRay(f"Ray is not installed, so the Ray cluster {address!r} cannot be used; {INSTALL_HINT}")
        note = f"Ray is not installed: running serially. For the parallel path: {INSTALL_HINT}"
        return False, None, note
    workers = args.workers or plan.options.workers
    if wanted or local_gpus() > 1 or (workers or 0) > 1:
        return True, address, None
    return False, None, None


def _pack_origin(args: argparse.Namespace, plan: Any) -> str:
    """Where the pack path came from, as an error names it."""
    if args.pack:
        return "argument --pack"
    if plan.options.pack:
        return f"{plan.path}: [options], field 'pack'"
    return "the default pack path (beside the plan; --pack or [options] pack chooses another)"


def run(args: argparse.Namespace) -> int:
    """Run the ``plan`` command; returns the exit status (0 ok, 1 a key failed, 2 a bad plan)."""
    from .plan import PlanError, device_problem, load_plan
    from .ray_engine import ADDRESS_ENV, ADDRESS_FORMS
    from .runner import (PlanInterrupted, PlanProgress, pack_problem, pick_device, run_serial, summary_table,
                         write_pack)

    if args.serial and args.workers is not None:
        print(f"flyautotune plan: error: argument --workers: {args.workers} workers are Ray's, but --serial runs "
              f"the plan in this process; give one of them", file=sys.stderr)
        return 2
    problem = device_problem(args.device) if args.device is not None else ""
    if problem:
        print(f"flyautotune plan: error: argument --device: {problem}", file=sys.stderr)
        return 2
    if pick_device(args.device) == "cpu":
        # Before validation imports the plugins' kernels: @triton.jit reads it when it decorates.
        use_triton_interpreter()
    try:
        plan = load_plan(args.plan)
    except PlanError as exc:
        print(f"flyautotune plan: error: {exc}", file=sys.stderr)
        return 2
    pack = args.pack or plan.pack_path()
    problem = pack_problem(pack)
    if problem:  # before any tuning: hours of winners must not end in a pack that cannot be written
        print(f"flyautotune plan: error: {_pack_origin(args, plan)}: cannot write the pack to {str(pack)!r}: "
              f"{problem}; accepted: a file in a folder that exists or can be made, and can be written",
              file=sys.stderr)
        return 2
    if args.check:
        for key in plan.keys:
            _say(key.label())
        _say(f"{_keys(len(plan.keys))}; the plan is valid")
        return 0
    try:
        use_ray, address, note = _engine(args, plan)
    except _NoRay as exc:
        print(f"flyautotune plan: error: argument --ray: {exc}", file=sys.stderr)
        return 2
    if note:
        print(f"flyautotune plan: {note}", file=sys.stderr)
    progress = PlanProgress(len(plan.keys))
    _say(f"plan {args.plan}: {_keys(len(plan.keys))}")
    try:
        if use_ray:
            from .ray_engine import RayConnectError, run_ray

            try:
                result = run_ray(plan, address=address, workers=args.workers, force=args.force, progress=progress)
            except RayConnectError as exc:
                origin = "argument --ray" if args.ray else ADDRESS_ENV
                hint = "" if exc.malformed else (
                    f"; accepted: a running Ray cluster's address: {ADDRESS_FORMS}; a cluster slow to answer gets "
                    f"longer with connect_timeout_s in [options] (now {plan.options.connect_timeout_s:g} s)")
                print(f"flyautotune plan: error: {origin}: {exc}{hint}", file=sys.stderr)
                return 2
        else:
            result = run_serial(plan, device=args.device, force=args.force, progress=progress)
    except PlanInterrupted as stop:
        return _interrupted(stop, args.pack)
    _say()
    _say(summary_table(result))
    if not result.entries() and os.path.exists(pack):
        # nothing tuned (every key failed, or no store took a winner): the pack there is kept, not emptied
        print(f"flyautotune plan: error: no winner to export; {pack} is left as it was", file=sys.stderr)
        return 1
    try:
        n = write_pack(result, pack)
    except OSError as exc:
        print(f"flyautotune plan: error: cannot write the pack {pack}: {exc}", file=sys.stderr)
        return 1
    _say(f"pack: {pack} ({n} winners)")
    failed = result.failed()
    return 1 if failed else 0


def _interrupted(stop: Any, pack: Optional[str]) -> int:
    """Ctrl-C: say what was kept; a ``--pack`` named for this run gets the finished keys' winners (the plan's
    own pack is left as it was: a partial pack must not replace a whole one). Returns 130, as for any Ctrl-C."""
    from .runner import write_pack

    result = stop.result
    kept = len(result.entries())
    print(f"flyautotune plan: interrupted after {len(result.results)} of {_keys(stop.total)}: {kept} winner"
          f"{'' if kept == 1 else 's'} kept in the store; run the plan again to finish (stored keys are looked "
          f"up, not searched)", file=sys.stderr, flush=True)
    if pack is None:
        print("flyautotune plan: the plan's pack is left as it was (--pack FILE writes the finished keys' "
              "winners on Ctrl-C)", file=sys.stderr)
    elif kept:
        try:
            n = write_pack(result, pack)
        except OSError as exc:
            print(f"flyautotune plan: error: cannot write the pack {pack}: {exc}", file=sys.stderr)
        else:
            _say(f"pack: {pack} ({n} winners of the finished keys; {stop.total - len(result.results)} keys not run)")
    else:
        print(f"flyautotune plan: no winner to export; {pack} is left as it was", file=sys.stderr)
    return 130


def main(argv: Optional[list] = None) -> int:
    """Stand-alone entry (``python -m flyautotune.scale.cli_plan PLAN``) until the command is wired."""
    parser = argparse.ArgumentParser(prog="flyautotune")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    return run(parser.parse_args(["plan", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    sys.exit(main())
