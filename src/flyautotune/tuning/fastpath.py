"""The generated cache-hit path.

A cache hit in the general path binds every argument by name and builds the
sorted key: microseconds of Python. For the common spelling (positional
arguments only, the same argument types as before) a function generated for
that arity checks the types, looks up the key values and the open
compile_hints block's key, checks the call's tensors with one C call (torch's
own tensor checks, see :func:`tensor_guards`), and launches the prepared plan.
A tensor that fails its check falls back to the full key: the key values, each
tensor's dtype and raw strides and the first one's device (finer than the
stored key, so never wrong), which also serves every hit where torch has no
such checks. Anything unusual (keywords, other types, a changed environment)
takes the general path, which also fills this one.

The first arity a tuner sees becomes its ``__call__`` (each tuner is an
instance of its own subclass, see ``Autotuner.__new__``), with positional-only
parameters: a hit runs in one Python frame over the launch's and builds no
argument tuple. A plan whose launch ``specialize=`` made, with no hints on
either side, is called directly: ``specialize`` ran inside the launch context
(target and hints current), so what it returned needs none. Other arities keep
a generated function of their own, looked up by arity.

Where the core's optional C extension was built (``_hit.c``), the first arity's ``__call__`` is a
``HitPath`` instead: the same checks, key, memo and tensor checks in C (``make_entry``'s spec for
in-place and alternating calls), the direct launch or ``direct_stream``; it calls the generated
``call`` for anything else.
"""

from __future__ import annotations

import inspect
import logging
import operator
import os
import sys
from typing import Any, Callable, Optional, Sequence

from .. import context, keys, streams
from . import env, tcheck
from .binding import Call
from .callables import named_for

log = logging.getLogger("flyautotune")

#: Shapes that never repeat must not grow memory forever.
MAX_ENTRIES = 4096


def remember(tuner: Any, args: tuple, plan: Any, call: Call) -> None:
    """Make later calls with this arity, these types and this key take the fast path (``call``: the call
    as the general path bound it, positional arguments and at most ``stream=``; ``specialize=`` receives
    its arguments, :func:`specialize_args`)."""
    if plan.config.pre_hook is not None or len(args) > plan.min_pos:
        return
    n = len(args)
    fast = tuner._fast.get(n)
    if fast is None:
        fast = build(tuner, args)
        if fast is None:
            return
        tuner._fast[n] = fast
        own = type(tuner)
        if own.__dict__.get("_own_class") and "__call__" not in own.__dict__:
            own.__call__ = fast.native or fast.call
    elif tuple(map(type, args)) != fast.types:
        return  # hits check these types; key values of others (True for 1) would file the plan under theirs
    key = fast.key(args)
    if key is not None and plan.bound is None:
        bound = None
        if tuner.specialize is not None:
            try:  # inside the launch context: it may resolve what depends on the target and the hints
                bound = context.launch_with(plan.layers, plan.launch, tuner.specialize, (plan.config,),
                                            specialize_args(tuner, call))
            except Exception as exc:  # the launch itself serves this key's hits (said once per tuner)
                if not tuner._specialize_warned:
                    tuner._specialize_warned = True
                    log.warning("%s: specialize(%s) failed (%s: %s); cache hits call the launch itself", tuner.name,
                                plan.config, type(exc).__name__, exc)
            if bound is not None and not callable(bound):
                raise TypeError(f"{tuner.name}: specialize= returned {bound!r}; expected a callable or None")
        plan.bound, plan.bound_kwargs = (bound, {}) if bound is not None else (tuner.fn, plan.kwargs)
        plan.direct = bound if bound is not None and not plan.layers else None
        plan.direct_stream = (plan.direct if plan.direct is not None and tuner.sig.has_stream
                              and not tuner.reset_to_zero and takes_stream(plan.direct) else None)
    if key is not None:
        if len(tuner._fast_memo) > MAX_ENTRIES:
            tuner._fast_memo.clear()
        entry = make_entry(fast.guard(args), plan)  # (the check of these tensors or None, the plan, its spec)
        tuner._fast_memo[key] = entry
        if fast.short is not None:
            tuner._fast_memo[fast.short(args)] = entry


