"""The hook contract between the flyautotune core and its plugins.

Every hook is called with keyword arguments. An implementation may accept fewer
arguments than its spec, so a spec can grow without breaking plugins.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

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
    rotations: Sequence[Callable[[], Any]],
    cutoff_ms: Optional[float],
) -> Any:
    """Time one candidate.

    Called once per candidate and per re-timing round during a search
    (unless ``do_bench=`` was given to ``autotune``).

    :param fn: runs one launch of the candidate, on ``stream``.
    :param setup: runs untimed before every timed rep (restore / reset of
        tensors), or ``None``. When given, launches must not be batched into
        one graph replay (the setup could not run between them).
    :param target: the target the candidate runs on.
    :param stream: the launch stream (a torch stream object) or ``None`` on
        devices without streams.
    :param warmup: number of untimed warm-up launches.
    :param rep: number of timed launches.
    :param rotations: the same launch over distinct copies of its inputs
        (``rotations[0]`` is ``fn``); launching them round-robin keeps the
        inputs cold in the caches, as real use does. Empty when the launch
        cannot be rotated.
    :param cutoff_ms: when the first timed launch takes longer than this,
        stop and report that launch (the candidate cannot win), or ``None``.
    :returns: the time of one launch in milliseconds (a float), or a
        :class:`flyautotune.Measurement` with its spread and method, or
        ``None`` when this plugin does not own ``target``. Stops at first
        non-None result.
    """


@hookspec
def flyautotune_register_adopters(register: Callable[[Any], None]) -> None:
    """Register kernel adopters.

    Called once when the plugin manager is built.

    :param register: call ``register(Adopter(...))`` for each adopter; two
        adopters with one name is an error naming both distributions.
    :returns: nothing.
    """


@hookspec(firstresult=True)
def flyautotune_store() -> Any:
    """Provide the tuning store: where winners and per-candidate timings live.

    Called whenever a tuner misses its in-memory winner (never on a cache
    hit), by ``flyautotune show/export/import/clear``, and by reports. The
    core's own SQLite store (``flyautotune.store``, one file per user under
    ``FLYAUTOTUNE_CACHE_DIR``) is registered ``trylast``; a plugin or a test
    can return another object with the same methods (``get``,
    ``get_timings``, ``put``, ``delete``, ``entries``, ``clear``; see
    :class:`flyautotune.store.Store`).

    :returns: the store object, or ``None`` to leave the choice to the next
        plugin. Stops at first non-None result.
    """


@hookspec
def flyautotune_tuning_event(event: Mapping[str, Any]) -> None:
    """Receive one tuning event.

    Called for every event of every tuner: ``select`` (where a config came
    from), ``search_start``, ``candidate`` (one timed config: its time,
    spread and method, or its error), ``search_end`` (winner, margin over the
    default, duration). The JSON-lines log (``FLYAUTOTUNE_EVENT_LOG``),
    ``add_listener`` callbacks and the command line's progress display are
    implementations of this hook.

    :param event: a plain dict with an ``event`` field and JSON-serializable
        values; do not keep or change it.
    :returns: nothing. An exception is logged and never reaches the tune.
    """


@hookspec
def flyautotune_report_targets() -> Mapping[str, Target]:
    """Name the targets this backend can compile reports for without a GPU.

    Called by ``flyautotune report --target`` to parse and list target names.

    :returns: target name -> ``Target`` (``{"gfx942": Target("rocm",
        "gfx942", 64)}``), or ``None``/empty.
    """


@hookspec(firstresult=True)
def flyautotune_compile_report(spec: Any, config: Any, hints: Mapping[str, Any], target: Target) -> Any:
    """Cross-compile one candidate for a target and read its resources.

    Called by ``flyautotune report`` once per candidate config.

    :param spec: a :class:`flyautotune.report.KernelSpec`: the Triton kernel,
        its signature, constexprs, launch-derived options and runtime values.
    :param config: the candidate ``Config``.
    :param hints: the merged compile hints to build with (the spec's options
        under the config's hints).
    :param target: the target to compile for.
    :returns: a :class:`flyautotune.report.ResourceRow`, or ``None`` when this
        plugin does not own ``target``. Stops at first non-None result.
    """
