"""The ROCm benchmark hook: the core's timing engine on HIP streams (a fake HIP device module on CPU)."""

import types

import pytest
import torch

import flyautotune as fat
from flyautotune import timing
from flyautotune.measurement import Measurement
from flyautotune.timing.testing import FakeGpu, install
from flyautotune_rocm import bench, hooks

MI300X_L2 = 4 << 20


@pytest.fixture
def hip(monkeypatch):
    """A ROCm build of torch: HIP GPUs are ``cuda`` devices whose device module is the fake one."""
    fake = FakeGpu(name="cuda", l2=MI300X_L2)
    props = types.SimpleNamespace(L2_cache_size=MI300X_L2, gcnArchName="gfx942:sramecc+:xnack-")
    fake.get_device_properties = lambda device=None: props
    monkeypatch.setattr(torch.version, "hip", "6.4.0", raising=False)
    return install(fake, monkeypatch, "cuda")


def launch_stream(fake):
    return fake.Stream(device=torch.device("cuda", 0), label="launch")


def test_a_rocm_target_reaches_a_benchmarker_that_times_on_the_launch_stream(hip, gfx942):
    pm = fat.build_plugin_manager(entry_points=False, plugins=[hooks])
    rot = [lambda i=i: hip.launch(0.04, f"copy{i}") for i in range(2)]
    m = pm.hook.flyautotune_benchmark(fn=rot[0], setup=None, target=gfx942, stream=launch_stream(hip),
                                      warmup=2, rep=6, rotations=rot, cutoff_ms=None)
    assert isinstance(m, Measurement)
    assert (m.method, m.reps) == ("graph", 6) and m.ms == pytest.approx(0.04)
    assert hip.captured_on == ["launch"]
    assert {s for label, s in hip.launched_on if label != "warm"} == {"launch"}
    assert {e[1] for e in hip.log if isinstance(e, tuple) and e[0] in ("event", "replay")} == {"launch"}


def test_a_hip_capture_failure_falls_back_to_events_on_the_launch_stream(hip, gfx942):
    hip.capture_error = "hipErrorStreamCaptureUnsupported"
    m = hooks.flyautotune_benchmark(fn=lambda: hip.launch(0.5), setup=None, target=gfx942,
                                    stream=launch_stream(hip), warmup=1, rep=4, rotations=(), cutoff_ms=None)
    assert m.method == "events" and m.ms == pytest.approx(0.5)
    assert "hipErrorStreamCaptureUnsupported" in m.note
    assert {s for label, s in hip.launched_on if label == "fn"} == {"launch"}
    assert "flush" in hip.log  # one input set: a flush keeps each launch cold


def test_other_backends_are_left_to_other_plugins(hip):
    assert hooks.flyautotune_benchmark(fn=lambda: None, setup=None, target=fat.Target("cuda", "sm_90", 32),
                                       stream=None, warmup=1, rep=1, rotations=(), cutoff_ms=None) is None
    assert hip.log == []


def test_rotations_are_sized_past_the_infinity_cache_not_the_l2(hip):
    dev = torch.device("cuda", 0)
    assert timing.last_level_cache_bytes(dev) == 256 << 20
    assert timing.rotation_count(dev, 64 << 20) == 8  # by L2 alone (4 MiB) it would be 1


@pytest.mark.parametrize("arch, size", [("gfx942:sramecc+:xnack-", 256 << 20), ("gfx950", 256 << 20),
                                        ("gfx90a", None), ("not-an-arch", None)])
def test_infinity_cache_by_arch(arch, size):
    assert bench.infinity_cache_bytes(arch) == size


def test_the_probe_stays_out_of_nvidia_builds(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    fake = FakeGpu(name="cuda")
    assert bench.cache_probe(torch.device("cuda", 0), fake) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not torch.version.hip,
                    reason="needs an AMD GPU with a ROCm build of torch; the fake HIP tests above cover the paths")
def test_real_hip_graph_timing_on_a_side_stream():
    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    m = bench.benchmark(lambda: torch.mul(x, 2.0, out=y), stream=torch.cuda.Stream(), rep=5)
    assert m.method in ("graph", "events") and m.ms > 0
