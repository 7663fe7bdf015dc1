"""The ``flyautotune`` command (also ``python -m flyautotune``).

Sub-commands: ``plugins``, ``tune``, ``show``, ``export``, ``import``,
``clear``, ``report``. Exit status: 0 on success, 2 for bad input (unknown
adopter, shape, dtype, target, device) with one line on stderr, 1 when the
work itself failed, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
import time
import traceback
import warnings
from typing import Any, Iterator, Optional, Sequence

from . import __version__

PROG = "flyautotune"
DTYPES = {
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
}
log = logging.getLogger("flyautotune.cli")


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit status 2."""


class CommandError(Exception):
    """The command could not do its work: one line on stderr, exit status 1."""


# -- argument types ---------------------------------------------------------------------


def parse_shape(text: str) -> tuple:
    """``"4096x8192"`` -> ``(4096, 8192)``; also ``"8x4x256"``."""
    parts = str(text).strip().lower().replace("×", "x").split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if not dims or any(d <= 0 for d in dims) or any(not p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a shape; expected positive integers joined by 'x', e.g. 4096x8192"
        )
    return dims


def parse_dtype(text: str) -> str:
    """``"bfloat16"`` -> ``"bf16"``."""
    name = DTYPES.get(str(text).strip().lower())
    if name is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a dtype; accepted: bf16, fp16, fp32")
    return name


def parse_target_arg(text: str):
    from .report import parse_target

    try:
        return parse_target(text)
    except ValueError:
        from .report import TARGET_NAMES

        raise argparse.ArgumentTypeError(
            f"{text!r} is not a supported target; accepted: {', '.join(TARGET_NAMES)}"
        ) from None


def shape_text(shape: tuple) -> str:
    return "x".join(str(d) for d in shape)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Tune GPU kernels with flyautotune, manage the tuning store and inspect plugins.",
        epilog="Environment: FLYAUTOTUNE_CACHE_DIR (store location), FLYAUTOTUNE=1 (force searches), "
               "FLYAUTOTUNE_LOG=info|debug (log messages), FLYAUTOTUNE_EVENT_LOG=FILE (JSON-lines events), "
               "FLYAUTOTUNE_DISABLE_PLUGINS=a,b.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log info (-v) or debug (-vv) messages to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("plugins", help="backends and adopters found, and plugins that failed to load")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")

    p = sub.add_parser("tune", help="search an adopter's configs for one or more shapes and store the winners")
    p.add_argument("adopter", metavar="ADOPTER", help="adopter name (see 'flyautotune plugins')")
    p.add_argument("--shape", type=parse_shape, action="append", required=True, metavar="MxN",
                   help="input shape, e.g. 4096x8192; repeat for several shapes")
    p.add_argument("--dtype", type=parse_dtype, default="bf16", help="bf16 (default), fp16 or fp32")
    p.add_argument("--device", default=None,
                   help="torch device: cuda:0 (default when a GPU is visible) or cpu (Triton's interpreter)")
    p.add_argument("--force", action="store_true",
                   help="search again even when the store has a winner (sets FLYAUTOTUNE=1 for the run)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the candidates' timings into this image")

    p = sub.add_parser("show", help="list the winners in the tuning store")
    p.add_argument("adopter", metavar="ADOPTER", nargs="?", help="only this adopter (or tuner name)")
    p.add_argument("--json", action="store_true", help="print the entries as a JSON pack")

    p = sub.add_parser("export", help="write the store's winners to a JSON pack")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--adopter", metavar="ADOPTER", help="only this adopter (or tuner name)")

    p = sub.add_parser("import", help="merge a JSON pack's winners into the store")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--keep", action="store_true", help="keep the store's own winner where both have one")

    p = sub.add_parser("clear", help="delete winners (and their timings) from the store")
    p.add_argument("adopter", metavar="ADOPTER", nargs="?", help="only this adopter (or tuner name)")

    p = sub.add_parser("report", help="cross-compile every candidate for a GPU target and report its "
                                      "registers, spills, occupancy and binary hash (no GPU needed)")
    p.add_argument("adopter", metavar="ADOPTER")
    p.add_argument("--target", type=parse_target_arg, required=True, metavar="TARGET",
                   help="gfx942, gfx950, gfx90a, sm_90, sm_89, sm_86 or sm_80")
    p.add_argument("--shape", type=parse_shape, action="append", required=True, metavar="MxN")
    p.add_argument("--dtype", type=parse_dtype, default="bf16")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    return parser


