"""``@autotune`` and the ``Autotuner`` it returns: the call paths and the memory of winners."""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import threading
import weakref
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from .. import hints as _hints, keys, streams
from ..config import Config, foreign_config
from ..context import open_hints
from ..devices import explain_interpreter_error
from ..scale.distributed import agreed_token
from ..targets import target_for
from . import env, fastpath, lookup, verify
from .binding import Call, Signature, memo_key, names_arg, optional_callable
from .checks import IncompatibleConfigError, check_caller
from .plan import Last, Plan, launch_stream, run_plan, zero
from .selection import Selection

log = logging.getLogger("flyautotune")


def _triton_kernel(fn: Any) -> Optional[str]:
    """The class name of a Triton kernel object (``@triton.jit``, ``@triton.autotune``, ``@triton.heuristics``,
    the interpreter's ``InterpretedFunction``), else None: they are launched as ``kernel[grid](...)``."""
    module = getattr(type(fn), "__module__", None) or ""
    if (module == "triton" or module.startswith("triton.")) and callable(getattr(fn, "run", None)):
        return type(fn).__name__
    return None


def _takes_keyword(fn: Callable[..., Any], name: str, unreadable: bool = True) -> bool:
    """Whether ``fn`` can be called with ``name=`` (``unreadable`` where its signature cannot be read)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return unreadable
    return any(p.kind is p.VAR_KEYWORD or (p.name == name and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
               for p in params)


def _required_unknown(fn: Callable[..., Any], sig: Signature, skip: int) -> Optional[str]:
    """The first parameter of ``fn`` after its first ``skip`` that needs a value and that no call of a launch
    of signature ``sig`` passes (no parameter of that name): ``fn(..., **named_args)`` can never be called."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    for p in params[skip:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        if p.kind is p.POSITIONAL_ONLY or p.name not in sig.sig.parameters:
            return p.name
    return None


