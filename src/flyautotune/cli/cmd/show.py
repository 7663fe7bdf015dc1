"""``flyautotune show [ADOPTER]``: the stored winners, one row per key."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from typing import Any

from ..common import config_text, entries, out, plural, safe, short, store, table

#: torch dtype names in the short form ``--dtype`` takes.
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


def add_parser(sub) -> None:
    p = sub.add_parser("show", help="list the winners in the tuning store")
    p.add_argument("adopter", metavar="ADOPTER", nargs="?", help="only this adopter (or tuner name)")
    p.add_argument("--json", action="store_true", help="print the entries as a JSON pack")
    p.add_argument("--stale", action="store_true",
                   help="only the winners no lookup in this installation finds (tuned from another version of "
                        "the kernel's source, or under another Python, flyautotune or torch), and why; loads "
                        "the adopters to know their sources")


def run(args: argparse.Namespace) -> None:
    from ...store import dump_pack

    found = entries(args.adopter)
    why: dict = {}
    if args.stale:
        why = stale(found)
        found = [e for e in found if (e.tuner, e.key) in why]
    if args.json:
        sys.stdout.write(dump_pack(found))
        return
    path = store().path
    what = f" for {safe(args.adopter)}" if args.adopter else ""
    if args.stale:
        if not found:
            out(f"No stale entries{what} in {path}: every winner there can serve a lookup here.")
            return
        out(f"{plural(len(found), 'stale entry', 'stale entries')}{what} in {path} (no lookup here finds "
            f"them; `flyautotune clear --stale` deletes them):")
        texts = key_texts([(e.tuner, e.key) for e in found])
        rows = [[e.tuner, key, where, config_text(e.config), safe(why[(e.tuner, e.key)]), _when(e.created)]
                for e, (key, where) in zip(found, texts)]
        out(table(["tuner", "key", "target", "winner", "tuned with", "tuned"], rows))
        return
    if not found:
        out(f"No tuned entries{what} in {path}.")
        return
    out(f"{plural(len(found), 'tuned entry', 'tuned entries')}{what} in {path}:")
    texts = key_texts([(e.tuner, e.key) for e in found])
    rows = []
    for e, (key, where) in zip(found, texts):
        rows.append([e.tuner, key, where, config_text(e.config), _winner_ms(e), _decision(e), len(e.timings),
                     _when(e.created)])
    out(table(["tuner", "key", "target", "winner", "ms (±noise, method)", "vs default", "candidates", "tuned"], rows,
              right=(4, 6)))


def stale(found: list) -> dict:
    """``{(tuner, key): why}`` for the entries no lookup in this installation finds (``store.unmatched``)."""
    from ... import store as _store

    return {(e.tuner, e.key): why for e, why in _store.unmatched(found)}


def key_texts(keys: list) -> list:
    """``[(key text, target text)]`` for ``[(tuner, key json)]``: the arguments and dtypes, plus
    the strides, hints or a short hash only where rows would otherwise look the same."""
    parsed = [_parse(k) for _, k in keys]
    levels = (("args", "dtypes"), ("args", "dtypes", "strides"), ("args", "dtypes", "strides", "hints"),
              ("args", "dtypes", "strides", "hints", "rest"))
    for level in levels:
        texts = [(" ".join(p[a] for a in level if p[a]) or "-", p["target"]) for p in parsed]
        seen = [(t, k[0]) for t, k in zip(texts, keys)]
        if len(set(seen)) == len(seen):
            break
    return texts


def _parse(key: str) -> dict:
    parts = dict.fromkeys(("args", "dtypes", "strides", "hints", "rest"), "")
    parts["target"] = "-"
    try:
        kd = json.loads(key)
    except (ValueError, RecursionError):
        kd = None
    if not isinstance(kd, dict):  # a key from an odd pack: show it, do not crash on it
        parts["args"] = short(key, 40)
        parts["rest"] = _digest(key)
        return parts
    args = kd.get("args") if isinstance(kd.get("args"), dict) else {}
    parts["args"] = " ".join(f"{k}={_value(v)}" for k, v in sorted(args.items()))
    dtypes = kd.get("dtypes") if isinstance(kd.get("dtypes"), dict) else {}
    names = {n: _dtype(d) for n, d in sorted(dtypes.items())}
    if len(set(names.values())) == 1:
        only = next(iter(names.values()))
        if f"={only}" not in parts["args"]:  # a key argument already says it (rmsnorm's dtype=bf16)
            parts["dtypes"] = f"tensors={only}"
    elif names:
        parts["dtypes"] = "dtypes=" + ",".join(f"{n}:{d}" for n, d in names.items())
    strides = kd.get("strides") if isinstance(kd.get("strides"), dict) else {}
    if strides:
        parts["strides"] = "strides=" + ",".join(f"{n}:{_value(s)}" for n, s in sorted(strides.items()))
    if kd.get("hints"):
        parts["hints"] = "hints=" + _value(kd.get("hints"))
    parts["rest"] = _digest(key)
    target = kd.get("target")
    if isinstance(target, dict) and target:
        parts["target"] = f"{target.get('backend', '?')}/{target.get('arch', '?')}"
    return parts


def _dtype(name: Any) -> str:
    name = str(name).replace("torch.", "")
    return _DTYPES.get(name, name)


def _value(v: Any) -> str:
    if isinstance(v, list) and all(not isinstance(x, (list, dict)) for x in v):
        return "x".join(str(x) for x in v) if v else "()"
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"), default=repr)
    return str(v)


def _digest(key: str) -> str:
    return "#" + hashlib.sha256(str(key).encode("utf-8", "backslashreplace")).hexdigest()[:8]


def _number(value: Any) -> Any:
    """``value`` as a finite float, or None: a bool, text, ``inf`` or an integer beyond any float (an odd
    pack's) costs its cell, never an ``OverflowError``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _best(timings: Any) -> str:
    times = [_number(t.get("ms")) for t in timings or () if isinstance(t, dict)]
    times = [t for t in times if t is not None]
    return f"{min(times):.4f}" if times else "-"


def _winner_ms(entry: Any) -> str:
    """The winner's stored time, with its relative spread and how it was timed when known."""
    row = next((t for t in entry.timings or () if isinstance(t, dict) and t.get("config") == entry.config), None)
    ms = None if row is None else _number(row.get("ms"))
    if ms is None:
        return _best(entry.timings)
    spread = _number(row.get("spread"))
    extra = [f"±{spread:.1%}"] if spread is not None else []
    if isinstance(row.get("method"), str):
        extra.append(safe(row["method"]))
    return f"{ms:.4f}" + (f" ({', '.join(extra)})" if extra else "")


def _decision(entry: Any) -> str:
    """What the search decided against the default: the winner's gain, and the tie band it had to beat."""
    prov = entry.provenance if isinstance(entry.provenance, dict) else {}
    margin, noise = _number(prov.get("margin")), _number(prov.get("noise"))
    if margin is None:
        return "-"
    band = f", band {noise:.1%}" if noise is not None else ""
    return f"default kept{band}" if margin == 0 else f"+{margin:.1%}{band}"


def _when(created: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(created)) if created else "-"
    except (OverflowError, ValueError, OSError, TypeError):  # a pack's odd timestamp costs a cell
        return "-"
