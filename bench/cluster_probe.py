"""The cluster body (``COOP=3``, CuTe DSL) on its own: every (SPLIT, BLOCK_THREADS) it takes for a shape,
checked against fp64 (every row) and timed in CUDA-graph replay over inputs rotated past L2, beside QuACK,
the zero-search default and the best Triton candidate of the CUDA space, in one process (one CUDA GPU).

    python bench/cluster_probe.py --out DIR [--shapes 1024x65536:bf16,...] [--space] [--rounds 3]
        [--configs 8x256,...] [--stage 0,1] [--late 0,1] [--variants wait,wait+nc,...]

Prints a table per shape (fastest first, GB/s) and writes cluster_probe.json. ``--space`` also times
every Triton candidate of the shape's space (slower).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = ("1024x65536:bf16,2048x32768:bf16,4096x32768:bf16,8192x16384:bf16,16384x8192:bf16,4x131072:bf16,"
          "1x262144:bf16,1x65536:bf16,1024x65536:fp16,512x65536:fp32")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--space", action="store_true")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved timing rounds (the median is kept)")
    ap.add_argument("--stage", default="0", type=lambda v: [bool(int(c)) for c in v.split(",")],
                    help="the slice through shared memory (1), held in registers (0), or both (0,1)")
    ap.add_argument("--late", default="0", type=lambda v: [bool(int(c)) for c in v.split(",")],
                    help="the weight loaded after the reduction (1), with x (0), or both (0,1)")
    ap.add_argument("--variants", default="", type=lambda v: [c for c in v.split(",") if c],
                    help="more body variants, each flags joined by '+': wait (the weight loaded after the "
                         "mbarrier wait), nc (x through the read-only path, no L1 allocation), mN (registers "
                         "for N CTAs an SM), late, staged, ca (staged through L1), g2 (a 2-D grid); e.g. wait,wait+nc")
    ap.add_argument("--configs", default="", type=lambda v: {tuple(int(n) for n in c.split("x")) for c in v.split(",")
                                                             if c},
                    help="only these SPLITxTHREADS pairs, e.g. 8x256,16x256 (default: every pair the body takes)")
    args = ap.parse_args(argv)
    variants = [dict(stage=stage, late_w=late) for stage in args.stage for late in args.late]
    flags = {"wait": ("w_after_wait", True), "nc": ("stream_x", True), "late": ("late_w", True),
             "staged": ("stage", True), "ca": ("stage_l1", True), "g2": ("grid2d", True)}
    for spec in args.variants:
        v = {}
        for flag in spec.split("+"):
            if flag in flags:
                v[flags[flag][0]] = flags[flag][1]
            elif flag[:1] == "m" and flag[1:].isdigit():
                v["minctas"] = int(flag[1:])
            else:
                ap.error(f"--variants: unknown flag {flag!r} in {spec!r}; known: {', '.join(flags)}, mN")
        variants.append(v)

    import torch
    from rmsnorm import graph_times, load_quack, nbytes, rotating_inputs, shape_spec, torch_dtype

    from flyautotune_rmsnorm import kernel_cluster as kc
    from flyautotune_rmsnorm import rmsnorm
    from flyautotune_rmsnorm.factory import ELEMENT_SIZE, make_launcher
    from flyautotune_rmsnorm.reference import check_against_reference
    from flyautotune_rmsnorm.space import cuda_space, default_config

    quack = load_quack()
    results = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        dt = torch_dtype(ds)
        torch.manual_seed(0)
        x = torch.randn(M, N, dtype=dt, device="cuda")
        w = torch.rand(N, dtype=dt, device="cuda") + 0.5
        xs = rotating_inputs(x, M, N, ds)
        gb = nbytes(M, N, ds) / 1e9
        rows = []

        fns = {}

        def timed(name, fn):
            """Check ``fn`` against fp64 now (an error is reported, the rest go on); time it below."""
            try:
                t0 = time.perf_counter()
                y = fn(x, w)
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
                check_against_reference(y, x, w, name)
                fns[name] = fn
                rows.append({"impl": name, "first_s": first})
            except Exception as exc:  # noqa: BLE001 - a failing candidate is reported, the rest go on
                rows.append({"impl": name, "error": f"{type(exc).__name__}: {exc}"[:300]})

        elem = ELEMENT_SIZE[ds]
        for split in (2, 4, 8, 16):
            for threads in (128, 256, 512, 1024):
                if not kc.takes(N, split, threads, elem) or N // (split * threads * 16 // elem) > 16:
                    continue
                if args.configs and (split, threads) not in args.configs:
                    continue
                for v in variants:
                    fn = kc.compiled(ds, ds, N, split, threads, **v)

                    def run(a, b, fn=fn):
                        y = torch.empty_like(a)
                        fn(a, b, y, 1e-6)
                        return y

                    label = "".join(f" {k}={val}" if k == "minctas" else f" {k}" for k, val in sorted(v.items())
                                    if val)
                    timed(f"cluster SPLIT={split} threads={threads}{label}", run)
        if quack is not None:
            timed("quack", lambda a, b: quack(a, b, eps=1e-6)[0])
        timed("default " + str(default_config(M, N, ds, "cuda").kwargs), lambda a, b: rmsnorm(a, b, 1e-6))
        if args.space:
            for cfg in cuda_space(M, N, ds):
                kw = cfg.kwargs
                L = make_launcher(N, ds, **kw)

                def run(a, b, L=L):
                    y = torch.empty_like(a)
                    L(a, b, y, M, N, N, 1e-6)
                    return y

                timed("space " + str(kw), run)
        times = graph_times(fns, xs, w, args.rounds)
        for r in rows:
            if r["impl"] in times:
                r["us"] = times[r["impl"]] * 1e3
                r["gbps"] = gb / (times[r["impl"]] * 1e-3)
        ok = sorted((r for r in rows if "gbps" in r), key=lambda r: -r["gbps"])
        print(f"\n### {M}x{N} {ds}\n\n| impl | GB/s | µs |\n|---|---|---|")
        for r in ok:
            print(f"| {r['impl']} | {r['gbps']:.0f} | {r['us']:.1f} |")
        for r in rows:
            if "error" in r:
                print(f"| {r['impl']} | error: {r['error']} | |")
        results.append({"M": M, "N": N, "dtype": ds, "rows": rows})
        x = xs = None  # free the inputs before the next shape
        torch.cuda.empty_cache()
    with open(os.path.join(args.out, "cluster_probe.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