# -- entry point ---------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        _error(str(exc))
        return 2
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    _setup_logging(args.verbose)
    # A Triton notice about its next release, printed on every compile: noise for this command.
    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION is unset")
    handler = COMMANDS[args.command]
    try:
        handler(args)
    except UsageError as exc:
        _error(str(exc))
        return 2
    except CommandError as exc:
        _error(str(exc))
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # keep the interpreter from failing on exit
        return 1
    except Exception as exc:
        if logging.getLogger("flyautotune").isEnabledFor(logging.DEBUG):
            traceback.print_exc()
        _error(f"{type(exc).__name__}: {_first_line(str(exc))} (FLYAUTOTUNE_LOG=debug shows the traceback)")
        return 1
    return 0


def _error(message: str) -> None:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def _setup_logging(verbose: int) -> None:
    from .logs import configure_from_env

    logger = logging.getLogger("flyautotune")
    if verbose:
        configure_from_env("debug" if verbose > 1 else "info")
    elif not logger.handlers:
        # FLYAUTOTUNE_LOG unset (the import configures it otherwise): warnings still reach the
        # user, one plain line each.
        handler = _LineSafeHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
        handler.setLevel(logging.WARNING)
        logger.addHandler(handler)


class _LineSafeHandler(logging.StreamHandler):
    """On a terminal, clear the live progress line before a message, so they never share a line."""

    def emit(self, record: logging.LogRecord) -> None:
        isatty = getattr(self.stream, "isatty", None)
        if isatty is not None and isatty():
            with contextlib.suppress(OSError, ValueError):
                self.stream.write("\r\x1b[K")
        super().emit(record)


# -- shared helpers -------------------------------------------------------------------


def _plugin_manager():
    from .plugins import PluginLoadError, plugin_manager

    try:
        return plugin_manager()
    except PluginLoadError as exc:
        raise CommandError(f"a plugin failed validation: {exc}") from exc


def _adopter(name: str):
    pm = _plugin_manager()
    try:
        return pm.get_adopter(name)
    except KeyError:
        known = ", ".join(pm.adopter_registry.names()) or "none (install an adopter plugin)"
        raise UsageError(f"unknown adopter {name!r}; registered adopters: {known}") from None


def _store():
    from .store import get_store

    return get_store()


