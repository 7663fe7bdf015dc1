"""flyautotune-rmsnorm: an RMSNorm kernel (Triton) adopted by flyautotune.

``rmsnorm(x, weight)`` runs the default config; ``rmsnorm_autotuned(x, weight)``
uses the tuned winner for ``(M, N, dtype)``. Without a GPU both run under
Triton's interpreter.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "cuda_space", "default_config", "make_launcher", "rmsnorm", "rmsnorm_autotuned",
           "rocm_space"]

#: Where each public name lives. They are imported on first use: the package is imported whenever
#: flyautotune loads its plugins (the entry point is ``flyautotune_rmsnorm.hooks``), and the kernels
#: import torch and Triton, which a command or program that never uses RMSNorm should not pay for.
_LAZY = {"rmsnorm": "api", "rmsnorm_autotuned": "api", "make_launcher": "factory", "cuda_space": "space",
         "default_config": "space", "rocm_space": "space"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
