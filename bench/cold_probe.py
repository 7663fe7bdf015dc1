"""Why a search's first timing sometimes runs slow, on one CUDA GPU.

In a search the first candidate timed (the default) sometimes read 1.04-19x its own later median,
while every other finalist stayed within about 1.04x (docs/benchmarks.md). This probe runs forced
searches of ``rmsnorm_autotuned`` from cold compiles (a fresh Triton cache and fresh launchers each
time) in three modes, shapes and modes interleaved:

* ``pool``: as the product runs (candidates compile in a thread pool while earlier ones are timed);
* ``nopool``: no pool, each candidate compiles when it is first run (before its timing starts);
* ``drained``: the pool, but every compile finished before the first timing.

Per search it records each finalist's first-pass timing over the median of its re-timing rounds. If
``pool`` alone shows slow first timings, the compile threads (the interpreter lock, the CPU) are the
cause; if all three do, it is the GPU's state after idling.

    python bench/cold_probe.py --out DIR [--shapes 65536x128:bf16,...] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = "65536x128:bf16,4096x1000:bf16,32x4096:bf16,4096x8192:bf16"
MODES = ("pool", "nopool", "drained")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("FLYAUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="fat-cold-"))
    import torch
    import triton

    import flyautotune as fat
    from flyautotune.tuning import precompile
    from rmsnorm import EPS, save_rows, shape_spec, torch_dtype

    from flyautotune_rmsnorm import factory, rmsnorm_autotuned
    from flyautotune_rmsnorm.api import clear_caches

    start = precompile.Precompiler.start

    def no_pool(self, jobs):
        return None

    def drained(self, jobs):
        start(self, jobs)
        for future in list(self.futures.values()):
            try:
                future.result()
            except Exception:  # noqa: BLE001 - the timed run reports it
                pass

    patches = {"pool": start, "nopool": no_pool, "drained": drained}
    rows = []
    for rep in range(args.repeats):
        for i, spec in enumerate(args.shapes.split(",")):
            M, N, ds = shape_spec(spec)
            torch.manual_seed(M + N)
            x = torch.randn(M, N, device="cuda", dtype=torch_dtype(ds))
            w = torch.rand(N, device="cuda", dtype=x.dtype) + 0.5
            k = rep + i
            for mode in MODES[k % 3:] + MODES[:k % 3]:
                cache = tempfile.mkdtemp(prefix="triton-cold-")
                os.environ["TRITON_CACHE_DIR"] = cache
                if hasattr(triton, "knobs"):
                    triton.knobs.cache.dir = cache
                factory._launchers.clear()
                clear_caches()
                precompile.Precompiler.start = patches[mode]
                ends = []
                listener = fat.add_listener(lambda e: ends.append(e) if e.get("event") == "search_end" else None)
                os.environ["FLYAUTOTUNE"] = "1"
                try:
                    rmsnorm_autotuned(x, w, EPS)
                    torch.cuda.synchronize()
                finally:
                    os.environ.pop("FLYAUTOTUNE")
                    fat.remove_listener(listener)
                    precompile.Precompiler.start = start
                ratios = []
                for c in ends[-1]["candidates"] if ends else []:
                    s = c.get("samples") or []
                    if len(s) >= 3:
                        ratios.append({"default": bool(c.get("default")), "first": s[0],
                                       "rounds": statistics.median(s[1:]), "ratio": s[0] / statistics.median(s[1:])})
                row = {"shape": spec, "mode": mode, "repeat": rep, "finalists": ratios,
                       "duration_s": ends[-1].get("duration_s") if ends else None}
                rows.append(row)
                print(json.dumps(row), flush=True)
    save_rows(args.out, "cold_probe.json", rows)
    print("| shape | mode | default: first / rounds | other finalists: worst first / rounds | search s |\n"
          "|---|---|---|---|---|")
    for r in rows:
        d = [f["ratio"] for f in r["finalists"] if f["default"]]
        o = [f["ratio"] for f in r["finalists"] if not f["default"]]
        print(f"| {r['shape']} | {r['mode']} | {d[0]:.3f} |" if d else f"| {r['shape']} | {r['mode']} | — |",
              f"{max(o):.3f} |" if o else "— |", f"{r['duration_s'] or 0:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