def _config_text(config: Any) -> str:
    from .progress import config_text

    return config_text(config)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> str:
    cells = [[str(h) for h in headers]] + [[("" if c is None else str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


@contextlib.contextmanager
def _env(name: str, value: Optional[str]) -> Iterator[None]:
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _tuner_names(name: str, store_tuners: Sequence[str]) -> list:
    """The store tuner names an ADOPTER argument selects (a tuner name works too)."""
    if name in store_tuners:
        return [name]
    pm = _plugin_manager()
    try:
        adopter = pm.get_adopter(name)
    except KeyError:
        known = ", ".join(pm.adopter_registry.names()) or "none"
        tuners = ", ".join(store_tuners) or "none"
        raise UsageError(
            f"unknown adopter {name!r}; registered adopters: {known}; tuners in the store: {tuners}"
        ) from None
    names = {adopter.name}
    tuned_name = getattr(adopter.entry, "name", None)
    if isinstance(tuned_name, str):
        names.add(tuned_name)
    return sorted(names)


def _store_tuners() -> list:
    from .store import StoreError

    try:
        return sorted({e.tuner for e in _store().entries()})
    except StoreError as exc:
        raise CommandError(str(exc)) from exc


# -- plugins ------------------------------------------------------------------------------


def cmd_plugins(args: argparse.Namespace) -> None:
    pm = _plugin_manager()
    plugins = []
    for name, info in sorted(pm.plugin_infos.items(), key=lambda kv: (kv[1].builtin, kv[0])):
        plugin = pm.get_plugin(name)
        hooks = sorted(c.name.replace("flyautotune_", "") for c in (pm.get_hookcallers(plugin) or ()))
        plugins.append({
            "name": name, "distribution": info.distribution, "version": info.version,
            "module": info.module, "builtin": info.builtin, "hooks": hooks,
            "backend": "target" in hooks,
        })
    adopters = [
        {"name": a.name, "distribution": a.distribution, "description": a.description,
         "tunable": a.entry is not None and a.example is not None, "report": a.compile_spec is not None}
        for a in pm.adopters().values()
    ]
    failures = [
        {"name": f.name, "distribution": f.distribution, "version": f.version, "error": f.error}
        for f in sorted(pm.load_failures.values(), key=lambda f: f.name)
    ]
    if args.json:
        _out(json.dumps({"plugins": plugins, "adopters": adopters, "failures": failures,
                         "disabled": list(pm.disabled)}, indent=2))
        return
    _out("Plugins:")
    rows = [[p["name"], "backend" if p["backend"] else ("adopters" if "register_adopters" in p["hooks"] else "hooks"),
             (p["distribution"] or "-") + (" (built-in)" if p["builtin"] else ""), p["version"] or "-",
             ", ".join(p["hooks"])] for p in plugins]
    _out(_indent(_table(["name", "kind", "distribution", "version", "hooks"], rows)))
    _out()
    _out("Adopters:")
    if adopters:
        rows = [[a["name"], a["distribution"] or "in-process register()", _short(a["description"], 60)]
                for a in adopters]
        _out(_indent(_table(["name", "registered by", "description"], rows)))
    else:
        _out("  none (pip install an adopter such as flyautotune-rmsnorm, or see docs/write_adopter.md)")
    if failures:
        _out()
        _out("Failed to load:")
        rows = [[f["name"], f"{f['distribution']} {f['version']}", f["error"]] for f in failures]
        _out(_indent(_table(["name", "distribution", "error"], rows)))
    if pm.disabled:
        _out()
        _out(f"Disabled by FLYAUTOTUNE_DISABLE_PLUGINS: {', '.join(pm.disabled)}")


def _indent(text: str, n: int = 2) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


# -- tune -------------------------------------------------------------------------------------


def _pick_device(requested: Optional[str]) -> str:
    if requested is not None and requested.strip().lower() == "cpu":
        return "cpu"  # no torch import needed to know that
    try:
        import torch
    except ImportError:
        torch = None
    if requested is None:
        if torch is not None and torch.cuda.is_available():
            return "cuda:0"
        return "cpu"
    if torch is None:
        raise UsageError(f"argument --device: {requested!r} needs torch, which is not installed; use --device cpu")
    try:
        dev = torch.device(requested)
    except (RuntimeError, ValueError, TypeError):
        raise UsageError(f"argument --device: {requested!r} is not a torch device; accepted: cpu, cuda, cuda:N") \
            from None
    if dev.type == "cpu":
        return "cpu"
    if dev.type != "cuda":
        raise UsageError(f"argument --device: {requested!r} is a {dev.type} device; accepted: cpu, cuda, cuda:N")
    if not torch.cuda.is_available():
        raise UsageError(f"argument --device: {requested!r} but no GPU is visible "
                         f"(torch.cuda.is_available() is False); use --device cpu")
    index = dev.index if dev.index is not None else 0
    count = torch.cuda.device_count()
    if index >= count:
        raise UsageError(f"argument --device: {requested!r} but only {count} GPU(s) are visible (cuda:0..cuda:{count - 1})")
    return f"cuda:{index}"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


class _Recorder:
    """Collects the events of one tune and forwards them to the progress display."""

    def __init__(self, progress: Any) -> None:
        self.events: list = []
        self.progress = progress

    def __call__(self, event: dict) -> None:
        self.events.append(event)
        self.progress(event)

    def outcome(self) -> tuple:
        """``(source, event)``: ``("search", search_end)``, ``("single", select)`` for a lone
        candidate, ``(select source, select)`` or ``(None, None)``."""
        for e in reversed(self.events):
            if e.get("event") == "search_end":
                return "search", e
        for e in reversed(self.events):
            if e.get("event") == "select":
                # a "search" select without search_end: one candidate, nothing benchmarked
                return ("single" if e.get("source") == "search" else e.get("source")), e
        return None, None


def cmd_tune(args: argparse.Namespace) -> None:
    import flyautotune as fat

    from .progress import Progress

    device = _pick_device(args.device)
    interpreted = device == "cpu"
    if interpreted:
        # Before any plugin imports its kernels: @triton.jit reads this when it decorates.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    adopter = _adopter(args.adopter)
    if adopter.entry is None or adopter.example is None:
        missing = " and ".join(n for n, v in (("entry", adopter.entry), ("example", adopter.example)) if v is None)
        raise UsageError(f"adopter {adopter.name!r} cannot be tuned from the command line: it declares no {missing} "
                         f"(see docs/write_adopter.md)")
    if args.plot:
        _check_plot_path(args.plot)
    if interpreted:
        gpu = ""
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            gpu = " (a GPU is visible: pass --device cuda:0 to use it)"
        _out(f"No GPU in use: running on the CPU under Triton's interpreter (TRITON_INTERPRET=1): slow, and the "
             f"times below are interpreter times, not GPU times{gpu}.")
    shapes = list(dict.fromkeys(args.shape))  # the same shape twice would only hit the first winner
    panels = []
    for i, shape in enumerate(shapes):
        if i:
            _out()
        result = _tune_shape(fat, adopter, shape, args.dtype, device, args.force, interpreted, Progress)
        panels.append(result)
    if args.plot:
        from .plot import write_chart

        try:
            write_chart(args.plot, panels)
        except OSError as exc:
            raise CommandError(f"--plot: cannot write {args.plot!r}: {exc}") from exc
        _out()
        _out(f"plot: {args.plot}")


def _check_plot_path(path: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"argument --plot: the folder of {path!r} does not exist")
    if not path.lower().endswith(".png"):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError(f"argument --plot: {path!r} is not a .png file; without matplotlib only PNG "
                             f"is written (pip install matplotlib for other formats)") from None


def _tune_shape(fat: Any, adopter: Any, shape: tuple, dtype: str, device: str, force: bool,
                interpreted: bool, progress_cls: Any):
    from .plot import Bar, Panel
    from .report import watch_tuners

    label = f"{adopter.name} {shape_text(shape)} {dtype}"
    where = f"{device}" + (" (Triton interpreter)" if interpreted else "")
    try:
        args, kwargs = adopter.example(shape, dtype, device)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"adopter {adopter.name!r} cannot build inputs for --shape {shape_text(shape)} "
                         f"--dtype {dtype}: {_first_line(str(exc))}") from None
    progress = progress_cls(label)
    recorder = _Recorder(progress)
    entry = adopter.entry

    tuners: list = []

    def call(forced: bool) -> tuple:
        recorder.events.clear()
        with _env("FLYAUTOTUNE", "1" if forced else None), watch_tuners() as seen:
            entry(*args, **kwargs)
        _sync(device)
        tuners[:] = seen
        return recorder.outcome()

    fat.add_listener(recorder)
    t0 = time.perf_counter()
    try:
        source, event = call(force)
        if source == "default":
            # A winner-less key runs the zero-search default; tuning means searching now.
            source, event = call(True)
    finally:
        fat.remove_listener(recorder)
        progress.close()
    elapsed = time.perf_counter() - t0

    gbytes = None
    if adopter.bytes_moved is not None and not interpreted:  # interpreter GB/s mean nothing
        try:
            gbytes = adopter.bytes_moved(*args, **kwargs) / 1e9
        except Exception as exc:  # a broken helper costs a column, not the tune
            log.warning("%s: bytes_moved failed (%s); showing relative speed", adopter.name, exc)
    note = ""
    stored_in = None
    if source == "search":
        rows = [dict(t) for t in event.get("candidates") or ()]
        winner = event.get("winner")
        store = _store()
        if store.get(event["tuner"], event["key"]) is not None:
            stored_in = store.path
        else:
            log.warning("%s: the winner was not stored (see the store warning above); the next process "
                        "will search again", adopter.name)
        note = f"searched {len(rows)} candidates in {event.get('duration_s', elapsed):.1f} s"
    elif source == "store":
        entry_ = _store().get(event["tuner"], event["key"])
        winner = event.get("config")
        rows = [dict(t) for t in entry_.timings] if entry_ is not None and entry_.timings else \
            [{"config": winner, "ms": None, "error": None}]
        note = "winner from the store (tuned earlier; --force searches again)"
    elif source == "pack":
        winner = event.get("config")
        rows = [{"config": winner, "ms": None, "error": None}]
        note = "winner from a pack shipped with the adopter (--force searches on this machine)"
    else:
        winner, rows, note = _single_candidate(fat, adopter, event, tuners, args, kwargs, device)
    _print_result(label, where, rows, winner, gbytes, note)
    if stored_in is not None:
        _out(f"winner stored in {stored_in}")
    return Panel(f"{label} on {where}", [
        Bar(_config_text(r["config"]), r.get("ms"), _same(r["config"], winner)) for r in _sorted_rows(rows)
    ])


def _single_candidate(fat: Any, adopter: Any, event: Optional[dict], tuners: list, args: tuple, kwargs: dict,
                      device: str) -> tuple:
    """One config fits this shape: nothing was searched; time it here so the table has a number."""
    config = event.get("config") if event else None
    if config is None and tuners:
        last = getattr(tuners[-1][0], "last_config", None)
        if last is not None:
            config = last.to_dict() if last.pre_hook is None else repr(last)
    ms = None
    try:
        target = fat.target_for(device)
        ms = _plugin_manager().hook.flyautotune_benchmark(
            fn=lambda: adopter.entry(*args, **kwargs), setup=None, target=target, stream=None, warmup=1, rep=5)
    except Exception as exc:
        log.warning("%s: could not time the only candidate: %s", adopter.name, exc)
    rows = [{"config": config if config is not None else "(the adopter's only config)", "ms": ms, "error": None}]
    note = ("only one candidate fits this shape on this backend: nothing to search, nothing stored "
            "(timed here, end to end)")
    return config, rows, note


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)


def _sorted_rows(rows: list) -> list:
    return sorted(rows, key=lambda r: (r.get("ms") is None, r.get("ms") or 0.0))


def _print_result(label: str, where: str, rows: list, winner: Any, gbytes: Optional[float], note: str) -> None:
    rows = _sorted_rows(rows)
    times = [r["ms"] for r in rows if r.get("ms") is not None]
    best = min(times) if times else None
    headers = ["", "config", "time (ms)"] + (["GB/s"] if gbytes is not None else []) + ["speed vs best"]
    table = []
    for r in rows:
        ms = r.get("ms")
        cells = ["*" if _same(r["config"], winner) else "", _config_text(r["config"])]
        if ms is None:
            cells.append("failed" if r.get("error") else "-")
            cells += ["-"] if gbytes is not None else []
            cells.append(_short(r["error"], 70) if r.get("error") else "-")
        else:
            cells.append(f"{ms:.4f}")
            if gbytes is not None:
                cells.append(_fmt_gbs(gbytes / (ms / 1e3)) if ms > 0 else "-")
            cells.append(f"{best / ms:.2f}x" if ms > 0 and best else "-")
        table.append(cells)
    _out(f"{label} on {where}: {note}")
    _out(_table(headers, table, right=tuple(range(2, len(headers)))))
    if winner is not None:
        _out(f"* winner: {_config_text(winner)}")


def _fmt_gbs(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.1f}"
    return f"{value:.3g}" if value > 0 and math.isfinite(value) else "-"


# -- store commands --------------------------------------------------------------------------


def _entries(name: Optional[str]) -> list:
    from .store import StoreError

    store = _store()
    try:
        entries = store.entries()
    except StoreError as exc:
        raise CommandError(str(exc)) from exc
    if name is None:
        return entries
    tuners = set(_tuner_names(name, sorted({e.tuner for e in entries})))
    return [e for e in entries if e.tuner in tuners]


def _key_text(key: str) -> tuple:
    """``("M=4 N=256 dtype=bf16", "cpu/x86_64")`` from a key's canonical JSON."""
    try:
        kd = json.loads(key)
    except ValueError:
        return _short(key, 40), "-"
    args = kd.get("args") or {}
    parts = [f"{k}={_value_text(v)}" for k, v in sorted(args.items())]
    if not parts:
        parts = [f"{n}:{d.replace('torch.', '')}" for n, d in sorted((kd.get("dtypes") or {}).items())]
    target = kd.get("target") or {}
    where = f"{target.get('backend', '?')}/{target.get('arch', '?')}" if target else "-"
    return " ".join(parts) or "-", where


def _value_text(v: Any) -> str:
    if isinstance(v, list):
        return "x".join(str(x) for x in v)
    return str(v)


def cmd_show(args: argparse.Namespace) -> None:
    from .store import dump_pack

    entries = _entries(args.adopter)
    if args.json:
        sys.stdout.write(dump_pack(entries))
        return
    store = _store()
    what = f" for {args.adopter}" if args.adopter else ""
    if not entries:
        _out(f"No tuned entries{what} in {store.path}.")
        return
    _out(f"{len(entries)} tuned entr{'y' if len(entries) == 1 else 'ies'}{what} in {store.path}:")
    rows = []
    for e in entries:
        key, where = _key_text(e.key)
        times = [t["ms"] for t in e.timings if t.get("ms") is not None]
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.created)) if e.created else "-"
        rows.append([e.tuner, key, where, _config_text(e.config), f"{min(times):.4f}" if times else "-",
                     len(e.timings), when])
    _out(_table(["tuner", "key", "target", "winner", "best ms", "candidates", "tuned"], rows, right=(4, 5)))


