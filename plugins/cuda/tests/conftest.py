"""One plugin manager per test: the built-ins plus this backend, nothing else installed."""

import pytest

import flyautotune as fat
import flyautotune_cuda.hooks as cuda_hooks


@pytest.fixture
def pm():
    manager = fat.build_plugin_manager(entry_points=False)
    manager.register(cuda_hooks, name="cuda")
    return manager


@pytest.fixture
def h100(monkeypatch):
    """Pretend this torch is a CUDA build on a machine with an sm_90 GPU."""
    import torch

    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return torch.device("cuda", 0)
