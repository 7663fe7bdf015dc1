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

A second body keeps several tiles in flight per program: persistent programs (a number a streaming
multiprocessor) walk the row tiles in a ``tl.range`` loop with ``num_stages``, which Triton's pipeliner turns
into a ring of ``STAGES - 1`` shared-memory buffers, each filled by TMA ahead of the tile being reduced. The
persistent programs of ``persist_rows_probe.py`` lost because a program that walks tiles keeps fewer bytes
in flight than fresh programs do; the ring is what could give them back. (On an H100 it did not: every
pipelined variant lost by 4.6-15 %, ``docs/benchmarks.md``, 2026-12-06.)

    python bench/tma_probe.py --out DIR [--shapes 4096x8192:bf16,...] [--rounds 3]
                              [--variants 512x1:1,512x1:0:3x4,...]

A variant is ``THREADSxROWS:STORE`` (one tile a program) or ``THREADSxROWS:STORE:STAGESxPERSM`` (the
pipelined body, PERSM programs an SM): threads a program, rows a tile, y stored by TMA (1) or from registers
(0). Without ``--variants`` each shape takes :func:`default_variants` of its row width. Row widths must be
powers of two (a descriptor's block is).
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


@functools.cache
def tma_pipe_kernel():
    """The pipelined body: persistent programs walk the row tiles, ``STAGES - 1`` tiles copied ahead by TMA."""
    import triton
    import triton.language as tl

    @triton.jit
    def _tma_rows_pipe(XD, W, YD, Y, M, tiles, programs, eps, N: tl.constexpr, ROWS: tl.constexpr,
                       STORE: tl.constexpr, STAGES: tl.constexpr):
        cols = tl.arange(0, N)
        w = tl.load(W + cols).to(tl.float32)  # once a program, held in registers across its tiles
        # The same trip count for every program: a program's last tile may lie past M, where TMA reads zeros
        # and writes nothing. (Interpreting a loop with runtime bounds needs NumPy < 2.4 under Triton 3.6:
        # triton-lang/triton#9171, fixed after 3.6.)
        for t in tl.range(0, tiles, programs, num_stages=STAGES):
            r0 = (t + tl.program_id(0)) * ROWS
            x = XD.load([r0, 0]).to(tl.float32)
            rstd = tl.rsqrt(tl.sum(x * x, 1) / N + eps)
            y = (x * rstd[:, None] * w[None, :]).to(Y.dtype.element_ty)
            if STORE:
                YD.store([r0, 0], y)
            else:
                rows = r0 + tl.arange(0, ROWS)
                tl.store(Y + (rows * N)[:, None] + cols[None, :], y, mask=(rows < M)[:, None])

    return _tma_rows_pipe


def parse_variants(text):
    """``[(threads, rows, store, stages, per_sm), ...]`` of ``--variants``: comma-separated
    ``THREADSxROWS:STORE[:STAGESxPERSM]`` (stages and per_sm 0 for the one-tile body); a bad item is an error
    naming it."""
    import argparse

    out = []
    for item in filter(None, text.split(",")):
        try:
            shape, store, *pipe = item.split(":")
            threads, rows = (int(v) for v in shape.split("x"))
            stages, per_sm = (int(v) for v in pipe[0].split("x")) if pipe else (0, 0)
            if store not in ("0", "1") or threads not in (
                    32, 64, 128, 256, 512, 1024) or rows < 1 or rows & (rows - 1) or len(pipe) > 1 or (
                    pipe and (stages < 2 or per_sm < 1)):
                raise ValueError
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item!r}: expected THREADSxROWS:STORE or THREADSxROWS:STORE:STAGESxPERSM (threads 32-1024 "
                f"and rows powers of two, STORE 0 or 1, STAGES >= 2, PERSM >= 1), e.g. 512x1:1 or 512x1:0:3x4"
            ) from None
        out.append((threads, rows, int(store), stages, per_sm))
    return out


#: What a Hopper streaming multiprocessor gives its resident programs: threads, 32-bit registers, and shared
#: memory (228 KB, of which each program's share reserves 1 KB more).
THREADS_PER_SM, REGS_PER_SM, SMEM_PER_SM = 2048, 65536, 228 * 1024