def cmd_export(args: argparse.Namespace) -> None:
    from .store import dump_pack

    entries = _entries(args.adopter)
    parent = os.path.dirname(os.path.abspath(args.file))
    if not os.path.isdir(parent):
        raise UsageError(f"argument FILE: the folder of {args.file!r} does not exist")
    try:
        _write_atomic(args.file, dump_pack(entries))
    except OSError as exc:
        raise CommandError(f"cannot write {args.file!r}: {exc}") from exc
    _out(f"exported {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} to {args.file}")


def _write_atomic(path: str, text: str) -> None:
    # A reader (or a crash) never sees half a pack: write aside, then rename over.
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def cmd_import(args: argparse.Namespace) -> None:
    from .store import PackError, StoreError

    if not os.path.isfile(args.file):
        raise UsageError(f"argument FILE: {args.file!r} does not exist or is not a file")
    store = _store()
    try:
        n = store.import_pack(args.file, overwrite=not args.keep)
    except PackError as exc:
        raise CommandError(str(exc)) from exc
    except StoreError as exc:
        raise CommandError(str(exc)) from exc
    _out(f"imported {n} entr{'y' if n == 1 else 'ies'} from {args.file} into {store.path}")


def cmd_clear(args: argparse.Namespace) -> None:
    from .store import StoreError

    store = _store()
    try:
        if args.adopter is None:
            n = store.clear()
        else:
            n = 0
            for tuner in _tuner_names(args.adopter, _store_tuners()):
                n += store.clear(tuner)
    except StoreError as exc:
        raise CommandError(str(exc)) from exc
    what = f" of {args.adopter}" if args.adopter else ""
    _out(f"removed {n} entr{'y' if n == 1 else 'ies'}{what} from {store.path}")


