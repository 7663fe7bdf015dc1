"""The timing engine on a fake device module: which method runs, what is timed, and what comes back."""

from __future__ import annotations

import math

import pytest
import torch

import flyautotune as fat
from flyautotune import timing
from flyautotune.measurement import Measurement
from flyautotune.timing import clocks, events, graph
from flyautotune.timing.testing import FakeGpu, Flush

DEV = torch.device("xpu", 0)  # any non-CPU device: the engine only talks to the module it is given


@pytest.fixture
def gpu(monkeypatch):
    fake = FakeGpu()
    monkeypatch.setattr(events, "flush_buffer", lambda device, module: Flush(fake))
    clocks.forget()
    return fake


def launches(fake, cost, n):
    return [lambda i=i: fake.launch(cost, f"copy{i}") for i in range(n)]


# -- the graph method --------------------------------------------------------------------------------

def test_graph_replays_round_robin_launches_over_the_rotated_copies(gpu):
    rot = launches(gpu, 0.01, 4)
    m = timing.benchmark(rot[0], rotations=rot, module=gpu, device=DEV, rep=7, warm=False)
    assert (m.method, m.reps) == ("graph", 7)
    assert m.ms == pytest.approx(0.01) and m.spread == pytest.approx(0.0)
    per = graph.launches_per_replay(4, 0.01)
    assert per == 100 and "100 launches per replay over 4 input copies" in m.note
    captured = [e[1] for e in gpu.log if isinstance(e, tuple) and e[0] == "captured"]
    assert captured == [f"copy{i % 4}" for i in range(per)]
    assert [e for e in gpu.log if isinstance(e, tuple) and e[0] == "replay"] == [("replay", "default")] * 8


def test_a_flushed_replay_of_a_slow_launch_visits_only_the_copies_it_needs(gpu):
    """512 copies of a 0.01 ms launch: behind a flush, a replay of 1 ms (100 launches, each copy once, all
    cold after the flush); replayed back to back, one whole round over the 512 copies (a copy that came
    round again sooner could still be cached)."""
    rot = launches(gpu, 0.01, 512)
    m = timing.benchmark(rot[0], rotations=rot, module=gpu, device=DEV, rep=3, warm=False)
    captured = [e[1] for e in gpu.log if isinstance(e, tuple) and e[0] == "captured"]
    assert captured == [f"copy{i}" for i in range(100)] and m.ms == pytest.approx(0.01)
    assert "100 launches per replay over 512 input copies, the cache flushed before each replay" in m.note
    gpu.log.clear()
    m = timing.benchmark(rot[0], rotations=rot, module=gpu, device=DEV, rep=3, warm=False, flush=False)
    captured = [e[1] for e in gpu.log if isinstance(e, tuple) and e[0] == "captured"]
    assert captured == [f"copy{i}" for i in range(512)] and m.ms == pytest.approx(0.01)


@pytest.mark.parametrize("flushed", [False, True])
def test_launches_per_replay_fill_a_millisecond_within_the_cap(flushed):
    per = graph.launches_per_replay
    assert per(4, 0.01, flushed=flushed) == 100  # 1 ms, 25 rounds
    assert per(3, 0.01, flushed=flushed) == (102 if not flushed else 100)  # whole rounds only without a flush
    assert per(1, 1e-6, flushed=flushed) == graph.MAX_LAUNCHES  # a tiny launch: the cap
    assert per(600, 0.01, flushed=flushed) == (600 if not flushed else 100)
    assert per(8, 5.0, flushed=flushed) == (8 if not flushed else 1)  # a 5 ms launch: one launch is enough


def test_every_graph_replay_starts_behind_a_cache_flush_that_is_not_timed(gpu):
    """Each replay (the untimed first one included) follows a flush of the cache, and the flush sits
    between the replays' event pairs: a 3 ms flush leaves the 0.01 ms launch at 0.01 ms."""
    gpu.flush_ms = 3.0
    rot = launches(gpu, 0.01, 4)
    m = timing.benchmark(rot[0], rotations=rot, module=gpu, device=DEV, rep=5, warm=False)
    assert m.method == "graph" and m.ms == pytest.approx(0.01)
    assert "the cache flushed before each replay" in m.note
    timed = gpu.log[gpu.log.index(("replay", "default")) - 2:]
    steps = [e if isinstance(e, str) else e[0] for e in timed if e in ("flush",) or isinstance(e, tuple)
             and e[0] in ("event", "replay")]
    assert steps == ["flush", "event", "replay", "event"] * 6


