"""The hook contract between the flyautotune core and its plugins.

Every hook is called with keyword arguments. An implementation may accept fewer
arguments than its spec, so a spec can grow without breaking plugins.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from ._markers import hookspec
from .target import Target


@hookspec(firstresult=True)
def flyautotune_target(device: Any) -> Optional[Target]:
    """Describe the compile target behind a torch device.

    Called once per device the first time a tuner runs on it (the result is
    cached per device), and by ``flyautotune plugins`` / ``fat.target_for``.

    :param device: a ``torch.device`` (``cpu``, ``cuda:0``, ...).
    :returns: ``Target(backend, arch, warp_size)`` when this plugin owns the
        device, else ``None``. Stops at first non-None result.
    """


@hookspec
def flyautotune_validate_hints(hints: Mapping[str, Any], target: Target) -> None:
    """Reject compile hints the backend cannot honour.

    Called for every candidate config (merged over the caller's hints) before
    any search or launch, so an unroutable hint fails before time is spent.

    :param hints: the merged hint snapshot, name -> value (already
        type-checked by the core; ``None`` values are omitted).
    :param target: the target the kernel will be compiled for.
    :returns: nothing; raise ``ValueError``/``TypeError`` naming the hint, the
        value and what would be accepted. Plugins that do not own ``target``
        return without looking.
    """


@hookspec(firstresult=True)
def flyautotune_lower_compile_hints(ir: Any, hints: Mapping[str, Any], target: Target) -> Any:
    """Materialize a hint snapshot onto kernel IR or compile options.

    Called by ``fat.lower_compile_hints`` (and by adopters' factories) just
    before compilation.

    :param ir: what is about to be compiled: an MLIR module (changed in place
        and returned), or a Triton ``JITFunction`` / ``None`` for Triton
        launches (return the compile-option dict to pass to the launch).
    :param hints: the merged snapshot, name -> value, detached from any
        shared state.
    :param target: the target being compiled for.
    :returns: the lowered IR or the option dict; ``None`` when this plugin has
        nothing to do. Stops at first non-None result.
    """


@hookspec
def flyautotune_cache_key(target: Target) -> Mapping[str, Any]:
    """Contribute extra cache-key axes for a target.

    Called once per target per process; the results of every plugin are
    merged (a later plugin may not silently overwrite another's axis: names
    should be prefixed by the plugin, e.g. ``rocm.hip``).

    :param target: the target being keyed.
    :returns: a mapping of axis name -> JSON-serializable value (arch,
        toolchain fingerprint, cache-invalidating environment variables), or
        ``None``/empty when the plugin has nothing to add.
    """


@hookspec(firstresult=True)
def flyautotune_benchmark(
    fn: Callable[[], Any],
    setup: Optional[Callable[[], Any]],
    target: Target,
    stream: Any,
    warmup: int,
    rep: int,
) -> Optional[float]:
    """Time one candidate.

    Called once per candidate during a search (unless ``do_bench=`` was
    given to ``autotune``).

    :param fn: runs one launch of the candidate, on ``stream``.
    :param setup: runs untimed before every timed rep (restore / reset of
        tensors), or ``None``.
    :param target: the target the candidate runs on.
    :param stream: the launch stream (a torch stream object) or ``None`` on
        devices without streams.
    :param warmup: number of untimed warm-up launches.
    :param rep: number of timed launches.
    :returns: the median time of one launch in milliseconds, or ``None``
        when this plugin does not own ``target``. Stops at first non-None
        result.
    """


@hookspec
def flyautotune_register_adopters(register: Callable[[Any], None]) -> None:
    """Register kernel adopters.

    Called once when the plugin manager is built.

    :param register: call ``register(Adopter(...))`` for each adopter; two
        adopters with one name is an error naming both distributions.
    :returns: nothing.
    """
