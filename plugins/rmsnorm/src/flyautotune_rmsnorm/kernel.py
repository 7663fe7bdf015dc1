"""The RMSNorm kernel body (Triton) and the factory that specializes it.

One body serves every configuration; the structural knobs are constexprs:

* ``ROWS``: rows per program (several rows amortize the weight load and keep
  enough bytes in flight when a row is short).
* ``NUM_CHUNKS``: 1 holds the whole row in registers (one pass over DRAM);
  more streams the row in ``BLOCK_N``-wide chunks twice — a sum-of-squares
  pass, then a normalize pass that re-reads the row (from L2, newest chunk
  first) — so very long rows do not spill.
* ``REREAD``: the whole row as one chunk, read twice all the same (the
  sum-of-squares pass, then the normalize pass from L1/L2), as Inductor's
  looped reduction does when its block covers the row: nothing is held
  across the reduction, and a pass has the whole row's loads in flight.
* ``X_LAST`` / ``X_KEEP`` / ``W_POLICY`` / ``Y_POLICY``: L2 eviction
  policies ("", "evict_first", "evict_last") of each access.
* ``PREFETCH``: in the first pass of a two-pass row, the next chunk's load is
  issued before the current chunk is summed.
* ``HOLD``: a whole 16-bit row stays in registers in its own dtype while the
  row's sum is reduced (half the registers of the fp32 values the compiler
  would otherwise keep from the sum of squares), so rows up to 64K elements
  are read once at 1024 threads without spilling.
* ``WIDE``: row offsets in 64-bit integers; 0 saves the 64-bit multiplies and
  adds of each row's address where every row offset of the launch fits 32 bits.
* ``PACKED``: both row strides are ``N``: the body multiplies by the constant
  ``N``, not by the runtime strides, so one base address (plus constant offsets)
  serves all of a program's rows and the loads are issued sooner.

  The factory chooses both per launch (:meth:`~.factory.RMSNormLauncher.addressing`:
  latency-bound launches of a few rows keep 64-bit offsets and runtime strides).
* ``ALIGN``: rows whose width is not a multiple of the 16-byte vector (``N``
  odd, say) start at any element; with ``ALIGN`` (elements a vector) each row
  is read as the aligned vectors that hold it and written so where those lie
  wholly inside it (the factory sets it: :meth:`~.factory.RMSNormLauncher.align`).
* ``PDL``: the body is launched with programmatic dependent launch (Hopper+,
  asked for with ``FLYAUTOTUNE_RMSNORM_PDL=1``): it may start before the kernel
  ahead of it on the stream has finished, so it first waits for that kernel's
  memory (``griddepcontrol.wait``) and then lets the kernel behind it launch
  (``griddepcontrol.launch_dependents``); launches and block scheduling overlap
  the neighbours' tails. Not a tuned knob (a search times candidates back to
  back, PDL's best case): the factory sets it with the launch option it needs
  (``factory.pdl_for``).

Compile hints (``num_warps``, ``num_stages``, ``maxnreg`` ...) never appear
here: the backend lowers them into Triton compile options at launch.
"""

from __future__ import annotations

import triton
import triton.language as tl


