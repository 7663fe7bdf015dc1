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
keeps its slice in registers, writes its partial sum into its slot of the row
and waits for the row's other programs on one count per row in global memory:
a sense-reversing barrier (the arrival is released after a CTA barrier;
program 0 adds ``2**31 - (SPLIT - 1)``, the others 1, so the top bit flips when
the last one arrives and the low bits are back to 0; every thread polls with
plain acquire loads until the bit flips; nothing resets the count), so x is
read once and there is no second launch. It never runs under the interpreter (one
program at a time would wait forever): there the two-launch bodies compute the
same result.

``_split_persist`` (``COOP=2``) takes any number of rows: a grid of resident
programs in groups of ``SPLIT`` loops over them, one count per trip in global
memory (release after a CTA barrier, acquire polls by one thread shared
through shared memory, so the whole CTA leaves the wait at once). Under the
interpreter it runs with groups of one program, which never wait on another.
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
    fill = None if EVEN_N else 0.0  # no masks (and so no fill value) when N is a multiple of the slice
    for t in range(TILES):
        offs = (s * TILES + t) * BLOCK_N + cols
        x = tl.load(x_row + offs, mask=None if EVEN_N else offs < N, other=fill, eviction_policy=X_KEEP)
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
    fill = None if EVEN_N else 0.0  # no masks (and so no fill value) when N is a multiple of the slice
    # Newest tile first: the re-read hits what L2 kept last.
    for i in range(TILES):
        offs = (s * TILES + TILES - 1 - i) * BLOCK_N + cols
        ok = None if EVEN_N else offs < N
        x = tl.load(x_row + offs, mask=ok, other=fill, eviction_policy=X_LAST)
        w = tl.load(W + offs, mask=ok, other=fill, eviction_policy=W_POLICY)
        y = (x.to(tl.float32) * rstd * w.to(tl.float32)).to(Y.dtype.element_ty)
        tl.store(y_row + offs, y, mask=ok, eviction_policy=Y_POLICY)


