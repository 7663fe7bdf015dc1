"""flyautotune: a backend-agnostic autotuner for GPU kernels."""

__version__ = "0.1.0"

from ._markers import hookimpl, hookspec  # noqa: E402
from .adopter import Adopter, DuplicateAdopterError  # noqa: E402
from .config import Config  # noqa: E402
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

__all__ = [
    "Adopter",
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
