"""flyautotune-cuda: the NVIDIA CUDA backend of flyautotune.

Installed, it is found through the ``flyautotune`` entry point group: CUDA
devices get a ``Target("cuda", "sm_XY", 32)``, compile hints become Triton
compile options, tuning keys carry the CUDA and Triton toolchain, and
candidates are timed with CUDA events.
"""

__version__ = "0.1.0"

from .bench import cuda_benchmark  # noqa: E402
from .hints import check_hints, triton_options  # noqa: E402

__all__ = ["__version__", "check_hints", "cuda_benchmark", "triton_options"]
