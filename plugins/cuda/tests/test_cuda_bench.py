"""The event-timed benchmark: what runs inside the timed region and what does not."""

import types

import pytest
import torch

from flyautotune_cuda import bench


class FakeCuda:
    """Records the order of GPU-side work a benchmark enqueues (no GPU needed)."""

    def __init__(self):
        self.log = []
        self.clock = 0.0
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self, stream=None):
                fake.log.append("event")
                self.t = fake.clock

            def elapsed_time(self, other):
                return other.t - self.t

        class Stream:
            device = torch.device("cuda", 0)

            def synchronize(self):
                fake.log.append("sync")

        self.Event = Event
        self.stream_obj = Stream()
        self.cuda = types.SimpleNamespace(
            Event=Event,
            current_stream=lambda: self.stream_obj,
            stream=lambda s: _Null(),
            _sleep=lambda cycles: self.log.append(("sleep", cycles)),
            get_device_properties=lambda i: types.SimpleNamespace(L2_cache_size=1 << 20),
            current_device=lambda: 0,
        )

    def torch(self):
        return types.SimpleNamespace(cuda=self.cuda, int8="int8", device=torch.device,
                                     empty=lambda n, dtype, device: _Buf(self))


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Buf:
    def __init__(self, fake):
        self.fake = fake

    def zero_(self):
        self.fake.log.append("flush")


@pytest.fixture
def fake(monkeypatch):
    f = FakeCuda()
    monkeypatch.setattr(bench, "_torch", f.torch)
    monkeypatch.setattr(bench, "_flush_buffers", {})
    return f


def test_only_fn_is_between_the_events_and_setup_runs_before_every_launch(fake):
    def fn():
        fake.log.append("fn")
        fake.clock += 2.0  # 2 ms of "GPU time"

    def setup():
        fake.log.append("setup")
        fake.clock += 100.0  # slow setup: must not be counted

    ms = bench.cuda_benchmark(fn, setup, warmup=2, rep=6, batches=3)
    assert ms == pytest.approx(2.0)
    timed = fake.log[fake.log.index(next(e for e in fake.log if isinstance(e, tuple))):]
    # each batch: a GPU-side backlog, then (setup, flush, event, fn, event) per launch, then a sync
    batch = [timed[0]] + ["setup", "flush", "event", "fn", "event"] * 2 + ["sync"]
    assert timed == batch * 3
    assert fake.log.count("fn") == 2 + 6


def test_backlog_covers_the_host_enqueue_time(fake):
    bench.cuda_benchmark(lambda: fake.log.append("fn"), None, warmup=2, rep=4, batches=2, flush_l2=False)
    sleeps = [e[1] for e in fake.log if isinstance(e, tuple)]
    assert len(sleeps) == 2 and all(c >= 50 * bench._SLEEP_CYCLES_PER_US for c in sleeps)
    assert "flush" not in fake.log


def test_median_of_batches_drops_an_outlier_batch(fake):
    times = iter([1.0] * 2 + [1.0, 1.0, 50.0, 1.0, 1.0])  # warm-ups, then 5 batches of one launch

    def fn():
        fake.clock += next(times)

    assert bench.cuda_benchmark(fn, None, warmup=2, rep=5, batches=5) == pytest.approx(1.0)
