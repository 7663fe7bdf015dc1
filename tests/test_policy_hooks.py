"""The core's policies are plugins: a test replaces the store and receives every event through hooks,
and a search on a ROCm target reaches a benchmarker that times on the launch stream."""

import pytest
import torch

import flyautotune as fat
from flyautotune.timing import clocks
from flyautotune.store import MemoryStore
from flyautotune.timing.testing import FakeGpu, install


class StorePlugin:
    """Replaces the SQLite store with the in-memory one, through the store hook."""

    def __init__(self):
        self.store = MemoryStore()

    @fat.hookimpl
    def flyautotune_store(self):
        return self.store


class EventSink:
    def __init__(self):
        self.events = []

    @fat.hookimpl
    def flyautotune_tuning_event(self, event):
        self.events.append(event)


def test_a_plugin_store_and_an_event_plugin_replace_the_builtins(pm, counting_bench, isolated_store):
    store, sink = StorePlugin(), EventSink()
    pm.register(store)
    pm.register(sink)

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="h_store",
                  do_bench=counting_bench(cost=lambda i: {1: 2.0, 2: 1.0}[i]))
    def launch(x, n, B=None):
        return B

    assert launch(torch.zeros(2), 2) == 2
    (entry,) = store.store.entries("h_store")
    assert entry.config == {"kwargs": {"B": 2}, "compile_hints": {}}
    assert [e["event"] for e in sink.events] == ["search_start", "candidate", "candidate", "search_end", "select"]
    assert sink.events[-1]["source"] == "search"
    assert not isolated_store.exists()  # the built-in SQLite store was never opened
    launch.clear()
    assert launch(torch.zeros(2), 2) == 2 and launch.last_source == "store"


def test_a_broken_event_plugin_does_not_hide_events_from_the_others(pm, counting_bench, caplog):
    class Broken:
        @fat.hookimpl
        def flyautotune_tuning_event(self, event):
            raise RuntimeError("sink down")

    sink = EventSink()
    pm.register(Broken())
    pm.register(sink)
    t = fat.autotune(configs=[fat.Config(B=1)], key=["n"], plugin_manager=pm, name="h_broken",
                     default=lambda **kw: fat.Config(B=1))(lambda x, n, B=None: B)
    assert t(torch.zeros(2), 2) == 1
    assert [e["event"] for e in sink.events] == ["select"] and "sink down" in caplog.text


class MetaIsGfx942:
    """A ROCm GPU stand-in: meta tensors belong to a gfx942 target."""

    @fat.hookimpl(tryfirst=True)
    def flyautotune_target(self, device):
        if getattr(device, "type", None) == "meta":
            return fat.Target("rocm", "gfx942", 64)


@pytest.fixture
def hip(pm, monkeypatch):
    """A gfx942 "GPU" on the CPU: meta tensors belong to it, its device module is a fake HIP one, and the
    ROCm plugin's benchmark hook is registered."""
    from flyautotune_rocm import hooks as rocm_hooks

    fake = install(FakeGpu(name="cuda", l2=4 << 20), monkeypatch, "meta")
    pm.register(MetaIsGfx942())
    pm.register(rocm_hooks)
    return fake


def test_a_search_on_a_rocm_target_is_timed_on_the_launch_stream_and_stored(pm, hip):
    side = hip.Stream(device=torch.device("meta"), label="launch")

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="h_rocm")
    def launch(x, n, B=None, stream=None):
        hip.launch(0.01 * (3 - B), f"B{B}")  # B=2 is faster

    sel = launch.select(torch.zeros(4, device="meta"), 4, stream=side, force=True)
    assert sel.config == fat.Config(B=2)
    assert {r["method"] for r in sel.timings} == {"graph"}
    assert set(hip.captured_on) == {"launch"}
    entry = launch.store().get("h_rocm", sel.key)
    assert entry.config["kwargs"] == {"B": 2} and entry.provenance["target"]["arch"] == "gfx942"


def test_the_clocks_warm_while_the_candidates_compile(pm, hip):
    """A cold search does not wait for the first compile before warming the GPU: the warm-up burst runs
    while the precompile pool works (each compile here waits until it sees the burst, or 5 s)."""
    import threading

    warmed = threading.Event()
    seen = []

    def precompile(config, x, n, **_):
        seen.append(warmed.wait(5.0))

    def make_work(device):
        def work():
            hip.launch(50.0, "warm")
            warmed.set()
        return work

    clocks.make_work = make_work  # restored by the fixture's monkeypatch of the same name

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="h_warm",
                  precompile=precompile)
    def launch(x, n, B=None, stream=None):
        hip.launch(0.01 * (3 - B), f"B{B}")

    launch_stream = hip.Stream(device=torch.device("meta"), label="launch")
    sel = launch.select(torch.zeros(4, device="meta"), 4, stream=launch_stream, force=True)
    assert sel.config == fat.Config(B=2)
    assert seen == [True, True]
    assert hip.log.count("warm") == 16  # warmed once: the timing found the device warm
    assert {s for label, s in hip.launched_on if label == "warm"} == {"side"}  # off the launch stream
    last_warm = max(i for i, e in enumerate(hip.log) if e == "warm")
    first_timed = min(i for i, e in enumerate(hip.log) if isinstance(e, tuple) and e[0] == "replay")
    assert last_warm < first_timed, "a candidate was timed while the device was still warming"


