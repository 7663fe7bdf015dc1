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
    assert axes["rocm.triton"]["version"] == triton.__version__
    assert len(axes["rocm.triton"]["key"]) == 16


def test_cache_key_changes_with_codegen_env_and_hip(monkeypatch, gfx942):
    for name in list(keys.relevant_env()):
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


def test_a_run_under_triton_s_interpreter_is_keyed_apart_from_a_gpu_run(monkeypatch, gfx942):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    unset = keys.cache_key_axes(gfx942)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert keys.cache_key_axes(gfx942) == unset
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    interpreted = keys.cache_key_axes(gfx942)
    assert interpreted["rocm.interpreter"] is True and "rocm.interpreter" not in unset


def test_every_triton_amdgcn_flydsl_variable_is_keyed(monkeypatch, gfx942):
    for name in list(keys.relevant_env()):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRITON_F32_DEFAULT", "ieee")  # not in any fixed list: changes an fp32 tl.dot
    monkeypatch.setenv("AMDGCN_SOME_NEW_TOGGLE", "1")
    monkeypatch.setenv("FLYDSL_SOME_NEW_OPTION", "1")
    monkeypatch.setenv("ARCH", "gfx950")  # FlyDSL's compile.arch, over FLYDSL_GPU_ARCH
    monkeypatch.setitem(__import__("sys").modules, "flydsl", types.ModuleType("flydsl"))
    # Where files go or what is printed changes no code (the CUDA plugin leaves the same ones out).
    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/x")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("FLYDSL_RUNTIME_CACHE_DIR", "/tmp/y")
    assert keys.cache_key_axes(gfx942)["rocm.env"] == {
        "AMDGCN_SOME_NEW_TOGGLE": "1", "ARCH": "gfx950", "FLYDSL_SOME_NEW_OPTION": "1", "TRITON_F32_DEFAULT": "ieee"}
    assert list(keys.relevant_env({"TRITON_B": "1", "TRITON_A": "2"})) == ["TRITON_A", "TRITON_B"]


def test_triton_f32_default_changes_the_binary_and_the_key(monkeypatch, gfx942, dot_kernel):
    from flyautotune_rocm import compile_report

    mm = dot_kernel

    def build():
        report = compile_report(mm, {"A": "*fp32", "B": "*fp32", "C": "*fp32"}, [fat.Config(BLOCK=32)],
                                arch="gfx942")[0]
        return report.binary_sha256, keys.cache_key_axes(gfx942)["rocm.env"]

    monkeypatch.delenv("TRITON_F32_DEFAULT", raising=False)
    default = build()
    monkeypatch.setenv("TRITON_F32_DEFAULT", "ieee")
    ieee = build()
    assert default[0] != ieee[0]  # a different binary ...
    assert default[1] != ieee[1]  # ... under a different key


def test_triton_version_falls_back_across_distribution_names(monkeypatch):
    installed = {"pytorch-triton-rocm": "3.4.0+rocm6.4"}
    monkeypatch.setattr(keys, "dist_version", lambda name: installed.get(name))
    assert keys.triton_version() == "3.4.0+rocm6.4"
    monkeypatch.setitem(__import__("sys").modules, "triton", None)  # Triton not importable
    assert keys.triton_fingerprint() == {"version": "3.4.0+rocm6.4"}
    installed.clear()
    assert keys.triton_fingerprint() is None


def test_flydsl_is_keyed_only_where_it_is_imported(monkeypatch, gfx942):
    import sys

    monkeypatch.setenv("ARCH", "x86_64")  # a common name: FlyDSL's compile.arch only where FlyDSL runs
    monkeypatch.delitem(sys.modules, "flydsl", raising=False)
    axes = keys.cache_key_axes(gfx942)
    assert "rocm.flydsl" not in axes and "ARCH" not in axes["rocm.env"]
    monkeypatch.setitem(sys.modules, "flydsl", types.ModuleType("flydsl"))
    monkeypatch.setattr(keys, "dist_version", lambda name: "0.5.0" if name == "flydsl" else None)
    axes = keys.cache_key_axes(gfx942)
    assert axes["rocm.flydsl"] == "0.5.0" and axes["rocm.env"]["ARCH"] == "x86_64"


def test_flydsl_imported_after_a_first_key_is_keyed_from_then_on(monkeypatch, pm, gfx942):
    # A process that tunes a Triton kernel, then imports FlyDSL and tunes a FlyDSL kernel: the FlyDSL
    # winner's key must carry FlyDSL's version, or it would be reused under another FlyDSL (another LLVM).
    import sys

    from flyautotune.targets import backend_axes

    monkeypatch.delitem(sys.modules, "flydsl", raising=False)
    monkeypatch.setattr(keys, "dist_version", lambda name: "0.5.0" if name == "flydsl" else None)
    assert "rocm.flydsl" not in backend_axes(gfx942, pm)
    monkeypatch.setitem(sys.modules, "flydsl", types.ModuleType("flydsl"))
    assert backend_axes(gfx942, pm)["rocm.flydsl"] == "0.5.0"
