"""What flyautotune loads through the entry point: one hook that registers the adopter."""

from __future__ import annotations

import flyautotune as fat

_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def example(shape, dtype, device):
    """Inputs for ``flyautotune tune vscale --shape MxN``: ``((x,), {"alpha": 2.0})``."""
    import torch

    if dtype not in _DTYPES:
        raise ValueError(f"vscale: dtype {dtype!r} is not supported; accepted: {', '.join(_DTYPES)}")
    x = torch.randn(tuple(shape), dtype=getattr(torch, _DTYPES[dtype]), device=device)
    return (x,), {"alpha": 2.0}


def bytes_moved(x, alpha=2.0):
    """Read x once, write y once: lets ``flyautotune tune`` print GB/s."""
    return 2 * x.numel() * x.element_size()


def compile_spec(shape, dtype, config):
    """The Triton kernel a config builds, for ``flyautotune report`` (no GPU needed).

    Returns ``(kernel, signature, constexprs, extra)``; ``extra["values"]`` holds the
    runtime integers of a launch of this shape, which Triton specializes on (``n``
    divisible by 16 compiles to wider loads).
    """
    from . import kernel

    n = 1
    for d in shape:
        n *= int(d)
    signature = {"X": f"*{dtype}", "Y": f"*{dtype}", "n": "i32", "alpha": "fp32"}
    return kernel.kernel_for("cuda"), signature, {"BLOCK": config.kwargs["BLOCK"]}, {"values": {"n": n}}


@fat.hookimpl
def flyautotune_register_adopters(register):
    from . import kernel  # here, not at the top: a command that needs no adopter never imports torch or Triton

    register(fat.Adopter(
        name="vscale",
        tuner=kernel.tuned,
        entry=kernel.vscale,
        tuner_args=kernel.tuner_args,
        example=example,
        bytes_moved=bytes_moved,
        compile_spec=compile_spec,
        description="y = alpha * x (template adopter)",
    ))
