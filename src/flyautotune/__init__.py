"""flyautotune: a backend-agnostic autotuner for GPU kernels."""

__version__ = "0.1.0"

from ._markers import hookimpl, hookspec  # noqa: E402
from .adopter import Adopter, DuplicateAdopterError  # noqa: E402
from .autotuner import (  # noqa: E402
    AutotuneError,
    Autotuner,
    IncompatibleConfigError,
    autotune,
    current_target,
    lower_compile_hints,
    target_context,
    target_for,
)
from .config import Config  # noqa: E402
from .events import add_listener, remove_listener  # noqa: E402
from .hints import compile_hints, current_hints  # noqa: E402
from .plugins import (  # noqa: E402
    PluginLoadError,
    adopters,
    build_plugin_manager,
    get_adopter,
    plugin_manager,
    register,
)
from .target import Target  # noqa: E402
from .logs import configure_from_env as _configure_logging  # noqa: E402

_configure_logging()

__all__ = [
    "Adopter",
    "AutotuneError",
    "Autotuner",
    "IncompatibleConfigError",
    "add_listener",
    "autotune",
    "current_target",
    "lower_compile_hints",
    "remove_listener",
    "target_context",
    "target_for",
    "Config",
    "DuplicateAdopterError",
    "PluginLoadError",
    "Target",
    "__version__",
    "adopters",
    "build_plugin_manager",
    "compile_hints",
    "current_hints",
    "get_adopter",
    "hookimpl",
    "hookspec",
    "plugin_manager",
    "register",
]
