"""The cluster body (``COOP=3``): one row across a Hopper thread-block cluster, in CuTe DSL.

Triton 3.6 cannot reduce across the CTAs of a cluster, so this body is written in
CuTe DSL (``nvidia-cutlass-dsl``, an optional dependency: ``pip install
flyautotune-rmsnorm[cute]``). A row of ``N`` elements is cut into ``SPLIT``
slices, one per CTA of a cluster of ``SPLIT`` CTAs (``SPLIT`` <= 16; above 8 is
a non-portable cluster size, which CuTe DSL allows on every kernel). Each CTA:

1. sets up one mbarrier in its shared memory and arrives (relaxed) at the
   cluster barrier: its peers may push to it once they have waited there;
2. loads its slice of ``x`` (and of the weight) into registers, in 16-byte
   vectors: the row is read from global memory once;
3. sums its squares: per thread, then per warp (shuffles); after the cluster
   barrier's wait, lane ``r`` of each warp pushes the warp's sum into slot
   ``(rank, warp)`` of CTA ``r``'s shared memory with ``st.async``, which
   completes 4 bytes of CTA ``r``'s mbarrier transaction (``mapa`` gives the
   peer's addresses);
4. waits on its own mbarrier (every warp sum of the cluster has landed), adds
   them up with shuffles, normalizes and stores its slice. No barrier at the
   exit: every write into a CTA's shared memory completes that CTA's
   mbarrier, which it waits on before it leaves.

No global-memory barrier, no workspace, no atomics: the cluster's CTAs are
co-scheduled by the hardware, so any number of rows runs in one launch
(``M * SPLIT`` CTAs on grid axis x).

The body takes rows whose slices are whole tiles: ``N`` a multiple of
``SPLIT * BLOCK_THREADS * VEC`` (``VEC`` elements of 16 bytes) and 16-byte
aligned rows; :class:`~flyautotune_rmsnorm.cluster.ClusterLauncher` sends any
other call to the split-row Triton body, which computes the same rows.

Where a CTA keeps its slice is the config's ``HOLD`` (the launcher's choice of
variant): in registers (``HOLD=1``), or staged in shared memory by ``cp.async``
through L1 (``stage=True, stage_l1=True``: ``HOLD=0``) and read back for the
sum and again for the normalize. On the H200 the staged body leads with many
rows (1024 x 65536 bf16: 3855 GB/s at 4 x 256 threads; the best in registers, 8 x 256,
3712; staged through L2 only, ``cp.async.cg``, it was 3547) and registers lead in
one wave of clusters, so the space offers staging only for many rows.

``late_w=True`` (registers only) loads the weight after pushing the warp sums,
while they travel: it wins when the grid is one wave of clusters (a few rows,
bound by latency) and loses when many rows keep the SMs busy (the launcher
chooses by ``M * SPLIT`` against the SM count; ``bench/cluster_probe.py --late
0,1``). The other keyword variants of :func:`_build` exist for the probe.

Nothing here runs without a GPU, but every binary can be built on a CPU:
:func:`ptx` compiles the body for ``sm_90a`` with no driver (the tests read it).
"""

from __future__ import annotations

import functools
import importlib.util
import operator
import os
import threading
from typing import Any

#: Largest cluster (CTAs per row): 8 is portable, 16 needs the non-portable size CuTe DSL allows.
MAX_CLUSTER = 16
#: Bytes per global access.
VECTOR_BYTES = 16
#: Largest slice staged in one CTA's shared memory (bytes; an H100/H200 SM has 227 KB).
MAX_SLICE_BYTES = 128 * 1024
_DTYPES = {"bf16": "BFloat16", "fp16": "Float16", "fp32": "Float32"}
_lock = threading.Lock()
_compiled: dict = {}


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """True when CuTe DSL (``nvidia-cutlass-dsl``) is installed (looked up once, without importing it)."""
    try:
        return importlib.util.find_spec("cutlass") is not None and importlib.util.find_spec("cutlass.cute") is not None
    except (ImportError, ValueError):
        return False


