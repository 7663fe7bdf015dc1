"""The generated cache-hit path.

A cache hit in the general path binds every argument by name and builds the
sorted key: microseconds of Python. For the common spelling (positional
arguments only, the same argument types as before) a function generated for
that arity checks the types, builds a key of the key values, each tensor's
dtype and raw strides (finer than the stored key, so never wrong) and the open
compile_hints block's key, and launches the prepared plan. Anything unusual
(keywords, other types, a changed environment) takes the general path, which
also fills this one.

The first arity a tuner sees becomes its ``__call__`` (each tuner is an
instance of its own subclass, see ``Autotuner.__new__``): a hit runs in one
Python frame over the launch's. A plan whose launch ``specialize=`` made, with
no hints on either side, is called directly: ``specialize`` ran inside the
launch context (target and hints current), so what it returned needs none.
Other arities keep a generated function of their own, looked up by arity.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

from .. import context, keys

log = logging.getLogger("flyautotune")

#: Shapes that never repeat must not grow memory forever.
MAX_ENTRIES = 4096


def remember(tuner: Any, args: tuple, plan: Any, named: dict) -> None:
    """Make later calls with this arity, these types and this key take the fast path (``named``: the
    call's arguments by name, as the general path bound them; ``specialize=`` receives them)."""
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
            own.__call__ = fast.call
    key = fast.key(args)
    if key is not None and plan.bound is None:
        bound = None
        if tuner.specialize is not None:
            try:  # inside the launch context: it may resolve what depends on the target and the hints
                bound = context.launch_with(plan.layers, plan.launch, tuner.specialize, (plan.config,), named)
            except Exception as exc:  # the launch itself serves this key's hits (said once per tuner)
                if not tuner._specialize_warned:
                    tuner._specialize_warned = True
                    log.warning("%s: specialize(%s) failed (%s: %s); cache hits call the launch itself", tuner.name,
                                plan.config, type(exc).__name__, exc)
            if bound is not None and not callable(bound):
                raise TypeError(f"{tuner.name}: specialize= returned {bound!r}; expected a callable or None")
        plan.bound, plan.bound_kwargs = (bound, {}) if bound is not None else (tuner.fn, plan.kwargs)
        plan.direct = bound if bound is not None and not plan.layers else None
    if key is not None:
        if len(tuner._fast_memo) > MAX_ENTRIES:
            tuner._fast_memo.clear()
        tuner._fast_memo[key] = plan


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
    parts = [f"a{i}.shape" if i in tensors else f"a{i}" for i in key_idx]
    for i in tensors:
        parts.append(f"a{i}.dtype")
        parts.append(f"a{i}.stride()")
    if tensors:
        parts.append(f"a{tensors[0]}.device")
    # The open compile_hints block's key leads: hints are part of every key (``current_hint_key``, inlined:
    # both generated functions read the stack once, into ``stack``).
    key_expr = "(" + ", ".join(["stack[-1].key if stack else ()"] + parts) + ",)"
    unpack = (", ".join(f"a{i}" for i in range(n)) + ("," if n == 1 else "")) if n else "_"
    # one identity test per argument: cheaper than building and comparing a tuple of types
    same_types = " and ".join(f"type(a{i}) is T{i}" for i in range(n)) or "True"
    zero = "".join(f"    if a{names.index(z)} is not None:\n        a{names.index(z)}.zero_()\n"
                   for z in tuner.reset_to_zero)
    # One hit body, two entries: ``fast(args)`` (looked up by arity) and ``call`` (the first arity's
    # ``__call__``, where ``tuner`` is ``self``).
    body = f"""    {unpack} = args
    if not ({same_types}) or len(environ) != tuner._env_size:
        return tuner._call(args, {{}})
    stack = state.stack
    try:
        plan = memo.get({key_expr})
    except TypeError:
        plan = None
    if plan is None:
        return tuner._call(args, {{}})
    tuner._last = plan.hit
{zero}    direct = plan.direct
    if direct is not None and not stack:
        return direct(*args)
    if plan.layers or stack:
        return launch_with(plan.layers, plan.launch, plan.bound, args, plan.bound_kwargs)
    # No hints on either side: launch_with's common case, inlined (one frame less per call).
    local = state
    old = local.launch
    local.launch = plan.launch
    try:
        return plan.bound(*args, **plan.bound_kwargs)
    finally:
        local.launch = old
"""
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

def fast(args):
{body}
def call(tuner, *args, **kwargs):
    if kwargs or len(args) != {n}:
        return tuner._dispatch(args, kwargs)
{body}"""
    scope = {
        # len() of os.environ's own dict (C) is len(os.environ) (a Python __len__): the same change signal.
        "environ": getattr(os.environ, "_data", os.environ), **{f"T{i}": t for i, t in enumerate(types)},
        "tuner": tuner, "memo": tuner._fast_memo, "launch_with": context.launch_with, "state": context._local,
    }
    exec(compile(src, f"<flyautotune fast path of {tuner.name}>", "exec"), scope)
    fast = scope["fast"]
    fast.key = scope["key"]
    fast.call = scope["call"]
    return fast