def test_flush_false_replays_back_to_back(gpu):
    rot = launches(gpu, 0.01, 4)
    m = timing.benchmark(rot[0], rotations=rot, module=gpu, device=DEV, rep=5, warm=False, flush=False)
    assert m.method == "graph" and m.ms == pytest.approx(0.01)
    assert "flush" not in gpu.log and "flushed" not in m.note


def test_a_flush_buffer_that_cannot_be_allocated_leaves_the_timing_unflushed_and_says_so(gpu, monkeypatch):
    def full(device, module):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 100.00 MiB")
    monkeypatch.setattr(events, "flush_buffer", full)
    rot = launches(gpu, 0.01, 4)
    m = timing.benchmark(rot[0], rotations=rot, module=gpu, device=DEV, rep=5, warm=False)
    assert m.method == "graph" and m.ms == pytest.approx(0.01)
    assert "without a cache flush (its buffer could not be allocated: OutOfMemoryError)" in m.note
    assert "flush" not in gpu.log
    one = timing.benchmark(rot[0], module=gpu, device=DEV, rep=5, warm=False, method="events")
    assert one.method == "events" and "without a cache flush" in one.note


def test_flush_must_be_a_bool(gpu):
    with pytest.raises(TypeError, match=r"flush='yes'.*True .*or False"):
        timing.benchmark(lambda: None, module=gpu, device=DEV, flush="yes")


def test_a_replay_far_shorter_than_the_eager_estimate_is_captured_again_longer(gpu):
    """An eager launch that also times host work between kernels (0.5 ms) sizes the graph at two
    launches; the first replay shows 0.02 ms, so the graph is captured again with 100."""
    def rot(i):
        def launch():
            gpu.launch(0.005, f"copy{i}")
            gpu.launch(0.5, "host", escape=True)
            gpu.launch(0.005, f"copy{i}")
        return launch

    rots = [rot(0), rot(1)]
    m = timing.benchmark(rots[0], rotations=rots, module=gpu, device=DEV, rep=5, warm=False)
    assert m.method == "graph" and m.ms == pytest.approx(0.01)
    assert "100 launches per replay over 2 input copies" in m.note
    assert len(gpu.captured_on) == 2 and gpu.log.count("graph-reset") == 2


def test_one_slow_replay_moves_the_spread_not_the_median(gpu):
    rot = launches(gpu, 0.01, 2)
    gpu.replay_costs = [0.0] + [0.0, 0.0, 0.1, 0.0, 5.0, 0.0, 0.0]  # the untimed first replay, then 7 timed
    m = timing.benchmark(rot[0], rotations=rot, module=gpu, device=DEV, rep=7, warm=False)
    assert m.method == "graph" and m.ms == pytest.approx(0.01)
    assert m.spread > 0


def test_a_launch_stream_is_captured_on_and_replayed_on(gpu):
    mine = gpu.Stream(label="mine")
    rot = launches(gpu, 0.02, 2)
    m = timing.benchmark(rot[0], rotations=rot, stream=mine, module=gpu, device=DEV, rep=3, warm=False)
    assert m.method == "graph"
    assert gpu.captured_on == ["mine"]
    assert {s for _, s in gpu.launched_on} == {"mine"}
    assert {e[1] for e in gpu.log if isinstance(e, tuple) and e[0] in ("event", "replay")} == {"mine"}


def test_the_default_stream_is_captured_on_a_side_stream_and_replayed_on_itself(gpu):
    rot = launches(gpu, 0.02, 2)
    timing.benchmark(rot[0], rotations=rot, module=gpu, device=DEV, rep=3, warm=False)
    assert gpu.captured_on == ["side"]
    assert {e[1] for e in gpu.log if isinstance(e, tuple) and e[0] == "replay"} == {"default"}


# -- falling back to events --------------------------------------------------------------------------

def test_a_failed_capture_falls_back_to_events_and_says_why(gpu):
    gpu.capture_error = "operation not permitted when stream is capturing"
    rot = launches(gpu, 0.05, 3)
    m = timing.benchmark(rot[0], rotations=rot, module=gpu, device=DEV, rep=10, warm=False)
    assert m.method == "events" and m.ms == pytest.approx(0.05)
    assert "graph capture failed: RuntimeError: operation not permitted when stream is capturing" in m.note
    assert m.note.endswith("timed with events")
    assert "flush" not in gpu.log  # rotated copies keep the launches cold without a flush


def test_a_launch_that_escapes_the_capture_is_not_timed_from_the_empty_graph(gpu):
    fn = lambda: gpu.launch(0.05, escape=True)  # noqa: E731
    m = timing.benchmark(fn, module=gpu, device=DEV, rep=5, warm=False)
    assert m.method == "events" and m.ms == pytest.approx(0.05)
    assert "did not run inside the capture" in m.note


