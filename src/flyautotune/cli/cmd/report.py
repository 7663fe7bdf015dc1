"""``flyautotune report ADOPTER --target T --shape MxN``: cross-compile every candidate, no GPU needed."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Optional

from ...progress import first_line
from ..common import (
    CommandError, UsageError, config_text, get_adopter, out, parse_dtype, parse_shape, plugin_manager, shape_text,
    short, table,
)


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="cross-compile every candidate for a GPU target and report its "
                                      "registers, spills, occupancy and binary hash (no GPU needed)")
    p.add_argument("adopter", metavar="ADOPTER", help="adopter name (see 'flyautotune plugins')")
    p.add_argument("--target", required=True, metavar="TARGET",
                   help="a target an installed backend plugin offers, e.g. gfx942 or sm_90 "
                        "(the error for an unknown one lists them)")
    p.add_argument("--shape", type=parse_shape, action="append", required=True, metavar="MxN",
                   help="input shape, e.g. 4096x8192; repeat for several shapes")
    p.add_argument("--dtype", type=parse_dtype, default="bf16", help="bf16 (default), fp16 or fp32")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    p.add_argument("--distinct", action="store_true",
                   help="exit 1 if two candidates of a shape build the same binary (the knobs that tell them apart "
                        "change nothing on the target; a search times both unless precompile= names builds)")


def _target(text: str) -> Any:
    from ...report import parse_target

    try:
        return parse_target(text, plugin_manager())
    except ValueError as exc:
        reason = str(exc).split(" is not a supported target", 1)[-1]
        raise UsageError(f"argument --target: {text!r} is not a supported target{reason} "
                         f"(see 'flyautotune report --help')") from None


def run(args: argparse.Namespace) -> None:
    from ...devices import triton_built_for_interpreter, triton_interprets
    from ...report import ReportError, candidate_configs, resource_report

    if triton_built_for_interpreter() and not triton_interprets():
        raise UsageError("flyautotune report cross-compiles for a GPU target, but this process imported Triton "
                         "while TRITON_INTERPRET was on (a CPU tune earlier in the same Python process, say), "
                         "so Triton's library is built for its interpreter until the process ends; run "
                         "'flyautotune report' in a new process")
    if triton_interprets():
        interp = os.environ.get("TRITON_INTERPRET", "")
        # Triton's own library functions (the combine of tl.sum, ...) are then built for its interpreter
        # at import, and every kernel that uses them fails to compile for a GPU target.
        raise UsageError(f"flyautotune report cross-compiles for a GPU target, but TRITON_INTERPRET={interp!r} "
                         f"is set in the environment (Triton's interpreter); unset it or set it to 0")
    target = _target(args.target)
    adopter = get_adopter(args.adopter)
    if adopter.compile_spec is None:
        raise UsageError(f"adopter {adopter.name!r} declares no compile_spec, so it cannot be cross-compiled "
                         f"for a report (see docs/write_adopter.md)")
    shapes = list(dict.fromkeys(args.shape))
    spaces = {shape: _space_on_meta(adopter, shape, args.dtype, target) for shape in shapes}
    for shape in shapes:
        if spaces[shape] is None:
            _check_host_memory(adopter, shape, args.dtype)
    out_json, twinned, unbuilt = [], [], []
    for i, shape in enumerate(shapes):
        try:
            configs = spaces[shape]
            if configs is None:  # meta could not evaluate it: the CPU does, without trying meta again
                configs = candidate_configs(adopter, shape, args.dtype, target, devices=("cpu",))
            rows = resource_report(adopter, shape, args.dtype, target, plugin_manager(), configs=configs)
        except ReportError as exc:
            raise CommandError(str(exc)) from exc
        except (TypeError, ValueError) as exc:
            raise UsageError(f"adopter {adopter.name!r} cannot build --shape {shape_text(shape)} --dtype "
                             f"{args.dtype}: {first_line(exc)}") from None
        except (MemoryError, RuntimeError) as exc:
            if not isinstance(exc, MemoryError) and not _is_allocation_error(exc):
                raise
            raise UsageError(f"argument --shape: {shape_text(shape)} is too large: building its "
                             f"{args.dtype} inputs on the CPU failed ({first_line(exc)}); use a smaller "
                             f"shape") from None
        if twins(rows):
            twinned.append(shape_text(shape))
        if not any(not r.error for r in rows):
            unbuilt.append(shape_text(shape))
        if args.json:
            out_json.append({"adopter": adopter.name, "shape": list(shape), "dtype": args.dtype,
                             "target": target.to_dict(), "candidates": [r.to_dict() for r in rows]})
            continue
        if i:
            out()
        print_report(adopter.name, shape, args.dtype, target, rows)
    if args.json:
        out(json.dumps(out_json, indent=2, default=repr))
    if unbuilt:  # a table of failures is no report: a script (an adopter's CI) must see it fail
        why = "each candidate's error above" if args.json else "the failed rows above"
        raise CommandError(f"no candidate of {', '.join(unbuilt)} {args.dtype} built for {target.arch} "
                           f"(see {why})")
    if args.distinct and twinned:
        where = "they share a binary_sha256 above" if args.json else "listed above, by what tells them apart"
        raise CommandError(f"--distinct: candidates of {', '.join(twinned)} {args.dtype} build the same binary on "
                           f"{target.arch} ({where})")


def twins(rows: list) -> dict:
    """``{sha256: [rows]}`` of the binaries that more than one built candidate compiled to."""
    by_digest: dict = {}
    for r in rows:
        if not r.error and r.binary_sha256:
            by_digest.setdefault(r.binary_sha256, []).append(r)
    return {digest: same for digest, same in by_digest.items() if len(same) > 1}


def _is_allocation_error(exc: BaseException) -> bool:
    text = str(exc)
    return any(s in text for s in ("can't allocate memory", "DefaultCPUAllocator", "out of memory"))


def _input_bytes(adopter: Any, shape: tuple, dtype: str) -> Optional[int]:
    """What the adopter's example inputs for ``shape`` take, built on torch's ``meta`` device (no memory):
    None where it cannot say (no torch, an example that does not build on ``meta``)."""
    try:
        import torch

        args, kwargs = adopter.example(shape, dtype, "meta")
    except Exception:  # noqa: BLE001 - the report itself says what is wrong with the inputs
        return None
    total = 0
    for value in [*args, *kwargs.values()]:
        if isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
    return total


def _host_memory() -> Optional[int]:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - no sysconf (Windows)
        return None


def _space_on_meta(adopter: Any, shape: tuple, dtype: str, target: Any) -> Optional[list]:
    """The candidates of ``shape`` evaluated on torch's ``meta`` device (no memory, so any shape), or None
    where the adopter's example, bind or configs cannot run there: then the CPU evaluates them."""
    from ...report import candidate_configs

    try:
        return candidate_configs(adopter, shape, dtype, target, devices=("meta",))
    except Exception:  # noqa: BLE001 - the CPU evaluation reports what is wrong
        return None


