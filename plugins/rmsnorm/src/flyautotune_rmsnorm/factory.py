"""The factory: one launcher per specialization of the RMSNorm body.

``make_launcher(N, dtype_str, BLOCK_THREADS, ROWS_PER_PROGRAM, CHUNK,
CACHE_POLICY, PREFETCH, SPLIT, VEC, COOP, HOLD)`` is cached; ``SPLIT > 1`` builds the
split-row launcher (``split.py``), otherwise the one-program-per-rows body; the
launcher compiles lazily per device, per pointer alignment and per compile-option
set (the lowered hint snapshot), then launches
the cached binary straight through Triton's launcher, so a call costs a few
microseconds of host time rather than a trip through ``JITFunction.run``.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import threading
from typing import Any, Mapping, Optional

import attrs
from flyautotune.devices import triton_interprets

from . import kernel as _kernel

#: dtype names the kernel accepts (input, weight and output).
DTYPE_STRS = ("bf16", "fp16", "fp32")
ELEMENT_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}
#: Widest global access a thread issues (bytes).
VECTOR_BYTES = 16
#: Threads per program the kernel is built for (num_warps 1..32).
BLOCK_THREADS_CHOICES = (32, 64, 128, 256, 512, 1024)
#: Programs one row may be split across (SPLIT), and the widest access a thread may issue (VEC, bytes).
SPLIT_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)
VEC_CHOICES = (4, 8, 16)
#: L2 eviction policies per CACHE_POLICY: (last read of x, first read of a two-pass row, weight, y).
CACHE_POLICIES = {
    0: ("", "", "", ""),  # the hardware's default everywhere
    1: ("evict_first", "evict_last", "evict_last", ""),  # stream x, keep the weight and the re-read row
    2: ("evict_first", "evict_last", "evict_last", "evict_first"),  # ... and stream y out
}
_CONST_NAMES = ("N", "BLOCK_N", "ROWS", "NUM_CHUNKS", "EVEN_N", "EVEN_M", "ROW_VEC",
                "X_LAST", "X_KEEP", "W_POLICY", "Y_POLICY", "PREFETCH", "HOLD", "WIDE", "PACKED", "PDL", "ALIGN",
                "REREAD")
#: Row offsets (elements) from this on need 64-bit arithmetic in the body.
NARROW_LIMIT = 2**31
#: Fewer rows than this (about two per SM of an H100/H200) are latency-bound.
FEW_ROWS = 264
#: TRITON_INTERPRET=1 runs GPU tensors through the interpreter too (debugging); read as Triton reads it.
_INTERPRET = triton_interprets()


_ON = ("1", "true", "yes", "on")
_pdl_env: Optional[bool] = None  # FLYAUTOTUNE_RMSNORM_PDL, read on first use
_pdl_devices: dict = {}


def pdl_enabled() -> bool:
    """True when ``FLYAUTOTUNE_RMSNORM_PDL`` is 1 (or true/yes/on): the one-launch body then runs with
    programmatic dependent launch on Hopper and newer. Off by default: measured on an H200
    (``bench/pdl_probe.py``), it speeds a chain of PDL kernels (up to 1.4x on small shapes, where
    every call follows another PDL call) but costs 2-7 % on small shapes when the kernels around the
    norm are ordinary launches, as torch's own are. Read once per process, so the launches and the
    cache key of every tuned call (:mod:`.hooks`) always agree."""
    global _pdl_env
    if _pdl_env is None:
        _pdl_env = os.environ.get("FLYAUTOTUNE_RMSNORM_PDL", "0").strip().lower() in _ON
    return _pdl_env


def pdl_for_arch(arch: str) -> int:
    """1 where the one-launch body runs with programmatic dependent launch on a CUDA ``arch``
    (``"sm_90"``, ``"sm_100a"`` ...): asked for (:func:`pdl_enabled`), Hopper or newer, and a Triton
    that has ``gdc_wait``."""
    digits = "".join(ch for ch in str(arch).split("_")[-1] if ch.isdigit())
    if not digits or int(digits) < 90 or not pdl_enabled():
        return 0
    import triton.language as tl

    return int(hasattr(getattr(tl.extra, "cuda", None), "gdc_wait"))


_ROCM: Optional[bool] = None


def on_rocm() -> bool:
    """True under HIP's torch (read once per process): the NVIDIA-only bodies and launches step aside."""
    global _ROCM
    if _ROCM is None:
        _ROCM = bool(_torch().version.hip)
    return _ROCM


