"""Registers the ``rmsnorm`` adopter with flyautotune (entry point ``rmsnorm``)."""

from __future__ import annotations

import flyautotune as fat


@fat.hookimpl
def flyautotune_register_adopters(register):
    from . import api  # torch and Triton: imported when an adopter is first asked for, not when plugins load

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
    """On CUDA: the CuTe DSL version, where it is installed (the cluster body, ``COOP=3``, is built by
    it, so a winner timed with one version is not reused with another), and ``rmsnorm.pdl`` while the
    one-launch body runs with programmatic dependent launch (``FLYAUTOTUNE_RMSNORM_PDL=1``; it changes
    every small shape's timing, so a winner timed with it is not reused without it). These axes enter
    every tuner's key (the hook has no tuner to look at), so the default adds none for PDL."""
    if target.backend != "cuda":
        return None
    from . import kernel_cluster
    from .factory import pdl_for_arch

    key = {}
    if pdl_for_arch(target.arch):
        key["rmsnorm.pdl"] = 1
    version = kernel_cluster.version()
    if version:
        key["rmsnorm.cutlass_dsl"] = version
    return key or None
