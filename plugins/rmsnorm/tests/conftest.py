"""Fixtures: an isolated tuning store and fresh adopter caches per test."""

from __future__ import annotations

import pytest
import torch

import flyautotune as fat
import flyautotune as _fat_caches
from flyautotune import plugins as _plugins
from flyautotune_rmsnorm import api


@pytest.fixture(autouse=True)
def isolated_store(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(tmp_path / "fat-cache"))
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