def pdl_for(dev: int) -> int:
    """:func:`pdl_for_arch` of CUDA device ``dev`` (0 on HIP), decided once per device and process."""
    on = _pdl_devices.get(dev)
    if on is None:
        if on_rocm():
            on = 0
        else:
            major, minor = _torch().cuda.get_device_capability(dev)
            on = pdl_for_arch(f"sm_{major}{minor}")
        _pdl_devices[dev] = on
    return on


def next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _check_spec(N, dtype_str, BLOCK_THREADS, ROWS_PER_PROGRAM, CHUNK, CACHE_POLICY, PREFETCH, SPLIT=1,
                VEC=16, COOP=0, HOLD=0) -> None:
    for name, value in (("N", N), ("BLOCK_THREADS", BLOCK_THREADS), ("ROWS_PER_PROGRAM", ROWS_PER_PROGRAM),
                        ("CHUNK", CHUNK), ("CACHE_POLICY", CACHE_POLICY), ("PREFETCH", PREFETCH),
                        ("SPLIT", SPLIT), ("VEC", VEC), ("COOP", COOP), ("HOLD", HOLD)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"rmsnorm factory: {name}={value!r} must be an int")
    if N <= 0:
        raise ValueError(f"rmsnorm factory: N={N} must be positive")
    if dtype_str not in DTYPE_STRS:
        raise ValueError(f"rmsnorm factory: dtype_str={dtype_str!r}; accepted: {', '.join(DTYPE_STRS)}")
    if BLOCK_THREADS not in BLOCK_THREADS_CHOICES:
        raise ValueError(
            f"rmsnorm factory: BLOCK_THREADS={BLOCK_THREADS}; accepted: {BLOCK_THREADS_CHOICES} "
            f"(a power-of-two number of 32-thread warps)"
        )
    if not _is_pow2(ROWS_PER_PROGRAM) or ROWS_PER_PROGRAM > 64:
        raise ValueError(f"rmsnorm factory: ROWS_PER_PROGRAM={ROWS_PER_PROGRAM} must be a power of two <= 64")
    if CHUNK != 0 and (not _is_pow2(CHUNK) or CHUNK < 16):
        raise ValueError(f"rmsnorm factory: CHUNK={CHUNK} must be 0 (whole row held) or a power of two >= 16 "
                         f"(chunks read twice; the padded row or more: one chunk, read twice)")
    if CHUNK and ROWS_PER_PROGRAM != 1:
        raise ValueError(
            f"rmsnorm factory: CHUNK={CHUNK} (two-pass long rows) needs ROWS_PER_PROGRAM=1, "
            f"got {ROWS_PER_PROGRAM}"
        )
    if CACHE_POLICY not in CACHE_POLICIES:
        raise ValueError(f"rmsnorm factory: CACHE_POLICY={CACHE_POLICY}; accepted: {sorted(CACHE_POLICIES)}")
    if PREFETCH not in (0, 1) or (PREFETCH and not CHUNK):
        raise ValueError(f"rmsnorm factory: PREFETCH={PREFETCH}; accepted: 0, or 1 with a CHUNK (two-pass rows)")
    if SPLIT not in SPLIT_CHOICES:
        raise ValueError(f"rmsnorm factory: SPLIT={SPLIT}; accepted: {SPLIT_CHOICES} (programs per row)")
    if SPLIT > 1 and ((ROWS_PER_PROGRAM != 1 and COOP != 2) or ROWS_PER_PROGRAM > 4 or PREFETCH):
        raise ValueError(f"rmsnorm factory: SPLIT={SPLIT} (a row across programs) needs ROWS_PER_PROGRAM=1 (up to 4 "
                         f"with COOP=2) and PREFETCH=0, got ROWS_PER_PROGRAM={ROWS_PER_PROGRAM}, PREFETCH={PREFETCH}")
    if VEC not in VEC_CHOICES:
        raise ValueError(f"rmsnorm factory: VEC={VEC}; accepted: {VEC_CHOICES} (bytes per access)")
    if COOP not in (0, 1, 2, 3) or (COOP and (SPLIT == 1 or CHUNK)):
        raise ValueError(f"rmsnorm factory: COOP={COOP}; accepted: 0, or with SPLIT > 1 and CHUNK=0 (one launch, "
                         f"each program's slice in registers) 1 (a grid of M * SPLIT programs), 2 (persistent "
                         f"programs looping over the rows) or 3 (a cluster of SPLIT CTAs per row, CuTe DSL), got "
                         f"SPLIT={SPLIT}, CHUNK={CHUNK}")
    if COOP == 3 and (SPLIT > 16 or ROWS_PER_PROGRAM != 1 or VEC != 16):
        raise ValueError(f"rmsnorm factory: COOP=3 (a cluster per row) takes SPLIT 2-16 (a Hopper cluster; 16 is "
                         f"non-portable), ROWS_PER_PROGRAM=1 and VEC=16, got SPLIT={SPLIT}, "
                         f"ROWS_PER_PROGRAM={ROWS_PER_PROGRAM}, VEC={VEC}")
    if COOP == 2 and ROWS_PER_PROGRAM * SPLIT > 128:
        raise ValueError(f"rmsnorm factory: COOP=2 keeps ROWS_PER_PROGRAM * SPLIT <= 128 partial sums per trip, got "
                         f"ROWS_PER_PROGRAM={ROWS_PER_PROGRAM}, SPLIT={SPLIT}")
    if HOLD not in (0, 1) or (HOLD and COOP != 3 and (SPLIT != 1 or CHUNK or ELEMENT_SIZE.get(dtype_str) != 2)):
        raise ValueError(f"rmsnorm factory: HOLD={HOLD}; accepted: 0, or 1 for a whole row in registers "
                         f"(SPLIT=1, CHUNK=0) of a 16-bit dtype or for a cluster's slice (COOP=3), got "
                         f"SPLIT={SPLIT}, CHUNK={CHUNK}, COOP={COOP}, dtype_str={dtype_str!r}")


