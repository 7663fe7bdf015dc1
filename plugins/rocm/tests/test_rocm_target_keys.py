"""flyautotune_target and flyautotune_cache_key for ROCm."""

import types

import pytest

torch = pytest.importorskip("torch")

import flyautotune as fat  # noqa: E402
from flyautotune_rocm import keys  # noqa: E402


def test_cpu_device_is_not_rocm(pm):
    target = pm.hook.flyautotune_target(device=torch.device("cpu"))
    assert target.backend == "cpu"


def test_cuda_device_without_hip_build_is_not_claimed(pm, monkeypatch):
    # An NVIDIA (or CPU-only) torch build has torch.version.hip = None.
    monkeypatch.setattr(torch.version, "hip", None)
    from flyautotune_rocm.hooks import flyautotune_target

    assert flyautotune_target(device=torch.device("cuda:0")) is None


@pytest.mark.parametrize(
    "gcn_arch, expected",
    [
        ("gfx942:sramecc+:xnack-", fat.Target("rocm", "gfx942", 64)),
        ("gfx950", fat.Target("rocm", "gfx950", 64)),
        ("gfx90a:sramecc+:xnack-", fat.Target("rocm", "gfx90a", 64)),
        ("gfx1100", fat.Target("rocm", "gfx1100", 32)),
        ("gfx1201", fat.Target("rocm", "gfx1201", 32)),
    ],
)
def test_rocm_build_maps_gcn_arch_name(pm, monkeypatch, gcn_arch, expected):
    monkeypatch.setattr(torch.version, "hip", "6.4.43482")
    seen = []

    def props(index):
        seen.append(index)
        return types.SimpleNamespace(gcnArchName=gcn_arch, name="AMD Instinct")

    monkeypatch.setattr(torch.cuda, "get_device_properties", props)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert pm.hook.flyautotune_target(device=torch.device("cuda", 1)) == expected
    assert pm.hook.flyautotune_target(device=torch.device("cuda")) == expected
    assert seen == [1, 3]  # explicit index, then the current device for a bare "cuda"


def test_rocm_build_cpu_device_stays_cpu(pm, monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.4.43482")
    assert pm.hook.flyautotune_target(device=torch.device("cpu")).backend == "cpu"


def test_cache_key_only_for_rocm_targets(pm, gfx942):
    cpu = fat.Target("cpu", "x86_64", 1)
    merged_cpu = pm.hook.flyautotune_cache_key(target=cpu)
    assert not any(k.startswith("rocm.") for axes in merged_cpu if axes for k in axes)
    ours = [axes for axes in pm.hook.flyautotune_cache_key(target=gfx942) if axes and "rocm.arch" in axes]
    assert len(ours) == 1
    axes = ours[0]
    assert axes["rocm.arch"] == "gfx942" and axes["rocm.warp_size"] == 64
    triton = pytest.importorskip("triton")
    assert axes["rocm.triton"] == triton.__version__


def test_cache_key_changes_with_codegen_env_and_hip(monkeypatch, gfx942):
    for name in keys.CODEGEN_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME_IS_NOT_CODEGEN", "x")
    base = keys.cache_key_axes(gfx942)
    assert base["rocm.env"] == {}
    monkeypatch.setenv("AMDGCN_USE_BUFFER_OPS", "0")
    monkeypatch.setenv("FLYDSL_COMPILE_OPT_LEVEL", "3")
    changed = keys.cache_key_axes(gfx942)
    assert changed["rocm.env"] == {"AMDGCN_USE_BUFFER_OPS": "0", "FLYDSL_COMPILE_OPT_LEVEL": "3"}
    assert changed != base
    monkeypatch.setattr(torch.version, "hip", "6.4.43482")
    assert keys.cache_key_axes(gfx942)["rocm.hip"] == "6.4.43482"


def test_codegen_env_list_is_sorted_and_unique():
    assert list(keys.CODEGEN_ENV_VARS) == sorted(set(keys.CODEGEN_ENV_VARS))
