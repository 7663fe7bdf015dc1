"""Config space and zero-search default of the RMSNorm adopter.

Knobs (structural kwargs the factory consumes):

* ``BLOCK_THREADS``: threads per program (num_warps = BLOCK_THREADS / warp size).
* ``ROWS_PER_PROGRAM``: rows one program normalizes (short rows).
* ``CHUNK``: 0 keeps the whole row in registers; a power of two streams the
  row in chunks, two passes (rows too long for registers); the padded row
  or more: the whole row as one chunk, read twice (as torch.compile does).
* ``CACHE_POLICY``: the L2 eviction policies of the accesses (see
  ``factory.CACHE_POLICIES``).
* ``PREFETCH``: two-pass rows load the next chunk before summing this one.
* ``SPLIT``: programs one row is split across (two launches: partial sums,
  then normalize); for a few very long rows that would leave SMs idle.
* ``VEC``: the widest access per thread in bytes (16, 8, 4): narrower
  accesses spread a short row over more threads.
* ``COOP``: with ``SPLIT``, one launch instead of two: the row's programs
  meet at a barrier in global memory. ``1``: a grid of ``M * SPLIT`` programs
  (CUDA, when every program of the grid is resident at once: at most one per
  SM); ``2``: as many programs as the GPU holds at once, each group of
  ``SPLIT`` looping over rows, so many long rows are each read once. ``2`` is
  not in the CUDA space: on the H200 its barrier per trip (a release, an
  acquire poll, through L2) kept it at 1200-2750 GB/s where one program per row
  streams 3500-4100 (``bench/long_rows.py``, docs/benchmarks.md);
  :func:`persist_configs` lists the configs the bench measures.
  ``3``: a Hopper thread-block cluster of ``SPLIT`` CTAs per row, reducing
  through distributed shared memory (a CuTe DSL body, ``kernel_cluster.py``;
  offered where ``nvidia-cutlass-dsl`` is installed, for rows of 16 K
  elements and more that it takes whole; :func:`cluster_configs`). With
  ``COOP=3``, ``HOLD`` says where a CTA keeps its slice: 1 registers, 0 shared
  memory (staged through L1).
* ``ASYNC``: ``1`` runs the asynchronous-copy body (``kernel_async.py``, in Gluon): one warp a row, x
  staged in shared memory by ``cp.async`` while the weight loads; offered for rows of 513-2048 elements
  (:func:`async_configs`). ``2`` runs the Gluon row body: one row a program whose sum meets behind one
  barrier instead of Triton's two, the weight's loads issued before it; offered for a few rows of 2-16 K elements
  (:func:`row_configs`). A winner stored before the knob existed (no ``ASYNC``) is taken as ``ASYNC=0``.
* ``HOLD``: a whole 16-bit row held in registers in its own dtype across the
  reduction: rows of 16K-64K elements read once at 1024 threads without spills.
  Not in the CUDA space: on the H200 it lost to two-pass chunks on every long-row
  shape measured (``bench/long_rows.py``, docs/benchmarks.md).

Every config a space offers is one the factory builds (a test checks it).

Occupancy hints come on top: ``maxnreg`` on CUDA is not needed by this body
(it never spills in the space below); ``waves_per_eu`` on ROCm.
"""

from __future__ import annotations

from typing import Optional

import flyautotune as fat

# FEW_ROWS: fewer rows than this are latency-bound: one pass (the factory's row addressing follows it too).
from .factory import ELEMENT_SIZE, FEW_ROWS, SPLIT_CHOICES, VECTOR_BYTES, next_pow2, window_fits

KNOBS = ("BLOCK_THREADS", "ROWS_PER_PROGRAM", "CHUNK", "CACHE_POLICY", "PREFETCH", "SPLIT", "VEC", "COOP", "HOLD",
         "ASYNC")
#: Rows of at most this many elements take the short-row space (:func:`short_row_space`): rows per program,
#: warps and access width.
SMALL_N = 512
#: Threads of one warp (CUDA) or wavefront (ROCm's CDNA GPUs, gfx90a-gfx950): the fewest a program of short
#: rows gets, since ``num_warps = BLOCK_THREADS // warp size`` (at least 1) rounds fewer up to one of these.
WAVEFRONT = {"cuda": 32, "rocm": 64}
#: Longest padded row held in registers (32 fp32 values per thread at 1024 threads).
MAX_REGISTER_ROW = 32768


