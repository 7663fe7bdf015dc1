"""RMSNorm forward on one NVIDIA GPU: flyautotune-rmsnorm against its peers.

Run on a CUDA machine: ``python bench/rmsnorm.py --out DIR [--explore] [--budget-s 420]``.
For every shape of the anchor table it checks each implementation against an
fp64 reference, then times it two ways:

* eager: ``triton.testing.do_bench`` over per-call launches (host dispatch
  included; L2 flushed before each call) — the anchors' method;
* graph: one CUDA graph holding calls over G rotating inputs (so consecutive
  calls do not hit in L2), replayed under ``do_bench``; time per call. G is at
  least ``MIN_CALLS``, and copies are added until one replay lasts
  ``MIN_REPLAY_MS`` (each call still reads its own): ``do_bench`` zeroes a
  256 MB buffer before each replay and times each replay with its own events,
  so a short graph also timed the graph's launch and the write-back of the
  dirty lines that flush left in L2 (5-7 % at 64 M bf16 elements with one call,
  ``bench/harness_probe.py``; 7-9 % at 4096 x 1000 with 13,
  ``bench/flush_probe.py``).

GB/s = (2*M*N + N) * element size / median time. Implementations: torch
``F.rms_norm``, ``torch.compile`` of it, Liger's Triton RMSNorm and QuACK's
CuTe-DSL RMSNorm (each when it imports; the bench says so and goes on when it
does not), our default config (``rmsnorm``) and our tuned config
(``rmsnorm_autotuned`` after a forced search of that shape); and, as a reference that is not a
peer, ``x.clone()``: a copy of the same bytes, timed the same way (the report's ``tuned / clone``:
how close a shape comes to a copy of its own size). ``--explore`` also times every
config of a wider grid per shape (graph mode), to check the space and the
default against it. ``--warm`` also times every implementation on an x just written (each call after an
in-place ``x.mul_(1.0)`` of its input in the same graph replay, that producer's own time taken off), as a
norm after a residual add reads it: x in L2 as far as it fits. Writes ``rmsnorm.json``, ``rmsnorm.md``,
``rmsnorm.png`` (and ``explore.json``) under ``--out``.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime
import hashlib
import json
import math
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time

from rmsnorm_report import IMPLS, NAMES, PEERS, fmt, gbps, markdown, plot  # noqa: F401  (bench/ is on sys.path)

SHAPES = [
    (1, 4096, "bf16"), (32, 4096, "bf16"), (256, 8192, "bf16"), (4096, 4096, "bf16"),
    (4096, 8192, "bf16"), (16384, 8192, "bf16"), (32768, 4096, "bf16"), (65536, 1024, "bf16"),
    (8192, 16384, "bf16"), (2048, 32768, "bf16"), (1024, 65536, "bf16"),
    (256, 8192, "fp32"), (4096, 8192, "fp32"), (32768, 4096, "fp32"),
    # single long rows (split across programs), short rows, widths off the power-of-two grid
    (1, 65536, "bf16"), (4, 131072, "bf16"), (1, 262144, "bf16"),
    (65536, 128, "bf16"), (262144, 256, "bf16"), (4096, 1000, "bf16"), (32, 3000, "bf16"),
    # widths off the 16-byte grid (N not a multiple of 8): rows start at any 2-byte address
    (32, 3001, "bf16"), (256, 4095, "bf16"), (4096, 1001, "bf16"), (16384, 2999, "bf16"),
]
EPS = 1e-6
#: Footprint the rotating inputs of one graph should exceed (about 3x an H200's L2).
ROTATE_BYTES = 200e6
#: Fewest calls one timed graph holds, so what comes with each replay (the graph's launch, the write-back
#: of the L2 flush ``do_bench`` runs before it) is spread over them: with one call a 64 M-element bf16
#: shape read 5-7 % under its kernel's own duration, with 8 about 1 % (``bench/harness_probe.py``).
MIN_CALLS = 8
#: One timed replay lasts at least this long (``graph_time`` adds input copies until it does): at
#: 4096 x 1000 bf16 a replay of 13 calls (about 70 us) read 7-9 % under millisecond replays of the same
#: calls, and that share moved from run to run (``bench/flush_probe.py``).
MIN_REPLAY_MS = 1.0
#: The most input copies one graph reads (1 x 4096 needs about 1500 for a millisecond).
MAX_COPIES = 4096
#: Share of the GPU's free memory the rotating inputs (and the outputs the graph allocates) may take.
ROTATE_MEMORY = 0.4


def shape_spec(spec):
    """``"1024x65536:bf16"`` -> ``(1024, 65536, "bf16")``: how the GPU probes name a shape."""
    shape, ds = spec.split(":")
    M, N = (int(v) for v in shape.split("x"))
    return M, N, ds


def parse_shape(item):
    """One ``--shapes`` item: an index into :data:`SHAPES`, or ``MxN:dtype`` (:func:`shape_spec`)."""
    if item.strip().isdigit():
        return SHAPES[int(item)]
    M, N, ds = shape_spec(item.strip())
    if ds not in ("bf16", "fp16", "fp32") or M < 1 or N < 1:
        raise ValueError(item)
    return M, N, ds


def torch_dtype(ds):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[ds]


#: Bytes an element of each bench dtype.
ELEM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def nbytes(M, N, ds):
    return (2 * M * N + N) * ELEM_BYTES[ds]


def gbps_of(ms, M, N, ds):
    """``{name: GB/s}`` for ``{name: ms per call}`` of one shape (the bytes of :func:`nbytes`)."""
    b = nbytes(M, N, ds)
    return {k: b / (v * 1e-3) / 1e9 for k, v in ms.items()}


# -- implementations -------------------------------------------------------------


def load_quack():
    """QuACK's ``rmsnorm_fwd``, or None after saying why it cannot be used here (the bench goes on
    without it)."""
    import importlib

    try:
        return importlib.import_module("quack.rmsnorm").rmsnorm_fwd
    except Exception as exc:  # not installed, or no CUTLASS DSL for this GPU
        print(f"QuACK not measured ({type(exc).__name__}: {exc}"[:200] + "): measuring without it", flush=True)
        return None


def make_impls(N, have_liger, quack_fwd=None):
    import torch
    import torch.nn.functional as F

    from flyautotune_rmsnorm import rmsnorm, rmsnorm_autotuned

    # One lambda per shape still shares one code object: without a reset, dynamo
    # stops recompiling after its recompile_limit (8) shapes and silently runs
    # the later shapes uncompiled, i.e. as F.rms_norm.
    torch._dynamo.reset()
    impls = {
        "torch": lambda x, w: F.rms_norm(x, (N,), w, EPS),
        "compile": torch.compile(lambda x, w: F.rms_norm(x, (N,), w, EPS), dynamic=False),
        "default": lambda x, w: rmsnorm(x, w, EPS),
        "tuned": lambda x, w: rmsnorm_autotuned(x, w, EPS),
        "clone": lambda x, w: x.clone(),  # the same bytes moved, as a reference (not a peer)
    }
    if have_liger:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        impls["liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
    if quack_fwd is not None:
        impls["quack"] = lambda x, w: quack_fwd(x, w, eps=EPS)[0]
    return impls


def probe_fns(N, quack_fwd=None, x=None, w=None):
    """``{name: fn(x, w)}`` that every probe times next to its own candidates: a clone (the same bytes, a
    reference), torch.compile of F.rms_norm, ``rmsnorm_autotuned``, and QuACK when ``quack_fwd`` is given
    (:func:`load_quack`). Resets dynamo first (see :func:`make_impls`). Given ``x`` and ``w``, a peer that
    fails on them is said and left out (QuACK takes no row width off the 16-byte grid)."""
    import torch
    import torch.nn.functional as F

    from flyautotune_rmsnorm import rmsnorm_autotuned

    torch._dynamo.reset()
    fns = {"clone": lambda x, w: x.clone(),
           "compile": torch.compile(lambda x, w: F.rms_norm(x, (N,), w, EPS), dynamic=False),
           "tuned": lambda x, w: rmsnorm_autotuned(x, w, EPS)}
    if quack_fwd is not None:
        fns["quack"] = lambda x, w: quack_fwd(x, w, eps=EPS)[0]
    if x is not None:
        for name in [n for n in fns if n != "tuned"]:  # ours failing is a bug: it is not hidden here
            try:
                fns[name](x, w)
            except Exception as exc:  # noqa: BLE001 - a peer that cannot run this shape
                print(f"{name} not measured at {tuple(x.shape)} {x.dtype}: {type(exc).__name__}: {exc}"[:300],
                      flush=True)
                del fns[name]
    return fns


def capture_graph(fn, xs, w):
    """A CUDA graph of ``fn(x, w)`` for each ``x`` of ``xs``, captured on a side stream after two warm-up
    calls there (cooperative configs record their one launch on the stream they warmed up on), then
    replayed once (which uploads it)."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for x in xs[:2]:
            fn(x, w)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for x in xs:
            fn(x, w)
    g.replay()
    torch.cuda.synchronize()
    return g


