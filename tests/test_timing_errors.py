"""Bad input to the public timing API fails at entry with a message naming the argument and the value."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flyautotune import timing
from flyautotune.measurement import Measurement
from flyautotune.timing.testing import FakeGpu

CPU = torch.device("cpu")
DEV = torch.device("xpu", 0)  # any non-CPU device: the engine only talks to the module it is given


def _kernel(x):
    return x


async def _async_launch():
    pass


def _generator_launch():
    yield


# -- benchmark(): arguments that used to fail deep inside, or not at all ------------------------------------

@pytest.mark.parametrize("kwargs, error, message", [
    ({"setup": 5}, TypeError, r"setup=5: expected a callable"),
    ({"setup": _kernel}, TypeError, r"setup=<function _kernel .*> cannot be called with no arguments"),
    ({"rotations": 5}, TypeError, r"rotations=5: expected a sequence of callables"),
    ({"rotations": "abc"}, TypeError, r"rotations='abc': expected a sequence of callables"),
    ({"rotations": _kernel}, TypeError, r"rotations=<function _kernel .*>: expected a sequence of callables"),
    ({"stream": "s"}, TypeError, r"stream='s': expected a torch stream object, a raw stream pointer"),
    ({"stream": 1.5}, TypeError, r"stream=1.5: expected a torch stream object"),
    ({"stream": -1}, TypeError, r"stream=-1: .*an int >= 0"),
    ({"warm": "no"}, TypeError, r"warm='no': expected True .* or False"),
    ({"module": "cuda"}, TypeError, r"module='cuda': expected a torch device module"),
    ({"device": "gpu"}, ValueError, r"device='gpu': .*accepted: a torch.device, a device string"),
    ({"device": object()}, TypeError, r"device=<object object .*>: accepted: a torch.device"),
])
def test_bad_arguments_are_named_at_entry(kwargs, error, message):
    ran = []
    with pytest.raises(error, match=message):
        timing.benchmark(lambda: ran.append(1), **{"device": CPU, **kwargs})
    assert ran == []  # refused before any launch


@pytest.mark.parametrize("fn, message", [
    (_kernel, r"fn=<function _kernel .*> cannot be called with no arguments \(missing a required argument: 'x'\)"),
    (_async_launch, r"fn=<function _async_launch .*>: an async or generator function"),
    (_generator_launch, r"fn=<function _generator_launch .*>: an async or generator function"),
])
def test_a_launch_that_cannot_run_as_fn_is_named(fn, message):
    """An async or generator function returns at once without running its body: the host clock would time
    nothing. A function that needs arguments would fail inside the engine on its first call."""
    with pytest.raises(TypeError, match=message):
        timing.benchmark(fn, device=CPU, rep=2)


def test_a_stream_string_is_refused_before_the_device_module_sees_it():
    fake = FakeGpu()
    with pytest.raises(TypeError, match=r"benchmark: stream='s'"):
        timing.benchmark(lambda: fake.launch(0.01), module=fake, device=DEV, stream="s", warm=False)
    assert fake.log == []


def test_valid_spellings_still_time():
    """The checks refuse only wrong input: a device string, None rotations, a callable object, a partial."""
    import functools

    class Launch:
        def __call__(self, scale=1):
            return scale

    for fn, kwargs in ((lambda: None, {"device": "cpu"}), (Launch(), {"rotations": None, "device": CPU}),
                       (functools.partial(_kernel, 1), {"setup": functools.partial(_kernel, 2), "device": CPU})):
        m = timing.benchmark(fn, rep=2, warmup=0, **kwargs)
        assert m.method == "wall" and m.reps == 2 and m.ms > 0


# -- time_on_stream, benchmark_hook ----------------------------------------------------------------------

def test_time_on_stream_names_device_instead_of_a_duplicate_keyword():
    with pytest.raises(TypeError, match=r"time_on_stream: device=device\(type='cpu'\): not accepted.*benchmark\("):
        timing.time_on_stream(lambda: None, device=CPU)


def test_time_on_stream_checks_setup():
    with pytest.raises(TypeError, match=r"setup=3: expected a callable"):
        timing.time_on_stream(lambda: None, 3)


@pytest.mark.parametrize("owns", [None, "cuda"])
def test_benchmark_hook_checks_owns_when_bound_not_when_first_called(owns):
    with pytest.raises(TypeError, match=rf"benchmark_hook: owns={owns!r}: expected owns\(target\) -> bool"):
        timing.benchmark_hook(owns)


# -- cache probes --------------------------------------------------------------------------------------

def test_a_probe_with_the_wrong_signature_is_refused_at_registration():
    with pytest.raises(TypeError, match=r"probe=<function .*<lambda> .*> cannot be called as probe\(device, device_module\)"):
        try:
            timing.register_cache_probe("test-bad-signature", lambda: 1 << 20)
        finally:
            assert timing.last_level_cache_bytes(CPU) is None  # nothing was registered
            timing.unregister_cache_probe("test-bad-signature")


@pytest.mark.parametrize("answer", ["64MB", -5, 1.5e6, float("nan"), True])
def test_a_probe_answer_that_is_no_byte_count_is_named(answer):
    """Before: a str failed inside max() with a TypeError; -5 and NaN were dropped silently; 1.5e6 came back as
    a float and True as a 1-byte cache."""
    timing.register_cache_probe("test-bad-answer", lambda device, module: answer)
    try:
        with pytest.raises(ValueError, match=rf"cache probe 'test-bad-answer' returned {answer!r} for device cpu; "
                                             r"expected the last-level cache in bytes \(an int >= 0\), or None"):
            timing.rotation_count(CPU, 1 << 20)
    finally:
        timing.unregister_cache_probe("test-bad-answer")


def test_a_probe_answer_in_bytes_is_used():
    timing.register_cache_probe("test-good-answer", lambda device, module: np.int64(8 << 20))
    try:
        assert timing.last_level_cache_bytes(CPU) == 8 << 20
        assert timing.rotation_count(CPU, 1 << 20) == 16
    finally:
        timing.unregister_cache_probe("test-good-answer")


def test_unregister_with_the_probe_instead_of_its_name_is_an_error_not_a_no_op():
    def probe(device, module):
        return 8 << 20

    timing.register_cache_probe("test-unregister", probe)
    try:
        with pytest.raises(TypeError, match=r"unregister_cache_probe: name=<function .*probe.*>: expected the backend name"):
            timing.unregister_cache_probe(probe)
        assert timing.last_level_cache_bytes(CPU) == 8 << 20  # still registered, and the caller was told
    finally:
        timing.unregister_cache_probe("test-unregister")
    assert timing.last_level_cache_bytes(CPU) is None


# -- Measurement and what a do_bench may return -----------------------------------------------------------

@pytest.mark.parametrize("value", [np.float32(2.5), np.int64(3), np.float64(0.5)])
def test_coerce_takes_numpy_scalars(value):
    m = Measurement.coerce(value, who="do_bench for cfg")
    assert type(m.ms) is float and m.ms == float(value)


@pytest.mark.parametrize("value", [np.float32("nan"), np.float32(-1.0), 10 ** 400])
def test_coerce_names_a_bad_number_of_any_type(value):
    with pytest.raises(ValueError, match=r"do_bench for cfg returned .* ms; expected a finite time > 0"):
        Measurement.coerce(value, who="do_bench for cfg")


@pytest.mark.parametrize("value", [torch.tensor(1.5), {"ms": 1.0}, (1.0, 0.1), None, "1.0"])
def test_coerce_still_refuses_non_numbers(value):
    with pytest.raises(ValueError, match=r"do_bench for cfg returned .*; expected the time of one launch in milliseconds"):
        Measurement.coerce(value, who="do_bench for cfg")


@pytest.mark.parametrize("kwargs, error, message", [
    ({"ms": None}, ValueError, r"Measurement.ms=None: expected a finite time in milliseconds > 0"),
    ({"ms": "abc"}, ValueError, r"Measurement.ms='abc': expected a finite time"),
    ({"ms": True}, ValueError, r"Measurement.ms=True: expected a finite time"),
    ({"ms": 10 ** 400}, ValueError, r"Measurement.ms=1000+: expected a finite time"),
    ({"ms": 1.0, "reps": -1}, ValueError, r"Measurement.reps=-1: expected the number of timed samples, an int >= 0"),
    ({"ms": 1.0, "reps": True}, ValueError, r"Measurement.reps=True: expected"),
    ({"ms": 1.0, "method": 5}, TypeError, r"^Measurement.method=5: expected a str$"),
    ({"ms": 1.0, "note": None}, TypeError, r"^Measurement.note=None: expected a str$"),
])
def test_measurement_fields_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        Measurement(**kwargs)


def test_measurement_still_takes_what_float_takes():
    assert Measurement(2).ms == 2.0 and Measurement(np.float32(0.25)).ms == 0.25
    assert Measurement(1.0, 0.1, "events", 7, "n").reps == 7


@pytest.mark.parametrize("method", ["graph", "events"])
def test_a_device_method_asked_for_on_the_cpu_says_it_timed_with_the_host_clock(method):
    m = timing.benchmark(lambda: None, device="cpu", method=method, warmup=1, rep=3, warm=False)
    assert m.method == "wall"
    assert m.note == f"method={method!r} was asked for, but cpu has no device clock: timed with the host clock"


def test_automatic_or_wall_timing_on_the_cpu_carries_no_such_note():
    for method in (None, "wall"):
        assert timing.benchmark(lambda: None, device="cpu", method=method, warmup=1, rep=3, warm=False).note == ""
