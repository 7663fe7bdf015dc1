"""Split rows: one row across several programs (CTAs), in two launches.

For a few very long rows one program per row leaves most SMs idle. With
``SPLIT`` programs per row:

1. ``_split_sumsq``: program ``(row, s)`` sums the squares of slice ``s`` of
   ``row`` (``TILES`` tiles of ``BLOCK_N`` elements) into ``P[row, s]`` (fp32);
2. ``_split_normalize``: program ``(row, s)`` adds the row's ``SPLIT`` partial
   sums, then normalizes slice ``s``, re-reading it (from L2 when the rows fit).

Two launches instead of a grid-wide barrier: no atomics or spin-waits, so the
same bodies run under Triton's interpreter (which runs programs one by one)
and never deadlock when the grid is larger than what the GPU holds at once.
Rows go on grid axis 0 (up to 2**31 - 1), slices on axis 1 (at most 128).

``_split_coop`` (``COOP=1``) does both in one launch, for grids the GPU holds
at once (the launcher checks ``M * SPLIT`` against the SM count): each program
keeps its slice in registers, writes its partial sum into its slot of the row,
and polls the row's slots until every one is filled (the last program done
empties them for the next launch), so x is read once and there is no second
launch. It never runs under the interpreter (one program at a time would wait
forever): there the two-launch bodies compute the same result.
"""

from __future__ import annotations

import triton
import triton.language as tl


def _split_sumsq(
    X,
    P,
    sx_vec,  # row stride of X in units of ROW_VEC elements
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TILES: tl.constexpr,  # tiles per slice: a slice is TILES * BLOCK_N elements
    SPLIT: tl.constexpr,  # programs per row (slices that hold at least one element)
    EVEN_N: tl.constexpr,  # N is a multiple of the slice: no masks
    ROW_VEC: tl.constexpr,
    X_KEEP: tl.constexpr,  # L2 policy of this first read (kept for the re-read)
):
    row = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    x_row = X + row * sx_vec * ROW_VEC
    cols = tl.arange(0, BLOCK_N)
    acc = tl.full([BLOCK_N], 0.0, tl.float32)
    for t in range(TILES):
        offs = (s * TILES + t) * BLOCK_N + cols
        if EVEN_N:
            x = tl.load(x_row + offs, eviction_policy=X_KEEP)
        else:
            x = tl.load(x_row + offs, mask=offs < N, other=0.0, eviction_policy=X_KEEP)
        xf = x.to(tl.float32)
        acc += xf * xf
    # tl.reduce with tl.sum's combine: the form the interpreter runs too (see kernel.py).
    tl.store(P + row * SPLIT + s, tl.reduce(acc, 0, tl.standard._sum_combine))


