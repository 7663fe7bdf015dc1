"""``@autotune``: pick a config (memory -> store -> shipped packs -> default ->
search), key it robustly, persist it, and run the launch with its hints."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import platform
import sys
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

from . import events, hints as _hints, keys, streams
from .config import Config
from .target import Target
from .tuning.selection import Selection

log = logging.getLogger("flyautotune")

FORCE_ENV = "FLYAUTOTUNE"
CACHE_DIR_ENV = "FLYAUTOTUNE_CACHE_DIR"
_TRUE = frozenset({"1", "true", "yes", "on"})


class AutotuneError(RuntimeError):
    """Every candidate of a search failed; the message lists each failure."""


class IncompatibleConfigError(ValueError):
    """A config cannot be routed to this kernel (unknown kwarg, rejected hint).

    Launchers may raise it for a config they cannot take; a stored winner that
    raises it is dropped and the default is used instead.
    """


def force_search() -> bool:
    """True when ``FLYAUTOTUNE`` asks for a fresh search (cache and default bypassed)."""
    raw = _raw_env(_FORCE_KEY)
    return raw is not None and _decode(raw).strip().lower() in _TRUE


# The hot path reads two variables per call; ``os.environ.get`` re-encodes the
# key and decodes the value each time (microseconds), so read CPython's live
# backing dict with pre-encoded keys instead, falling back to os.environ.
_environ_data = getattr(os.environ, "_data", None)
_encodekey = getattr(os.environ, "encodekey", None)
if isinstance(_environ_data, dict) and callable(_encodekey):
    _FORCE_KEY = _encodekey(FORCE_ENV)
    _CACHE_DIR_KEY = _encodekey(CACHE_DIR_ENV)
    _raw_env = _environ_data.get

    def _decode(raw: Any) -> str:
        return os.environ.decodevalue(raw)
else:  # pragma: no cover - non-CPython
    _FORCE_KEY, _CACHE_DIR_KEY = FORCE_ENV, CACHE_DIR_ENV
    _raw_env = os.environ.get

    def _decode(raw: Any) -> str:
        return raw



def current_target() -> Optional[Target]:
    """The target of the launch running on this thread (inside a tuned call), else None."""
    launch = getattr(_hints._local, "launch", None)
    return launch[0] if launch else None


@contextlib.contextmanager
def target_context(target: Target, plugin_manager: Any = None) -> Iterator[Target]:
    """Make ``current_target()`` (and ``lower_compile_hints``' default target)
    return ``target`` inside the block — for compiling outside a tuned launch,
    e.g. cross-compiled reports. Nests; thread-local."""
    if not isinstance(target, Target):
        raise TypeError(f"target_context: expected a flyautotune.Target, got {target!r}")
    local = _hints._local
    old = getattr(local, "launch", None)
    local.launch = (target, plugin_manager)
    try:
        yield target
    finally:
        local.launch = old


def lower_compile_hints(ir: Any = None, target: Optional[Target] = None, hints: Optional[Mapping] = None) -> Any:
    """Ask the backend to materialize the current hint snapshot onto ``ir``.

    :param ir: an MLIR module (returned changed in place), a Triton kernel or
        ``None`` (a dict of compile options comes back).
    :param target: defaults to the target of the tuned launch running now.
    :param hints: defaults to ``current_hints()`` (the effective snapshot).
    :returns: the backend's result; ``ir`` unchanged, or ``{}`` when ``ir`` is
        None, if no backend lowers anything.
    """
    from .plugins import plugin_manager

    if target is None:
        target = current_target()
        if target is None:
            raise ValueError(
                "lower_compile_hints: target=None outside a tuned launch; pass target= "
                "(e.g. flyautotune.target_for(device))"
            )
    snapshot = dict(_hints.current_hints() if hints is None else _hints.merge_hints(_hints.normalize_hints(hints)))
    launch = getattr(_hints._local, "launch", None)
    pm = (launch[1] if launch else None) or plugin_manager()
    result = pm.hook.flyautotune_lower_compile_hints(ir=ir, hints=snapshot, target=target)
    if result is None:
        return {} if ir is None else ir
    return result


# -- targets and backend key axes ---------------------------------------------

# Per plugin manager (weakly: a manager's id can be reused once it is collected).
_target_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_axes_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def target_for(device: Any = None, pm: Any = None) -> Target:
    """The ``Target`` a backend plugin reports for ``device`` (cached per device).

    :raises LookupError: when no installed backend owns the device.
    """
    from .plugins import plugin_manager

    pm = pm or plugin_manager()
    if device is None:
        device = "cpu"
    torch = sys.modules.get("torch")
    if isinstance(device, str) and torch is not None:
        device = torch.device(device)
    per_pm = _target_cache.setdefault(pm, {})
    cache_key = str(device)
    target = per_pm.get(cache_key)
    if target is None:
        target = pm.hook.flyautotune_target(device=device)
        if target is None:
            raise LookupError(
                f"no flyautotune backend owns device {device}: install a backend plugin "
                f"(pip install flyautotune-cuda or flyautotune-rocm) or check FLYAUTOTUNE_DISABLE_PLUGINS"
            )
        if not isinstance(target, Target):
            raise TypeError(f"flyautotune_target returned {target!r} for {device}; expected a flyautotune.Target")
        per_pm[cache_key] = target
    return target


def backend_axes(target: Target, pm: Any = None) -> dict:
    """Merged ``flyautotune_cache_key`` axes for ``target`` (cached per process)."""
    from .plugins import plugin_manager

    pm = pm or plugin_manager()
    per_pm = _axes_cache.setdefault(pm, {})
    axes = per_pm.get(target)
    if axes is None:
        axes = {}
        # pluggy returns results last-registered first; merge oldest first so
        # a later plugin's axis is visible next to, not silently over, another's
        for part in reversed(pm.hook.flyautotune_cache_key(target=target)):
            if part:
                axes.update({str(k): v for k, v in part.items()})
        per_pm[target] = axes
    return dict(axes)


def clear_caches() -> None:
    """Forget cached targets and key axes (after plugins change)."""
    _target_cache.clear()
    _axes_cache.clear()


# -- the tuner -------------------------------------------------------------------


class _Plan:
    """A picked config, prepared once so a cache hit does no merging."""

    __slots__ = ("config", "target", "source", "kwargs", "layers", "launch", "hit", "key", "timings")

    def __init__(self, config: Config, target: Target, source: str, snapshot: tuple, pm: Any,
                 key: Optional[str] = None, timings: tuple = ()) -> None:
        self.key = key
        self.timings = timings
        self.config = config
        self.target = target
        self.source = source
        self.kwargs = config.kwargs
        effective = _hints.merge_hints(dict(snapshot), config.hints)
        self.layers = [_hints.Frame(effective)] if effective else []
        self.launch = (target, pm)
        self.hit = _Last(config, "memory")


class _Last:
    """What ``last_source``/``last_config`` report; one attribute store per call."""

    __slots__ = ("config", "source")

    def __init__(self, config: Optional[Config], source: Optional[str]) -> None:
        self.config = config
        self.source = source


class _Call:
    """One call's arguments, bound once."""

    __slots__ = ("args", "kwargs", "named", "device", "tensors", "layout")

    def __init__(self, args, kwargs, named, device, tensors, layout):
        self.args = args
        self.kwargs = kwargs
        self.named = named
        self.device = device
        self.tensors = tensors
        self.layout = layout


class Autotuner:
    """A launch callable wrapped with config selection; see ``autotune``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        configs: Sequence[Config] | Callable[..., Sequence[Config]],
        key: Iterable[str] = (),
        name: Optional[str] = None,
        default: Optional[Callable[..., Config]] = None,
        prune_configs_by: Optional[Callable[..., Sequence[Config]]] = None,
        restore_value: Iterable[str] = (),
        reset_to_zero: Iterable[str] = (),
        do_bench: Optional[Callable[..., float]] = None,
        hints: Optional[Mapping[str, Any]] = None,
        warmup: int = 5,
        rep: int = 20,
        packs: Iterable[str] | Callable[[], Iterable[str]] = (),
        source_files: Iterable[str] = (),
        plugin_manager: Any = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"autotune: the decorated object must be callable, got {fn!r}")
        self.fn = fn
        functools.update_wrapper(self, fn)
        self.name = name or f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        self._sig = inspect.signature(fn)
        params = self._sig.parameters
        self._params = tuple(params)
        self._var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
        self._var_pos = any(p.kind is p.VAR_POSITIONAL for p in params.values())
        self._positional = tuple(
            n for n, p in params.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        )
        self._defaults = {n: p.default for n, p in params.items() if p.default is not p.empty}
        self._has_stream = "stream" in params
        self._stream_pos = self._positional.index("stream") if "stream" in self._positional else 1 << 30
        self._var_kw_names = tuple(n for n, p in params.items() if p.kind is p.VAR_KEYWORD)
        if not (callable(configs) or isinstance(configs, (list, tuple))):
            raise TypeError(f"autotune: configs must be a list of Config or a callable, got {configs!r}")
        if not callable(configs):
            for c in configs:
                if not isinstance(c, Config):
                    raise TypeError(f"autotune: configs must hold flyautotune.Config objects, got {c!r}")
        self.configs = configs
        self.key = _names("key", key)
        for k in self.key:
            if k not in params and not self._var_kw:
                raise ValueError(
                    f"autotune({self.name!r}): key argument {k!r} is not a parameter of "
                    f"{getattr(fn, '__name__', fn)}{self._sig}"
                )
        self.restore_value = self._check_names("restore_value", restore_value)
        self.reset_to_zero = self._check_names("reset_to_zero", reset_to_zero)
        for arg, value in (("default", default), ("prune_configs_by", prune_configs_by), ("do_bench", do_bench)):
            if value is not None and not callable(value):
                raise TypeError(f"autotune: {arg} must be callable or None, got {value!r}")
        self.default = default
        self.prune_configs_by = prune_configs_by
        self.do_bench = do_bench
        if hints is not None and not isinstance(hints, Mapping):
            raise TypeError(f"autotune: hints= must be a mapping of hint name -> value, got {hints!r}")
        self.hints = _hints.normalize_hints(hints)
        self._hint_base = _hints.merge_hints(self.hints)
        for arg, value in (("warmup", warmup), ("rep", rep)):
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if arg == "warmup" else 1):
                raise ValueError(f"autotune: {arg} must be an int >= {0 if arg == 'warmup' else 1}, got {value!r}")
        self.warmup = warmup
        self.rep = rep
        self._packs = packs if callable(packs) else _paths("packs", packs)
        self._source_files = tuple(keys.source_files(fn)) + _paths("source_files", source_files)
        self.source_fingerprint = keys.file_fingerprint(self._source_files)
        self._pm = plugin_manager
        self._memo: dict = {}
        self._memo_dir: Any = _raw_env(_CACHE_DIR_KEY)
        self._locks: dict = {}
        self._refused: set = set()  # keys whose stored/shipped winner the launcher refused
        self._locks_guard = threading.Lock()
        self._space_fp: Optional[str] = None
        if not callable(configs):
            self._space_fp = keys.canonical_json([c.to_dict() if c.pre_hook is None else repr(c) for c in configs])
        self._last = _Last(None, None)
        self._search_timings: dict = {}
        self.search_count = 0
        # Generated cache-hit paths, one per positional arity (see _build_fast).
        self._fast: dict = {}
        self._fast_memo: dict = {}
        self._fast_ok = not (self._var_pos or self._var_kw)

    def _check_names(self, what: str, names: Iterable[str]) -> tuple:
        names = _names(what, names)
        for n in names:
            if n not in self._sig.parameters:
                raise ValueError(
                    f"autotune({self.name!r}): {what} names {n!r}, which is not a parameter of "
                    f"{getattr(self.fn, '__name__', self.fn)}{self._sig}"
                )
        return names

    @property
    def last_source(self) -> Optional[str]:
        """Where the last call's config came from: memory, store, pack, default or search."""
        return self._last.source

    @property
    def last_config(self) -> Optional[Config]:
        """The config the last call ran (or resolved)."""
        return self._last.config

    @property
    def pm(self):
        if self._pm is None:
            from .plugins import plugin_manager

            return plugin_manager()
        return self._pm

    # -- binding and keys ------------------------------------------------------
    def _bind(self, args: tuple, kwargs: dict) -> _Call:
        if self._var_pos:
            bound = self._sig.bind(*args, **kwargs)
            bound.apply_defaults()
            named = dict(bound.arguments)
        else:
            if len(args) > len(self._positional):
                raise TypeError(
                    f"{self.name}: takes {len(self._positional)} positional arguments but {len(args)} were given"
                )
            named = self._defaults.copy()
            if args:
                named.update(zip(self._positional, args))
            if kwargs:
                if not self._var_kw:
                    unknown = [k for k in kwargs if k not in self._sig.parameters]
                    if unknown:
                        raise TypeError(
                            f"{self.name}: unexpected keyword argument {unknown[0]!r}; "
                            f"{getattr(self.fn, '__name__', self.fn)} takes {', '.join(self._params)}"
                        )
                named.update(kwargs)
        order = self._params
        if self._var_kw:
            for n in self._var_kw_names:
                extra = named.pop(n, None)
                if isinstance(extra, dict):
                    named.update(extra)
            order = sorted(named)
        tensor_cls = keys.tensor_type()
        tensors = []
        layout = []
        device = None
        if tensor_cls is not None:
            for n in order:
                v = named.get(n)
                if isinstance(v, tensor_cls):
                    tensors.append((n, v))
                    layout.append((n, v.dtype, v.stride()))
                    if device is None:
                        device = v.device
        return _Call(args, kwargs, named, device, tensors, layout)

    def _memo_key(self, call: _Call, snapshot: tuple) -> tuple:
        # Finer than the persistent key (raw strides, not their pattern): a
        # memo miss falls through to the store, so this only trades memory for speed.
        try:
            key_vals = tuple(map(keys.key_value, map(call.named.__getitem__, self.key)))
        except KeyError as exc:
            raise TypeError(f"{self.name}: key argument {exc.args[0]!r} was not given") from None
        return (call.device, key_vals, tuple(call.layout), snapshot)

    def key_dict(self, call: _Call, target: Target, snapshot: tuple) -> dict:
        """The full, persistent key of a call (what ``flyautotune show`` prints)."""
        return {
            "args": {k: keys.key_value(call.named[k]) for k in sorted(self.key)},
            "dtypes": {n: str(t.dtype) for n, t in sorted(call.tensors, key=_first)},
            "strides": {n: list(keys.stride_pattern(t)) for n, t in sorted(call.tensors, key=_first)},
            "hints": [list(kv) for kv in snapshot],
            "target": target.to_dict(),
            "backend": backend_axes(target, self.pm),
            "source": self.source_fingerprint,
        }

    def _snapshot(self) -> tuple:
        stack = getattr(_hints._local, "stack", None)
        if not self._hint_base:
            return stack[-1].key if stack else ()
        return _hints.hint_key(_hints.merge_hints(self._hint_base, stack[-1].merged if stack else None))

    # -- call paths ------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            fast = self._fast.get(len(args))
            if fast is not None:
                return fast(args)
        return self._call(args, kwargs)

    def _call(self, args: tuple, kwargs: dict) -> Any:
        call = self._bind(args, kwargs)
        plan = self._select(call)
        if not kwargs and self._fast_ok:
            self._remember_fast(args, plan)
        stream = call.named.get("stream") if self._has_stream else None
        if stream is not None:
            stream = streams.resolve_stream(stream, call.device)
        # An omitted stream stays None: the launch's own "current stream", which
        # is where the zeroing below runs too.
        with streams.on_stream(stream):
            if self.reset_to_zero:
                self._zero(call)
            try:
                return self._run_plan(plan, call, stream)
            except IncompatibleConfigError as exc:
                if plan.source not in ("store", "pack"):
                    raise
                self._forget(plan, exc)
        return self._call(args, kwargs)

    def _forget(self, plan: "_Plan", exc: BaseException) -> None:
        """A stored/shipped winner the launcher refused: drop it and choose again."""
        from . import store as _store

        log.warning("%s: the %s winner %s no longer fits the kernel (%s); dropping it", self.name,
                    plan.source, plan.config, exc)
        self._refused.add(plan.key)
        if plan.source == "store":
            _store.get_store().delete(self.name, plan.key)
        self._memo = {k: v for k, v in self._memo.items() if v is not plan}
        self._fast_memo.clear()

    # -- the generated cache-hit path ----------------------------------------------------
    #
    # A cache hit in the general path binds every argument by name and builds the
    # sorted key: microseconds of Python. For the common spelling (positional
    # arguments only, the same argument types as before) a function generated
    # for that arity checks the types, builds a key of the key values and each
    # tensor's dtype and raw strides (finer than the stored key, so never wrong)
    # and the open compile_hints block's key, and launches the prepared plan.
    # Anything unusual (keywords, other types, FLYAUTOTUNE set, a moved cache
    # dir) takes the general path, which also fills this one.

    def _remember_fast(self, args: tuple, plan: "_Plan") -> None:
        if plan.config.pre_hook is not None:
            return
        if _raw_env(_FORCE_KEY) is not None:
            return
        n = len(args)
        fast = self._fast.get(n)
        if fast is None:
            fast = self._build_fast(args)
            if fast is None:
                return
            self._fast[n] = fast
        key = fast.key(args)
        if key is not None:
            if len(self._fast_memo) > 4096:  # shapes that never repeat must not grow memory forever
                self._fast_memo.clear()
            self._fast_memo[key] = plan

    def _build_fast(self, args: tuple) -> Any:
        n = len(args)
        names = self._positional[:n]
        if self._has_stream and "stream" in names:
            return None
        tensor_cls = keys.tensor_type()
        types = tuple(map(type, args))
        tensors = [i for i, a in enumerate(args) if tensor_cls is not None and isinstance(a, tensor_cls)]
        key_idx = []
        for k in self.key:
            if k not in names:
                return None  # a key argument left to its default: the general path handles it
            key_idx.append(names.index(k))
        parts = []
        for i in key_idx:
            parts.append(f"a{i}.shape" if i in tensors else f"a{i}")
        for i in tensors:
            parts.append(f"a{i}.dtype")
            parts.append(f"a{i}.stride()")
        if tensors:
            parts.append(f"a{tensors[0]}.device")
        # The open compile_hints block's key leads: hints are part of every key.
        key_expr = "(" + ", ".join(["(stack[-1].key if stack else ())"] + parts) + ",)"
        unpack = (", ".join(f"a{i}" for i in range(n)) + ("," if n == 1 else "")) if n else "_"
        zero = "".join(f"    if a{names.index(z)} is not None:\n        a{names.index(z)}.zero_()\n"
                       for z in self.reset_to_zero if z in names)
        if sum(z in names for z in self.reset_to_zero) != len(self.reset_to_zero):
            return None
        src = f"""
def key(args):
    {unpack} = args
    stack = getattr(local, "stack", None)
    try:
        k = {key_expr}
        hash(k)
        return k
    except TypeError:  # an unhashable key value: such calls keep the general path
        return None

def fast(args):
    if tuple(map(type, args)) != types or raw_env(FORCE) is not None \\
            or raw_env(CACHE_DIR) != tuner._memo_dir:
        return tuner._call(args, {{}})
    {unpack} = args
    stack = getattr(local, "stack", None)
    try:
        plan = memo.get({key_expr})
    except TypeError:
        plan = None
    if plan is None:
        return tuner._call(args, {{}})
    tuner._last = plan.hit
{zero}    old = getattr(local, "launch", None)
    local.launch = plan.launch
    if plan.layers or stack:
        local.stack = plan.layers.copy()
        try:
            return fn(*args, **plan.kwargs)
        finally:
            local.stack = stack if stack is not None else []
            local.launch = old
    try:
        return fn(*args, **plan.kwargs)
    finally:
        local.launch = old
"""
        scope = {
            "types": types, "raw_env": _raw_env, "FORCE": _FORCE_KEY, "CACHE_DIR": _CACHE_DIR_KEY,
            "tuner": self, "local": _hints._local, "memo": self._fast_memo, "fn": self.fn,
        }
        exec(compile(src, f"<flyautotune fast path of {self.name}>", "exec"), scope)
        fast = scope["fast"]
        fast.key = scope["key"]
        return fast

    def resolve_config(self, *args: Any, **kwargs: Any) -> Config:
        """The config a call with these arguments would run (tuning if needed), without launching it."""
        return self._select(self._bind(args, kwargs)).config

    def select(self, *args: Any, force: bool = False, **kwargs: Any) -> Selection:
        """Pick the config a call with these arguments runs (tuning if needed), without launching it.

        :param force: search afresh and replace the stored winner (as ``FLYAUTOTUNE=1`` does).
        :returns: a :class:`Selection`: config, source, key and the search's timings.
        """
        call = self._bind(args, kwargs)
        before = self._memo.get(self._memo_key(call, self._snapshot()))
        plan = self._select(call, force=force)
        source = "memory" if plan is before else plan.source
        return Selection(plan.config, source, plan.key, plan.timings)

    def _select(self, call: _Call, force: bool = False) -> "_Plan":
        cache_dir = _raw_env(_CACHE_DIR_KEY)
        if cache_dir != self._memo_dir:
            self._memo = {}
            self._fast_memo.clear()
            self._memo_dir = cache_dir
        snapshot = self._snapshot()
        mkey = self._memo_key(call, snapshot)
        plan = self._memo.get(mkey)
        if not force and plan is not None and (
                plan.source == "search" or _raw_env(_FORCE_KEY) is None or not force_search()):
            self._last = plan.hit
            return plan
        forced = force or force_search()
        with self._lock_for(mkey):
            plan = self._memo.get(mkey)
            if plan is not None and not force and (not forced or plan.source == "search"):
                self._last = plan.hit
                return plan
            target = target_for(call.device, self.pm)
            config, source, key = self._select_cold(call, target, snapshot, forced)
            timings = tuple(self._search_timings.pop(key, ())) if source == "search" else ()
            plan = self._memo[mkey] = _Plan(config, target, source, snapshot, self._pm, key, timings)
            self._last = _Last(config, source)
        with self._locks_guard:  # the memo answers from now on; waiters hold their own reference
            self._locks.pop(mkey, None)
        return plan

    def _lock_for(self, mkey: tuple) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(mkey)
            if lock is None:
                lock = self._locks[mkey] = threading.Lock()
            return lock

    def _select_cold(self, call: _Call, target: Target, snapshot: tuple, forced: bool) -> tuple:
        from . import store as _store

        kd = self.key_dict(call, target, snapshot)
        key = keys.canonical_json(kd)
        if not forced:
            if key not in self._refused:  # winners a launcher refused are not offered again
                store = _store.get_store()
                entry = store.get(self.name, key)
                space_changed = (entry is not None and self.default is None and self._space_fp is not None
                                 and entry.provenance.get("space") not in (None, self._space_fp))
                if space_changed:
                    # No default to fall back on: a miss searches, and stored timings of
                    # unchanged candidates are reused. (With a default, the old winner
                    # still beats the default until a forced search.)
                    log.info("%s: the config space changed since the stored winner; searching again", self.name)
                elif entry is not None:
                    config = self._usable(entry, call, target, snapshot, "store")
                    if config is not None:
                        self._emit_select(call, key, config, "store")
                        return config, "store", key
                    store.delete(self.name, key)
                if not space_changed:
                    pack_entry = _store.find_in_packs(self._pack_paths(), self.name, key)
                    if pack_entry is not None:
                        config = self._usable(pack_entry, call, target, snapshot, "pack")
                        if config is not None:
                            self._emit_select(call, key, config, "pack")
                            return config, "pack", key
            if self.default is not None:
                config = self.default(**call.named)
                if not isinstance(config, Config):
                    raise TypeError(f"{self.name}: default() returned {config!r}; expected a flyautotune.Config")
                self._check_routable([config], call, target, snapshot)
                self._emit_select(call, key, config, "default")
                return config, "default", key
        config = self._search(call, target, snapshot, kd, key, forced or key in self._refused)
        self._emit_select(call, key, config, "search")
        return config, "search", key

    def _pack_paths(self) -> list:
        packs = self._packs() if callable(self._packs) else self._packs
        return list(_paths("packs", packs))

    def _usable(self, entry: Any, call: _Call, target: Target, snapshot: tuple, where: str) -> Optional[Config]:
        """A stored/shipped winner, or None when it no longer fits this kernel."""
        try:
            config = Config.from_dict(entry.config)
            self._check_fits([config], target, snapshot)
        except (IncompatibleConfigError, TypeError, ValueError) as exc:
            log.warning(
                "%s: dropping the %s winner %s for this key: it no longer fits the kernel (%s); "
                "using the default instead", self.name, where, entry.config, exc,
            )
            return None
        # The caller's own mistake is reported to the caller; the winner stays.
        self._check_caller([config], call)
        return config

    def _emit_select(self, call: _Call, key: str, config: Config, source: str) -> None:
        if events.enabled():
            events.emit("select", tuner=self.name, key=key, config=_config_repr(config), source=source)

    # -- validation -------------------------------------------------------------------
    def _check_routable(self, configs: Sequence[Config], call: _Call, target: Target, snapshot: tuple) -> None:
        """Fail before any benchmark on a kwarg nothing consumes, a tuned argument
        the caller also passed, or a hint the backend rejects."""
        self._check_caller(configs, call)
        self._check_fits(configs, target, snapshot)

    def _check_caller(self, configs: Sequence[Config], call: _Call) -> None:
        given = set(call.kwargs).union(self._positional[:len(call.args)])
        for config in configs:
            for name in config.kwargs:
                if name in given:
                    raise IncompatibleConfigError(
                        f"{self.name}: config {config!r} sets {name!r}, which the caller also passed "
                        f"({name}={call.named.get(name)!r}); leave tuned arguments to the tuner"
                    )

    def _check_fits(self, configs: Sequence[Config], target: Target, snapshot: tuple) -> None:
        base = dict(snapshot)
        for config in configs:
            for name in config.kwargs:
                if name not in self._sig.parameters and not self._var_kw:
                    raise IncompatibleConfigError(
                        f"{self.name}: config {config!r} sets {name!r}, which nothing consumes: "
                        f"{getattr(self.fn, '__name__', self.fn)} takes {', '.join(self._params)}"
                    )
            merged = _hints.merge_hints(base, config.hints)
            try:
                self.pm.hook.flyautotune_validate_hints(hints=merged, target=target)
            except (TypeError, ValueError) as exc:
                raise IncompatibleConfigError(
                    f"{self.name}: config {config!r} cannot be compiled for {target.backend}/{target.arch}: {exc}"
                ) from exc

    # -- running -------------------------------------------------------------------------
    def _run(self, config: Config, call: _Call, target: Target, snapshot: tuple, stream: Any) -> Any:
        return self._run_plan(_Plan(config, target, "search", snapshot, self._pm), call, stream)

    def _run_plan(self, plan: "_Plan", call: _Call, stream: Any) -> Any:
        local = _hints._local
        old_stack = getattr(local, "stack", None)
        old_launch = getattr(local, "launch", None)
        # The launch sees exactly the effective snapshot: install it as the
        # thread's only hint layer (a fresh list: the launch may nest blocks),
        # and restore the caller's stack afterwards.
        local.stack = plan.layers.copy()
        local.launch = plan.launch
        try:
            args, kwargs = call.args, call.kwargs
            if plan.kwargs:
                kwargs = {**kwargs, **plan.kwargs}
            if stream is not None and self._has_stream:
                if self._stream_pos < len(args):  # passed positionally: replace it there
                    args = args[:self._stream_pos] + (stream,) + args[self._stream_pos + 1:]
                else:
                    kwargs = {**kwargs, "stream": stream}
            if plan.config.pre_hook is not None:
                plan.config.pre_hook({**call.named, **kwargs})
            return self.fn(*args, **kwargs)
        finally:
            local.stack = old_stack if old_stack is not None else []
            local.launch = old_launch

    def _zero(self, call: _Call) -> None:
        for n in self.reset_to_zero:
            t = call.named.get(n)
            if t is not None:
                t.zero_()

    def _search(self, call: _Call, target: Target, snapshot: tuple, kd: dict, key: str, forced: bool) -> Config:
        from . import store as _store

        configs = self.configs(**call.named) if callable(self.configs) else self.configs
        configs = list(configs)
        if self.prune_configs_by is not None and len(configs) > 1:
            configs = list(self.prune_configs_by(configs, **call.named))
        if not configs:
            raise AutotuneError(f"{self.name}: the config space is empty for this call")
        for c in configs:
            if not isinstance(c, Config):
                raise TypeError(f"{self.name}: configs must be flyautotune.Config objects, got {c!r}")
        self._check_routable(configs, call, target, snapshot)
        if len(configs) == 1:
            return configs[0]
        self.search_count += 1
        device = call.device
        stream = streams.resolve_stream(call.named.get("stream") if self._has_stream else None, device)
        # Timings are pooled under the winner's key: the key holds no config-space
        # fingerprint, so a grown space finds the timings of its old candidates.
        timing_key = key
        store = _store.get_store()
        known = {} if forced else store.get_timings(self.name, timing_key)
        saved = [(t, t.clone()) for t in map(call.named.get, self.restore_value) if t is not None]

        def setup() -> None:
            for t, s in saved:
                t.copy_(s)
            self._zero(call)

        t0 = time.perf_counter()
        if events.enabled():
            events.emit("search_start", tuner=self.name, key=key, candidates=len(configs))
        log.info("%s: searching %d configs on %s/%s", self.name, len(configs), target.backend, target.arch)
        timings: list = []
        failures: list = []
        last_exc: Optional[BaseException] = None
        for i, config in enumerate(configs, 1):
            cjson = _store.canonical_config_json(config.to_dict()) if config.pre_hook is None else None
            # Only successes are reused: a stored failure may have been transient (OOM).
            reused = cjson is not None and known.get(cjson) is not None
            try:
                if reused:
                    ms = known[cjson]
                else:
                    ms = self._bench(config, call, target, snapshot, stream, setup)
                timings.append({"config": config.to_dict() if cjson else repr(config), "ms": ms, "error": None})
                log.info("%s: candidate %d/%d %s: %.4f ms%s", self.name, i, len(configs), config, ms,
                         " (stored timing)" if reused else "")
                if events.enabled():
                    events.emit("candidate", tuner=self.name, key=key, index=i, total=len(configs),
                                config=_config_repr(config), ms=ms, error=None, reused=reused)
            except Exception as exc:  # a failing candidate is reported and skipped
                last_exc = exc
                err = f"{type(exc).__name__}: {exc}"
                failures.append((config, err))
                timings.append({"config": config.to_dict() if cjson else repr(config), "ms": None, "error": err})
                log.warning("%s: candidate %d/%d %s failed: %s", self.name, i, len(configs), config, err)
                if events.enabled():
                    events.emit("candidate", tuner=self.name, key=key, index=i, total=len(configs),
                                config=_config_repr(config), ms=None, error=err, reused=reused)
        with streams.on_stream(stream):
            setup()  # the caller sees one clean run: restore inputs touched by the reps
        duration = time.perf_counter() - t0
        ok = [(t["ms"], i) for i, t in enumerate(timings) if t["ms"] is not None]
        if not ok:
            listing = "; ".join(f"{c}: {e}" for c, e in failures)
            raise AutotuneError(f"{self.name}: all {len(configs)} configs failed: {listing}") from last_exc
        best_ms, best_i = min(ok)
        winner = configs[best_i]
        log.info("%s: winner %s (%.4f ms) after %.2f s", self.name, winner, best_ms, duration)
        if events.enabled():
            events.emit("search_end", tuner=self.name, key=key, winner=_config_repr(winner), ms=best_ms,
                        duration_s=duration, candidates=timings)
        self._search_timings[key] = timings
        if winner.pre_hook is None:
            provenance = _provenance(target, kd, duration, self._space_fp)
            store.put(self.name, key, timing_key, winner.to_dict(),
                      [t for t in timings if isinstance(t["config"], dict)], provenance)
        return winner

    def _bench(self, config: Config, call: _Call, target: Target, snapshot: tuple, stream: Any, setup) -> float:
        def fn() -> Any:
            return self._run(config, call, target, snapshot, stream)

        with streams.on_stream(stream):
            if self.do_bench is not None:
                ms = self.do_bench(fn, setup=setup)
            else:
                ms = self.pm.hook.flyautotune_benchmark(
                    fn=fn, setup=setup, target=target, stream=stream, warmup=self.warmup, rep=self.rep
                )
        if ms is None:
            if self.do_bench is not None:
                raise TypeError(f"do_bench returned None; it must return the time of one launch in milliseconds")
            raise LookupError(f"no flyautotune_benchmark plugin times {target.backend} targets")
        ms = float(ms)
        if not ms == ms or ms < 0:  # NaN or negative: a broken benchmarker
            raise ValueError(f"benchmark returned {ms!r} ms")
        return ms

    def __repr__(self) -> str:
        return f"<flyautotune.Autotuner {self.name!r}>"

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)


