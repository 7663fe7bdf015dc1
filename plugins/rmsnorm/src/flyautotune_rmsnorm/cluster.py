"""The launcher of ``COOP=3``: one row across a Hopper cluster of ``SPLIT`` CTAs (the CuTe DSL body in
``kernel_cluster.py``), or the split-row Triton body where the cluster body cannot take the call."""

from __future__ import annotations

import threading
from typing import Any, Optional

from . import kernel_cluster as _kc
from .factory import _INTERPRET, _torch, on_rocm, torch_stream
from .split import SplitLauncher, sm_count

_TORCH_DS = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}
_capable: dict = {}


def cluster_capable(dev: int) -> bool:
    """True when CUDA device ``dev`` launches thread-block clusters (compute capability 9.0 or newer, not
    ROCm) and CuTe DSL is installed."""
    ok = _capable.get(dev)
    if ok is None:
        ok = _kc.available() and not on_rocm() and _torch().cuda.get_device_capability(dev)[0] >= 9
        _capable[dev] = ok
    return ok


class ClusterLauncher(SplitLauncher):
    """``SPLIT`` CTAs of a cluster per row, reducing through distributed shared memory (one launch, no
    workspace, any number of rows; ``SPLIT`` 16 is a non-portable cluster size, which CuTe DSL allows).

    Called like :class:`~flyautotune_rmsnorm.factory.RMSNormLauncher`. The cluster body takes 16-byte
    aligned rows whose length is a multiple of ``SPLIT * BLOCK_THREADS`` vectors, on a GPU with
    clusters and CuTe DSL installed; every other call (odd widths, strides, offsets, the CPU, the
    interpreter, older GPUs, no CuTe DSL) runs the two-launch split of the same ``SPLIT``, which
    computes the same rows.

    ``HOLD=1`` holds each CTA's slice in registers (with the weight loaded while the sums travel when
    the clusters fit the SMs at once); ``HOLD=0`` stages it in shared memory through L1
    (``cp.async.ca``) and reads it back for the normalize.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.cluster_ok = _kc.takes(self.N, self.SPLIT, self.BLOCK_THREADS, self.elem)
        self._fns: dict = {}

    def uses_coop(self, M: int, dev: int) -> bool:
        return False  # the fallback is the two-launch split, never a global-memory barrier

    def takes(self, x, w, y, sx: int, sy: int) -> bool:
        """True when the cluster body runs this call (else the two-launch split does)."""
        return (self._takes_rows(sx, sy, w.dtype) and not (x.data_ptr() | y.data_ptr() | w.data_ptr()) & 15
                and cluster_capable(x.get_device()))

    def _takes_rows(self, sx: int, sy: int, w_dtype: Any) -> bool:
        """What :meth:`takes` asks of the call that does not depend on its tensors' addresses or device:
        a width the body takes whole, row strides of whole vectors, a weight dtype it was built for."""
        return self.cluster_ok and not (sx | sy) & (self.vec - 1) and str(w_dtype) in _TORCH_DS

    def one_wave(self, M: int, dev: int) -> bool:
        """True when the clusters of ``M`` rows fit the SMs at once: such a launch (a few rows, latency-bound)
        of ``HOLD=1`` loads the weight while the sums travel, more rows load it with x (H200: 1 x 262144
        +4 %, 4 x 131072 +2.5 % the first way; 1024 x 65536 -15 %)."""
        return M * self.SPLIT <= sm_count(dev)

    def variant(self, one_wave: bool = False) -> dict:
        """The body variant this config launches (``kernel_cluster.compiled``'s and ``ptx``'s keywords):
        ``HOLD=1`` the slice in registers (the weight loaded while the sums travel when ``one_wave``),
        ``HOLD=0`` staged in shared memory through L1."""
        return dict(late_w=one_wave) if self.HOLD else dict(stage=True, stage_l1=True)

    def function(self, w_dtype: Any, one_wave: bool = False) -> Any:
        """The compiled cluster body for weights of ``w_dtype`` (built on first use, then cached);
        ``one_wave``: the launch's clusters fit the SMs at once (see :meth:`one_wave`)."""
        fn = self._fns.get((w_dtype, one_wave))
        if fn is None:
            fn = self._fns[(w_dtype, one_wave)] = _kc.compiled(self.dtype_str, _TORCH_DS[str(w_dtype)], self.N,
                                                               self.SPLIT, self.BLOCK_THREADS,
                                                               **self.variant(one_wave))
        return fn

    def __call__(self, x, w, y, M: int, sx: int, sy: int, eps: float, stream: Any = None,
                 options: tuple = (), interpret: Optional[bool] = None) -> None:
        if M == 0:
            return
        if interpret is None:
            interpret = not x.is_cuda or _INTERPRET
        if interpret or not self.takes(x, w, y, sx, sy):
            super().__call__(x, w, y, M, sx, sy, eps, stream, options, interpret)
            return
        dev = x.get_device()
        fn = self.function(w.dtype, self.one_wave(M, dev))
        N = self.N
        xv = x.as_strided((M, N), (sx, 1))
        yv = y.as_strided((M, N), (sy, 1))
        torch = _torch()
        if stream is None and dev == torch.cuda.current_device():
            fn(xv, w, yv, eps)  # on the current stream
            return
        with torch.cuda.device(dev), torch.cuda.stream(torch_stream(stream, x.device)):
            fn(xv, w, yv, eps)

    def bind(self, M: int, sx: int, sy: int, dev: int, w_dtype: Any, options: tuple) -> Any:
        """A launch for calls like ``self(x, w, y, M, sx, sy, eps, None, options)`` with these ``M``, row
        strides, device and weight dtype: ``run(x, w, y, M, N, dtype, eps, sx, sy, stream=None)`` (the
        tuner's ``specialize=``). Calls with 16-byte aligned pointers, the same integers, no stream and
        ``dev`` current go straight to the compiled cluster body, with 2-D rows passed as they are;
        anything else takes :meth:`__call__`."""
        torch = _torch()
        if not self._takes_rows(sx, sy, w_dtype) or not cluster_capable(dev):
            def run(x, w, y, M_, N_, dtype_, eps, sx_, sy_, stream=None):
                self(x, w, y, M_, sx_, sy_, eps, stream, options)
                return y
            return run
        fn = self.function(w_dtype, self.one_wave(M, dev))
        N = self.N
        current = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)

        def run(x, w, y, M_, N_, dtype_, eps, sx_, sy_, stream=None):
            if (stream is None and M_ == M and sx_ == sx and sy_ == sy and w.dtype is w_dtype
                    and not (x.data_ptr() | y.data_ptr() | w.data_ptr()) & 15 and x.get_device() == dev
                    and current() == dev):
                xv = x if x.dim() == 2 and x.stride(0) == sx else x.as_strided((M, N), (sx, 1))
                yv = y if y.dim() == 2 and y.stride(0) == sy else y.as_strided((M, N), (sy, 1))
                fn(xv, w, yv, eps)  # on the current stream
                return y
            self(x, w, y, M_, sx_, sy_, eps, stream, options)
            return y

        return run

    def compiled(self, x, w, y, M: int, sx: int, sy: int, options: tuple = ()):
        """The compiled cluster body where it takes these arguments (built, not launched), else the
        two-launch split's normalize kernel. Off the main thread (a search's precompile pool) the cluster
        body is left to its first launch: CuTe DSL compiles are kept on the calling thread, since they
        have not been tried from a worker pool here."""
        if x.is_cuda and self.takes(x, w, y, sx, sy):
            if threading.current_thread() is not threading.main_thread():
                return None
            return self.function(w.dtype, self.one_wave(M, x.get_device()))
        return super().compiled(x, w, y, M, sx, sy, options)
