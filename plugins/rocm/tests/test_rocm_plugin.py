"""The installed distribution is found through its entry point."""

import importlib.metadata

import flyautotune as fat
import flyautotune_rocm.hooks


def test_entry_point_declares_the_hooks_module():
    eps = [ep for ep in importlib.metadata.distribution("flyautotune-rocm").entry_points
           if ep.group == "flyautotune"]
    assert [(ep.name, ep.value) for ep in eps] == [("rocm", "flyautotune_rocm.hooks")]


def test_plugin_manager_loads_it_from_the_installed_distribution():
    pm = fat.build_plugin_manager()
    assert pm.get_plugin("rocm") is flyautotune_rocm.hooks
    assert pm.plugin_infos["rocm"].distribution == "flyautotune-rocm"


def test_it_can_be_disabled_by_name():
    pm = fat.build_plugin_manager(disabled=["rocm"])
    assert pm.get_plugin("rocm") is None
    target = fat.Target("rocm", "gfx942", 64)
    assert not any(axes and "rocm.arch" in axes for axes in pm.hook.flyautotune_cache_key(target=target))
