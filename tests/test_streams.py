"""Launch streams: all four spellings reach setup, every rep and the final run."""

import pytest
import torch

import flyautotune as fat
from flyautotune import streams


class FakeStream:
    def __init__(self, label):
        self.label = label
        self.cuda_stream = id(self)

    def __repr__(self):
        return f"FakeStream({self.label})"


class MetaBackend:
    """Owns the meta device and records the stream its benchmark is handed."""

    def __init__(self):
        self.bench_streams = []

    @fat.hookimpl
    def flyautotune_target(self, device):
        if getattr(device, "type", None) == "meta":
            return fat.Target("fake", "meta", 1)

    @fat.hookimpl
    def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep):
        if target.backend != "fake":
            return None
        self.bench_streams.append(stream)
        setup()
        fn()
        return 1.0


@pytest.fixture
def fake_streams(monkeypatch):
    current, default = FakeStream("current"), FakeStream("default")
    monkeypatch.setattr(streams, "current_stream", lambda device: current)
    monkeypatch.setattr(streams, "default_stream", lambda device: default)
    monkeypatch.setattr(streams, "external_stream", lambda ptr, device: FakeStream(f"external:{ptr}"))
    monkeypatch.setattr(streams, "on_stream", _recording_on_stream)
    _entered.clear()
    return current, default


_entered = []


def _recording_on_stream(stream):
    import contextlib

    _entered.append(stream)
    return contextlib.nullcontext()


@pytest.mark.parametrize("spelling", ["omitted", "object", "raw0", "rawptr"])
def test_every_spelling_routes_to_setup_reps_and_final_run(pm, fake_streams, spelling):
    current, default = fake_streams
    backend = MetaBackend()
    pm.register(backend)
    launched = []

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm,
                  name=f"t_stream_{spelling}", reset_to_zero=["x"])
    def launch(x, n, B=None, stream=None):
        launched.append(stream)

    x = torch.zeros(4, device="meta")
    given = {"omitted": None, "object": FakeStream("mine"), "raw0": 0, "rawptr": 1234}[spelling]
    expected_label = {"omitted": "current", "object": "mine", "raw0": "default", "rawptr": "external:1234"}[spelling]
    kwargs = {} if spelling == "omitted" else {"stream": given}
    launch(x, 4, **kwargs)
    assert [s.label for s in backend.bench_streams] == [expected_label] * 2
    # the reps of both candidates, the restore after the search, and (given a
    # stream) the final run; an omitted stream leaves the final run on the current one
    entered = [s.label for s in _entered if s is not None]
    assert entered == [expected_label] * (3 if spelling == "omitted" else 4)
    bench_runs, final = launched[:-1], launched[-1]
    assert [s.label for s in bench_runs] == [expected_label] * 2
    if spelling == "omitted":
        assert final is None  # the launch's own "current stream", the same one the reps used
    else:
        assert final.label == expected_label


def test_a_positional_stream_reaches_the_launch_once(pm, fake_streams):
    pm.register(MetaBackend())
    seen = []

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="t_stream_pos")
    def launch(x, n, stream=None, B=None):
        seen.append(stream)

    launch(torch.zeros(4, device="meta"), 4, FakeStream("mine"))
    assert [s.label for s in seen] == ["mine"] * 3  # two reps and the real call


def test_bad_stream_spelling_is_named():
    with pytest.raises(TypeError, match=r"stream='fast': expected a torch stream object"):
        streams.resolve_stream("fast", torch.device("meta"))
    with pytest.raises(ValueError, match="stream=-1"):
        streams.resolve_stream(-1, torch.device("meta"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU; CPU routing is covered above")
def test_real_cuda_streams_are_used_for_the_search_and_the_run():
    side = torch.cuda.Stream()
    seen = []
    pm = fat.build_plugin_manager()  # the installed GPU backend owns cuda:0

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm,
                  do_bench=lambda fn, setup=None: (setup and setup(), fn(), 1.0)[-1], name="t_cuda_stream")
    def launch(x, n, B=None, stream=None):
        seen.append((stream, torch.cuda.current_stream()))
        x.add_(1)

    x = torch.zeros(4, device="cuda")
    launch(x, 4, stream=side)
    assert all(s == side and cur == side for s, cur in seen[:-1])
    assert seen[-1][0] == side
    launch(x, 4, stream=0)
    assert seen[-1][0] == torch.cuda.default_stream()
