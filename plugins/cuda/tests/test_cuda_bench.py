"""The CUDA benchmark hook: the core's timing engine on the launch stream (a fake device module on CPU)."""

import pytest
import torch

import flyautotune as fat
from flyautotune import timing
from flyautotune.measurement import Measurement
from flyautotune.timing.testing import FakeGpu, install
from flyautotune_cuda import bench, hooks

H100 = fat.Target("cuda", "sm_90", 32)


@pytest.fixture
def gpu(monkeypatch):
    """torch's GPU module, as the engine sees it, replaced by a fake one."""
    return install(FakeGpu(name="cuda"), monkeypatch, "cuda")


def test_the_hook_times_graph_replays_over_the_rotations_on_the_launch_stream(gpu):
    mine = gpu.Stream(device=torch.device("cuda", 0), label="launch")
    rot = [lambda i=i: gpu.launch(0.02, f"copy{i}") for i in range(3)]
    m = hooks.flyautotune_benchmark(fn=rot[0], setup=None, target=H100, stream=mine, warmup=2, rep=5, rotations=rot, cutoff_ms=None)
    assert isinstance(m, Measurement)
    assert (m.method, m.reps) == ("graph", 5) and m.ms == pytest.approx(0.02)
    assert gpu.captured_on == ["launch"]
    assert {s for label, s in gpu.launched_on if label != "warm"} == {"launch"}
    assert gpu.log.index("warm") < gpu.log.index("copy0")  # clocks warmed before anything is timed


def test_setup_makes_the_hook_time_events_with_a_flush_and_the_reason(gpu):
    done = []
    m = hooks.flyautotune_benchmark(fn=lambda: gpu.launch(1.5), setup=lambda: done.append(1), target=H100,
                                    stream=gpu.Stream(device=torch.device("cuda", 0), label="launch"),
                                    warmup=1, rep=4, rotations=(), cutoff_ms=None)
    assert m.method == "events" and m.ms == pytest.approx(1.5)
    assert "setup runs before every launch" in m.note
    assert gpu.log.count("flush") >= 4 and len(done) >= 4


def test_the_cutoff_reaches_the_hook_through_the_callers_context(gpu):
    with timing.cutoff_after(1.0):
        m = hooks.flyautotune_benchmark(fn=lambda: gpu.launch(30.0), setup=None, target=H100,
                                        stream=gpu.Stream(device=torch.device("cuda", 0)), warmup=5, rep=20,
                                        rotations=(), cutoff_ms=None)
    # the untimed call, one timed launch, then one graph replay decides (its warm-up and its captured launch)
    assert m.method == "cutoff" and gpu.log.count("fn") == 4 and "one graph replay" in m.note


def test_cuda_benchmark_keeps_returning_milliseconds(gpu):
    ms = bench.cuda_benchmark(lambda: gpu.launch(0.25), stream=gpu.Stream(device=torch.device("cuda", 0)), rep=3)
    assert isinstance(ms, float) and ms == pytest.approx(0.25)


def test_other_backends_are_left_to_other_plugins(gpu):
    assert hooks.flyautotune_benchmark(fn=lambda: None, setup=None, target=fat.Target("rocm", "gfx942", 64),
                                       stream=None, warmup=1, rep=1, rotations=(), cutoff_ms=None) is None
    assert gpu.log == []


# -- on a real NVIDIA GPU -------------------------------------------------------------------------------



@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.version.hip is not None,
                    reason="needs an NVIDIA CUDA GPU; the fake-device tests above cover the same paths on CPU")
def test_real_graph_timing_over_rotated_inputs_tracks_the_work():
    xs = [torch.randn(1 << 22, device="cuda") for _ in range(timing.rotation_count(torch.device("cuda"), 32 << 20))]
    ys = [torch.empty_like(x) for x in xs]
    rot = [lambda x=x, y=y: torch.mul(x, 2.0, out=y) for x, y in zip(xs, ys)]
    stream = torch.cuda.Stream()
    m = bench.benchmark(rot[0], stream=stream, rotations=rot, rep=10)
    assert m.method == "graph" and m.spread is not None and m.ms > 0
    slow = bench.benchmark(lambda: torch.cuda._sleep(1_000_000), stream=stream, rep=5)
    events_ms = bench.benchmark(lambda: torch.cuda._sleep(1_000_000), setup=lambda: None, stream=stream, rep=5)
    assert slow.method == "graph" and events_ms.method == "events"
    assert slow.ms == pytest.approx(events_ms.ms, rel=0.2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.version.hip is not None,
                    reason="needs an NVIDIA CUDA GPU; the fake-device tests above cover the same paths on CPU")
def test_real_capture_failure_falls_back_to_events():
    x = torch.ones(16, device="cuda")
    m = bench.benchmark(lambda: x.sum().item(), rep=3)  # .item() synchronizes: not capturable
    assert m.method == "events" and "graph capture failed" in m.note
