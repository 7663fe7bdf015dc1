"""Which torch device to run on, asked of torch's accelerator registry (no backend named here)."""

from __future__ import annotations

import contextlib
import math
import os
import sys
from typing import Any, Iterator, Optional


def _accelerator() -> Optional[Any]:
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            return None
    acc = getattr(torch, "accelerator", None)
    if acc is None or not acc.is_available():
        return None
    return acc


def accelerator_type() -> Optional[str]:
    """The device type of this machine's accelerator (what ``torch.accelerator`` reports), or None."""
    acc = _accelerator()
    return None if acc is None else acc.current_accelerator().type


def device_count() -> int:
    """How many accelerator devices torch sees (0 without one)."""
    acc = _accelerator()
    return 0 if acc is None else int(acc.device_count())


def default_device() -> str:
    """``<accelerator>:0`` when torch sees an accelerator, else ``cpu``."""
    kind = accelerator_type()
    return f"{kind}:0" if kind else "cpu"


def current_device() -> Any:
    """The current accelerator device (a ``torch.device``), or the CPU."""
    import torch

    acc = _accelerator()
    if acc is None:
        return torch.device("cpu")
    return torch.device(acc.current_accelerator().type, acc.current_device_index())


#: Above this many input elements Triton's CPU interpreter may run for many minutes (``tune`` and plans
#: refuse such shapes on the CPU unless allowed: ``--allow-slow``, ``allow_slow = true``).
CPU_ELEMENT_LIMIT = 1 << 22


def too_slow_on_cpu(shape: Any) -> str:
    """Why ``shape`` is too large for Triton's CPU interpreter (its element count against
    :data:`CPU_ELEMENT_LIMIT`), or ``""``; callers add how to opt out."""
    n = math.prod(shape)
    if n <= CPU_ELEMENT_LIMIT:
        return ""
    return (f"{'x'.join(map(str, shape))} has {n} elements, more than the {CPU_ELEMENT_LIMIT} Triton's CPU "
            f"interpreter finishes in reasonable time")


def use_triton_interpreter() -> None:
    """Run Triton kernels under Triton's interpreter on the CPU (``TRITON_INTERPRET=1``, unless the
    user set it): the one place flyautotune sets a variable, before Triton's ``@jit`` reads it. Callers
    that return to the user's program run inside :func:`restore_triton_interpret`."""
    os.environ.setdefault("TRITON_INTERPRET", "1")


@contextlib.contextmanager
def restore_triton_interpret() -> Iterator[None]:
    """``TRITON_INTERPRET`` as it was before the block, whatever the block set: a CPU tune run from
    Python (``flyautotune.cli.main``, ``run_serial``) leaves the program's environment, and the
    processes it starts later, as it found them."""
    before = os.environ.get("TRITON_INTERPRET")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before


def triton_built_for_interpreter() -> bool:
    """True when this process imported Triton's language library while its interpreter was on: its
    library functions (the combine of ``tl.sum``, ...) are then interpreter functions for the rest of
    the process, whatever ``TRITON_INTERPRET`` says now, and no kernel using them compiles for a GPU."""
    standard = sys.modules.get("triton.language.standard")
    return type(getattr(standard, "sum", None)).__name__ == "InterpretedFunction"


#: Triton's error when an interpreted body calls one of its library functions (``tl.sum``, ...) that was
#: built for GPU compilation because ``TRITON_INTERPRET`` was off when ``triton`` was imported.
_JIT_OUTSIDE_KERNEL = "Cannot call @triton.jit'd outside of the scope of a kernel"

INTERPRETER_HINT = ("flyautotune: this kernel runs under Triton's interpreter (InterpretedFunction) and calls a "
                    "Triton library function (tl.sum, tl.max, ...) that Triton built for GPU compilation: set "
                    "TRITON_INTERPRET=1 in the environment before triton is first imported (for CPU runs and "
                    "tests only; see docs/write_adopter.md, step 2)")


def explain_interpreter_error(exc: BaseException) -> bool:
    """Add :data:`INTERPRETER_HINT` to ``exc`` (a note, shown under its traceback) when it is Triton's
    error for a library function called from an interpreted body; True when it did."""
    if _JIT_OUTSIDE_KERNEL not in str(exc) or INTERPRETER_HINT in getattr(exc, "__notes__", ()):
        return False
    if hasattr(exc, "add_note"):  # Python 3.11+
        exc.add_note(INTERPRETER_HINT)
    else:
        import logging

        logging.getLogger("flyautotune").error("%s", INTERPRETER_HINT)
    return True


#: What Triton reads as "on" in ``TRITON_INTERPRET`` (its C ``getenv_bool``: case-insensitive, not
#: stripped), for a Triton without ``triton.knobs``.
_TRITON_TRUE = ("1", "true", "yes", "on", "y")


def triton_interprets() -> bool:
    """True when Triton runs kernels under its interpreter (``TRITON_INTERPRET``), read as Triton itself
    reads it (``triton.knobs.runtime.interpret``), so whoever asks agrees with what Triton will do: ``y``
    is on, `` 1`` is not."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_INTERPRET", "").lower() in _TRITON_TRUE
