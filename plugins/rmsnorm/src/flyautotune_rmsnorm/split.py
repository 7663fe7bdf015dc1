"""The launcher of split rows (``SPLIT > 1``): two launches per call, or one with ``COOP=1`` when the
whole grid fits on the GPU at once, or one persistent launch with ``COOP=2`` (any number of rows, a grid
of resident programs); see ``kernel_split.py``."""

from __future__ import annotations

import logging
import threading
from typing import Any, Optional

from . import claunch
from . import kernel_split as _ks
from .factory import (_INTERPRET, CACHE_POLICIES, Launch, RMSNormLauncher, _direct_call, _torch, launch_key,
                      next_pow2, on_rocm, row_vec, stream_handle, torch_stream)


_log = logging.getLogger(__name__)
_workspaces: dict = {}
_workspace_lock = threading.Lock()
_sm_counts: dict = {}
_persist_workspaces: dict = {}
#: Widest split a cooperative launch uses (the partial-sum slots per row).
MAX_SPLIT = 128


def sm_count(dev: int) -> int:
    n = _sm_counts.get(dev)
    if n is None:
        n = _sm_counts[dev] = _torch().cuda.get_device_properties(dev).multi_processor_count
    return n


def workspace(dev: int, handle: int) -> Optional[tuple]:
    """``(P, C)`` of the cooperative launch on ``(device, stream)``: one per stream, so launches that
    may run at once never share a barrier. Made on the first launch on a stream, outside any graph
    capture; None while capturing before that: the caller takes the two-launch path, which computes the
    same rows (a workspace made inside the capture would need its fill captured too, two more nodes per
    launch: measured slower than the two launches, 5.8 against 3.3 µs at 1 x 65536). Capture on a stream
    that has launched once to record the one-launch form."""
    ws = _workspaces.get((dev, handle))
    if ws is None:
        rows = sm_count(dev)  # M * SPLIT <= SMs and SPLIT >= 2
        ws = _zeroed_workspace(_workspaces, dev, handle, rows * MAX_SPLIT, rows)  # the count says when filled
    return ws


def persist_workspace(dev: int, handle: int) -> Optional[tuple]:
    """``(P, D)`` of the persistent launch on ``(device, stream)``: fp32 partial-sum slots for every group a
    grid of resident programs can hold (at most 32 programs per SM, two or more per group) and two zeroed
    counters per group. Like :func:`workspace`: one per stream, None while capturing before the first
    launch on it."""
    ws = _persist_workspaces.get((dev, handle))
    if ws is None:
        groups = sm_count(dev) * 16
        ws = _zeroed_workspace(_persist_workspaces, dev, handle, groups * 2 * MAX_SPLIT, groups * 2)  # ROWS * SPLIT <= 128
    return ws


def _zeroed_workspace(cache: dict, dev: int, handle: int, slots: int, counters: int) -> Optional[tuple]:
    """``(fp32 slots, int32 counters)``, zeroed on device ``dev`` and kept in ``cache`` for ``(dev, handle)``;
    None while the current stream is capturing a graph."""
    torch = _torch()
    if torch.cuda.is_current_stream_capturing():
        return None
    with torch.cuda.device(dev):
        p = torch.zeros(slots, dtype=torch.float32, device=f"cuda:{dev}")
        c = torch.zeros(counters, dtype=torch.int32, device=f"cuda:{dev}")
        torch.cuda.current_stream(dev).synchronize()  # the zeros are in place before any launch
    with _workspace_lock:
        return cache.setdefault((dev, handle), (p, c))