def version() -> str:
    """The installed ``nvidia-cutlass-dsl`` version, or "" (read from its metadata, no import)."""
    from importlib import metadata

    try:
        return metadata.version("nvidia-cutlass-dsl")
    except metadata.PackageNotFoundError:
        return ""


def takes(N: int, split: int, threads: int, elem: int) -> bool:
    """True when rows of ``N`` elements of ``elem`` bytes cut into ``split`` slices of whole tiles
    (``threads`` threads, one 16-byte vector each per tile)."""
    return (2 <= split <= MAX_CLUSTER and N % (split * threads * (VECTOR_BYTES // elem)) == 0
            and N // split * elem <= MAX_SLICE_BYTES)


def _build(dtype_str: str, w_dtype_str: str, N: int, split: int, threads: int, stage: bool = False,
           late_w: bool = False, minctas: int = 0, stream_x: bool = False, w_after_wait: bool = False,
           stage_l1: bool = False, grid2d: bool = False):
    """The ``cute.jit`` host function and its kernel for one specialization (CuTe DSL imported here).

    Probe variants (``bench/cluster_probe.py``): ``minctas`` asks ptxas for registers that let that many
    CTAs share an SM (0: its own choice); ``stream_x`` reads ``x`` through the read-only path (CuTe's
    ``NO_ALLOCATE`` priority with ``invariant``; 4.4.2 emits a plain ``ld.global.nc``); ``w_after_wait`` loads the weight after the
    mbarrier wait, so only ``x`` is held across it (fewer registers); ``stage_l1`` stages through L1
    (``cp.async.ca``, not ``.cg``); ``grid2d`` launches a ``(rows, SPLIT)`` grid of ``(1, SPLIT)``
    clusters instead of ``rows * SPLIT`` CTAs on one axis."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32, Int32
    from cutlass._mlir.dialects import llvm
    from cutlass.cutlass_dsl import dsl_user_op

    dtype = getattr(cutlass, _DTYPES[dtype_str])
    w_dtype = getattr(cutlass, _DTYPES[w_dtype_str])
    vec = VECTOR_BYTES * 8 // dtype.width
    warps = threads // 32
    tile = threads * vec
    iters = N // (split * tile)  # 16-byte vectors per thread
    slots = split * warps  # warp sums in the cluster
    lanes = -(-slots // 32)  # slots per lane

    @dsl_user_op
    def push(val, smem_ptr, mbar_ptr, rank, *, loc=None, ip=None):
        """``st.async`` of the f32 ``val`` to ``smem_ptr`` in the shared memory of CTA ``rank`` of the
        cluster, completing 4 bytes of the transaction that CTA's mbarrier at ``mbar_ptr`` waits for."""
        llvm.inline_asm(
            None, [smem_ptr.toint(loc=loc, ip=ip).ir_value(), Float32(val).ir_value(loc=loc, ip=ip),
                   mbar_ptr.toint(loc=loc, ip=ip).ir_value(), Int32(rank).ir_value(loc=loc, ip=ip)],
            "{\n\t.reg .b32 dst, bar;\n\tmapa.shared::cluster.u32 dst, $0, $3;\n"
            "\tmapa.shared::cluster.u32 bar, $2, $3;\n"
            "\tst.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [dst], $1, [bar];\n}",
            "r,f,r,r,~{memory}", has_side_effects=True, is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT)

    @cute.kernel
    def body(mX: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, eps: Float32, tiled: cute.TiledCopy,
             staged: cute.TiledCopy, loads: cute.TiledCopy):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        rank = cute.arch.block_idx_in_cluster()
        row = bidx if cutlass.const_expr(grid2d) else bidx // split
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()

        smem = cutlass.utils.SmemAllocator()
        # Every warp sum of the cluster lands here (slot rank * warps + warp), pushed by its owner.
        red = smem.allocate_tensor(Float32, cute.make_layout(slots), byte_alignment=16)
        mbar = smem.allocate_array(cutlass.Int64, num_elems=1)
        if tidx == 0:
            cute.arch.mbarrier_init(mbar, 1)
        cute.arch.mbarrier_init_fence()
        cute.arch.cluster_arrive_relaxed()  # this CTA's mbarrier is ready (waited on before any push)

        thr = tiled.get_slice(tidx)
        # This CTA's slice of its row: (1, iters * tile) elements, partitioned in 16-byte vectors per thread.
        gX = cute.local_tile(mX, (1, iters * tile), (row, rank))
        tXgX = thr.partition_S(gX)
        tXgY = thr.partition_D(cute.local_tile(mY, (1, iters * tile), (row, rank)))
        tXgW = thr.partition_S(cute.local_tile(mW, (1, iters * tile), (0, rank)))
        tXrX = cute.make_fragment_like(tXgX)
        tXrW = cute.make_fragment_like(tXgW)
        if cutlass.const_expr(stage):
            # The slice goes to shared memory by cp.async: no registers held while the loads fly, so more
            # CTAs fit an SM; each thread reads back the vectors it copied (no CTA barrier needed).
            sX = smem.allocate_tensor(dtype, cute.make_layout((1, iters * tile)), byte_alignment=16)
            tXsX = staged.get_slice(tidx).partition_D(sX)
            cute.copy(staged, staged.get_slice(tidx).partition_S(gX), tXsX)
            cute.arch.cp_async_commit_group()
            if cutlass.const_expr(not late_w and not w_after_wait):
                cute.autovec_copy(tXgW, tXrW)
        else:
            cute.copy(loads, tXgX, tXrX)
            if cutlass.const_expr(not late_w and not w_after_wait):
                cute.autovec_copy(tXgW, tXrW)
        if tidx == 0:
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, slots * 4)
        if cutlass.const_expr(stage):
            cute.arch.cp_async_wait_group(0)
            cute.autovec_copy(tXsX, tXrX)

        x = tXrX.load().to(Float32)
        part = cute.arch.warp_reduction((x * x).reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0),
                                        operator.add)
        cute.arch.cluster_wait()  # every peer's mbarrier is initialized
        if lane < split:  # lane r pushes this warp's sum to CTA r
            push(part, red.iterator + (rank * warps + warp), mbar, lane)
        if cutlass.const_expr(late_w and not w_after_wait):
            cute.autovec_copy(tXgW, tXrW)  # the weight (from L2, mostly) while the sums travel
        cute.arch.mbarrier_wait(mbar, 0)
        if cutlass.const_expr(w_after_wait):
            cute.autovec_copy(tXgW, tXrW)
        total = Float32(0.0)
        for j in cutlass.range_constexpr(lanes):
            slot = lane + j * 32
            if slot < slots:
                total = total + red[slot]
        total = cute.arch.warp_reduction(total, operator.add)
        rstd = cute.math.rsqrt(total / N + eps, fastmath=True)
        if cutlass.const_expr(stage):
            cute.autovec_copy(tXsX, tXrX)  # read again rather than held across the wait
            x = tXrX.load().to(Float32)
        y = x * rstd * tXrW.load().to(Float32)
        tXrY = cute.make_fragment_like(tXgY)
        tXrY.store(y.to(dtype))
        cute.copy(tiled, tXrY, tXgY)
        # No barrier at the exit: every write into this CTA's shared memory completed its mbarrier, which
        # it waited on, and a peer exits only after receiving this CTA's pushes.

    @cute.jit
    def host(mX: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, eps: Float32, stream):
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=VECTOR_BYTES * 8)
        tiled = cute.make_tiled_copy_tv(atom, cute.make_layout((1, threads)), cute.make_layout((1, vec)))
        loads = tiled
        if cutlass.const_expr(stream_x):
            ld = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=VECTOR_BYTES * 8,
                                     l1c_evict_priority=cute.nvgpu.CacheEvictionPriority.NO_ALLOCATE, invariant=True)
            loads = cute.make_tiled_copy_tv(ld, cute.make_layout((1, threads)), cute.make_layout((1, vec)))
        mode = cute.nvgpu.cpasync.LoadCacheMode.ALWAYS if stage_l1 else cute.nvgpu.cpasync.LoadCacheMode.GLOBAL
        g2s = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=mode), dtype,
                                  num_bits_per_copy=VECTOR_BYTES * 8)
        staged = cute.make_tiled_copy_tv(g2s, cute.make_layout((1, threads)), cute.make_layout((1, vec)))
        mW2 = cute.make_tensor(mW.iterator, cute.make_layout((1, N)))
        rows = cute.size(mX, mode=[0])
        if cutlass.const_expr(grid2d):
            grid, cluster = [rows, split, 1], [1, split, 1]
        else:
            grid, cluster = [rows * split, 1, 1], [split, 1, 1]
        body(mX, mW2, mY, eps, tiled, staged, loads).launch(grid=grid, block=[threads, 1, 1], cluster=cluster,
                                                            stream=stream, min_blocks_per_mp=minctas)

    return cute, host, dtype, w_dtype, vec


