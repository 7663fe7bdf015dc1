"""A template flyautotune adopter: ``y = alpha * x`` as one Triton kernel."""

from .kernel import vscale, vscale_default

__all__ = ["vscale", "vscale_default"]
