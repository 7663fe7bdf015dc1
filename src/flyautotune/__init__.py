"""flyautotune: a backend-agnostic autotuner for GPU kernels.

The public face: what users and plugins import. Everything else is internal.
"""

__version__ = "0.1.0"

from ._markers import hookimpl, hookspec  # noqa: E402
from .adopter import Adopter, DuplicateAdopterError  # noqa: E402
from .config import Config  # noqa: E402
from .context import (  # noqa: E402
    compile_hints,
    current_hint_key,
    current_hints,
    current_target,
    lower_compile_hints,
    target_context,
)
from .events import add_listener, remove_listener  # noqa: E402
from .hints import normalize_hint  # noqa: E402
from .measurement import Measurement  # noqa: E402
from .plugins import (  # noqa: E402
    PluginLoadError,
    adopters,
    build_plugin_manager,
    get_adopter,
    plugin_manager,
    register,
)
from .target import Target  # noqa: E402
from .scale.distributed import distributed  # noqa: E402
from .targets import target_for  # noqa: E402
from .tuning.checks import IncompatibleConfigError  # noqa: E402
from .tuning.decorator import Autotuner, autotune  # noqa: E402
from .tuning.search import AutotuneError  # noqa: E402
from .tuning.selection import Selection  # noqa: E402
from .logs import configure_from_env as _configure_logging  # noqa: E402


def clear_caches() -> None:
    """Forget cached targets and backend key axes, and every tuner's in-memory winners
    (after the plugin set changes, or a variable such as ``FLYAUTOTUNE_CACHE_DIR`` changed in place)."""
    from . import targets
    from .tuning.decorator import clear_all

    targets.clear()
    clear_all()


_configure_logging()

__all__ = [
    # decorating and running
    "autotune", "Autotuner", "Config", "Selection", "compile_hints", "current_hints", "distributed",
    # adopters
    "Adopter", "adopters", "get_adopter", "register",
    # for backend plugins and launchers
    "hookimpl", "hookspec", "Target", "Measurement", "target_for", "current_target", "target_context",
    "lower_compile_hints", "current_hint_key", "normalize_hint",
    # the plugin manager and events
    "plugin_manager", "build_plugin_manager", "add_listener", "remove_listener", "clear_caches",
    # errors
    "AutotuneError", "IncompatibleConfigError", "DuplicateAdopterError", "PluginLoadError",
    "__version__",
]
