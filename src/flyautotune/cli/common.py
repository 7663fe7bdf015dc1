"""What every sub-command shares: errors, argument types, output and the store/adopter lookups."""

from __future__ import annotations

import argparse
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

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


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
    """Aligned columns; every cell goes through :func:`safe`."""
    cells = [[safe(h) for h in headers]] + [[("" if c is None else safe(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
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
    pm = plugin_manager()
    try:
        return pm.get_adopter(name)
    except KeyError:
        known = ", ".join(pm.adopter_registry.names()) or "none (install an adopter plugin)"
        raise UsageError(f"unknown adopter {safe(name)!r}; registered adopters: {known}") from None


def store():
    """The store the plugins provide (``flyautotune_store``): the built-in SQLite one unless replaced."""
    from ..plugins import plugin_manager

    found = plugin_manager().hook.flyautotune_store()
    if found is None:
        raise CommandError("no flyautotune_store plugin provides a store (is flyautotune.store disabled?)")
    return found


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

    try:
        found = store().entries()
    except StoreError as exc:
        raise CommandError(str(exc)) from exc
    if name is None:
        return found
    tuners = set(tuner_names(name, sorted({e.tuner for e in found})))
    return [e for e in found if e.tuner in tuners]
