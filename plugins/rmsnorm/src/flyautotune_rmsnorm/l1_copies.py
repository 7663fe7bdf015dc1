"""x's copies through L1 (``cp.async.ca``) for the staged-rows body on Triton releases that cannot ask.

The staged-rows body (``ASYNC=1``, :mod:`.kernel_async`) copies x global -> shared with 16-byte
``cp.async``. Through L1 (``.ca``, as QuACK copies) it is faster than bypassing it (``.cg``): on an H200 at
4096 x 1000 bf16, 3261 against 3227 GB/s with x cold and 4814 against 4261 with x just written
(``bench/gluon_probe.py``, 2026-12-04); at 8192 x 1024 the two read alike. The body asks for ``.ca``
(``cache_modifier=".ca"``), which Triton 3.9 honours. Triton 3.6 to 3.8 lower every 16-byte copy to
``.cg`` whatever the argument says, so on those releases this module rewrites the copies in the body's PTX,
in Triton's own ``ptx`` stage, through the stage-inspection hook Triton offers
(``triton.knobs.runtime.add_stages_inspection_hook``):

* only kernels named in :data:`EDITED` (the body, ``rmsnorm_async``) are edited, and only their
  ``cp.async.cg.shared.global`` copies, which become ``cp.async.ca.shared.global``: the same copy with
  another cache hint, so the kernel computes the same values either way;
* a hook installed before (a profiler's, the user's) still runs, first, and keeps its part of the cache key;
* Triton 3.7 and 3.8 key a compile by the hook (and their JIT asks the hook for that key on every launch of
  every kernel while one is set), so there the hook is set only while this package compiles the body
  (:func:`editing`), adds its own part to the key of what it edits, and is taken out again: no other
  kernel's launch, key or binary changes;
* Triton 3.6 does not key a compile by the hook (nor call it on launches), so an edited and an unedited
  binary of the body would share a cache entry: there the hook stays from the import of
  :mod:`.kernel_async` on (:func:`install`), so every compile of the body in the process is edited, and is
  wrapped again before the body's next compile where another hook took its place. A binary compiled while
  it was displaced keeps ``.cg``, and its first launch warns (:func:`check`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import threading
import warnings
from typing import Any, Iterator

#: Kernels whose copies are made ``.ca``.
EDITED = frozenset({"rmsnorm_async"})
#: What the hook adds to the cache key of the compiles it edits (Triton 3.7 and 3.8).
KEY_PART = "-flyautotune_rmsnorm.l1_copies.v1"
_CG = re.compile(r"\bcp\.async\.cg\.shared\.global\b")
_lock = threading.Lock()
_local = threading.local()
_scopes = 0  # editing() blocks open in any thread (Triton 3.7-3.8), under _lock
_warned: set = set()


def _version() -> tuple:
    import triton

    try:
        return tuple(int(p) for p in triton.__version__.split(".")[:2])
    except ValueError:  # a development build: assume it is recent
        return (99, 0)


@functools.lru_cache(maxsize=None)
def mode() -> str:
    """How this Triton gets the body's copies through L1: ``"native"`` (3.9 and later honour
    ``cache_modifier=".ca"``; checked by cross-compiling on 3.6, 3.7.1, 3.8.0 and 3.9.0), ``"scoped"``
    (3.7, 3.8: the hook while the body compiles) or ``"process"`` (3.6 and before: the hook from import on)."""
    v = _version()
    return "native" if v >= (3, 9) else "scoped" if v >= (3, 7) else "process"


def native() -> bool:
    """True when no PTX is edited: this Triton honours ``cache_modifier=".ca"``."""
    return mode() == "native"


def l1_ptx(ptx: str) -> str:
    """``ptx`` with every 16-byte ``cp.async.cg`` global -> shared copy made ``.ca``."""
    return _CG.sub("cp.async.ca.shared.global", ptx)


def _editing_here() -> bool:
    """True where this thread's compiles are edited: always in ``"process"`` mode, else inside :func:`editing`."""
    return mode() == "process" or getattr(_local, "depth", 0) > 0