def _names(what: str, names: Any) -> tuple:
    """``key=``-style arguments: one name or an iterable of names."""
    if isinstance(names, str):
        return (names,)
    try:
        out = tuple(names)
    except TypeError:
        raise TypeError(f"autotune: {what}= must be an argument name or a list of names, got {names!r}") from None
    for n in out:
        if not isinstance(n, str):
            raise TypeError(f"autotune: {what}= must hold argument names (str), got {n!r} in {names!r}")
    return out


def _paths(what: str, paths: Any) -> tuple:
    """``packs=``/``source_files=``: one path or an iterable of paths."""
    if isinstance(paths, (str, os.PathLike)):
        return (paths,)
    try:
        return tuple(paths)
    except TypeError:
        raise TypeError(f"autotune: {what}= must be a path or a list of paths, got {paths!r}") from None


def _first(pair: tuple) -> Any:
    return pair[0]


def _config_repr(config: Config) -> Any:
    return config.to_dict() if config.pre_hook is None else repr(config)


def _provenance(target: Target, kd: dict, duration: float, space_fp: Optional[str]) -> dict:
    from . import __version__

    device_name = platform.processor() or platform.machine()
    torch = sys.modules.get("torch")
    if target.backend != "cpu" and torch is not None:
        try:
            device_name = torch.cuda.get_device_name()
        except Exception:
            pass
    return {
        "device": device_name,
        "target": target.to_dict(),
        "toolchain": kd.get("backend", {}),
        "flyautotune": __version__,
        "when": time.time(),
        "search_s": round(duration, 6),
        "space": space_fp,
    }


