"""Would programmatic dependent launch (PDL) pay for RMSNorm? A probe on a CUDA GPU (Hopper+).

With PDL a kernel may be launched before the kernel ahead of it on the stream has finished: its
blocks wait (``griddepcontrol.wait``) until that kernel's memory is visible, but the launch and
the blocks' scheduling overlap the predecessor's tail. FlashInfer's RMSNorm offers it
(``enable_pdl``). This times one minimal Triton RMSNorm body (whole rows in registers) three
ways in CUDA-graph replay over rotating inputs, as ``bench/rmsnorm.py`` times its peers:

* ``plain`` — launched as usual;
* ``pdl`` — launched with PDL, waiting before its first load (the predecessor triggers at exit);
* ``pdl+early`` — the same, and it lets its own dependents launch once its loads are issued.

``tuned`` (``rmsnorm_autotuned``, which runs with PDL on Hopper unless ``FLYAUTOTUNE_RMSNORM_PDL=0``)
and ``x.clone()`` are timed in the same rounds for scale. Back-to-back replay of one kernel is PDL's
best case (every predecessor is itself). With ``--neighbour`` every call is followed by a torch
kernel that reads its output (``y.add_(1)``, launched without PDL, as a residual add would be): what
PDL gains when the kernels around the norm are not PDL kernels. Nothing here enters the config space.

    python bench/pdl_probe.py --out DIR [--shapes 1x4096:bf16,...] [--rounds 3] [--neighbour]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = ("1x4096:bf16,32x4096:bf16,256x8192:bf16,4096x1000:bf16,65536x128:bf16,262144x256:bf16,"
          "65536x1024:bf16,16384x8192:bf16")


@triton.jit
def _norm(X, W, Y, M, eps, N: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, PDL: tl.constexpr,
          EARLY: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    ok = (rows < M)[:, None] & (cols < N)[None, :]
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
    if PDL:
        tl.extra.cuda.gdc_wait()  # the predecessor's writes are visible from here on
    x = tl.load(X + offs, mask=ok, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)
    if EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    rstd = tl.rsqrt(tl.sum(x * x, 1) / N + eps)
    tl.store(Y + offs, (x * rstd[:, None] * w[None, :]).to(Y.dtype.element_ty), mask=ok)


def variant(M, N, pdl, early):
    import torch

    block = triton.next_power_of_2(N)
    rows = max(1, min(64, 2048 // block))
    warps = max(1, min(8, rows * block // 256))
    grid = (triton.cdiv(M, rows),)

    def run(x, w):
        y = torch.empty_like(x)
        _norm[grid](x, w, y, M, 1e-6, N=N, BLOCK_N=block, ROWS=rows, PDL=pdl, EARLY=early, num_warps=warps,
                    launch_pdl=pdl)
        return y

    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--neighbour", action="store_true", help="follow every call with y.add_(1) (no PDL)")
    args = ap.parse_args(argv)

    import torch
    from rmsnorm import gbps_of, graph_times, rotating_inputs, shape_spec, torch_dtype

    from flyautotune_rmsnorm import rmsnorm_autotuned
    from flyautotune_rmsnorm.reference import check_against_reference

    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, Triton {triton.__version__}"
          f"{'; every call followed by y.add_(1)' if args.neighbour else ''}\n")
    print("| shape | plain | pdl | pdl+early | tuned | clone | pdl / plain | best pdl / tuned |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        x = torch.randn(M, N, device="cuda", dtype=torch_dtype(ds))
        w = torch.rand(N, device="cuda", dtype=x.dtype) + 0.5
        os.environ["FLYAUTOTUNE"] = "1"  # tuned: a search first, then cache hits
        rmsnorm_autotuned(x, w, 1e-6)
        os.environ.pop("FLYAUTOTUNE")
        fns = {"plain": variant(M, N, False, False), "pdl": variant(M, N, True, False),
               "pdl+early": variant(M, N, True, True), "tuned": lambda x, w: rmsnorm_autotuned(x, w, 1e-6),
               "clone": lambda x, w: x.clone()}
        for name, fn in fns.items():
            if name != "clone":
                check_against_reference(fn(x, w), x, w, name)
        if args.neighbour:
            fns = {name: (lambda x, w, fn=fn: fn(x, w).add_(1.0)) for name, fn in fns.items()}
        ms = graph_times(fns, rotating_inputs(x, M, N, ds), w, args.rounds)
        gbs = gbps_of(ms, M, N, ds)
        best = max(gbs["pdl"], gbs["pdl+early"])
        print(f"| {M} × {N} {ds} | {gbs['plain']:.0f} | {gbs['pdl']:.0f} | {gbs['pdl+early']:.0f} | "
              f"{gbs['tuned']:.0f} | {gbs['clone']:.0f} | {best / gbs['plain']:.3f} | {best / gbs['tuned']:.3f} |",
              flush=True)
        rows.append({"shape": spec, "neighbour": args.neighbour, "ms": ms, "GBs": gbs})
        del x
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"pdl_probe{'_neighbour' if args.neighbour else ''}.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