def _wrap(prev: Any) -> Any:
    def hook(*args):
        if not args:  # Triton 3.7 and later ask first for the hook's part of the cache key
            key, digest = prev() if prev is not None else ("", "")
            if mode() == "scoped" and _editing_here():
                key += KEY_PART
                digest = hashlib.sha256((digest + KEY_PART).encode()).hexdigest()
            return key, digest
        backend, stages, options, language, capability = args
        if prev is not None:
            prev(backend, stages, options, language, capability)
        make_ptx = stages.get("ptx")
        if make_ptx is None or not _editing_here():  # not an NVIDIA compile, or not one of ours
            return

        def ptx_stage(src, metadata):
            ptx = make_ptx(src, metadata)
            return l1_ptx(ptx) if metadata.get("name") in EDITED else ptx

        stages["ptx"] = ptx_stage

    hook.flyautotune_l1_copies = True
    hook.wrapped = prev
    return hook


def installed() -> bool:
    """True when Triton's current stage hook is this module's (or calls it: a hook chained after it)."""
    from triton import knobs

    hook = knobs.runtime.add_stages_inspection_hook
    seen = set()
    while hook is not None and id(hook) not in seen:
        if getattr(hook, "flyautotune_l1_copies", False):
            return True
        seen.add(id(hook))
        hook = getattr(hook, "wrapped", None)
    return False


def install() -> None:
    """On Triton 3.6 and before, put the PTX edit in Triton's ``ptx`` stage for the rest of the process
    (idempotent; a hook of another's set since is kept and runs first). Elsewhere nothing: Triton 3.9
    needs no edit, and 3.7-3.8 get it only inside :func:`editing`."""
    if mode() != "process":
        return
    from triton import knobs

    with _lock:
        if not installed():
            knobs.runtime.add_stages_inspection_hook = _wrap(knobs.runtime.add_stages_inspection_hook)


@contextlib.contextmanager
def editing() -> Iterator[None]:
    """Around this package's compiles of the body: on this thread, the compiles in the block are edited
    (and, on Triton 3.7-3.8, keyed apart from unedited ones); the hook is taken out when the last block
    in the process ends, unless another was set in its place meanwhile."""
    m = mode()
    if m == "native":
        yield
        return
    if m == "process":
        install()
        yield
        return
    global _scopes
    from triton import knobs

    with _lock:
        if not installed():
            knobs.runtime.add_stages_inspection_hook = _wrap(knobs.runtime.add_stages_inspection_hook)
        _scopes += 1
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1
        with _lock:
            _scopes -= 1
            current = knobs.runtime.add_stages_inspection_hook
            if _scopes == 0 and getattr(current, "flyautotune_l1_copies", False):
                knobs.runtime.add_stages_inspection_hook = current.wrapped


def check(compiled: Any, what: str) -> bool:
    """True when ``compiled`` (a Triton ``CompiledKernel`` of the body) copies x through L1; else warn once
    per ``what`` (the values are the same; only the speed is not) and return False."""
    ptx = compiled.asm.get("ptx", "") if hasattr(compiled.asm, "get") else ""
    if not _CG.search(ptx):
        return True
    if what not in _warned:
        _warned.add(what)
        warnings.warn(
            f"flyautotune-rmsnorm: {what} was compiled with x's copies bypassing L1 (cp.async.cg): Triton's "
            f"stage-inspection hook (triton.knobs.runtime.add_stages_inspection_hook) did not run this "
            f"package's PTX edit when it was built, so Triton's cache may hold that binary. The output is "
            f"the same; the body runs slower with x in L2. Clear Triton's cache (TRITON_CACHE_DIR) to rebuild "
            f"it with .ca copies.", RuntimeWarning, stacklevel=3)
    return False
