"""Where torch.compile's short-row kernel gains on ours: one body, bisected, on one CUDA GPU.

At 65536 x 128 bf16 torch.compile leads every config of our space by about 1 %, and our 64t x 8r p0 by
2.5 % (``bench/space_probe.py``). Cross-compiled for sm_90, our body and one written as Inductor writes it
have the same instructions give or take a few (``--check``). This probe times,
in CUDA-graph replay as ``bench/rmsnorm.py`` times its peers:

* the peers (torch.compile, QuACK when installed), a clone, ``rmsnorm_autotuned``;
* our configs through our launch path, and the same binaries through Triton's own launcher;
* a minimal whole-row body written the way Inductor writes its persistent reductions (rows x the row
  length as one 2-D block, 32-bit offsets, the weight loaded as a ``[1, N]`` row with ``evict_last``),
  with its knobs varied one at a time: rows per program and warps, x's eviction policy, the weight's
  load as a 1-D row, eps at run time;
* persistent programs (2 or 4 an SM) that walk tiles of rows with Triton's pipeliner on (2 or 3
  stages), so x arrives through ``cp.async`` copies to shared memory issued a tile or two ahead: QuACK's
  kernel copies x with ``cp.async`` too (one tile a CTA), and no body of ours does.

Nothing here enters the config space: whichever difference pays is then built into the product body.

    python bench/body_probe.py --out DIR [--shapes 65536x128:bf16,...] [--rounds 5]
    python bench/body_probe.py --check   # CPU: every variant against the fp64 reference (interpreter),
                                         # and the sm_90 SASS or PTX of each (cross-compiled): instructions,
                                         # barriers, cp.async copies
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = "65536x128:bf16,262144x256:bf16,4096x1000:bf16"


def _mimic(X, W, Y, M, eps_rt, N: tl.constexpr, BLOCK_N: tl.constexpr, XB: tl.constexpr, EPS: tl.constexpr,
           XPOL: tl.constexpr, W2D: tl.constexpr, EPS_RT: tl.constexpr):
    rows = tl.program_id(0) * XB + tl.arange(0, XB)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    ok = (rows < M) & (cols < N)
    x = tl.load(X + (cols + N * rows), mask=ok, other=0.0, eviction_policy=XPOL).to(tl.float32)
    ms = tl.reduce(x * x, 1, tl.standard._sum_combine)[:, None] / N
    if EPS_RT:
        r = tl.rsqrt(ms + eps_rt)
    else:
        r = tl.rsqrt(ms + EPS)
    if W2D:
        w = tl.load(W + cols, mask=cols < N, other=0.0, eviction_policy="evict_last").to(tl.float32)
    else:
        c1 = tl.arange(0, BLOCK_N)
        w = tl.load(W + c1, mask=c1 < N, other=0.0, eviction_policy="evict_last").to(tl.float32)[None, :]
    tl.store(Y + (cols + N * rows), (x * r * w).to(Y.dtype.element_ty), mask=ok)


#: name -> (rows per program, warps, x's eviction policy, weight as a [1, N] row, eps at run time)
def variants(M: int, N: int) -> dict:
    if N <= 256:  # Inductor's pick at 65536 x 128 bf16 (torch 2.11): 32 rows, 2 warps
        base = {"32r 2w": (32, 2), "8r 2w": (8, 2), "16r 2w": (16, 2), "16r 4w": (16, 4), "32r 8w": (32, 8)}
    else:
        base = {"2r 4w": (2, 4), "4r 8w": (4, 8)}
    out = {}
    for name, (xb, warps) in base.items():
        out[f"mimic {name}"] = (xb, warps, "", 1, 0)
    xb, warps = next(iter(base.values()))
    first = next(iter(base))
    out[f"mimic {first}, x evict_first"] = (xb, warps, "evict_first", 1, 0)
    out[f"mimic {first}, w 1-D"] = (xb, warps, "", 0, 0)
    out[f"mimic {first}, eps at run time"] = (xb, warps, "", 1, 1)
    return out


def _persist(X, W, Y, M, eps, N: tl.constexpr, BLOCK_N: tl.constexpr, XB: tl.constexpr, STAGES: tl.constexpr):
    """Persistent rows: each program loads the weight once, then walks tiles of XB rows ``num_programs``
    apart. With ``STAGES >= 2`` Triton's pipeliner turns x's load into ``cp.async`` copies to shared memory
    issued STAGES - 1 tiles ahead (QuACK copies x with ``cp.async`` too, one tile a CTA)."""
    cols = tl.arange(0, BLOCK_N)[None, :]
    w = tl.load(W + cols, mask=cols < N, other=0.0, eviction_policy="evict_last").to(tl.float32)
    for t in tl.range(tl.program_id(0), (M + XB - 1) // XB, tl.num_programs(0), num_stages=STAGES):
        rows = t * XB + tl.arange(0, XB)[:, None]
        ok = (rows < M) & (cols < N)
        x = tl.load(X + (cols + N * rows), mask=ok, other=0.0).to(tl.float32)
        r = tl.rsqrt(tl.reduce(x * x, 1, tl.standard._sum_combine)[:, None] / N + eps)
        tl.store(Y + (cols + N * rows), (x * r * w).to(Y.dtype.element_ty), mask=ok)


#: name -> (rows a tile, warps, pipeline stages, programs per SM)
def persistent_variants(N: int) -> dict:
    tiles = {"32r 2w": (32, 2), "16r 4w": (16, 4)} if N <= 256 else {"4r 4w": (4, 4), "2r 4w": (2, 4)}
    return {f"persistent {name}, {stages} stages, {per_sm}/SM": (xb, warps, stages, per_sm)
            for name, (xb, warps) in tiles.items() for stages in (2, 3) for per_sm in (2, 4)}


def _jit(body, interpret: bool):
    """``body`` compiled for GPUs, or under Triton's interpreter for CPU tensors."""
    if interpret:
        from triton.runtime.interpreter import InterpretedFunction

        return InterpretedFunction(body)
    return triton.runtime.jit.JITFunction(body)


