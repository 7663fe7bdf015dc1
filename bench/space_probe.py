"""Every config of a shape's CUDA space next to the peers, on one CUDA GPU.

Per shape: one forced search (what ``rmsnorm_autotuned`` picks), then every config of the space, QuACK,
torch.compile and a clone, all timed the same way as ``bench/rmsnorm.py`` times its peers (CUDA-graph
replay over rotating inputs, each call allocating its output, interleaved rounds with the order
rotated, medians kept): does the search pick the best config of its space, and how far is each from
the best peer? With ``--rotated-outputs`` every config is also timed writing a preallocated output per
input copy (each timed launch writes a cold buffer: how a search timed candidates before ``outputs=``).

    python bench/space_probe.py --out DIR [--shapes 4096x1000:bf16,...] [--rounds 5] [--rotated-outputs]
                                [--also-policy P] [--extra 128x8:1,...]

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
    args = ap.parse_args(argv)
    try:
        extra = parse_extra(args.extra)
    except ValueError as exc:
        ap.error(str(exc))
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("FLYAUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="fat-space-"))
    import torch

    from rmsnorm import (EPS, graph_gbps, load_quack, print_ranking, probe_fns, rotating_inputs, save_rows,
                         searched_inputs, shape_spec, torch_dtype)

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
        rows.append(row)
        print(json.dumps(row), flush=True)
        del x
        torch.cuda.empty_cache()
    save_rows(args.out, "space_probe.json", rows)
    for r in rows:
        print_ranking(f"{r['shape']}: picked {describe(r['picked'])}, default {describe(r['default'])}, "
                      f"clone {r['gbps']['clone']:.0f} GB/s", r["gbps"], r["spread"])


if __name__ == "__main__":
    sys.exit(main())