def _split_normalize(
    X,
    W,
    Y,
    P,
    sx_vec,
    sy_vec,
    eps,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TILES: tl.constexpr,
    SPLIT: tl.constexpr,
    SPLIT_POW2: tl.constexpr,  # SPLIT rounded up to a power of two (tl.arange needs one)
    EVEN_N: tl.constexpr,
    ROW_VEC: tl.constexpr,
    X_LAST: tl.constexpr,
    W_POLICY: tl.constexpr,
    Y_POLICY: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    parts = tl.arange(0, SPLIT_POW2)
    p = tl.load(P + row * SPLIT + parts, mask=parts < SPLIT, other=0.0)
    rstd = tl.rsqrt(tl.reduce(p, 0, tl.standard._sum_combine) / N + eps)
    x_row = X + row * sx_vec * ROW_VEC
    y_row = Y + row * sy_vec * ROW_VEC
    cols = tl.arange(0, BLOCK_N)
    # Newest tile first: the re-read hits what L2 kept last.
    for i in range(TILES):
        offs = (s * TILES + TILES - 1 - i) * BLOCK_N + cols
        if EVEN_N:
            x = tl.load(x_row + offs, eviction_policy=X_LAST)
            w = tl.load(W + offs, eviction_policy=W_POLICY)
        else:
            ok = offs < N
            x = tl.load(x_row + offs, mask=ok, other=0.0, eviction_policy=X_LAST)
            w = tl.load(W + offs, mask=ok, other=0.0, eviction_policy=W_POLICY)
        y = (x.to(tl.float32) * rstd * w.to(tl.float32)).to(Y.dtype.element_ty)
        if EVEN_N:
            tl.store(y_row + offs, y, eviction_policy=Y_POLICY)
        else:
            tl.store(y_row + offs, y, mask=offs < N, eviction_policy=Y_POLICY)


def _split_coop(
    X,
    W,
    Y,
    P,  # fp32 [rows, SPLIT_POW2]: each program's partial sum of squares; -1 (empty) between launches
    C,  # int32 [rows]: programs done with the row's sums (0 between launches)
    sx_vec,
    sy_vec,
    eps,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,  # the slice: one program's elements, held in registers
    SPLIT: tl.constexpr,
    SPLIT_POW2: tl.constexpr,
    EVEN_N: tl.constexpr,
    ROW_VEC: tl.constexpr,
    X_LAST: tl.constexpr,
    W_POLICY: tl.constexpr,
    Y_POLICY: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    offs = s * BLOCK_N + tl.arange(0, BLOCK_N)
    x_row = X + row * sx_vec * ROW_VEC
    if EVEN_N:
        x = tl.load(x_row + offs, eviction_policy=X_LAST)
        w = tl.load(W + offs, eviction_policy=W_POLICY)
    else:
        x = tl.load(x_row + offs, mask=offs < N, other=0.0, eviction_policy=X_LAST)
        w = tl.load(W + offs, mask=offs < N, other=0.0, eviction_policy=W_POLICY)
    xf = x.to(tl.float32)
    # The barrier is the sums themselves: a slot holds -1 until its program writes its sum (>= 0),
    # and every program polls the row's slots until none is empty. Only those values cross programs,
    # so relaxed atomics and volatile loads order all that matters, with no fence on the way.
    slots = P + row * SPLIT_POW2
    tl.atomic_xchg(slots + s, tl.reduce(xf * xf, 0, tl.standard._sum_combine), sem="relaxed")
    parts = tl.arange(0, SPLIT_POW2)
    mine = parts < SPLIT
    p = tl.load(slots + parts, mask=mine, other=0.0, volatile=True)
    while tl.min(tl.where(mine, p, 0.0), 0) < 0.0:  # compiled only: tl.min is fine here
        p = tl.load(slots + parts, mask=mine, other=0.0, volatile=True)
    total = tl.reduce(tl.where(mine, p, 0.0), 0, tl.standard._sum_combine)
    y = (xf * tl.rsqrt(total / N + eps) * w.to(tl.float32)).to(Y.dtype.element_ty)
    y_row = Y + row * sy_vec * ROW_VEC
    if EVEN_N:
        tl.store(y_row + offs, y, eviction_policy=Y_POLICY)
    else:
        tl.store(y_row + offs, y, mask=offs < N, eviction_policy=Y_POLICY)
    # The last program done with the sums empties the slots for the next launch.
    if tl.atomic_add(C + row, 1, sem="acq_rel") == SPLIT - 1:
        tl.store(slots + parts, tl.full([SPLIT_POW2], -1.0, tl.float32), mask=mine)
        tl.atomic_xchg(C + row, 0, sem="relaxed")


COOP_CONSTS = ("N", "BLOCK_N", "SPLIT", "SPLIT_POW2", "EVEN_N", "ROW_VEC", "X_LAST", "W_POLICY", "Y_POLICY")
_coop = None


def coop_kernel():
    """The one-launch body (compiled only: see the module's docstring)."""
    global _coop
    if _coop is None:
        _coop = triton.runtime.jit.JITFunction(_split_coop, do_not_specialize=["sx_vec", "sy_vec"])
    return _coop


SUMSQ_CONSTS = ("N", "BLOCK_N", "TILES", "SPLIT", "EVEN_N", "ROW_VEC", "X_KEEP")
NORMALIZE_CONSTS = ("N", "BLOCK_N", "TILES", "SPLIT", "SPLIT_POW2", "EVEN_N", "ROW_VEC", "X_LAST", "W_POLICY",
                    "Y_POLICY")
_built: dict = {}


def kernels(interpret: bool = False) -> tuple:
    """``(sumsq, normalize)``: the two bodies as ``JITFunction`` s, or interpreted (built once)."""
    pair = _built.get(interpret)
    if pair is None:
        if interpret:
            from triton.runtime.interpreter import InterpretedFunction as make
        else:
            make = triton.runtime.jit.JITFunction
        pair = _built[interpret] = (make(_split_sumsq, do_not_specialize=["sx_vec"]),
                                    make(_split_normalize, do_not_specialize=["sx_vec", "sy_vec"]))
    return pair