def specialize_args(tuner: Any, call: Call) -> dict:
    """What ``specialize(config, **named)`` receives for the hits ``call`` fills: the call's arguments as
    the tuner's other callables get them (:func:`~.callables.named_for`: not the knobs). A ``stream=``
    keyword is no argument of those hits (they pass their own, or none): the stream's default stands in
    for it, and is left out, as any default, where ``specialize`` takes no ``stream``. Once per plan."""
    if call.kwargs:  # ``stream=``, the one keyword a call that fills this path may pass
        call = Call(call.args, {}, {**call.named, "stream": tuner.sig.defaults.get("stream")}, call.device,
                    call.tensors, call.layout)
    return named_for(tuner, tuner.specialize, call)


def takes_stream(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` (what ``specialize=`` returned) has a ``stream`` parameter that can be passed by name:
    then it launches on the stream it is given, and hits with ``stream=`` call it too."""
    try:
        param = inspect.signature(fn).parameters.get("stream")
    except (TypeError, ValueError):  # a callable without a signature: it serves only hits without a stream
        return False
    return param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)


_guards: Any = None


def tensor_guards() -> Optional[Callable[..., Any]]:
    """A maker of torch's C tensor checks (``TensorGuards``, what ``torch.compile`` checks its inputs
    with), or None where torch lacks them or they do not behave as this module relies on.

    ``make(tensors)`` returns ``check(*tensors) -> bool``: True only for tensors of the same count,
    dtypes, devices, dispatch keys (so device types), ``requires_grad``, dimensions and strides as
    ``tensors`` (sizes free), False for anything else, non-tensors included. That is finer than the
    fast key's tensor parts (dtype and strides of each, the first one's device), so a passing check
    stands in for them: one C call instead of seven attribute reads. Where the check compiled against
    this torch was built (:mod:`.tcheck`: by the first hit in the background, or ``flyautotune native
    build``), it makes the same check without pybind11's dispatch; torch's serves tensors it cannot read
    and every process without the build.

    torch's check also requires its tensors to be distinct objects. Where ``tensors`` repeats one (an
    in-place call, ``out=x``), the check is made over the distinct ones and passes only for calls that
    repeat the same positions (:func:`alias_pattern`); the fast key carries that pattern, so in-place
    and out-of-place calls of one key keep a check each instead of remaking one per call.
    """
    global _guards
    if _guards is None:
        _guards = False
        torch = sys.modules.get("torch")
        try:
            cls = torch._C._dynamo.guards.TensorGuards
            compiled = tcheck.check_type()
            if compiled is None:  # none for this torch yet: compiled in the background for later processes
                tcheck.start_background_build()

            def make(tensors: Sequence[Any]) -> Callable[..., bool]:
                pattern = alias_pattern(tensors)
                distinct = [t for i, t in enumerate(tensors) if pattern[i] == i]
                check = None
                if compiled is not None:
                    try:
                        check = compiled(*distinct)
                    except (TypeError, ValueError):  # a tensor it cannot read (sparse, symbolic): torch's
                        pass
                if check is None:
                    check = torch_check(cls, distinct)
                return check if len(distinct) == len(tensors) else _aliased(check, pattern)

            a, b = torch.zeros(2, 3), torch.zeros(3, dtype=torch.float64)
            check = make((a, b))
            if (check(torch.ones(5, 3), b) and not check(a.t(), b) and not check(a, b.float())
                    and not check(a, 1.0) and not check(torch.zeros(2, 6)[:, :3], b)):
                _guards = make
        except Exception:  # noqa: BLE001 - any torch without them keeps the attribute-read key
            pass
    return _guards or None


def torch_check(cls: Any, tensors: Sequence[Any]) -> Callable[..., bool]:
    """torch's check (``cls``: ``TensorGuards``) of ``tensors``' dtypes, devices, dispatch keys,
    ``requires_grad``, dimensions and strides, sizes free."""
    return cls(*tensors, dynamic_dims_sizes=[[None] * t.dim() for t in tensors],
               dynamic_dims_strides=[list(t.stride()) for t in tensors]).check


def alias_pattern(tensors: Sequence[Any]) -> tuple:
    """For each tensor, the position of the first of ``tensors`` that is the same object:
    ``(0, 1, 0)`` for ``(x, w, x)``, ``(0, 1, 2)`` for distinct tensors."""
    pattern = []
    for i, t in enumerate(tensors):
        pattern.append(next(j for j in range(i + 1) if tensors[j] is t))
    return tuple(pattern)


def _aliased(check: Callable[..., bool], pattern: tuple) -> Callable[..., bool]:
    """``check`` (made over the distinct tensors of ``pattern``) for calls that repeat tensors as
    ``pattern`` does; torch's check itself rejects repeats among the distinct ones."""
    repeats = tuple((i, j) for i, j in enumerate(pattern) if i != j)
    distinct = [i for i, j in enumerate(pattern) if i == j]
    pick = operator.itemgetter(*distinct) if len(distinct) > 1 else lambda ts: (ts[distinct[0]],)
    n = len(pattern)

    def aliased(*tensors: Any) -> bool:
        if len(tensors) != n:
            return False
        for i, j in repeats:
            if tensors[i] is not tensors[j]:
                return False
        return check(*pick(tensors))

    aliased.spec = ((check, pattern),)
    return aliased


def either(old: Optional[tuple], new: tuple) -> tuple:
    """The short key's entry after ``new`` served a call its check ``old`` had failed: ``new``, or,
    where both run the same plan (one call in place, the next not), a check that passes either's
    tensors, so alternating calls stop refilling. At most two: a third kind of call replaces them."""
    if old is None or old[1] is not new[1] or getattr(old[0], "either", False):
        return new
    first, second = new[0], old[0]  # the kind of call that just came first: it may be the one that stays

    def check(*tensors: Any) -> bool:
        return first(*tensors) or second(*tensors)

    check.either = True
    check.spec = _spec(new) + _spec(old)
    return make_entry(check, new[1])


def make_entry(check: Optional[Callable[..., bool]], plan: Any) -> tuple:
    """A memo entry: ``(check, plan, spec)``. The generated Python path calls ``check`` with the call's
    tensors; the C path reads ``spec`` instead, where there is one: the alternatives ``((inner,
    pattern), ...)`` that ``check`` tries in turn, each ``inner`` torch's check over the tensors that
    ``pattern`` (:func:`alias_pattern`, None for all distinct) keeps, so an in-place or alternating hit
    runs no Python either."""
    return check, plan, getattr(check, "spec", None)


def _spec(entry: tuple) -> tuple:
    """``entry``'s check as C-path alternatives (a plain check: itself, over every tensor)."""
    return entry[2] if entry[2] is not None else ((entry[0], None),)


def build(tuner: Any, args: tuple) -> Optional[Any]:
    sig = tuner.sig
    n = len(args)
    names = sig.positional[:n]
    if sig.has_stream and "stream" in names:
        return None
    tensor_cls = keys.tensor_type()
    types = tuple(map(type, args))
    tensors = [i for i, a in enumerate(args) if tensor_cls is not None and isinstance(a, tensor_cls)]
    key_idx = []
    for k in tuner.key:
        if k not in names:
            return None  # a key argument left to its default: the general path handles it
        key_idx.append(names.index(k))
    if sum(z in names for z in tuner.reset_to_zero) != len(tuner.reset_to_zero):
        return None
    make_guard = tensor_guards() if tensors else None
    # The open compile_hints block's key leads: hints are part of every key (``current_hint_key``, inlined:
    # every generated function reads the stack once, into ``stack``).
    # a tuple key value's parts keep their types only where each is an int or a str: others (1.0 and True
    # equal 1) take the general path, whose key tells them apart
    values = ["stack[-1].key if stack else ()"] + [
        f"a{i}.shape" if i in tensors else f"plain(a{i})" if issubclass(types[i], tuple) else f"a{i}"
        for i in key_idx]
    parts = [f"a{i}.{what}" for i in tensors for what in ("dtype", "stride()")]
    if tensors:
        parts.append(f"a{tensors[0]}.device")
    if make_guard and len(tensors) > 1:
        # which tensors are one object: a check made for one pattern fails every other (``tensor_guards``)
        parts.append(f"alias_pattern(({', '.join(f'a{i}' for i in tensors)},))")
    key_expr = "(" + ", ".join(values + parts) + ",)"
    # With torch's tensor checks, a hit looks up the key values alone (no tensor attribute read) and one C
    # call checks the tensors. The arity leads the short key: every arity of a tuner shares the memo, and
    # another spelling of the same key values may pass other tensors (a full key starts with the hint
    # key, a tuple, so the two kinds never meet).
    short_expr = "(" + ", ".join([str(n)] + values) + ",)" if make_guard else None
    names_t = ", ".join(f"a{i}" for i in tensors)
    pos = ", ".join(f"a{i}" for i in range(n))
    args_t = f"({pos}{',' if n == 1 else ''})"
    unpack = f"{pos}{',' if n == 1 else ''}" if n else "_"
    # one identity test per argument: cheaper than building and comparing a tuple of types; a tensor's is
    # left to the check where there is one (False for a non-tensor)
    same_types = " and ".join(f"type(a{i}) is T{i}" for i in range(n) if not (make_guard and i in tensors))
    zero = "".join(f"    if a{names.index(z)} is not None:\n        a{names.index(z)}.zero_()\n"
                   for z in tuner.reset_to_zero)
    if make_guard:
        lookup = f"""    try:
        entry = memo.get({short_expr})
        if entry is None or not entry[0]({names_t}):
            entry = refill({args_t})
    except TypeError:
        entry = None"""
    else:
        lookup = f"""    try:
        entry = memo.get({key_expr})
    except TypeError:
        entry = None"""
    # One hit body, two entries: ``fast(args)`` (looked up by arity) and ``call`` (the first arity's
    # ``__call__``, where ``tuner`` is ``self`` and the arguments arrive as positional-only parameters:
    # no tuple or dict is built for them).
    def head(given_kwargs: str) -> str:
        """The checks and the lookup of a hit; a miss takes the general path with ``given_kwargs``."""
        return f"""    if {"not (" + same_types + ") or " if same_types else ""}len(environ) != tuner._env_size:
        return tuner._call({args_t}, {given_kwargs})
    stack = state.stack
{lookup}
    if entry is None:
        return tuner._call({args_t}, {given_kwargs})
    plan = entry[1]
    tuner._last = plan.hit
"""

    # The launch once a hit has no direct call to make (hints in force, or no specialized callable): the
    # body's tail, and what the C path (``native``) runs in that case (``launch_rest``).
    launch_tail = f"""    if plan.layers or stack:
        return launch_with(plan.layers, plan.launch, plan.bound, {args_t}, plan.bound_kwargs)
    # No hints on either side: launch_with's common case, inlined (one frame less per call).
    local = state
    old = local.launch
    local.launch = plan.launch
    try:
        return plan.bound({pos}{", " if n else ""}**plan.bound_kwargs)
    finally:
        local.launch = old
"""
    body = head("{}") + f"""{zero}    direct = plan.direct
    if direct is not None and not stack:
        return direct({pos})
""" + launch_tail
    rest = f"""
def launch_rest(plan, stack{"".join(f", a{i}" for i in range(n))}):
""" + launch_tail
    # Only where torch's tensor checks serve the hits (``make_guard``): the short key, the check of a
    # call's tensors, and the way back to the full key when a check misses.
    checked = f"""
def short(args):
    {unpack} = args
    stack = state.stack
    return {short_expr}

def guard(args):
    {unpack} = args
    return make_guard(({names_t},))

def refill(args):
    # The check missed: the full key decides. A hit there serves this call; its check is remade when
    # these tensors fail it too (another thread-local dispatch state, e.g. inference mode).
    {unpack} = args
    if not ({" and ".join(f"type(a{i}) is T{i}" for i in tensors)}):
        return None
    stack = state.stack
    full = {key_expr}
    entry = memo.get(full)
    if entry is None:
        return None
    if not entry[0]({names_t}):
        entry = memo[full] = make_entry(make_guard(({names_t},)), entry[1])
    short = {short_expr}
    memo[short] = either(memo.get(short), entry)
    return entry
""" if make_guard else ""
    # A hit with ``stream=`` as its only keyword (where the tuned function takes one and the call does not
    # pass it by position): the same checks and lookup, then what the general path does with a stream
    # (resolve it, make it current, zero, launch the tuned function with it: ``launch_on``), unless what
    # ``specialize=`` made takes the stream itself (``plan.direct_stream``): then it gets the resolved stream.
    on_stream = ""
    if sig.has_stream and not sig.var_pos:
        device = f"a{tensors[0]}.device" if tensors else "None"
        zero_idx = tuple(names.index(z) for z in tuner.reset_to_zero)
        on_stream = f"""
def on_stream(args, stream):
    if stream is None:
        return fast(args)
    {unpack} = args
{head('{"stream": stream}')}    direct = plan.direct_stream
    if direct is not None and not stack:
        return direct({pos}{", " if n else ""}stream=resolve_stream(stream, {device}))
    return launch_on(tuner, plan, args, stream, {device}, {zero_idx!r})
"""
    stream_branch = "" if not on_stream else (
        f"        if len(kwargs) == 1 and not rest{f' and a{n - 1} is not _MISSING' if n else ''} and 'stream' in kwargs:\n"
        f"            return on_stream({args_t}, kwargs['stream'])\n")
    params = "".join(f", a{i}=_MISSING" for i in range(n)) + (", /" if n else "")
    given = f"tuple(a for a in {args_t} if a is not _MISSING) + " if n else ""
    src = f"""
def key(args):
    {unpack} = args
    stack = state.stack
    try:
        k = {key_expr}
        hash(k)
        return k
    except TypeError:  # an unhashable key value: such calls keep the general path
        return None

{checked}
def fast(args):
    {unpack} = args
{body}
def call(tuner{params}, *rest, **kwargs):
    if kwargs or rest{f" or a{n - 1} is _MISSING" if n else ""}:
{stream_branch}        return tuner._dispatch({given}rest, kwargs)
{body}
{on_stream}
{rest}"""
    scope = {
        # len() of os.environ's own dict (C) is len(os.environ) (a Python __len__): the same change signal.
        "environ": getattr(os.environ, "_data", os.environ), **{f"T{i}": t for i, t in enumerate(types)},
        "tuner": tuner, "memo": tuner._fast_memo, "launch_with": context.launch_with, "state": context._local,
        "make_guard": make_guard, "alias_pattern": alias_pattern, "either": either, "make_entry": make_entry,
        "launch_on": launch_on, "plain": plain,
        "resolve_stream": streams.resolve_stream,
        "_MISSING": _MISSING,
    }
    exec(compile(src, f"<flyautotune fast path of {tuner.name}>", "exec"), scope)
    fast = scope["fast"]
    fast.types = types
    fast.key = scope["key"]
    fast.short = scope.get("short")
    fast.guard = scope.get("guard", _no_guard)
    fast.call = scope["call"]
    fast.on_stream = scope.get("on_stream")
    fast.native = None
    hit_path = native_type()
    if hit_path is not None and make_guard and not tuner.reset_to_zero and len(tensors) <= 16:
        # the same hit in C; ``call`` serves everything else (its first lines repeat these checks)
        try:
            fast.native = hit_path(
                types=tuple(None if i in tensors else t for i, t in enumerate(types)), key_idx=tuple(key_idx),
                key_shape=tuple(i in tensors for i in key_idx), tensor_idx=tuple(tensors), tuner=tuner,
                memo=tuner._fast_memo, state=context._local, environ=scope["environ"], fallback=fast.call,
                rest=scope["launch_rest"], resolve=streams.resolve_stream if fast.on_stream is not None else None)
        except Exception as exc:  # noqa: BLE001 - a tuner the C path cannot serve keeps the Python one
            log.debug("%s: the C hit path refused this tuner (%s: %s); the Python one serves", tuner.name,
                      type(exc).__name__, exc)
    return fast


_native: Any = None
#: ``_hit.VERSION`` of the C source this module works with (raised with every change to ``_hit.c``).
HIT_VERSION = 2


def native_type() -> Optional[type]:
    """The C hit path's type (``flyautotune.tuning._hit.HitPath``), or None where the extension was not
    built or ``FLYAUTOTUNE_NATIVE_HIT=0`` turns it off (read once per process): the generated Python
    ``call`` then serves hits itself."""
    global _native
    if _native is None:
        _native = False
        if not _native_off():
            try:
                from . import _hit
            except ImportError:
                log.debug("flyautotune: the C hit path is not built; the Python one serves")
            else:  # a build of other source (an editable install not rebuilt since) would key hits its way
                if getattr(_hit, "VERSION", None) == HIT_VERSION:
                    _native = _hit.HitPath
                else:
                    log.warning("flyautotune: the C hit path %s was built from other source (version %s, not "
                                "%s); the Python one serves (reinstall flyautotune to rebuild it)",
                                getattr(_hit, "__file__", "?"), getattr(_hit, "VERSION", None), HIT_VERSION)
    return _native or None


def _native_off() -> bool:
    # Read once per process (native_type caches its answer) and by hit_path(): never per call.
    return not env.flag("FLYAUTOTUNE_NATIVE_HIT", True, "the C hit path stays on where it is built")


def hit_path() -> tuple:
    """``(kind, why)``: which path serves this process's cache hits, ``"c"`` or ``"python"``, and why
    (``flyautotune plugins`` says it)."""
    if native_type() is not None:
        return "c", "flyautotune.tuning._hit"
    if _native_off():
        return "python", "FLYAUTOTUNE_NATIVE_HIT turns the C one off"
    if __package__ + "._hit" in sys.modules:
        return "python", ("the C extension flyautotune.tuning._hit was built from other source (reinstall "
                          "flyautotune to rebuild it)")
    return "python", ("the C extension flyautotune.tuning._hit is not built (reinstall flyautotune where a C "
                      "compiler and the Python headers are found)")


def launch_on(tuner: Any, plan: Any, args: tuple, stream: Any, device: Any, zero_idx: tuple) -> Any:
    """A hit's launch with ``stream=``, as the general path runs it (``Autotuner._call``, ``run_plan``):
    the stream resolved for the inputs' device and current for the block, ``reset_to_zero`` tensors zeroed
    on it, the tuned function called with the config's kwargs and the stream. ``on_stream`` calls a
    ``specialize=`` callable that takes the stream itself (``plan.direct_stream``) before coming here."""
    stream = streams.resolve_stream(stream, device)
    module = streams.stream_module(stream)  # streams.on_stream, inlined: no generator per call
    if module is None or streams.already_current(stream, module):
        return _zero_and_launch(tuner, plan, args, stream, zero_idx)
    with module.stream(stream):
        return _zero_and_launch(tuner, plan, args, stream, zero_idx)


def _zero_and_launch(tuner: Any, plan: Any, args: tuple, stream: Any, zero_idx: tuple) -> Any:
    for i in zero_idx:
        if args[i] is not None:
            args[i].zero_()
    kwargs = plan.kwargs if stream is None else {**plan.kwargs, "stream": stream}
    return context.launch_with(plan.layers, plan.launch, tuner.fn, args, kwargs)


def plain(value: tuple) -> Any:
    """``value`` where each of its parts is an int or a str, else an unhashable stand-in (the lookup then
    misses, to the general path)."""
    for part in value:
        if part.__class__ is not int and part.__class__ is not str:
            return []
    return value


def _no_guard(args: tuple) -> None:
    return None


#: Fills the first arity's ``__call__`` parameters a call did not give (never a user's value).
_MISSING = object()
