"""Public entry points: ``rmsnorm`` (default config) and ``rmsnorm_autotuned``.

``y = x * rsqrt(mean(x**2, -1) + eps) * weight`` over the last dimension,
computed in fp32 and rounded once to ``x.dtype``.
"""

from __future__ import annotations

import numbers
from typing import Any, Optional

import torch

import flyautotune as fat
from flyautotune import current_hint_key

from . import factory as _factory_mod
from . import kernel as _kernel_mod
from . import kernel_cluster as _kernel_cluster_mod
from . import kernel_split as _kernel_split_mod
from . import space
from .factory import DTYPE_STRS, make_launcher
from .kernel import jit_kernel

_DTYPE_STR = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_empty_like = torch.empty_like
#: The largest eps the kernel can add: it adds eps in fp32, where a larger value is inf (every row 0).
FP32_MAX = 3.4028234663852886e38


def dtype_str(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``"bf16"`` (also accepts the short names)."""
    if isinstance(dtype, str) and dtype in DTYPE_STRS:
        return dtype
    s = _DTYPE_STR.get(dtype)
    if s is None:
        raise TypeError(f"rmsnorm: dtype {dtype} is not supported; accepted: torch.bfloat16, torch.float16, "
                        f"torch.float32")
    return s


def _row_stride(t: Any, N: int) -> Optional[int]:
    """Elements between consecutive rows when all leading dims collapse to one; else None."""
    shape, strides = t.shape, t.stride()
    rs = None
    expected = None
    for i in range(len(shape) - 2, -1, -1):
        if shape[i] == 1:
            continue
        if rs is None:
            rs = strides[i]
        elif strides[i] != expected:
            return None
        expected = strides[i] * shape[i]
    return N if rs is None else rs


def _check(x: Any, weight: Any, eps: Any, out: Any) -> tuple:
    """Validate the inputs; returns ``(x, weight, y, M, N, sx, sy, dtype_str, result, eps)``.

    Runs on every call: the common case (contiguous x, float eps, no ``out``)
    reads each attribute once and allocates with ``torch.empty_like``, which
    costs half of ``new_empty`` (measured: NOTES.md).
    """
    try:
        ds = _DTYPE_STR.get(x.dtype)
        w_ok = weight.dtype in _DTYPE_STR
        shape = x.shape
    except AttributeError:
        ds = w_ok = shape = None
    if ds is None or not w_ok:
        _bad_inputs(x, weight)
    if x.requires_grad or weight.requires_grad:
        _check_grad(x, weight)
    if not shape:
        raise ValueError("rmsnorm: x must have at least one dimension (..., N), got a 0-d tensor")
    N = shape[-1]
    if weight.shape != (N,):
        raise ValueError(f"rmsnorm: weight.shape={tuple(weight.shape)} must be ({N},) to match the last "
                         f"dimension of x.shape={tuple(shape)}")
    if weight.device != x.device:
        raise ValueError(f"rmsnorm: x is on {x.device} but weight is on {weight.device}; put both on one device")
    if eps.__class__ is not float or not 0.0 <= eps <= 3.4028234663852886e38:  # FP32_MAX, as a constant
        eps = _check_eps(eps)
    if not weight.is_contiguous():
        weight = weight.contiguous()  # N elements: a copy costs nothing next to the rows
    if x.is_contiguous():
        M = x.numel() // N if N else 0
        if out is None:
            y = _empty_like(x)  # x is contiguous: so is y, rows N apart
            return x, weight, y, M, N, N, N, ds, y, eps
        return x, weight, out, M, N, N, _check_out(x, out, shape, N, M, N, weight), ds, out, eps
    x2, M, sx = _strided_rows(x, shape, N)
    if out is None:
        y = x.new_empty(shape)
        return x2, weight, y, M, N, sx, N, ds, y, eps
    return x2, weight, out, M, N, sx, _check_out(x2, out, shape, N, M, sx, weight), ds, out, eps


def _strided_rows(x: Any, shape: Any, N: int) -> tuple:
    """``(x, M, row stride)`` for a non-contiguous x (copied once when no row stride describes it)."""
    strides = x.stride()
    if strides[-1] != 1 and N > 1:
        raise ValueError(f"rmsnorm: x has stride {strides[-1]} in its last dimension; the kernel reads "
                         f"rows of contiguous elements: pass x.contiguous()")
    M = 1
    for d in shape[:-1]:
        M *= d
    if N == 0:
        return x, 0, N
    sx = _row_stride(x, N) if M else N
    if sx is None:
        return x.reshape(M, N), M, N  # leading dims that no single row stride describes: one copy
    return x, M, sx


def _check_grad(x: Any, weight: Any) -> None:
    """Refuse inputs that require grad while grad mode is on (x or weight requires grad): the kernel has no
    backward, so its result would carry no ``grad_fn`` and training would silently stop at it."""
    if torch.is_grad_enabled():
        name = "x" if x.requires_grad else "weight"
        raise ValueError(f"rmsnorm: {name}.requires_grad=True with grad mode on, but this kernel has no backward "
                         f"(the result would carry no grad_fn); call it under torch.no_grad() or "
                         f"torch.inference_mode() for inference, or use torch.nn.functional.rms_norm to train")


def _check_eps(eps: Any) -> float:
    """``eps`` as a float (any real number: int, float, numpy scalar) when it is finite and fits fp32."""
    accepted = f"accepted: a Python float or int or a numpy scalar, finite, from 0 to {FP32_MAX!r} (the largest fp32)"
    if isinstance(eps, torch.Tensor):
        raise TypeError(f"rmsnorm: eps={eps!r} must be a non-negative float, not a tensor: pass a Python float "
                        f"(eps.item()); {accepted}")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"rmsnorm: eps={eps!r} ({type(eps).__name__}) must be a non-negative float; {accepted}")
    try:
        e = float(eps)
    except OverflowError:  # an int beyond any float
        e = float("inf")
    if not 0.0 <= e <= FP32_MAX:
        raise ValueError(f"rmsnorm: eps={eps!r} must be a non-negative float; {accepted}")
    return e


def _check_device(x: Any) -> None:
    """Refuse a tensor with no data (meta): nothing could run on it."""
    if x.is_meta:
        raise ValueError(f"rmsnorm: x.device={x.device} holds no data to normalize; accepted: CUDA/ROCm GPU "
                         f"tensors, or CPU tensors (run under Triton's interpreter)")


def _bad_inputs(x: Any, weight: Any) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"rmsnorm: x must be a torch.Tensor, got {type(x).__name__}")
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"rmsnorm: weight must be a torch.Tensor, got {type(weight).__name__}")
    if x.dtype not in _DTYPE_STR:
        raise TypeError(f"rmsnorm: x.dtype={x.dtype} is not supported; accepted: torch.bfloat16, "
                        f"torch.float16, torch.float32")
    raise TypeError(f"rmsnorm: weight.dtype={weight.dtype} is not supported; accepted: torch.bfloat16, "
                    f"torch.float16, torch.float32")


def _check_stream(stream: Any, x: Any) -> None:
    """Refuse a stream the launch cannot use, by name (``stream`` is not None)."""
    if isinstance(stream, bool) or not (isinstance(stream, int) or hasattr(stream, "cuda_stream")):
        raise TypeError(f"rmsnorm: stream={stream!r} must be a torch stream, a raw stream handle (int) or None")
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"rmsnorm: stream={stream!r}: a raw stream handle must be >= 0 (0 = the default stream)")
        if stream and not x.is_cuda:
            raise ValueError(f"rmsnorm: stream={stream!r}: a raw stream handle needs a GPU tensor, x is on {x.device}")
    elif x.is_cuda and getattr(stream, "device_index", None) not in (None, x.get_device()):
        raise ValueError(f"rmsnorm: stream={stream!r} is a stream of {stream.device}, but x is on {x.device}")


def _check_out(x: Any, out: Any, shape: Any, N: int, M: int, sx: int, weight: Any) -> int:
    """Validate ``out=`` (``x`` the rows the kernel reads, ``sx`` their stride); returns its row stride."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"rmsnorm: out must be a torch.Tensor or None, got {type(out).__name__}")
    if out.shape != shape:
        raise ValueError(f"rmsnorm: out.shape={tuple(out.shape)} must equal x.shape={tuple(shape)}")
    if out.dtype != x.dtype:
        raise TypeError(f"rmsnorm: out.dtype={out.dtype} must equal x.dtype={x.dtype}")
    if out.device != x.device:
        raise ValueError(f"rmsnorm: x is on {x.device} but out is on {out.device}")
    if out.requires_grad and torch.is_grad_enabled():
        raise ValueError("rmsnorm: out.requires_grad=True with grad mode on, but this kernel has no backward and "
                         "would write out behind autograd's back; call it under torch.no_grad() or "
                         "torch.inference_mode(), or pass an out that does not require grad")
    if N > 1 and out.stride(-1) != 1:
        raise ValueError(f"rmsnorm: out has stride {out.stride(-1)} in its last dimension; it must be 1")
    sy = _row_stride(out, N) if M else N
    if sy is None:
        raise ValueError(f"rmsnorm: out with shape {tuple(out.shape)} and strides {out.stride()} has no "
                         f"single row stride; pass a contiguous out (or one whose rows are evenly spaced)")
    if sy < N:  # (a single row reports N: M > 1 here)
        raise ValueError(f"rmsnorm: out with shape {tuple(out.shape)} and strides {out.stride()} has overlapping "
                         f"rows (row stride {sy} < N={N}; an expanded tensor's is 0), so every row would land in "
                         f"the same memory; pass a tensor with distinct rows (e.g. torch.empty_like(x))")
    if M and N:
        _check_overlap(x, out, M, N, sx, sy, weight)
    return sy


def _check_overlap(x: Any, out: Any, M: int, N: int, sx: int, sy: int, weight: Any) -> None:
    """Refuse an ``out`` that shares memory with ``weight``, or with ``x`` other than as ``x`` itself: programs
    run in any order, so one would read what another already wrote."""
    xs, os_ = x.data_ptr(), out.data_ptr()
    if not os_:
        return  # no data (meta tensors): the launch refuses the device by name
    elem = x.element_size()
    xe, oe = xs + ((M - 1) * sx + N) * elem, os_ + ((M - 1) * sy + N) * elem
    ws = weight.data_ptr()
    if ws < oe and os_ < ws + N * weight.element_size():
        raise ValueError(f"rmsnorm: out (shape {tuple(out.shape)}, strides {out.stride()}) shares memory with "
                         f"weight, which every row reads while others are written; pass an out that does not "
                         f"overlap weight (e.g. weight.clone())")
    if xs >= oe or os_ >= xe or (xs == os_ and sx == sy):
        return  # disjoint, or x itself (in place)
    if sx == sy:  # rows of one stride that interleave without touching (e.g. two column blocks of one buffer)
        gap = (os_ - xs) % (sx * elem)
        if N * elem <= gap <= (sx - N) * elem:
            return
    raise ValueError(f"rmsnorm: out (shape {tuple(out.shape)}, strides {out.stride()}, {os_ - xs:+d} bytes from "
                     f"x's first element) partially overlaps x (row stride {sx}), so rows would be read after "
                     f"being overwritten; accepted: out=x itself (in place) or an out sharing no element with x "
                     f"(e.g. torch.empty_like(x), or x.clone() as the input)")


# -- launching -------------------------------------------------------------------

_targets: dict = {}
_options: dict = {}


def _target(index: int) -> fat.Target:
    """The target of CUDA device ``index`` (cached)."""
    t = _targets.get(index)
    if t is None:
        t = _targets[index] = fat.target_for(torch.device("cuda", index))
    return t


def _compile_options(target: fat.Target, block_threads: int) -> tuple:
    """num_warps from BLOCK_THREADS, then the lowered hint snapshot (cached per snapshot)."""
    key = (target, block_threads, current_hint_key())
    opts = _options.get(key)
    if opts is None:
        lowered = fat.lower_compile_hints(ir=jit_kernel(), target=target)
        if not isinstance(lowered, dict):
            raise TypeError(f"rmsnorm: the {target.backend} backend lowered the hints to {lowered!r}; "
                            f"a Triton kernel needs a dict of compile options")
        merged = {"num_warps": max(1, block_threads // target.warp_size)}
        merged.update(lowered)
        # BLOCK_THREADS fixed num_warps after the backend saw the hints: let it check the pair again
        # (e.g. maxnreg x threads must fit the register file).
        fat.plugin_manager().hook.flyautotune_validate_hints(hints=merged, target=target)
        opts = _options[key] = tuple(sorted(merged.items()))
    return opts


def clear_caches() -> None:
    """Forget cached targets and lowered options (after the plugin set changes), and the tuner's
    in-memory plans with the specialized launches made from those options (winners stay stored)."""
    _targets.clear()
    _options.clear()
    _defaults.clear()
    _default_runs.clear()
    tuned_launch.clear()


def launch(x, weight, out, M, N, dtype, eps, sx, sy, stream=None,
           BLOCK_THREADS=None, ROWS_PER_PROGRAM=1, CHUNK=0, CACHE_POLICY=1, PREFETCH=0, SPLIT=1, VEC=16, COOP=0,
           HOLD=0, ASYNC=0):
    """Run one config on prepared arguments (what the tuner calls)."""
    if BLOCK_THREADS is None:
        raise fat.IncompatibleConfigError("rmsnorm: a config must set BLOCK_THREADS")
    launcher = make_launcher(N, dtype, BLOCK_THREADS, ROWS_PER_PROGRAM, CHUNK, CACHE_POLICY, PREFETCH, SPLIT, VEC,
                             COOP, HOLD, ASYNC)
    return _run(launcher, x, weight, out, M, sx, sy, eps, stream)


def _run(launcher, x, weight, out, M, sx, sy, eps, stream):
    if not x.is_cuda:
        _check_device(x)  # (the interpreter's path: a check costs nothing next to it)
        launcher(x, weight, out, M, sx, sy, eps, None, (), True)
        return out
    target = fat.current_target() or _target(x.get_device())
    launcher(x, weight, out, M, sx, sy, eps, stream, _compile_options(target, launcher.BLOCK_THREADS))
    return out


def precompile(config: fat.Config, x, weight, out, M, N, dtype, eps, sx, sy, **_: Any) -> Optional[str]:
    """``precompile=`` of the tuner: build a candidate's binary without launching it (a search runs this
    in a thread pool for every candidate, with the candidate's hints and target current). Returns what the
    launch runs (:func:`~flyautotune_rmsnorm.factory.build_name`): the search times one candidate of those
    named alike."""
    if not x.is_cuda:
        return None  # the interpreter compiles nothing
    kw = config.kwargs
    launcher = make_launcher(N, dtype, **kw)
    target = fat.current_target() or _target(x.get_device())
    built = launcher.compiled(x, weight, out, M, sx, sy, _compile_options(target, kw["BLOCK_THREADS"]))
    return _factory_mod.build_name(launcher, built, M)


def specialize(config: fat.Config, x, weight, out, M, N, dtype, eps, sx, sy, stream=None, **_: Any) -> Any:
    """``specialize=`` of the tuner: what a cache hit calls for this config and key, with the factory
    lookup, the compile options and the binary resolved once (None on CPU and for split rows other than
    the cluster body's: the launch itself serves them). It runs inside the launch context, so the compile
    options are lowered here for the call's target and hints; hits then call the result with no context
    around it."""
    kw = config.kwargs
    if not x.is_cuda or _factory_mod._INTERPRET or (kw.get("SPLIT", 1) != 1 and kw.get("COOP") != 3):
        return None
    launcher = make_launcher(N, dtype, **kw)
    dev = x.get_device()
    opts = _compile_options(fat.current_target() or _target(dev), launcher.BLOCK_THREADS)
    return launcher.bind(M, sx, sy, dev, weight.dtype, opts)


tuned_launch = fat.autotune(
    configs=space.configs,
    key=["M", "N", "dtype"],
    name="rmsnorm",
    default=space.default,
    validate=space.validate,  # a stored or shipped winner must be one of the space's configs
    precompile=precompile,  # candidates compile in a pool while earlier ones are timed
    specialize=specialize,  # cache hits launch the binary with the config's work done once
    restore_value=["x"],  # out= may alias x: every rep must see the original rows
    # A search rotates x over cold copies but writes one out, as rmsnorm_autotuned's output (allocated
    # per call) lands in the block the last call freed: on the H200, cold outputs cost the leading configs
    # 6-12 % at 4096 x 1000 and 65536 x 128 and changed which led (bench/space_probe.py --rotated-outputs).
    outputs=["out"],
    source_files=[_kernel_mod.__file__, _kernel_split_mod.__file__, _kernel_cluster_mod.__file__, _factory_mod.__file__,
                  space.__file__],
)(launch)

#: Shapes that never repeat must not grow memory forever (as the tuner's memo of hits).
MAX_DEFAULTS = 4096
_defaults: dict = {}  # (M, N, dtype, cuda) -> the default config's launcher
#: (M, N, dtype, row strides, device, weight dtype, hint key, target) -> the default config's launch bound as a
#: tuned hit's is (``specialize``), or None where a bound launch does not serve it (split rows)
_default_runs: dict = {}
_UNBOUND = object()


def rmsnorm(x, weight, eps: float = 1e-6, out=None, stream=None):
    """RMSNorm over the last dimension with the default config (never tunes).

    :param x: ``(..., N)`` bf16/fp16/fp32 tensor; rows may be strided, the last
        dimension must be contiguous.
    :param weight: ``(N,)`` bf16/fp16/fp32 tensor on the same device.
    :param eps: added to the mean square.
    :param out: optional output, same shape and dtype as ``x`` (may be ``x``).
    :param stream: a torch stream, a raw stream handle, or None (the device's
        current stream).
    :returns: ``out`` or a new tensor shaped like ``x``.
    """
    x2, w, y, M, N, sx, sy, ds, result, eps = _check(x, weight, eps, out)
    if stream is not None:
        _check_stream(stream, x2)
    if M == 0:
        return result
    cuda = x2.is_cuda
    if cuda:
        # the default config's binary, resolved once per shape, layout, device and hints, as a tuned hit's
        dev = x2.get_device()
        rkey = (M, N, ds, sx, sy, dev, w.dtype, current_hint_key(), fat.current_target())
        run = _default_runs.get(rkey, _UNBOUND)
        if run is _UNBOUND:
            if len(_default_runs) >= MAX_DEFAULTS:
                _default_runs.clear()
            config = space.default_config(M, N, ds, _target(dev).backend)
            run = _default_runs[rkey] = specialize(config, x2, w, y, M, N, ds, eps, sx, sy)
        if run is not None:
            run(x2, w, y, M, N, ds, eps, sx, sy, stream)
            return result
    dkey = (M, N, ds, cuda)
    launcher = _defaults.get(dkey)
    if launcher is None:
        if len(_defaults) >= MAX_DEFAULTS:
            _defaults.clear()
        backend = _target(x2.get_device()).backend if cuda else "cpu"
        launcher = _defaults[dkey] = make_launcher(N, ds, **space.default_config(M, N, ds, backend).kwargs)
    _run(launcher, x2, w, y, M, sx, sy, eps, stream)
    return result


def rmsnorm_autotuned(x, weight, eps: float = 1e-6, out=None, stream=None):
    """RMSNorm over the last dimension with the tuned config for ``(M, N, dtype)``.

    Same arguments as :func:`rmsnorm`. The first call of a shape uses a stored
    winner, or the default; ``FLYAUTOTUNE=1`` searches the space and stores the
    winner.
    """
    x2, w, y, M, N, sx, sy, ds, result, eps = _check(x, weight, eps, out)
    if M == 0:
        if stream is not None:
            _check_stream(stream, x2)
        return result
    try:
        if stream is None:
            tuned_launch(x2, w, y, M, N, ds, eps, sx, sy)
        else:
            _check_stream(stream, x2)
            tuned_launch(x2, w, y, M, N, ds, eps, sx, sy, stream=stream)
    except LookupError:  # no backend owns x's device: say which devices the kernel runs on, if that is why
        _check_device(x2)
        raise
    return result


# -- adopter helpers ----------------------------------------------------------------


def tuner_args(x, weight, eps: float = 1e-6, out=None, stream=None) -> tuple:
    """``(args, kwargs)`` of the tuned launch a ``rmsnorm_autotuned`` call makes."""
    x2, w, y, M, N, sx, sy, ds, result, eps = _check(x, weight, eps, out)
    return (x2, w, y, M, N, ds, eps, sx, sy), ({} if stream is None else {"stream": stream})


def example(shape, dtype, device) -> tuple:
    """Random inputs for ``rmsnorm_autotuned``: ``((x, weight), {"eps": 1e-6})``."""
    ds = dtype_str(dtype)
    tdt = {v: k for k, v in _DTYPE_STR.items()}[ds]
    shape = tuple(int(s) for s in shape)
    x = torch.randn(shape, dtype=tdt, device=device)
    w = torch.rand(shape[-1], dtype=tdt, device=device) + 0.5
    return (x, w), {"eps": 1e-6}


def bytes_moved(x, weight, *args, **kwargs) -> int:
    """Read x, write y (same size), read the weight once."""
    return 2 * x.numel() * x.element_size() + weight.numel() * weight.element_size()


def compile_spec(shape, dtype, config, target=None) -> tuple:
    """``(kernel, signature, constexprs, extra)`` of the Triton kernel ``config`` builds for a
    contiguous input: ``extra["options"]`` holds the ``num_warps`` that BLOCK_THREADS implies,
    ``extra["values"]`` the runtime integers of such a launch. A split config (``SPLIT > 1``)
    reports its normalize kernel, the heavier of its two, or its one kernel with ``COOP=1`` or ``2``."""
    ds = dtype_str(dtype)
    N = int(shape[-1])
    M = 1
    for d in shape[:-1]:
        M *= int(d)
    kw = config.kwargs
    if kw.get("COOP") == 3:
        raise fat.IncompatibleConfigError(
            f"rmsnorm: the cluster body (COOP=3) is a CuTe DSL kernel, with no Triton kernel to compile here "
            f"({config}); kernel_cluster.ptx(..., **make_launcher(N, dtype, **config.kwargs).variant()) "
            f"gives its PTX")
    launcher = make_launcher(N, ds, **kw)
    from .factory import _CONST_NAMES, pdl_for_arch, row_vec

    rv = row_vec(N, N, launcher.elem, launcher.VEC)
    warp = getattr(target, "warp_size", None) or 32
    options = {"num_warps": max(1, kw["BLOCK_THREADS"] // warp)}
    if kw.get("ASYNC"):  # a Gluon kernel (its JITFunction's is_gluon() says so to whoever compiles it)
        from . import kernel_async

        if getattr(target, "backend", "cuda") != "cuda" or not kernel_async.available():
            raise fat.IncompatibleConfigError(
                f"rmsnorm: {config} is a Gluon body (ASYNC={kw['ASYNC']}, NVIDIA only), which this "
                f"target or Triton does not have; elsewhere its launch runs the Triton body of the same tile")
        from . import l1_copies

        body, sig, consts = launcher.source  # the AsyncRowsLauncher's own choice of body
        vec = consts["VEC"]
        # compiled as the launch compiles it: inside l1_copies.editing (x's copies through L1)
        return body, sig, consts, {"options": options, "values": {"M": M, "SX": N // vec, "SY": N // vec},
                                   "compiling": l1_copies.editing}
    if launcher.SPLIT > 1 and launcher.COOP == 2:
        from .kernel_split import persist_kernel

        consts = launcher.persist_constexprs(rv)
        sig = {"X": f"*{ds}", "W": f"*{ds}", "Y": f"*{ds}", "P": "*fp32", "D": "*i32", "M": "i32", "sx_vec": "i32",
               "sy_vec": "i32", "eps": "fp32", "R": "i32"}
        sig.update({k: "constexpr" for k in consts})
        return persist_kernel(), sig, consts, {"options": options, "values": {"M": M, "sx_vec": N // rv,
                                                                             "sy_vec": N // rv, "R": 1}}
    if launcher.SPLIT > 1 and launcher.COOP == 1 and getattr(target, "backend", "cuda") == "cuda":
        # (elsewhere its rows take the two-launch form, whose normalize kernel is compiled below)
        from .kernel_split import coop_kernel

        consts = launcher.coop_constexprs(rv)
        sig = {"X": f"*{ds}", "W": f"*{ds}", "Y": f"*{ds}", "P": "*fp32", "C": "*i32", "sx_vec": "i32",
               "sy_vec": "i32", "eps": "fp32"}
        sig.update({k: "constexpr" for k in consts})
        return coop_kernel(), sig, consts, {"options": options, "values": {"sx_vec": N // rv, "sy_vec": N // rv}}
    if launcher.SPLIT > 1:
        from .kernel_split import kernels

        consts = launcher.constexprs(rv)[1]
        sig = {"X": f"*{ds}", "W": f"*{ds}", "Y": f"*{ds}", "P": "*fp32", "sx_vec": "i32", "sy_vec": "i32",
               "eps": "fp32"}
        sig.update({k: "constexpr" for k in consts})
        return kernels()[1], sig, consts, {"options": options, "values": {"sx_vec": N // rv, "sy_vec": N // rv}}
    pdl = pdl_for_arch(target.arch) if getattr(target, "backend", None) == "cuda" else 0
    consts = dict(zip(_CONST_NAMES, launcher._constexprs(M, rv, N, N, pdl)))
    sig = {"X": f"*{ds}", "W": f"*{ds}", "Y": f"*{ds}", "M": "i32", "sx_vec": "i32", "sy_vec": "i32",
           "eps": "fp32"}
    sig.update({k: "constexpr" for k in consts})
    if pdl:
        options["launch_pdl"] = True
    extra = {"options": options,
             "values": {"M": M, "sx_vec": N // rv, "sy_vec": N // rv}}
    return jit_kernel(), sig, consts, extra
