"""Config space and zero-search default of the RMSNorm adopter.

Knobs (structural kwargs the factory consumes):

* ``BLOCK_THREADS``: threads per program (num_warps = BLOCK_THREADS / warp size).
* ``ROWS_PER_PROGRAM``: rows one program normalizes (short rows).
* ``CHUNK``: 0 keeps the whole row in registers; a power of two streams the
  row in chunks, two passes (rows too long for registers).
* ``CACHE_POLICY``: the L2 eviction policies of the accesses (see
  ``factory.CACHE_POLICIES``).

Occupancy hints come on top: ``maxnreg`` on CUDA is not needed by this body
(it never spills in the space below); ``waves_per_eu`` on ROCm.
"""

from __future__ import annotations

from typing import Optional

import flyautotune as fat

from .factory import ELEMENT_SIZE, next_pow2

KNOBS = ("BLOCK_THREADS", "ROWS_PER_PROGRAM", "CHUNK", "CACHE_POLICY")
#: Rows of at most this many elements get one config and no search.
SMALL_N = 512
#: Longest padded row held in registers (32 fp32 values per thread at 1024 threads).
MAX_REGISTER_ROW = 32768
#: SMs on the GPUs this space was measured on (H100/H200: 132); only shapes the heuristics.
_SMS = 132


def _cfg(bt: int, rows: int = 1, chunk: int = 0, policy: int = 1, **hints) -> fat.Config:
    return fat.Config(BLOCK_THREADS=bt, ROWS_PER_PROGRAM=rows, CHUNK=chunk, CACHE_POLICY=policy, **hints)


def small_config(N: int, dtype_str: str) -> fat.Config:
    """The one config for short rows: several rows per program, 16-byte accesses."""
    npad = next_pow2(N)
    vec = 16 // ELEMENT_SIZE[dtype_str]
    rows = max(1, min(64, 4096 // npad))
    threads = max(32, min(256, rows * npad // (2 * vec)))
    return _cfg(next_pow2(threads), rows)


def default_config(M: int, N: int, dtype_str: str, backend: str = "cuda") -> fat.Config:
    """A good config without measuring: the heuristic behind ``rmsnorm()``."""
    npad = next_pow2(N)
    if npad <= SMALL_N:
        return small_config(N, dtype_str)
    if backend == "rocm":
        return _cfg(min(1024, max(256, npad // 16)))
    if npad <= 2048:
        rows = 4096 // npad
        return _cfg(256, rows)
    if npad > MAX_REGISTER_ROW:
        return _cfg(1024, 1, 8192)
    # Few rows: spread each row over more threads (latency); many rows: 16 per thread.
    per_thread = 8 if M < 2 * _SMS else 16
    return _cfg(max(128, min(1024, npad // per_thread)))


def cuda_space(M: int, N: int, dtype_str: str) -> list:
    """The CUDA search space: a dozen or so candidates, tuned in seconds."""
    npad = next_pow2(N)
    if npad <= SMALL_N:
        return [small_config(N, dtype_str)]
    vec = 16 // ELEMENT_SIZE[dtype_str]
    out = []
    if npad <= 2048:
        for rows in (1, 2, 4, 8, 16):
            for bt in (64, 128, 256, 512):
                if vec <= rows * npad // bt <= 32:
                    out.append(_cfg(bt, rows))
    else:
        if npad <= MAX_REGISTER_ROW:
            for bt in (128, 256, 512, 1024):
                if 4 <= npad // bt <= 32:
                    out.append(_cfg(bt))
        if npad == 4096:
            out += [_cfg(256, 2), _cfg(512, 2)]
        # Two passes (the re-read hits L2) keep fewer registers per row in flight.
        chunks = (2048, 4096, 8192) if npad <= MAX_REGISTER_ROW else (8192, 16384, 32768)
        for chunk in chunks:
            for bt in (128, 256, 512, 1024):
                if 8 <= chunk // bt <= (16 if npad <= MAX_REGISTER_ROW else 32) and chunk < npad:
                    out.append(_cfg(bt, 1, chunk))
    default = default_config(M, N, dtype_str)
    if default not in out:
        out.append(default)
    return out


#: The seven BLOCK_THREADS x waves_per_eu combinations searched on ROCm.
ROCM_COMBOS = ((256, 1), (256, 2), (512, 1), (512, 2), (1024, 0), (1024, 1), (1024, 2))


def rocm_space(M: int, N: int, dtype_str: str) -> list:
    npad = next_pow2(N)
    if npad <= SMALL_N:
        return [small_config(N, dtype_str)]
    chunk = 8192 if npad > MAX_REGISTER_ROW else 0
    return [_cfg(bt, 1, chunk, waves_per_eu=w) for bt, w in ROCM_COMBOS]


def space_for(backend: str, M: int, N: int, dtype_str: str) -> list:
    """The search space on a backend (``cpu``: the default only — the interpreter times nothing useful)."""
    if backend == "cuda":
        return cuda_space(M, N, dtype_str)
    if backend == "rocm":
        return rocm_space(M, N, dtype_str)
    return [default_config(M, N, dtype_str, backend)]


def backend_of(device) -> str:
    target = fat.current_target()
    if target is not None:
        return target.backend
    try:
        return fat.target_for(device).backend
    except LookupError:
        return getattr(device, "type", "cpu")


def configs(M: int, N: int, dtype: str, x=None, **_: object) -> list:
    """``configs=`` of the tuner: evaluated only when a search runs."""
    return space_for(backend_of(x.device if x is not None else None), M, N, dtype)


def default(M: int, N: int, dtype: str, x=None, **_: object) -> fat.Config:
    """``default=`` of the tuner."""
    backend: Optional[str] = backend_of(x.device) if x is not None else "cuda"
    return default_config(M, N, dtype, backend)
