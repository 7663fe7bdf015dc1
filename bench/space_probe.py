"""Every config of a shape's CUDA space next to the peers, on one CUDA GPU.

Per shape: one forced search (what ``rmsnorm_autotuned`` picks), then every config of the space, QuACK,
torch.compile and a clone, all timed the same way as ``bench/rmsnorm.py`` times its peers (CUDA-graph
replay over rotating inputs, each call allocating its output, interleaved rounds with the order
rotated, medians kept): does the search pick the best config of its space, and how far is each from
the best peer? With ``--rotated-outputs`` every config is also timed writing a preallocated output per
input copy (each timed launch writes a cold buffer: how a search timed candidates before ``outputs=``).

    python bench/space_probe.py --out DIR [--shapes 4096x1000:bf16,...] [--rounds 5] [--rotated-outputs]
                                [--also-policy P] [--extra 128x8:1,...] [--eager] [--warm]

With ``--warm`` every implementation is also timed on an x just written by the layer before it, as in a
model (a residual add): in the same graph replay each call follows an in-place ``x.mul_(1.0)`` of its own
input, whose time (the same producers replayed alone) is taken off. x is then in L2 as far as it fits, with
its lines dirty; the search times every config on cold inputs, so this says whether its pick holds there.

With ``--eager`` every implementation is also timed one call at a time, as ``triton.testing.do_bench``
times it (events around each call, the L2 emptied before it), with three ways of emptying the L2: ``zero``
(``do_bench``'s own: 256 MB written, so the L2 is left full of dirty lines), ``read`` (256 MB read: the L2
is left clean), ``none`` (back to back, warm); and its host time per call (wall clock over 2000 calls,
synchronized once). Which of them a gap between two implementations follows says where it comes from: the
dirty lines' write-back, a cold L2, or the host.

Prints a table (GB/s, best first, with the slowest and fastest round) per shape and writes
space_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = "4096x1000:bf16,65536x128:bf16,65536x1024:bf16,65536x512:bf16,4096x1024:fp32"


def describe(cfg: dict) -> str:
    """``128t x 4r p0`` (plus chunk, split, vector width) for a config's knobs."""
    extra = "".join((f" chunk {cfg['CHUNK']}" if cfg.get("CHUNK") else "",
                     " prefetch" if cfg.get("PREFETCH") else "",
                     f" split {cfg['SPLIT']}" if cfg.get("SPLIT", 1) > 1 else "",
                     f" vec {cfg['VEC']}" if cfg.get("VEC", 16) != 16 else "",
                     {0: "", 1: " coop", 2: " persist", 3: " cluster"}.get(cfg.get("COOP") or 0, f" COOP {cfg.get('COOP')}"),
                     " hold" if cfg.get("COOP") == 3 and cfg.get("HOLD") else "",
                     {0: "", 1: " async", 2: " row"}.get(cfg.get("ASYNC") or 0, f" ASYNC {cfg.get('ASYNC')}")))
    return f"{cfg['BLOCK_THREADS']}t x {cfg['ROWS_PER_PROGRAM']}r p{cfg['CACHE_POLICY']}{extra}"


def parse_extra(text):
    """``--extra``'s configs: ``[(threads, rows, policy, {knob: value}), ...]``; ValueError naming a bad item."""
    extra = []
    for item in filter(None, text.split(",")):
        try:
            shape_part, policy, *knobs = item.split(":")
            bt, per = (int(v) for v in shape_part.split("x"))
            extra.append((bt, per, int(policy), {k: int(v) for k, v in (kv.split("=") for kv in knobs)}))
        except ValueError:
            raise ValueError(f"--extra: {item!r}: expected THREADSxROWS:POLICY[:KNOB=VALUE...], e.g. 128x8:1 or "
                             f"512x1:1:CHUNK=8192") from None
    return extra


def extra_config(base, item):
    """The kwargs of one parsed ``--extra`` item, over ``base`` (a config of the shape's space)."""
    bt, per, policy, knobs = item
    return dict(base, BLOCK_THREADS=bt, ROWS_PER_PROGRAM=per, CACHE_POLICY=policy, **knobs)


EAGER_MODES = ("zero", "read", "none")


def eager_ms(fn, x, w, mode, flush, reps=200):
    """Median ms of one ``fn(x, w)`` between two events, ``flush`` (``mode``: see the module's doc) run
    before each call, as ``do_bench`` runs its own."""
    import statistics

    import torch

    for _ in range(10):
        fn(x, w)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        if mode == "zero":
            flush.zero_()
        elif mode == "read":
            flush.sum(dtype=torch.int32)
        s.record()
        fn(x, w)
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def host_us(fn, x, w, calls=2000):
    """µs of host time per ``fn(x, w)``: the wall clock over ``calls`` back-to-back calls, synchronized
    once at the end (host-bound when the GPU's part of a call is shorter)."""
    import time

    import torch

    for _ in range(100):
        fn(x, w)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn(x, w)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def eager_table(fns, x, w, rounds, M, N, ds):
    """``{mode: {name: GB/s}}`` (medians over ``rounds`` interleaved rounds) for every mode of
    :data:`EAGER_MODES`, and ``{"host_us": {name: µs}}``."""
    import statistics

    import torch

    from rmsnorm import gbps_of

    flush = torch.empty(256 * 2**20, dtype=torch.int8, device=x.device)
    got = {m: {n: [] for n in fns} for m in EAGER_MODES + ("host_us",)}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for m in EAGER_MODES:
                got[m][name].append(eager_ms(fns[name], x, w, m, flush))
            got["host_us"][name].append(host_us(fns[name], x, w))
    out = {m: gbps_of({n: statistics.median(v) for n, v in got[m].items()}, M, N, ds) for m in EAGER_MODES}
    out["host_us"] = {n: statistics.median(v) for n, v in got["host_us"].items()}
    del flush
    return out


