"""``flyautotune tune ADOPTER --shape MxN``: search an adopter's configs and store the winners."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
import time
from typing import Any, Iterator, Optional

from ...config import Config
from ...devices import CPU_ELEMENT_LIMIT, too_slow_on_cpu, use_triton_interpreter
from ...progress import first_line, is_skipped
from ...store.location import CACHE_DIR_ENV
from ..common import (
    CommandError, UsageError, config_text, get_adopter, out, parse_dtype, parse_shape,
    plugin_manager, safe, shape_text, short, store, store_problem, table,
)

log = logging.getLogger("flyautotune.cli")


#: Widest error text in the table's last column; the full text follows the table.
ERROR_CELL = 48


def add_parser(sub) -> None:
    p = sub.add_parser("tune", help="search an adopter's configs for one or more shapes and store the winners")
    p.add_argument("adopter", metavar="ADOPTER", help="adopter name (see 'flyautotune plugins')")
    p.add_argument("--shape", type=parse_shape, action="append", required=True, metavar="MxN",
                   help="input shape, e.g. 4096x8192; repeat for several shapes")
    p.add_argument("--dtype", type=parse_dtype, default="bf16", help="bf16 (default), fp16 or fp32")
    p.add_argument("--device", default=None,
                   help="torch device: cuda:0 (default when a GPU is visible) or cpu (Triton's interpreter)")
    p.add_argument("--force", action="store_true",
                   help="search again even when the store has a winner (as FLYAUTOTUNE=1 does)")
    p.add_argument("--allow-slow", action="store_true",
                   help=f"on the CPU, run shapes above {CPU_ELEMENT_LIMIT} elements (the interpreter may take "
                        f"many minutes)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the candidates' timings into this image")


def run(args: argparse.Namespace) -> None:
    from ...tuning.env import force_search

    device = pick_device(args.device)
    interpreted = device == "cpu"
    if interpreted:
        # The one place the command sets a variable: before any plugin imports its kernels,
        # because @triton.jit reads it when it decorates.
        use_triton_interpreter()
    adopter = get_adopter(args.adopter)  # an unknown name is the first thing to say
    if interpreted:
        _check_cpu_shapes(args.shape, args.allow_slow)
    if adopter.example is None:
        raise UsageError(f"adopter {adopter.name!r} cannot be tuned from the command line: it declares no "
                         f"example (see docs/write_adopter.md)")
    if args.plot:
        _check_plot_path(args.plot)
    # Before any search: a store that cannot take the winners keeps them only until the process ends.
    problem = store_problem()
    if problem:
        print(f"warning: {problem}: the winners of this run are kept in memory only and lost when it ends "
              f"(set {CACHE_DIR_ENV} to a folder you can write to keep them)", file=sys.stderr)
    if interpreted:
        from ...devices import default_device

        visible = default_device()
        gpu = f" (a GPU is visible: pass --device {visible} to use it)" if visible != "cpu" else ""
        out(f"No GPU in use: running on the CPU under Triton's interpreter (TRITON_INTERPRET=1): slow, and the "
            f"times below are interpreter times, not GPU times{gpu}.")
    force = args.force or force_search()
    panels = []
    for i, shape in enumerate(dict.fromkeys(args.shape)):  # the same shape twice only hits the first winner
        if i:
            out()
        panels.append(tune_shape(adopter, shape, args.dtype, device, force, interpreted, args.verbose))
    if args.plot:
        from ...plot import write_chart

        try:
            write_chart(args.plot, panels)
        except (OSError, ValueError) as exc:  # the winners are stored already: only the picture is lost
            raise CommandError(f"--plot: cannot write {args.plot!r}: {first_line(exc)} (the winners above are "
                               f"stored; 'flyautotune tune' again with --plot draws them)") from exc
        out()
        out(f"plot: {args.plot}")


def _check_cpu_shapes(shapes: list, allow_slow: bool) -> None:
    for shape in shapes:
        why = "" if allow_slow else too_slow_on_cpu(shape)
        if why:
            raise UsageError(f"argument --shape: {why}; use a GPU (--device cuda:0), a smaller shape, or "
                             f"--allow-slow")


def pick_device(requested: Optional[str]) -> str:
    """``cpu`` or ``<accelerator>:N``, checked against what torch's accelerator registry sees."""
    if requested is not None and requested.strip().lower() == "cpu":
        return "cpu"  # no torch import needed to know that
    from ...devices import accelerator_type, default_device, device_count

    if requested is None:
        return default_device()
    try:
        import torch
    except ImportError:
        raise UsageError(f"argument --device: {requested!r} needs torch, which is not installed; use --device cpu") \
            from None
    kind = accelerator_type()
    accepted = "cpu" + (f", {kind}, {kind}:N" if kind else "")
    try:
        dev = torch.device(requested)
    except (RuntimeError, ValueError, TypeError):
        raise UsageError(f"argument --device: {requested!r} is not a torch device; accepted: {accepted}") from None
    if dev.type == "cpu":
        return "cpu"
    if kind is None:
        raise UsageError(f"argument --device: {requested!r} but torch sees no accelerator; use --device cpu")
    if dev.type != kind:
        raise UsageError(f"argument --device: {requested!r} is a {dev.type} device; accepted: {accepted}")
    index = dev.index if dev.index is not None else 0
    count = device_count()
    if index >= count:
        raise UsageError(f"argument --device: {requested!r} but only {count} device(s) are visible "
                         f"({kind}:0..{kind}:{count - 1})")
    return f"{kind}:{index}"


