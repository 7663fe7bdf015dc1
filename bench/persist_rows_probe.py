"""Persistent rows: does a program that stays resident and loops over rows beat one program per row tile?

A probe body (not the product's), defined here: a grid of ``OCC`` programs per SM, each normalizing row
tiles ``pid, pid + grid, ...``, the weight held in registers or loaded again each tile; with ``PREFETCH`` the next
tile's x is loaded before the current tile is reduced (the loads of two tiles in flight per program). What
it could buy over the product's one-program-per-tile grid at the copy-speed shapes (16384 x 8192 bf16,
32768 x 4096 fp32, 262144 x 256 bf16, where tuned ties torch.compile or QuACK at a copy's bandwidth): the
weight read from L2 once per program instead of once per tile (as many bytes through L2 as x itself at one
row a tile), and no gap between a program's end and the next one's start on an SM.
Measured on an H100 (2026-12-05, ``docs/benchmarks.md``): every variant lost, by 4.7-30 %; nothing entered
the space.

Each shape: one forced search (``tuned``), torch.compile, QuACK where it runs, a clone, and the probe's
variants, checked against the fp64 reference, then timed as ``bench/rmsnorm.py`` times its peers (CUDA-graph
replay over rotating inputs, interleaved rounds, medians).

    python bench/persist_rows_probe.py --out DIR [--shapes 16384x8192:bf16,...] [--rounds 3]
                                       [--variants 512x1:4:1,...]

A variant is ``THREADSxROWS:OCC:PREFETCH[:POLICY[:WHOLD]]``: threads a program, rows a tile, programs per SM,
prefetch 0/1, the cache policy (0: none, 1 (default): x streamed, 2: x and y streamed) and whether the weight
stays in registers (1) or is loaded again each tile from L1 (0, default). Without ``--variants`` each shape
takes :func:`default_variants` of its row width.
"""

from __future__ import annotations

import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = "16384x8192:bf16,32768x4096:fp32,262144x256:bf16"

@functools.cache
def persist_kernel():
    """The probe's body, as a Triton ``JITFunction`` (built once)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _persist_rows(X, W, Y, M, eps, N: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
                      PREFETCH: tl.constexpr, X_POLICY: tl.constexpr, Y_POLICY: tl.constexpr,
                      W_HOLD: tl.constexpr):
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        cols = tl.arange(0, BLOCK_N)
        r = tl.arange(0, ROWS)
        col_ok = (cols < N)[None, :]
        if W_HOLD:  # the weight in registers for the program's life (fp32: registers that cost occupancy)
            w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        tiles = tl.cdiv(M, ROWS)
        if PREFETCH:  # the first tile before the loop; each trip then loads the next one before its sum
            rows = pid * ROWS + r
            x = tl.load(X + (rows * N)[:, None] + cols[None, :], mask=(rows < M)[:, None] & col_ok, other=0.0,
                        eviction_policy=X_POLICY)
        for t in range(pid, tiles, nprog):
            rows = t * ROWS + r
            if PREFETCH:
                nrows = rows + nprog * ROWS
                nxt = tl.load(X + (nrows * N)[:, None] + cols[None, :], mask=(nrows < M)[:, None] & col_ok,
                              other=0.0, eviction_policy=X_POLICY)
            else:
                x = tl.load(X + (rows * N)[:, None] + cols[None, :], mask=(rows < M)[:, None] & col_ok,
                            other=0.0, eviction_policy=X_POLICY)
            xf = x.to(tl.float32)
            rstd = tl.rsqrt(tl.sum(xf * xf, 1) / N + eps)
            if not W_HOLD:  # loaded again each tile, after the sum: an L1 hit from the second tile on
                w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
            y = (xf * rstd[:, None] * w).to(Y.dtype.element_ty)
            tl.store(Y + (rows * N)[:, None] + cols[None, :], y, mask=(rows < M)[:, None] & col_ok,
                     eviction_policy=Y_POLICY)
            if PREFETCH:
                x = nxt

    return _persist_rows


POLICIES = {0: ("", ""), 1: ("evict_first", ""), 2: ("evict_first", "evict_first")}


def parse_variants(text):
    """``[(threads, rows, occ, prefetch, policy, w_hold), ...]`` of ``--variants``: comma-separated
    ``THREADSxROWS:OCC:PREFETCH[:POLICY[:WHOLD]]``; a bad item is an error naming it."""
    import argparse

    out = []
    for item in filter(None, text.split(",")):
        try:
            shape, occ, pre, *rest = item.split(":")
            threads, rows = (int(v) for v in shape.split("x"))
            pol, hold = ([int(v) for v in rest] + [1, 0][len(rest):])[:2]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: expected THREADSxROWS:OCC:PREFETCH[:POLICY[:WHOLD]], e.g. "
                                             f"512x1:4:1") from None
        out.append((threads, rows, int(occ), int(pre), pol, hold))
    return out


def default_variants(N, ds=None):
    """A small grid per row width: 8 or 16 elements a thread (tiles of at least 128 threads), programs
    filling a half, three quarters or all of an SM's 2048 threads; without prefetch, and with it, the weight
    held or loaded each tile. (``ds``, the dtype, is the probes' common signature; unused here.)"""
    from flyautotune_rmsnorm.factory import next_pow2

    npad = next_pow2(N)
    out = []
    for per_thread in (8, 16):
        tile = max(npad, 128 * per_thread)  # short rows: several rows a tile, at least 128 threads
        threads = min(1024, tile // per_thread)
        rows = tile // npad
        for occ in sorted({1024 // threads, 1536 // threads, 2048 // threads} - {0}):  # of an SM's 2048 threads
            out.append((threads, rows, occ, 0, 1, 0))
            out += [(threads, rows, occ, 1, 1, hold) for hold in (0, 1)]
    return out


def describe(v):
    threads, rows, occ, pre, pol, hold = v
    return f"persist {threads}t x {rows}r occ {occ}{' prefetch' if pre else ''}{' w held' if hold else ''} p{pol}"


def make_fn(v, M, N, sms, eps):
    import torch

    threads, rows, occ, pre, pol, hold = v
    from flyautotune_rmsnorm.factory import next_pow2

    kern = persist_kernel()
    tiles = -(-M // rows)
    grid = (min(tiles, occ * sms),)
    xp, yp = POLICIES[pol]

    def fn(x, w, compiled=False):
        y = torch.empty_like(x)
        k = kern[grid](x, w, y, M, eps, N=N, BLOCK_N=next_pow2(N), ROWS=rows, PREFETCH=pre, X_POLICY=xp,
                       Y_POLICY=yp, W_HOLD=hold, num_warps=threads // 32)
        return k if compiled else y

    return fn


def main(argv=None):
    from rmsnorm import EPS, probe_args, variant_probe

    args = probe_args(argv, __doc__, SHAPES, "fat-persist-rows-", more=lambda ap: ap.add_argument(
        "--variants", type=parse_variants, default=[], help="THREADSxROWS:OCC:PREFETCH[:POLICY[:WHOLD]],..."))
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    variant_probe(args, "persist_rows_probe.json", default_variants, lambda v, M, N: make_fn(v, M, N, sms, EPS),
                  describe)


if __name__ == "__main__":
    sys.exit(main())
