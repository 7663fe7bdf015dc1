"""The kernel, its launch, and the tuned entry point.

``BLOCK`` (elements per program) is a structural knob: it is a kwarg of the
launch and a constexpr of the kernel. ``num_warps`` is a compile hint: the
backend plugin turns it into a Triton compile option; it is never a kernel
argument.
"""

from __future__ import annotations

import threading

import flyautotune as fat
import triton
import triton.language as tl


def _vscale_body(X, Y, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask)
    # Compute in fp32 and round once: the same answer for bf16, fp16 and fp32 inputs.
    y = x.to(tl.float32) * alpha
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


# One body, two runners: compiled for GPUs, interpreted for CPU tensors (no GPU needed).
_jit = triton.runtime.jit.JITFunction(_vscale_body)
_interpreted = None
_lock = threading.Lock()


def kernel_for(device_type: str = "cuda"):
    """The Triton kernel for a device type: a JITFunction, or the interpreter for ``"cpu"``."""
    global _interpreted
    if device_type != "cpu":
        return _jit
    with _lock:
        if _interpreted is None:
            from triton.runtime.interpreter import InterpretedFunction

            _interpreted = InterpretedFunction(_vscale_body)
    return _interpreted


def _launch(x, y, n, alpha, BLOCK=None, stream=None):
    """One launch with the config's ``BLOCK`` (injected by the tuner) and its hints."""
    options = fat.lower_compile_hints()  # e.g. {"num_warps": 4} on a GPU backend, {} on the CPU
    grid = (triton.cdiv(n, BLOCK),)
    if stream is None:
        kernel_for(x.device.type)[grid](x, y, n, alpha, BLOCK=BLOCK, **options)
    else:
        import torch

        with torch.cuda.stream(stream):
            kernel_for(x.device.type)[grid](x, y, n, alpha, BLOCK=BLOCK, **options)
    return y


CONFIGS = [fat.Config(BLOCK=b, num_warps=w) for b, w in ((64, 1), (128, 2), (256, 4), (1024, 4))]


def default_config(n, **_):
    """The zero-search pick: wide blocks for long vectors."""
    return fat.Config(BLOCK=1024 if n >= 4096 else 256, num_warps=4)


tuned = fat.autotune(configs=CONFIGS, key=["n"], name="vscale", default=default_config)(_launch)


def vscale(x, alpha=2.0):
    """``alpha * x`` with the tuned config for ``x.numel()`` (stored winner, else the default)."""
    import torch

    y = torch.empty_like(x)
    tuned(x, y, x.numel(), float(alpha))
    return y


def tuner_args(x, alpha=2.0):
    """The tuned launch's ``(args, kwargs)`` for a ``vscale`` call (what ``vscale`` prepares)."""
    import torch

    return (x, torch.empty_like(x), x.numel(), float(alpha)), {}


def vscale_default(x, alpha=2.0):
    """``alpha * x`` with the default config; never tunes."""
    import torch

    y = torch.empty_like(x)
    n = x.numel()
    config = default_config(n)
    options = fat.lower_compile_hints(target=fat.target_for(x.device), hints=config.hints)
    block = config.kwargs["BLOCK"]
    kernel_for(x.device.type)[(triton.cdiv(n, block),)](x, y, n, float(alpha), BLOCK=block, **options)
    return y
