"""flyautotune-rmsnorm: an RMSNorm kernel (Triton) adopted by flyautotune.

``rmsnorm(x, weight)`` runs the default config; ``rmsnorm_autotuned(x, weight)``
uses the tuned winner for ``(M, N, dtype)``. Without a GPU both run under
Triton's interpreter.
"""

__version__ = "0.1.0"

from .api import rmsnorm, rmsnorm_autotuned  # noqa: E402
from .factory import make_launcher  # noqa: E402
from .space import cuda_space, default_config, rocm_space  # noqa: E402

__all__ = ["__version__", "cuda_space", "default_config", "make_launcher", "rmsnorm", "rmsnorm_autotuned",
           "rocm_space"]