def _paths(what: str, paths: Any) -> tuple:
    """``packs=``/``source_files=``: one path or an iterable of paths (a pack may also be a Traversable)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = (paths,)
    try:
        paths = tuple(paths)
    except TypeError:
        raise TypeError(f"autotune: {what}= must be a path or a list of paths, got {paths!r}") from None
    for path in paths:
        # bytes would be read as pack text, a number as nothing: each was skipped or failed only at a call
        if not isinstance(path, (str, os.PathLike)) and not (what == "packs" and hasattr(path, "read_bytes")):
            also = " or importlib.resources Traversables" if what == "packs" else ""
            raise TypeError(f"autotune: {what}= holds {path!r} ({type(path).__name__}); accepted: paths "
                            f"(str or os.PathLike){also}")
    return paths


def _source_files(paths: Any) -> tuple:
    """``source_files=``: paths of existing files. A missing one (a typo, a path relative to another working
    folder) would enter the fingerprint as missing, and editing the real file would never drop its winners."""
    paths = _paths("source_files", paths)
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"autotune: source_files= holds {os.fspath(path)!r}, which is not a file "
                                    f"(relative paths are read from the working folder, {os.getcwd()!r}); give "
                                    f"the path of a kernel file, such as kernels.__file__")
    return paths


#: Untimed launches before each timing, and graph replays (or timed launches) per timing, unless the tuner
#: is given ``warmup=``/``rep=``.
WARMUP = 5
REP = 20


class Autotuner:
    """A launch callable wrapped with config selection; see :func:`autotune`."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "Autotuner":
        # Each tuner is the one instance of its own subclass, so the cache-hit path generated for its
        # first arity can be its ``__call__`` (``fastpath``): one Python frame less on every hit.
        own = type(cls.__name__, (cls,), {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                                          "__slots__": (), "_own_class": True})
        return super().__new__(own)

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
        warmup: Optional[int] = None,
        rep: Optional[int] = None,
        packs: Iterable[str] | Callable[[], Iterable[str]] = (),
        source_files: Iterable[str] = (),
        plugin_manager: Any = None,
        check: Any = True,
        tolerance: Any = None,
        validate: Optional[Callable[..., Any]] = None,
        max_search_s: Optional[float] = None,
        precompile: Optional[Callable[..., Any]] = None,
        specialize: Optional[Callable[..., Any]] = None,
        outputs: Iterable[str] = (),
    ) -> None:
        if not callable(fn):
            raise TypeError(f"autotune: the decorated object must be callable, got {fn!r}")
        kernel = _triton_kernel(fn)
        if kernel is not None:
            raise TypeError(
                f"autotune: {getattr(fn, '__name__', fn)!r} is a Triton kernel ({kernel}), not a launch: flyautotune "
                f"wraps the Python function that launches the kernel. Write, for example:\n"
                f"    @fat.autotune(configs=[fat.Config(BLOCK_SIZE=64, num_warps=4), ...], key=['n_elements'])\n"
                f"    def launch(x, y, out, n_elements, BLOCK_SIZE=None):\n"
                f"        grid = lambda META: (triton.cdiv(n_elements, META['BLOCK_SIZE']),)\n"
                f"        kernel[grid](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE, **fat.lower_compile_hints())\n"
                f"and call launch(x, y, out, n_elements): a config's kwargs arrive as the launch's parameters, and "
                f"its num_warps/num_stages reach Triton through fat.lower_compile_hints() (docs/autotune.md, "
                f"'Coming from @triton.autotune')")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise TypeError(f"autotune: name={name!r}; expected a non-empty string (the tuner's name in the store)")
        self.fn = fn
        functools.update_wrapper(self, fn)
        self.name = name or f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        self.sig = Signature(fn, self.name)
        if not (callable(configs) or isinstance(configs, (list, tuple))):
            raise TypeError(f"autotune: configs must be a list of Config or a callable, got {configs!r}")
        if not callable(configs):
            if not configs:
                raise ValueError(f"autotune({self.name!r}): configs is empty; give at least one Config, or a "
                                 f"callable that returns the space for each call")
            for c in configs:
                if not isinstance(c, Config):
                    raise TypeError(f"autotune: configs must hold flyautotune.Config objects, {foreign_config(c)}")
        self.configs = configs
        self.key = names_arg("key", key)
        for k in self.key:
            if k not in self.sig.sig.parameters and not self.sig.var_kw:
                raise ValueError(f"autotune({self.name!r}): key argument {k!r} is not a parameter of "
                                 f"{self.sig.describe()}")
            tuned = [] if callable(configs) else [c for c in configs if k in c.kwargs]
            if tuned:
                raise ValueError(f"autotune({self.name!r}): key argument {k!r} is a knob the configs set "
                                 f"({tuned[0]}); the key names call arguments that pick the winner, such as sizes")
        self.restore_value = self._check_names("restore_value", restore_value)
        self.reset_to_zero = self._check_names("reset_to_zero", reset_to_zero)
        self.outputs = self._check_names("outputs", outputs)
        for n in self.outputs:
            if n in self.restore_value or n in self.reset_to_zero:
                raise ValueError(f"autotune({self.name!r}): outputs names {n!r}, which restore_value or reset_to_zero "
                                 f"also names; outputs= is for tensors the launch only writes (it reads none of them)")
        self.default = optional_callable("default", default)
        if isinstance(prune_configs_by, Mapping):
            raise TypeError(
                f"autotune({self.name!r}): prune_configs_by= takes one callable, prune(configs, **named_args) -> "
                f"configs, got the mapping {prune_configs_by!r} (@triton.autotune's form, with its keys "
                f"early_config_prune, perf_model and top_k). Pass one function that does what they did: "
                f"prune_configs_by=lambda configs, **named: early_config_prune(configs, named), and rank by a "
                f"performance model and keep the top k in the same function if you used them")
        self.prune_configs_by = optional_callable("prune_configs_by", prune_configs_by)
        if prune_configs_by is not None and not self.sig.var_kw:
            stray = _required_unknown(prune_configs_by, self.sig, skip=1)
            if stray is not None:
                raise TypeError(
                    f"autotune({self.name!r}): prune_configs_by={prune_configs_by!r} requires the argument "
                    f"{stray!r}, which is not a parameter of {self.sig.describe()}: it is called "
                    f"prune(configs, **named_args), each call argument by its name. For @triton.autotune's "
                    f"early_config_prune(configs, named_args, **kwargs) pass "
                    f"prune_configs_by=lambda configs, **named: early_config_prune(configs, named)")
        self.do_bench = optional_callable("do_bench", do_bench)
        if do_bench is not None and not _takes_keyword(do_bench, "setup"):
            raise TypeError(
                f"autotune({self.name!r}): do_bench={do_bench!r} takes no setup= argument; the tuner calls "
                f"do_bench(fn, setup=None) -> milliseconds, where setup (when not None) must run untimed before "
                f"every timed fn() (it restores the restore_value= tensors and zeroes the reset_to_zero= ones). "
                f"Triton's do_bench has no setup: do_bench=lambda fn, setup=None: triton.testing.do_bench("
                f"fn if setup is None else lambda: (setup(), fn())) times setup with each launch, as "
                f"@triton.autotune times its reset_to_zero")
        self.validate = optional_callable("validate", validate)
        self.precompile = optional_callable("precompile", precompile)
        self.specialize = optional_callable("specialize", specialize)
        self._specialize_warned = False  # a failing specialize= is reported once per tuner
        self._stale_pack_warned = False  # a pack tuned from another version of the source: said once
        self._pre_hook_warned = False  # a winner with a pre_hook is not stored: said once
        self.check = verify.check_arg(check)
        self.tolerance = verify.tolerance_arg(tolerance)
        if max_search_s is not None and (isinstance(max_search_s, bool) or not isinstance(max_search_s, (int, float))
                                         or not max_search_s > 0):
            raise ValueError(f"autotune: max_search_s={max_search_s!r}; expected seconds > 0, or None (no budget)")
        self.max_search_s = max_search_s
        if hints is not None and not isinstance(hints, Mapping):
            raise TypeError(f"autotune: hints= must be a mapping of hint name -> value, got {hints!r}")
        self.hints = _hints.normalize_hints(hints)
        self._hint_base = _hints.merge_hints(self.hints)
        given = {arg: value for arg, value in (("warmup", warmup), ("rep", rep)) if value is not None}
        warmup = WARMUP if warmup is None else warmup
        rep = REP if rep is None else rep
        for arg, value, least in (("warmup", warmup, 0), ("rep", rep, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"autotune: {arg} must be an int >= {least}, got {value!r}")
        self.warmup = warmup
        self.rep = rep
        takes = () if do_bench is None else tuple(
            arg for arg in ("warmup", "rep") if _takes_keyword(do_bench, arg, unreadable=False))
        #: the timing options given to the tuner that its do_bench takes (read once: measure() passes them);
        #: not given, the do_bench's own defaults stand (the tuner's are counts, Triton's milliseconds)
        self._bench_keywords = tuple(arg for arg in takes if arg in given)
        ignored = [f"{arg}={value!r}" for arg, value in given.items() if do_bench is not None and arg not in takes]
        if ignored:
            log.warning("%s: %s %s ignored: do_bench=%r takes no %s keyword, and the tuner passes warmup= and rep= "
                        "only to a do_bench that accepts them (do_bench(fn, setup=None, warmup=..., rep=...) -> ms, "
                        "the names triton.testing.do_bench uses; or **kwargs). Accept them in your do_bench, or "
                        "leave them out of autotune(...)", self.name, " and ".join(ignored),
                        "is" if len(ignored) == 1 else "are", do_bench,
                        " or ".join(f"{a.split('=')[0]}=" for a in ignored))
        self._packs = packs if callable(packs) else _paths("packs", packs)
        self._source_files = tuple(keys.source_files(fn)) + _source_files(source_files)
        self.source_fingerprint = keys.file_fingerprint(self._source_files)
        self._pm = plugin_manager
        self._space_fp: Optional[str] = None
        #: the knobs of a static space: its callables get them only where the caller passed them
        self._knobs = frozenset() if callable(configs) else frozenset(k for c in configs for k in c.kwargs)
        self._takes: dict = {}  # id(callable) -> (callable, the keyword names it takes or None): lookup.named_for
        if not callable(configs):
            self._space_fp = keys.canonical_json([c.to_dict() if c.pre_hook is None else repr(c) for c in configs])
        self._locks_guard = threading.Lock()
        self._picking = threading.local()  # the memo keys this thread is picking a config for (a cold lookup)
        self._last = Last(None, None)
        self.search_count = 0
        self._fast_ok = not (self.sig.var_pos or self.sig.var_kw)
        self.clear()
        _warn_shared_name(self)
        _TUNERS.add(self)

    def _check_names(self, what: str, names: Iterable[str]) -> tuple:
        names = names_arg(what, names)
        for n in names:
            if n not in self.sig.sig.parameters:
                raise ValueError(f"autotune({self.name!r}): {what} names {n!r}, which is not a parameter of "
                                 f"{self.sig.describe()}")
        return names

    def clear(self) -> None:
        """Forget this process's winners, refusals and failures (the store is untouched)."""
        self._memo: dict = {}
        # plans agreed in another group than the innermost fat.distributed block's: set aside at its entry,
        # back in memory when a block of their group is entered again ({token: {memo key: plan}})
        self._held: dict = {}
        self._locks: dict = {}
        self._refused: set = set()  # keys whose stored/shipped winner the launcher refused
        self._failed: dict = {}  # keys whose every candidate failed: not searched again in this process
        self._fast: dict = {}  # generated cache-hit paths, one per positional arity
        own = type(self)
        if own.__dict__.get("_own_class") and "__call__" in own.__dict__:
            del own.__call__  # the first arity's generated path, if any, was this class's __call__
        self._fast_memo: dict = {}
        self._env_size = env.environment_size()
        self._cache_dir = env.cache_dir_setting()
        self._forced = env.force_search()

    @property
    def last_source(self) -> Optional[str]:
        """Where the last call's config came from: memory, store, pack, default or search."""
        return self._last.source

    @property
    def last_config(self) -> Optional[Config]:
        """The config the last call ran (or resolved)."""
        return self._last.config

    @property
    def pm(self) -> Any:
        if self._pm is None:
            from ..plugins import plugin_manager

            return plugin_manager()
        return self._pm

    def store(self) -> Any:
        """The tuning store the plugins provide (``flyautotune_store``)."""
        store = self.pm.hook.flyautotune_store()
        if store is None:
            raise LookupError("no flyautotune_store plugin provides a store (is flyautotune.store disabled?)")
        return store

    def find_in_packs(self, key: str) -> Any:
        from .. import store as _store

        packs = list(_paths("packs", self._packs() if callable(self._packs) else self._packs))
        found = _store.find_in_packs(packs, self.name, key)
        if found is None and packs and not self._stale_pack_warned:
            stale = _store.pack_with_other_source(packs, self.name, key)
            if stale is not None:  # said once a process: every shape of such a pack misses alike
                self._stale_pack_warned = True
                log.warning("%s: the tuning pack %s has a winner for this call, but tuned from another version "
                            "of the kernel's source (fingerprint %s, now %s): it is not used. Tune and export "
                            "the pack again after editing the kernel", self.name, stale[0], stale[1],
                            json.loads(key).get("source"))
        return found

    def check_winner(self, config: Mapping[str, Any], key: Optional[str] = None) -> Config:
        """Check a winner from a pack or store file without a call (what ``flyautotune import`` does):
        only tunable names, plain values, and, where the key's arguments allow it, a member of the
        space (or the default) that ``validate=`` accepts.

        :param config: the winner in ``Config.to_dict()`` form.
        :param key: the entry's key (canonical JSON); its ``args`` stand in for the call's arguments.
        :returns: the winner as a ``Config``.
        :raises IncompatibleConfigError: naming what is not allowed.
        """
        from .checks import UntrustedConfigError, check_untrusted, same_config, tunable_names

        try:
            winner = Config.from_dict(config)
        except (TypeError, ValueError) as exc:
            raise UntrustedConfigError(f"{self.name}: not a config: {exc}") from None
        named: dict = {}
        if key is not None:
            try:
                args = json.loads(key).get("args", {})
                named = dict(args) if isinstance(args, dict) else {}
            except (ValueError, AttributeError):
                named = {}
        static = None if callable(self.configs) else list(self.configs)
        default = members = None
        try:  # the key's arguments may not be all the callables need: check what can be checked
            default = self.default(**named) if self.default is not None else None
            members = static if static is not None or self.validate is not None else list(self.configs(**named))
        except Exception:
            members = static
        if default is not None and same_config(winner, default):
            members = None
        check_untrusted(self.name, self.sig, winner, tunable=tunable_names(static if static is not None else members,
                                                                            default),
                        members=members, validate=self.validate if named else None, named=named,
                        known=list(static or ()) + ([default] if default is not None else []))
        return winner

    def _snapshot(self) -> tuple:
        merged = open_hints()
        if not self._hint_base:
            return _hints.hint_key(merged) if merged else ()
        return _hints.hint_key(_hints.merge_hints(self._hint_base, merged))

    # -- call paths ---------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._dispatch(args, kwargs)

    def _dispatch(self, args: tuple, kwargs: dict) -> Any:
        if not kwargs:
            fast = self._fast.get(len(args))
            if fast is not None:
                return fast(args)
        elif len(kwargs) == 1 and "stream" in kwargs:  # a hit with a stream: the generated path's own form
            fast = self._fast.get(len(args))
            if fast is not None and fast.on_stream is not None:
                return fast.on_stream(args, kwargs["stream"])
        return self._call(args, kwargs)

    def _call(self, args: tuple, kwargs: dict) -> Any:
        call = self.sig.bind(args, kwargs)
        plan = self._select(call)
        if plan.kwargs and (len(args) > plan.min_pos or not plan.kwargs.keys().isdisjoint(kwargs)):
            check_caller(self.name, self.sig, [plan.config], call)  # the same answer as on a cold key
        if self._fast_ok and (not kwargs or (len(kwargs) == 1 and "stream" in kwargs)):
            # a stream-only keyword call fills the generated path too (its hits take ``on_stream``)
            fastpath.remember(self, args, plan, call)
        # An omitted stream stays None: the launch's own current stream, where the zeroing below runs too.
        stream = launch_stream(self.sig, call)
        alone = None
        with streams.on_stream(stream):
            if self.reset_to_zero:
                zero(self.reset_to_zero, call)
            try:
                return run_plan(self.fn, self.sig, plan, call, stream)
            except IncompatibleConfigError as exc:
                if plan.source not in ("store", "pack"):
                    raise
                if plan.agreed is not None and plan.agreed == agreed_token():
                    alone = self._run_alone(plan, exc, call)
                else:
                    self._forget(plan, exc)
            except Exception as exc:
                explain_interpreter_error(exc)
                raise
        result = self._call(args, kwargs)
        if alone is not None:  # answered from memory, where this rank put what it runs instead
            self._last = Last(alone.config, "default")
        return result

    def _forget(self, plan: Plan, exc: BaseException) -> None:
        """A stored/shipped winner the launcher refused: drop it (once, with a warning) and choose again."""
        log.warning("%s: the %s winner %s no longer fits the kernel (%s); dropping it and using the default",
                    self.name, plan.source, plan.config, exc)
        self._refused.add(plan.key)
        if plan.source == "store":
            self.store().delete(self.name, plan.key)
        self._memo = {k: v for k, v in self._memo.items() if v is not plan}
        self._drop_fast(plan)

    def _run_alone(self, plan: Plan, exc: BaseException, call: Call) -> Plan:
        """Inside ``fat.distributed``: the launcher refused the winner the group agreed on, on this rank only
        (the others ran it). This rank runs what the group runs when it cannot answer (the default, else the
        space's first config) for the key, without asking the group again: the others answer from memory
        and would never join that collective."""
        fallback = lookup.fallback_config(self, call)
        log.warning("%s: the group's %s winner %s does not fit the kernel on this rank (%s); this rank runs %s for "
                    "this key, and the other ranks keep the group's winner. Drop the winner from rank 0's store "
                    "(flyautotune clear) or tune the key again (FLYAUTOTUNE=1) so that every rank runs one config",
                    self.name, plan.source, plan.config, exc, fallback)
        self._refused.add(plan.key)
        store = self.store()
        entry = store.get(self.name, plan.key) if plan.source == "store" else None
        try:
            own = entry is not None and Config.from_dict(entry.config) == plan.config
        except (TypeError, ValueError):
            own = False
        if own:  # this rank's own copy of the winner (not another winner this rank's store holds)
            store.delete(self.name, plan.key)
        alone = Plan(fallback, plan.target, "default", self._snapshot(), self._pm, plan.key,
                     Selection(fallback, "default", plan.key))
        alone.min_pos = _min_pos(self.sig, alone.kwargs)
        alone.agreed = plan.agreed  # what this rank answers from memory in this group, as the others do
        _entered["dirty"] = True
        self._memo = {k: (alone if v is plan else v) for k, v in self._memo.items()}
        self._drop_fast(plan)
        return alone

    def _drop_fast(self, plan: Plan) -> None:
        """Forget the cache-hit paths' entries that run ``plan`` (in place: the C path holds this dict)."""
        for key in [k for k, entry in self._fast_memo.items() if entry[1] is plan]:
            self._fast_memo.pop(key, None)

    def resolve_config(self, *args: Any, **kwargs: Any) -> Config:
        """The config a call with these arguments would run (tuning if needed), without launching it."""
        return self._select(self.sig.bind(args, kwargs)).config

    def select(self, *args: Any, force: bool = False, **kwargs: Any) -> Selection:
        """Pick the config a call with these arguments runs (tuning if needed), without launching it.

        :param force: search afresh and replace the stored winner (as ``FLYAUTOTUNE=1`` does).
        :returns: a :class:`Selection`: config, source, key and the search's timings.
        """
        if not isinstance(force, bool):
            raise TypeError(f"{self.name}.select: force={force!r} must be True or False")
        call = self.sig.bind(args, kwargs)
        plan = self._select(call, force=force)
        if plan.kwargs:
            check_caller(self.name, self.sig, [plan.config], call)  # what the call would say
        if self._last.source == "memory":
            return plan.selection.with_source("memory")
        return plan.selection

    def _refresh_env(self) -> bool:
        """Re-read the core's variables after the environment changed; True when forced."""
        size = env.environment_size()
        if size != self._env_size:
            self._env_size = size
            self._forced = env.force_search()
            cache_dir = env.cache_dir_setting()
            if cache_dir != self._cache_dir:  # another store: this process's winners came from the old one
                self._memo = {}
                self._held = {}
                self._fast_memo.clear()
                self._cache_dir = cache_dir
            self._fast_memo.clear()  # a forced search must not be skipped by the fast path
        return self._forced

    def _select(self, call: Call, force: bool = False) -> Plan:
        forced = self._refresh_env() or force
        snapshot = self._snapshot()
        mkey = memo_key(self.name, self.key, call, snapshot)
        plan = self._memo.get(mkey)
        if plan is not None and (not forced or (not force and _answered(plan))):
            self._last = plan.hit
            return plan
        picking = self._picking.__dict__.setdefault("keys", set())
        if mkey in picking:  # this thread holds the key's lock: waiting for it would never end
            raise RuntimeError(f"{self.name}: called again, with the same key, while it picks that key's config in "
                               f"this thread (from its launch, default=, configs=, check= or another callable of "
                               f"the tuner during the search): there is no config for the key yet. Call the "
                               f"undecorated function (or a reference implementation) there instead")
        with self._lock_for(mkey):
            plan = self._memo.get(mkey)
            if plan is not None and (not forced or (not force and _answered(plan))):
                self._last = plan.hit
                return plan
            target = target_for(call.device, self.pm)
            picking.add(mkey)
            try:
                selection = lookup.select_cold(self, call, target, snapshot, forced)
            finally:
                picking.discard(mkey)
            plan = Plan(selection.config, target, selection.source, snapshot, self._pm, selection.key, selection)
            plan.min_pos = _min_pos(self.sig, plan.kwargs)
            plan.agreed = agreed_token()  # inside fat.distributed every cold lookup is the group's collective
            if plan.agreed != _entered["token"]:
                _entered["dirty"] = True  # the next block's entry has this plan to sort
            if self._memo.get(mkey) is not None:  # a forced search replaced a plan: its cache hits must not run
                self._drop_fast(self._memo[mkey])  # the old one (the generated and C paths read this memo)
            self._memo[mkey] = plan
            self._last = Last(selection.config, selection.source)
        with self._locks_guard:  # the memo answers from now on; waiters hold their own reference
            self._locks.pop(mkey, None)
        return plan

    def _lock_for(self, mkey: tuple) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(mkey)
            if lock is None:
                lock = self._locks[mkey] = threading.Lock()
            return lock

    def __repr__(self) -> str:
        return f"<flyautotune.Autotuner {self.name!r}>"

    def __getitem__(self, grid: Any) -> Any:
        # kernel[grid](...) is how a Triton kernel (and @triton.autotune's) is launched; a tuned launch is not one
        raise TypeError(f"{self.name}: a tuned launch is called as it is, {self.sig.fn_name}(...), not "
                        f"{self.sig.fn_name}[grid](...): launch the Triton kernel inside it, with its grid "
                        f"computed there from the config's kwargs (kernel[lambda META: ...](..., **config "
                        f"kwargs)); see docs/autotune.md, 'Coming from @triton.autotune'")

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)


