"""Does the L2 state before a timed replay change which config wins? The search's timing against the bench's.

The search (``flyautotune.timing.benchmark``: graph replays of many launches over rotated inputs,
nothing between replays) and ``bench/rmsnorm.py`` (``triton.testing.do_bench`` over a graph of at least
``MIN_CALLS`` calls, which zeroes a 256 MB buffer before every replay) might rank two configs differently
at shapes whose traffic is near L2's size. This probe times the search's pick, the default and the peers
six ways, in interleaved rounds (order rotated, medians kept):

* ``bench``: ``graph_time``, as the bench does (a dirty L2 before each replay; input copies are added to
  the G until a replay lasts ``MIN_REPLAY_MS``);
* ``round``: ``graph_time`` over the G inputs alone (how the bench timed before);
* ``dirty``: the graph of ``round``, our own events, a 256 MB ``zero_()`` before each replay (should match
  ``round``);
* ``clean``: the same graph, a 256 MB read before each replay (L2 full of clean lines: evictions need no
  write-back);
* ``none``: the same graph, replays back to back (L2 holds the previous replay's lines);
* ``search``: ``timing.benchmark`` over the search's rotations (inputs only; our configs write one output,
  as ``outputs=`` has the search do; peers allocate theirs);
* ``search flush``: the same with ``flush=True`` (a buffer twice L2 zeroed before every replay, as the
  bench's ``do_bench`` does);
* ``bench out``: ``bench`` with our configs writing one preallocated output (as the search's) instead of
  allocating theirs per call.

    python bench/flush_probe.py --out DIR [--shapes 4096x1000:bf16,...] [--rounds 3] [--with-async]
                                [--search-factors 4,8,16]   # the search's timing over larger footprints
                                [--extra 512x1:2:CHUNK=4096]   # configs outside the space (space_probe's syntax)

Prints one table per shape (GB/s per mode, and each config over the default per mode); writes flush_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = "4096x1000:bf16,65536x128:bf16,32x3000:bf16,256x8192:bf16,4096x4096:bf16"
MODES = ("bench", "bench out", "round", "dirty", "clean", "none", "search", "search flush")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--search-factors", default="",
                    help="also time the search's way over rotated footprints of these multiples of L2 (e.g. 4,8,16; "
                         "the search uses %g): at which footprint the search's ranking meets the bench's" % 2.0)
    ap.add_argument("--with-async", action="store_true",
                    help="also time the space's asynchronous-copy configs (ASYNC=1) where it offers them")
    ap.add_argument("--extra", default="",
                    help="also time these configs on every shape, in space_probe.py's --extra syntax "
                         "(THREADSxROWS:POLICY[:KNOB=VALUE...])")
    args = ap.parse_args(argv)
    from space_probe import describe, extra_config, parse_extra
    try:
        extra = parse_extra(args.extra)
    except ValueError as exc:
        ap.error(str(exc))
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("FLYAUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="fat-flush-"))
    import torch
    import torch.nn.functional as F

    from flyautotune import timing
    from rmsnorm import (EPS, capture_graph, gbps_of, graph_time, load_quack, replay_ms, rotating_inputs, save_rows,
                         searched_inputs, shape_spec)

    from flyautotune_rmsnorm.api import launch
    from flyautotune_rmsnorm.space import cuda_space, default_config

    quack = load_quack()
    big = torch.empty(64 << 20, device="cuda", dtype=torch.float32)  # 256 MB, as do_bench's flush

    def own_graph_ms(fn, xs, w, before, replays=60):
        """ms per call of a graph of ``fn`` over ``xs``, ``before()`` (untimed) ahead of each replay."""
        g = capture_graph(fn, xs, w)
        for _ in range(2):
            g.replay()
        times = []
        for _ in range(replays):
            if before is not None:
                before()
            times.append(replay_ms(g))
        del g
        return statistics.median(times) / len(xs)

    factors = [float(f) for f in args.search_factors.split(",") if f]
    modes = MODES + tuple(f"search x{f:g}" for f in factors)
    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        x, w, picked = searched_inputs(M, N, ds)
        default = default_config(M, N, ds).kwargs
        torch._dynamo.reset()
        impls = {"compile": torch.compile(lambda x, w, N=N: F.rms_norm(x, (N,), w, EPS), dynamic=False)}
        if quack is not None:
            impls["quack"] = lambda x, w: quack(x, w, eps=EPS)[0]
        ours = {"default " + describe(default): default}
        if picked != default:
            ours["picked " + describe(picked)] = picked
        for item in extra:
            kw = extra_config(default, item)
            ours.setdefault(describe(kw), kw)
        if args.with_async:
            ours.update({describe(c.kwargs): c.kwargs for c in cuda_space(M, N, ds)
                         if c.kwargs.get("ASYNC") and c.kwargs != picked})
        for name, kw in ours.items():
            impls[name] = lambda x, w, kw=kw: launch(x, w, torch.empty_like(x), M, N, ds, EPS, N, N, None, **kw)
        xs = rotating_inputs(x, M, N, ds)
        xs_long = list(xs)  # ``graph_time`` adds copies to it; the other modes keep the G inputs
        # the search's rotations: its own count (inputs only, as with ``outputs=``), one output for our configs
        per_set = x.numel() * x.element_size() + w.numel() * w.element_size()
        n_rot = timing.rotation_count(x.device, per_set)
        sxs = [x] + [x.clone() for _ in range(n_rot - 1)]
        # the search's timing over larger rotated footprints (copies of x beyond the search's own count)
        n_more = {f: timing.rotation_count(x.device, per_set, factor=f, max_count=1024) for f in factors}
        more = [x.clone() for _ in range(max(n_more.values(), default=0) - len(sxs))]
        out = torch.empty_like(x)
        befores = {"dirty": big.zero_, "clean": lambda: big.sum(), "none": None}
        samples = {(n, m): [] for n in impls for m in modes}
        names = list(impls)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                fn = impls[name]
                samples[(name, "bench")].append(graph_time(fn, xs_long, w, reps_ms=50))
                fixed = (lambda x, w, kw=ours[name]: launch(x, w, out, M, N, ds, EPS, N, N, None, **kw)) \
                    if name in ours else fn
                samples[(name, "bench out")].append(graph_time(fixed, xs_long, w, reps_ms=50))
                samples[(name, "round")].append(graph_time(fn, xs, w, reps_ms=50, min_replay_ms=0))
                for mode, before in befores.items():
                    samples[(name, mode)].append(own_graph_ms(fn, xs, w, before))
                for mode, xis in ([("search", sxs), ("search flush", sxs)]
                                  + [(f"search x{f:g}", (sxs + more)[:n]) for f, n in n_more.items()]):
                    if name in ours:
                        kw = ours[name]
                        launches = [lambda xi=xi, kw=kw: launch(xi, w, out, M, N, ds, EPS, N, N, None, **kw)
                                    for xi in xis]
                    else:
                        launches = [lambda xi=xi, fn=fn: fn(xi, w) for xi in xis]
                    m = timing.benchmark(launches[0], rotations=launches, rep=20, method="graph",
                                         flush=mode.endswith("flush"))
                    samples[(name, mode)].append(m.ms)
        gbps = {mode: gbps_of({n: statistics.median(samples[(n, mode)]) for n in impls}, M, N, ds) for mode in modes}
        row = {"shape": spec, "picked": picked, "default": default, "bench_calls": len(xs),
               "bench_copies": len(xs_long), "search_rotations": n_rot, "more_rotations": n_more, "gbps": gbps}
        rows.append(row)
        print(json.dumps(row), flush=True)
        del x, xs, xs_long, sxs, more
        torch.cuda.empty_cache()
    save_rows(args.out, "flush_probe.json", rows)
    for r in rows:
        g = r["gbps"]
        dname = next(n for n in g["bench"] if n.startswith("default"))
        print(f"\n### {r['shape']} ({r['bench_calls']} inputs, {r['bench_copies']} in the bench's graphs, search "
              f"{r['search_rotations']} rotations, more: {r['more_rotations']})\n\n| implementation | " +
              " | ".join(g) + " | " + " | ".join(f"/ default, {m}" for m in g) + " |\n" + "|---" * (1 + 2 * len(g)) + "|")
        for name in g["bench"]:
            print(f"| {name} | " + " | ".join(f"{g[m][name]:.0f}" for m in g) + " | " +
                  " | ".join(f"{g[m][name] / g[m][dname]:.3f}" for m in g) + " |")


if __name__ == "__main__":
    sys.exit(main())