def plot_formats() -> Optional[list]:
    """The file extensions ``--plot`` can write, without the dot: matplotlib's (``png``, ``svg``, ``pdf``, ...)
    where it is installed, else None (the built-in renderer writes PNG only)."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return None
    return sorted(FigureCanvasBase.get_supported_filetypes())


def _check_plot_path(path: str) -> None:
    """Refuse, before any search, a ``--plot`` file that could not be written: a missing or unwritable
    folder, a folder given as the file, or an extension the renderer does not write."""
    where = os.path.abspath(path)
    parent = os.path.dirname(where)
    if not os.path.isdir(parent):
        raise UsageError(f"argument --plot: the folder of {safe(path)!r} does not exist")
    if os.path.isdir(where):
        raise UsageError(f"argument --plot: {safe(path)!r} is a folder; give an image file such as chart.png")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"argument --plot: the folder of {safe(path)!r} is not writable")
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    formats = plot_formats()
    if formats is None:
        if ext != "png":
            raise UsageError(f"argument --plot: {safe(path)!r} is not a .png file; without matplotlib only PNG "
                             f"is written (pip install matplotlib for .svg, .pdf and other formats)")
    elif ext not in formats:
        what = f"has the extension .{safe(ext)}, which matplotlib does not write" if ext else "has no extension"
        raise UsageError(f"argument --plot: {safe(path)!r} {what}; accepted: "
                         f"{', '.join('.' + f for f in formats)}")


@contextlib.contextmanager
def receiving_events(receiver: Any, name: str) -> Iterator[None]:
    """``receiver`` gets every tuning event through the ``flyautotune_tuning_event`` hook inside the block."""
    pm = plugin_manager()
    pm.register(receiver, name=name)
    try:
        yield
    finally:
        pm.unregister(name=name)


def tune_shape(adopter: Any, shape: tuple, dtype: str, device: str, force: bool, interpreted: bool,
               verbose: int = 0):
    """Select (searching when needed) the config for one shape, print its table; returns a plot ``Panel``."""
    from ...plot import Bar, Panel
    from ...progress import Progress

    label = f"{adopter.name} {shape_text(shape)} {dtype}"
    where = f"{device}" + (" (Triton interpreter)" if interpreted else "")
    try:
        args, kwargs = adopter.example(shape, dtype, device)
        targs, tkwargs = adopter.bind(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"adopter {adopter.name!r} cannot build inputs for --shape {shape_text(shape)} "
                         f"--dtype {dtype}: {first_line(exc)}") from None
    progress = Progress(label)
    progress.begin(f"picking a config on {where}")
    tuner = adopter.tuner
    t0 = time.perf_counter()
    try:
        with receiving_events(progress, f"flyautotune.cli.progress.{id(progress)}"):
            selection = tuner.select(*targs, force=force, **tkwargs)
            if selection.source == "default":
                # A winner-less key runs the zero-search default; tuning means searching now.
                selection = tuner.select(*targs, force=True, **tkwargs)
    finally:
        progress.close()
    elapsed = time.perf_counter() - t0
    winner = selection.config.to_dict() if selection.config.pre_hook is None else repr(selection.config)
    stored_in = None
    source = selection.source
    decision = (selection.margin, selection.noise) if source == "search" else (None, None)
    if source == "search" and selection.timings:
        rows = [dict(t) for t in selection.timings]
        stored_in = _stored_in(store(), tuner.name, selection.key)
        note = f"searched {len(rows)} candidates in {elapsed:.1f} s"
    elif source in ("store", "memory"):
        entry = store().get(tuner.name, selection.key)
        rows = [dict(t) for t in entry.timings] if entry is not None and entry.timings else \
            [{"config": winner, "ms": None, "error": None}]
        _mark_default(tuner, targs, tkwargs, rows)  # stored timings do not say which row was the default
        note = "winner from the store (tuned earlier; --force searches again)"
        prov = entry.provenance if entry is not None and isinstance(entry.provenance, dict) else {}
        decision = (prov.get("margin"), prov.get("noise"))
    elif source == "pack":
        rows = [{"config": winner, "ms": None, "error": None}]
        note = "winner from a pack shipped with the adopter (--force searches on this machine)"
    else:  # one candidate fits: nothing was benchmarked
        rows = [{"config": winner, "error": None, **_time_once(adopter, args, kwargs, device)}]
        # A forced selection stores the only candidate as the key's winner (untimed); say what happened.
        the_store = store()
        entry = the_store.get(tuner.name, selection.key) if selection.key else None
        if entry is not None and _same(entry.config, winner):
            stored_in = _stored_in(the_store, tuner.name, selection.key)
            kept = "stored as the key's winner" if stored_in else "not stored"
        else:
            kept = "nothing stored"
        note = (f"only one candidate fits this shape on this backend: nothing to search, {kept}; "
                f"the time below is one end-to-end run of it, for reference")
    print_result(label, where, rows, winner, _gbytes(adopter, args, kwargs, interpreted), note, verbose)
    line = _vs_default(*decision)
    if line:
        out(line)
    if stored_in:
        out(f"winner stored in {stored_in}")
    elif stored_in is False:
        out("winner not stored: the store cannot take it (see the warning above), so it lasts until this "
            "process ends and the next one searches again")
    shared = _shared_parts([r["config"] for r in rows])
    return Panel(f"{label} on {where}", [
        Bar(_differing_text(r["config"], shared), r.get("ms"), _same(r["config"], winner))
        for r in _sorted_rows(rows)
    ])


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _vs_default(margin: Any, noise: Any) -> Optional[str]:
    """The line under the table on what the search decided against the default (a fresh search's, or the
    one a stored winner records), or None when it recorded none."""
    if not _number(margin):
        return None
    band = f"{noise:.1%}" if _number(noise) else "?"
    return (f"vs the default: the default was kept (no candidate beat it by more than the noise band, {band})"
            if margin == 0 else f"vs the default: {margin:.1%} faster, beyond the noise band of {band}")


def _mark_default(tuner: Any, args: tuple, kwargs: dict, rows: list) -> None:
    """Mark the row of the tuner's default for these arguments, as a search's own rows are marked."""
    from ...tuning.lookup import default_config

    try:
        default = default_config(tuner, tuner.sig.bind(args, kwargs))
    except Exception as exc:  # the mark is a courtesy: a default that cannot be built costs it, not the table
        log.debug("%s: no default to mark: %s", tuner.name, exc)
        return
    if default is not None:
        for r in rows:
            r["default"] = _same(r["config"], default.to_dict())


def _time_once(adopter: Any, args: tuple, kwargs: dict, device: str) -> dict:
    """The only candidate, timed end to end: a table row (``ms``, ``spread``, ``method``), or ``ms`` None."""
    import flyautotune as fat

    call = adopter.call()
    try:
        m = plugin_manager().hook.flyautotune_benchmark(
            fn=lambda: call(*args, **kwargs), setup=None, target=fat.target_for(device), stream=None,
            warmup=1, rep=5, rotations=[], cutoff_ms=None)
        m = fat.Measurement.coerce(m, who="the benchmark of the only candidate")
        return {"ms": m.ms, "spread": m.spread, "method": m.method or None}
    except Exception as exc:
        log.warning("%s: could not time the only candidate: %s", adopter.name, exc)
        return {"ms": None}


def _gbytes(adopter: Any, args: tuple, kwargs: dict, interpreted: bool) -> Optional[float]:
    if adopter.bytes_moved is None or interpreted:  # interpreter GB/s mean nothing
        return None
    try:
        return adopter.bytes_moved(*args, **kwargs) / 1e9
    except Exception as exc:  # a broken helper costs a column, not the tune
        log.warning("%s: bytes_moved failed (%s); showing relative speed", adopter.name, exc)
        return None


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)


def _sorted_rows(rows: list) -> list:
    return sorted(rows, key=lambda r: (r.get("ms") is None, r.get("ms") or 0.0))


def print_result(label: str, where: str, rows: list, winner: Any, gbytes: Optional[float], note: str,
                 verbose: int = 0) -> None:
    """The result table of one shape, fastest first; failed candidates' errors are cut to
    ``ERROR_CELL`` characters in the table and follow it in full (every line with ``-v``)."""
    rows = _sorted_rows(rows)
    shared = _shared_parts([r["config"] for r in rows])
    times = [r["ms"] for r in rows if r.get("ms") is not None]
    best = min(times) if times else None
    headers = ["", "config", "time (ms)", "±", "method"] + (["GB/s"] if gbytes is not None else []) + \
        ["speed vs best"]
    cells_rows, failed = [], []
    for r in rows:
        ms = r.get("ms")
        cells = ["*" if _same(r["config"], winner) else "",
                 _differing_text(r["config"], shared) + (" (default)" if r.get("default") else "")]
        if ms is None:
            cells.append("skipped" if is_skipped(r.get("error")) else "failed" if r.get("error") else "-")
            cells += ["-", "-"]
            cells += ["-"] if gbytes is not None else []
            cells.append(short(first_line(r["error"]), ERROR_CELL) if r.get("error") else "-")
            if r.get("error"):
                failed.append(r)
        else:
            cells.append(f"{ms:.4f}")
            spread = r.get("spread")
            cells.append(f"{spread:.1%}" if isinstance(spread, (int, float)) and not isinstance(spread, bool) else "-")
            cells.append(safe(str(r.get("method") or "-")))
            if gbytes is not None:
                cells.append(_fmt_gbs(gbytes / (ms / 1e3)) if ms > 0 else "-")
            cells.append(f"{best / ms:.2f}x" if ms > 0 and best else "-")
        cells_rows.append(cells)
    out(f"{label} on {where}: {note}")
    if shared:
        out(f"every candidate: {safe(', '.join(shared))}")
    out(table(headers, cells_rows, right=tuple(i for i in range(2, len(headers)) if i != 4)))
    if winner is not None:
        out(f"* winner: {safe(config_text(winner))}")
    long = [r for r in failed if verbose or short(first_line(r["error"]), ERROR_CELL) != str(r["error"]).strip()]
    for heading, skipped in (("failed candidates:", False), ("skipped candidates:", True)):
        listed = [r for r in long if is_skipped(r["error"]) == skipped]
        if listed:
            out(heading)
        for r in listed:
            text = str(r["error"]).strip() if verbose else first_line(r["error"])
            out(f"  {safe(config_text(r['config']))}: " + "\n    ".join(safe(line) for line in text.splitlines()))


def _config_parts(config: Any) -> Optional[list]:
    """``["BLOCK=64", "num_warps=4"]`` for a ``Config.to_dict()`` form, or None for anything else."""
    if not isinstance(config, dict):
        return None
    try:
        c = Config.from_dict(config)
    except (TypeError, ValueError):
        return None
    return [f"{k}={v}" for k, v in c.kwargs.items()] + [f"{k}={v}" for k, v in c.hints.items()]


def _stored_in(the_store: Any, tuner: str, key: str) -> Any:
    """The store's path when it holds the key's winner on disk; False when the winner only waits
    in memory (a read-only or locked store) or is missing."""
    if the_store.get(tuner, key) is None:
        return False
    waiting = getattr(the_store, "kept_in_memory", None)  # the SQLite store's; a plugin's store may lack it
    if waiting is not None and waiting(tuner, key):
        the_store.flush()  # one more try now: the command ends soon
        if waiting(tuner, key):
            return False
    return getattr(the_store, "path", None) or f"the {type(the_store).__name__} of a store plugin"


def _shared_parts(configs: list) -> list:
    """The ``name=value`` parts that every one of two or more configs has, in the first one's order: said
    once above the table, so its rows show what tells the candidates apart."""
    parts = [_config_parts(c) for c in configs]
    if len(parts) < 2 or any(p is None for p in parts):
        return []
    common = set(parts[0]).intersection(*parts[1:])
    return [p for p in parts[0] if p in common]


def _differing_text(config: Any, shared: list) -> str:
    parts = _config_parts(config) if shared else None
    if parts is None:
        return config_text(config)
    rest = [p for p in parts if p not in shared]
    return ", ".join(rest) if rest else "(only the shared values)"


def _fmt_gbs(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.1f}"
    return f"{value:.3g}" if value > 0 and math.isfinite(value) else "-"