#: Every live tuner, so ``flyautotune.clear_caches()`` reaches their memories.
_TUNERS: "weakref.WeakSet" = weakref.WeakSet()


#: (name, function, other function) pairs already warned about: said once a process.
_SHARED_NAME_WARNED: set = set()


def _function_name(fn: Any) -> str:
    """``module.qualname`` of a launch callable (of its type, for a callable object without one)."""
    owner = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(owner, '__module__', None) or '?'}.{getattr(owner, '__qualname__', None) or repr(owner)}"


def _warn_shared_name(tuner: "Autotuner") -> None:
    """Warn (once) when a live tuner of another function already has this tuner's name: the store files
    winners by name and key, and the key does not tell the two apart where they share a source file, so
    each would run the other's winners. The same function decorated again (a notebook cell re-run, a
    module imported again) is the same tuner renewed, and is not warned about."""
    mine = _function_name(tuner.fn)
    for other in list(_TUNERS):
        if other.name != tuner.name:
            continue
        theirs = _function_name(other.fn)
        if theirs == mine or (tuner.name, mine, theirs) in _SHARED_NAME_WARNED:
            continue
        _SHARED_NAME_WARNED.add((tuner.name, mine, theirs))
        log.warning("%s: two tuners of different functions have this name=: %s and %s. Winners are shared by "
                    "name: the store files them by name and key, so each launch runs the configs tuned for the "
                    "other (and show, export and clear take them as one). Give each launch its own name= "
                    "unless both run the same kernel", tuner.name, theirs, mine)
        return