# -- report ---------------------------------------------------------------------------------


def cmd_report(args: argparse.Namespace) -> None:
    from .report import ReportError, resource_report

    adopter = _adopter(args.adopter)
    if adopter.compile_spec is None:
        raise UsageError(f"adopter {adopter.name!r} declares no compile_spec, so it cannot be cross-compiled "
                         f"for a report (see docs/write_adopter.md)")
    target = args.target
    out_json = []
    for i, shape in enumerate(dict.fromkeys(args.shape)):
        try:
            rows = resource_report(adopter, shape, args.dtype, target)
        except ReportError as exc:
            raise CommandError(str(exc)) from exc
        except (TypeError, ValueError) as exc:
            raise UsageError(f"adopter {adopter.name!r} cannot build --shape {shape_text(shape)} --dtype "
                             f"{args.dtype}: {_first_line(str(exc))}") from None
        if args.json:
            out_json.append({"adopter": adopter.name, "shape": list(shape), "dtype": args.dtype,
                             "target": target.to_dict(), "candidates": [r.to_dict() for r in rows]})
            continue
        if i:
            _out()
        _print_report(adopter.name, shape, args.dtype, target, rows)
    if args.json:
        _out(json.dumps(out_json, indent=2, default=repr))


def _print_report(name: str, shape: tuple, dtype: str, target: Any, rows: list) -> None:
    amd = target.backend == "rocm"
    unit = "waves/SIMD" if amd else "warps/SM"
    n = len(rows)
    _out(f"{name} {shape_text(shape)} {dtype} compiled for {target.arch} "
         f"({n} candidate{'' if n == 1 else 's'}, no GPU used):")
    headers = ["config", "num_warps", "VGPRs" if amd else "registers"] + (["SGPRs"] if amd else []) + [
        "spills" if amd else "spill bytes", "LDS bytes" if amd else "shared bytes", f"occupancy ({unit})",
        "binary sha256"]
    table = []
    for r in rows:
        if r.error:
            table.append([_config_text(r.config), "", "failed: " + _short(r.error, 80)])
            continue
        occ = "-" if r.occupancy is None else f"{r.occupancy}/{r.occupancy_max}" if r.occupancy_max else str(r.occupancy)
        cells = [_config_text(r.config), r.options.get("num_warps", "default"), r.registers]
        if amd:
            cells.append(r.sgprs)
        cells += [r.spills, r.shared_bytes, occ, (r.binary_sha256 or "-")[:12]]
        table.append(cells)
    width = len(headers)
    table = [row + [""] * (width - len(row)) for row in table]
    _out(_table(headers, table, right=tuple(range(1, width - 1))))
    built = [r for r in rows if not r.error]
    distinct = len({r.binary_sha256 for r in built})
    _out(f"{len(built)} of {len(rows)} candidates built {distinct} distinct binar{'y' if distinct == 1 else 'ies'}.")


COMMANDS = {
    "plugins": cmd_plugins,
    "tune": cmd_tune,
    "show": cmd_show,
    "export": cmd_export,
    "import": cmd_import,
    "clear": cmd_clear,
    "report": cmd_report,
}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
