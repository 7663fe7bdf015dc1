"""Rows through the tensor memory accelerator: does a row tile copied by TMA beat the product's loads?

A probe body (not the product's), defined here: each program copies its tile of ``ROWS`` whole rows from
global to shared memory with the Hopper tensor memory accelerator (Triton's tensor descriptors, built on the
host), reduces each row's sum of squares, and writes y back either by TMA from shared memory (``STORE=1``) or
with plain vector stores from registers (``STORE=0``). (A second copy of the tile for the normalize pass, the
product's read-twice structure, cannot be written this way: Triton 3.6 merges the two descriptor loads into one.)

What it could buy at the copy-speed shapes (4096 x 8192, 16384 x 8192 and 262144 x 256 bf16, 32768 x 4096
fp32, where tuned ties torch.compile or QuACK at a copy's bandwidth): a row copied by a few bulk requests a
warp instead of one 16-byte load a thread per vector, so the load/store units issue far fewer requests for
the same bytes in flight, and a TMA store that frees the registers of y as soon as it is issued.

Each shape: one forced search (``tuned``), torch.compile, QuACK where it runs, a clone, and the probe's
variants, checked against the fp64 reference, then timed as ``bench/rmsnorm.py`` times its peers (CUDA-graph
replay over rotating inputs, interleaved rounds, medians). The descriptors are built when a graph is
captured, so the replays time the kernels alone.

    python bench/tma_probe.py --out DIR [--shapes 4096x8192:bf16,...] [--rounds 3]
                              [--variants 512x1:1,...]

A variant is ``THREADSxROWS:STORE``: threads a program, rows a tile, y stored by TMA (1) or from
registers (0). Without ``--variants`` each shape takes :func:`default_variants` of its row width. Row
widths must be powers of two (a descriptor's block is).
"""

from __future__ import annotations

import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = "4096x8192:bf16,16384x8192:bf16,262144x256:bf16,32768x4096:fp32"

@functools.cache
def tma_kernel():
    """The probe's body, as a Triton ``JITFunction`` (built once; interpreted under ``TRITON_INTERPRET=1``)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _tma_rows(XD, W, YD, Y, M, eps, N: tl.constexpr, ROWS: tl.constexpr, STORE: tl.constexpr):
        r0 = tl.program_id(0) * ROWS
        cols = tl.arange(0, N)
        w = tl.load(W + cols)  # issued before the tile's copy waits, so its latency hides behind x's
        x = XD.load([r0, 0]).to(tl.float32)  # rows past M read as zeros
        rstd = tl.rsqrt(tl.sum(x * x, 1) / N + eps)
        w = w.to(tl.float32)
        y = (x * rstd[:, None] * w[None, :]).to(Y.dtype.element_ty)
        if STORE:
            YD.store([r0, 0], y)  # rows past M are not written
        else:
            rows = r0 + tl.arange(0, ROWS)
            tl.store(Y + (rows * N)[:, None] + cols[None, :], y, mask=(rows < M)[:, None])

    return _tma_rows


def parse_variants(text):
    """``[(threads, rows, store), ...]`` of ``--variants``: comma-separated ``THREADSxROWS:STORE``; a bad
    item is an error naming it."""
    import argparse

    out = []
    for item in filter(None, text.split(",")):
        try:
            shape, store = item.split(":")
            threads, rows = (int(v) for v in shape.split("x"))
            if store not in ("0", "1") or threads not in (
                    32, 64, 128, 256, 512, 1024) or rows < 1 or rows & (rows - 1):
                raise ValueError
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item!r}: expected THREADSxROWS:STORE (threads 32-1024 and rows powers of two, STORE 0 "
                f"or 1), e.g. 512x1:1") from None
        out.append((threads, rows, int(store)))
    return out


def default_variants(N):
    """Per row width: tiles of 8, 16 or 32 elements a thread (at least 128 threads, at most 1024), each with
    y stored by TMA and from registers."""
    out = []
    for per_thread in (8, 16, 32):
        tile = max(N, 128 * per_thread)  # short rows: several rows a tile
        threads = min(1024, tile // per_thread)
        rows = tile // N
        out += [(threads, rows, 1), (threads, rows, 0)]
    return out


def describe(v):
    threads, rows, store = v
    return f"tma {threads}t x {rows}r, y by {'TMA' if store else 'registers'}"


def make_fn(v, M, N, eps):
    """``fn(x, w, compiled=False)``: the variant on ``x`` (contiguous ``M x N``) into a new y; the compiled
    kernel instead of y with ``compiled``."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    threads, rows, store = v
    kern = tma_kernel()
    grid = (-(-M // rows),)

    def fn(x, w, compiled=False):
        y = torch.empty_like(x)
        k = kern[grid](TensorDescriptor.from_tensor(x, [rows, N]), w, TensorDescriptor.from_tensor(y, [rows, N]),
                       y, M, eps, N=N, ROWS=rows, STORE=store, num_warps=threads // 32)
        return k if compiled else y

    return fn


def main(argv=None):
    from rmsnorm import EPS, probe_args, variant_probe

    args = probe_args(argv, __doc__, SHAPES, "fat-tma-", more=lambda ap: ap.add_argument(
        "--variants", type=parse_variants, default=[], help="THREADSxROWS:STORE,..."))
    variant_probe(args, "tma_probe.json", default_variants, lambda v, M, N: make_fn(v, M, N, EPS), describe,
                  skip=lambda M, N, ds: "a descriptor's block must be a power of two wide" if N & (N - 1) else None)


if __name__ == "__main__":
    sys.exit(main())
