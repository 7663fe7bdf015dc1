"""The factory: one launcher per specialization of the RMSNorm body.

``make_launcher(N, dtype_str, BLOCK_THREADS, ROWS_PER_PROGRAM, CHUNK)`` is
cached; the launcher compiles lazily per device, per pointer alignment and per
compile-option set (the lowered hint snapshot), then launches the cached binary
straight through Triton's launcher so a call costs a few microseconds of host
time, not a trip through ``JITFunction.run``.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Mapping, Optional

import attrs

from . import kernel as _kernel

#: dtype names the kernel accepts (input, weight and output).
DTYPE_STRS = ("bf16", "fp16", "fp32")
ELEMENT_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}
#: Widest global access a thread issues (bytes).
VECTOR_BYTES = 16
#: Threads per program the kernel is built for (num_warps 1..32).
BLOCK_THREADS_CHOICES = (32, 64, 128, 256, 512, 1024)


def next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _check_spec(N: int, dtype_str: str, BLOCK_THREADS: int, ROWS_PER_PROGRAM: int, CHUNK: int) -> None:
    for name, value in (("N", N), ("BLOCK_THREADS", BLOCK_THREADS), ("ROWS_PER_PROGRAM", ROWS_PER_PROGRAM),
                        ("CHUNK", CHUNK)):
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
        raise ValueError(f"rmsnorm factory: CHUNK={CHUNK} must be 0 (whole row) or a power of two >= 16")
    if CHUNK and ROWS_PER_PROGRAM != 1:
        raise ValueError(
            f"rmsnorm factory: CHUNK={CHUNK} (two-pass long rows) needs ROWS_PER_PROGRAM=1, "
            f"got {ROWS_PER_PROGRAM}"
        )


def row_vec(sx: int, sy: int, elem: int) -> int:
    """Largest power-of-two element count (<= 16 bytes) dividing both row strides."""
    v = VECTOR_BYTES // elem
    while v > 1 and (sx % v or sy % v):
        v >>= 1
    return v


@attrs.frozen
class Launch:
    """The cached pieces of one compiled binary, enough to launch it directly."""

    run: Any
    function: Any
    packed_metadata: Any
    kernel: Any  # triton CompiledKernel: .asm, .n_regs, .n_spills, .metadata


class RMSNormLauncher:
    """Launches the body for one ``(N, dtype_str, BLOCK_THREADS, ROWS_PER_PROGRAM, CHUNK)``.

    Call with 2-D views described by pointers-and-strides: ``x`` and ``y`` are
    tensors whose rows start every ``sx`` / ``sy`` elements, ``M`` rows of
    ``N`` contiguous elements; ``w`` holds ``N`` contiguous elements.
    """

    def __init__(self, N: int, dtype_str: str, BLOCK_THREADS: int, ROWS_PER_PROGRAM: int = 1, CHUNK: int = 0):
        _check_spec(N, dtype_str, BLOCK_THREADS, ROWS_PER_PROGRAM, CHUNK)
        self.N = N
        self.dtype_str = dtype_str
        self.BLOCK_THREADS = BLOCK_THREADS
        self.ROWS_PER_PROGRAM = ROWS_PER_PROGRAM
        self.CHUNK = CHUNK
        self.elem = ELEMENT_SIZE[dtype_str]
        npad = next_pow2(N)
        if CHUNK == 0 or CHUNK >= npad:
            self.BLOCK_N, self.NUM_CHUNKS = npad, 1
        else:
            self.BLOCK_N, self.NUM_CHUNKS = CHUNK, -(-N // CHUNK)
        self.EVEN_N = N % self.BLOCK_N == 0
        self.num_warps = max(BLOCK_THREADS // 32, 1)
        self._launches: dict = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"RMSNormLauncher(N={self.N}, dtype_str={self.dtype_str!r}, BLOCK_THREADS={self.BLOCK_THREADS}, "
                f"ROWS_PER_PROGRAM={self.ROWS_PER_PROGRAM}, CHUNK={self.CHUNK})")

    # -- options ---------------------------------------------------------------
    def compile_options(self, lowered: Optional[Mapping[str, Any]] = None) -> dict:
        """Triton compile options: ``num_warps`` from BLOCK_THREADS, then the lowered hints."""
        opts = {"num_warps": self.num_warps}
        if lowered:
            opts.update(lowered)
        return opts

    def grid(self, M: int) -> int:
        return -(-M // self.ROWS_PER_PROGRAM)

    def _constexprs(self, M: int, rv: int) -> tuple:
        return (self.N, self.BLOCK_N, self.ROWS_PER_PROGRAM, self.NUM_CHUNKS, self.EVEN_N,
                M % self.ROWS_PER_PROGRAM == 0, rv)

    # -- launching -------------------------------------------------------------
    def __call__(self, x, w, y, M: int, sx: int, sy: int, eps: float, stream: Any = None,
                 options: tuple = (), interpret: Optional[bool] = None) -> None:
        """Run one launch of ``M`` rows.

        :param stream: a torch stream, a raw stream handle (int), or None (the
            device's current stream).
        :param options: lowered compile options as sorted ``(name, value)`` pairs.
        :param interpret: force (or forbid) Triton's interpreter; default: CPU
            tensors or ``TRITON_INTERPRET=1``.
        """
        if M == 0:
            return
        rv = row_vec(sx, sy, self.elem)
        consts = (self.N, self.BLOCK_N, self.ROWS_PER_PROGRAM, self.NUM_CHUNKS, self.EVEN_N,
                  M % self.ROWS_PER_PROGRAM == 0, rv)
        if interpret is None:
            interpret = x.device.type != "cuda" or _INTERPRET
        if interpret:
            _kernel.interpreted_kernel()[(self.grid(M),)](x, w, y, M, sx // rv, sy // rv, eps, *consts)
            return
        dev = x.device.index
        xp, wp, yp = x.data_ptr(), w.data_ptr(), y.data_ptr()
        key = (dev, consts[5], rv, xp & 15 == 0, wp & 15 == 0, yp & 15 == 0, w.dtype, y.dtype, options)
        launch = self._launches.get(key)
        if launch is None:
            self._first_launch(key, x, w, y, M, sx // rv, sy // rv, eps, consts, dict(options), stream, dev)
            return
        if stream is None:
            handle = _raw_stream(dev)
        elif isinstance(stream, int):
            handle = stream
        else:
            handle = stream.cuda_stream
        launch.run(-(-M // self.ROWS_PER_PROGRAM), 1, 1, handle, launch.function, launch.packed_metadata,
                   None, None, None, xp, wp, yp, M, sx // rv, sy // rv, eps, *consts)

    def _first_launch(self, key, x, w, y, M, sxv, syv, eps, consts, lowered, stream, dev) -> None:
        torch = _torch()
        kw = dict(zip(_CONST_NAMES, consts))
        opts = self.compile_options(lowered)
        if stream is None:
            stream = torch.cuda.current_stream(dev)
        elif isinstance(stream, int):
            stream = torch.cuda.ExternalStream(stream, device=x.device) if stream else torch.cuda.default_stream(dev)
        with torch.cuda.device(dev), torch.cuda.stream(stream):
            compiled = _kernel.jit_kernel()[(self.grid(M),)](x, w, y, M, sxv, syv, eps, **kw, **opts)
        run = compiled.run  # binds the module on this device (first access loads it)
        with self._lock:
            self._launches[key] = Launch(run, compiled.function, compiled.packed_metadata, compiled)

    def compiled(self, x, w, y, M: int, sx: int, sy: int, options: tuple = ()):
        """The Triton ``CompiledKernel`` for these arguments (compiling, not launching).

        For reports: ``.n_regs``, ``.n_spills``, ``.asm["ptx"]``, ``.asm["sass"]``.
        """
        rv = row_vec(sx, sy, self.elem)
        kw = dict(zip(_CONST_NAMES, self._constexprs(M, rv)))
        torch = _torch()
        with torch.cuda.device(x.device.index):
            return _kernel.jit_kernel().warmup(x, w, y, M, sx // rv, sy // rv, 1e-6, grid=(self.grid(M),),
                                               **kw, **self.compile_options(dict(options)))


_CONST_NAMES = ("N", "BLOCK_N", "ROWS", "NUM_CHUNKS", "EVEN_N", "EVEN_M", "ROW_VEC")


def _raw_stream(dev: int) -> int:
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(dev)
    return torch.cuda.current_stream(dev).cuda_stream


def _torch():
    import torch

    return torch


#: TRITON_INTERPRET=1 runs GPU tensors through the interpreter too (debugging).
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


_launchers: dict = {}
_launchers_lock = threading.Lock()


def make_launcher(N: int, dtype_str: str, BLOCK_THREADS: int, ROWS_PER_PROGRAM: int = 1,
                  CHUNK: int = 0) -> RMSNormLauncher:
    """The (cached) launcher for one specialization; raises on an invalid knob value."""
    spec = (N, dtype_str, BLOCK_THREADS, ROWS_PER_PROGRAM, CHUNK)
    launcher = _launchers.get(spec)
    if launcher is None:
        built = RMSNormLauncher(*spec)  # validates the knobs
        with _launchers_lock:
            launcher = _launchers.setdefault(spec, built)
    return launcher
