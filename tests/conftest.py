"""Shared fixtures: one plugin manager per test, an isolated tuning store."""

from __future__ import annotations

import os
import shutil

import pytest

import flyautotune as fat
import flyautotune as _fat_caches
from flyautotune import plugins as _plugins

# Triton (3.9) imports Gluon on first use, from inside a launch's argument specialization. Inside an
# interpreted launch (a test's InterpretedFunction on CPU tensors) triton.language's functions are the
# interpreter's for the launch, and a Gluon imported then keeps them for the rest of the process: every
# later Gluon compile in the session (the RMSNorm plugin's ASYNC bodies) fails with "Did you forget to add
# @triton.gluon.jit ?". Imported here, before any test, Gluon keeps Triton's own functions.
try:
    import triton.experimental.gluon  # noqa: F401
except ImportError:  # no Triton, or one without Gluon
    pass


@pytest.fixture(autouse=True)
def isolated_store(tmp_path, monkeypatch):
    """Every test gets its own store directory and no forced search."""
    cache = tmp_path / "fat-cache"
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(cache))
    monkeypatch.setenv("FLYAUTOTUNE_NATIVE_DIR", str(tmp_path / "fat-native"))  # no user build of the tensor check
    monkeypatch.setenv("FLYAUTOTUNE_NATIVE_AUTO", "0")  # and no compiler started by a test's hits
    monkeypatch.delenv("FLYAUTOTUNE", raising=False)
    monkeypatch.delenv("FLYAUTOTUNE_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("FLYAUTOTUNE_EVENT_LOG", raising=False)
    # The CLI's tune and the plan runner set TRITON_INTERPRET=1 in their own process on a machine with no
    # GPU (devices.use_triton_interpreter); called in-process by a test, that would leak into the tests
    # after it and the commands they start. Whatever a test sets, the next one starts from the same value.
    # (monkeypatch restores only what it recorded, and it records nothing when deleting an unset name: set
    # then delete, so an unset variable is unset again after the test.)
    interp = os.environ.get("TRITON_INTERPRET")
    monkeypatch.setenv("TRITON_INTERPRET", interp if interp is not None else "0")
    if interp is None:
        monkeypatch.delenv("TRITON_INTERPRET")
    _fat_caches.clear_caches()  # the store moved in place: the tuners' memories belong to the old one
    yield cache


@pytest.fixture
def hit_path(monkeypatch):
    """``use(kind)``: serve this test's cache hits by the C hit path (``"C hit path"``: skipped where the
    extension is not built, the Python runs then cover the same behaviour) or by the generated Python one
    (any other kind)."""
    from flyautotune.tuning import fastpath

    def use(kind: str) -> None:
        if kind == "C hit path":
            if fastpath.native_type() is None:
                pytest.skip("the C hit path (flyautotune.tuning._hit) is not built here (no C compiler at "
                            "install, or FLYAUTOTUNE_NATIVE_HIT=0); the Python path's runs cover the same behaviour")
        else:
            monkeypatch.setattr(fastpath, "_native", False)

    return use


@pytest.fixture
def pm():
    """A fresh manager with the built-ins and no installed plugins."""
    manager = fat.build_plugin_manager(entry_points=False)
    old = _plugins.set_plugin_manager(manager)
    _fat_caches.clear_caches()
    yield manager
    _plugins.set_plugin_manager(old)
    _fat_caches.clear_caches()


class CountingBench:
    """A do_bench that times nothing: returns a per-call cost and counts calls.

    ``cost(run_index)`` is the time of the n-th call (from 1); ``times`` instead maps what a config's launch
    returns to its time, the same at every call (the first pass and each re-timing round)."""

    def __init__(self, cost=None, times=None):
        self.calls = []
        self.cost = cost or (lambda run_index: float(run_index))
        self.times = times

    def __call__(self, fn, setup=None, **kwargs):
        if setup is not None:
            setup()
        result = fn()
        self.calls.append(result)
        return self.times[result] if self.times is not None else self.cost(len(self.calls))


@pytest.fixture
def counting_bench():
    return CountingBench


@pytest.fixture(scope="session")
def compiled_check(tmp_path_factory):
    """The folder holding a build of the compiled tensor check (``flyautotune native build``: one compile
    per test session, 10-40 s). Skips where no C++ compiler is found, except in CI, which has one."""
    from flyautotune.tuning import tcheck

    if shutil.which(tcheck.compiler()[0]) is None and not os.environ.get("CI"):
        pytest.skip("no C++ compiler here to build the compiled tensor check (CI has one and runs these)")
    folder = tmp_path_factory.mktemp("native")
    old = os.environ.get(tcheck.DIR_ENV)
    os.environ[tcheck.DIR_ENV] = str(folder)
    try:
        path = tcheck.build()
    finally:
        if old is None:
            os.environ.pop(tcheck.DIR_ENV)
        else:
            os.environ[tcheck.DIR_ENV] = old
    assert path.is_file() and path.parent == folder
    return folder


@pytest.fixture
def use_compiled_check(compiled_check, monkeypatch):
    """This test's tensor checks are the compiled ones (loaded from the session's build whatever the
    test's cache folder)."""
    from flyautotune.tuning import fastpath, tcheck

    monkeypatch.setenv(tcheck.DIR_ENV, str(compiled_check))
    monkeypatch.delenv(tcheck.ENV, raising=False)
    monkeypatch.setattr(tcheck, "_loaded", None)
    kind = tcheck.check_type()
    assert kind is not None, tcheck.status()
    monkeypatch.setattr(fastpath, "_guards", None)
    yield kind
    monkeypatch.setattr(tcheck, "_loaded", None)
    monkeypatch.setattr(fastpath, "_guards", None)
