"""Plugin discovery through real entry points (dist-info on sys.path), and its failures."""

import os
import subprocess
import sys
import textwrap

import pytest

import flyautotune as fat


def make_dist(root, dist, module, source, ep_name=None, version="1.0", ep_value=None):
    """A minimal installed distribution: module + dist-info with an entry point."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[flyautotune]\n{ep_name or module} = {ep_value or module}\n")


ADOPTER = """
import flyautotune as fat

@fat.hookimpl
def flyautotune_register_adopters(register):
    register(fat.Adopter(name="{name}", tuner=fat.autotune(configs=[fat.Config(B=1)], name="{name}")(lambda B=None: B)))
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for mod in [m for m in sys.modules if m.startswith("fatplug_")]:
        del sys.modules[mod]


def test_entry_point_adopter_is_discovered(site):
    make_dist(site, "fatplug-toy", "fatplug_toy", ADOPTER.format(name="toy"))
    pm = fat.build_plugin_manager()
    assert "fatplug_toy" in pm.plugin_infos
    assert pm.plugin_infos["fatplug_toy"].distribution == "fatplug-toy"
    adopter = pm.get_adopter("toy")
    assert "fatplug-toy" in adopter.distribution


def test_duplicate_adopter_names_name_both_distributions(site):
    make_dist(site, "fatplug-one", "fatplug_one", ADOPTER.format(name="clash"))
    make_dist(site, "fatplug-two", "fatplug_two", ADOPTER.format(name="clash"))
    with pytest.raises(fat.DuplicateAdopterError) as info:
        fat.build_plugin_manager()
    msg = str(info.value)
    assert "'clash' is registered twice" in msg
    assert "fatplug-one" in msg and "fatplug-two" in msg


def test_the_process_wide_manager_registers_adopters_on_first_use(site):
    """``plugin_manager()`` loads the plugins but asks them for adopters only when one is needed (an
    adopter's kernels import torch and Triton; a store command or a program with its own tuners never pays
    for that). A duplicate is then an error on every use, not once."""
    make_dist(site, "fatplug-lazy", "fatplug_lazy", """
        import flyautotune as fat

        calls = []

        @fat.hookimpl
        def flyautotune_register_adopters(register):
            calls.append(1)
            register(fat.Adopter(name="lazy", tuner=fat.autotune(configs=[fat.Config(B=1)], name="lazy")(
                lambda B=None: B)))
    """)
    import fatplug_lazy

    pm = fat.build_plugin_manager(lazy_adopters=True)
    assert "fatplug_lazy" in pm.plugin_infos and fatplug_lazy.calls == []
    mine = fat.Adopter(name="mine", tuner=fat.autotune(configs=[fat.Config(B=1)], name="mine")(lambda B=None: B))
    pm.register_adopter(mine)  # in-process first: the plugins' adopters are registered before it
    assert {"lazy", "mine"} <= set(pm.adopters()) and fatplug_lazy.calls == [1]
    assert pm.get_adopter("lazy").distribution.startswith("fatplug-lazy") and fatplug_lazy.calls == [1]
    eager = fat.build_plugin_manager()
    assert fatplug_lazy.calls == [1, 1] and "lazy" in eager.adopters() and "mine" not in eager.adopters()


def test_an_adopter_module_that_registers_in_process_while_a_deferred_registration_imports_it(site):
    """A plugin's register hook imports a module that calls ``fat.register`` at import (the in-process way
    of docs/write_adopter.md): the deferred registration does not run again (or wait on itself), and both
    adopters end up registered."""
    (site / "fatplug_inproc_mod.py").write_text(textwrap.dedent("""
        import flyautotune as fat

        fat.register(fat.Adopter(name="inproc", tuner=fat.autotune(configs=[fat.Config(B=1)], name="inproc")(
            lambda B=None: B)))
    """))
    make_dist(site, "fatplug-inproc", "fatplug_inproc", """
        import flyautotune as fat

        @fat.hookimpl
        def flyautotune_register_adopters(register):
            import fatplug_inproc_mod  # noqa: F401
            register(fat.Adopter(name="viahook", tuner=fat.autotune(configs=[fat.Config(B=1)], name="viahook")(
                lambda B=None: B)))
    """)
    pm = fat.build_plugin_manager(lazy_adopters=True)
    old = fat.plugins.set_plugin_manager(pm)
    try:
        assert {"inproc", "viahook"} <= set(pm.adopters())
    finally:
        fat.plugins.set_plugin_manager(old)
        sys.modules.pop("fatplug_inproc_mod", None)