def _slow_key_tuner(pm, hip, name):
    """A tuner whose key waits (up to 2 s) for the warm-up burst, as a fresh toolchain fingerprint takes a
    while; returns ``(launch, seen)``: ``seen`` gets whether the burst had started by then."""
    import threading

    warmed = threading.Event()
    seen = []

    def make_work(device):
        def work():
            hip.launch(50.0, "warm")
            warmed.set()
        return work

    class SlowKey:
        @fat.hookimpl
        def flyautotune_cache_key(self, target):
            seen.append(warmed.wait(2.0))
            return {"toolchain": "slow"}

    clocks.make_work = make_work  # restored by the fixture's monkeypatch of the same name
    pm.register(SlowKey())

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name=name,
                  default=lambda **_: fat.Config(B=1))
    def launch(x, n, B=None, stream=None):
        hip.launch(0.01 * (3 - B), f"B{B}")

    return launch, seen


def test_a_forced_search_warms_the_device_while_its_key_is_computed(pm, hip):
    """The toolchain's fingerprint (part of the key) takes a while in a fresh process: a forced search
    warms the GPU meanwhile, and times nothing before the burst is over."""
    launch, seen = _slow_key_tuner(pm, hip, "h_key_warm")
    side = hip.Stream(device=torch.device("meta"), label="launch")
    sel = launch.select(torch.zeros(4, device="meta"), 4, stream=side, force=True)
    assert sel.config == fat.Config(B=2) and seen == [True]
    assert hip.log.count("warm") == 16
    last_warm = max(i for i, e in enumerate(hip.log) if e == "warm")
    assert last_warm < min(i for i, e in enumerate(hip.log) if isinstance(e, tuple) and e[0] == "replay")


def test_a_lookup_that_is_not_forced_never_warms_the_device(pm, hip):
    launch, seen = _slow_key_tuner(pm, hip, "h_key_cold")
    side = hip.Stream(device=torch.device("meta"), label="launch")
    assert launch.select(torch.zeros(4, device="meta"), 4, stream=side).source == "default"
    assert seen == [False] and "warm" not in hip.log


def test_a_search_shortens_the_thread_switch_interval_and_gives_it_back(pm, hip):
    import sys

    seen = []

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="h_switch")
    def launch(x, n, B=None, stream=None):
        seen.append(sys.getswitchinterval())
        hip.launch(0.01 * (3 - B), f"B{B}")

    before = sys.getswitchinterval()
    sys.setswitchinterval(0.004)
    try:
        launch.select(torch.zeros(4, device="meta"), 4, stream=hip.Stream(device=torch.device("meta")), force=True)
        assert sys.getswitchinterval() == pytest.approx(0.004, abs=1e-5)
    finally:
        sys.setswitchinterval(before)
    assert seen and all(v == pytest.approx(0.001, abs=1e-5) for v in seen)


def test_an_omitted_stream_lets_the_launch_follow_the_capture_stream(pm, hip):
    """A launch that takes ``stream=`` and was called without one is timed as a graph: it runs on the
    current stream, which the engine makes its capture stream (the default stream cannot capture)."""
    hip.default.device = torch.device("meta")  # the current (default) stream of the meta "GPU"
    seen = []

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="h_omitted")
    def launch(x, n, B=None, stream=None):
        seen.append(stream)
        # like a Triton launcher handed a stream: an explicit stream escapes a capture on another one
        hip.launch(0.01 * (3 - B), f"B{B}", escape=stream is not None and stream is not hip.current)

    sel = launch.select(torch.zeros(4, device="meta"), 4, force=True)
    assert {r["method"] for r in sel.timings} == {"graph"} and set(seen) == {None}


def test_an_event_log_that_cannot_be_written_warns_once_and_a_fifo_never_hangs(pm, counting_bench, tmp_path,
                                                                               monkeypatch, caplog):
    import os

    t = fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="h_log",
                     do_bench=counting_bench())(lambda x, n, B=None: B)
    monkeypatch.setenv("FLYAUTOTUNE_EVENT_LOG", str(tmp_path / "no-such-dir" / "events.jsonl"))
    with caplog.at_level("WARNING"):
        for n in range(20):
            t(torch.zeros(2), n)
    assert caplog.text.count("cannot write the flyautotune event log") == 1
    fifo = tmp_path / "events.fifo"
    os.mkfifo(fifo)  # no reader: opening it to write would block forever
    monkeypatch.setenv("FLYAUTOTUNE_EVENT_LOG", str(fifo))
    assert t(torch.zeros(2), 100) in (1, 2)


def test_the_event_log_is_strict_json(pm, tmp_path, monkeypatch):
    import json

    log = tmp_path / "events.jsonl"
    monkeypatch.setenv("FLYAUTOTUNE_EVENT_LOG", str(log))
    t = fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="h_strict",
                     do_bench=lambda fn, setup=None: {1: 1.0, 2: float("inf")}[fn()])(lambda x, n, B=None: B)
    t(torch.zeros(2), 2)
    for line in log.read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_overlapping_searches_restore_the_switch_interval_when_the_last_one_ends():
    import sys

    from flyautotune.tuning.background import short_switch_interval

    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        first, second = short_switch_interval(), short_switch_interval()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)  # the first search ends while the second still runs
        assert sys.getswitchinterval() == pytest.approx(0.001, abs=1e-5)
        second.__exit__(None, None, None)
        assert sys.getswitchinterval() == pytest.approx(0.005, abs=1e-5)
        sys.setswitchinterval(0.0002)  # already shorter: left alone
        with short_switch_interval():
            assert sys.getswitchinterval() == pytest.approx(0.0002, abs=1e-5)
        assert sys.getswitchinterval() == pytest.approx(0.0002, abs=1e-5)
    finally:
        sys.setswitchinterval(before)