def clear_all() -> None:
    """``clear()`` every live tuner."""
    for tuner in list(_TUNERS):
        tuner.clear()


#: the group the last ``forget_unagreed`` sorted the memories for, and whether a plan of another group (or of
#: none) has been made since: entering the same group's block again, every step, then has nothing to scan
_entered: dict = {"token": object(), "dirty": True}


def forget_unagreed(token: int) -> None:
    """Entering (or returning to) a ``fat.distributed`` block of the group ``token`` names: every live tuner's
    memory holds only the plans agreed in that group, so each other key's next lookup is the group's
    collective. Plans agreed in another group are set aside, not dropped: a block of a subgroup inside the
    job's block (entered by its members only) must not cost them the job-wide plans, which the other ranks
    still answer from memory, and returning to that subgroup answers its keys from memory again."""
    if token == _entered["token"] and not _entered["dirty"]:
        return
    _entered["token"], _entered["dirty"] = token, False  # before the scan: a plan made meanwhile marks it again
    for tuner in list(_TUNERS):
        held = tuner._held
        back = held.pop(token, None)
        stale = [(k, plan) for k, plan in list(tuner._memo.items()) if plan.agreed != token]
        if not stale and not back:
            continue
        dropped = set()
        for k, plan in stale:
            if tuner._memo.pop(k, None) is not None:
                dropped.add(id(plan))
                if plan.agreed is not None:
                    held.setdefault(plan.agreed, {})[k] = plan
        for k, plan in (back or {}).items():
            tuner._memo.setdefault(k, plan)
        for k in [k for k, entry in list(tuner._fast_memo.items()) if id(entry[1]) in dropped]:
            tuner._fast_memo.pop(k, None)  # in place: the C path holds this dict


