"""x's copies through L1 (``cp.async.ca``) for the staged-rows body on Triton releases that cannot ask.

The staged-rows body (``ASYNC=1``, :mod:`.kernel_async`) copies x global -> shared with 16-byte
``cp.async``. Through L1 (``.ca``, as QuACK copies) it is faster than bypassing it (``.cg``): on an H200 at
4096 x 1000 bf16, 3254 against 3220 GB/s with x cold and 4816 against 4252 with x just written
(``bench/gluon_probe.py``, 2026-12-04); at 8192 x 1024 the two read alike. The body asks for ``.ca``
(``cache_modifier=".ca"``), which Triton 3.9 honours. Triton 3.6 to 3.8 lower every 16-byte copy to
``.cg`` whatever the argument says, so on those releases this module rewrites the copies in the body's PTX,
in Triton's own ``ptx`` stage, through the stage-inspection hook Triton offers
(``triton.knobs.runtime.add_stages_inspection_hook``):

* only kernels named in :data:`EDITED` (the body, ``rmsnorm_async``) are edited, and only their
  ``cp.async.cg.shared.global`` copies, which become ``cp.async.ca.shared.global``: the same copy with
  another cache hint, so the kernel computes the same values either way;
* a hook installed before (a profiler's, the user's) still runs, first; the cache-key part it gives is
  passed on unchanged, so no other kernel's key or binary changes;
* the hook is installed when :mod:`.kernel_async` is imported, so every compile of the body in the
  process is edited, and a binary Triton caches under the body's key is always the edited one. A hook set
  later in place of this one is wrapped again before the body's next compile (:func:`install`); a binary
  compiled while it was displaced would keep ``.cg``, and the first launch of such a binary warns
  (:func:`check`).
"""

from __future__ import annotations

import functools
import re
import threading
import warnings
from typing import Any

#: Kernels whose copies are made ``.ca``.
EDITED = frozenset({"rmsnorm_async"})
_CG = re.compile(r"\bcp\.async\.cg\.shared\.global\b")
_lock = threading.Lock()
_warned: set = set()


@functools.lru_cache(maxsize=None)
def native() -> bool:
    """True when this Triton honours ``cache_modifier=".ca"`` on 16-byte copies (3.9 and later; checked
    by cross-compiling on 3.6, 3.7.1, 3.8.0 and 3.9.0), so no PTX is edited."""
    import triton

    try:
        major, minor = (int(p) for p in triton.__version__.split(".")[:2])
    except ValueError:  # a development build: assume it is recent
        return True
    return (major, minor) >= (3, 9)


def l1_ptx(ptx: str) -> str:
    """``ptx`` with every 16-byte ``cp.async.cg`` global -> shared copy made ``.ca``."""
    return _CG.sub("cp.async.ca.shared.global", ptx)


def _wrap(prev: Any) -> Any:
    def hook(*args):
        if not args:  # Triton 3.7 and later ask first for the hook's part of the cache key: prev's, unchanged
            return prev() if prev is not None else ("", "")
        backend, stages, options, language, capability = args
        if prev is not None:
            prev(backend, stages, options, language, capability)
        make_ptx = stages.get("ptx")
        if make_ptx is None:  # not an NVIDIA compile
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


def install() -> bool:
    """Put the PTX edit in Triton's ``ptx`` stage (idempotent) where this Triton needs it; True when the
    body's copies will be ``.ca``: natively, or through the hook. A hook of another's set since is kept
    and runs first."""
    if native():
        return True
    from triton import knobs

    with _lock:
        if not installed():
            knobs.runtime.add_stages_inspection_hook = _wrap(knobs.runtime.add_stages_inspection_hook)
    return True


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
