"""Registers the ``rmsnorm`` adopter with flyautotune (entry point ``rmsnorm``)."""

from __future__ import annotations

import flyautotune as fat

from . import api, space
from .factory import make_launcher


@fat.hookimpl
def flyautotune_register_adopters(register):
    register(
        fat.Adopter(
            name="rmsnorm",
            factory=make_launcher,
            specialize=api.specialize,
            configs=space.configs,
            default=space.default,
            key=("M", "N", "dtype"),
            knobs=space.KNOBS,
            entry=api.rmsnorm_autotuned,
            example=api.example,
            bytes_moved=api.bytes_moved,
            compile_spec=api.compile_spec,
            description="RMSNorm over the last dimension (Triton): rows in registers, or two passes "
                        "over L2 for very long rows",
        )
    )