def replay_ms(g):
    """Milliseconds of one replay of graph ``g``, from events around it on the current stream."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    g.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def graph_time(fn, xs, w, reps_ms=100, min_replay_ms=None):
    """ms per call of ``fn`` replayed from one CUDA graph over rotating inputs, one call per input.

    When one replay lasts less than ``min_replay_ms`` (:data:`MIN_REPLAY_MS` when None; 0 = as given),
    ``xs`` grows (in place, so the caller's later timings share the copies) by copies of ``xs[0]`` until
    it would, as far as ``ROTATE_MEMORY`` of the free memory and :data:`MAX_COPIES` allow: what comes with
    each replay (the graph's launch, the write-back of the dirty lines ``do_bench``'s flush leaves) is then
    a small share of it. Every call still reads an input no other call of the replay touched (going round
    the same copies again would let later rounds hit in L2).
    """
    import torch
    import triton

    min_replay_ms = MIN_REPLAY_MS if min_replay_ms is None else min_replay_ms
    while True:
        g = capture_graph(fn, xs, w)
        once = replay_ms(g)
        if once >= min_replay_ms or not _grow(xs, math.ceil(len(xs) * min_replay_ms / max(once, 1e-4))):
            break
        del g
        torch.cuda.synchronize()
    ms = triton.testing.do_bench(g.replay, warmup=10, rep=reps_ms, return_mode="median")
    del g
    return ms / len(xs)


def _grow(xs, count):
    """Append copies of ``xs[0]`` until ``xs`` holds ``count`` (within memory and :data:`MAX_COPIES`);
    False when none could be added."""
    import torch

    x = xs[0]
    if not isinstance(x, torch.Tensor):
        return False
    free, _ = torch.cuda.mem_get_info(x.device)
    room = int(ROTATE_MEMORY * free // max(1, x.numel() * x.element_size()))
    add = min(max(0, min(count, MAX_COPIES) - len(xs)), room)
    xs.extend(x.clone() for _ in range(add))
    return add > 0


def graph_times(fns, xs, w, rounds=3, samples=None):
    """``{name: ms per call}`` of each ``fns[name](x, w)``, timed by :func:`graph_time` in ``rounds``
    interleaved rounds (the median is kept): slow drifts of the GPU's clocks hit every one alike. Each
    round starts one implementation later than the one before, so none always runs first or last.
    ``samples``, a dict, receives every round's ms per call too: ``{name: [ms, ...]}`` in round order."""
    got = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            got[name].append(graph_time(fns[name], xs, w, reps_ms=max(40, 100 // rounds)))
    if samples is not None:
        samples.update(got)
    return {name: statistics.median(v) for name, v in got.items()}


#: What ``--warm`` runs before each timed call, in the same graph: it reads and writes that call's own x (the
#: values stay), so x is in L2, dirty, as far as it fits (a residual add's output, the usual input of a norm).
PRODUCER = "x.mul_(1.0)"


def _produce(x, w):
    return x.mul_(1.0)


def _produced(fn):
    return lambda x, w: (_produce(x, w), fn(x, w))[1]


def warm_times(fns, xs, w, rounds=3):
    """``{name: [ms per call, one a round]}`` of each ``fns[name](x, w)`` on an x just written: each call
    follows :data:`PRODUCER` of its own input in one graph replay over ``xs``, and the producers' own time,
    the same replay without the implementation timed in the same round, is taken off. ``xs`` first grows (in
    place, as :func:`graph_time` grows it) until the producers' replay alone lasts ``MIN_REPLAY_MS``; every
    implementation is then timed over those same copies. Interleaved rounds, the order rotated as
    :func:`graph_times` rotates it. A difference that is not positive (noise larger than a call) is said
    and kept as NaN."""
    timed = {name: _produced(fn) for name, fn in fns.items()}
    timed[PRODUCER] = _produce
    graph_time(timed[PRODUCER], xs, w, reps_ms=10)  # grows xs: what each replay adds is then a small share
    names = list(timed)
    got = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            got[name].append(graph_time(timed[name], xs, w, reps_ms=max(40, 100 // rounds), min_replay_ms=0))
    alone = got.pop(PRODUCER)
    out = {}
    for name, v in got.items():
        diffs = [t - p for t, p in zip(v, alone)]
        if min(diffs) <= 0:
            print(f"x just written: {name}: a round is not above the producer's own time ({diffs}); kept as NaN",
                  flush=True)
        out[name] = [d if d > 0 else float("nan") for d in diffs]
    return out


def graph_gbps(fns, xs, w, rounds, M, N, ds):
    """``(gbps, spread)`` of :func:`graph_times` over one shape: ``{name: GB/s}`` of the medians, and
    ``{name: [slowest, fastest] GB/s}`` over the rounds, whether a gap between two implementations is
    wider than one's own movement from round to round."""
    samples = {}
    graph_times(fns, xs, w, rounds, samples)
    return rounds_gbps(samples, M, N, ds)


def warm_gbps(fns, xs, w, rounds, M, N, ds):
    """:func:`graph_gbps` on an x just written (:func:`warm_times`)."""
    return rounds_gbps(warm_times(fns, xs, w, rounds), M, N, ds)


def rounds_gbps(samples, M, N, ds):
    """``(gbps, spread)`` of ``{name: [ms per call, one a round]}``: ``{name: GB/s}`` of the medians, and
    ``{name: [slowest, fastest] GB/s}`` over the rounds."""
    gbps = gbps_of({name: statistics.median(v) for name, v in samples.items()}, M, N, ds)
    slowest = gbps_of({name: max(v) for name, v in samples.items()}, M, N, ds)
    fastest = gbps_of({name: min(v) for name, v in samples.items()}, M, N, ds)
    return gbps, {name: [slowest[name], fastest[name]] for name in samples}


def print_ranking(heading, gbps, spread):
    """A probe's table for one shape: ``heading``, then every implementation but the clone, fastest first,
    with its slowest and fastest round and its ratio to the best peer (torch.compile or QuACK)."""
    best = max(gbps[k] for k in ("compile", "quack") if k in gbps)
    print(f"\n### {heading}\n\n| implementation | GB/s | rounds | / best peer |\n|---|---|---|---|")
    for name, v in sorted(gbps.items(), key=lambda kv: -kv[1]):
        if name != "clone":
            lo, hi = spread[name]
            print(f"| {name} | {v:.0f} | {lo:.0f}–{hi:.0f} | {v / best:.3f} |")


def check_and_rank(fns, x, w, spec, rounds, picked, **extra):
    """A probe's row for one shape: every implementation in ``fns`` but the clone checked against the fp64
    reference (the bench's bound), then timed by :func:`graph_gbps`; ``picked`` describes the search's pick,
    ``extra`` joins the row. The row is printed as JSON too."""
    from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance

    M, N, ds = shape_spec(spec)
    ref = rmsnorm_reference(x, w, EPS)
    for name, fn in fns.items():
        if name != "clone":
            err = relative_error(fn(x, w), ref)
            assert err <= 5 * tolerance(x.dtype), (spec, name, err)
    gbps, spread = graph_gbps(fns, rotating_inputs(x, M, N, ds), w, rounds, M, N, ds)
    row = {"shape": spec, "picked": picked, "gbps": gbps, "spread": spread, **extra}
    print(json.dumps(row), flush=True)
    return row


def probe_args(argv, doc, shapes, cache_prefix, rounds=3, more=None):
    """The common command line of a probe (``--out``, ``--shapes``, ``--rounds``, and whatever ``more(parser)``
    adds), parsed; makes ``--out`` and points ``FLYAUTOTUNE_CACHE_DIR`` at a fresh directory unless it is set."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=shapes)
    ap.add_argument("--rounds", type=int, default=rounds)
    if more is not None:
        more(ap)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("FLYAUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix=cache_prefix))
    return args


def save_and_rank(out_dir, name, rows):
    """Write a probe's rows (:func:`save_rows`) and print each shape's ranking (:func:`print_ranking`)."""
    save_rows(out_dir, name, rows)
    for r in rows:
        print_ranking(f"{r['shape']} (picked {r['picked']}; clone {r['gbps']['clone']:.0f} GB/s)", r["gbps"],
                      r["spread"])


def variant_probe(args, name, variants_of, make_fn, describe, skip=None):
    """The loop of a probe that times its own body's variants beside the peers: for each shape of
    ``args.shapes``, one forced search (:func:`searched_inputs`), :func:`probe_fns`, and every variant of
    ``args.variants or variants_of(N, ds)`` built by ``make_fn(v, M, N)`` (a ``fn(x, w, compiled=False)``; a
    variant that does not build is said and left out), checked and timed by :func:`check_and_rank`; the rows
    are saved as ``name`` (:func:`save_and_rank`). ``skip(M, N, ds)``, when given, returns why a shape is not
    measured (or None)."""
    import torch

    quack = load_quack()
    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        why = skip(M, N, ds) if skip else None
        if why:
            print(f"{spec}: not measured ({why})", flush=True)
            continue
        x, w, picked = searched_inputs(M, N, ds)
        fns = probe_fns(N, quack, x, w)
        built = {}
        for v in args.variants or variants_of(N, ds):
            fn = make_fn(v, M, N)
            try:
                k = fn(x, w, compiled=True)
            except Exception as exc:  # a variant Triton cannot build here: said, then left out
                print(f"{spec} {describe(v)}: {type(exc).__name__}: {exc}"[:300], flush=True)
                continue
            fns[describe(v)] = fn
            built[describe(v)] = {"regs": k.n_regs, "spills": k.n_spills, "smem": k.metadata.shared}
        print(json.dumps({"shape": spec, "built": built}), flush=True)
        rows.append(check_and_rank(fns, x, w, spec, args.rounds, picked, built=built))
        del x
        torch.cuda.empty_cache()
    save_and_rank(args.out, name, rows)


def save_rows(out_dir, name, rows):
    """Write ``{"device": ..., "rows": rows}`` to ``out_dir/name`` (the probes' result files)."""
    import torch

    with open(os.path.join(out_dir, name), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


def searched_inputs(M, N, ds):
    """``(x, w, picked)``: random inputs of a shape (seeded by it) after one forced search of
    ``rmsnorm_autotuned`` over them, so its later calls hit the tuned winner, and the winner's knobs."""
    import torch

    from flyautotune_rmsnorm import rmsnorm_autotuned
    from flyautotune_rmsnorm.api import tuned_launch

    dt = torch_dtype(ds)
    torch.manual_seed(M + N)
    x = torch.randn(M, N, device="cuda", dtype=dt)
    w = torch.rand(N, device="cuda", dtype=dt) + 0.5
    os.environ["FLYAUTOTUNE"] = "1"
    try:
        rmsnorm_autotuned(x, w, EPS)
    finally:
        os.environ.pop("FLYAUTOTUNE")
    rmsnorm_autotuned(x, w, EPS)  # a hit: the config later calls run
    return x, w, dict(tuned_launch.last_config.kwargs)


def rotating_inputs(x, M, N, ds):
    """``x`` and copies of it for one graph's calls: past ``ROTATE_BYTES`` and at least ``MIN_CALLS``,
    as far as ``ROTATE_MEMORY`` of the free memory allows (inputs and outputs)."""
    import torch

    per_call = nbytes(M, N, ds)
    count = max(MIN_CALLS, min(32, math.ceil(ROTATE_BYTES / per_call)))
    free, _ = torch.cuda.mem_get_info(x.device)
    count = max(1, min(count, int(ROTATE_MEMORY * free // per_call)))
    return [x] + [x.clone() for _ in range(count - 1)]


# -- parallel precompile ---------------------------------------------------------------


def _precompile_one(job):
    """Compile one specialization into Triton's on-disk cache (a worker process)."""
    import torch

    from flyautotune_rmsnorm import make_launcher
    from flyautotune_rmsnorm.factory import _CONST_NAMES, pdl_for, row_vec
    from flyautotune_rmsnorm.kernel import jit_kernel
    from flyautotune_rmsnorm.kernel_split import kernels

    N, ds, *knobs, M = job
    L = make_launcher(N, ds, *knobs)
    if getattr(L, "fallback", None) is not None:  # ASYNC=1: the Gluon body compiles at its first launch
        return 0.0
    rv = row_vec(N, N, L.elem, L.VEC)
    dt = torch_dtype(ds)
    nw = max(1, knobs[0] // 32)
    t0 = time.perf_counter()
    if L.SPLIT > 1:
        c1, c2 = L.constexprs(rv)
        k1, k2 = kernels()
        k1.warmup(dt, torch.float32, N // rv, grid=(1,), num_warps=nw, **c1)
        k2.warmup(dt, dt, dt, torch.float32, N // rv, N // rv, EPS, grid=(1,), num_warps=nw, **c2)
    else:
        pdl = pdl_for(torch.cuda.current_device())  # the binary the launch will ask for
        kw = dict(zip(_CONST_NAMES, L._constexprs(M, rv, N, N, pdl)))
        jit_kernel().warmup(dt, dt, dt, M, N // rv, N // rv, EPS, grid=(1,), **L.compile_options(None, pdl), **kw)
    return time.perf_counter() - t0


def precompile(jobs, workers):
    jobs = sorted(set(jobs))
    if not jobs or workers <= 1:
        return 0.0
    t0 = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        list(pool.map(_precompile_one, jobs, chunksize=2))
    dt = time.perf_counter() - t0
    print(f"precompiled {len(jobs)} kernels with {workers} processes in {dt:.1f} s", flush=True)
    return dt


def explore_grid(M, N, ds):
    """A wider grid than the CUDA space (every cache policy; split rows for few rows), to check the
    space and default against it."""
    from flyautotune_rmsnorm.factory import next_pow2

    npad = next_pow2(N)
    out = []
    for policy in (0, 1, 2):
        for bt in (64, 128, 256, 512, 1024):
            for rows in (1, 2, 4, 8, 16):
                if rows > 1 and npad > 4096:
                    continue
                ept = rows * npad // bt
                if 2 <= ept <= 64 and (npad <= 32768 or rows == 1 and ept <= 32):
                    out.append((bt, rows, 0, policy, 0))
            if npad >= 4096:
                for chunk in (1024, 2048, 4096, 8192, 16384, 32768):
                    if chunk < npad and 4 <= chunk // bt <= 32:
                        for prefetch in ((0, 1) if npad >= 32768 else (0,)):
                            out.append((bt, 1, chunk, policy, prefetch))
    if M < 132 and npad >= 4096:
        for split in (2, 4, 8, 16, 32, 64, 128):
            for bt in (128, 256, 512, 1024):
                slice_n = npad // split
                tile = min(slice_n, 16 * bt)
                if M * split <= 1024 and slice_n >= 512 and tile >= 4 * bt:
                    out.append((bt, 1, 0 if tile == slice_n else tile, 2, 0, split))
    return out


def space_jobs(M, N, ds, explore):
    from flyautotune_rmsnorm.space import KNOBS, cuda_space, default_config

    cfgs = {tuple(c.kwargs[k] for k in KNOBS) for c in cuda_space(M, N, ds) + [default_config(M, N, ds)]}
    if explore:
        cfgs |= set(explore_grid(M, N, ds))
    # EVEN_M is a constexpr: M % ROWS == 0 decides which binary a shape uses.
    # knobs[1] is ROWS_PER_PROGRAM
    return [(N, ds, *knobs, M if M % knobs[1] else knobs[1] * 16) for knobs in cfgs]


# -- one shape -----------------------------------------------------------------------


def kernel_report(cfg, N, ds):
    """Registers, spills, shared memory and a digest of the cubin of the binaries a config launched (from
    its launcher cache): two processes whose digests match launched the same binary."""
    from flyautotune_rmsnorm import make_launcher

    kw = cfg if isinstance(cfg, dict) else cfg.kwargs
    L = make_launcher(N, ds, **kw)
    out = []
    for launch in list(L._launches.values()):
        for one in (launch if isinstance(launch, tuple) else (launch,)):  # split rows: two kernels
            k = one.kernel
            cubin = getattr(k, "asm", {}).get("cubin")
            out.append({"n_regs": getattr(k, "n_regs", None), "n_spills": getattr(k, "n_spills", None),
                        "shared": k.metadata.shared if hasattr(k.metadata, "shared") else None,
                        "cubin": hashlib.sha256(cubin).hexdigest()[:12] if isinstance(cubin, bytes) else None})
    return out


def bench_shape(M, N, ds, impls, explore, log, rounds=1, warm=False):
    import torch
    import triton

    from flyautotune_rmsnorm import make_launcher
    from flyautotune_rmsnorm.api import tuned_launch as _tuned_launch
    from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance
    from flyautotune_rmsnorm.space import KNOBS, cuda_space, default_config

    dt = torch_dtype(ds)
    torch.manual_seed(M * 7 + N)
    x = torch.randn(M, N, device="cuda", dtype=dt)
    w = (torch.rand(N, device="cuda", dtype=dt) + 0.5)
    ref = rmsnorm_reference(x, w, EPS)
    row = {"M": M, "N": N, "dtype": ds, "bytes": nbytes(M, N, ds), "err": {}, "eager_ms": {}, "graph_ms": {}}

    # tuned: a forced search (every candidate's time recorded), then cache hits
    import flyautotune as fat

    searches = []
    listener = fat.add_listener(lambda e: searches.append(e) if e.get("event") == "search_end" else None)
    os.environ["FLYAUTOTUNE"] = "1"
    t0 = time.perf_counter()
    impls["tuned"](x, w)
    torch.cuda.synchronize()
    row["search_s"] = round(time.perf_counter() - t0, 3)
    os.environ.pop("FLYAUTOTUNE")
    fat.remove_listener(listener)
    if searches:
        row["candidates"] = [{"config": c["config"].get("kwargs") if isinstance(c["config"], dict) else c["config"],
                              **{k: c.get(k) for k in ("ms", "error", "method", "spread", "samples", "default")}}
                             for c in searches[-1].get("candidates", [])]
        row["search"] = {k: searches[-1].get(k) for k in ("winner", "margin", "noise")}
    impls["tuned"](x, w)
    row["tuned_config"] = _tuned_launch.last_config.kwargs
    row["tuned_source"] = _tuned_launch.last_source
    row["default_config"] = default_config(M, N, ds).kwargs
    row["space_size"] = len(cuda_space(M, N, ds))

    xs = rotating_inputs(x, M, N, ds)
    samples = {}  # graph-replay ms per implementation, one per round
    for name in IMPLS:
        fn = impls.get(name)
        if fn is None:
            continue
        try:
            y = fn(x, w)
            torch.cuda.synchronize()
            err = relative_error(y, x if name == "clone" else ref)
            row["err"][name] = err
            if not err <= 5 * tolerance(dt):
                log(f"  {name}: relative error {err:.3g} (tolerance {tolerance(dt):.1g})")
            row["eager_ms"][name] = triton.testing.do_bench(lambda: fn(x, w), warmup=25, rep=100,
                                                            return_mode="median")
            samples[name] = [graph_time(fn, xs, w)]
        except Exception as exc:  # a peer that fails on a shape is reported, not fatal
            row.setdefault("failed", {})[name] = f"{type(exc).__name__}: {exc}"[:300]
            log(f"  {name} failed: {exc!r}"[:300])
    names = list(samples)
    for r in range(1, rounds):  # more rounds over every implementation in turn (each starting one later)
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(graph_time(impls[name], xs, w))
    row["graph_ms"] = {name: statistics.median(v) for name, v in samples.items()}
    if rounds > 1:
        row["graph_rounds"] = {name: v for name, v in samples.items()}
    if warm:
        row["warm_rounds"] = warm_times({name: impls[name] for name in names}, xs, w, rounds)
        row["warm_ms"] = {name: statistics.median(v) for name, v in row["warm_rounds"].items()}
    row["kernels"] = {"default": kernel_report(row["default_config"], N, ds),
                      "tuned": kernel_report(row["tuned_config"], N, ds)}

    if explore:
        grid = []
        y = torch.empty_like(x)
        ys = [torch.empty_like(x) for _ in xs]
        for knobs in explore_grid(M, N, ds):
            bt = knobs[0]
            L = make_launcher(N, ds, *knobs)
            opts = (("num_warps", max(1, bt // 32)),)
            try:
                L(x, w, y, M, N, N, EPS, None, opts)
                torch.cuda.synchronize()
                err = relative_error(y, ref)
                pairs = list(zip(xs, ys))

                def call_all(_x=None, _w=None, L=L, pairs=pairs, opts=opts):
                    for xi, yi in pairs:
                        L(xi, w, yi, M, N, N, EPS, None, opts)

                ms = graph_time(call_all, [None], None, reps_ms=30) / len(pairs)
                rep = kernel_report(dict(zip(KNOBS, knobs)), N, ds)
                grid.append({"cfg": list(knobs), "ms": ms, "err": err, "kernels": rep})
            except Exception as exc:
                grid.append({"cfg": list(knobs), "error": f"{type(exc).__name__}: {exc}"[:300]})
        row["explore"] = grid
    return row


def copy_ceiling():
    import torch
    import triton

    n = 1 << 30
    a = torch.empty(n, dtype=torch.int16, device="cuda").random_()
    b = torch.empty_like(a)
    ms = triton.testing.do_bench(lambda: b.copy_(a), warmup=10, rep=100, return_mode="median")
    del a, b
    torch.cuda.empty_cache()
    return 2 * 2 * n / (ms * 1e-3) / 1e9


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--explore", action="store_true", help="also time a wider config grid per shape")
    ap.add_argument("--shapes", default="all",
                    help="'all' (SHAPES), or a comma list of indices into SHAPES and MxN:dtype shapes, e.g. "
                         "0,3,4096x7168:bf16")
    ap.add_argument("--budget-s", type=float, default=480.0, help="stop starting new shapes after this")
    ap.add_argument("--workers", type=int, default=min(14, os.cpu_count() or 1))
    ap.add_argument("--rounds", type=int, default=3,
                    help="graph-replay rounds over every implementation of a shape (the median is kept; the "
                         "first round after a search often runs 1-3%% low, for every implementation)")
    ap.add_argument("--warm", action="store_true",
                    help="also time every implementation on an x just written by an in-place multiply before it "
                         "in the same graph replay (its own time taken off): a norm after a residual add")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t_start:6.1f}s] {msg}", flush=True)

    os.environ.setdefault("FLYAUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="fat-bench-"))
    import torch
    import triton

    try:
        import liger_kernel  # noqa: F401
        from importlib.metadata import version

        liger = version("liger-kernel")
    except Exception:
        liger = None
    from importlib.metadata import version
    quack_fwd = load_quack()
    if quack_fwd is None:
        quack = None
    else:
        try:
            quack = version("quack-kernels")
        except Exception:
            quack = "installed"
    try:
        shapes = SHAPES if args.shapes == "all" else [parse_shape(item) for item in args.shapes.split(",")]
    except (ValueError, IndexError):
        ap.error(f"--shapes {args.shapes!r}: expected 'all', or indices into SHAPES (0-{len(SHAPES) - 1}) and "
                 f"MxN:dtype shapes (dtype bf16, fp16 or fp32), comma-separated")
    meta = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "cuda": torch.version.cuda, "liger": liger, "quack": quack, "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    meta["copy_gbps"] = copy_ceiling()
    from flyautotune_rmsnorm.factory import pdl_for

    meta["pdl"] = bool(pdl_for(torch.cuda.current_device()))  # ours with programmatic dependent launch
    log(f"{meta}")
    jobs = []
    for M, N, ds in shapes:
        jobs += space_jobs(M, N, ds, args.explore)
    meta["precompile_s"] = precompile(jobs, args.workers)
    rows = []
    impl_cache = {}
    for M, N, ds in shapes:
        if time.perf_counter() - t_start > args.budget_s:
            log(f"budget spent: skipping {M}x{N} {ds}")
            continue
        impls = impl_cache.get(N) or impl_cache.setdefault(N, make_impls(N, liger is not None, quack_fwd))
        t0 = time.perf_counter()
        row = bench_shape(M, N, ds, impls, args.explore, log, args.rounds, args.warm)
        row["device"] = meta["device"]
        rows.append(row)
        vals = {n: gbps(row, "eager", n) for n in IMPLS}
        gvals = {n: gbps(row, "graph", n) for n in IMPLS}
        log(f"{M}x{N} {ds}: eager " + " ".join(f"{n}={fmt(v)}" for n, v in vals.items())
            + " | graph " + " ".join(f"{n}={fmt(v)}" for n, v in gvals.items())
            + f" | tuned {row['tuned_config']} search {row['search_s']}s | {time.perf_counter() - t0:.1f}s")
        with open(os.path.join(args.out, "rmsnorm.json"), "w") as f:
            json.dump({"meta": meta, "rows": [{k: v for k, v in r.items() if k != "explore"} for r in rows]},
                      f, indent=1, default=str)
        if args.explore:
            with open(os.path.join(args.out, "explore.json"), "w") as f:
                json.dump([{k: r[k] for k in ("M", "N", "dtype", "explore", "default_config", "tuned_config")}
                           for r in rows], f, indent=1, default=str)
    md = markdown(rows, meta)
    with open(os.path.join(args.out, "rmsnorm.md"), "w") as f:
        f.write(md)
    try:
        plot(rows, os.path.join(args.out, "rmsnorm.png"))
    except Exception as exc:
        log(f"plot failed: {exc!r}")
    print(md)
    # A peer may fail (Liger refuses rows past 65536); ours failing is a bug: the run says so in its status.
    ours_failed = [f"{r['M']}x{r['N']} {r['dtype']} {name}" for r in rows for name in ("default", "tuned")
                   if not r["graph_ms"].get(name)]
    if ours_failed:
        log(f"our own launches failed at: {', '.join(ours_failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
