"""How many calls one timed CUDA graph should hold: GB/s against the calls per graph, next to the
kernels' own durations from the profiler.

``triton.testing.do_bench`` zeroes a 256 MB buffer before every timed call (to flush L2) and times
each call with its own pair of events. When a graph holds one call (``bench/rmsnorm.py`` rotates inputs
only up to a 200 MB footprint, so a shape of 64 M bf16 elements or more got one), every sample also
holds what comes with the replay: the graph's launch, and the write-back of the dirty lines the flush
left in L2. This probe times the same implementations with 1, 2, 4 and 8 calls (over distinct inputs)
per graph, and the kernels themselves with ``torch.profiler`` (the sum of the GPU kernels' durations in
graph replays, per call), so the per-replay share can be read off.

    python bench/harness_probe.py --out DIR [--shapes 65536x1024:bf16,...] [--calls 1,2,4,8] [--compile]

Prints one table (GB/s: per calls per graph, then from kernel durations) and writes harness.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = "65536x1024:bf16,2048x32768:bf16,1024x65536:bf16,262144x256:bf16,16384x8192:bf16,4096x8192:bf16"


def kernel_ms(fn, xs, w, replays=20):
    """ms per call summed over the GPU kernels ``fn`` runs, from the profiler, in graph replay."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from rmsnorm import capture_graph

    g = capture_graph(fn, xs, w)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            g.replay()
        torch.cuda.synchronize()
    durs = [e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            for e in prof.events() if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
            and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    del g
    return sum(durs) / 1e3 / (replays * len(xs)) if durs else None  # a clone is a DMA copy, not a kernel


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--calls", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="also torch.compile's kernel")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("FLYAUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="fat-harness-"))
    import torch
    import torch.nn.functional as F

    from rmsnorm import EPS, graph_time, nbytes, save_rows, searched_inputs, shape_spec

    from flyautotune_rmsnorm import rmsnorm_autotuned

    calls = [int(c) for c in args.calls.split(",")]
    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        x, w, _ = searched_inputs(M, N, ds)  # one search for the tuned row, then hits
        impls = {"clone": lambda x, w: x.clone(), "tuned": lambda x, w: rmsnorm_autotuned(x, w, EPS)}
        if args.compile:
            impls["compile"] = torch.compile(lambda x, w: F.rms_norm(x, (N,), w, EPS), dynamic=False)
        xs_all = [x] + [x.clone() for _ in range(max(calls) - 1)]
        b = nbytes(M, N, ds)
        row = {"shape": spec, "bytes": b, "gbps": {}, "kernel_gbps": {}}
        for name, fn in impls.items():
            fn(x, w)
            samples = {k: [] for k in calls}
            for _ in range(args.rounds):
                for k in calls:
                    samples[k].append(graph_time(fn, xs_all[:k], w, reps_ms=40, min_replay_ms=0))
            row["gbps"][name] = {k: b / (statistics.median(v) * 1e-3) / 1e9 for k, v in samples.items()}
            try:
                k_ms = kernel_ms(fn, xs_all[: max(calls)], w)
                row["kernel_gbps"][name] = b / (k_ms * 1e-3) / 1e9 if k_ms else None
            except Exception as exc:  # the profiler is a second opinion, not the measurement
                row["kernel_gbps"][name] = None
                print(f"{spec} {name}: profiler failed: {exc!r}"[:300])
        rows.append(row)
        del xs_all, x
        torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
    save_rows(args.out, "harness.json", rows)
    head = "| shape | impl | " + " | ".join(f"{k} call{'s' * (k > 1)}" for k in calls) + " | kernels (profiler) |"
    lines = [head, "|" + "---|" * (len(calls) + 3)]
    for r in rows:
        for name, v in r["gbps"].items():
            kg = r["kernel_gbps"].get(name)
            lines.append(f"| {r['shape']} | {name} | " + " | ".join(f"{v[k]:.0f}" for k in calls)
                         + (f" | {kg:.0f} |" if kg else " | — |"))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