def _answered(plan: Plan) -> bool:
    """Whether ``FLYAUTOTUNE=1`` keeps ``plan`` (``select(force=True)`` keeps none): a search's winner, or inside
    ``fat.distributed`` the group's answer in this group. Whether the group searches is rank 0's decision; a
    rank with ``FLYAUTOTUNE=1`` that asked again would ask alone, while the others answer from memory."""
    if plan.source == "search":
        return True
    return plan.agreed is not None and plan.agreed == agreed_token()


def _min_pos(sig: Signature, kwargs: dict) -> int:
    """The first positional slot a tuned kwarg occupies (calls with fewer positional args cannot clash)."""
    return min((sig.positional.index(k) for k in kwargs if k in sig.positional), default=1 << 30)


def autotune(configs: Sequence[Config] | Callable[..., Sequence[Config]], *args: Any,
             **options: Any) -> Callable[[Callable[..., Any]], Autotuner]:
    """Decorate a launch callable with config selection: ``Autotuner(fn, configs, ...)``.

    :param configs: the search space, or a callable ``configs(**named_args)``
        evaluated only when a search runs.
    :param key: argument names whose values key a winner (a tensor gives its shape).
    :param name: the tuner's name in the store (default: module.qualname).
    :param default: ``default(**named_args) -> Config``, used on a miss without benchmarking.
    :param prune_configs_by: ``prune(configs, **named_args) -> configs`` before a search.
    :param restore_value: tensor args snapshotted once and restored before every rep.
    :param reset_to_zero: tensor args zeroed before every rep and before the real call.
    :param do_bench: your own timing, ``do_bench(fn, setup=None) -> ms``, in place of the backend's hook
        (None): ``fn`` runs one launch, ``setup`` (when not None) must run untimed before every timed
        ``fn()``; it returns one launch's milliseconds (a number, or a :class:`Measurement`). One that also
        takes ``warmup=`` and ``rep=`` as keywords (or ``**kwargs``) is given those passed to the tuner
        (not given, its own defaults stand): ``rep`` is the first pass's share of it there, all of it in
        the re-timing rounds. As with the hook, a search
        with a default calls it for every candidate, then for the default and the two best challengers
        once each in 2 to 6 interleaved rounds, and keeps the default unless a challenger beats it by more
        than the noise those rounds show (at least 0.5 % for a bare number, which has no spread).
    :param outputs: tensor args the launch only writes (its outputs). A search times each candidate over
        rotated copies of the other tensors (cold in the caches, as inputs are in real use); outputs are
        not copied, so every timed launch writes the caller's buffer, as an output allocated per call
        usually lands in the block the previous call freed, still in L2. Default: none (every tensor
        argument is rotated, outputs written cold).
    :param options: the rest of :class:`Autotuner`'s keyword arguments: ``hints=``
        persistent compile hints, ``warmup=`` (default 5), ``rep=`` (default 20; graph replays or timed
        launches per timing: each re-timing round of the finalists takes all of them, the first pass over
        every candidate half, at least 5; a ``do_bench`` that takes them gets them where given), ``packs=`` shipped JSON
        packs, ``source_files=`` extra files in the source fingerprint,
        ``check=`` (True: compare each candidate's outputs with the default's;
        False; or ``check(result, **named)``), ``tolerance=`` ((rtol, atol) or
        per dtype), ``validate=`` (``validate(config, **named)`` for stored and
        shipped winners), ``max_search_s=`` (a search's time budget),
        ``precompile=`` (``precompile(config, **named)`` compiles a candidate without
        launching it; a search runs it for every candidate in a thread pool, ahead
        of the timing), ``specialize=`` (``specialize(config, **named)`` returns a
        callable that runs calls with the same key under ``config`` as
        ``fn(*args, **config.kwargs)`` would, with the config's work done once; cache
        hits call it; None there means "use fn"), ``plugin_manager=``.
    """
    for option in options:
        if option in _TRITON_ONLY and option not in _TUNER_SIGNATURE.parameters:
            raise TypeError(f"autotune: got an unexpected keyword argument {option!r}: {_TRITON_ONLY[option]}")
    try:  # a misspelled option fails here, where it was written, not at decoration
        _TUNER_SIGNATURE.bind(None, None, configs, *args, **options)
    except TypeError as exc:
        raise TypeError(f"autotune: {exc}") from None

    def decorator(fn: Callable[..., Any]) -> Autotuner:
        return Autotuner(fn, configs, *args, **options)

    return decorator


