"""Fixtures: an isolated tuning store and fresh adopter caches per test; a GPU child process runner."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import flyautotune as fat
import flyautotune as _fat_caches
from flyautotune import plugins as _plugins
from flyautotune_rmsnorm import api
from flyautotune_rmsnorm.kernel import import_gluon_before_interpreting

# Before any test's own interpreted launch (test_split's InterpretedFunction bodies): a Gluon first
# imported inside one keeps the interpreter's functions, and the Gluon bodies' compiles fail after it.
import_gluon_before_interpreting()


@pytest.fixture(autouse=True)
def isolated_store(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(tmp_path / "fat-cache"))
    monkeypatch.setenv("FLYAUTOTUNE_NATIVE_AUTO", "0")  # hits use a built tensor check, never start a compiler
    monkeypatch.delenv("FLYAUTOTUNE", raising=False)
    monkeypatch.delenv("FLYAUTOTUNE_DISABLE_PLUGINS", raising=False)
    _fat_caches.clear_caches()  # the store moved in place: the tuners' memories belong to the old one
    api.clear_caches()
    yield
    api.clear_caches()


@pytest.fixture
def fresh_pm():
    """Install a plugin manager built for the test (entry points + extra plugins)."""
    made = []

    def build(*plugins):
        pm = fat.build_plugin_manager(plugins=plugins)
        made.append(_plugins.set_plugin_manager(pm))
        _fat_caches.clear_caches()
        api.clear_caches()
        return pm

    yield build
    if made:
        _plugins.set_plugin_manager(made[0])
    _fat_caches.clear_caches()


@pytest.fixture
def sass_of():
    """``sass_of(k)``: the instructions of a cross-compiled kernel's sm_90 SASS, in issue order (nvdisasm of
    Triton's NVIDIA backend)."""

    def sass_of(k) -> list:
        import triton

        nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/nvdisasm")
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sass_{os.getpid()}_{id(k)}.cubin")
        with open(path, "wb") as f:
            f.write(k.asm["cubin"])
        try:
            text = subprocess.run([nvdisasm, "-c", path], capture_output=True, text=True, check=True).stdout
        finally:
            os.unlink(path)
        return [ln.split("*/", 1)[1].split(";")[0].strip() for ln in text.splitlines()
                if ln.strip().startswith("/*") and ";" in ln]

    return sass_of


@pytest.fixture
def gpu_child():
    """``run(source, timeout, hang)``: run ``source`` in a child Python that can import ``gpu_checks``
    (this folder); fail the test when it exceeds ``timeout`` seconds (``hang`` says what that means) or
    exits non-zero. Returns the child's stdout words. A barrier that never opens hangs its kernel: the
    deadline fails that test, not the whole suite."""
    here = os.path.dirname(os.path.abspath(__file__))

    def run(source: str, timeout: float, hang: str) -> list:
        env = dict(os.environ)
        env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            out = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                                 timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the child did not finish within {timeout} s: {hang}")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        return out.stdout.split()

    return run