#: Programs per SM worth filling when rows are split (two are resident at 1024 threads on Hopper).
SPLIT_PROGRAMS = 2 * 132
#: Shortest slice worth a program of its own (elements).
MIN_SLICE = 1024
#: SMs of the GPUs the CUDA space is fitted to (H100/H200): a cooperative split needs a program per SM at most.
COOP_PROGRAMS = 132
#: Longest slice a cooperative program holds in registers (elements).
MAX_COOP_SLICE = 8192
#: Longest slice the default's one-launch split takes (:func:`coop_split`; 8192 measured slower there).
DEFAULT_MAX_SLICE = 4096
#: Rows at least this long (padded) are where the persistent split (``COOP=2``) could pay: one program
#: per row streams it twice, a split row is read once.
PERSIST_MIN_N = 32768
#: Shortest row the cluster body (``COOP=3``) is offered for: shorter rows fit one CTA's registers.
CLUSTER_MIN_N = 16384
#: Elements per thread of the cluster body's candidates (4-16 vectors of 16 bytes in registers).
CLUSTER_PER_THREAD = (32, 64)
#: Rows at least this long also try 16 CTAs a row (a non-portable cluster): on the H200 they beat 8 at
#: 4 x 131072 (726 against 666 GB/s) and 1 x 262144 (422 against 324). Shorter rows try 16 CTAs when the
#: clusters fit the SMs at once (``M * 16 <= FEW_CLUSTERS``): 1 x 65536 160 against 153 at 8 CTAs,
#: 4 x 65536 440 against 425.
CLUSTER_16_MIN_N = 131072
#: At most this many CTAs (``M * SPLIT``) is "a few rows" for the cluster body's candidates: below the SM
#: count of every Hopper part, so the clusters run in one wave (where the slice in registers leads).
FEW_CLUSTERS = 64


def _cfg(bt: int, rows: int = 1, chunk: int = 0, policy: int = 1, prefetch: int = 0, split: int = 1,
         vec: int = 16, coop: int = 0, hold: int = 0, async_: int = 0, **hints) -> fat.Config:
    return fat.Config(BLOCK_THREADS=bt, ROWS_PER_PROGRAM=rows, CHUNK=chunk, CACHE_POLICY=policy,
                      PREFETCH=prefetch, SPLIT=split, VEC=vec, COOP=coop, HOLD=hold, ASYNC=async_, **hints)


def _unique(configs: list) -> list:
    out = []
    for c in configs:
        if c not in out:
            out.append(c)
    return out


