"""Registers the ``rmsnorm`` adopter with flyautotune (entry point ``rmsnorm``)."""

from __future__ import annotations

import flyautotune as fat

from . import api


@fat.hookimpl
def flyautotune_register_adopters(register):
    register(
        fat.Adopter(
            name="rmsnorm",
            tuner=api.tuned_launch,
            entry=api.rmsnorm_autotuned,
            tuner_args=api.tuner_args,
            example=api.example,
            bytes_moved=api.bytes_moved,
            compile_spec=api.compile_spec,
            description="RMSNorm over the last dimension (Triton): rows in registers, or two passes "
                        "over L2 for very long rows",
        )
    )