def _check_async(spec: tuple, ASYNC: Any) -> None:
    """The Gluon bodies (``kernel_async.py``) take whole rows held in registers (``CHUNK=0``, ``SPLIT=1``,
    ``HOLD=0``, ``PREFETCH=0``, ``COOP=0``, 16-byte accesses). ``ASYNC=1`` (x staged by cp.async, one warp a
    row): rows of at most ``MAX_BLOCK_N`` padded elements, ``BLOCK_THREADS = 32 * ROWS_PER_PROGRAM``.
    ``ASYNC=2`` (one row a program, one barrier): ``ROWS_PER_PROGRAM=1`` and whole 16-byte vectors of at most
    ``MAX_ROW_PER_LANE`` elements a lane (``next_pow2(N) / BLOCK_THREADS``)."""
    from .kernel_async import MAX_BLOCK_N, MAX_ROW_PER_LANE

    N, dtype_str, threads, rows, chunk, _, prefetch, split, vec, coop, hold = spec
    _check_spec(*spec)
    if isinstance(ASYNC, bool) or ASYNC not in (1, 2):
        raise ValueError(f"rmsnorm factory: ASYNC={ASYNC!r}; accepted: 0, 1 (x staged by cp.async, one warp a "
                         f"row) or 2 (one row a program, its sum met behind one barrier)")
    common = chunk or split != 1 or hold or prefetch or coop or vec != VECTOR_BYTES
    knobs = (f"got N={N}, CHUNK={chunk}, SPLIT={split}, HOLD={hold}, PREFETCH={prefetch}, COOP={coop}, "
             f"VEC={vec}, BLOCK_THREADS={threads}, ROWS_PER_PROGRAM={rows}")
    if ASYNC == 1 and (common or threads != 32 * rows or next_pow2(N) > MAX_BLOCK_N):
        raise ValueError(f"rmsnorm factory: ASYNC=1 takes a whole row of at most {MAX_BLOCK_N} padded elements "
                         f"(CHUNK=0, SPLIT=1, HOLD=0, PREFETCH=0, COOP=0, VEC=16) with one warp a row "
                         f"(BLOCK_THREADS = 32 * ROWS_PER_PROGRAM), {knobs}")
    per_lane, lane_vec = next_pow2(N) // threads, VECTOR_BYTES // ELEMENT_SIZE[dtype_str]
    if ASYNC == 2 and (common or rows != 1 or threads < 32 or threads % 32 or per_lane < lane_vec
                       or per_lane > MAX_ROW_PER_LANE or per_lane * threads != next_pow2(N)):
        raise ValueError(f"rmsnorm factory: ASYNC=2 takes one whole row a program (ROWS_PER_PROGRAM=1, CHUNK=0, "
                         f"SPLIT=1, HOLD=0, PREFETCH=0, COOP=0, VEC=16) with {lane_vec}-{MAX_ROW_PER_LANE} "
                         f"elements a thread (next_pow2(N) / BLOCK_THREADS), {knobs}")