def _split_coop(
    X,
    W,
    Y,
    P,  # fp32 [rows, SPLIT_POW2]: each program's partial sum of squares (any values between launches)
    C,  # int32 [rows]: the row's sense-reversing count (low 31 bits 0 between launches, the top bit flips each)
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
    # The SPLIT programs of a row meet once, on the row's count. Each writes its partial sum into its slot,
    # then (after a CTA barrier, with release semantics) arrives; every thread polls the count with acquire
    # loads until the barrier opens. The slots need no "empty" value: the count says when they are full, and
    # the next launch writes them only after this one has finished. H200, 1 x 262144 bf16 at SPLIT 128,
    # flushed graph replay: 3.25 us, against 4.33 for the body before it, where one thread polled with atomic
    # adds of 0 (read-modify-writes that queue behind the arrivals at the same address) and the last program
    # out reset the count (plugins/rmsnorm/NOTES.md).
    row = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    offs = s * BLOCK_N + tl.arange(0, BLOCK_N)
    x_row = X + row * sx_vec * ROW_VEC
    ok = None if EVEN_N else offs < N  # no masks (and so no fill value) when N is a multiple of the slice
    fill = None if EVEN_N else 0.0
    x = tl.load(x_row + offs, mask=ok, other=fill, eviction_policy=X_LAST)
    w = tl.load(W + offs, mask=ok, other=fill, eviction_policy=W_POLICY)
    xf = x.to(tl.float32)
    slots = P + row * SPLIT_POW2
    count = C + row
    tl.store(slots + s, tl.reduce(xf * xf, 0, tl.standard._sum_combine))
    tl.debug_barrier()  # the sum is written before the arrival is released
    # A sense-reversing arrival: program 0 adds 2**31 - (SPLIT - 1), the others 1, so the count's top bit
    # flips when the last of the row arrives and its low bits are back to 0: no reset, no departure count.
    old = tl.atomic_add(count, tl.where(s == 0, 2**31 - (SPLIT - 1), 1), sem="release")
    # Every thread polls with plain acquire loads (no read-modify-write queueing behind the arrivals) until
    # the top bit differs from the one it arrived on; no CTA barrier inside the loop, one after it.
    while (_load_acquire(count) ^ old) >= 0:
        pass
    tl.debug_barrier()
    parts = tl.arange(0, SPLIT_POW2)
    mine = parts < SPLIT
    p = tl.load(slots + parts, mask=mine, other=0.0, volatile=True)
    total = tl.reduce(tl.where(mine, p, 0.0), 0, tl.standard._sum_combine)
    y = (xf * tl.rsqrt(total / N + eps) * w.to(tl.float32)).to(Y.dtype.element_ty)
    tl.store(Y + row * sy_vec * ROW_VEC + offs, y, mask=ok, eviction_policy=Y_POLICY)


@triton.jit
def _load_acquire(ptr):
    """The int32 at ``ptr``, loaded with acquire semantics at GPU scope (``ld.acquire``: Triton 3.6 has no
    atomic load, and an atomic add of 0 is a read-modify-write that queues behind the arrivals)."""
    return tl.inline_asm_elementwise("ld.global.acquire.gpu.b32 $0, [$1];", "=r,l", [ptr], dtype=tl.int32,
                                     is_pure=False, pack=1)


def _split_persist(
    X,
    W,
    Y,
    P,  # fp32 [groups, 2, ROWS, SPLIT_POW2]: the partial sums of a trip, in two buffers used in turn
    D,  # int32 [groups, 2]: programs of the group arrived (every trip) and done; 0 between launches
    M,
    sx_vec,
    sy_vec,
    eps,
    R,  # row groups in the grid: the grid is R * SPLIT programs, all resident at once
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,  # the slice: one program's elements of a row, held in registers
    SPLIT: tl.constexpr,
    SPLIT_POW2: tl.constexpr,
    ROWS: tl.constexpr,  # rows per trip: one barrier for all of them
    EVEN_N: tl.constexpr,
    ROW_VEC: tl.constexpr,
    X_LAST: tl.constexpr,
    W_POLICY: tl.constexpr,
    Y_POLICY: tl.constexpr,
):
    # Program (g, s) normalizes slice s of row blocks g, g + R, g + 2R, ... (ROWS rows each): the SPLIT
    # programs of group g meet once per trip. Each writes its partial sums, then (after a CTA barrier,
    # with release semantics) adds one to the group's arrival count; one thread polls the count (acquire)
    # and the CTA reads the sums once it reaches SPLIT * trips, so the wait is one uniform loop. Sums
    # alternate between two buffers: a program writes a buffer again only after every program of its
    # group has arrived at the trip in between, so after each has read the buffer's previous sums. The
    # next block's slice is loaded before the wait, so the wait overlaps that read.
    pid = tl.program_id(0)
    g = pid // SPLIT
    s = pid % SPLIT
    cols = s * BLOCK_N + tl.arange(0, BLOCK_N)
    r_in = tl.arange(0, ROWS)
    parts = tl.arange(0, SPLIT_POW2)
    mine = tl.broadcast_to((parts < SPLIT)[None, :], [ROWS, SPLIT_POW2])
    word = r_in[:, None] * SPLIT_POW2 + parts[None, :]
    slots = P + g * (2 * ROWS * SPLIT_POW2)
    arrived = D + 2 * g
    trips = ((M + ROWS - 1) // ROWS - g + R - 1) // R
    rows = g * ROWS + r_in
    xm = (rows < M)[:, None] & (cols < N)[None, :]
    x_next = tl.load(X + rows.to(tl.int64)[:, None] * sx_vec * ROW_VEC + cols[None, :], mask=xm, other=0.0,
                     eviction_policy=X_LAST)
    it = tl.full([], 0, tl.int32)
    while it < trips:  # (not range(trips): Triton 3.6's interpreter cannot take a runtime bound there)
        x = x_next
        rows = (g + it * R) * ROWS + r_in
        xf = x.to(tl.float32)
        part = tl.reduce(xf * xf, 1, tl.standard._sum_combine)
        buf = slots + (it % 2) * (ROWS * SPLIT_POW2)
        tl.store(buf + r_in * SPLIT_POW2 + s, part)
        tl.debug_barrier()  # every thread's sums are written before the arrival is released
        tl.atomic_add(arrived, 1, sem="release")
        nxt = rows + R * ROWS
        xm = (nxt < tl.where(it + 1 < trips, M, 0))[:, None] & (cols < N)[None, :]  # none after the last trip
        x_next = tl.load(X + nxt.to(tl.int64)[:, None] * sx_vec * ROW_VEC + cols[None, :], mask=xm, other=0.0,
                         eviction_policy=X_LAST)
        # The weight's slice is read again each trip (from L2): held across trips it costs the registers
        # that keep 1024-thread programs from spilling.
        w = tl.load(W + cols, mask=None if EVEN_N else cols < N, other=None if EVEN_N else 0.0,
                    eviction_policy=W_POLICY)
        target = (it + 1) * SPLIT
        while tl.atomic_add(arrived, 0, sem="acquire") < target:  # one thread, broadcast: a uniform loop
            pass
        sums = tl.load(buf + word, mask=mine, other=0.0, volatile=True)
        total = tl.reduce(tl.where(mine, sums, 0.0), 1, tl.standard._sum_combine)
        y = (xf * tl.rsqrt(total / N + eps)[:, None] * w.to(tl.float32)[None, :]).to(Y.dtype.element_ty)
        ym = (rows < M)[:, None] & (cols < N)[None, :]
        tl.store(Y + rows.to(tl.int64)[:, None] * sy_vec * ROW_VEC + cols[None, :], y, mask=ym,
                 eviction_policy=Y_POLICY)
        it += 1
    # The group's last program out resets both counts for the next launch (every program of the group has
    # left its last wait by then).
    if tl.atomic_add(arrived + 1, 1, sem="acq_rel") == SPLIT - 1:
        tl.atomic_xchg(arrived, 0, sem="relaxed")
        tl.atomic_xchg(arrived + 1, 0, sem="relaxed")


COOP_CONSTS = ("N", "BLOCK_N", "SPLIT", "SPLIT_POW2", "EVEN_N", "ROW_VEC", "X_LAST", "W_POLICY", "Y_POLICY")
PERSIST_CONSTS = ("N", "BLOCK_N", "SPLIT", "SPLIT_POW2", "ROWS", "EVEN_N", "ROW_VEC", "X_LAST", "W_POLICY",
                  "Y_POLICY")
_coop = None
_persist = None


def persist_kernel():
    """The persistent one-launch body (``COOP=2``; compiled only, like ``coop_kernel``)."""
    global _persist
    if _persist is None:
        _persist = triton.runtime.jit.JITFunction(_split_persist, do_not_specialize=["M", "sx_vec", "sy_vec", "R"])
    return _persist


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

            from .kernel import import_gluon_before_interpreting

            import_gluon_before_interpreting()
        else:
            make = triton.runtime.jit.JITFunction
        pair = _built[interpret] = (make(_split_sumsq, do_not_specialize=["sx_vec"]),
                                    make(_split_normalize, do_not_specialize=["sx_vec", "sy_vec"]))
    return pair
