"""The Gluon bodies: ``ASYNC=1``, one warp a row with x staged by ``cp.async``; ``ASYNC=2``, one row a
program with its sum met behind a single barrier.

Triton's language lays a ``[rows, columns]`` tile out by itself: for rows of
about a thousand elements it spreads each row over every warp of the program,
so the sum of squares meets in shared memory behind CTA barriers, and it issues
``cp.async`` only for loads inside pipelined loops. This body is written in
Gluon (``triton.experimental.gluon``, the same compiler with explicit layouts):

* a program normalizes ``ROWS`` rows with ``ROWS`` warps, one warp a row, each
  lane holding 16-byte vectors of its row (the x tile's layout
  ``BlockedLayout([1, VEC], [1, 32], [ROWS, 1])``); the weight is loaded in the
  tile's column slice, so it broadcasts over the rows with no conversion;
* x is copied global -> shared with 16-byte ``cp.async`` through L1 (``.ca``, :mod:`.l1_copies`) while
  the weight loads into registers, then read back (each lane its own vectors);
* the sum of squares is a warp's shuffles: no shared-memory reduction; the one
  CTA barrier is the one Triton places after the copies' wait.

On the H200 (``bench/gluon_probe.py``) this is what QuACK runs at 4096 x 1000
bf16, and at that shape it matched QuACK where every Triton config of the space
trailed it; with many rows (16384 x 1000, 65536 x 1024) the Triton body was
faster, so the search decides per shape.

``ASYNC=2`` (:func:`rmsnorm_row`) is for a few long rows (2-16 K elements), where a launch is latency
bound: Triton's ``tl.sum`` over a row spread across warps meets twice in shared memory (each warp's sum,
a barrier, one warp's shuffles over those, a second barrier to hand the total back). This body lays the
row out as ``[warps, columns]`` so each warp sums its own part with shuffles, writes it to shared memory,
and after the one barrier every thread reads all the warps' sums (two 16-byte loads at 8 warps) and adds
them itself. The weight's loads are issued before the barrier (ptxas places them with x's, or among the
first shuffles where registers are scarce).

Row strides are passed in vectors (``SX * VEC`` elements) so the compiler knows
every row starts 16-byte aligned; offsets are 32-bit (the launcher sends larger
launches to the Triton body). Gluon has no interpreter: on a CPU the launcher
runs the Triton body of the same tile, which computes the same rows.
"""

from __future__ import annotations

import functools

from . import l1_copies
from .factory import ELEMENT_SIZE, VECTOR_BYTES, next_pow2

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy as _cp
except ImportError:  # a Triton without Gluon (before 3.4): the space offers no ASYNC config
    gluon = gl = _cp = None

#: The body's constexprs, in its signature's order.
CONST_NAMES = ("N", "BLOCK_N", "ROWS", "VEC")
#: The row body's (``ASYNC=2``).
ROW_CONST_NAMES = ("N", "BLOCK_N", "WARPS", "VEC", "X_POLICY", "W_POLICY", "Y_POLICY")
#: Most elements of x a lane of the row body holds (with as many of the weight, fp32 in registers).
MAX_ROW_PER_LANE = 32
#: Longest padded row the body holds (elements): at 2048 a lane holds 64 elements of x and 64 of the weight
#: (no spills on sm_90, fp32 included); at 4096 ptxas spills.
MAX_BLOCK_N = 2048


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """True when this Triton has the Gluon pieces the body uses (Triton 3.6 to 3.9 were checked)."""
    return gl is not None and all(hasattr(gl, n) for n in ("BlockedLayout", "SliceLayout", "SwizzledSharedLayout",
                                                           "allocate_shared_memory")) and (
        hasattr(_cp, "async_load") or hasattr(_cp, "async_copy_global_to_shared")) and (
        hasattr(gl, "barrier") or hasattr(gl, "thread_barrier"))