_TUNER_SIGNATURE = inspect.signature(Autotuner.__init__)

#: @triton.autotune's options that this tuner does not take, and what does their work here.
_TRITON_ONLY = {
    "pre_hook": "@triton.autotune's pre_hook(args, reset_only=False), run before every benchmarked launch, has no "
                "counterpart here: restore_value= and reset_to_zero= do what Triton's own one does; for other work "
                "before each run give the configs a pre_hook (Config(..., pre_hook=fn): fn gets one dict, the launch's "
                "arguments and the config's kwargs by name, before every run, timed ones and cache hits alike)",
    "post_hook": "@triton.autotune's post_hook(args, exception), run after every benchmarked launch, has no "
                 "counterpart here: the tuner restores the restore_value= tensors itself; other work after each "
                 "timed run belongs in a do_bench= of your own (do_bench(fn, setup=None) -> ms)",
    "use_cuda_graph": "the GPU backends time by CUDA/HIP-graph replay wherever capture works, with no option "
                      "(docs/autotune.md, 'How a search decides')",
    "cache_results": "winners are always kept, across processes, in the user's tuning store (FLYAUTOTUNE_CACHE_DIR "
                     "moves it; docs/store.md)",
}
# help(autotune) shows Autotuner's own arguments (less self and fn): one signature, declared once.
autotune.__signature__ = _TUNER_SIGNATURE.replace(  # type: ignore[attr-defined]
    parameters=list(_TUNER_SIGNATURE.parameters.values())[2:])
