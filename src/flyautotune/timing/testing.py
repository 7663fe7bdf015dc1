"""A fake device module for testing benchmark hooks without a GPU.

``FakeGpu`` stands in for ``torch.get_device_module(device)``: kernels call
``fake.launch(ms)`` to enqueue GPU time on the current stream; events read the
fake clock; a graph records the launches made while it captures and adds their
time on replay. It records what ran, on which stream, in ``log``,
``launched_on`` and ``captured_on``.
"""

from __future__ import annotations

import contextlib
import threading
import types
from typing import Any, Callable, Optional


class FakeGpu:
    """Stands in for ``torch.get_device_module(device)``; records what ran on which stream."""

    def __init__(self, *, l2: int = 50 << 20, capture_error: Optional[str] = None, capture: bool = True,
                 elapsed: Optional[Callable[[Any, Any], float]] = None, name: str = "fakegpu"):
        """
        :param l2: the ``L2_cache_size`` its device properties report.
        :param capture_error: a capture ends by raising ``RuntimeError(capture_error)``.
        :param capture: False = a module without graphs.
        :param elapsed: replaces ``Event.elapsed_time`` (e.g. to return NaN).
        :param name: the module's name; its graph class is ``<NAME>Graph``.
        """
        self.__name__ = name
        self.clock = 0.0
        self.log = []
        self.launched_on = []
        self.capturing = None
        self.capture_error = capture_error
        self.captured_on = []
        self.replay_costs = []  # extra GPU time per replay, consumed in order (jitter, outliers)
        self.l2 = l2
        self.flush_ms = 0.0  # GPU time a cache flush costs (it must never land inside a timed window)
        fake = self

        class Stream:
            def __init__(self, device=None, label="side"):
                self.label, self.device, self.stream_id = label, device, id(self)

            def wait_stream(self, other):
                fake.log.append(("wait", self.label, other.label))

            def synchronize(self):
                fake.log.append(("sync", self.label))

            def __repr__(self):
                return f"Stream({self.label})"

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self, stream=None):
                stream = stream or fake.current_stream()
                fake.log.append(("event", stream.label))
                self.t = fake.clock

            def synchronize(self):
                fake.log.append("event-sync")

            def elapsed_time(self, other):
                return elapsed(self, other) if elapsed else other.t - self.t

        class Graph:
            def __init__(self):
                self.costs = []

            def replay(self):
                fake.log.append(("replay", fake.current_stream().label))
                fake.clock += sum(self.costs) + (fake.replay_costs.pop(0) if fake.replay_costs else 0.0)

            def reset(self):
                fake.log.append("graph-reset")

        self.Stream, self.Event = Stream, Event
        self._graph_cls = Graph if capture else None
        self._graph_name = name.upper() + "Graph"
        self.default = Stream(label="default")
        self._tls = threading.local()  # the current stream is per thread, as in torch

    @property
    def current(self):
        return getattr(self._tls, "current", self.default)

    @current.setter
    def current(self, stream):
        self._tls.current = stream

    def __getattr__(self, attr: str) -> Any:
        # the graph class under the device module's own name (``<NAME>Graph``), when capture is on
        if (attr not in ("_graph_name", "_tls") and attr == self.__dict__.get("_graph_name")
                and self._graph_cls is not None):
            return self._graph_cls
        raise AttributeError(attr)

    # -- what the engine calls -------------------------------------------------------------
    def current_stream(self, device=None):
        return self.current

    def default_stream(self, device=None):
        return self.default

    @contextlib.contextmanager
    def stream(self, s):
        previous, self.current = self.current, s
        try:
            yield
        finally:
            self.current = previous

    @contextlib.contextmanager
    def graph(self, g, stream=None, capture_error_mode="global"):
        self.captured_on.append(stream.label)
        self.capturing = g
        try:
            with self.stream(stream):
                yield
        finally:
            self.capturing = None
        if self.capture_error:
            raise RuntimeError(self.capture_error)

    def synchronize(self, device=None):
        self.log.append("device-sync")

    def get_device_properties(self, device=None):
        return types.SimpleNamespace(L2_cache_size=self.l2)

    def _sleep(self, cycles):
        self.log.append("backlog")

    # -- what a fake kernel calls ------------------------------------------------------------
    def launch(self, cost, label="fn", escape=False):
        """Enqueue ``cost`` ms of work on the current stream (recorded into a capturing graph)."""
        self.launched_on.append((label, self.current.label))
        self.log.append(label)
        if self.capturing is not None and not escape:
            self.capturing.costs.append(cost)
            self.log.append(("captured", label))
        else:
            self.clock += cost


class Flush:
    """A stand-in cache-flush buffer: ``zero_()`` logs ``"flush"`` and costs the fake's ``flush_ms``."""

    def __init__(self, fake):
        self.fake = fake

    def zero_(self):
        self.fake.log.append("flush")
        self.fake.clock += self.fake.flush_ms


def install(fake: FakeGpu, monkeypatch: Any, device_type: str, warm_ms: float = 50.0) -> FakeGpu:
    """Make ``fake`` the device module of every ``device_type`` device for this test (pytest's
    ``monkeypatch`` undoes it): stream routing, the cache-flush buffer and the clock warm-up
    (each burst logs ``"warm"`` and costs ``warm_ms``), with every device cold again."""
    from .. import streams
    from . import clocks, events

    monkeypatch.setattr(streams, "device_module",
                        lambda device: fake if getattr(device, "type", None) == device_type else None)
    monkeypatch.setattr(events, "flush_buffer", lambda device, module: Flush(fake))
    monkeypatch.setattr(clocks, "make_work", lambda device: lambda: fake.launch(warm_ms, "warm"))
    clocks.forget()
    return fake
