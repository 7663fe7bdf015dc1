"""What every sub-command shares: errors, argument types, output and the store/adopter lookups."""

from __future__ import annotations

import argparse
import os
import re
import sys
import unicodedata
from typing import Any, Optional, Sequence

PROG = "flyautotune"
DTYPES = {
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
}


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


def shape_text(shape: tuple) -> str:
    return "x".join(str(d) for d in shape)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit status 2."""

    def parse_known_args(self, args: Optional[Sequence[str]] = None, namespace: Any = None):  # type: ignore[override]
        # Kept for error(): argparse's message does not say which value it could not take.
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self._dash_value(message) or message} (see '{self.prog} --help')")

    def _dash_value(self, message: str) -> Optional[str]:
        """For argparse's "argument --shape: expected one argument" where the value was there but starts
        with ``-`` (``--shape -4x64``, read as an option): the message the value itself earns, or how to
        pass it (``--shape=-4x64``). None for any other message."""
        m = re.fullmatch(r"argument (\S+): expected one argument", message)
        argv = getattr(self, "_argv", None)
        if m is None or not argv:
            return None
        names = m.group(1).split("/")
        action = next((a for a in self._actions if set(a.option_strings) & set(names)), None)
        if action is None:
            return None
        longs = [n for n in action.option_strings if n.startswith("--")]
        for i, token in enumerate(argv[:-1]):
            if token == "--":
                break
            if not (token in action.option_strings or (len(token) > 2 and any(n.startswith(token) for n in longs))):
                continue
            value = argv[i + 1]
            if not value.startswith("-") or any(o.startswith(value) for o in self._option_string_actions):
                continue  # a real option follows: the value is missing, as argparse says
            name = max(action.option_strings, key=len)
            convert = self._registry_get("type", action.type, action.type)
            if callable(convert):
                try:
                    convert(value)
                except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
                    return f"argument {name}: {exc}"
            return (f"argument {name}: {safe(value)!r} starts with '-', so it was read as an option; "
                    f"write {name}={safe(value)} to pass it as the value")
        return None


# -- output -----------------------------------------------------------------------------

# Bidirectional overrides reorder what a terminal shows: escape them like control characters.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def safe(text: Any) -> str:
    """``text`` fit for a terminal: control characters, escape sequences, bidirectional
    overrides and lone surrogates become visible ``\\x1b``-style escapes."""
    s = str(text)
    if s.isprintable():
        return s
    out = []
    for ch in s:
        if ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cs"):
            o = ord(ch)
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
        else:
            out.append(ch)
    return "".join(out)


def short(text: Any, n: int) -> str:
    """``text`` on one line, cut to ``n`` characters with ``...``."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """Aligned columns; every cell goes through :func:`safe`. A row shorter than ``headers`` ends in free
    text (a failure, say): its last cell runs on from its column and sets no column's width."""
    n = len(headers)
    cells = [[safe(h) for h in headers]] + [[("" if c is None else safe(c)) for c in r] for r in rows]
    columns = [r if len(r) >= n else r[:-1] for r in cells]  # a short row's last cell sets no width
    widths = [max(len(r[i]) for r in columns if i < len(r)) for i in range(n)]
    lines = []
    for r in cells:
        free = len(r) < n
        parts = [c if free and i == len(r) - 1 else c.rjust(widths[i]) if i in right else c.ljust(widths[i])
                 for i, c in enumerate(r)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def indent(text: str, n: int = 2) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def plural(n: int, one: str = "entry", many: str = "entries") -> str:
    return f"{n} {one if n == 1 else many}"


def config_text(config: Any) -> str:
    from ..progress import config_text as text

    return text(config)


# -- lookups ----------------------------------------------------------------------------


def plugin_manager():
    from ..plugins import PluginLoadError, plugin_manager as pm

    try:
        return pm()
    except PluginLoadError as exc:
        raise CommandError(f"a plugin failed validation: {exc}") from exc


def get_adopter(name: str):
    from ..progress import first_line

    pm = plugin_manager()
    try:
        return pm.get_adopter(name)
    except KeyError:
        known = ", ".join(pm.adopter_registry.names()) or "none (install an adopter plugin)"
        failed = "; ".join(f"{safe(f.name)!r} from {safe(f.distribution or '?')} ({safe(first_line(f.error))})"
                           for f in pm.load_failures.values())
        hint = f"; plugins that failed to load, one of which may register it: {failed}" if failed else ""
        off = [n for n in pm.disabled if n not in pm.unknown_disabled]
        if off:
            from ..plugins import DISABLE_ENV

            hint += f"; {DISABLE_ENV} disables {', '.join(repr(safe(n)) for n in off)}, which may register it"
        raise UsageError(f"unknown adopter {safe(name)!r}; registered adopters: {known}{hint}") from None


def store():
    """The store the plugins provide (``flyautotune_store``): the built-in SQLite one unless replaced."""
    from ..plugins import plugin_manager

    found = plugin_manager().hook.flyautotune_store()
    if found is None:
        raise CommandError("no flyautotune_store plugin provides a store (is flyautotune.store disabled?)")
    return found


def folder_text(env: str, directory: Any, what: str) -> str:
    """Who chose ``directory``, for a message: ``ENV='...'`` where the variable ``env`` set it, else
    ``what`` and the folder with a hint at the variable."""
    return _setting(env, directory) or f"{what} {safe(str(directory))!r} (the default; {env} moves it)"


def _setting(env: str, directory: Any) -> str:
    """``ENV='...'`` where the variable ``env`` names ``directory``, else ``""``."""
    value = os.environ.get(env)
    if value and os.path.realpath(os.path.expanduser(value)) == os.path.realpath(str(directory)):
        return f"{env}={safe(value)!r}"
    return ""


def store_error_text(the_store: Any, exc: BaseException) -> str:
    """A store's error (it names the file), with the ``FLYAUTOTUNE_CACHE_DIR`` setting that chose it."""
    from ..store.location import CACHE_DIR_ENV

    directory = getattr(the_store, "directory", None)
    setting = _setting(CACHE_DIR_ENV, directory) if directory is not None else ""
    return f"{exc} ({setting})" if setting else str(exc)


def _store_folder_problem(write: bool) -> tuple:
    """``(store, why)``: why the built-in SQLite store's folder cannot serve (read only, or ``write``), naming
    ``FLYAUTOTUNE_CACHE_DIR`` where it chose the folder; ``""`` where it can, or for another plugin's store."""
    from ..store import TuningStore
    from ..store.location import CACHE_DIR_ENV, store_dir_problem

    the_store = store()
    if not isinstance(the_store, TuningStore):  # another plugin's store: its own business
        return the_store, ""
    problem = store_dir_problem(the_store.directory, write=write)
    if not problem:
        return the_store, ""
    return the_store, f"{folder_text(CACHE_DIR_ENV, the_store.directory, 'the store folder')} {problem}"


def checked_store(write: bool = True):
    """:func:`store`, after checking that the built-in SQLite store's folder can serve the command (read
    only, or ``write``): bad input (exit 2) naming ``FLYAUTOTUNE_CACHE_DIR``, its value and the problem
    ("is a file, not a directory", "is not writable"); with ``write``, the store is then opened for
    writing (exit 1 where that fails)."""
    from ..store import MemoryStore, StoreError, TuningStore
    from ..store.location import CACHE_DIR_ENV

    the_store, problem = _store_folder_problem(write)
    if problem:
        need = (f"the tuning store needs a folder it can write (set {CACHE_DIR_ENV} to one)" if write else
                f"the tuning store cannot be read from it (set {CACHE_DIR_ENV} to the store's folder)")
        raise UsageError(f"{problem}: {need}")
    if not write and isinstance(the_store, TuningStore) and not os.path.lexists(the_store.path):
        # Opening it would create the folder and the file: a read (show, a dry run, a mistyped
        # FLYAUTOTUNE_CACHE_DIR) must leave no store behind. An empty one reads the same.
        empty = MemoryStore()
        empty.path = the_store.path
        return empty
    check_writable = getattr(the_store, "check_writable", None)  # the built-in store's
    if write and check_writable is not None:
        try:
            check_writable()
        except StoreError as exc:
            raise CommandError(store_error_text(the_store, exc)) from exc
    return the_store


def store_problem() -> str:
    """Why the built-in SQLite store's folder cannot take winners (naming ``FLYAUTOTUNE_CACHE_DIR`` where it
    chose the folder), or ``""``. ``tune`` still tunes then (a read-only or full store never fails a tune);
    it says so before the search instead of after it."""
    return _store_folder_problem(True)[1]


def tuner_names(name: str, known_tuners: Sequence[str]) -> list:
    """The store tuner names an ADOPTER argument selects (a tuner name works too)."""
    if name in known_tuners:
        return [name]
    pm = plugin_manager()
    try:
        adopter = pm.get_adopter(name)
    except KeyError:
        known = ", ".join(pm.adopter_registry.names()) or "none"
        tuners = ", ".join(safe(t) for t in known_tuners) or "none"
        raise UsageError(
            f"unknown adopter {safe(name)!r}; registered adopters: {known}; tuners in the store: {tuners}"
        ) from None
    names = {adopter.name}
    tuned_name = getattr(adopter.tuner, "name", None)
    if isinstance(tuned_name, str):
        names.add(tuned_name)
    return sorted(names)


def entries(name: Optional[str]) -> list:
    """The store's entries, of one adopter (or tuner name) when ``name`` is given."""
    from ..store import StoreError

    the_store = checked_store(write=False)
    try:
        found = the_store.entries()
    except StoreError as exc:
        raise CommandError(store_error_text(the_store, exc)) from exc
    if name is None:
        return found
    tuners = set(tuner_names(name, sorted({e.tuner for e in found})))
    return [e for e in found if e.tuner in tuners]