def print_eager(heading, table):
    """The ``--eager`` table of one shape: GB/s per flush mode and host µs per call, fastest in ``zero``
    (``do_bench``'s) first, with each one's ratio to the best peer there."""
    zero = table["zero"]
    best = max(zero[k] for k in ("compile", "quack") if k in zero)
    print(f"\n### {heading}: one call at a time\n\n| implementation | GB/s, L2 zeroed (do_bench) | / best peer "
          f"| GB/s, L2 read | GB/s, warm | host µs per call |\n|---|---|---|---|---|---|")
    for name, v in sorted(zero.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {v:.0f} | {v / best:.3f} | {table['read'][name]:.0f} | {table['none'][name]:.0f} "
              f"| {table['host_us'][name]:.2f} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--also-policy", type=int, default=None,
                    help="also time every config of the space with this CACHE_POLICY (configs off the space)")
    ap.add_argument("--extra", default="",
                    help="also time these configs off the space: THREADSxROWS:POLICY[:KNOB=VALUE...], comma-"
                         "separated (other knobs as the space's first config), e.g. 512x1:1:CHUNK=8192")
    ap.add_argument("--rotated-outputs", action="store_true",
                    help="also time every config writing into a preallocated output per input copy (as a search "
                         "times it: each timed launch writes a cold buffer), named 'CONFIG, out rotated'")
    ap.add_argument("--eager", action="store_true",
                    help="also time one call at a time (do_bench's way, and with a clean or no flush) and the "
                         "host time per call")
    ap.add_argument("--warm", action="store_true",
                    help="also time every implementation on an x just written by an in-place multiply before it "
                         "(its own time taken off), as a norm after a residual add reads it")
    args = ap.parse_args(argv)
    try:
        extra = parse_extra(args.extra)
    except ValueError as exc:
        ap.error(str(exc))
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("FLYAUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="fat-space-"))
    import torch

    from rmsnorm import (EPS, graph_gbps, load_quack, print_ranking, probe_fns, rotating_inputs, save_rows,
                         searched_inputs, shape_spec, torch_dtype, warm_gbps)

    from flyautotune_rmsnorm.api import launch
    from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance
    from flyautotune_rmsnorm.space import cuda_space, default_config

    quack = load_quack()
    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        dt = torch_dtype(ds)
        x, w, picked = searched_inputs(M, N, ds)
        fns = probe_fns(N, quack, x, w)
        if args.eager:  # eager's peers: torch's own op, and the adopter's zero-search entry point
            import torch.nn.functional as F

            from flyautotune_rmsnorm import rmsnorm

            fns["torch"] = lambda x, w, N=N: F.rms_norm(x, (N,), w, EPS)
            fns["default"] = lambda x, w: rmsnorm(x, w, EPS)
        ref = rmsnorm_reference(x, w, EPS)
        configs = {}
        space = [c.kwargs for c in cuda_space(M, N, ds)]
        if args.also_policy is not None:
            space += [k for k in (dict(c, CACHE_POLICY=args.also_policy) for c in space) if k not in space]
        for item in extra:
            kw = extra_config(space[0], item)
            if kw not in space:
                space.append(kw)
        for kw in space:
            name = describe(kw)

            def fn(x, w, kw=kw):
                return launch(x, w, torch.empty_like(x), M, N, ds, EPS, N, N, None, **kw)

            try:
                err = relative_error(fn(x, w), ref)
            except Exception as exc:  # an --extra config the factory refuses: said, then left out
                print(f"{spec} {name}: {type(exc).__name__}: {exc}"[:300], flush=True)
                continue
            assert err <= 5 * tolerance(dt), (spec, name, err)
            fns[name] = fn
            configs[name] = kw
        xs = rotating_inputs(x, M, N, ds)
        if args.rotated_outputs:
            outs = {xi.data_ptr(): torch.empty_like(xi) for xi in xs}
            for cfg in cuda_space(M, N, ds):
                def fn(x, w, kw=cfg.kwargs):
                    return launch(x, w, outs[x.data_ptr()], M, N, ds, EPS, N, N, None, **kw)

                fns[describe(cfg.kwargs) + ", out rotated"] = fn
        gbps, spread = graph_gbps(fns, xs, w, args.rounds, M, N, ds)
        row = {"shape": spec, "picked": picked, "default": default_config(M, N, ds).kwargs, "gbps": gbps,
               "spread": spread, "configs": configs}
        if args.eager:
            row["eager"] = eager_table(fns, x, w, args.rounds, M, N, ds)
        if args.warm:
            row["warm"], row["warm_spread"] = warm_gbps(fns, xs, w, args.rounds, M, N, ds)
        rows.append(row)
        print(json.dumps(row), flush=True)
        del x
        torch.cuda.empty_cache()
    save_rows(args.out, "space_probe.json", rows)
    for r in rows:
        print_ranking(f"{r['shape']}: picked {describe(r['picked'])}, default {describe(r['default'])}, "
                      f"clone {r['gbps']['clone']:.0f} GB/s", r["gbps"], r["spread"])
        if "warm" in r:
            print_ranking(f"{r['shape']}, x just written (warm): picked {describe(r['picked'])}", r["warm"],
                          r["warm_spread"])
        if "eager" in r:
            print_eager(r["shape"], r["eager"])


if __name__ == "__main__":
    sys.exit(main())