def autotune(
    configs: Sequence[Config] | Callable[..., Sequence[Config]],
    key: Iterable[str] = (),
    name: Optional[str] = None,
    default: Optional[Callable[..., Config]] = None,
    prune_configs_by: Optional[Callable[..., Sequence[Config]]] = None,
    restore_value: Iterable[str] = (),
    reset_to_zero: Iterable[str] = (),
    do_bench: Optional[Callable[..., float]] = None,
    **options: Any,
) -> Callable[[Callable[..., Any]], Autotuner]:
    """Decorate a launch callable with config selection.

    :param configs: the search space, or a callable ``configs(**named_args)``
        evaluated only when a search runs.
    :param key: argument names whose values key a winner (a tensor gives its shape).
    :param name: the tuner's name in the store (default: module.qualname).
    :param default: ``default(**named_args) -> Config``, used on a miss without benchmarking.
    :param prune_configs_by: ``prune(configs, **named_args) -> configs`` before a search.
    :param restore_value: tensor args snapshotted once and restored before every rep.
    :param reset_to_zero: tensor args zeroed before every rep and before the real call.
    :param do_bench: ``do_bench(fn, setup=None) -> ms``; None = the backend's hook.
    :param options: ``hints=`` persistent compile hints, ``warmup=``, ``rep=``,
        ``packs=`` shipped JSON packs, ``source_files=`` extra files in the source fingerprint.
    """

    def decorator(fn: Callable[..., Any]) -> Autotuner:
        return Autotuner(
            fn, configs, key=key, name=name, default=default, prune_configs_by=prune_configs_by,
            restore_value=restore_value, reset_to_zero=reset_to_zero, do_bench=do_bench, **options,
        )

    return decorator
