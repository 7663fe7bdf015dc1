"""The CUDA backend's hooks, with fake devices and targets (no GPU needed)."""

import pytest
import torch

import flyautotune as fat
from flyautotune_cuda import hooks
from flyautotune_cuda.hints import MAXNREG_MAX, MAXNREG_MIN

SM90 = fat.Target("cuda", "sm_90", 32)
MI300 = fat.Target("rocm", "gfx942", 64)


# -- target -----------------------------------------------------------------------------

def test_cuda_device_gets_an_sm_target_from_its_capability(pm, h100):
    assert pm.hook.flyautotune_target(device=h100) == SM90
    assert pm.hook.flyautotune_target(device="cuda:0") == SM90


def test_other_capabilities_name_their_own_arch(pm, h100, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (8, 6))
    assert pm.hook.flyautotune_target(device=h100) == fat.Target("cuda", "sm_86", 32)


def test_cpu_device_is_left_to_the_cpu_backend(pm):
    assert pm.hook.flyautotune_target(device=torch.device("cpu")).backend == "cpu"
    assert hooks.flyautotune_target(device=torch.device("cpu")) is None


def test_a_rocm_build_of_torch_is_not_claimed(pm, h100, monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.2.0")
    assert hooks.flyautotune_target(device=h100) is None


# -- validate -----------------------------------------------------------------------------

@pytest.mark.parametrize("hints", [
    {"num_warps": 1}, {"num_warps": 32}, {"num_warps": 0}, {"maxnreg": MAXNREG_MIN}, {"maxnreg": MAXNREG_MAX},
    {"num_stages": 3}, {"num_ctas": 2}, {"waves_per_eu": 0}, {"num_warps": 8, "maxnreg": 255},
])
def test_hints_nvidia_honours_pass(pm, hints):
    pm.hook.flyautotune_validate_hints(hints=hints, target=SM90)


@pytest.mark.parametrize("hints,words", [
    ({"num_warps": 3}, ["num_warps=3", "power of two"]),
    ({"num_warps": 64}, ["num_warps=64", "32"]),
    ({"maxnreg": 16}, ["maxnreg=16", "24..255"]),
    ({"maxnreg": 256}, ["maxnreg=256", "24..255"]),
    ({"waves_per_eu": 2}, ["waves_per_eu=2", "AMD", "maxnreg"]),
    ({"waves_per_eu": (1, 2)}, ["waves_per_eu=(1, 2)"]),
    ({"num_warps": 32, "maxnreg": 128}, ["maxnreg=128", "num_warps=32", "65536", "maxnreg <= 64"]),
    ({"kpack": 2}, ["kpack=2", "AMD"]),
    ({"unroll_factor": 4}, ["unknown compile hint unroll_factor=4", "maxnreg", "num_warps"]),
    ({"num_ctas": 3}, ["num_ctas=3"]),
    ({"num_stages": 17}, ["num_stages=17", "1..16"]),
    ({"num_stages": -1}, ["num_stages=-1", "1..16"]),
])
def test_hints_nvidia_cannot_honour_fail_naming_the_value(pm, hints, words):
    with pytest.raises(ValueError) as err:
        pm.hook.flyautotune_validate_hints(hints=hints, target=SM90)
    for w in words:
        assert w in str(err.value)
    assert "sm_90" in str(err.value)


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89"])
def test_clusters_are_refused_before_hopper(pm, arch):
    """Triton refuses num_ctas > 1 below sm_90 only when each candidate compiles: refuse it up front."""
    with pytest.raises(ValueError) as err:
        pm.hook.flyautotune_validate_hints(hints={"num_ctas": 2}, target=fat.Target("cuda", arch, 32))
    assert all(w in str(err.value) for w in ("num_ctas=2", arch, "sm_90", "accepted"))
    pm.hook.flyautotune_validate_hints(hints={"num_ctas": 1}, target=fat.Target("cuda", arch, 32))


@pytest.mark.parametrize("arch", ["sm_90", "sm_100", "sm_120"])
def test_clusters_pass_on_hopper_and_later(pm, arch):
    pm.hook.flyautotune_validate_hints(hints={"num_ctas": 4}, target=fat.Target("cuda", arch, 32))


def test_a_non_int_value_is_a_type_error(pm):
    with pytest.raises(TypeError, match="maxnreg='64'"):
        pm.hook.flyautotune_validate_hints(hints={"maxnreg": "64"}, target=SM90)


def test_other_backends_targets_are_not_judged():
    assert hooks.flyautotune_validate_hints(hints={"waves_per_eu": 2}, target=MI300) is None


# -- lower -----------------------------------------------------------------------------------

def test_hints_lower_to_triton_compile_options(pm):
    opts = pm.hook.flyautotune_lower_compile_hints(
        ir=None, hints={"num_warps": 8, "num_stages": 2, "maxnreg": 128, "waves_per_eu": 0}, target=SM90)
    assert opts == {"num_warps": 8, "num_stages": 2, "maxnreg": 128}


def test_zero_keeps_the_kernels_own_setting(pm):
    assert pm.hook.flyautotune_lower_compile_hints(ir=None, hints={"num_warps": 0, "maxnreg": 0},
                                                   target=SM90) == {}


def test_lowering_through_the_core_uses_the_current_hints(pm):
    with fat.compile_hints(num_warps=4), fat.compile_hints(maxnreg=96):
        opts = fat.lower_compile_hints(ir=None, target=SM90)
    assert opts == {"num_warps": 4, "maxnreg": 96}


def test_lowering_rejects_what_validation_rejects(pm):
    with pytest.raises(ValueError, match="waves_per_eu=2"):
        pm.hook.flyautotune_lower_compile_hints(ir=None, hints={"waves_per_eu": 2}, target=SM90)


def test_mlir_modules_and_other_targets_are_left_alone():
    class FakeModule:
        operation = object()
        context = object()

    assert hooks.flyautotune_lower_compile_hints(ir=FakeModule(), hints={"num_warps": 4}, target=SM90) is None
    assert hooks.flyautotune_lower_compile_hints(ir=None, hints={"num_warps": 4}, target=MI300) is None


# -- cache key ---------------------------------------------------------------------------------

def test_cache_key_carries_arch_toolchain_and_env(pm, monkeypatch):
    monkeypatch.setenv("TRITON_F32_DEFAULT", "ieee")
    monkeypatch.setenv("CUDA_MODULE_LOADING", "LAZY")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/somewhere")
    axes = hooks.flyautotune_cache_key(target=SM90)
    assert axes["cuda.arch"] == "sm_90"
    assert axes["cuda.runtime"] == torch.version.cuda
    assert "TRITON_F32_DEFAULT=ieee" in axes["cuda.env"] and "CUDA_MODULE_LOADING=LAZY" in axes["cuda.env"]
    assert not any(e.startswith("TRITON_CACHE_DIR") for e in axes["cuda.env"])  # where files go: not codegen
    assert axes["cuda.env"] == sorted(axes["cuda.env"])
    import triton

    assert axes["cuda.triton"]["version"] == triton.__version__
    assert len(axes["cuda.triton"]["key"]) == 16


def test_env_changes_change_the_key(monkeypatch):
    monkeypatch.delenv("TRITON_F32_DEFAULT", raising=False)
    before = hooks.flyautotune_cache_key(target=SM90)["cuda.env"]
    monkeypatch.setenv("TRITON_F32_DEFAULT", "tf32x3")
    assert hooks.flyautotune_cache_key(target=SM90)["cuda.env"] != before


@pytest.mark.parametrize("name", ["DISABLE_PTXAS_OPT", "DISABLE_LLVM_OPT", "DISABLE_MMA_V3", "DISABLE_MMA_V5"])
def test_triton_codegen_switches_without_a_prefix_change_the_key(monkeypatch, name):
    """DISABLE_PTXAS_OPT=1 builds another cubin (ptxas -O0): a winner timed so must not serve a normal run."""
    monkeypatch.delenv(name, raising=False)
    before = hooks.flyautotune_cache_key(target=SM90)
    monkeypatch.setenv(name, "1")
    after = hooks.flyautotune_cache_key(target=SM90)
    assert f"{name}=1" in after["cuda.env"] and after != before


@pytest.mark.parametrize("value", ["1", "true"])
def test_a_run_under_triton_s_interpreter_is_keyed_apart_from_a_gpu_run(monkeypatch, value):
    """TRITON_INTERPRET=1 on a GPU machine runs CUDA tensors through the host: its timings say nothing of the GPU,
    so its winners must not serve a compiled run. Off (unset or 0) is one key, so nothing tuned is lost."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    unset = hooks.flyautotune_cache_key(target=SM90)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert hooks.flyautotune_cache_key(target=SM90) == unset
    monkeypatch.setenv("TRITON_INTERPRET", value)
    interpreted = hooks.flyautotune_cache_key(target=SM90)
    assert interpreted["cuda.interpreter"] is True and "cuda.interpreter" not in unset


def test_cache_key_merges_into_the_core_axes(pm):
    from flyautotune.targets import backend_axes, clear as clear_caches

    clear_caches()
    axes = backend_axes(SM90, pm)
    assert axes["cuda.arch"] == "sm_90" and "python" in axes
    assert hooks.flyautotune_cache_key(target=MI300) is None


# -- benchmark and discovery -------------------------------------------------------------------------

def test_benchmark_leaves_other_targets_to_other_plugins(pm):
    m = pm.hook.flyautotune_benchmark(fn=lambda: None, setup=None, target=fat.Target("cpu", "x86_64", 1),
                                      stream=None, warmup=1, rep=3, rotations=(), cutoff_ms=None)
    assert m.method == "wall"  # the core's CPU timer answered
    assert hooks.flyautotune_benchmark(fn=lambda: None, setup=None, target=MI300, stream=None, warmup=1,
                                       rep=1, rotations=(), cutoff_ms=None) is None


def test_installed_plugin_is_found_through_its_entry_point():
    pm = fat.build_plugin_manager()
    info = pm.plugin_infos["cuda"]
    assert info.distribution == "flyautotune-cuda" and info.module == "flyautotune_cuda.hooks"


def test_a_cuda_device_this_torch_cannot_reach_is_named(pm, monkeypatch):
    """A CUDA device on a torch without CUDA (or past the last GPU): a LookupError naming the device,
    not torch's bare AssertionError from deep inside."""
    monkeypatch.setattr(torch.version, "hip", None)

    def no_cuda(index=None):
        raise AssertionError("Torch not compiled with CUDA enabled")

    monkeypatch.setattr(torch.cuda, "get_device_capability", no_cuda)
    with pytest.raises(LookupError, match=r"device cuda:3: this torch cannot reach that CUDA device .*Torch not "
                                          r"compiled with CUDA enabled"):
        pm.hook.flyautotune_target(device=torch.device("cuda", 3))