def _rmsnorm_fwd(
    X,
    W,
    Y,
    M,
    sx_vec,  # row stride of X in units of ROW_VEC elements
    sy_vec,  # row stride of Y in units of ROW_VEC elements
    eps,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    NUM_CHUNKS: tl.constexpr,
    EVEN_N: tl.constexpr,
    EVEN_M: tl.constexpr,
    ROW_VEC: tl.constexpr,
    X_LAST: tl.constexpr,  # L2 eviction policy of the last (or only) read of x
    X_KEEP: tl.constexpr,  # ... of the first read of a two-pass row (kept for the re-read)
    W_POLICY: tl.constexpr,
    Y_POLICY: tl.constexpr,
    PREFETCH: tl.constexpr,  # two-pass rows: load the next chunk before summing this one
    HOLD: tl.constexpr,  # whole 16-bit rows: keep x narrow across the reduction
    WIDE: tl.constexpr,  # 64-bit row offsets (0: every row offset of the launch fits 32 bits)
    PACKED: tl.constexpr,  # both row strides are N: the stride is a compile-time constant
    PDL: tl.constexpr,  # launched with programmatic dependent launch (needs launch_pdl=True)
    ALIGN: tl.constexpr,  # rows off the 16-byte grid, read as the aligned vectors that hold them (elements a vector)
    REREAD: tl.constexpr,  # one chunk (the whole row), read twice
):
    if PDL:
        # Nothing of the kernel ahead is visible before the wait (x, the weight, and y, which it may still
        # read); once every program is past it the kernel behind may launch (it waits the same way).
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    if WIDE:  # M * stride may pass 2**31 elements
        rows_o = rows.to(tl.int64)
    else:
        rows_o = rows
    if PACKED:
        x_row = X + (rows_o * N)[:, None]
        y_row = Y + (rows_o * N)[:, None]
    else:
        x_row = X + (rows_o * sx_vec * ROW_VEC)[:, None]
        y_row = Y + (rows_o * sy_vec * ROW_VEC)[:, None]
    row_ok = (rows < M)[:, None]

    if ALIGN:
        # A whole row whose width is not a multiple of the 16-byte vector: rows start at any element, so
        # element-wise addresses would give one 2- or 4-byte access per element. Each row is read instead
        # as the aligned vectors that hold it (a window from the vector its first element lies in), which
        # never leaves those vectors; elements of the neighbouring rows count as 0. The vectors wholly
        # inside the row are written as vectors, the row's first and last partial vectors element by
        # element. The weight, aligned differently in every row, is read element by element (from L1).
        # H200, graph replay: 6-13 % faster than element-wise access at 32 x 3001, 4096 x 1001 and
        # 16384 x 2999 bf16, 4096 x 1001 fp32 and 1024 x 5001 fp16 (plugins/rmsnorm/NOTES.md).
        if PACKED:
            ox = rows_o * N
            oy = ox
        else:
            ox = rows_o * sx_vec * ROW_VEC
            oy = rows_o * sy_vec * ROW_VEC
        head = ox % ALIGN  # the row's first element in its vector; the launcher checks y's is the same
        bx = tl.multiple_of(ox - head, ALIGN)
        by = tl.multiple_of(oy - head, ALIGN)
        vec0 = (cols // ALIGN) * ALIGN  # each column's vector, in the window
        end = (head + N)[:, None]
        first = head[:, None]
        x = tl.load(X + bx[:, None] + cols[None, :], mask=row_ok & (vec0[None, :] < end), other=0.0,
                    eviction_policy=X_LAST)
        in_row = (cols[None, :] >= first) & (cols[None, :] < end)
        xf = tl.where(in_row, x.to(tl.float32), 0.0)
        w = tl.load(W + (cols[None, :] - first), mask=in_row, other=0.0, eviction_policy=W_POLICY)
        rstd = tl.rsqrt(tl.reduce(xf * xf, 1, tl.standard._sum_combine) / N + eps)
        y = (xf * rstd[:, None] * w.to(tl.float32)).to(Y.dtype.element_ty)
        whole = (vec0[None, :] >= first) & (vec0[None, :] + ALIGN <= end)
        tl.store(Y + by[:, None] + cols[None, :], y, mask=row_ok & whole, eviction_policy=Y_POLICY)
        # The row's first and last vectors alone, recomputed (x from L1) in a tensor of their own: one store
        # an element there, not one predicated store per element of the window (H200: 4-11 % faster at the
        # three bf16 shapes above, 1-2 % slower at the fp32 and fp16 ones).
        e = tl.arange(0, 2 * ALIGN)[None, :]
        last = ((end - 1) // ALIGN) * ALIGN
        pos = tl.where(e < ALIGN, e, last + (e - ALIGN))
        vpos = (pos // ALIGN) * ALIGN
        ok = row_ok & (pos >= first) & (pos < end) & ~((vpos >= first) & (vpos + ALIGN <= end))
        xe = tl.load(X + bx[:, None] + pos, mask=ok, other=0.0).to(tl.float32)
        we = tl.load(W + (pos - first), mask=ok, other=0.0).to(tl.float32)
        tl.store(Y + by[:, None] + pos, (xe * rstd[:, None] * we).to(Y.dtype.element_ty), mask=ok,
                 eviction_policy=Y_POLICY)
    elif NUM_CHUNKS == 1 and not REREAD:
        # Whole row in registers: one read of x, one write of y.
        col_ok = (cols < N)[None, :]
        if EVEN_N:
            if EVEN_M:
                x = tl.load(x_row + cols[None, :], eviction_policy=X_LAST)
            else:
                x = tl.load(x_row + cols[None, :], mask=row_ok, other=0.0, eviction_policy=X_LAST)
            if not HOLD:
                w = tl.load(W + cols, eviction_policy=W_POLICY)
        else:
            x = tl.load(x_row + cols[None, :], mask=row_ok & col_ok, other=0.0, eviction_policy=X_LAST)
            if not HOLD:
                w = tl.load(W + cols, mask=cols < N, other=0.0, eviction_policy=W_POLICY)
        xf = x.to(tl.float32)
        # tl.reduce with tl.sum's own combine: a compiled-mode tl.sum cannot run in the
        # interpreter, and this combine is the one the interpreter sums with numpy.
        rstd = tl.rsqrt(tl.reduce(xf * xf, 1, tl.standard._sum_combine) / N + eps)
        if HOLD:
            # Widen x again from a copy the compiler cannot prove equal (xor with a runtime zero): it
            # then keeps the 16-bit x live across the reduction, not the fp32 values it summed; the
            # weight is loaded after the reduction, so it is not live across it either.
            zero = tl.where(M < 0, 1, 0).to(tl.int16)
            xf = (x.to(tl.int16, bitcast=True) ^ zero).to(x.dtype, bitcast=True).to(tl.float32)
            if EVEN_N:
                w = tl.load(W + cols, eviction_policy=W_POLICY)
            else:
                w = tl.load(W + cols, mask=cols < N, other=0.0, eviction_policy=W_POLICY)
        y = (xf * rstd[:, None] * w.to(tl.float32)[None, :]).to(Y.dtype.element_ty)
        if EVEN_N:
            if EVEN_M:
                tl.store(y_row + cols[None, :], y, eviction_policy=Y_POLICY)
            else:
                tl.store(y_row + cols[None, :], y, mask=row_ok, eviction_policy=Y_POLICY)
        else:
            tl.store(y_row + cols[None, :], y, mask=row_ok & col_ok, eviction_policy=Y_POLICY)
    else:
        # Pass 1: sum of squares, chunk by chunk; keep x in L2 for pass 2.
        acc = tl.full([ROWS, BLOCK_N], 0.0, tl.float32)
        if PREFETCH:
            # Software pipelining: chunk c+1 is in flight while chunk c is summed,
            # twice the bytes in flight per thread for a few more registers.
            if EVEN_N and EVEN_M:
                nxt = tl.load(x_row + cols[None, :], eviction_policy=X_KEEP)
            else:
                nxt = tl.load(x_row + cols[None, :], mask=row_ok & (cols < N)[None, :], other=0.0,
                              eviction_policy=X_KEEP)
            for c in range(NUM_CHUNKS):
                x = nxt
                offs = (c + 1) * BLOCK_N + cols
                nxt = tl.load(x_row + offs[None, :], mask=row_ok & (offs < N)[None, :], other=0.0,
                              eviction_policy=X_KEEP)
                xf = x.to(tl.float32)
                acc += xf * xf
        else:
            for c in range(NUM_CHUNKS):
                offs = c * BLOCK_N + cols
                if EVEN_N and EVEN_M:
                    x = tl.load(x_row + offs[None, :], eviction_policy=X_KEEP)
                else:
                    x = tl.load(x_row + offs[None, :], mask=row_ok & (offs < N)[None, :], other=0.0,
                                eviction_policy=X_KEEP)
                xf = x.to(tl.float32)
                acc += xf * xf
        rstd = tl.rsqrt(tl.reduce(acc, 1, tl.standard._sum_combine) / N + eps)
        # Pass 2: newest chunk first, so the re-read hits what L2 kept last.
        for i in range(NUM_CHUNKS):
            offs = (NUM_CHUNKS - 1 - i) * BLOCK_N + cols
            if EVEN_N and EVEN_M:
                x = tl.load(x_row + offs[None, :], eviction_policy=X_LAST)
                w = tl.load(W + offs, eviction_policy=W_POLICY)
            else:
                ok = row_ok & (offs < N)[None, :]
                x = tl.load(x_row + offs[None, :], mask=ok, other=0.0, eviction_policy=X_LAST)
                w = tl.load(W + offs, mask=offs < N, other=0.0, eviction_policy=W_POLICY)
            y = (x.to(tl.float32) * rstd[:, None] * w.to(tl.float32)[None, :]).to(Y.dtype.element_ty)
            if EVEN_N and EVEN_M:
                tl.store(y_row + offs[None, :], y, eviction_policy=Y_POLICY)
            else:
                tl.store(y_row + offs[None, :], y, mask=row_ok & (offs < N)[None, :], eviction_policy=Y_POLICY)


# The same body, compiled for GPUs and interpreted on CPU tensors.
_JIT_ARGS = dict(do_not_specialize=["M", "sx_vec", "sy_vec"])
_jit_kernel = None
_interp_kernel = None


def jit_kernel():
    """The Triton ``JITFunction`` of the body (built once)."""
    global _jit_kernel
    if _jit_kernel is None:
        _jit_kernel = triton.runtime.jit.JITFunction(_rmsnorm_fwd, **_JIT_ARGS)
    return _jit_kernel


def import_gluon_before_interpreting() -> None:
    """Import Gluon (``triton.experimental.gluon``) now, before the process's first interpreted launch.

    Triton 3.9 imports Gluon on first use, from inside the argument specialization of a launch; an
    interpreted launch runs with ``triton.language``'s functions swapped for the interpreter's, so a Gluon
    imported there keeps those (``gl.rsqrt``, ...) for the rest of the process, and every later compile
    of a Gluon body (the ``ASYNC`` ones, :mod:`.kernel_async`: a report's cross-compile) fails with
    "Did you forget to add @triton.gluon.jit ?". Imported before, Gluon keeps Triton's own functions."""
    try:
        import triton.experimental.gluon  # noqa: F401
    except ImportError:  # a Triton without Gluon (before 3.4): no Gluon body to protect
        pass


def interpreted_kernel():
    """The body under Triton's interpreter (CPU tensors; built once)."""
    global _interp_kernel
    if _interp_kernel is None:
        from triton.runtime.interpreter import InterpretedFunction

        import_gluon_before_interpreting()
        _interp_kernel = InterpretedFunction(_rmsnorm_fwd, **_JIT_ARGS)
    return _interp_kernel
