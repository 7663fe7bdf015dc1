"""Launch streams: all four spellings reach setup, every rep and the final run, through the device module."""

import contextlib

import pytest
import torch

import flyautotune as fat
from flyautotune import streams


@pytest.fixture(autouse=True, params=["C hit path", "Python hit path"])
def both_hit_paths(request, hit_path):
    """Every test runs through the C hit path (where it is built) and through the generated Python one."""
    hit_path(request.param)
    return request.param


class FakeStream:
    def __init__(self, label, device=torch.device("meta")):
        self.label = label
        self.device = device
        self.stream_id = id(self)

    def __repr__(self):
        return f"FakeStream({self.label})"


class FakeModule:
    """What ``torch.get_device_module`` returns for the fake device: streams, and a record of the ones made current."""

    def __init__(self, device):
        self.current = FakeStream("current", device)
        self.default = FakeStream("default", device)
        self.entered = []

    def current_stream(self, device=None):
        return self.current

    def default_stream(self, device=None):
        return self.default

    def ExternalStream(self, pointer, device=None):
        return FakeStream(f"external:{pointer}", device)

    @contextlib.contextmanager
    def stream(self, s):
        self.entered.append(s)
        yield


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
        if setup is not None:  # nothing to restore or zero: no setup
            setup()
        fn()
        return 1.0


@pytest.fixture
def fake_module(monkeypatch):
    """The meta device gets a device module with streams (torch registers none for it)."""
    module = FakeModule(torch.device("meta"))
    monkeypatch.setattr(streams, "device_module",
                        lambda device: module if getattr(device, "type", None) == "meta" else None)
    return module


@pytest.mark.parametrize("spelling", ["omitted", "object", "raw0", "rawptr"])
def test_every_spelling_routes_to_setup_reps_and_final_run(pm, fake_module, spelling):
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
    entered = [s.label for s in fake_module.entered]
    assert entered == [expected_label] * (3 if spelling == "omitted" else 4)
    bench_runs, final = launched[:-1], launched[-1]
    if spelling == "omitted":
        # the launch's own "current stream" everywhere: the tuner made it the one the reps run on
        assert bench_runs == [None] * 2 and final is None
    else:
        assert [s.label for s in bench_runs] == [expected_label] * 2 and final.label == expected_label


def test_a_positional_stream_reaches_the_launch_once(pm, fake_module):
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
    ok = FakeStream("ok")
    assert streams.resolve_stream(ok, torch.device("meta")) is ok
    assert streams.resolve_stream(ok, torch.device("meta")) is ok  # its type now skips the checks
    with pytest.raises(TypeError, match=r"stream='fast'"):  # other types still meet them
        streams.resolve_stream("fast", torch.device("meta"))


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
    seen.clear()
    for _ in range(3):  # hits, the generated path's after the first: the stream is still current and passed
        launch(x, 4, stream=side)
    assert len(seen) == 3 and all(s == side and cur == side for s, cur in seen)
    assert launch.last_source == "memory" and torch.cuda.current_stream() != side
    here = torch.cuda.current_stream()
    assert streams.already_current(here, torch.cuda) and not streams.already_current(side, torch.cuda)
    with torch.cuda.stream(side):
        assert streams.already_current(side, torch.cuda)
        launch(x, 4, stream=side)  # already current: launched on it without entering it again
    assert seen[-1] == (side, side) and torch.cuda.current_stream() == here


# -- other torch devices: through the device module, never through the GPU module of another vendor ---------

@pytest.fixture
def xpu(monkeypatch):
    """torch's real registry, with its xpu module's streams faked and the default GPU module unusable."""
    module = FakeModule(torch.device("xpu", 0))
    for name in ("current_stream", "stream"):
        monkeypatch.setattr(torch.xpu, name, getattr(module, name))

    def boom(*args, **kwargs):
        raise AssertionError("a search on an xpu device touched the wrong device module")

    gpu = torch.get_device_module("cuda")
    for name in ("current_stream", "default_stream", "ExternalStream", "stream"):
        monkeypatch.setattr(gpu, name, boom)
    return module