def _compile(spec: tuple, options: str, **kwargs: Any) -> Any:
    """``cute.compile`` of the specialization ``spec`` (``_build``'s arguments) against placeholder
    tensors: ``x``/``y`` with a dynamic row count and row stride (a multiple of the vector, 16-byte
    aligned), the weight of ``N`` contiguous elements; the stream is the caller's current one. ``spec``:
    ``(dtype, w_dtype, N, split, threads, *variant)``, the variant as sorted ``(name, value)`` pairs."""
    from cutlass import Float32

    cute, host, dtype, w_dtype, vec = _build(*spec[:5], **dict(spec[5:]))
    N = spec[2]
    rows = cute.sym_int()
    x, y = (cute.runtime.make_fake_tensor(dtype, (rows, N), stride=(cute.sym_int64(divisibility=vec), 1),
                                          assumed_align=VECTOR_BYTES) for _ in range(2))
    w = cute.runtime.make_fake_tensor(w_dtype, (N,), stride=(1,), assumed_align=VECTOR_BYTES)
    return cute.compile(host, x, w, y, Float32(1e-6), cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True),
                        options=options, **kwargs)


def compiled(dtype_str: str, w_dtype_str: str, N: int, split: int, threads: int, **variant: Any) -> Any:
    """The compiled launch for one specialization (built once per process): ``f(x, w, y, eps)`` with torch
    tensors ``x``, ``y`` of shape ``(M, N)`` and ``w`` of ``(N,)``, on the current CUDA stream.
    ``variant``: ``_build``'s keyword arguments."""
    key = (dtype_str, w_dtype_str, N, split, threads, *sorted(variant.items()))
    fn = _compiled.get(key)
    if fn is None:
        with _lock:
            fn = _compiled.get(key)
            if fn is None:
                fn = _compiled[key] = _compile(key, "--enable-tvm-ffi")
    return fn


def ptx(dtype_str: str, w_dtype_str: str, N: int, split: int, threads: int, dump_dir: str, **variant: Any) -> str:
    """The PTX of one specialization for ``sm_90a``, compiled without a GPU or driver (for tests and
    reports): CuTe DSL writes it under ``dump_dir``, which should be empty."""
    import glob

    _compile((dtype_str, w_dtype_str, N, split, threads, *sorted(variant.items())),
             f"--enable-tvm-ffi --keep-ptx --gpu-arch sm_90a --dump-dir {dump_dir}", no_jit_engine=True)
    files = sorted(glob.glob(os.path.join(dump_dir, "*.ptx")), key=os.path.getmtime)
    if not files:
        raise RuntimeError(f"CuTe DSL wrote no PTX under {dump_dir}")
    with open(files[-1], "rb") as f:
        return f.read().replace(b"\0", b"").decode()
