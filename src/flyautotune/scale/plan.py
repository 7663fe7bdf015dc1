"""Tuning plan files: which adopters, shapes and dtypes to tune, validated before any work."""

from __future__ import annotations

import importlib
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Optional

import attrs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: Accepted dtype spellings -> the canonical names adopters receive.
DTYPES = {
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
}
TOP_LEVEL = ("options", "tune")
OPTIONS = {"force": bool, "budget_s": (int, float), "pack": str, "device": str, "workers": int, "plugins": list,
           "allow_slow": bool, "connect_timeout_s": (int, float)}
#: Seconds a named Ray cluster gets to answer before ``flyautotune plan`` gives up (``connect_timeout_s``).
CONNECT_TIMEOUT_S = 30.0
#: ``device`` values a plan may name: the CPU (Triton's interpreter) or a GPU, first or N-th.
DEVICE_FORMS = "cpu, cuda, cuda:N"
ENTRY_FIELDS = ("adopter", "shapes", "dtypes")


class PlanError(ValueError):
    """A plan file that cannot run: names the file, the line, the entry and the field."""


@attrs.frozen
class PlanKey:
    """One unit of work: an adopter at one shape and dtype."""

    adopter: str
    shape: tuple
    dtype: str

    def label(self) -> str:
        return f"{self.adopter} {'x'.join(map(str, self.shape))} {self.dtype}"

    def to_dict(self) -> dict:
        return {"adopter": self.adopter, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_dict(cls, d: dict) -> "PlanKey":
        return cls(d["adopter"], tuple(d["shape"]), d["dtype"])


@attrs.frozen
class PlanOptions:
    """``[options]`` of a plan.

    :param force: search every key again, even one with a stored winner.
    :param budget_s: start no new search after this many seconds (the first key always runs; None: no limit);
        a key with a stored winner is still looked up and packed.
    :param pack: where the exported pack goes (relative to the plan file's folder).
    :param device: the serial runner's device (``cpu``, ``cuda:N``; None picks the first GPU, else CPU).
    :param workers: CPU workers of a local Ray cluster when no GPU is visible.
    :param plugins: modules imported and registered as flyautotune plugins in every
        process that tunes (adopters not installed as entry points).
    :param allow_slow: on the CPU (Triton's interpreter), tune shapes above ``tune``'s element limit too
        (as ``flyautotune tune --allow-slow``).
    :param connect_timeout_s: how long a named Ray cluster (``--ray ADDRESS``, ``RAY_ADDRESS``) gets to answer
        before the plan fails naming the address.
    """

    force: bool = False
    budget_s: Optional[float] = None
    pack: Optional[str] = None
    device: Optional[str] = None
    workers: Optional[int] = None
    plugins: tuple = attrs.field(default=(), converter=tuple)
    allow_slow: bool = False
    connect_timeout_s: float = CONNECT_TIMEOUT_S


@attrs.frozen
class Plan:
    """A validated plan: its keys (adopter x shape x dtype, in file order) and options."""

    path: str
    keys: tuple = attrs.field(converter=tuple)
    options: PlanOptions = PlanOptions()

    def pack_path(self) -> Path:
        """Where the pack goes: ``options.pack`` beside the plan, else ``<plan stem>.pack.json``."""
        folder = Path(self.path).parent
        return folder / (self.options.pack or f"{Path(self.path).stem}.pack.json")


class _Where:
    """Finds the line of a field inside the n-th ``[[tune]]`` table (tomllib keeps no positions)."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def line(self, table: str, index: Optional[int] = None, field: Optional[str] = None) -> Optional[int]:
        header = re.compile(r"^\s*\[\[\s*%s\s*\]\]" % re.escape(table) if index is not None
                            else r"^\s*\[\s*%s\s*\]" % re.escape(table))
        starts = [i for i, ln in enumerate(self.lines) if header.match(ln)]
        if index is not None and index >= len(starts) or not starts:
            return None
        start = starts[index if index is not None else 0]
        if field is None:
            return start + 1
        key = re.compile(r"^\s*%s\s*=" % re.escape(field))
        for i in range(start + 1, len(self.lines)):
            if re.match(r"^\s*\[", self.lines[i]):
                break
            if key.match(self.lines[i]):
                return i + 1
        return start + 1

    def error(self, table: str, index: Optional[int], field: Optional[str], message: str) -> PlanError:
        line = self.line(table, index, field)
        at = f"{self.path}:{line}" if line else self.path
        where = f"[[{table}]] entry {index + 1}" if index is not None else f"[{table}]"
        return PlanError(f"{at}: {where}, field {field!r}: {message}" if field else f"{at}: {where}: {message}")


def parse_shape(value: Any) -> tuple:
    """``"4096x8192"`` or ``[4096, 8192]`` -> ``(4096, 8192)``; ValueError otherwise."""
    dims = value
    if isinstance(value, str):
        parts = value.strip().lower().replace("×", "x").split("x")
        if all(p.strip().isdigit() for p in parts):
            dims = [int(p) for p in parts]
    if (isinstance(dims, list) and dims
            and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)):
        return tuple(dims)
    raise ValueError(f"{value!r} is not a shape; expected positive integers joined by 'x' (\"4096x8192\") "
                     f"or a list of them ([4096, 8192])")


def load_plan(path: Any, pm: Any = None) -> Plan:
    """Read and validate a plan file; nothing is tuned.

    :param pm: the plugin manager whose adopters the plan may name (default: the
        process-wide one, plus the plan's ``plugins``).
    :returns: the :class:`Plan`, keys deduplicated in file order.
    :raises PlanError: naming the file, the line, the ``[[tune]]`` entry and the field.
    """
    path = os.fspath(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise PlanError(f"{path}: cannot read the plan file ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
        doc = tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PlanError(f"{path}: not a valid TOML file: {exc}") from None
    where = _Where(path, text)
    unknown = sorted(set(doc) - set(TOP_LEVEL))
    if unknown:
        raise PlanError(f"{path}: unknown top-level key(s) {unknown}; accepted: [options] and [[tune]] tables")
    options = _options(where, doc.get("options", {}))
    if pm is None:
        pm = plugin_manager_for(options.plugins, where)
    entries = doc.get("tune")
    if not isinstance(entries, list) or not entries:
        raise PlanError(f"{path}: no [[tune]] tables; each names an adopter, its shapes and dtypes")
    keys: dict = {}  # in plan order, each once (a dict: a list's `in` made large plans quadratic)
    cpu_guard = not options.allow_slow and _runs_on_cpu(options)
    for i, entry in enumerate(entries):
        for key in _entry_keys(where, i, entry, pm, cpu_guard):
            keys.setdefault(key, None)
    return Plan(path, list(keys), options)


def _options(where: _Where, raw: Any) -> PlanOptions:
    if not isinstance(raw, dict):
        raise where.error("options", None, None, f"must be a table, got {raw!r}")
    out: dict = {}
    for name, value in raw.items():
        kind = OPTIONS.get(name)
        if kind is None:
            raise where.error("options", None, name, f"unknown option; accepted: {', '.join(OPTIONS)}")
        bad = isinstance(value, bool) and kind is not bool
        if bad or not isinstance(value, kind):
            kinds = kind if isinstance(kind, tuple) else (kind,)
            accepted = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
                        list: "a list"}
            raise where.error("options", None, name, f"{value!r} has the wrong type ({type(value).__name__}); "
                                                     f"accepted: {' or '.join(accepted[k] for k in kinds)}")
        if name in ("budget_s", "connect_timeout_s") and not (math.isfinite(value) and value > 0):
            raise where.error("options", None, name, f"{value!r} must be a positive, finite number of seconds")
        if name == "workers" and value <= 0:
            raise where.error("options", None, name, f"{value!r} must be positive")
        problem = device_problem(value) if name == "device" else ""
        if problem:
            raise where.error("options", None, name, problem)
        if name == "plugins" and not all(isinstance(m, str) and m for m in value):
            raise where.error("options", None, name, f"{value!r} must be a list of module names")
        out[name] = float(value) if name in ("budget_s", "connect_timeout_s") else value
    return PlanOptions(**out)


def device_problem(value: str) -> str:
    """Why ``value`` cannot be the plan's ``device``, or ``""``: ``cpu``, ``cuda``, ``cuda:N``, or this machine's
    accelerator type (what the runner's ``default_device`` picks, e.g. ``xpu``) with an optional index."""
    kinds = {"cuda"}
    try:
        from ..devices import accelerator_type

        local = accelerator_type()
    except Exception:  # noqa: BLE001 - no torch: the forms above are all a plan can be sure of
        local = None
    if local:
        kinds.add(local)
    m = re.fullmatch(r"([a-z]+)(?::(\d+))?", value)
    if value == "cpu" or (m is not None and m.group(1) in kinds):
        return ""
    extra = f", {local}, {local}:N" if local and local != "cuda" else ""
    return f"{value!r} is not a device; accepted: {DEVICE_FORMS}{extra}"


def _runs_on_cpu(options: PlanOptions) -> bool:
    """Whether the plan's keys run under Triton's CPU interpreter: ``device = "cpu"``, no device on a machine
    without a GPU, or the interpreter already on (``flyautotune plan --device cpu`` turns it on first)."""
    if options.device == "cpu":
        return True
    try:
        from ..devices import default_device, triton_interprets

        return (options.device is None and default_device() == "cpu") or triton_interprets()
    except Exception:  # noqa: BLE001 - without torch or triton nothing runs anywhere; the runner says so
        return False


def _check_cpu_shapes(where: _Where, i: int, shapes: list) -> None:
    """``flyautotune tune``'s guard on ``--device cpu``, with the plan's spelling of its opt-out."""
    from ..devices import too_slow_on_cpu

    for shape in shapes:
        why = too_slow_on_cpu(shape)
        if why:
            raise where.error("tune", i, "shapes", f"{why}; use a GPU (device = \"cuda:0\"), a smaller shape, "
                                                    f"or allow_slow = true in [options]")


def plugin_manager_for(plugins: tuple, where: Optional[_Where] = None) -> Any:
    """The process-wide plugin manager, or a fresh one that also registers ``plugins`` (module names)."""
    from ..plugins import build_plugin_manager, plugin_manager

    if not plugins:
        return plugin_manager()
    modules = []
    for name in plugins:
        try:
            modules.append(importlib.import_module(name))
        except ImportError as exc:
            if where is None:
                raise
            raise where.error("options", None, "plugins", f"cannot import {name!r}: {exc}") from None
    return build_plugin_manager(plugins=modules)


def _entry_keys(where: _Where, i: int, entry: Any, pm: Any, cpu_guard: bool = False) -> list:
    if not isinstance(entry, dict):
        raise where.error("tune", i, None, f"must be a table, got {entry!r}")
    for name in entry:
        if name not in ENTRY_FIELDS:
            raise where.error("tune", i, name, f"unknown field; accepted: {', '.join(ENTRY_FIELDS)}")
    for name in ENTRY_FIELDS:
        if name not in entry:
            raise where.error("tune", i, name, "missing")
    name = entry["adopter"]
    known = pm.adopters()
    if not isinstance(name, str) or name not in known:
        raise where.error("tune", i, "adopter",
                          f"unknown adopter {name!r}; registered adopters: {', '.join(sorted(known)) or 'none'}")
    adopter = known[name]
    if adopter.example is None:
        raise where.error("tune", i, "adopter", f"adopter {name!r} declares no example(shape, dtype, device), "
                                                f"so a plan cannot build its inputs")
    shapes, dtypes = entry["shapes"], entry["dtypes"]
    for field, value in (("shapes", shapes), ("dtypes", dtypes)):
        if not isinstance(value, list) or not value:
            raise where.error("tune", i, field, f"must be a non-empty list, got {value!r}")
    parsed_shapes = []
    for value in shapes:
        try:
            parsed_shapes.append(parse_shape(value))
        except ValueError as exc:
            raise where.error("tune", i, "shapes", str(exc)) from None
    if cpu_guard:
        _check_cpu_shapes(where, i, parsed_shapes)
    parsed_dtypes = []
    for value in dtypes:
        dt = DTYPES.get(str(value).strip().lower()) if isinstance(value, str) else None
        if dt is None:
            raise where.error("tune", i, "dtypes", f"{value!r} is not a dtype; accepted: bf16, fp16, fp32")
        parsed_dtypes.append(dt)
    _check_inputs(where, i, adopter, parsed_shapes, parsed_dtypes)
    return [PlanKey(name, s, d) for s in parsed_shapes for d in parsed_dtypes]


def _check_inputs(where: _Where, i: int, adopter: Any, shapes: list, dtypes: list) -> None:
    """Ask the adopter to build every input on torch's ``meta`` device (no memory, no
    kernels): a dtype it lacks or a shape it refuses fails here, before any tuning."""
    try:
        import torch  # noqa: F401
    except ImportError:  # without torch nothing can be built; the runner reports it per key
        return
    errors: dict = {}
    for s in shapes:
        for d in dtypes:
            try:
                adopter.example(s, d, "meta")
            except (TypeError, ValueError) as exc:
                errors[s, d] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            except Exception:  # an example that cannot run on meta is checked when the key runs
                pass
    if not errors:
        return
    works = {(s, d) for s in shapes for d in dtypes} - set(errors)
    for d in dtypes:
        if all((s, d) in errors for s in shapes) and works:
            raise where.error("tune", i, "dtypes", f"adopter {adopter.name!r} lacks dtype {d!r}: "
                                                   f"{errors[shapes[0], d]}")
    (s, d), message = next(iter(errors.items()))
    if any((s, x) not in errors for x in dtypes):
        field = "dtypes"
    elif any((y, d) not in errors for y in shapes):
        field = "shapes"
    else:  # nothing builds: the adopter's own message tells which field it refused
        field = "dtypes" if "dtype" in message.lower() else "shapes"
    raise where.error("tune", i, field, f"adopter {adopter.name!r} refuses shape {'x'.join(map(str, s))} "
                                        f"with dtype {d!r}: {message}")
