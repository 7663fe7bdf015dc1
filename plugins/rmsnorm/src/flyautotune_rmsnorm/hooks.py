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
                        "over L2 for very long rows; on Hopper with CuTe DSL, long rows across a cluster",
        )
    )


@fat.hookimpl
def flyautotune_cache_key(target):
    """The CuTe DSL version on CUDA, where it is installed: the cluster body (``COOP=3``) is built by it,
    so a winner timed with one version is not reused with another."""
    if target.backend != "cuda":
        return None
    from . import kernel_cluster

    version = kernel_cluster.version()
    return {"rmsnorm.cutlass_dsl": version} if version else None