def test_a_plugin_module_that_registers_at_import_does_not_hang_the_first_use(site):
    """docs/write_adopter.md's package imports its kernel module, which may call ``fat.register`` at module
    level, while the process-wide manager loads the entry point: that registration is kept (it used to wait
    forever on the manager being built). Any other call into flyautotune at that time fails that plugin's
    load with a reason, instead of hanging every command."""
    make_dist(site, "fatplug-early", "fatplug_early", """
        import flyautotune as fat

        fat.register(fat.Adopter(name="early", tuner=fat.autotune(configs=[fat.Config(B=1)], name="early")(
            lambda B=None: B)))

        @fat.hookimpl
        def flyautotune_register_adopters(register):
            register(fat.Adopter(name="hooked", tuner=fat.autotune(configs=[fat.Config(B=1)], name="hooked")(
                lambda B=None: B)))
    """)
    make_dist(site, "fatplug-asks", "fatplug_asks", """
        import flyautotune as fat
        import torch

        TARGET = fat.target_for(torch.device("cpu"))
    """)
    code = ("import flyautotune as fat; pm = fat.plugin_manager(); print(sorted(fat.adopters()));"
            "print(pm.load_failures['fatplug_asks'].error)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    env.pop("FLYAUTOTUNE_DISABLE_PLUGINS", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    names, failure = done.stdout.splitlines()
    assert {"early", "hooked"} <= set(eval(names))
    assert failure.startswith("PluginLoadError: flyautotune's plugins are still loading: a module imported by "
                              "a plugin's entry point called into flyautotune at import time")


def test_a_duplicate_adopter_of_a_deferred_registration_fails_every_use(site):
    make_dist(site, "fatplug-one", "fatplug_one", ADOPTER.format(name="clash"))
    make_dist(site, "fatplug-two", "fatplug_two", ADOPTER.format(name="clash"))
    pm = fat.build_plugin_manager(lazy_adopters=True)  # loading is fine: no adopter was asked for
    for _ in range(2):
        with pytest.raises(fat.DuplicateAdopterError, match="'clash' is registered twice"):
            pm.adopters()


def test_in_process_duplicate_is_an_error_too(pm):
    tuner = fat.autotune(configs=[fat.Config(B=1)], name="mine")(lambda B=None: B)
    pm.register_adopter(fat.Adopter(name="mine", tuner=tuner))
    with pytest.raises(fat.DuplicateAdopterError, match="'mine' is registered twice"):
        pm.register_adopter(fat.Adopter(name="mine", tuner=tuner))


@pytest.mark.parametrize("module, signature, fragments", [
    ("fatplug_typo", "flyautotune_cache_keys(target)",  # a misspelled hook: the closest real one
     ["plugin 'fatplug_typo' implements unknown hook 'flyautotune_cache_keys'",
      "did you mean 'flyautotune_cache_key'?"]),
    ("fatplug_badarg", "flyautotune_cache_key(tgt)",  # an argument the hook lacks: the hook's own, on one line
     ["plugin 'fatplug_badarg': ", "Argument(s) {'tgt'} are declared in the hookimpl",
      "the hook's arguments: target"]),
], ids=["misspelled_hook", "unknown_argument"])
def test_a_hookimpl_the_hooks_do_not_match_fails_at_start_up_naming_why(site, module, signature, fragments):
    make_dist(site, module.replace("_", "-"), module, f"""
        import flyautotune as fat

        @fat.hookimpl
        def {signature}:
            return {{}}
    """)
    with pytest.raises(fat.PluginLoadError) as info:
        fat.build_plugin_manager()
    msg = str(info.value)
    assert "\n" not in msg and all(f in msg for f in fragments), msg


class _Axes:
    def __init__(self, axes):
        self.axes = axes

    @fat.hookimpl
    def flyautotune_cache_key(self, target):
        return self.axes


def test_a_cache_key_axis_a_later_plugin_sets_again_keeps_the_first_value_and_says_so(caplog):
    """An axis set twice keeps the first plugin's value (the core's come first): a plugin cannot change
    ``torch`` or ``python`` in the key, nor another plugin's axis, and a clash is a warning naming both."""
    import torch

    from flyautotune.targets import backend_axes

    pm = fat.build_plugin_manager(entry_points=False, plugins=[_Axes({"toy.cc": "1.0", "torch": "x"}),
                                                              _Axes({"toy.cc": "2.0"})])
    with caplog.at_level("WARNING", logger="flyautotune"):
        axes = backend_axes(fat.target_for("cpu", pm), pm)
    assert axes["toy.cc"] == "1.0" and axes["torch"] == torch.__version__
    assert caplog.text.count("both set the cache-key axis") == 2
    assert "'toy.cc'" in caplog.text and "'torch'" in caplog.text


@pytest.mark.parametrize("axes, message", [
    ({"toy.cc": object()}, r"flyautotune_cache_key axis 'toy.cc'=<object object at .*> \(object\) is not a JSON value; accepted"),
    ({"toy.cc": float("nan")}, r"flyautotune_cache_key axis 'toy.cc'=nan \(float\) is not a JSON value"),
    (["toy.cc", "1.0"], r"flyautotune_cache_key returned \['toy.cc', '1.0'\] \(list\) for .*; expected a mapping"),
])
def test_a_cache_key_that_is_not_json_names_the_plugin(axes, message):
    """A value written as its repr would differ in every process (no stored winner would ever be found):
    the first key of a call says which plugin returned what."""
    from flyautotune.targets import backend_axes

    pm = fat.build_plugin_manager(entry_points=False, plugins=[_Axes(axes)])
    with pytest.raises(TypeError, match=r"plugin '\d+': " + message):
        backend_axes(fat.target_for("cpu", pm), pm)


@pytest.mark.parametrize("value, fragment", [
    ("fatplug_fn:flyautotune_register_adopters", "it names the function 'flyautotune_register_adopters': "
                                                 "name the module that holds the hooks, 'fatplug_fn'"),
    ("fatplug_fn:helper", "no flyautotune hook"),
], ids=["the_hook_function", "a_module_without_hooks"])
def test_an_entry_point_that_gives_no_hook_is_a_load_failure_not_a_silent_plugin(site, caplog, value, fragment):
    make_dist(site, "fatplug-fn", "fatplug_fn", ADOPTER.format(name="fn") + "\nhelper = object()\n",
              ep_value=value)
    with caplog.at_level("WARNING", logger="flyautotune"):
        pm = fat.build_plugin_manager()
    assert "fatplug_fn" not in pm.plugin_infos and "fn" not in pm.adopters()
    assert fragment in pm.load_failures["fatplug_fn"].error
    assert "plugin 'fatplug_fn' from fatplug-fn 1.0 failed to load" in caplog.text


def test_plugin_that_raises_on_import_is_reported_and_others_still_load(site, caplog):
    make_dist(site, "fatplug-broken", "fatplug_broken", "raise ImportError('needs libfoo.so')\n")
    make_dist(site, "fatplug-fine", "fatplug_fine", ADOPTER.format(name="fine"))
    with caplog.at_level("WARNING", logger="flyautotune"):
        pm = fat.build_plugin_manager()
    failure = pm.load_failures["fatplug_broken"]
    assert failure.error == "ImportError: needs libfoo.so"
    assert failure.distribution == "fatplug-broken"
    assert "'fatplug_broken' from fatplug-broken 1.0 failed to load: ImportError: needs libfoo.so" in caplog.text
    assert pm.get_adopter("fine").name == "fine"


def test_disabled_plugin_is_not_loaded(site, monkeypatch):
    make_dist(site, "fatplug-off", "fatplug_off", ADOPTER.format(name="off"))
    make_dist(site, "fatplug-on", "fatplug_on", ADOPTER.format(name="on"))
    monkeypatch.setenv("FLYAUTOTUNE_DISABLE_PLUGINS", "fatplug_off, something_else")
    pm = fat.build_plugin_manager()
    assert pm.disabled == ("fatplug_off", "something_else")
    assert "fatplug_off" not in sys.modules
    assert "on" in pm.adopter_registry.names() and "off" not in pm.adopter_registry.names()
    with pytest.raises(KeyError, match="no adopter named 'off'"):
        pm.get_adopter("off")


def test_builtins_can_be_disabled_and_replaced(site, monkeypatch):
    import torch

    make_dist(site, "fatplug-cpu", "fatplug_cpu", """
        import flyautotune as fat

        @fat.hookimpl
        def flyautotune_target(device):
            return fat.Target("mycpu", "any", 1)
    """)
    monkeypatch.setenv("FLYAUTOTUNE_DISABLE_PLUGINS", "flyautotune.cpu")
    pm = fat.build_plugin_manager()
    assert pm.get_plugin("flyautotune.cpu") is None
    assert pm.hook.flyautotune_target(device=torch.device("cpu")) == fat.Target("mycpu", "any", 1)


def test_builtin_cpu_backend_and_key_axes(pm):
    import platform

    import torch

    assert fat.target_for("cpu") == fat.Target("cpu", platform.machine(), 1)
    axes = {}
    for part in pm.hook.flyautotune_cache_key(target=fat.target_for("cpu")):
        axes.update(part or {})
    assert axes["torch"] == torch.__version__ and axes["flyautotune"] == fat.__version__
    assert axes["python"] == "%d.%d" % sys.version_info[:2]


def test_target_values_are_validated():
    with pytest.raises(ValueError, match="Target.warp_size must be a positive int, got 0"):
        fat.Target("rocm", "gfx942", 0)
    with pytest.raises(ValueError, match="Target.arch must be a non-empty string"):
        fat.Target("rocm", "", 64)
    assert fat.Target("rocm", "gfx942", 64) == fat.Target("rocm", "gfx942", 64)
    assert len({fat.Target("rocm", "gfx942", 64), fat.Target("rocm", "gfx942", 64)}) == 1


def test_adopter_fields_are_validated():
    tuner = fat.autotune(configs=[fat.Config(B=1)], key=["n"], name="x",
                         default=lambda **kw: fat.Config(B=1))(lambda n, B=None: B)
    with pytest.raises(TypeError, match="Adopter.tuner must be a flyautotune.Autotuner"):
        fat.Adopter(name="x", tuner=lambda: None)
    with pytest.raises(ValueError, match="Adopter.name must be an identifier-like string"):
        fat.Adopter(name="a b", tuner=tuner)
    with pytest.raises(TypeError, match="entry= needs tuner_args="):
        fat.Adopter(name="x", tuner=tuner, entry=lambda n: tuner(n))
    ad = fat.Adopter(name="x", tuner=tuner, entry=lambda v: tuner(v * 2), tuner_args=lambda v: ((v * 2,), {}))
    # declared once: the adopter reads the tuner's space, default and key
    assert ad.configs == [fat.Config(B=1)] and ad.key == ("n",) and ad.default(n=1) == fat.Config(B=1)
    assert ad.bind(3) == ((6,), {})


def test_a_lowering_that_returns_no_option_dict_for_ir_none_is_named():
    """With ``ir=None`` a backend's lowering gives compile options (a dict); anything else would reach the
    launcher as options, so it is a TypeError saying what came back and which plugins implement the hook."""

    class ListLowering:
        @fat.hookimpl
        def flyautotune_lower_compile_hints(self, ir, hints, target):
            return ["num_warps", 4]

    pm = fat.build_plugin_manager(entry_points=False, plugins=[ListLowering()])
    old = fat.plugins.set_plugin_manager(pm)
    try:
        with pytest.raises(TypeError, match=r"returned \['num_warps', 4\] \(list\) for .* with ir=None; expected a "
                                            r"dict of compile options \(plugins implementing it: "):
            fat.lower_compile_hints(target=fat.target_for("cpu", pm), hints={"num_warps": 4})
    finally:
        fat.plugins.set_plugin_manager(old)


def test_hints_no_plugin_lowers_for_a_gpu_target_are_said_once(caplog):
    """A GPU target whose backend plugin is missing (or an IR it does not know) would drop the hints without a
    word: a warning names them, what they were for, and the plugins there are; once per kind of call."""
    pm = fat.build_plugin_manager(entry_points=False, plugins=[])
    old = fat.plugins.set_plugin_manager(pm)
    gpu = fat.Target("cuda", "sm_90", 32)
    try:
        with caplog.at_level("WARNING", logger="flyautotune"):
            text = "module { gpu.module @k {} }"
            assert fat.lower_compile_hints(text, target=gpu, hints={"num_warps": 8}) is text
            assert fat.lower_compile_hints(text, target=gpu, hints={"num_warps": 8}) is text
            assert fat.lower_compile_hints(target=fat.target_for("cpu", pm), hints={"num_warps": 8}) == {}
        said = [r.getMessage() for r in caplog.records if "no plugin lowered" in r.getMessage()]
        assert len(said) == 1
        assert "num_warps=8 onto a builtins.str for" in said[0] and "flyautotune-cuda" in said[0]
    finally:
        fat.plugins.set_plugin_manager(old)