def default_variants(N, ds="bf16"):
    """Per row width: tiles of 8, 16 or 32 elements a thread (at least 128 threads, at most 1024), each with
    y stored by TMA and from registers; then the pipelined body at 8 and 16 elements a thread, y from
    registers, with 3, 4 and 6 stages, and as many programs an SM as 2048 threads and the ring's shared
    memory allow (fewer if the compiled body's registers say so: :func:`resident`)."""
    from rmsnorm import ELEM_BYTES

    one_tile, pipelined = [], []
    for per_thread in (8, 16, 32):
        tile = max(N, 128 * per_thread)  # short rows: several rows a tile
        threads = min(1024, tile // per_thread)
        rows = tile // N
        one_tile += [(threads, rows, 1, 0, 0), (threads, rows, 0, 0, 0)]
        for stages in (3, 4, 6) if per_thread < 32 else ():
            ring = (stages - 1) * tile * ELEM_BYTES[ds] + 1024
            per_sm = min(THREADS_PER_SM // threads, SMEM_PER_SM // ring)
            if per_sm:
                pipelined.append((threads, rows, 0, stages, per_sm))
    return one_tile + pipelined


def resident(kernel, threads):
    """Programs of a compiled body one SM holds at once: the least of what its threads, its registers
    (allocated in steps of 8 a thread) and its shared memory allow."""
    kernel._init_handles()  # a warmup's kernel reads its registers when loaded, not when compiled
    regs = -(-max(kernel.n_regs, 1) // 8) * 8
    return min(THREADS_PER_SM // threads, REGS_PER_SM // (regs * threads),
               SMEM_PER_SM // (kernel.metadata.shared + 1024))


def describe(v):
    threads, rows, store, stages, per_sm = v
    pipe = f", {stages} stages x {per_sm} an SM" if stages else ""
    return f"tma {threads}t x {rows}r{pipe}, y by {'TMA' if store else 'registers'}"


def make_fn(v, M, N, eps):
    """``fn(x, w, compiled=False)``: the variant on ``x`` (contiguous ``M x N``) into a new y; the compiled
    kernel instead of y with ``compiled``."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    threads, rows, store, stages, per_sm = v
    tiles = -(-M // rows)
    programs = []  # the pipelined body's grid, fixed by its first call

    def fn(x, w, compiled=False):
        y = torch.empty_like(x)
        xd, yd = TensorDescriptor.from_tensor(x, [rows, N]), TensorDescriptor.from_tensor(y, [rows, N])
        if stages:
            kern = tma_pipe_kernel()
            consts = dict(N=N, ROWS=rows, STORE=store, STAGES=stages, num_warps=threads // 32)
            if not programs:  # PERSM programs an SM, or as many as fit (a CPU, interpreting, counts as 4 SMs)
                fit = per_sm
                if x.is_cuda:
                    fit = min(per_sm, resident(kern.warmup(xd, w, yd, y, M, tiles, 1, eps, grid=(1,), **consts),
                                               threads))
                    print(f"{describe(v)}: {fit} an SM resident", flush=True)
                sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
                programs.append(min(tiles, sms * max(fit, 1)))
            k = kern[(programs[0],)](xd, w, yd, y, M, tiles, programs[0], eps, **consts)
        else:
            k = tma_kernel()[(tiles,)](xd, w, yd, y, M, eps, N=N, ROWS=rows, STORE=store, num_warps=threads // 32)
        return k if compiled else y

    return fn


def main(argv=None):
    from rmsnorm import EPS, probe_args, variant_probe

    args = probe_args(argv, __doc__, SHAPES, "fat-tma-", more=lambda ap: ap.add_argument(
        "--variants", type=parse_variants, default=[], help="THREADSxROWS:STORE[:STAGESxPERSM],..."))
    variant_probe(args, "tma_probe.json", default_variants, lambda v, M, N: make_fn(v, M, N, EPS), describe,
                  skip=lambda M, N, ds: "a descriptor's block must be a power of two wide" if N & (N - 1) else None)


if __name__ == "__main__":
    sys.exit(main())