def _check_host_memory(adopter: Any, shape: tuple, dtype: str) -> None:
    """A report compiles, it runs nothing; but an adopter whose config space is computed from its inputs
    and cannot be evaluated on ``meta`` has them built on the CPU (``report.candidate_configs``), so a
    shape whose inputs cannot fit this machine's memory is refused before that allocation is tried."""
    from ...report import needs_inputs

    if not needs_inputs(adopter.tuner) or adopter.example is None:
        return
    need, have = _input_bytes(adopter, shape, dtype), _host_memory()
    if need is not None and have is not None and need > have:
        raise UsageError(f"argument --shape: {shape_text(shape)} is too large: its {dtype} inputs take {need} "
                         f"bytes, more than this machine's {have} bytes of memory, and report builds them on the "
                         f"CPU to evaluate the config space of adopter {adopter.name!r} (it cannot be evaluated "
                         f"on torch's meta device); use a smaller shape")


def print_report(name: str, shape: tuple, dtype: str, target: Any, rows: list) -> None:
    """One row per candidate; column titles in the backend's words (``ResourceRow.labels``)."""
    built = [r for r in rows if not r.error]
    labels = next((r.labels for r in built if r.labels), {})
    unit = next((r.occupancy_unit for r in built if r.occupancy_unit), "")
    with_sgprs = any(r.sgprs is not None for r in built)
    n = len(rows)
    out(f"{name} {shape_text(shape)} {dtype} compiled for {target.arch} "
        f"({n} candidate{'' if n == 1 else 's'}, no GPU used):")
    headers = ["config", "num_warps", labels.get("registers", "registers")] + \
        ([labels.get("sgprs", "SGPRs")] if with_sgprs else []) + \
        [labels.get("spills", "spills"), labels.get("shared_bytes", "shared bytes"),
         f"occupancy ({unit})" if unit else "occupancy", "binary sha256"]
    cells = []
    for r in rows:
        if r.error:
            cells.append([config_text(r.config), "failed: " + short(r.error, 80)])  # free text to the end
            continue
        occ = "-" if r.occupancy is None else f"{r.occupancy}/{r.occupancy_max}" if r.occupancy_max \
            else str(r.occupancy)
        row = [config_text(r.config), r.options.get("num_warps", "default"), r.registers]
        if with_sgprs:
            row.append(r.sgprs)
        row += [r.spills, r.shared_bytes, occ, (r.binary_sha256 or "-")[:12]]
        cells.append(row)
    out(table(headers, cells, right=tuple(range(1, len(headers) - 1))))
    distinct = len({r.binary_sha256 for r in built})
    out(f"{len(built)} of {len(rows)} candidates built {distinct} distinct binar{'y' if distinct == 1 else 'ies'}.")
    same_binary = twins(rows)
    if same_binary:  # one program under several configs: the knobs that tell them apart do nothing here
        out(f"Same binary (what differs between these configs changes nothing on {target.arch}); a search times "
            f"each, unless the adopter's precompile names its builds:")
        for digest, same in same_binary.items():
            out(f"  {digest[:12]}: {_what_differs([r.config for r in same])}")


def _what_differs(configs: list) -> str:
    """``VEC=8 | VEC=16 (both: BLOCK=64, ...)``: the names whose values tell ``configs`` apart, then the rest."""
    flat = [{**c.kwargs, **c.hints} for c in configs]
    names = sorted(set().union(*flat), key=str)
    differ = [n for n in names if len({repr(f.get(n)) for f in flat}) > 1]
    if not differ:  # configs equal by value (a pre_hook apart): say them whole
        return " | ".join(config_text(c) for c in configs)
    same = ", ".join(f"{n}={flat[0][n]}" for n in names if n not in differ and n in flat[0])
    alike = "both" if len(configs) == 2 else "all"
    return " | ".join(", ".join(f"{n}={f[n]}" if n in f else f"no {n}" for n in differ) for f in flat) + (
        f" ({alike}: {same})" if same else "")
