"""The backend on a real NVIDIA GPU (skipped without one)."""

import pytest
import torch

import flyautotune as fat
from flyautotune_cuda import cuda_benchmark, hooks

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.version.hip is not None,
                       reason="needs an NVIDIA CUDA GPU (the CPU tests fake devices and targets)"),
]


def test_target_of_the_real_device():
    major, minor = torch.cuda.get_device_capability()
    assert hooks.flyautotune_target(device=torch.device("cuda")) == fat.Target("cuda", f"sm_{major}{minor}", 32)


def test_cache_key_names_the_device_and_driver():
    t = hooks.flyautotune_target(device=torch.device("cuda"))
    axes = hooks.flyautotune_cache_key(target=t)
    assert torch.cuda.get_device_name() in axes["cuda.devices"][0]
    assert isinstance(axes["cuda.driver"], int) and axes["cuda.driver"] >= 10000


def test_longer_kernels_time_longer_and_setup_is_not_timed():
    short = lambda: torch.cuda._sleep(100_000)  # noqa: E731
    long = lambda: torch.cuda._sleep(800_000)  # noqa: E731
    t_short = cuda_benchmark(short, None, warmup=2, rep=10)
    t_long = cuda_benchmark(long, None, warmup=2, rep=10)
    t_short_slow_setup = cuda_benchmark(short, long, warmup=2, rep=10)
    assert t_long > 4 * t_short
    assert t_short_slow_setup < 0.5 * t_long


def test_benchmark_times_the_given_stream():
    side = torch.cuda.Stream()
    seen = []
    t = cuda_benchmark(lambda: seen.append(torch.cuda.current_stream()) or torch.cuda._sleep(100_000),
                       None, stream=side, warmup=1, rep=3)
    assert t > 0 and all(s == side for s in seen)