def short_row_space(N: int, dtype_str: str, warp: int = 32) -> list:
    """Rows of at most 512 elements: rows per program x warps x access width, 4-32 elements per thread.

    Short rows are many: what matters is bytes in flight per program and how many
    threads a row keeps busy, so the knobs trade rows per program against
    16- or 8-byte accesses at 1-8 warps. ``warp`` is the target's warp (wavefront) size: a tile sized for
    fewer threads is named by the threads that run it (``num_warps`` rounds up to one 64-lane wavefront on
    ROCm, so a 32-thread program builds the binary of its 64-thread twin, which is offered once), and a
    tile whose lanes hold fewer bytes than one access is not offered with that access width.
    """
    npad = next_pow2(N)
    elem = ELEMENT_SIZE[dtype_str]
    out = [small_config(N, dtype_str, warp)]
    tiny = npad < 16 // elem  # rows shorter than one vector: only rows per program matter
    if tiny:
        out += [_cfg(max(32, warp), 32, policy=0), _cfg(max(64, warp), 64, policy=0)]
    for vec in (16, 8):
        v = max(1, vec // elem)
        for per_thread in ((v, 2 * v) if vec == 16 else (v,)):
            for bt in (32, 64, 128, 256):
                rows, lanes = per_thread * bt // npad, max(bt, warp)
                # a lane must hold a whole access: fewer bytes would only relabel an 8-byte config
                if 1 <= rows <= 64 and rows * npad == per_thread * bt and rows * npad * elem >= vec * lanes:
                    out.append(_cfg(lanes, rows, policy=0, vec=vec))
    if tiny:  # a row within one access: the access width builds no other binary (sm_90 and gfx942)
        first = {}
        for c in out:
            first.setdefault((c.kwargs["BLOCK_THREADS"], c.kwargs["ROWS_PER_PROGRAM"]), c)
        out = list(first.values())
    return _unique(out)


def _coop_cfg(npad: int, split: int) -> fat.Config:
    """The one-launch split (``COOP=1``) of a padded row in ``split`` slices, 16 elements of a slice a thread."""
    return _cfg(min(1024, max(64, npad // split // 16)), 1, 0, 2, split=split, coop=1)


def split_configs(M: int, N: int, dtype_str: str, block_threads=(128, 256, 1024), coop: bool = False) -> list:
    """Split rows for a few long rows: the three largest ``SPLIT`` with slices of at least
    ``MIN_SLICE`` elements and at most ``2 * SPLIT_PROGRAMS`` programs in all.

    Each slice is read in tiles of 8-16 elements per thread (16-byte vectors), so
    nothing spills; empty when there are enough rows to fill the GPU without it.
    ``coop``: also the one-launch form of the three largest splits whose grid fits one
    program per SM, with 16 elements per thread of its slice in registers.
    """
    npad = next_pow2(N)
    if M >= SPLIT_PROGRAMS // 2:
        return []
    vec = 16 // ELEMENT_SIZE[dtype_str]
    splits = [s for s in SPLIT_CHOICES[1:] if npad // s >= MIN_SLICE and M * s <= 2 * SPLIT_PROGRAMS][-3:]
    out = []
    for split in splits:
        slice_n = npad // split
        for bt in block_threads:
            tile = min(slice_n, 2 * vec * bt)  # 16 elements per thread at most: no spills
            if tile >= vec * bt and (bt < 1024 or tile == slice_n):
                out.append(_cfg(bt, 1, 0 if tile == slice_n else tile, 2, split=split))
    if coop:  # the three largest splits whose grid fits one program per SM
        for split in [s for s in SPLIT_CHOICES[1:] if MIN_SLICE <= npad // s <= MAX_COOP_SLICE
                      and M * s <= COOP_PROGRAMS][-3:]:
            out.append(_coop_cfg(npad, split))
    return out


def cluster_configs(M: int, N: int, dtype_str: str) -> list:
    """Long rows across a Hopper cluster (``COOP=3``, the CuTe DSL body), where CuTe DSL is installed:
    ``SPLIT`` 2, 4 or 8 CTAs (and 16 for rows of 128 K elements and more, or for a few rows) of 128-512
    threads, each thread holding 32 or 64 elements of the row.

    A few rows (``M * SPLIT <= FEW_CLUSTERS``: the clusters fit the SMs at once) keep the slice in
    registers (``HOLD=1``); more rows also stage it in shared memory through L1 (``HOLD=0``) at 32 elements
    a thread, and only stage it at 64. H200, bf16, GB/s: 1024 x 65536 3855 staged at 4 x 256 against 3712
    in registers at 8 x 256; in one wave registers led staged at every (SPLIT, threads) of six shapes of
    1-4 rows of 64-256 K elements, by 4-16 % (1 x 65536 at 16 x 128: 160 against 149).

    Only widths the body takes whole (a multiple of ``SPLIT * BLOCK_THREADS`` vectors): other widths
    would run its two-launch fallback, which the space's own split configs already cover."""
    from . import kernel_cluster

    if N < CLUSTER_MIN_N or not kernel_cluster.available():
        return []
    elem = ELEMENT_SIZE[dtype_str]
    out = []
    for split in (2, 4, 8, 16) if N >= CLUSTER_16_MIN_N or M * 16 <= FEW_CLUSTERS else (2, 4, 8):
        for per_thread in CLUSTER_PER_THREAD:
            threads = N // (split * per_thread)
            if threads in (128, 256, 512) and kernel_cluster.takes(N, split, threads, elem):
                # one wave of clusters: registers. More: both at 32 elements a thread, staged at 64
                # (1024 x 65536 at 4 x 256: 3855 staged, 3513 in registers)
                holds = (1,) if M * split <= FEW_CLUSTERS else (0, 1) if per_thread == 32 else (0,)
                out += [_cfg(threads, 1, 0, 2, split=split, coop=3, hold=hold) for hold in holds]
    return out


def persist_configs(M: int, N: int, dtype_str: str) -> list:
    """Many long rows (``COOP=2``, measured by ``bench/long_rows.py``, not searched): each row split into
    slices of 8-32 KB, 32 bytes per thread in registers (256-1024 threads), across a group of programs that
    loops over rows; the grid holds what the GPU holds at once."""
    npad = next_pow2(N)
    elem = ELEMENT_SIZE[dtype_str]
    # 16-bit rows of whole 16-byte vectors: fp32 rows and odd widths cost more registers than 1024
    # threads hold (ptxas spills).
    if npad < PERSIST_MIN_N or M < SPLIT_PROGRAMS // 2 or elem != 2 or N % 8:
        return []
    out = []
    for threads in (1024, 512, 256):
        slice_n = threads * 32 // elem
        if 2 <= npad // slice_n <= 32:
            out.append(_cfg(threads, 1, 0, 2, split=npad // slice_n, coop=2))
    return out


def small_config(N: int, dtype_str: str, warp: int = 32) -> fat.Config:
    """The one config for short rows: several rows per program, 16-byte accesses, at least a ``warp``
    (the target's warp or wavefront size) of threads."""
    npad = next_pow2(N)
    vec = 16 // ELEMENT_SIZE[dtype_str]
    rows = max(1, min(64, 4096 // npad))
    threads = max(warp, min(256, rows * npad // (2 * vec)))
    return _cfg(next_pow2(threads), rows, policy=0)


def default_config(M: int, N: int, dtype_str: str, backend: str = "cuda") -> fat.Config:
    """A good config without measuring: the heuristic behind ``rmsnorm()``.

    Fitted to H200 measurements (docs/benchmarks.md): rows up to 2048 elements
    take two rows per 128-thread program; longer rows, when there are enough of
    them, stream in two passes with one 16-byte vector per thread per chunk;
    few rows keep the row in registers (latency). On ROCm a few rows of 32 K
    elements and more split in two launches (:func:`rocm_split`). On CUDA two
    kinds of rows differ (``bench/default_probe.py``, ``bench/wshift_probe.py``):

    * a few rows of 32 K elements and more (the one-launch split fits the GPU:
      :func:`coop_split`) split across programs of 2048 elements each, where one
      program per row left 1.4-8.4x on the table (1 x 262144 bf16: 478 GB/s
      against 57);
    * rows of 2-8 K elements off the 16-byte grid, whose padded row holds the
      aligned window (``factory.RMSNormLauncher.align``), stay whole at 32
      elements a thread (16384 x 2999 bf16: 3805 GB/s against 1970 in two
      passes; 1024 x 5001 fp16 2509 against 1310; 8 x 5001 fp32 143 against 133
      at 16 elements a thread; 4096 x 3001 fp32 3669, 1 % behind 16);
    * many 16-bit rows on the grid whose width is not a power of two (the hidden
      sizes of most LLMs: 2560, 3072, 3584, 5120): :func:`off_pow2_rows`;
    * rows of 513-2048 elements on the grid whose x is 6-36 MiB: :func:`mid_rows`.
    """
    npad = next_pow2(N)
    if npad <= SMALL_N:
        return small_config(N, dtype_str, WAVEFRONT.get(backend, 32))
    if backend == "rocm":
        split = rocm_split(M, N, dtype_str)
        if split:  # the two-launch split (ROCm has no one-launch form): partial sums, then normalize
            return _cfg(256, 1, 0, 2, split=split)
        return _cfg(min(1024, max(256, npad // 16)), 1, 8192 if npad > MAX_REGISTER_ROW else 0)
    vec = 16 // ELEMENT_SIZE[dtype_str]
    if npad <= 2048:
        mid = mid_rows(M, N, dtype_str) if backend == "cuda" else None
        return mid if mid is not None else _cfg(128, max(1, 2048 // npad), policy=0)
    if backend == "cuda":
        if npad <= 8192 and window_fits(N, npad, vec):
            return _cfg(npad // 32, 1, policy=0 if npad <= 4096 else 1)
        split = coop_split(M, N)
        if split:
            return _coop_cfg(npad, split)
        wide = off_pow2_rows(M, N, dtype_str)
        if wide is not None:
            return wide
    if npad <= 16384 and M < FEW_ROWS:
        return _cfg(max(128, min(1024, npad // 16)))
    if npad <= MAX_REGISTER_ROW and M < FEW_ROWS // 2:
        return _cfg(1024)
    chunk = min(npad // 2, 16384)
    policy = 2 if npad >= MAX_REGISTER_ROW else 1
    return _cfg(max(256, min(1024, chunk // vec)), 1, chunk, policy)


#: x sizes (bytes, ``[low, high)``) where the CUDA default of rows padded to 1024 takes the asynchronous copy
#: (:func:`mid_rows`).
MID_ASYNC_BYTES = (6 << 20, 20 << 20)
#: x sizes (bytes, ``[low, high)``) where the CUDA default of rows padded to 1024 or 2048 streams x
#: (``CACHE_POLICY=1``) instead of keeping it (:func:`mid_rows`).
MID_STREAM_BYTES = (20 << 20, 36 << 20)


def mid_rows(M: int, N: int, dtype_str: str) -> Optional[fat.Config]:
    """The CUDA default for rows of 513-2048 elements on the 16-byte grid whose x is of middling size, or
    None (the general rule serves: 128 threads, 2048 elements a program, ``CACHE_POLICY=0``). On the H200 (2026-12-04,
    every config of the space in the bench's graph replay, ``bench/space_probe.py``, or in the search's
    own timing, ``bench/rmsnorm.py``; 23 shapes of 2048-65536 rows of 768-2048) that rule read 0.91-0.98
    of the best config at the 15 shapes this function now serves, and 0.98-1.00 at 7 of the 8 others
    (fp32 4096 x 1000, 16 MiB, read 0.93 and keeps it: one shape):

    * rows padded to 1024, 16-bit, x in :data:`MID_ASYNC_BYTES`: the asynchronous-copy body (``ASYNC=1``,
      4 rows on 4 warps): 1.011-1.098x the general rule at 3072 x 1024, 4096 x 768, 4096 x 1000, 8192 x 768,
      8192 x 1000 and 8192 x 1024 (6-16 MiB), the best config at five of them; 0.991x at 6144 x 1000. At
      2048 x 1000 (4 MB) it read 0.98x, at 16384 x 1000 (31 MiB) 0.95x. Where this Triton has no Gluon the
      general rule serves; on a GPU the body cannot run, its launcher takes the Triton body of its tile;
    * rows padded to 1024 or 2048, x in :data:`MID_STREAM_BYTES`: the general rule's tile with x streamed
      and the weight kept (``CACHE_POLICY=1``): 1.024-1.065x at 10240 x 1024, 12288 x 1024, 16384 x 768,
      16384 x 1000, 16384 x 1024, 6144 x 2048, 8192 x 2000 and 8192 x 1000 fp32 (20-32 MiB); from 40 MiB
      (20480 x 1024 fp16, 24576 x 1000, 12288 x 1000 fp32, 32768 x 1024) policy 0 led by 1.6-3.9 %.

    Rows off the 16-byte grid keep the general rule (not measured in this band). All of this is timed with x
    cold (flushed out of L2), as the search and the bench time. On an x just written by the kernel before
    (``bench/rmsnorm.py --warm``), with x's copies through L1 (``l1_copies``), the default read 1.015x QuACK
    at 4096 x 1000 and 0.9998-1.012x the search's pick at 4096 x 896, 5120 x 1024, 7168 x 1000, 9216 x 1024
    fp16, 11264 x 1024 and 14336 x 1000 (2026-12-04, 04 UTC); x streamed 1.118x the general rule at
    16384 x 1024 (NOTES.md)."""
    npad, elem = next_pow2(N), ELEMENT_SIZE[dtype_str]
    if not SMALL_N < npad <= 2048 or N % (16 // elem):
        return None
    nbytes = M * N * elem
    if npad == 1024 and elem == 2 and MID_ASYNC_BYTES[0] <= nbytes < MID_ASYNC_BYTES[1]:
        from . import kernel_async

        if kernel_async.available():
            return _cfg(128, 4, policy=0, async_=1)
    if MID_STREAM_BYTES[0] <= nbytes < MID_STREAM_BYTES[1]:
        return _cfg(128, 2048 // npad, policy=1)
    return None


#: Many rows padded to 4096 (:func:`off_pow2_rows`) stay whole in registers while x is smaller than this;
#: larger, they stream in chunks. H200, bf16: whole rows led at 4096 x 3584 (29 MB) and trailed by
#: 0.8-5 % from 6144 x 3072 (38 MB) up.
OFF_POW2_WHOLE_BYTES = 32 << 20


def off_pow2_rows(M: int, N: int, dtype_str: str) -> Optional[fat.Config]:
    """The CUDA default for many rows (``M >= FEW_ROWS``) of 16-bit elements on the 16-byte grid whose
    width is not a power of two, or None (the general rule serves). The general rule streams such rows
    in two passes of one 16-byte vector a thread, and the last chunk of a row that is not a whole number
    of chunks leaves up to three quarters of the threads masked (5120 in chunks of 4096). On the H200
    (``bench/rmsnorm.py --shapes``, the search's flushed graph timing of the whole space, two runs of
    2026-12-03 and two of 2026-12-04) the general rule read 0.88-0.92 of the best config at 4096 x 2560,
    3072, 3584 and 5120, 1024 x 2560, 16384 x 2560 and 16384 x 5120. Instead:

    * padded to 4096, while x is under :data:`OFF_POW2_WHOLE_BYTES`: the whole row in registers at 128
      threads (32 elements a thread): 0.966-1.000 of the best at 1024-4096 rows of 2560-3584 (eight
      shapes, 2026-12-04; 0.995-1.000 on 2026-12-03);
    * padded to 4096, larger: chunks of 2048 at 128 threads (two vectors a thread a chunk), streaming y
      (``CACHE_POLICY=2``): 0.993-1.000 of the best at 6144-65536 rows of 2560-3584 (twelve shapes, fp16
      too), where the whole row read 0.944-0.993 and the general rule's chunks of 2048 at 256 threads
      0.923-1.000 (2026-12-04);
    * padded to 8192, at most three quarters of it (5120, 6144): chunks of 4096 at 256 threads (two
      vectors a thread a chunk): 0.988-0.998 of the best at 4096-16384 rows of 5120 (fp16 too) and
      4096 x 6144, where the general rule read 0.88-0.95. Wider rows (7168) keep the general rule, the
      best there or within 0.4 %.
    """
    npad = next_pow2(N)
    if M < FEW_ROWS or N == npad or ELEMENT_SIZE[dtype_str] != 2 or N % (16 // ELEMENT_SIZE[dtype_str]):
        return None
    if npad == 4096:
        if M * N * ELEMENT_SIZE[dtype_str] < OFF_POW2_WHOLE_BYTES:
            return _cfg(128, 1, policy=1)
        return _cfg(128, 1, 2048, 2)
    if npad == 8192 and 4 * N <= 3 * npad:
        return _cfg(256, 1, 4096, 1)
    return None


def rocm_split(M: int, N: int, dtype_str: str) -> int:
    """``SPLIT`` of the ROCm default for a few long rows, or 0: rows of at least ``PERSIST_MIN_N`` (padded)
    elements split into slices of 2048 (4096 from 131072 up, in 16-bit), halved while ``M * SPLIT`` passes
    ``SPLIT_PROGRAMS``, in the two-launch form at 256 threads holding at most two 16-byte vectors of the
    slice each (``split_configs`` offers the same config).

    Not measured on an AMD GPU (none here). The rule is the H200's best two-launch split for each of these
    shapes (``bench/default_probe.py``, bf16 unless said, GB/s against one program per row): 1 x 32768 59
    against 49; 1 x 65536 114 against 66; 8 x 65536 565 against 359; 1 x 131072 214 against 73; 4 x 131072
    595 against 215; 1 x 262144 400 against 57; 2 x 65536 fp32 359 against 132. One program per row leaves
    all but M of the GPU's compute units idle on any GPU; the search (``rocm_space``) refines it."""
    longest = min(DEFAULT_MAX_SLICE, 2 * (16 // ELEMENT_SIZE[dtype_str]) * 256)
    return _few_rows_split(M, N, min(longest, 4096 if next_pow2(N) >= 131072 else 2048), SPLIT_PROGRAMS, longest)


def _few_rows_split(M: int, N: int, slice_n: int, programs: int, longest: int) -> int:
    """``SPLIT`` of a default that splits rows of at least ``PERSIST_MIN_N`` (padded) elements into slices of
    ``slice_n``, halved while ``M * SPLIT`` passes ``programs``, or 0 where that leaves one slice or slices
    longer than ``longest``."""
    npad = next_pow2(N)
    if npad < PERSIST_MIN_N:
        return 0
    split = min(SPLIT_CHOICES[-1], npad // slice_n)
    while split > 1 and M * split > programs:
        split //= 2
    return split if split > 1 and npad // split <= longest else 0


def coop_split(M: int, N: int) -> int:
    """``SPLIT`` of the default for a few long rows on CUDA, or 0: rows of at least ``PERSIST_MIN_N`` (padded)
    elements split into slices of 2048 (more where ``M * SPLIT`` would pass ``COOP_PROGRAMS``, up to
    ``DEFAULT_MAX_SLICE``), so that the one-launch form (``COOP=1``) holds the grid at one program per SM.

    H200, bf16 unless said, GB/s, graph replay (``bench/default_probe.py``), this split against one program per
    row: 1 x 32768 69 against 49; 1 x 65536 132 against 66 (QuACK 122); 8 x 65536 640 against 359 (QuACK 661);
    1 x 131072 251 against 73; 4 x 131072 662 against 215 (QuACK 682); 1 x 262144 478 against 57 (QuACK 409);
    2 x 65536 fp32 402 against 132. It was the fastest split of the space at each but 1 x 32768 (70 at 32 x 1024).
    Slices of 8192 did not pay: 32 x 32768 909 against 938 for one program a row."""
    return _few_rows_split(M, N, 2048, COOP_PROGRAMS, DEFAULT_MAX_SLICE)


def deep_short_tiles(M: int, N: int, dtype_str: str) -> list:
    """Short rows, many of them (CUDA): tiles of eight 16-byte vectors a thread (64 bf16 elements).

    On the H200 (``bench/space_probe.py --extra``) 65536 x 128 bf16 ran 128t x 64r p1 at 3955 GB/s and
    64t x 32r at 3916-3924, against 3883 for the best tile of two vectors (128t x 16r p1) and 3837-3955
    for torch.compile, whose kernel there is the same depth (32 rows at 2 warps). At 262144 x 256 they
    lost 1.5-3 % (the search keeps the shallower tile). Offered where the grid still gives every SM a
    program (``M / rows >= COOP_PROGRAMS``)."""
    npad = next_pow2(N)
    per_thread = 8 * (16 // ELEMENT_SIZE[dtype_str])
    out = []
    for bt in (32, 64, 128, 256):
        rows = per_thread * bt // npad
        if 1 <= rows <= 64 and rows * npad == per_thread * bt and M // rows >= COOP_PROGRAMS:
            out.append(_cfg(bt, rows, policy=0))
    return out


def async_configs(N: int, dtype_str: str) -> list:
    """Rows of 513-2048 elements staged by ``cp.async``, one warp a row (``ASYNC=1``, the Gluon body of
    ``kernel_async.py``), where this Triton has it: 4 rows on 4 warps. H200, bf16, GB/s
    (``bench/gluon_probe.py``): 4096 x 1000 3236 against QuACK's 3237 and 3180 for the best Triton config;
    8 rows on 8 warps 3170; with many rows the Triton body leads (16384 x 1000 3978 against 3618), so the
    search decides."""
    from . import kernel_async

    if not kernel_async.available() or N % (16 // ELEMENT_SIZE[dtype_str]) or next_pow2(N) > kernel_async.MAX_BLOCK_N:
        return []
    return [_cfg(128, 4, policy=0, async_=1)]


def row_configs(M: int, N: int, dtype_str: str) -> list:
    """A few rows (``M < FEW_ROWS``) of 2049-16384 elements of whole 16-byte vectors on the Gluon row body
    (``ASYNC=2``), where this Triton has it: 8 or 16 elements a thread, streaming x and keeping the weight
    (``CACHE_POLICY=1``, what the Triton body's picks use at these shapes). A launch there is latency bound;
    Triton's block-wide sum costs two barriers and a second round of shuffles after x arrives, this body
    one barrier and two 16-byte shared loads at 8 warps (sm_90 SASS: ``tests/test_space.py``). On the H200
    the search picked it at 1 x 4096, 32 x 4096 and 32 x 3000 (0.8-2.7 % over the default)."""
    from . import kernel_async

    npad, lane_vec = next_pow2(N), 16 // ELEMENT_SIZE[dtype_str]
    if not kernel_async.available() or M >= FEW_ROWS or N % lane_vec or not 2048 < npad <= 16384:
        return []
    return [_cfg(npad // per_lane, 1, policy=1, async_=2) for per_lane in (16, 8) if npad // per_lane <= 1024]


def cuda_space(M: int, N: int, dtype_str: str) -> list:
    """The CUDA search space, tuned in seconds: at most 32 candidates (a few long rows, which also try split
    and cluster bodies), 30 for many short rows."""
    npad = next_pow2(N)
    if npad <= SMALL_N:
        # Each 16-byte config also streams x and keeps the weight in L2 (CACHE_POLICY 1): on the H200 that
        # led by 0.7-1.1 % at 65536 x 128 bf16 and lost 2 % at 262144 x 256 (bench/space_probe.py), so the
        # search decides.
        short = short_row_space(N, dtype_str) + deep_short_tiles(M, N, dtype_str)
        return _unique(short + [fat.Config(compile_hints=c.hints, **{**c.kwargs, "CACHE_POLICY": 1})
                                for c in short if c.kwargs["VEC"] == 16])
    out = []
    if N % (16 // ELEMENT_SIZE[dtype_str]) and npad <= 4096:
        # Rows not a multiple of 16 bytes: read as the aligned vectors that hold them where the window fits
        # (the factory's ALIGN), else element by element, where more threads per row pay off. On the H200
        # 32 elements a thread led at 16384 x 2999 bf16 (3830 GB/s against 3338 at 16) and 32 x 3001.
        for policy in (0, 1):
            for bt in (64, 128, 256, 512, 1024):
                for rows in (1, 2, 4):
                    if 4 <= rows * npad // bt <= 32:
                        out.append(_cfg(bt, rows, policy=policy))
    elif npad <= 2048:
        for policy in (0, 1):
            for bt in (64, 128, 256):
                for rows in (1, 2, 4):
                    if 8 <= rows * npad // bt <= 32:
                        out.append(_cfg(bt, rows, policy=policy))
        out += async_configs(N, dtype_str)
    elif npad <= MAX_REGISTER_ROW:
        for bt in (128, 256, 512, 1024):
            if 8 <= npad // bt <= 32:
                out.append(_cfg(bt))
        if npad == 4096:
            out.append(_cfg(512, 2))
        # Two passes (the re-read hits L2) keep fewer registers per row in flight.
        for chunk in (2048, 4096, 8192):
            for bt in (128, 256, 512, 1024):
                if 8 <= chunk // bt <= 16 and chunk < npad:
                    for policy in (1, 2):
                        out.append(_cfg(bt, 1, chunk, policy))
        # The whole row as one chunk, read twice, two 16-byte vectors a thread a pass: torch.compile's
        # kernel for these rows (Inductor's looped reduction with a row-wide block; 16384 x 8192 bf16: 512
        # threads). On the H200 it read 4231 GB/s there against 4233 for torch.compile and 4230 for the best
        # two-chunk config; 32768 x 4096 fp32 4294-4295 against 4296 and 4292 (bench/space_probe.py). Only
        # for many rows: at 32 x 4096 and 32 x 3000 bf16 (latency-bound) the search picked it and the bench
        # read it 10 % under the default (230 against 256, 169 against 189 GB/s).
        bt = npad * ELEMENT_SIZE[dtype_str] // (2 * VECTOR_BYTES)
        if 128 <= bt <= 1024 and npad >= 2048 and M >= FEW_ROWS:
            out += [_cfg(bt, 1, npad, policy) for policy in (1, 2)]
        if npad == MAX_REGISTER_ROW:
            out += [_cfg(1024, 1, 8192, 2, 1), _cfg(1024, 1, 16384, 2, 0), _cfg(1024, 1, 16384, 2, 1)]
        out += row_configs(M, N, dtype_str)
    else:
        for chunk, bt in ((8192, 512), (8192, 1024), (16384, 1024), (32768, 1024)):
            for prefetch in (0, 1):
                out.append(_cfg(bt, 1, chunk, 2, prefetch))
    out += split_configs(M, N, dtype_str, coop=True)
    out += cluster_configs(M, N, dtype_str)
    default = default_config(M, N, dtype_str)
    if default not in out:
        out.append(default)
    return _unique(out)


#: The seven BLOCK_THREADS x waves_per_eu combinations searched on ROCm. A workgroup of
#: BLOCK_THREADS/64 waves puts BLOCK_THREADS/256 waves on each of a CU's four SIMDs, so
#: waves_per_eu below that cannot be honoured (LLVM ignores it): each pair is feasible.
ROCM_COMBOS = ((256, 0), (256, 1), (256, 2), (512, 0), (512, 2), (1024, 0), (1024, 4))


def rocm_space(M: int, N: int, dtype_str: str) -> list:
    npad = next_pow2(N)
    if npad <= SMALL_N:
        return short_row_space(N, dtype_str, WAVEFRONT["rocm"])
    chunk = 8192 if npad > MAX_REGISTER_ROW else 0
    # waves_per_eu 0 (the compiler's own choice) is left unset: that is the default's config, so a search
    # times it once, and a compile_hints block around the call still reaches it.
    out = [_cfg(bt, 1, chunk, **({"waves_per_eu": w} if w else {})) for bt, w in ROCM_COMBOS]
    # Split rows only for rows of 16 K and more: unmeasured on ROCm, so offered where the need is plainest.
    return out + (split_configs(M, N, dtype_str) if npad >= 16384 else [])


def cpu_space(M: int, N: int, dtype_str: str) -> list:
    """Under Triton's interpreter: rows per program (1, 2, 4) around the default, or SPLIT (1, 2, 4) for
    chunked rows.

    The interpreter runs every program in Python, so rows per program is the one
    knob whose cost it measures; the CPU winner is keyed to the CPU target and
    never reused on a GPU.
    """
    d = default_config(M, N, dtype_str, "cpu")
    if next_pow2(N) <= SMALL_N:
        return [d]
    kw = d.kwargs
    if kw["CHUNK"]:
        # Chunked rows take one row per program: split them instead (the factory refuses rows > 1).
        out = [_cfg(kw["BLOCK_THREADS"], 1, kw["CHUNK"], kw["CACHE_POLICY"], split=s) for s in (1, 2, 4)]
    else:
        out = [_cfg(kw["BLOCK_THREADS"], rows, 0, kw["CACHE_POLICY"]) for rows in (1, 2, 4)]
    if d not in out:
        out.append(d)
    return out


def space_for(backend: str, M: int, N: int, dtype_str: str) -> list:
    """The search space on a backend (``cpu``: rows per program only, see ``cpu_space``)."""
    if backend == "cuda":
        return cuda_space(M, N, dtype_str)
    if backend == "rocm":
        return rocm_space(M, N, dtype_str)
    return cpu_space(M, N, dtype_str)


def backend_of(device) -> str:
    target = fat.current_target()
    if target is not None:
        return target.backend
    try:
        return fat.target_for(device).backend
    except LookupError:
        return getattr(device, "type", "cpu")


def _here(space: list, x) -> list:
    """``space`` without the cluster configs (``COOP=3``) and the asynchronous-copy ones (``ASYNC=1``) where
    ``x``'s GPU cannot run them (before Hopper or no CuTe DSL; before compute capability 8.0, ROCm or no
    Gluon): there they would only time their fallback again."""
    if x is None or not getattr(x, "is_cuda", False):
        return space
    from .async_rows import async_capable
    from .cluster import cluster_capable

    dev = x.get_device()
    clusters, copies = cluster_capable(dev), async_capable(dev)
    return [c for c in space if (clusters or c.kwargs.get("COOP") != 3) and (copies or not c.kwargs.get("ASYNC"))]


def configs(M: int, N: int, dtype: str, x=None, **_: object) -> list:
    """``configs=`` of the tuner: evaluated only when a search runs."""
    return _here(space_for(backend_of(x.device if x is not None else None), M, N, dtype), x)


def default(M: int, N: int, dtype: str, x=None, **_: object) -> fat.Config:
    """``default=`` of the tuner."""
    backend: Optional[str] = backend_of(x.device) if x is not None else "cuda"
    return default_config(M, N, dtype, backend)


def validate(config: fat.Config, M: int, N: int, dtype: str, x=None, **_: object) -> bool:
    """``validate=`` of the tuner: a stored or shipped winner must be a config this space offers for
    the shape (or its default). Without a tensor (``flyautotune import``), any backend's space counts."""
    backends = [backend_of(x.device)] if x is not None else ["cuda", "rocm", "cpu"]
    if "ASYNC" not in config.kwargs:  # stored before the knob existed: the Triton body, as it ran then
        config = fat.Config(compile_hints=config.hints, **config.kwargs, ASYNC=0)
    return any(config in _here(space_for(b, M, N, dtype), x) or config == default_config(M, N, dtype, b)
               for b in backends)
