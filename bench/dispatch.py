"""Host time of one RMSNorm call on a CUDA GPU: what each layer costs.

Run on a CUDA machine: ``python bench/dispatch.py --out DIR``. Without a GPU it
times the host-only pieces on CPU tensors (the argument check and the output
allocation), which need no launch. A tiny input
(1 x 4096 bf16) keeps the GPU idle enough that each loop measures the host:
``calls`` launches are enqueued back to back (fewer than the launch queue
holds), wall time over the loop, synchronize, median of ``repeats`` runs with
the paths interleaved.

Paths, outermost first:

* ``F.rms_norm`` — torch's op (the bar to meet);
* ``rmsnorm_autotuned`` — input checks, output allocation, the autotune layer
  (cache hit), the launch;
* ``rmsnorm`` — the same with the default config and no autotune layer (also with ``stream=side``);
* ``F.rms_norm on side`` — torch's op inside a ``torch.cuda.stream(side)`` block (torch's way onto
  another stream);
* ``checks + output alloc`` — the input validation and ``new_empty`` of the entry points alone;
* ``rmsnorm_autotuned, out=x`` — the same in place (one tensor in two places of the tuned launch);
* ``rmsnorm_autotuned, stream=`` — the same with the current stream passed as ``stream=`` (the tuner
  resolves it and hands it to the specialized launch, which launches on it without making it current);
  ``stream=side`` with another stream;
* ``tuner(prepared)`` — the autotune layer over prepared arguments (no checks, no allocation), also
  in place; ``tuner(prepared), Python hit path`` the same with the tuner's generated Python hit path as
  its ``__call__`` instead of the C one (``flyautotune.tuning._hit``), where the C one is built;
* ``launch(prepared, config)`` — the same launch function called directly with the cached config;
* ``specialized launch`` — what a cache hit calls (``specialize=``): the binary resolved once;
* ``launcher`` — the cached launcher: straight into Triton's C launcher;
* ``triton jit`` — the same kernel through ``JITFunction.run`` (for reference);
* ``x.add_(0)`` — a minimal torch op (for reference);
* ``raw: Triton's C launcher`` / ``raw: claunch`` — the same cached binary launched by Triton's generated
  launcher and by ``flyautotune_rmsnorm.claunch`` with the same arguments (Triton 3.5/3.6 on CUDA; the
  specialized launch takes claunch unless ``FLYAUTOTUNE_RMSNORM_CLAUNCH=0``).

* ``tuner(prepared) over a no-op launch`` — the hit path with the plan's launch swapped for a no-op;
  minus ``a no-op call`` (the same arguments), the layer's own work; the same followed in each call by
  ``raw: claunch``: minus that path and the no-op, the hit path's cost with a driver launch between hits.

The autotune layer's cost is ``tuner(prepared) - specialized launch`` (what a cache hit runs
inside the layer), and ``rmsnorm_autotuned - rmsnorm`` as a user's call sees it (the same checks and
the same launch, where the tuned config is the default, as in the fresh store this runs with).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import sys
import tempfile
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--M", type=int, default=1)
    ap.add_argument("--N", type=int, default=4096)
    args = ap.parse_args(argv)
    os.environ.setdefault("FLYAUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="fat-dispatch-"))

    import torch
    import torch.nn.functional as F
    import triton

    from flyautotune_rmsnorm import make_launcher, rmsnorm, rmsnorm_autotuned
    if not torch.cuda.is_available():
        return cpu_only(args)
    from flyautotune_rmsnorm.api import _check, _compile_options, _target, launch, specialize
    from flyautotune_rmsnorm.api import tuned_launch as _tuned_launch
    from flyautotune_rmsnorm.kernel import jit_kernel
    from flyautotune.tuning import fastpath, tcheck

    M, N, eps = args.M, args.N, 1e-6
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(N, device="cuda", dtype=torch.bfloat16) + 0.5
    y = torch.empty_like(x)
    ds = "bf16"
    rmsnorm_autotuned(x, w, eps)  # default config, now in the tuner's memory
    cfg = _tuned_launch.last_config.kwargs
    from flyautotune_rmsnorm.space import default_config

    default_cfg = default_config(M, N, ds).kwargs  # what rmsnorm() launches
    L = make_launcher(N, ds, **cfg)
    opts = _compile_options(_target(x.get_device()), cfg["BLOCK_THREADS"])
    L(x, w, y, M, N, N, eps, None, opts)
    from flyautotune_rmsnorm.factory import _CONST_NAMES, pdl_for

    consts = L._constexprs(M, 8, N, N, pdl_for(x.get_device()))

    kw = dict(zip(_CONST_NAMES, consts))
    bound = specialize(_tuned_launch.last_config, x, w, y, M, N, ds, eps, N, N)
    jit = jit_kernel()
    jit_opts = L.compile_options(dict(opts), kw["PDL"])  # built once, outside the timed calls
    grid = (L.grid(M),)

    # The two raw launches of the cached binary, same arguments: Triton's generated C launcher and
    # flyautotune's (claunch: one cuLaunchKernel from a state packed once).
    from flyautotune_rmsnorm import claunch

    compiled = next(iter(L._launches.values())).kernel
    run = compiled.run
    raw_args = (x.data_ptr(), w.data_ptr(), y.data_ptr(), M, N // 8, N // 8, eps, *consts)
    current, side = torch.cuda.current_stream(), torch.cuda.Stream()
    stream = current.cuda_stream
    fn_handle, meta_packed = compiled.function, compiled.packed_metadata
    triton_raw = getattr(run, "launch", None)
    ours_raw = claunch.direct_launcher(compiled)

    def on_side():  # torch's own way onto another stream, what stream=side compares with
        with torch.cuda.stream(side):
            return F.rms_norm(x, (N,), w, eps)

    paths = {
        "F.rms_norm": lambda: F.rms_norm(x, (N,), w, eps),
        "rmsnorm_autotuned": lambda: rmsnorm_autotuned(x, w, eps),
        "rmsnorm_autotuned, out=x": lambda: rmsnorm_autotuned(x, w, eps, out=x),
        "rmsnorm_autotuned, stream=": lambda: rmsnorm_autotuned(x, w, eps, stream=current),
        "rmsnorm_autotuned, stream=side": lambda: rmsnorm_autotuned(x, w, eps, stream=side),
        "rmsnorm": lambda: rmsnorm(x, w, eps),
        "rmsnorm, stream=side": lambda: rmsnorm(x, w, eps, stream=side),
        "F.rms_norm on side (torch.cuda.stream block)": lambda: on_side(),
        "checks + output alloc": lambda: _check(x, w, eps, None),
        "tuner(prepared)": lambda: _tuned_launch(x, w, y, M, N, ds, eps, N, N),
        "tuner(prepared), in place": lambda: _tuned_launch(x, w, x, M, N, ds, eps, N, N),
        "launch(prepared, config)": lambda: launch(x, w, y, M, N, ds, eps, N, N, None, **cfg),
        "specialized launch": lambda: bound(x, w, y, M, N, ds, eps, N, N),
        "launcher": lambda: L(x, w, y, M, N, N, eps, None, opts),
        "triton jit": lambda: jit[grid](x, w, y, M, N // 8, N // 8, eps, **kw, **jit_opts),
        "x.add_(0)": lambda: x.add_(0.0),
    }
    if triton_raw is not None and type(run).__name__ == "CudaLauncher":
        paths["raw: Triton's C launcher"] = lambda: triton_raw(L.grid(M), 1, 1, stream, fn_handle, False, run.launch_pdl, None,
                                                                None, meta_packed, None, None, None, *raw_args)
    if ours_raw is not None:
        paths["raw: claunch"] = lambda: ours_raw(L.grid(M), 1, stream, *raw_args)
    # torch's tensor check of the hit (what the C and the Python hit paths both call): its share of the layer
    check = next((e[0] for e in _tuned_launch._fast_memo.values() if e[0] is not None and e[0](x, w, y)), None)
    check_kind, check_why = tcheck.status()
    if check is not None:
        paths[f"the hit's tensor check ({check_kind}: x, w, out)"] = lambda: check(x, w, y)
    # both checks side by side, whichever the hits use: what the compiled one saves per hit
    guards = fastpath.torch_check(torch._C._dynamo.guards.TensorGuards, (x, w, y))
    paths["torch's TensorGuards check alone (x, w, out)"] = lambda: guards(x, w, y)
    compiled_check = tcheck.check_type()
    if compiled_check is not None:
        compiled = compiled_check(x, w, y)
        paths["the compiled check alone (x, w, out)"] = lambda: compiled(x, w, y)
    # The tuner's first-arity __call__ is the C hit path where it is built; its Python twin (the generated
    # path it defers to) is timed too, as that __call__ for its own loops.
    own = type(_tuned_launch)
    native_call = own.__dict__.get("__call__")
    swaps = {}
    if hasattr(native_call, "fallback"):
        PY_HIT = "tuner(prepared), Python hit path"
        paths[PY_HIT] = paths["tuner(prepared)"]
        swaps[PY_HIT] = native_call.fallback
    # Where the layer's time goes next to a real launch: the hit path over a no-op launch (the plan's direct
    # launch swapped for it), alone and followed in each call by a raw launch of the same binary (minus that
    # raw launch alone): does a driver launch between hits make the hit path itself dearer?
    plan = next((e[1] for e in _tuned_launch._fast_memo.values() if getattr(e[1], "direct", None) is not None), None)
    directs = {}
    HIT_NOOP, HIT_NOOP_RAW = "tuner(prepared) over a no-op launch", "tuner(prepared) over a no-op launch, then raw: claunch"
    if plan is not None and ours_raw is not None:
        def noop(*_args):
            return None

        NOOP = "a no-op call (the same arguments)"
        paths[NOOP] = lambda: noop(x, w, y, M, N, ds, eps, N, N)
        paths[HIT_NOOP] = paths["tuner(prepared)"]
        paths[HIT_NOOP_RAW] = lambda: (_tuned_launch(x, w, y, M, N, ds, eps, N, N),
                                       ours_raw(L.grid(M), 1, stream, *raw_args))
        directs[HIT_NOOP] = directs[HIT_NOOP_RAW] = noop
    for name, fn in paths.items():
        with calls_through(own, swaps.get(name)), direct_through(plan, directs.get(name)):
            for _ in range(50):
                fn()
    torch.cuda.synchronize()
    samples = {k: [] for k in paths}
    # In-place calls (one tensor in two places) keep a check of their own next to the out-of-place one; a hit
    # after the other kind tries both. Each kind is timed in its own phase, in the steady state a caller
    # that makes only that kind of call sees: the out-of-place paths first, then the in-place ones.
    in_place = [n for n in paths if "in place" in n or "out=x" in n]
    for phase in ([n for n in paths if n not in in_place], in_place):
        for _ in range(args.repeats):
            for name in phase:
                fn = paths[name]
                torch.cuda.synchronize()
                with calls_through(own, swaps.get(name)), direct_through(plan, directs.get(name)):
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        fn()
                    t1 = time.perf_counter()
                torch.cuda.synchronize()
                samples[name].append((t1 - t0) * 1e6 / args.calls)
    us = {k: statistics.median(v) for k, v in samples.items()}
    spread = {k: (min(v), max(v)) for k, v in samples.items()}
    layer = us["tuner(prepared)"] - us["specialized launch"]
    # the same checks and launch with and without the layer: what a user's call pays for it (where the
    # tuned config is the default, as in a fresh store: the same kernel on both sides)
    entry_layer = us["rmsnorm_autotuned"] - us["rmsnorm"]
    SIDE = "F.rms_norm on side (torch.cuda.stream block)"
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "shape": [M, N], "dtype": ds, "config": cfg, "tensor_check": check_kind, "calls": args.calls, "repeats": args.repeats}
    lines = [f"Host µs per call, {M} × {N} bf16 on {meta['device']} (torch {meta['torch']}, Triton "
             f"{meta['triton']}); median of {args.repeats} loops of {args.calls} calls; {meta['date']}.", "",
             "| path | µs per call | min–max |", "|---|---|---|"]
    for name in paths:
        lo, hi = spread[name]
        lines.append(f"| {name} | {us[name]:.2f} | {lo:.2f}–{hi:.2f} |")
    # A busy host only adds time: the fastest loop of each path is the steadier comparison.
    fastest = {k: min(v) for k, v in samples.items()}
    lines += ["", f"Autotune layer (tuner(prepared) − specialized launch): {layer:.2f} µs (medians), "
                  f"{fastest['tuner(prepared)'] - fastest['specialized launch']:.2f} µs (fastest loops); "
                  f"rmsnorm_autotuned / F.rms_norm: {us['rmsnorm_autotuned'] / us['F.rms_norm']:.2f}× (medians), "
                  f"{fastest['rmsnorm_autotuned'] / fastest['F.rms_norm']:.2f}× (fastest loops).",
              "", f"The layer between the entry points (rmsnorm_autotuned − rmsnorm, the same checks and launch): "
                  f"{entry_layer:+.2f} µs (medians), {fastest['rmsnorm_autotuned'] - fastest['rmsnorm']:+.2f} µs "
                  f"(fastest loops)" + ("" if cfg == default_cfg else "; the tuned config is not the default here, "
                                         "so the two launch different kernels") + ".",
              "", "With a stream (medians): `rmsnorm_autotuned, stream=` (the current one) / F.rms_norm "
                  f"{us['rmsnorm_autotuned, stream='] / us['F.rms_norm']:.2f}×; `stream=side` / F.rms_norm "
                  f"{us['rmsnorm_autotuned, stream=side'] / us['F.rms_norm']:.2f}×, / F.rms_norm in a "
                  f"`torch.cuda.stream(side)` block {us['rmsnorm_autotuned, stream=side'] / us[SIDE]:.2f}×."]
    if swaps:
        lines += ["", f"Hit paths: the C one {layer:.2f} µs (medians), the generated Python one "
                      f"{us[PY_HIT] - us['specialized launch']:.2f} µs (tuner(prepared), Python hit path − "
                      f"specialized launch); fastest loops {fastest['tuner(prepared)'] - fastest['specialized launch']:.2f} "
                      f"and {fastest[PY_HIT] - fastest['specialized launch']:.2f} µs."]
    else:
        lines += ["", "The C hit path is not built here: the layer above is the Python hit path's."]
    if directs:
        alone, beside = us[HIT_NOOP] - us[NOOP], us[HIT_NOOP_RAW] - us["raw: claunch"] - us[NOOP]
        lines += ["", f"The hit path's own work (over a no-op launch, minus the no-op call): {alone:.2f} µs alone, "
                      f"{beside:.2f} µs with a raw launch of the same binary after each hit (that loop minus raw: "
                      f"claunch's and the no-op's); fastest loops {fastest[HIT_NOOP] - fastest[NOOP]:.2f} and "
                      f"{fastest[HIT_NOOP_RAW] - fastest['raw: claunch'] - fastest[NOOP]:.2f} µs."]
    lines += ["", f"Hits check tensors with: {check_kind} ({check_why})."]
    md = "\n".join(lines)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "dispatch.json"), "w") as f:
        json.dump({"meta": meta, "us": us, "fastest": fastest, "spread": spread, "layer_us": layer, "entry_layer_us": entry_layer,
                   "markdown": md}, f,
                  indent=1)
    print(md)


@contextlib.contextmanager
def direct_through(plan, launch):
    """``plan.direct`` (what a cache hit of the plan calls) is ``launch`` inside the block, where ``launch``
    is not None."""
    if launch is None:
        yield
        return
    old = plan.direct
    plan.direct = launch
    try:
        yield
    finally:
        plan.direct = old


@contextlib.contextmanager
def calls_through(own, call):
    """``own.__call__`` (a tuner's class) is ``call`` inside the block, where ``call`` is not None."""
    if call is None:
        yield
        return
    old = own.__dict__["__call__"]
    own.__call__ = call
    try:
        yield
    finally:
        own.__call__ = old


def cpu_only(args) -> None:
    """The host-only pieces on CPU tensors: argument check (with allocation) and allocation alone."""
    import timeit

    import torch

    from flyautotune_rmsnorm.api import _check

    x = torch.randn(args.M, args.N, dtype=torch.bfloat16)
    w = torch.rand(args.N, dtype=torch.bfloat16)
    paths = {"checks + output alloc": lambda: _check(x, w, 1e-6, None),
             "torch.empty_like(x)": lambda: torch.empty_like(x), "x.new_empty(x.shape)": lambda: x.new_empty(x.shape)}
    print(f"No GPU: host µs per call on CPU tensors, {args.M} × {args.N} bf16 (best of {args.repeats} loops)")
    for name, fn in paths.items():
        us = min(timeit.repeat(fn, number=args.calls * 10, repeat=args.repeats)) / (args.calls * 10) * 1e6
        print(f"| {name} | {us:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
