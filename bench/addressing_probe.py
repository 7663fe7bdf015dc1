"""How the one-launch body addresses its rows, per shape, on one CUDA GPU: ``WIDE`` and ``PACKED``.

The body computes each row's address in 64 bits only when a row offset of the launch may pass 2**31
elements (``WIDE``), and takes the row stride as the constant ``N`` when both tensors' rows are packed
(``PACKED``). This probe times the tuned config of each shape three ways: 64-bit offsets with runtime
strides (the body before both), 32-bit offsets with runtime strides, and 32-bit offsets with the
constant stride (what a packed launch now runs), next to torch.compile and a clone, in CUDA-graph
replay over rotating inputs, interleaved rounds (median kept).

    python bench/addressing_probe.py --out DIR [--shapes 65536x128:bf16,...] [--rounds 5]

Prints a table (GB/s) and writes addressing.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = ("65536x128:bf16,262144x256:bf16,4096x1000:bf16,65536x1024:bf16,32768x4096:bf16,1x4096:bf16,"
          "32x4096:bf16,256x8192:bf16")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("FLYAUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="fat-offsets-"))
    import torch
    import torch.nn.functional as F

    from rmsnorm import (EPS, gbps_of, graph_times, rotating_inputs, save_rows, searched_inputs, shape_spec,
                         torch_dtype)

    from flyautotune_rmsnorm import make_launcher
    from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance

    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        dt = torch_dtype(ds)
        x, w, cfg = searched_inputs(M, N, ds)
        row = {"shape": spec, "config": cfg}
        fns = {"clone": lambda x, w: x.clone(),
               "compile": torch.compile(lambda x, w, N=N: F.rms_norm(x, (N,), w, EPS), dynamic=False)}
        if cfg.get("SPLIT", 1) == 1 and not cfg.get("COOP"):
            base = make_launcher(N, ds, **cfg)
            row["addressing"] = base.addressing(M, N, N)  # what a launch of this shape takes
            packed, strided, wide = copy.copy(base), copy.copy(base), copy.copy(base)
            packed.addressing = lambda M, sx, sy: (0, 1)  # 32-bit offsets, the constant stride
            strided.addressing = lambda M, sx, sy: (0, 0)  # 32-bit offsets, runtime strides
            wide.addressing = lambda M, sx, sy: (1, 0)  # 64-bit offsets, runtime strides
            opts = (("num_warps", max(1, cfg["BLOCK_THREADS"] // 32)),)
            ref = rmsnorm_reference(x, w, EPS)
            for name, L in (("packed", packed), ("strided", strided), ("wide", wide)):
                def fn(x, w, L=L):
                    y = torch.empty_like(x)
                    L(x, w, y, M, N, N, EPS, None, opts)
                    return y
                err = relative_error(fn(x, w), ref)
                assert err <= 5 * tolerance(dt), (spec, name, err)
                fns[name] = fn
        row["gbps"] = gbps_of(graph_times(fns, rotating_inputs(x, M, N, ds), w, args.rounds), M, N, ds)
        rows.append(row)
        print(json.dumps(row), flush=True)
        del x
        torch.cuda.empty_cache()
    save_rows(args.out, "addressing.json", rows)
    print("| shape | tuned config | 64-bit, strides | 32-bit, strides | 32-bit, constant stride | new / old "
          "| torch.compile | clone |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        g = r["gbps"]
        c = r["config"]
        desc = f"{c['BLOCK_THREADS']}t x {c['ROWS_PER_PROGRAM']}r p{c['CACHE_POLICY']} chunk {c['CHUNK']}"
        if "packed" in g:
            print(f"| {r['shape']} | {desc} | {g['wide']:.0f} | {g['strided']:.0f} | {g['packed']:.0f} "
                  f"| {g['packed'] / g['wide']:.3f} | {g['compile']:.0f} | {g['clone']:.0f} |")
        else:
            print(f"| {r['shape']} | {desc} (split) | — | — | — | — | {g['compile']:.0f} | {g['clone']:.0f} |")


if __name__ == "__main__":
    sys.exit(main())
