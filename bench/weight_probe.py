"""Would issuing the weight's load with x's pay for latency-bound RMSNorm? A probe (one CUDA GPU; ``--check``
runs on a CPU).

In a one-row program (1 x 4096, 32 x 4096 bf16) ptxas issues the weight's load only after x's squares
(it reuses x's registers for it), so the reduction hides only part of the weight's latency. Making the
squares depend on the weight (``xf * xf + (wf - wf)``: LLVM cannot fold it under NaN semantics) moves
both weight loads ahead of x's in the SASS, for one add per element. This times one minimal body (one
row per program, whole row in registers, the tuned config's thread count) both ways, in CUDA-graph
replay over rotating inputs as ``bench/rmsnorm.py`` times its peers, next to ours tuned and a clone.
Nothing here enters the config space.

    python bench/weight_probe.py --out DIR [--shapes 1x4096:bf16,...] [--rounds 9]
    python bench/weight_probe.py --check   # CPU: both bodies against the fp64 reference (interpreter),
                                           # and where the sm_90 SASS issues the loads (cross-compiled)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = "1x4096:bf16,32x4096:bf16,32x3000:bf16,256x8192:bf16,1x8192:bf16,128x4096:bf16"
VARIANTS = {"late": 0, "early": 1}


def _norm(X, W, Y, eps, N: tl.constexpr, BLOCK_N: tl.constexpr, EARLY_W: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    ok = cols < N
    row = tl.program_id(0).to(tl.int64) * N
    x = tl.load(X + row + cols, mask=ok, other=0.0, eviction_policy="evict_first")
    w = tl.load(W + cols, mask=ok, other=0.0, eviction_policy="evict_last")
    xf = x.to(tl.float32)
    wf = w.to(tl.float32)
    if EARLY_W:
        sq = xf * xf + (wf - wf)  # the squares wait for the weight: ptxas issues its load with x's
    else:
        sq = xf * xf
    rstd = tl.rsqrt(tl.reduce(sq, 0, tl.standard._sum_combine) / N + eps)
    tl.store(Y + row + cols, (xf * rstd * wf).to(Y.dtype.element_ty), mask=ok)


def _kernel(interpret: bool):
    """The body compiled for GPUs, or under Triton's interpreter for CPU tensors."""
    if interpret:
        from triton.runtime.interpreter import InterpretedFunction

        return InterpretedFunction(_norm)
    return triton.runtime.jit.JITFunction(_norm)


def launch(kernel, x, w, y, early, warps=None):
    M, N = x.shape
    kw = dict(N=N, BLOCK_N=triton.next_power_of_2(N), EARLY_W=early)
    if warps:
        kw["num_warps"] = warps
    kernel[(M,)](x, w, y, 1e-6, **kw)
    return y


def sass_load_order(N: int, warps: int) -> dict:
    """``{variant: [("x" | "w", SASS offset), ...]}``: the global loads of the sm_90 binary, in order."""
    from triton.backends.compiler import GPUTarget

    kernel = _kernel(False)
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    out = {}
    for name, early in VARIANTS.items():
        sig = {"X": "*bf16", "W": "*bf16", "Y": "*bf16", "eps": "fp32", "N": "constexpr", "BLOCK_N": "constexpr",
               "EARLY_W": "constexpr"}
        k = triton.compile(triton.compiler.ASTSource(kernel, sig, {"N": N, "BLOCK_N": triton.next_power_of_2(N),
                                                                   "EARLY_W": early},
                                                     {(i,): [["tt.divisibility", 16]] for i in range(3)}),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(k.asm["cubin"])
            f.flush()
            sass = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True).stdout
        out[name] = [("w" if ".EL" in line else "x", int(m.group(1), 16))
                     for line in sass.splitlines() if "LDG" in line
                     for m in [re.search(r"/\*([0-9a-f]{4})\*/", line)] if m]
    return out


def check() -> int:
    import torch

    from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance

    kernel = _kernel(True)
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        for M, N in ((3, 4096), (2, 3000), (1, 1)):
            x = torch.randn(M, N, dtype=dt) * 2
            w = torch.rand(N, dtype=dt) + 0.5
            for name, early in VARIANTS.items():
                y = launch(kernel, x, w, torch.full_like(x, float("nan")), early)
                err = relative_error(y, rmsnorm_reference(x, w))
                assert err <= 5 * tolerance(dt), (name, dt, M, N, err)  # the bench's bound
    print("both bodies match the fp64 reference (bf16, fp16, fp32; 4096, 3000, 1 wide) under the interpreter")
    try:
        for N, warps in ((4096, 8), (3000, 4), (8192, 16)):
            print(f"sm_90 global loads, {N} wide, {warps} warps:", sass_load_order(N, warps))
    except Exception as exc:  # no ptxas here: the check above still stands
        print(f"no cross-compiled SASS: {type(exc).__name__}: {exc}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--check", action="store_true", help="CPU: correctness under the interpreter, SASS load order")
    args = ap.parse_args(argv)
    if args.check:
        return check()
    os.makedirs(args.out, exist_ok=True)
    import torch

    from rmsnorm import EPS, gbps_of, graph_times, rotating_inputs, save_rows, searched_inputs, shape_spec

    from flyautotune_rmsnorm import rmsnorm_autotuned
    from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance

    kernel = _kernel(False)
    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        x, w, picked = searched_inputs(M, N, ds)
        warps = max(1, picked["BLOCK_THREADS"] // 32)
        fns = {"clone": lambda x, w: x.clone(), "tuned": lambda x, w: rmsnorm_autotuned(x, w, EPS)}
        for name, early in VARIANTS.items():
            fns[name] = (lambda x, w, early=early: launch(kernel, x, w, torch.empty_like(x), early, warps))
            err = relative_error(fns[name](x, w), rmsnorm_reference(x, w, EPS))
            assert err <= 5 * tolerance(x.dtype), (spec, name, err)
        gbps = gbps_of(graph_times(fns, rotating_inputs(x, M, N, ds), w, args.rounds), M, N, ds)
        row = {"shape": spec, "warps": warps, "gbps": gbps}
        rows.append(row)
        print(json.dumps(row), flush=True)
    save_rows(args.out, "weight_probe.json", rows)
    print("| shape | warps | weight after x (late) | with x (early) | early / late | ours tuned | clone |\n"
          "|---|---|---|---|---|---|---|")
    for r in rows:
        g = r["gbps"]
        print(f"| {r['shape']} | {r['warps']} | {g['late']:.1f} | {g['early']:.1f} | {g['early'] / g['late']:.3f} "
              f"| {g['tuned']:.1f} | {g['clone']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