def test_an_xpu_device_resolves_and_enters_its_own_streams(xpu):
    dev = torch.device("xpu", 0)
    assert streams.device_module(dev) is torch.xpu
    current = streams.resolve_stream(None, dev)
    assert current is xpu.current
    with streams.on_stream(current):
        pass
    assert xpu.entered == [current]
    # torch.xpu has no default stream and no external pointers: say so instead of guessing
    with pytest.raises(ValueError, match=r"stream=0: torch.xpu has no default_stream"):
        streams.resolve_stream(0, dev)


def test_devices_without_streams_get_none(monkeypatch):
    monkeypatch.setattr(torch.get_device_module("cuda"), "current_stream",
                        lambda *a: pytest.fail("looked up a GPU stream for a stream-less device"))
    for dev in (torch.device("cpu"), torch.device("meta"), None, "cpu"):
        assert streams.device_module(dev) is None
        assert streams.resolve_stream(None, dev) is None
        assert streams.resolve_stream(0, dev) is None
    with pytest.raises(ValueError, match=r"stream=1234: a raw stream pointer needs a GPU device"):
        streams.resolve_stream(1234, torch.device("meta"))


def test_a_search_on_a_meta_device_runs_without_a_device_module(pm, monkeypatch):
    monkeypatch.setattr(torch.get_device_module("cuda"), "current_stream",
                        lambda *a: pytest.fail("a meta-device search looked up a GPU stream"))
    backend = MetaBackend()
    pm.register(backend)

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="t_meta_search")
    def launch(x, n, B=None, stream=None):
        pass

    launch(torch.zeros(4, device="meta"), 4)
    assert backend.bench_streams == [None, None]


#: A stream spelling -> (a maker of the value a call passes, the label of the stream it resolves to).
SPELLINGS = {"object": (lambda: FakeStream("mine"), "mine"), "raw0": (lambda: 0, "default"),
             "rawptr": (lambda: 1234, "external:1234")}


def _on_the_generated_path(launch, spelling, monkeypatch):
    """Run the search and the general path's first hit of ``launch`` with a stream of this spelling (which
    fills the generated path), then forbid the general path. Returns ``(x, stream, its label, the pick)``."""
    make, label = SPELLINGS[spelling]
    given = make()
    x = torch.zeros(4, device="meta")
    picked = launch(x, 4, stream=given)  # the search
    launch(x, 4, stream=given)  # the general path's hit: fills the generated one
    monkeypatch.setattr(launch.sig, "bind", lambda *a, **k: pytest.fail("the general path ran"))
    return x, given, label, picked


@pytest.mark.parametrize("spelling", ["object", "raw0", "rawptr"])
def test_stream_hits_take_the_generated_path_and_keep_the_stream(pm, fake_module, monkeypatch, spelling):
    """Cache hits with ``stream=`` as their only keyword skip the general path after their first hit, and
    still resolve the stream, make it current, zero and pass it to the launch with the config."""
    pm.register(MetaBackend())
    launched = []
    made = []

    def specialize(config, x, n, stream=None, **_):
        made.append(stream)
        return lambda x, n: pytest.fail("a stream hit called specialize='s callable, which takes no stream")

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm,
                  name=f"t_stream_hit_{spelling}", reset_to_zero=["x"], specialize=specialize)
    def launch(x, n, B=None, stream=None):
        launched.append((B, stream, fat.current_target().backend))
        return B

    x, given, label, picked = _on_the_generated_path(launch, spelling, monkeypatch)
    assert made == [None]  # specialize= saw the stream's default, never the call's stream
    fake_module.entered.clear()
    launched.clear()
    zeroed = []
    monkeypatch.setattr(torch.Tensor, "zero_", lambda self: zeroed.append(self) or self)
    for _ in range(3):
        assert launch(x, 4, stream=given) == picked
    assert [s.label for s in fake_module.entered] == [label] * 3
    assert [(b, s.label, t) for b, s, t in launched] == [(picked, label, "fake")] * 3
    assert len(zeroed) == 3 and all(z is x for z in zeroed)
    assert launch.last_source == "memory"