def _kernel(interpret: bool):
    return _jit(_mimic, interpret)


def _persist_kernel(interpret: bool):
    return _jit(_persist, interpret)


def persist_launch(kernel, x, w, y, knobs, sms, eps=1e-6):
    M, N = x.shape
    xb, warps, stages, per_sm = knobs
    grid = max(1, min(triton.cdiv(M, xb), sms * per_sm))
    kernel[(grid,)](x, w, y, M, eps, N=N, BLOCK_N=triton.next_power_of_2(N), XB=xb, STAGES=stages,
                    num_warps=warps)
    return y


def mimic_launch(kernel, x, w, y, knobs, eps=1e-6):
    M, N = x.shape
    xb, warps, xpol, w2d, eps_rt = knobs
    kernel[(triton.cdiv(M, xb),)](x, w, y, M, eps, N=N, BLOCK_N=triton.next_power_of_2(N), XB=xb, EPS=eps,
                                  XPOL=xpol, W2D=w2d, EPS_RT=eps_rt, num_warps=warps)
    return y


def sass_counts(N: int, knobs) -> dict:
    """Instructions, ``BAR`` and global loads of the sm_90 binary of one variant (cross-compiled)."""
    from triton.backends.compiler import GPUTarget

    xb, warps, xpol, w2d, eps_rt = knobs
    sig = {"X": "*bf16", "W": "*bf16", "Y": "*bf16", "M": "i32", "eps_rt": "fp32"}
    consts = dict(N=N, BLOCK_N=triton.next_power_of_2(N), XB=xb, EPS=1e-6, XPOL=xpol, W2D=w2d, EPS_RT=eps_rt)
    sig.update({k: "constexpr" for k in consts})
    k = triton.compile(triton.compiler.ASTSource(_kernel(False), sig, consts,
                                                 {(i,): [["tt.divisibility", 16]] for i in range(3)}),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        sass = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
    ins = [ln.split("*/", 1)[1] for ln in sass.splitlines() if ln.strip().startswith("/*") and ";" in ln]
    return {"instructions": len(ins), "BAR": sum(" BAR" in i for i in ins), "LDG": sum("LDG" in i for i in ins),
            "shared": k.metadata.shared}


def check() -> int:
    import torch

    from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance

    kernel = _kernel(True)
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        for M, N in ((16, 128), (5, 1000), (3, 1)):
            x = torch.randn(M, N, dtype=dt) * 2
            w = torch.rand(N, dtype=dt) + 0.5
            for name, knobs in variants(M, N).items():
                y = mimic_launch(kernel, x, w, torch.full_like(x, float("nan")), knobs)
                err = relative_error(y, rmsnorm_reference(x, w))
                assert err <= 5 * tolerance(dt), (name, dt, M, N, err)  # the bench's bound
    persist = _persist_kernel(True)
    for dt in (torch.bfloat16, torch.float32):
        for M, N in ((75, 128), (13, 1000)):  # 2 "SMs": each program walks several tiles, the last one partial
            x = torch.randn(M, N, dtype=dt) * 2
            w = torch.rand(N, dtype=dt) + 0.5
            for name, knobs in persistent_variants(N).items():
                y = persist_launch(persist, x, w, torch.full_like(x, float("nan")), knobs, sms=2)
                err = relative_error(y, rmsnorm_reference(x, w))
                assert err <= 5 * tolerance(dt), (name, dt, M, N, err)
    print("every variant matches the fp64 reference (bf16, fp16, fp32; 128, 1000, 1 wide) under the interpreter")
    try:
        for N in (128, 1000):
            for name, knobs in variants(65536, N).items():
                print(f"sm_90, {N} wide, {name}: {sass_counts(N, knobs)}")
        for N in (128, 1000):
            for name, knobs in persistent_variants(N).items():
                print(f"sm_90, {N} wide, {name}: {persist_ptx_counts(N, knobs)}")
    except Exception as exc:  # no ptxas here: the check above still stands
        print(f"no cross-compiled SASS: {type(exc).__name__}: {exc}")
    return 0


def persist_ptx_counts(N: int, knobs) -> dict:
    """``cp.async`` copies, global loads, barriers and shared memory of one persistent variant (sm_90 PTX)."""
    from triton.backends.compiler import GPUTarget

    xb, warps, stages, _ = knobs
    sig = {"X": "*bf16", "W": "*bf16", "Y": "*bf16", "M": "i32", "eps": "fp32"}
    consts = dict(N=N, BLOCK_N=triton.next_power_of_2(N), XB=xb, STAGES=stages)
    sig.update({k: "constexpr" for k in consts})
    k = triton.compile(triton.compiler.ASTSource(_persist_kernel(False), sig, consts,
                                                 {(i,): [["tt.divisibility", 16]] for i in range(3)}),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    ptx = k.asm["ptx"]
    return {"cp.async": len(re.findall(r"cp\.async\.c[ag]", ptx)), "ld.global": ptx.count("ld.global"),
            "bar.sync": ptx.count("bar.sync"), "shared": k.metadata.shared}


def via_triton(M, N, ds, kw):
    """``f(x, w)`` launching config ``kw``'s binary through Triton's own launcher, with the constexprs
    our launcher would give a launch over ``M`` packed rows."""
    import torch
    from rmsnorm import EPS

    from flyautotune_rmsnorm.factory import _CONST_NAMES, make_launcher, row_vec
    from flyautotune_rmsnorm.kernel import jit_kernel

    lz = make_launcher(N, ds, **kw)
    consts = dict(zip(_CONST_NAMES, lz._constexprs(M, row_vec(N, N, lz.elem, lz.VEC), N, N)))
    rv = consts["ROW_VEC"]

    def run(x, w):
        y = torch.empty_like(x)
        jit_kernel()[(lz.grid(M),)](x, w, y, M, N // rv, N // rv, EPS, **consts, num_warps=lz.num_warps)
        return y

    return run


def add_bodies(fns, M, N, ds, picked, kernel, persist, props):
    """The pick and the space's configs of the mimic's tiles (through our launch and through Triton's),
    the mimic's variants and the persistent ones, into ``fns``."""
    import torch
    from rmsnorm import EPS
    from space_probe import describe

    from flyautotune_rmsnorm.api import launch
    from flyautotune_rmsnorm.space import cuda_space

    tiles = {(v[1] * 32, v[0]) for v in variants(M, N).values()}
    ours = [picked] + [c.kwargs for c in cuda_space(M, N, ds) if c.kwargs != picked
                       and (c.kwargs["BLOCK_THREADS"], c.kwargs["ROWS_PER_PROGRAM"]) in tiles]
    for kw in ours:
        name = describe(kw)
        fns[name] = lambda x, w, kw=kw: launch(x, w, torch.empty_like(x), M, N, ds, EPS, N, N, None, **kw)
        if not kw.get("ASYNC"):  # the Gluon body has no Triton-language twin to launch
            fns[name + ", Triton's launcher"] = via_triton(M, N, ds, kw)
    for name, knobs in variants(M, N).items():
        fns[name] = lambda x, w, knobs=knobs: mimic_launch(kernel, x, w, torch.empty_like(x), knobs, EPS)
    for name, knobs in persistent_variants(N).items():
        fns[name] = lambda x, w, knobs=knobs: persist_launch(persist, x, w, torch.empty_like(x), knobs,
                                                             props.multi_processor_count, EPS)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--check", action="store_true", help="CPU: correctness under the interpreter, SASS counts")
    args = ap.parse_args(argv)
    if args.check:
        return check()
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("FLYAUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="fat-body-"))
    import torch

    from rmsnorm import check_and_rank, load_quack, probe_fns, save_and_rank, searched_inputs, shape_spec
    from space_probe import describe

    quack = load_quack()
    kernel, persist = _kernel(False), _persist_kernel(False)
    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        x, w, picked = searched_inputs(M, N, ds)
        fns = probe_fns(N, quack, x, w)
        add_bodies(fns, M, N, ds, picked, kernel, persist, torch.cuda.get_device_properties(x.device))
        rows.append(check_and_rank(fns, x, w, spec, args.rounds, describe(picked)))
        del x
        torch.cuda.empty_cache()
    save_and_rank(args.out, "body_probe.json", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
