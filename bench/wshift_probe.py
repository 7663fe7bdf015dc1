"""Rows off the 16-byte grid: is the weight's element-wise load worth removing?

With ``ALIGN`` (rows whose width is not a whole number of 16-byte vectors) each row of x is read as the
aligned vectors that hold it, but the weight, aligned differently in every row, is still read element by
element. This probe times a variant of the body that reads the weight from ``ALIGN`` shifted copies of it
(copy ``h`` holds the weight from element ``h`` of a ``BLOCK_N``-wide padded row, zeros around it), so
every weight access is an aligned 16-byte vector too. Per odd-width shape, every whole-row config of the
CUDA space where ``ALIGN`` applies is timed three ways (CUDA-graph replay over rotating inputs, as
``bench/rmsnorm.py`` times its peers):

* ``CONFIG``: the body as shipped;
* ``CONFIG, wshift``: the variant, the shifted copies made once outside the timing (the bound: what the
  weight's vector loads buy);
* ``CONFIG, wshift+prep``: the variant with a small kernel that builds the shifted copies in every call
  (what shipping it would cost).

Every other config of the space, the default, the tuned pick, torch.compile and a clone are timed too,
so one run also says which config the zero-search default should pick for these widths.

    python bench/wshift_probe.py --out DIR [--shapes 16384x2999:bf16,...] [--rounds 3]

Without a GPU it checks the variant against the fp64 reference under Triton's interpreter and stops.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = "32x3001:bf16,4096x1001:bf16,16384x2999:bf16,4096x1001:fp32,1024x5001:fp16,8192x2047:bf16"

_OLD_W = "w = tl.load(W + (cols[None, :] - first), mask=in_row, other=0.0, eviction_policy=W_POLICY)"
_NEW_W = ("w = tl.load(W + tl.multiple_of(head * BLOCK_N, ALIGN)[:, None] + cols[None, :], "
          "eviction_policy=W_POLICY)")
_OLD_WE = "we = tl.load(W + (pos - first), mask=ok, other=0.0).to(tl.float32)"
_NEW_WE = "we = tl.load(W + (head * BLOCK_N)[:, None] + pos, mask=ok, other=0.0).to(tl.float32)"

_PREP = '''

@triton.jit
def _shift_weight(W, WS, N: tl.constexpr, BLOCK_N: tl.constexpr):
    h = tl.program_id(0)
    c = tl.arange(0, BLOCK_N)
    tl.store(WS + h * BLOCK_N + c, tl.load(W + c - h, mask=(c >= h) & (c - h < N), other=0.0))
'''


def variant_module():
    """The body with the weight read from its shifted copies, as a module of its own (Triton reads a
    kernel's source from its file), plus ``_shift_weight``, the kernel that builds the copies."""
    from flyautotune_rmsnorm import kernel

    src = inspect.getsource(kernel)
    for old, new in ((_OLD_W, _NEW_W), (_OLD_WE, _NEW_WE)):
        if src.count(old) != 1:
            raise SystemExit(f"wshift_probe: the body changed; cannot find {old!r}")
        src = src.replace(old, new)
    path = os.path.join(tempfile.mkdtemp(prefix="wshift-"), "rmsnorm_wshift.py")
    with open(path, "w") as f:
        f.write(src + _PREP)
    spec = importlib.util.spec_from_file_location("rmsnorm_wshift", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def shifted(w, align, block_n):
    """``[align, block_n]``: row ``h`` holds ``w`` from column ``h``, zeros elsewhere."""
    import torch

    ws = torch.zeros(align, block_n, dtype=w.dtype, device=w.device)
    for h in range(align):
        ws[h, h:h + w.numel()] = w
    return ws


def variant_launcher(mod, kw, N, ds, interpret=False):
    """``fn(x, ws, y, M)`` of the variant for config ``kw`` (a launcher of its own, so its binaries never
    mix with the shipped body's), and the launcher."""
    from flyautotune_rmsnorm import factory

    launcher = factory.RMSNormLauncher(N, ds, kw["BLOCK_THREADS"], kw["ROWS_PER_PROGRAM"], kw["CHUNK"],
                                       kw["CACHE_POLICY"], kw["PREFETCH"], kw["SPLIT"], kw["VEC"], kw["COOP"],
                                       kw["HOLD"])
    jit = mod.triton.runtime.jit.JITFunction(mod._rmsnorm_fwd, **mod._JIT_ARGS)
    interp = None
    if interpret:
        from triton.runtime.interpreter import InterpretedFunction

        interp = InterpretedFunction(mod._rmsnorm_fwd, **mod._JIT_ARGS)

    def run(x, ws, y, M, eps):
        saved = factory._kernel.jit_kernel, factory._kernel.interpreted_kernel
        factory._kernel.jit_kernel = lambda: jit  # only a first launch compiles through it
        factory._kernel.interpreted_kernel = lambda: interp
        try:
            launcher(x, ws, y, M, N, N, eps, None, (), interpret)
        finally:
            factory._kernel.jit_kernel, factory._kernel.interpreted_kernel = saved
        return y

    return run, launcher


def whole_row_aligned(space, N, ds):
    from flyautotune_rmsnorm import factory

    out = []
    for c in space:
        kw = c.kwargs
        if kw["CHUNK"] or kw["SPLIT"] != 1 or kw.get("ASYNC"):
            continue
        probe = factory.make_launcher(N, ds, **kw)
        align = probe.align(N, N)
        if align:
            out.append((kw, align, probe.BLOCK_N))
    return out


def cpu_check(mod):
    import torch

    from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance
    from flyautotune_rmsnorm.space import cuda_space

    n = 0
    for M, N, ds, dt in ((5, 1001, "bf16", torch.bfloat16), (3, 37, "fp32", torch.float32),
                         (4, 13, "fp16", torch.float16)):
        torch.manual_seed(N)
        x = torch.randn(M, N, dtype=dt)
        w = torch.rand(N, dtype=dt) + 0.5
        ref = rmsnorm_reference(x, w, 1e-6)
        for kw, align, block_n in whole_row_aligned(cuda_space(M, N, ds), N, ds)[:3] or []:
            run, _ = variant_launcher(mod, kw, N, ds, interpret=True)
            y = run(x, shifted(w, align, block_n).reshape(-1), torch.empty_like(x), M, 1e-6)
            err = relative_error(y, ref)
            assert err <= 5 * tolerance(dt), (M, N, ds, kw, err)
            n += 1
    print(f"wshift_probe: the variant matches the fp64 reference under the interpreter ({n} configs)")


def main(argv=None):
    from rmsnorm import probe_args

    args = probe_args(argv, __doc__, SHAPES, "fat-wshift-")
    import torch

    mod = variant_module()
    if not torch.cuda.is_available():
        return cpu_check(mod)

    from rmsnorm import EPS, check_and_rank, probe_fns, save_and_rank, searched_inputs, shape_spec
    from space_probe import describe

    from flyautotune_rmsnorm.api import launch
    from flyautotune_rmsnorm.space import cuda_space, default_config

    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        x, w, picked = searched_inputs(M, N, ds)
        fns = probe_fns(N, None, x, w)
        space = cuda_space(M, N, ds)
        for c in space:
            fns[describe(c.kwargs)] = lambda x, w, kw=c.kwargs: launch(x, w, torch.empty_like(x), M, N, ds, EPS,
                                                                       N, N, None, **kw)
        for kw, align, block_n in whole_row_aligned(space, N, ds):
            run, _ = variant_launcher(mod, kw, N, ds)
            ws = shifted(w, align, block_n).reshape(-1)
            fns[describe(kw) + ", wshift"] = lambda x, w, run=run, ws=ws: run(x, ws, torch.empty_like(x), M, EPS)

            def prep(x, w, run=run, align=align, block_n=block_n):
                ws2 = torch.empty(align * block_n, dtype=w.dtype, device=w.device)
                mod._shift_weight[(align,)](w, ws2, N, block_n, num_warps=4)
                return run(x, ws2, torch.empty_like(x), M, EPS)

            fns[describe(kw) + ", wshift+prep"] = prep
        rows.append(check_and_rank(fns, x, w, spec, args.rounds, describe(picked),
                                   default=describe(default_config(M, N, ds).kwargs)))
        del x
        torch.cuda.empty_cache()
    save_and_rank(args.out, "wshift_probe.json", rows)


if __name__ == "__main__":
    sys.exit(main())