@pytest.mark.parametrize("spelling", ["object", "raw0", "rawptr"])
@pytest.mark.parametrize("zeroing", [False, True], ids=["nothing to zero", "reset_to_zero"])
def test_a_specialized_launch_that_takes_the_stream_serves_stream_hits(pm, fake_module, monkeypatch, spelling,
                                                                        zeroing):
    """Where ``specialize=``'s callable takes ``stream``, hits with ``stream=`` call it with the resolved stream
    and never make the stream current (it launches on it); positional hits call it with none. With
    ``reset_to_zero=`` the zeroing must run on that stream: such hits keep entering it and calling ``fn``."""
    pm.register(MetaBackend())
    launched, bound = [], []

    def specialize(config, x, n, stream=None, **_):
        return lambda x, n, stream=None: bound.append((config.kwargs["B"], stream)) or config.kwargs["B"]

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, specialize=specialize,
                  name=f"t_stream_bound_{spelling}_{zeroing}", reset_to_zero=["x"] if zeroing else [])
    def launch(x, n, B=None, stream=None):
        launched.append((B, stream))
        return B

    x, given, label, picked = _on_the_generated_path(launch, spelling, monkeypatch)
    monkeypatch.setattr(torch.Tensor, "zero_", lambda self: self)
    fake_module.entered.clear()
    launched.clear()
    bound.clear()
    for _ in range(3):
        assert launch(x, 4, stream=given) == picked
    assert launch.last_source == "memory"
    if zeroing:
        assert [s.label for s in fake_module.entered] == [label] * 3
        assert [(b, s.label) for b, s in launched] == [(picked, label)] * 3 and bound == []
    else:
        assert fake_module.entered == [] and launched == []
        assert [(b, s.label) for b, s in bound] == [(picked, label)] * 3
    bound.clear()
    assert launch(x, 4) == picked
    assert bound == [(picked, None)]  # the positional hit, zeroing on the current stream: the launch's own


def test_only_a_stream_parameter_by_name_counts_as_taking_the_stream():
    from flyautotune.tuning.fastpath import takes_stream

    assert takes_stream(lambda x, stream=None: x) and takes_stream(lambda x, *, stream: x)
    assert not takes_stream(lambda x: x)
    assert not takes_stream(lambda x, **kw: x)  # a catch-all may drop it: never assumed to launch on it
    assert not takes_stream(lambda x, stream=None, /: x)  # positional-only: cannot be passed by name
    assert not takes_stream(max)  # no signature to read: serves hits without a stream only


def test_stream_none_hits_are_plain_hits(pm, counting_bench, monkeypatch):
    """``stream=None`` asks for the launch's own stream: the hit is the positional one (specialize='s
    callable included); a bad spelling is still refused by name."""
    ran = []

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, do_bench=counting_bench(),
                  name="t_stream_none_hit", specialize=lambda config, x, n, **_: lambda x, n: ran.append("bound") or 7)
    def launch(x, n, B=None, stream=None):
        ran.append(("fn", stream))
        return B

    x = torch.zeros(4)
    launch(x, 4), launch(x, 4)
    monkeypatch.setattr(launch.sig, "bind", lambda *a, **k: pytest.fail("the general path ran"))
    ran.clear()
    assert launch(x, 4, stream=None) == 7 and launch(x, 4, stream=0) == launch.last_config.kwargs["B"]
    assert ran == ["bound", ("fn", None)]  # raw 0 on a CPU tensor resolves to no stream, as the general path does
    with pytest.raises(TypeError, match=r"stream=True: expected a stream object"):
        launch(x, 4, stream=True)


def test_a_stream_already_current_is_told_by_raw_handles(monkeypatch):
    """``already_current``: only a CUDA/HIP stream whose raw handle is the current one of the current device
    counts (two C getters); another device, another handle, another module or a stream without a raw handle
    does not, so ``on_stream`` enters the stream then."""
    state = {"device": 0, "raw": {0: 111, 1: 222}}
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: state["device"], raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda i: state["raw"][i], raising=False)

    class Raw:
        def __init__(self, handle, index):
            self.cuda_stream, self.device_index = handle, index

    assert streams.already_current(Raw(111, 0), torch.cuda)
    assert not streams.already_current(Raw(112, 0), torch.cuda)  # another stream of the current device
    assert not streams.already_current(Raw(222, 1), torch.cuda)  # current on device 1, but device 0 is current
    state["device"] = 1
    assert streams.already_current(Raw(222, 1), torch.cuda)
    assert not streams.already_current(Raw(222, 1), FakeModule(torch.device("meta")))
    assert not streams.already_current(FakeStream("no raw handle"), torch.cuda)