def test_setup_forces_events_and_runs_untimed_before_every_launch(gpu):
    def setup():
        gpu.log.append("setup")
        gpu.clock += 100.0  # slow setup: must not be counted

    m = timing.benchmark(lambda: gpu.launch(2.0), setup=setup, module=gpu, device=DEV, warmup=1, rep=4,
                         warm=False)
    assert m.method == "events" and m.ms == pytest.approx(2.0)
    assert "setup runs before every launch" in m.note
    assert gpu.captured_on == []
    timed = gpu.log[len(gpu.log) - 1 - gpu.log[::-1].index("backlog"):]
    assert timed[1:6] == ["setup", "flush", ("event", "default"), "fn", ("event", "default")]


def test_a_device_module_without_graphs_is_timed_with_events(gpu):
    no_graph = FakeGpu(capture=False)
    m = timing.benchmark(lambda: no_graph.launch(0.3), module=no_graph, device=DEV, rep=3, warm=False)
    assert m.method == "events" and "has no graph capture" in m.note


# -- cutting a slow candidate short --------------------------------------------------------------------

def test_a_candidate_slower_than_the_cutoff_is_cut_after_one_replay_and_marked(gpu):
    m = timing.benchmark(lambda: gpu.launch(50.0), module=gpu, device=DEV, rep=20, warm=False, cutoff_ms=10.0)
    assert (m.method, m.reps, m.ms) == ("cutoff", 1, pytest.approx(50.0))
    assert "cut short after one graph replay: 50 ms > cutoff 10 ms" in m.note
    # the untimed first call, one timed launch, the capture's warm-up and its one captured launch
    assert gpu.log.count("fn") == 4 and len(gpu.captured_on) == 1
    assert sum(1 for e in gpu.log if isinstance(e, tuple) and e[0] == "replay") == 2  # upload + one timed


def test_a_launch_slow_only_between_its_kernels_is_not_cut(gpu):
    """Two kernels with host work between them: one eager launch shows the gap (31 ms), the graph
    replay that real use runs does not (1 ms): the candidate is timed in full, not cut."""
    def launch():
        gpu.launch(0.5, "k1")
        gpu.launch(30.0, "host", escape=True)  # the host between the kernels: never captured
        gpu.launch(0.5, "k2")

    m = timing.benchmark(launch, module=gpu, device=DEV, rep=5, warm=False, cutoff_ms=10.0)
    assert m.method == "graph" and m.ms == pytest.approx(1.0)


def test_without_graphs_the_cutoff_uses_the_eager_launch():
    no_graph = FakeGpu(capture=False)
    m = timing.benchmark(lambda: no_graph.launch(50.0), module=no_graph, device=DEV, rep=20, warm=False,
                         cutoff_ms=10.0)
    assert m.method == "cutoff" and "cut short after one timed launch (events): 50 ms > cutoff 10 ms" in m.note


def test_the_cutoff_can_come_from_the_callers_context(gpu):
    with timing.cutoff_after(10.0):
        assert timing.current_cutoff() == 10.0
        cut = timing.benchmark(lambda: gpu.launch(50.0), module=gpu, device=DEV, warm=False)
        kept = timing.benchmark(lambda: gpu.launch(5.0), module=gpu, device=DEV, rep=3, warm=False)
    assert timing.current_cutoff() is None
    assert cut.method == "cutoff" and kept.method == "graph"


def test_the_host_clock_cuts_short_too():
    ran = []
    m = timing.benchmark(lambda: ran.append(1), device=torch.device("cpu"), warmup=0, rep=50, cutoff_ms=1e-9)
    assert m.method == "cutoff" and len(ran) == 1


# -- clocks ----------------------------------------------------------------------------------------

def test_clocks_are_warmed_once_before_the_first_timing(gpu, monkeypatch):
    monkeypatch.setattr(clocks, "make_work", lambda device: lambda: gpu.launch(10.0, "warm"))
    timing.benchmark(lambda: gpu.launch(0.5), module=gpu, device=DEV, rep=3)
    timing.benchmark(lambda: gpu.launch(0.5), module=gpu, device=DEV, rep=3)
    assert gpu.log.count("warm") == 16  # one chunk of 16 x 10 ms reaches the 150 ms burst
    assert gpu.log.index("warm") < gpu.log.index("fn")


def test_a_warm_up_that_failed_is_tried_again_by_the_next_timing(gpu, monkeypatch):
    def broken(device):
        raise RuntimeError("no math library on this device")

    monkeypatch.setattr(clocks, "make_work", broken)
    with pytest.raises(RuntimeError, match="no math library"):
        clocks.warm_clocks(DEV, gpu)
    monkeypatch.setattr(clocks, "make_work", lambda device: lambda: gpu.launch(10.0, "warm"))
    timing.benchmark(lambda: gpu.launch(0.5), module=gpu, device=DEV, rep=3)
    assert gpu.log.count("warm") == 16


