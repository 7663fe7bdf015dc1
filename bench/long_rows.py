"""Long rows, config by config: every CUDA-space candidate of a shape and the configs outside the
space that hold the row narrow in registers (HOLD) or split it across persistent programs (COOP=2),
against QuACK, in CUDA-graph replay over inputs rotated past L2, in one process (one CUDA GPU).

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
    # The persistent split (COOP=2), with 1, 2 or 4 rows per trip (one barrier for all of them).
    persist = [_cfg(c.kwargs["BLOCK_THREADS"], rows, 0, 2, split=c.kwargs["SPLIT"], coop=2)
               for c in persist_configs(max(M, 132), N, ds) for rows in (1, 2, 4)]
    if ds not in ("bf16", "fp16") or not 16384 <= npad <= 65536:
        return persist
    out = [_cfg(bt, 1, 0, policy, hold=1) for bt in (512, 1024) if 32 <= npad // bt <= 64 for policy in (1, 2)]
    if npad == 32768:
        out.append(_cfg(1024, 1, 0, 2, hold=1, maxnreg=32))
    return out + persist


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    args = ap.parse_args(argv)

    import torch
    from rmsnorm import graph_time, load_quack, rotating_inputs, shape_spec
    from stability import graph_ms

    from flyautotune_rmsnorm.space import cuda_space, default_config

    quack, why = load_quack()
    if quack is None:
        print(f"QuACK not measured: {why}")
    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        default = default_config(M, N, ds, "cuda")
        configs = [default] + [c for c in cuda_space(M, N, ds) if c != default] + extra_configs(M, N, ds)
        times = graph_ms(M, N, ds, configs, rounds=3)
        elem = {"bf16": 2, "fp16": 2, "fp32": 4}[ds]
        nbytes = (2 * M * N + N) * elem
        res = [{"config": repr(c), "ms": t, "GBs": nbytes / (t * 1e-3) / 1e9, "default": c == default}
               for c, t in zip(configs, times)]
        if quack is not None:
            dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[ds]
            x = torch.randn(M, N, device="cuda", dtype=dt)
            w = torch.rand(N, device="cuda", dtype=dt) + 0.5
            ms = graph_time(lambda x, w: quack(x, w, eps=1e-6)[0], rotating_inputs(x, M, N, ds), w)
            res.append({"config": "QuACK rmsnorm_fwd", "ms": ms, "GBs": nbytes / (ms * 1e-3) / 1e9, "default": False})
            del x
            torch.cuda.empty_cache()
        res.sort(key=lambda r: r["ms"])
        print(f"\n### {M} × {N} {ds}\n\n| config | µs | GB/s |\n|---|---|---|")
        for r in res:
            print(f"| {r['config']}{' (default)' if r['default'] else ''} | {r['ms'] * 1e3:.2f} | {r['GBs']:.0f} |")
        rows.append({"shape": spec, "results": res})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "long_rows.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
