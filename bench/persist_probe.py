"""The persistent split (COOP=2) config by config: registers, the driver's occupancy, the grid it launches,
and its time in CUDA-graph replay at several row-group counts (at most what the GPU holds at once).

    python bench/persist_probe.py [--shape 1024x65536:bf16]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1024x65536:bf16")
    args = ap.parse_args(argv)
    import torch
    from rmsnorm import shape_spec, torch_dtype
    from stability import graph_ms

    from flyautotune_rmsnorm import make_launcher, split
    from flyautotune_rmsnorm.space import _cfg, persist_configs

    M, N, ds = shape_spec(args.shape)
    dt = torch_dtype(ds)
    x = torch.randn(M, N, device="cuda", dtype=dt)
    w = torch.rand(N, device="cuda", dtype=dt) + 0.5
    y = torch.empty_like(x)
    sms = split.sm_count(0)
    configs = persist_configs(max(M, 132), N, ds) + [_cfg(256, 2, 0, 2, split=16, coop=2)]
    real_groups = split.row_groups
    print(f"### {M} × {N} {ds}, {sms} SMs\n\n| config | regs | programs per SM | groups | R | µs | GB/s |\n|---|---|---|---|---|---|---|")
    nbytes = (2 * M * N + N) * x.element_size()
    for cfg in configs:
        kw = cfg.kwargs
        L = make_launcher(N, ds, **kw)
        k = L.compiled(x, w, y, M, N, N)
        per_sm = split.resident_programs(k, kw["BLOCK_THREADS"], 0) // sms
        groups = per_sm * sms // L.programs
        mb = -(-M // kw["ROWS_PER_PROGRAM"])
        for r in sorted({real_groups(mb, groups), max(1, groups // 2), max(1, groups // 4)}, reverse=True):
            split.row_groups = lambda m, g, r=r: min(r, m)
            try:
                ms = graph_ms(M, N, ds, [cfg], rounds=2)[0]
            finally:
                split.row_groups = real_groups
            print(f"| S={L.programs} t={kw['BLOCK_THREADS']} rows={kw['ROWS_PER_PROGRAM']} | {k.n_regs} | {per_sm} | "
                  f"{groups} | {r} | {ms * 1e3:.1f} | {nbytes / ms / 1e6:.0f} |", flush=True)


if __name__ == "__main__":
    main()