def window_fits(N: int, block_n: int, vec: int) -> bool:
    """True when a row of ``N`` elements is off the grid of ``vec``-element vectors and a padded block of
    ``block_n`` holds the aligned window that holds it (``ALIGN``: :meth:`RMSNormLauncher.align`)."""
    return vec > 1 and N % vec != 0 and block_n >= N + vec - 1


def row_vec(sx: int, sy: int, elem: int, vec_bytes: int = VECTOR_BYTES) -> int:
    """Largest power-of-two element count (<= ``vec_bytes``) dividing both row strides."""
    v = max(1, vec_bytes // elem)
    while v > 1 and (sx % v or sy % v):
        v >>= 1
    return v


@attrs.frozen
class Launch:
    """The cached pieces of one compiled binary, enough to launch it directly."""

    call: Any  # call(grid_x, grid_y, stream_handle, *kernel_args)
    kernel: Any  # triton CompiledKernel: .asm, .n_regs, .n_spills, .metadata
    #: runtime(grid_x, grid_y, stream_handle, *runtime_args): the same launch without the constexprs, or None
    runtime: Any = None
    #: a persistent split body's row groups the GPU holds at once (``COOP=2``; 0 for other bodies)
    groups: int = 0


def _runtime_call(compiled) -> Any:
    """``claunch``'s launch of ``compiled`` that takes the runtime arguments only, or None."""
    from . import claunch

    return claunch.direct_launcher(compiled, runtime_only=True)


def _direct_call(compiled) -> Any:
    """The cheapest way to launch ``compiled`` again: ``call(grid_x, grid_y, stream, *args)``.

    Triton 3.5/3.6's ``CudaLauncher`` only allocates scratch and forwards to its
    C ``launch``; when the kernel needs no scratch we launch it ourselves: through
    :func:`claunch.direct_launcher` (one ``cuLaunchKernel`` from a state packed
    once) where it takes the kernel, else through that C ``launch``. Any other
    launcher (other versions, HIP) goes through ``run``.
    """
    run = compiled.run  # the first access binds the module on the current device
    function, meta = compiled.function, compiled.packed_metadata
    c_launch = getattr(run, "launch", None)
    try:
        params = list(inspect.signature(type(run).__call__).parameters)
    except (TypeError, ValueError):
        params = []
    if (type(run).__name__ == "CudaLauncher" and c_launch is not None
            and params == ["self", "gridX", "gridY", "gridZ", "stream", "function", "args"]
            and not getattr(run, "global_scratch_size", 1) and not getattr(run, "profile_scratch_size", 1)):
        from . import claunch

        direct = claunch.direct_launcher(compiled)
        if direct is not None:
            return direct
        coop, pdl = run.launch_cooperative_grid, run.launch_pdl

        def call(gx, gy, stream, *args):
            c_launch(gx, gy, 1, stream, function, coop, pdl, None, None, meta, None, None, None, *args)
    else:
        def call(gx, gy, stream, *args):
            run(gx, gy, 1, stream, function, meta, None, None, None, *args)
    return call


class RMSNormLauncher:
    """Launches the body for one ``(N, dtype_str, BLOCK_THREADS, ROWS_PER_PROGRAM, CHUNK, CACHE_POLICY, PREFETCH)``.

    Call with tensors described by pointers and row strides: ``x`` and ``y``
    have ``M`` rows of ``N`` contiguous elements starting every ``sx`` / ``sy``
    elements; ``y`` has ``x``'s dtype (``dtype_str``); ``w`` holds ``N``
    contiguous elements of any accepted dtype.
    """

    def __init__(self, N: int, dtype_str: str, BLOCK_THREADS: int, ROWS_PER_PROGRAM: int = 1, CHUNK: int = 0,
                 CACHE_POLICY: int = 1, PREFETCH: int = 0, SPLIT: int = 1, VEC: int = VECTOR_BYTES, COOP: int = 0,
                 HOLD: int = 0):
        _check_spec(N, dtype_str, BLOCK_THREADS, ROWS_PER_PROGRAM, CHUNK, CACHE_POLICY, PREFETCH, SPLIT, VEC, COOP,
                    HOLD)
        self.COOP = COOP
        self.HOLD = HOLD
        self.N = N
        self.dtype_str = dtype_str
        self.BLOCK_THREADS = BLOCK_THREADS
        self.ROWS_PER_PROGRAM = ROWS_PER_PROGRAM
        self.CHUNK = CHUNK
        self.CACHE_POLICY = CACHE_POLICY
        self.PREFETCH = PREFETCH
        self.SPLIT = SPLIT
        self.VEC = VEC
        self.elem = ELEMENT_SIZE[dtype_str]
        self.vec = max(1, VEC // self.elem)
        npad = next_pow2(N)
        if CHUNK == 0 or CHUNK >= npad:  # CHUNK >= the padded row: one chunk, read twice (REREAD)
            self.BLOCK_N, self.NUM_CHUNKS = npad, 1
        else:
            self.BLOCK_N, self.NUM_CHUNKS = CHUNK, -(-N // CHUNK)
        self.REREAD = int(CHUNK >= npad)
        self.EVEN_N = N % self.BLOCK_N == 0
        self._prefetch = PREFETCH if self.NUM_CHUNKS > 1 else 0
        self.num_warps = max(BLOCK_THREADS // 32, 1)
        self._consts: dict = {}
        self._launches: dict = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"RMSNormLauncher(N={self.N}, dtype_str={self.dtype_str!r}, BLOCK_THREADS={self.BLOCK_THREADS}, "
                f"ROWS_PER_PROGRAM={self.ROWS_PER_PROGRAM}, CHUNK={self.CHUNK}, CACHE_POLICY={self.CACHE_POLICY}, "
                f"PREFETCH={self.PREFETCH}, SPLIT={self.SPLIT}, VEC={self.VEC}, COOP={self.COOP}, "
                f"HOLD={self.HOLD})")

    # -- options ---------------------------------------------------------------
    def compile_options(self, lowered: Optional[Mapping[str, Any]] = None, pdl: int = 0) -> dict:
        """Triton compile options: ``num_warps`` from BLOCK_THREADS, then the lowered hints; with ``pdl``
        (the one-launch body's ``PDL`` constexpr, which waits for the kernel ahead) ``launch_pdl``."""
        opts = {"num_warps": self.num_warps}
        if lowered:
            opts.update(lowered)
        if pdl:
            opts["launch_pdl"] = True
        return opts

    def grid(self, M: int) -> int:
        return -(-M // self.ROWS_PER_PROGRAM)

    def addressing(self, M: int, sx: int, sy: int) -> tuple:
        """``(WIDE, PACKED)`` of a launch over ``M`` rows with these row strides (elements): how the body
        computes its row addresses.

        * ``WIDE``: 64-bit row offsets. Needed when a row of the grid (up to its last program's, masked or
          not) may start 2**31 elements or more from the tensor's start; otherwise 32 bits save the 64-bit
          multiplies and adds of each row's address.
        * ``PACKED``: both strides are ``N`` (rows packed, the usual layout): the stride is the constant
          ``N``, so one base address serves all of a program's rows and the loads issue sooner.

        Both pay where the launch streams many rows (short rows 65536 x 128 and 4096 x 1000 bf16 gained
        0.7-1.5 % on the H200, ``bench/addressing_probe.py``) but not where a few rows make it latency-bound:
        below ``FEW_ROWS`` rows the original addressing (64-bit, runtime strides) was 1-3 % faster
        (1 x 4096, 32 x 4096, 32 x 3000, 256 x 8192), so such launches keep it. So do held rows (``HOLD``):
        their register budget (64 a thread at 1024 threads) was fitted with it, and either change spills 8
        bytes there (ptxas, sm_90)."""
        if self.HOLD or M < FEW_ROWS:
            return 1, 0
        return int((M + self.ROWS_PER_PROGRAM) * max(sx, sy) >= NARROW_LIMIT), int(sx == self.N and sy == self.N)

    def align(self, sx: int, sy: int) -> int:
        """``ALIGN`` of a launch with these row strides and 16-byte aligned ``x`` and ``y``: the elements
        of one vector where a whole row's width is not a multiple of it (each row is then read as the
        aligned vectors that hold it, and written so where they lie wholly inside it), else 0. It needs
        the row's first element at the same place in its vector in x and y (row strides equal modulo the
        vector) and the padded row to hold the window (``BLOCK_N >= N + vector - 1``)."""
        v = self.vec
        if (not window_fits(self.N, self.BLOCK_N, v) or self.NUM_CHUNKS != 1 or self.REREAD or self.HOLD
                or (sx - sy) % v):
            return 0
        return v

    def _constexprs(self, M: int, rv: int, sx: int, sy: int, pdl: int = 0, aligned: bool = True) -> tuple:
        """The body's constexprs for a launch over ``M`` rows with these row strides, in ``_CONST_NAMES``
        order (``WIDE`` and ``PACKED``: :meth:`addressing` of the launch; ``PDL``: ``pdl``, see
        :func:`pdl_for`; ``ALIGN``: :meth:`align`, where ``aligned``, both x and y 16-byte aligned; ``REREAD``
        last: one chunk read twice, where ``CHUNK`` covers the padded row)."""
        wide, packed = self.addressing(M, sx, sy)
        even_m = M % self.ROWS_PER_PROGRAM == 0
        align = self.align(sx, sy) if aligned else 0
        consts = self._consts.get((even_m, rv, pdl, wide, packed, align))
        if consts is None:
            consts = self._consts[(even_m, rv, pdl, wide, packed, align)] = (
                self.N, self.BLOCK_N, self.ROWS_PER_PROGRAM, self.NUM_CHUNKS, self.EVEN_N, even_m, rv,
                *CACHE_POLICIES[self.CACHE_POLICY], self._prefetch, self.HOLD, wide, packed, pdl, align, self.REREAD)
        return consts

    # -- launching -------------------------------------------------------------
    def __call__(self, x, w, y, M: int, sx: int, sy: int, eps: float, stream: Any = None,
                 options: tuple = (), interpret: Optional[bool] = None) -> None:
        """Run one launch of ``M`` rows.

        :param stream: a torch stream, a raw stream handle (int), or None (the
            device's current stream).
        :param options: lowered compile options as sorted ``(name, value)`` pairs
            (default: ``num_warps`` from BLOCK_THREADS).
        :param interpret: force (or forbid) Triton's interpreter; default: CPU
            tensors or ``TRITON_INTERPRET=1``.
        """
        if M == 0:
            return
        vec = self.vec
        rv = vec if not (sx | sy) & (vec - 1) else row_vec(sx, sy, self.elem, self.VEC)
        if interpret is None:
            interpret = not x.is_cuda or _INTERPRET
        xp, wp, yp = x.data_ptr(), w.data_ptr(), y.data_ptr()
        if interpret:
            consts = self._constexprs(M, rv, sx, sy, aligned=not (xp | yp) & 15)
            _kernel.interpreted_kernel()[(self.grid(M),)](x, w, y, M, sx // rv, sy // rv, eps, *consts)
            return
        dev = x.get_device()
        consts = self._constexprs(M, rv, sx, sy, pdl_for(dev), not (xp | yp) & 15)
        key = launch_key(dev, consts, xp, yp, wp, w.dtype, options)
        launch = self._launches.get(key)
        if launch is None:
            self._first_launch(key, x, w, y, M, sx // rv, sy // rv, eps, consts, options, stream)
            return
        launch.call(-(-M // self.ROWS_PER_PROGRAM), 1, stream_handle(stream, key[0]), xp, wp, yp, M, sx // rv,
                    sy // rv, eps, *consts)

    def bind(self, M: int, sx: int, sy: int, dev: int, w_dtype: Any, options: tuple) -> Any:
        """A launch for calls like ``self(x, w, y, M, sx, sy, eps, None, options)`` with these ``M``,
        row strides, device and weight dtype: ``run(x, w, y, M, N, dtype, eps, sx, sy, stream=None)``.

        The first call goes through :meth:`__call__` (compiling, choosing the binary);
        later calls with 16-byte-aligned pointers and the same integers go straight to that
        binary's launch, on the current stream or on ``stream`` (a raw handle, or a stream
        of this device, launched on without being made current). Anything else takes
        :meth:`__call__` again.
        ``options`` are the lowered compile options (the tuner's ``specialize=`` lowers
        them inside the launch context, where the target and the hints are current)."""
        rv = row_vec(sx, sy, self.elem, self.VEC)
        consts = self._constexprs(M, rv, sx, sy, pdl_for(dev)) if M else ()
        sxv, syv, grid = sx // rv, sy // rv, self.grid(M)
        state: list = [None, consts]  # the binary's direct call, its constexprs

        def run(x, w, y, M_, N_, dtype_, eps, sx_, sy_, stream=None):
            xp, wp, yp = x.data_ptr(), w.data_ptr(), y.data_ptr()
            call = state[0]
            if (call is not None and not (xp | wp | yp) & 15 and M_ == M and sx_ == sx and sy_ == sy
                    and w.dtype is w_dtype):
                if stream is None:
                    call(grid, 1, _raw_stream(dev), xp, wp, yp, M, sxv, syv, eps, *state[1])
                    return y
                if type(stream) is int or getattr(stream, "device_index", None) == dev:
                    # a raw handle or a stream of this device: launched on, never made current
                    call(grid, 1, stream_handle(stream, dev), xp, wp, yp, M, sxv, syv, eps, *state[1])
                    return y
            self(x, w, y, M_, sx_, sy_, eps, stream, options)
            if call is None and M_ == M and sx_ == sx and sy_ == sy and x.get_device() == dev:
                launch = self._launches.get(launch_key(dev, consts, 0, 0, 0, w_dtype, options))  # the aligned binary
                if launch is not None:  # claunch's runtime-only form where it has one: no constexprs to pass
                    state[0], state[1] = (launch.runtime, ()) if launch.runtime else (launch.call, consts)
            return y

        return run

    def _first_launch(self, key, x, w, y, M, sxv, syv, eps, consts, options, stream) -> None:
        torch = _torch()
        dev = key[0]
        kw = dict(zip(_CONST_NAMES, consts))
        opts = self.compile_options(dict(options), kw["PDL"])
        with torch.cuda.device(dev), torch.cuda.stream(torch_stream(stream, x.device)):
            compiled = _kernel.jit_kernel()[(self.grid(M),)](x, w, y, M, sxv, syv, eps, **kw, **opts)
            launch = Launch(_direct_call(compiled), compiled, _runtime_call(compiled))
        with self._lock:
            self._launches[key] = launch

    def compiled(self, x, w, y, M: int, sx: int, sy: int, options: tuple = ()):
        """The Triton ``CompiledKernel`` for these arguments, loaded (compiling, not launching).

        For reports: ``.n_regs``, ``.n_spills``, ``.asm["ptx"]``, ``.asm["sass"]``.
        """
        rv = row_vec(sx, sy, self.elem, self.VEC)
        pdl = pdl_for(x.get_device())
        kw = dict(zip(_CONST_NAMES, self._constexprs(M, rv, sx, sy, pdl, not (x.data_ptr() | y.data_ptr()) & 15)))
        torch = _torch()
        with torch.cuda.device(x.get_device()):
            k = _kernel.jit_kernel().warmup(x, w, y, M, sx // rv, sy // rv, 1e-6, grid=(self.grid(M),),
                                            **kw, **self.compile_options(dict(options), pdl))
            k.run  # loading the binary fills n_regs / n_spills
        return k


#: What Triton's launcher reads from a compiled kernel's metadata to launch it (beside the binary): two
#: builds of one binary that differ here launch differently. ``num_stages`` and the options' hash are not
#: here: they change the launch only through the binary.
LAUNCH_METADATA = ("num_warps", "num_ctas", "shared", "global_scratch_size", "launch_pdl",
                   "launch_cooperative_grid")


def build_name(launcher: Any, kernel: Any, M: int) -> Optional[str]:
    """What a launch of ``kernel`` (``launcher.compiled(...)``) over ``M`` rows runs: the binary's sha256 with
    the grid and the launch's own metadata (:data:`LAUNCH_METADATA`). Two configs named alike run the same
    program, so a search times one of them. None for the launches that run more than this one binary or pick
    their own grid (the split rows, the asynchronous rows) and for a kernel with no binary at hand."""
    if type(launcher) is not RMSNormLauncher:
        return None
    asm = getattr(kernel, "asm", None) or {}
    binary = asm.get("cubin") or asm.get("hsaco")
    if not isinstance(binary, (bytes, bytearray)):
        return None
    launch = " ".join(f"{f}={getattr(kernel.metadata, f, None)}" for f in LAUNCH_METADATA)
    return f"sha256={hashlib.sha256(binary).hexdigest()} grid={launcher.grid(M)} {launch}"


def launch_key(dev: int, consts: tuple, xp: int, yp: int, wp: int, w_dtype: Any, options: tuple) -> tuple:
    """The key of a compiled binary in a launcher's cache. Triton specializes each pointer on 16-byte
    alignment: one binary per combination."""
    return dev, consts, xp & 15 == 0, yp & 15 == 0, wp & 15 == 0, w_dtype, options


def torch_stream(stream: Any, device: Any) -> Any:
    """A torch stream object for ``stream`` (None: current; int: a raw handle, 0 the default stream)."""
    torch = _torch()
    if stream is None:
        return torch.cuda.current_stream(device)
    if isinstance(stream, int):
        return torch.cuda.ExternalStream(stream, device=device) if stream else torch.cuda.default_stream(device)
    return stream


def stream_handle(stream: Any, dev: int) -> int:
    """The raw handle of ``stream`` on device ``dev`` (None: the current stream)."""
    if stream is None:
        return _raw_stream(dev)
    if isinstance(stream, int):
        return stream
    return stream.cuda_stream


def _raw_stream(dev: int) -> int:
    """The current stream's raw handle on ``dev`` (torch's C getter, looked up on the first call)."""
    global _raw_stream
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        def raw(d):
            return torch.cuda.current_stream(d).cuda_stream
    _raw_stream = raw  # later calls go straight to the getter
    return raw(dev)


def _torch():
    import torch

    return torch


_launchers: dict = {}
_launchers_lock = threading.Lock()


def make_launcher(N: int, dtype_str: str, BLOCK_THREADS: int, ROWS_PER_PROGRAM: int = 1, CHUNK: int = 0,
                  CACHE_POLICY: int = 1, PREFETCH: int = 0, SPLIT: int = 1, VEC: int = VECTOR_BYTES,
                  COOP: int = 0, HOLD: int = 0, ASYNC: int = 0) -> Any:
    """The (cached) launcher for one specialization; raises on an invalid knob value.

    ``SPLIT > 1`` gives a :class:`~flyautotune_rmsnorm.split.SplitLauncher` (a
    :class:`~flyautotune_rmsnorm.cluster.ClusterLauncher` with ``COOP=3``), ``ASYNC=1`` or ``2`` an
    :class:`~flyautotune_rmsnorm.async_rows.AsyncRowsLauncher`; each is called the same way.
    """
    spec = (N, dtype_str, BLOCK_THREADS, ROWS_PER_PROGRAM, CHUNK, CACHE_POLICY, PREFETCH, SPLIT, VEC, COOP, HOLD)
    if ASYNC != 0:
        if isinstance(ASYNC, bool) or not isinstance(ASYNC, int):
            _check_async(spec, ASYNC)  # raises, naming the value
        spec += (ASYNC,)
    launcher = _launchers.get(spec)
    if launcher is None:
        if len(spec) > 11:
            from .async_rows import AsyncRowsLauncher

            _check_async(spec[:11], ASYNC)  # once per specialization, as the other launchers check theirs
            built = AsyncRowsLauncher(*spec[:11], ASYNC=ASYNC)
        elif SPLIT != 1 and not isinstance(SPLIT, bool) and isinstance(SPLIT, int):
            if COOP == 3:
                from .cluster import ClusterLauncher as launcher_class
            else:
                from .split import SplitLauncher as launcher_class

            built = launcher_class(*spec)
        else:
            built = RMSNormLauncher(*spec)  # validates the knobs
        with _launchers_lock:
            launcher = _launchers.setdefault(spec, built)
    return launcher