def resident_programs(compiled, threads: int, dev: int) -> int:
    """Programs of ``compiled`` the whole GPU holds at once: the CUDA driver's occupancy for one SM (asked
    with device ``dev`` current) times the SMs; one per SM when the driver cannot be asked (HIP, no
    ``libcuda``), which any kernel that compiled for the device fits."""
    per_sm = 0
    try:
        import ctypes

        cuda = ctypes.CDLL("libcuda.so.1")
        n = ctypes.c_int(0)
        with _torch().cuda.device(dev):
            rc = cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                ctypes.byref(n), ctypes.c_void_p(compiled.function), threads,
                ctypes.c_size_t(compiled.metadata.shared))
        if rc == 0:
            per_sm = n.value
    except (OSError, AttributeError, TypeError):
        per_sm = 0
    return max(per_sm, 1) * sm_count(dev)


def row_groups(M: int, groups: int) -> int:
    """Groups of a persistent launch of ``M`` rows with at most ``groups`` resident: as many as fit, then
    as few as keep the same rows per group (so no group runs one row more than the rest for nothing)."""
    groups = max(1, min(M, groups))
    per = -(-M // groups)
    return -(-M // per)


class SplitLauncher(RMSNormLauncher):
    """One row across ``SPLIT`` programs: partial sums of squares, then normalize.

    A row of ``N`` is cut into slices of ``TILES`` tiles of ``BLOCK_N``
    elements (``BLOCK_N`` = ``CHUNK``, or the whole slice when ``CHUNK`` is 0);
    ``programs`` slices cover it (at most ``SPLIT``). Called like
    :class:`RMSNormLauncher`; it allocates ``M * programs`` fp32 partial sums
    per call.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        per = -(-self.N // self.SPLIT)
        self.BLOCK_N = min(self.CHUNK, next_pow2(per)) if self.CHUNK else next_pow2(per)
        self.TILES = -(-per // self.BLOCK_N)
        self.slice = self.TILES * self.BLOCK_N
        self.programs = -(-self.N // self.slice)
        self.EVEN_N = self.N % self.slice == 0
        self.NUM_CHUNKS = self.TILES
        self._refused: set = set()  # launch keys whose cooperative grid the driver would not hold resident

    def grid(self, M: int) -> int:
        return M * self.programs

    def constexprs(self, rv: int) -> tuple:
        """``(sumsq constexprs, normalize constexprs)`` as dicts for row vector ``rv``."""
        got = self._consts.get(rv)
        if got is None:
            x_last, x_keep, w_pol, y_pol = CACHE_POLICIES[self.CACHE_POLICY]
            values = dict(N=self.N, BLOCK_N=self.BLOCK_N, TILES=self.TILES, SPLIT=self.programs,
                          SPLIT_POW2=next_pow2(self.programs), EVEN_N=self.EVEN_N, ROW_VEC=rv, X_KEEP=x_keep,
                          X_LAST=x_last, W_POLICY=w_pol, Y_POLICY=y_pol)
            # In the kernels' parameter order: the direct launch passes them by position.
            got = self._consts[rv] = ({k: values[k] for k in _ks.SUMSQ_CONSTS},
                                      {k: values[k] for k in _ks.NORMALIZE_CONSTS})
        return got

    def __call__(self, x, w, y, M: int, sx: int, sy: int, eps: float, stream: Any = None,
                 options: tuple = (), interpret: Optional[bool] = None) -> None:
        if M == 0:
            return
        vec = self.vec
        rv = vec if not (sx | sy) & (vec - 1) else row_vec(sx, sy, self.elem, self.VEC)
        S = self.programs
        grid = (M, S)
        if interpret is None:
            interpret = not x.is_cuda or _INTERPRET
        if not interpret and self.uses_coop(M, x.get_device()):
            if self._one_launch(x, w, y, M, S, rv, sx, sy, eps, stream, options):
                return
        c1, c2 = self.constexprs(rv)
        if interpret:
            p = x.new_empty(M * S, dtype=_torch().float32)
            k1, k2 = _ks.kernels(True)
            k1[grid](x, p, sx // rv, **c1)
            k2[grid](x, w, y, p, sx // rv, sy // rv, eps, **c2)
            return
        xp, wp, yp = x.data_ptr(), w.data_ptr(), y.data_ptr()
        key = launch_key(x.get_device(), rv, xp, yp, wp, w.dtype, options)
        pair = self._launches.get(key)
        torch = _torch()
        if pair is None or stream is not None:
            # The partial sums live on the launch stream (the caching allocator reuses per stream).
            with torch.cuda.device(key[0]), torch.cuda.stream(torch_stream(stream, x.device)):
                p = torch.empty(M * S, dtype=torch.float32, device=x.device)
                if pair is None:
                    self._first_launch_pair(key, x, w, y, p, grid, sx // rv, sy // rv, eps, c1, c2, options)
                    return
        else:
            p = torch.empty(M * S, dtype=torch.float32, device=x.device)
        handle = stream_handle(stream, key[0])
        pp = p.data_ptr()
        pair[0].call(M, S, handle, xp, pp, sx // rv, *c1.values())
        pair[1].call(M, S, handle, xp, wp, yp, pp, sx // rv, sy // rv, eps, *c2.values())

    def _one_launch(self, x, w, y, M, S, rv, sx, sy, eps, stream, options) -> bool:
        """One launch of the one-launch body: with ``COOP=1`` every program resident (the caller checked
        ``M * S`` against the SMs), with ``COOP=2`` ``R * S`` resident programs looping over the rows.
        Both are cooperative launches: the driver starts the grid only when every program can be resident
        at once, so the barrier never waits on a program that has not started (another kernel holding SMs
        delays the launch; it cannot hang it). False when no workspace can be made now (a graph capture on
        a new stream), or when the driver refuses the grid (fewer SMs than the device has: an MPS thread
        limit, a green context): the caller then runs the two-launch form, which computes the same rows."""
        persist = self.COOP == 2
        dev = x.get_device()
        handle = stream_handle(stream, dev)
        ws = (persist_workspace if persist else workspace)(dev, handle)
        if ws is None:
            return False
        p, c = ws
        xp, wp, yp = x.data_ptr(), w.data_ptr(), y.data_ptr()
        sxv, syv = sx // rv, sy // rv
        key = launch_key(dev, ("persist" if persist else "coop", rv), xp, yp, wp, w.dtype, options)
        if key in self._refused:
            return False
        launch = self._launches.get(key)
        if launch is None:
            with _torch().cuda.device(dev):
                k = self._one_launch_compiled(x, w, y, p, c, M, sxv, syv, rv, options)
            # a persistent grid holds as many row groups as the GPU keeps resident
            groups = resident_programs(k, self.BLOCK_THREADS, dev) // S if persist else 0
            launch = Launch(_direct_call(k), k, groups=groups)
            with self._lock:
                self._launches[key] = launch
        grid = 0
        try:
            if persist:
                R = row_groups(-(-M // self.ROWS_PER_PROGRAM), launch.groups)
                grid = R * S
                launch.call(grid, 1, handle, xp, wp, yp, p.data_ptr(), c.data_ptr(), M, sxv, syv, eps, R,
                            *self.persist_constexprs(rv).values())
            else:
                grid = M * S
                launch.call(M, S, handle, xp, wp, yp, p.data_ptr(), c.data_ptr(), sxv, syv, eps,
                            *self.coop_constexprs(rv).values())
        except RuntimeError as err:
            if not claunch.too_large(err):
                raise
            with self._lock:
                self._refused.add(key)
            _log.warning("rmsnorm: the driver will not hold the %d programs of the one-launch split (COOP=%d, "
                         "%d rows x SPLIT %d) resident at once on device %d (%s); these rows take the two-launch "
                         "form from now on", grid, self.COOP, M, S, dev, err)
            return False
        return True

    def _one_launch_compiled(self, x, w, y, p, c, M, sxv, syv, rv, options):
        """The loaded binary of the one-launch body (``COOP=1`` or ``2``), compiled without launching, for a
        cooperative launch (its programs wait for each other)."""
        opts = dict(self.compile_options(dict(options)), launch_cooperative_grid=True)
        if self.COOP == 2:
            k = _ks.persist_kernel().warmup(x, w, y, p, c, M, sxv, syv, 1e-6, 1, grid=(1,),
                                            **self.persist_constexprs(rv), **opts)
        else:
            k = _ks.coop_kernel().warmup(x, w, y, p, c, sxv, syv, 1e-6, grid=(M, self.programs),
                                         **self.coop_constexprs(rv), **opts)
        k.run  # loading the binary fills n_regs and the function handle
        return k

    def persist_constexprs(self, rv: int) -> dict:
        got = self._consts.get(("persist", rv))
        if got is None:
            values = dict(self.coop_constexprs(rv), ROWS=self.ROWS_PER_PROGRAM)
            got = self._consts[("persist", rv)] = {k: values[k] for k in _ks.PERSIST_CONSTS}
        return got

    def coop_constexprs(self, rv: int) -> dict:
        got = self._consts.get(("coop", rv))
        if got is None:
            x_last, _, w_pol, y_pol = CACHE_POLICIES[self.CACHE_POLICY]
            values = dict(N=self.N, BLOCK_N=self.BLOCK_N, SPLIT=self.programs, SPLIT_POW2=next_pow2(self.programs),
                          EVEN_N=self.EVEN_N, ROW_VEC=rv, X_LAST=x_last, W_POLICY=w_pol, Y_POLICY=y_pol)
            got = self._consts[("coop", rv)] = {k: values[k] for k in _ks.COOP_CONSTS}
        return got

    def _first_launch_pair(self, key, x, w, y, p, grid, sxv, syv, eps, c1, c2, options) -> None:
        opts = self.compile_options(dict(options))
        k1, k2 = _ks.kernels(False)
        a = k1[grid](x, p, sxv, **c1, **opts)
        b = k2[grid](x, w, y, p, sxv, syv, eps, **c2, **opts)
        pair = (Launch(_direct_call(a), a), Launch(_direct_call(b), b))
        with self._lock:
            self._launches[key] = pair

    def uses_coop(self, M: int, dev: int) -> bool:
        """True when a launch of ``M`` rows on device ``dev`` takes the one-launch form."""
        if self.COOP == 2:
            return self.TILES == 1
        # COOP=1's wait polls with a PTX acquire load: on ROCm its rows take the two-launch form
        return bool(self.COOP) and self.TILES == 1 and not on_rocm() and M * self.programs <= sm_count(dev)

    def compiled(self, x, w, y, M: int, sx: int, sy: int, options: tuple = ()):
        """The ``CompiledKernel`` a launch of these rows runs, loaded: the one-launch kernel where ``COOP``
        takes it, else the normalize kernel (the heavier of the two; the partial-sum kernel is compiled
        and loaded too, so a precompiled config launches without compiling)."""
        torch = _torch()
        rv = row_vec(sx, sy, self.elem, self.VEC)
        dev = x.get_device()
        opts = self.compile_options(dict(options))
        grid = (M, self.programs)
        with torch.cuda.device(dev):
            if self.uses_coop(M, dev):
                # workspaces of the right kinds; their contents do not matter to a compile
                p = torch.empty(2 * MAX_SPLIT, dtype=torch.float32, device=x.device)  # ROWS * SPLIT <= 128
                c = torch.empty(2, dtype=torch.int32, device=x.device)
                return self._one_launch_compiled(x, w, y, p, c, M, sx // rv, sy // rv, rv, options)
            c1, c2 = self.constexprs(rv)
            p = torch.empty(M * self.programs, dtype=torch.float32, device=x.device)
            k1, k2 = _ks.kernels(False)
            k1.warmup(x, p, sx // rv, grid=grid, **c1, **opts).run
            k = k2.warmup(x, w, y, p, sx // rv, sy // rv, 1e-6, grid=grid, **c2, **opts)
            k.run  # loading the binary fills n_regs / n_spills
        return k
