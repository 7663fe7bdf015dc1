"""Config by config: every CUDA-space candidate of a shape and configs outside the space, against
QuACK and torch.compile, in CUDA-graph replay over inputs rotated past L2, in one process (one CUDA GPU).

Outside the space: for long rows (the default shapes) the row held narrow in registers (HOLD) or split
across persistent programs (COOP=2); for short rows (any ``--shapes``) up to 4 vectors a thread and both
cache policies of short rows.

    python bench/long_rows.py --out DIR [--shapes 1024x65536:bf16,2048x32768:bf16,8192x16384:bf16]

Prints a table per shape (fastest first, GB/s) and writes long_rows.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = "1024x65536:bf16,2048x32768:bf16,8192x16384:bf16,4096x32768:bf16"


def extra_configs(M, N, ds):
    """Configs outside the space worth a look: the row held narrow in registers (``HOLD``, 16-bit rows of
    16-64 K elements at 512 or 1024 threads, cache policy 1 or 2), and at 32 K capped at 32 registers
    (two programs of 1024 threads per SM, a few bytes spilled)."""
    from flyautotune_rmsnorm.factory import next_pow2
    from flyautotune_rmsnorm.space import _cfg, persist_configs

    npad = next_pow2(N)
    if npad <= 2048:
        return short_extras(npad, ds)
    # The persistent split (COOP=2), with 1, 2 or 4 rows per trip (one barrier for all of them).
    persist = [_cfg(c.kwargs["BLOCK_THREADS"], rows, 0, 2, split=c.kwargs["SPLIT"], coop=2)
               for c in persist_configs(max(M, 132), N, ds) for rows in (1, 2, 4)]
    if ds not in ("bf16", "fp16") or not 16384 <= npad <= 65536:
        return persist
    out = [_cfg(bt, 1, 0, policy, hold=1) for bt in (512, 1024) if 32 <= npad // bt <= 64 for policy in (1, 2)]
    if npad == 32768:
        out.append(_cfg(1024, 1, 0, 2, hold=1, maxnreg=32))
    return out + persist


def short_extras(npad, ds):
    """Rows of at most 2048 elements: 1, 2 or 4 16-byte vectors a thread, 64-512 threads, as many rows
    per program as that takes (up to 64), cache policies 0 and 1."""
    from flyautotune_rmsnorm.space import _cfg

    from rmsnorm import ELEM_BYTES

    v = 16 // ELEM_BYTES[ds]
    out = []
    for policy in (0, 1):
        for per_thread in (v, 2 * v, 4 * v):
            for bt in (64, 128, 256, 512):
                rows = per_thread * bt // npad
                if 1 <= rows <= 64 and rows * npad == per_thread * bt:
                    out.append(_cfg(bt, rows, policy=policy))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (the median is kept)")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from rmsnorm import graph_times, load_quack, nbytes, rotating_inputs, shape_spec, torch_dtype

    import flyautotune as fat
    from flyautotune_rmsnorm.api import launch
    from flyautotune_rmsnorm.reference import check_against_reference
    from flyautotune_rmsnorm.space import cuda_space, default_config

    quack = load_quack()
    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        default = default_config(M, N, ds, "cuda")
        space = cuda_space(M, N, ds)
        configs = [default] + [c for c in space if c != default]
        configs += [c for c in extra_configs(M, N, ds) if c not in configs]
        torch._dynamo.reset()  # a fresh compile per shape (dynamo stops recompiling after 8)
        fns = {"torch.compile": torch.compile(lambda x, w: F.rms_norm(x, (N,), w, 1e-6), dynamic=False)}
        if quack is not None:
            fns["QuACK rmsnorm_fwd"] = lambda x, w: quack(x, w, eps=1e-6)[0]
        for cfg in configs:
            def run(x, w, kw=cfg.kwargs, hints=cfg.hints):
                y = torch.empty_like(x)  # every implementation allocates its output: the same memory traffic
                with fat.compile_hints(**hints):
                    launch(x, w, y, M, N, ds, 1e-6, N, N, None, **kw)
                return y
            fns[repr(cfg)] = run
        x = torch.randn(M, N, device="cuda", dtype=torch_dtype(ds))
        w = torch.rand(N, device="cuda", dtype=x.dtype) + 0.5
        for name, fn in fns.items():
            check_against_reference(fn(x, w), x, w, name)
        times = graph_times(fns, rotating_inputs(x, M, N, ds), w, args.rounds)
        res = [{"config": name, "ms": times[name], "GBs": nbytes(M, N, ds) / (times[name] * 1e-3) / 1e9,
                "default": name == repr(default), "in_space": name in {repr(c) for c in space}} for name in fns]
        del x
        torch.cuda.empty_cache()
        res.sort(key=lambda r: r["ms"])
        print(f"\n### {M} × {N} {ds}\n\n| config | µs | GB/s |\n|---|---|---|")
        for r in res:
            tag = " (default)" if r["default"] else " (in the space)" if r["in_space"] else ""
            print(f"| {r['config']}{tag} | {r['ms'] * 1e3:.2f} | {r['GBs']:.0f} |")
        rows.append({"shape": spec, "results": res})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "long_rows.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