# -- what comes back ----------------------------------------------------------------------------------

def test_cpu_is_timed_with_the_host_clock():
    m = timing.benchmark(lambda: sum(range(100)), device=torch.device("cpu"), rep=5)
    assert m.method == "wall" and m.reps == 5 and m.ms > 0 and m.spread >= 0


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
def test_a_broken_device_clock_names_the_candidate(bad):
    fake = FakeGpu(capture=False, elapsed=lambda a, b: bad)
    with pytest.raises(ValueError, match=rf"cfg BLOCK=64: event timing gave {bad!r} ms"):
        timing.benchmark(lambda: fake.launch(1.0), module=fake, device=DEV, warm=False, name="cfg BLOCK=64")


def test_a_launch_below_the_clock_tick_is_reported_as_the_tick(gpu):
    m = timing.benchmark(lambda: gpu.launch(0.0), module=gpu, device=DEV, rep=3, warm=False, method="events")
    assert m.ms > 0 and isinstance(Measurement.coerce(m), Measurement)


@pytest.mark.parametrize("kwargs, message", [
    ({"rep": 0}, r"rep=0: expected an int >= 1"),
    ({"warmup": True}, r"warmup=True: expected an int >= 0"),
    ({"method": "fast"}, r"method='fast': expected one of graph, events, wall"),
    ({"cutoff_ms": -1.0}, r"cutoff_ms=-1.0: expected a finite time"),
    ({"rotations": [1]}, r"rotations contains 1: expected callables"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        timing.benchmark(lambda: None, device=torch.device("cpu"), **kwargs)


# -- rotation count ------------------------------------------------------------------------------------

def test_rotations_cover_twice_the_last_level_cache(monkeypatch):
    fake = FakeGpu(l2=50 << 20)
    monkeypatch.setattr("flyautotune.streams.device_module", lambda device: fake)
    assert timing.rotation_count(DEV, 10 << 20) == 10
    assert timing.rotation_count(DEV, 1 << 30) == 1  # one set already dwarfs the cache
    assert timing.rotation_count(DEV, 1024) == timing.rotate.MAX_ROTATIONS
    assert timing.rotation_count(DEV, 64 << 20, cache_bytes=256 << 20) == 8


def test_small_inputs_get_a_copy_for_every_launch_of_a_replay(monkeypatch):
    """Inputs far under the cache: enough copies that none is launched twice in one graph replay (a copy
    that comes round again is still in the cache), within the footprint of twice the cache."""
    fake = FakeGpu(l2=50 << 20)
    monkeypatch.setattr("flyautotune.streams.device_module", lambda device: fake)
    for per_set in (16 << 10, 264 << 10, 1 << 20):  # 1 x 4096 bf16 and its weight; 32 x 4096; 256 x 2048
        n = timing.rotation_count(DEV, per_set)
        launches = graph.launches_per_replay(n, est_ms=0.002)  # a 2 µs launch
        assert n >= min(launches, math.ceil(2 * (50 << 20) / per_set)), (per_set, n, launches)
        assert n * per_set <= 2 * (50 << 20) + per_set


def test_a_backend_probe_reports_a_cache_the_properties_miss(monkeypatch):
    fake = FakeGpu(l2=4 << 20)
    monkeypatch.setattr("flyautotune.streams.device_module", lambda device: fake)
    assert timing.rotation_count(DEV, 8 << 20) == 1
    timing.register_cache_probe("test-mall", lambda device, module: 256 << 20)
    try:
        assert timing.last_level_cache_bytes(DEV) == 256 << 20
        assert timing.rotation_count(DEV, 8 << 20) == 64
    finally:
        timing.unregister_cache_probe("test-mall")


def test_no_rotations_on_the_host_and_bad_sizes_are_named():
    assert timing.rotation_count(torch.device("cpu"), 1 << 20) == 1
    with pytest.raises(ValueError, match=r"bytes_per_set=0: expected the bytes of one input set"):
        timing.rotation_count(torch.device("cpu"), 0)


# -- through the built-in CPU benchmark hook ------------------------------------------------------------

def test_the_builtin_cpu_benchmark_returns_a_wall_measurement(pm):
    m = pm.hook.flyautotune_benchmark(fn=lambda: None, setup=None, target=fat.Target("cpu", "x86_64", 1),
                                      stream=None, warmup=1, rep=3, rotations=(), cutoff_ms=None)
    assert isinstance(m, Measurement) and m.method == "wall" and m.reps == 3 and m.spread is not None