if gluon is not None:
    # Triton 3.9 renamed the copy (async_copy_global_to_shared raises there); 3.6 has only the old name.
    _copy = getattr(_cp, "async_load", None) or _cp.async_copy_global_to_shared
    # ... and the CTA barrier (thread_barrier in 3.6, barrier in 3.9).
    _barrier = getattr(gl, "barrier", None) or gl.thread_barrier
    # The row count and strides vary between calls that share a launcher's binary (its cache is keyed by
    # the constexprs): Triton must not specialize them (on 1, or on divisibility by 16), as the Triton
    # body's do not either.
    RUNTIME_INTS = ("M", "SX", "SY")

    @gluon.jit(do_not_specialize=RUNTIME_INTS)
    def rmsnorm_async(X, W, Y, M, SX, SY, eps, N: gl.constexpr, BLOCK_N: gl.constexpr, ROWS: gl.constexpr,
                      VEC: gl.constexpr):
        layout: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [ROWS, 1], [1, 0])
        rows = gl.program_id(0) * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
        col_ok = cols < N
        ok = (rows < M)[:, None] & col_ok[None, :]
        smem = gl.allocate_shared_memory(X.dtype.element_ty, [ROWS, BLOCK_N],
                                         gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
        # through L1 (.ca): Triton 3.9 honours the argument, l1_copies edits the PTX of 3.6-3.8
        _copy(smem, X + ((rows * (SX * VEC))[:, None] + cols[None, :]), mask=ok, cache_modifier=".ca")
        _cp.commit_group()
        w = gl.load(W + cols, mask=col_ok, other=0.0).to(gl.float32)  # while x's copies fly
        _cp.wait_group(0)
        x = smem.load(layout).to(gl.float32)
        rstd = gl.rsqrt(gl.sum(x * x, axis=1) / N + eps)
        y = x * rstd[:, None] * w[None, :]
        gl.store(Y + ((rows * (SY * VEC))[:, None] + cols[None, :]), y.to(Y.dtype.element_ty), mask=ok)

    @gluon.jit(do_not_specialize=RUNTIME_INTS)
    def rmsnorm_row(X, W, Y, M, SX, SY, eps, N: gl.constexpr, BLOCK_N: gl.constexpr, WARPS: gl.constexpr,
                    VEC: gl.constexpr, X_POLICY: gl.constexpr, W_POLICY: gl.constexpr, Y_POLICY: gl.constexpr):
        C: gl.constexpr = BLOCK_N // WARPS  # columns of each warp's part
        layout: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [WARPS, 1], [1, 0])
        row = gl.program_id(0)
        part = gl.arange(0, WARPS, layout=gl.SliceLayout(1, layout))
        cols = (part * C)[:, None] + gl.arange(0, C, layout=gl.SliceLayout(0, layout))[None, :]
        ok = cols < N
        x = gl.load(X + (row * (SX * VEC) + cols), mask=ok, other=0.0, eviction_policy=X_POLICY).to(gl.float32)
        w = gl.load(W + cols, mask=ok, other=0.0, eviction_policy=W_POLICY).to(gl.float32)
        sums = gl.allocate_shared_memory(gl.float32, [WARPS], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        sums.store(gl.sum(x * x, axis=1))  # each warp's own sum: its lanes' shuffles
        _barrier()
        every: gl.constexpr = gl.BlockedLayout([WARPS], [32], [WARPS], [0])  # all the sums in every thread
        rstd = gl.rsqrt(gl.sum(sums.load(every), axis=0) / N + eps)
        gl.store(Y + (row * (SY * VEC) + cols), (x * rstd * w).to(Y.dtype.element_ty), mask=ok,
                 eviction_policy=Y_POLICY)
    l1_copies.install()  # Triton 3.6: before any compile of the body in this process
else:  # pragma: no cover - only without Gluon
    rmsnorm_async = rmsnorm_row = None


def _signature(names: tuple, values: tuple, dtype_str: str, w_dtype_str: str) -> tuple:
    """``(signature, constexprs)`` of a Gluon body: its runtime arguments, then ``names`` bound to
    ``values`` as constexprs."""
    consts = dict(zip(names, values))
    sig = {"X": f"*{dtype_str}", "W": f"*{w_dtype_str or dtype_str}", "Y": f"*{dtype_str}", "M": "i32", "SX": "i32",
           "SY": "i32", "eps": "fp32"}
    sig.update({k: "constexpr" for k in consts})
    return sig, consts


def signature(dtype_str: str, N: int, rows: int, w_dtype_str: str = "") -> tuple:
    """``(signature, constexprs)`` of the body for rows of ``N`` elements of ``dtype_str`` (``bf16``,
    ``fp16``, ``fp32``) and a weight of ``w_dtype_str`` (default: the same), as ``triton.compile`` takes them."""
    return _signature(CONST_NAMES, (N, next_pow2(N), rows, VECTOR_BYTES // ELEMENT_SIZE[dtype_str]), dtype_str,
                      w_dtype_str)


def row_signature(dtype_str: str, N: int, threads: int, policies: tuple = ("", "", ""),
                  w_dtype_str: str = "") -> tuple:
    """``(signature, constexprs)`` of the row body (``ASYNC=2``): rows of ``N`` elements on ``threads``
    threads, ``policies`` the eviction policies of x, the weight and y."""
    return _signature(ROW_CONST_NAMES, (N, next_pow2(N), threads // 32, VECTOR_BYTES // ELEMENT_SIZE[dtype_str],
                                        *policies), dtype_str, w_dtype_str)


def _compile(body, sig: dict, consts: dict, target, num_warps: int):
    """``body`` cross-compiled for ``target`` with every pointer 16-byte aligned: no GPU needed."""
    import triton
    from triton.experimental.gluon._runtime import GluonASTSource

    src = GluonASTSource(body, sig, consts, {(i,): [["tt.divisibility", 16]] for i in range(3)})
    with l1_copies.editing():
        return triton.compile(src, target=target, options={"num_warps": num_warps})


def compile_row_for(target, dtype_str: str, N: int, threads: int, policies: tuple = ("", "", ""),
                    w_dtype_str: str = ""):
    """The row body cross-compiled for ``target`` (as :func:`compile_for`)."""
    return _compile(rmsnorm_row, *row_signature(dtype_str, N, threads, policies, w_dtype_str), target, threads // 32)


def compile_for(target, dtype_str: str, N: int, rows: int, w_dtype_str: str = ""):
    """The body cross-compiled for ``target`` (a Triton ``GPUTarget``) with every pointer 16-byte aligned
    (:func:`signature`'s launch): no GPU needed (tests and reports read ``.asm``)."""
    return _compile(rmsnorm_async, *signature(dtype_str, N, rows, w_dtype_str), target, rows)
