"""Every config a space offers is one the factory builds, on every backend."""

import pytest
import torch

from flyautotune_rmsnorm import make_launcher
from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance
from flyautotune_rmsnorm.space import KNOBS, default_config, space_for

MS = (1, 4, 32, 200, 1024, 65536)
NS = (1, 7, 33, 64, 100, 128, 256, 300, 512, 1000, 1001, 2048, 3000, 3001, 4096, 8192, 16384, 32768, 40000,
      65536, 131072, 262144)


@pytest.mark.parametrize("backend", ["cuda", "rocm", "cpu"])
@pytest.mark.parametrize("ds", ["bf16", "fp16", "fp32"])
def test_the_factory_builds_every_config_of_the_space(backend, ds):
    refused = []
    for M in MS:
        for N in NS:
            space = space_for(backend, M, N, ds)
            assert space, (backend, M, N, ds)
            default = default_config(M, N, ds, backend).kwargs
            assert backend == "cpu" or any(c.kwargs == default for c in space), (backend, M, N, ds)
            for cfg in space:
                assert set(cfg.kwargs) == set(KNOBS), cfg
                assert set(cfg.hints) <= ({"waves_per_eu"} if backend == "rocm" else set()), cfg
                try:
                    make_launcher(N, ds, **cfg.kwargs)
                except (TypeError, ValueError) as exc:
                    refused.append(f"{backend} {M}x{N} {ds} {cfg}: {exc}")
    assert not refused, "\n".join(refused)


def test_a_cpu_tune_of_long_rows_runs_every_candidate():
    """flyautotune tune rmsnorm --shape 4x65536 on CPU: every candidate runs and is right."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 65536, generator=g)
    w = torch.rand(65536, generator=g) + 0.5
    ref = rmsnorm_reference(x, w)
    for cfg in space_for("cpu", 4, 65536, "fp32"):
        y = torch.full_like(x, float("nan"))
        make_launcher(65536, "fp32", **cfg.kwargs)(x, w, y, 4, 65536, 65536, 1e-6)
        assert relative_error(y, ref) <= tolerance(torch.float32), cfg
