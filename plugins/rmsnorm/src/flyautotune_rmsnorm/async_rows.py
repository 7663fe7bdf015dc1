"""The launcher of ``ASYNC=1`` and ``ASYNC=2``: the Gluon bodies (``kernel_async.py``) where they take the
call, the Triton body of the same tile everywhere else."""

from __future__ import annotations

import contextlib
from typing import Any, Optional

from . import kernel_async as _ka
from . import l1_copies
from .factory import _INTERPRET, CACHE_POLICIES, NARROW_LIMIT, Launch, RMSNormLauncher, _direct_call, \
    _runtime_call, _torch, on_rocm, torch_stream

_capable: dict = {}


def async_capable(dev: int) -> bool:
    """True when CUDA device ``dev`` runs the body: NVIDIA (not ROCm), ``cp.async`` (compute capability 8.0
    or newer), and a Triton whose Gluon has what the body uses."""
    ok = _capable.get(dev)
    if ok is None:
        ok = _ka.available() and not on_rocm() and _torch().cuda.get_device_capability(dev)[0] >= 8
        _capable[dev] = ok
    return ok


class AsyncRowsLauncher(RMSNormLauncher):
    """The Gluon bodies (:mod:`.kernel_async`). ``ASYNC=1``: ``ROWS_PER_PROGRAM`` rows a program, one warp
    a row (``BLOCK_THREADS = 32 * ROWS_PER_PROGRAM``), x staged in shared memory by ``cp.async``.
    ``ASYNC=2``: one row a program on ``BLOCK_THREADS`` threads, the row's sum met behind one barrier, the
    loads with ``CACHE_POLICY``'s eviction policies. Called like
    :class:`~flyautotune_rmsnorm.factory.RMSNormLauncher`.

    The bodies take rows of whole 16-byte vectors with row strides of whole vectors, offsets within 32
    bits, on an NVIDIA GPU of compute capability 8.0+ with Gluon; any other call (the CPU, the interpreter,
    ROCm, odd widths or strides) runs :attr:`fallback`, the Triton body of the same tile and cache policy,
    which computes the same rows."""

    def __init__(self, *spec: Any, ASYNC: int = 1):
        super().__init__(*spec)
        self.ASYNC = ASYNC
        self.fallback = RMSNormLauncher(*spec)
        if ASYNC == 2:
            x_last, _, w_pol, y_pol = CACHE_POLICIES[self.CACHE_POLICY]
            sig, consts = _ka.row_signature(self.dtype_str, self.N, self.BLOCK_THREADS, (x_last, w_pol, y_pol))
            self._body, self._warps = _ka.rmsnorm_row, self.BLOCK_THREADS // 32
        else:
            sig, consts = _ka.signature(self.dtype_str, self.N, self.ROWS_PER_PROGRAM)
            self._body, self._warps = _ka.rmsnorm_async, self.ROWS_PER_PROGRAM
        #: ``(body, signature, constexprs)``: what ``compile_spec`` hands a compiler for this launcher
        self.source = (self._body, sig, consts)
        self._async_consts = tuple(consts.values())

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", ASYNC={self.ASYNC})"

    def _takes_rows(self, M: int, sx: int, sy: int) -> bool:
        """What :meth:`takes` asks of a launch apart from its device: whole vectors (the width and both row
        strides) and 32-bit offsets."""
        vec = self.vec  # VEC is 16 bytes (the factory checks it)
        return not (self.N % vec or sx % vec or sy % vec) and (M + self.ROWS_PER_PROGRAM) * max(sx, sy) < NARROW_LIMIT

    def takes(self, x, M: int, sx: int, sy: int) -> bool:
        """True when the Gluon body runs this call (else :attr:`fallback` does)."""
        return x.is_cuda and not _INTERPRET and self._takes_rows(M, sx, sy) and async_capable(x.get_device())

    def _editing(self):
        """Around a compile of the body: x's copies through L1 (:func:`.l1_copies.editing`) for ``ASYNC=1``."""
        return l1_copies.editing() if self.ASYNC == 1 else contextlib.nullcontext()

    # The base class's launch path, with this body's constexprs and compile step.
    def _constexprs(self, M: int, rv: int, sx: int, sy: int, pdl: int = 0, aligned: bool = True) -> tuple:
        return self._async_consts  # whole 16-byte vectors only (takes): never ALIGN

    def _first_launch(self, key, x, w, y, M, sxv, syv, eps, consts, options, stream) -> None:
        torch = _torch()
        dev = key[0]
        with self._editing(), torch.cuda.device(dev), torch.cuda.stream(torch_stream(stream, x.device)):
            compiled = self._body[(self.grid(M),)](x, w, y, M, sxv, syv, eps, *consts, num_warps=self._warps)
            launch = Launch(_direct_call(compiled), compiled, _runtime_call(compiled))
        if self.ASYNC == 1:
            l1_copies.check(compiled, f"the staged-rows body (ASYNC=1) of rows of {self.N} {self.dtype_str}")
        with self._lock:
            self._launches[key] = launch

    def __call__(self, x, w, y, M: int, sx: int, sy: int, eps: float, stream: Any = None,
                 options: tuple = (), interpret: Optional[bool] = None) -> None:
        if interpret or not self.takes(x, M, sx, sy):
            self.fallback(x, w, y, M, sx, sy, eps, stream, options, interpret)
            return
        super().__call__(x, w, y, M, sx, sy, eps, stream, options, False)

    def bind(self, M: int, sx: int, sy: int, dev: int, w_dtype: Any, options: tuple) -> Any:
        if not self._takes_rows(M, sx, sy) or _INTERPRET or not async_capable(dev):
            return self.fallback.bind(M, sx, sy, dev, w_dtype, options)
        return super().bind(M, sx, sy, dev, w_dtype, options)

    def compiled(self, x, w, y, M: int, sx: int, sy: int, options: tuple = ()):
        """The compiled body where it takes these arguments (built, not launched), else the fallback's."""
        if not self.takes(x, M, sx, sy):
            return self.fallback.compiled(x, w, y, M, sx, sy, options)
        torch = _torch()
        with self._editing(), torch.cuda.device(x.get_device()):
            k = self._body.warmup(x, w, y, M, sx // self.vec, sy // self.vec, 1e-6, *self._async_consts,
                                  grid=(self.grid(M),), num_warps=self._warps)
            k.run  # loading the binary fills n_regs / n_spills
        return k
