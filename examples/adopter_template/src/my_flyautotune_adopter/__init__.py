"""A template flyautotune adopter: ``y = alpha * x`` as one Triton kernel."""

__all__ = ["vscale", "vscale_default"]


def __getattr__(name):
    # Imported on first use: flyautotune imports this package (through hooks.py) for every command and
    # every program that tunes, and the kernel module imports torch and Triton.
    if name in __all__:
        from . import kernel

        return getattr(kernel, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
