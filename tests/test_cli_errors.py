"""Bad input to the command line: one line naming the argument (or variable), the value and what is
accepted, exit status 2, and nothing searched or lost. Run in-process against a fresh plugin manager."""

from __future__ import annotations

import json
import logging
import os
import sys
import types

import pytest

import flyautotune as fat
from flyautotune import plugins as plugins_mod
from flyautotune import store as store_mod
from flyautotune.cli import main
from flyautotune.report import ResourceRow


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("flyautotune: error: ")]
    assert len(lines) == 1, err
    return lines[0]


class Bench:
    """Counts the candidates timed: a refused command must time none."""

    def __init__(self):
        self.calls = 0

    def __call__(self, fn, setup=None, **kwargs):
        if setup is not None:
            setup()
        self.calls += 1
        return {1: 4.0, 2: 3.0, 4: 1.0}[fn()]


def _launch(x, out, n, BLOCK=None):
    return BLOCK


def _adopter(name, configs, bench, default=None):
    tuned = fat.autotune(configs=configs, key=["n"], name=name, default=default, do_bench=bench)(_launch)
    return fat.Adopter(
        name=name, tuner=tuned, entry=lambda x: tuned(x, [0.0] * len(x), len(x)),
        tuner_args=lambda x: ((x, [0.0] * len(x), len(x)), {}),
        example=lambda shape, dtype, device: (([1.0] * (shape[0] * shape[1]),), {}),
    )


@pytest.fixture
def bench():
    return Bench()


@pytest.fixture
def demo(pm, bench):
    """``demo``: three configs, BLOCK=4 fastest."""
    adopter = _adopter("demo", [fat.Config(BLOCK=b) for b in (1, 2, 4)], bench,
                       default=lambda n, **_: fat.Config(BLOCK=1))
    pm.register_adopter(adopter)
    return adopter


# -- 1. FLYAUTOTUNE_CACHE_DIR that cannot hold the store --------------------------------------------------


def _tunes_and_warns_first(status, out, err, bench, text, stored=False):
    """A store that cannot take winners never fails a tune (DESIGN: a read-only or full disk logs and never
    fails a tune): the command warns before the search, names the setting and the problem, and still tunes."""
    assert status == 0, err
    warning = next(line for line in err.splitlines() if line.startswith("warning: "))
    assert text in warning and "kept in memory only" in warning, warning
    # searched all three, then timed them again in three rounds side by side (the default is BLOCK=1), picked
    # the fastest
    assert bench.calls == 3 + 3 * 3 and "* winner: BLOCK=4" in out
    assert ("winner stored in" in out) == stored


def test_tune_with_a_cache_dir_that_is_a_file_warns_before_searching(demo, bench, capsys, tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(afile))
    status, out, err = run(capsys, "tune", "demo", "--shape", "2x8", "--device", "cpu")
    _tunes_and_warns_first(status, out, err, bench, f"FLYAUTOTUNE_CACHE_DIR='{afile}' is a file, not a directory")


def test_tune_with_a_cache_dir_below_a_file_warns(demo, bench, capsys, tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(afile / "store"))
    status, out, err = run(capsys, "tune", "demo", "--shape", "2x8", "--device", "cpu")
    _tunes_and_warns_first(status, out, err, bench,
                           f"FLYAUTOTUNE_CACHE_DIR='{afile / 'store'}' cannot be created: {afile} is a file")


def test_tune_with_an_unwritable_cache_dir_warns_as_the_os_reports_it(demo, bench, capsys, tmp_path, monkeypatch):
    """The OS's answer is simulated, so the test also holds where it runs as root (who may write anywhere)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(folder))
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if os.fspath(p) == str(folder) and mode & os.W_OK
                        else real(p, mode))
    status, out, err = run(capsys, "tune", "demo", "--shape", "2x8", "--device", "cpu")
    # (only os.access is simulated: the store itself can still write there)
    _tunes_and_warns_first(status, out, err, bench, f"FLYAUTOTUNE_CACHE_DIR='{folder}' is not writable",
                           stored=True)


def test_show_of_a_missing_store_folder_is_an_empty_store(pm, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(tmp_path / "never-made"))
    status, out, err = run(capsys, "show")
    assert status == 0, err
    assert "no tuned entries" in out.lower() or "0 tuned entries" in out.lower(), out


@pytest.mark.parametrize("argv, status", [
    (["show"], 0), (["show", "--json"], 0), (["show", "--stale"], 0), (["export", "{tmp}/out.json"], 0),
    (["import", "{tmp}/pack.json", "--dry-run"], 0), (["clear"], 2),
])
def test_commands_that_only_read_leave_no_store_where_there_was_none(pm, capsys, tmp_path, monkeypatch, argv, status):
    """A mistyped FLYAUTOTUNE_CACHE_DIR read by show (or a dry run, which changes nothing) must not make it."""
    (tmp_path / "pack.json").write_text(json.dumps({"format": "flyautotune-pack", "version": 1, "entries": []}))
    missing = tmp_path / "mistyped" / "store"
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(missing))
    got, _, err = run(capsys, *[a.format(tmp=tmp_path) for a in argv])
    assert got == status, err
    assert not (tmp_path / "mistyped").exists()


@pytest.mark.parametrize("argv", [["show"], ["export", "{tmp}/out.json"], ["clear", "--all"],
                                  ["import", "{tmp}/pack.json"]])
def test_store_commands_name_the_variable_and_its_value(pm, capsys, tmp_path, monkeypatch, argv):
    (tmp_path / "pack.json").write_text(json.dumps({"format": "flyautotune-pack", "version": 1, "entries": []}))
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(afile))
    status, out, err = run(capsys, *[a.format(tmp=tmp_path) for a in argv])
    assert status == 2 and out == ""
    line = one_error_line(err)
    assert f"FLYAUTOTUNE_CACHE_DIR='{afile}' is a file, not a directory" in line, line
    assert "Errno" not in line


# -- 2. one candidate: say what is stored ------------------------------------------------------------------


def test_single_candidate_says_it_was_stored_and_it_is(pm, bench, capsys):
    only = fat.Config(BLOCK=4)
    pm.register_adopter(_adopter("single", [only], bench, default=lambda n, **_: fat.Config(BLOCK=4)))
    status, out, err = run(capsys, "tune", "single", "--shape", "2x8", "--device", "cpu")
    assert status == 0, err
    entries = store_mod.get_store().entries()
    assert [e.config["kwargs"] for e in entries] == [{"BLOCK": 4}]  # the forced selection stored it
    assert "only one candidate fits this shape on this backend: nothing to search, stored as the key's winner; " \
           "the time below is one end-to-end run of it, for reference" in out
    assert "nothing stored" not in out
    assert f"winner stored in {store_mod.get_store().path}" in out


def test_single_candidate_without_a_default_says_nothing_was_stored(pm, bench, capsys):
    pm.register_adopter(_adopter("single2", [fat.Config(BLOCK=4)], bench))
    status, out, err = run(capsys, "tune", "single2", "--shape", "2x8", "--device", "cpu")
    assert status == 0, err
    assert store_mod.get_store().entries() == []  # no default: the selection was not forced, nothing kept
    assert "only one candidate fits this shape on this backend: nothing to search, nothing stored" in out
    assert "key's winner" not in out and "winner stored in" not in out


# -- 3. --plot checked before the search -------------------------------------------------------------------


@pytest.fixture
def fake_matplotlib(monkeypatch):
    """A matplotlib whose canvas writes png, pdf and svg (and nothing is drawn: the check must stop first)."""
    mpl = types.ModuleType("matplotlib")
    bases = types.ModuleType("matplotlib.backend_bases")

    class FigureCanvasBase:
        @classmethod
        def get_supported_filetypes(cls):
            return {"png": "Portable Network Graphics", "pdf": "Portable Document Format",
                    "svg": "Scalable Vector Graphics"}

    bases.FigureCanvasBase = FigureCanvasBase
    mpl.backend_bases = bases
    monkeypatch.setitem(sys.modules, "matplotlib", mpl)
    monkeypatch.setitem(sys.modules, "matplotlib.backend_bases", bases)


def test_plot_with_an_extension_matplotlib_cannot_write_is_refused_first(demo, bench, capsys, tmp_path,
                                                                        fake_matplotlib):
    target = tmp_path / "out.txt"
    status, out, err = run(capsys, "tune", "demo", "--shape", "2x8", "--device", "cpu", "--plot", target)
    assert status == 2 and bench.calls == 0 and out == ""
    assert one_error_line(err).startswith(
        f"flyautotune: error: argument --plot: '{target}' has the extension .txt, which matplotlib does not "
        f"write; accepted: .pdf, .png, .svg")


def test_plot_without_matplotlib_accepts_png_only(demo, bench, capsys, tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # import matplotlib(.anything) -> ImportError
    status, _, err = run(capsys, "tune", "demo", "--shape", "2x8", "--device", "cpu", "--plot", tmp_path / "a.svg")
    assert status == 2 and bench.calls == 0
    assert "argument --plot" in err and "is not a .png file" in err and "a.svg" in err


def test_plot_into_a_missing_folder_is_refused_first(demo, bench, capsys, tmp_path):
    target = tmp_path / "nope" / "chart.png"
    status, _, err = run(capsys, "tune", "demo", "--shape", "2x8", "--device", "cpu", "--plot", target)
    assert status == 2 and bench.calls == 0
    assert f"argument --plot: the folder of '{target}' does not exist" in one_error_line(err)


# -- 4. report: a shape too large for the host -------------------------------------------------------------


class ReportTargets:
    @fat.hookimpl
    def flyautotune_report_targets(self):
        return {"sm_90": fat.Target("cuda", "sm_90", 32)}

    @fat.hookimpl
    def flyautotune_compile_report(self, spec, config, hints, target):
        return ResourceRow(config=config, registers=32)


def _report_adopter(example, configs=lambda **named: [fat.Config(BLOCK=4)]):
    tuned = fat.autotune(configs=configs, key=["n"], name="big")(_launch)
    return fat.Adopter(name="big", tuner=tuned, example=example, entry=lambda x: tuned(x, None, 1),
                       tuner_args=lambda x: ((x, None, 1), {}),
                       compile_spec=lambda shape, dtype, config: (None, {}, {}))


def _recording_example(built, fill):
    """An ``example`` that builds x with ``torch.<fill>`` and records each device it is asked for."""
    torch = pytest.importorskip("torch")

    def example(shape, dtype, device):
        built.append(device)
        return (getattr(torch, fill)(shape, dtype=torch.bfloat16, device=device),), {}

    return example


def _data_dependent_configs(x, **named):
    """A space read from the data (``.item()``): it cannot be evaluated on torch's meta device."""
    return [fat.Config(BLOCK=4 if float(x.float().abs().sum().item()) >= 0 else 8)]


@pytest.fixture
def report_pm(pm, monkeypatch):
    pm.register(ReportTargets(), name="test-report-targets")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr("flyautotune.devices.triton_interprets", lambda: False)
    return pm


def test_report_refuses_a_shape_whose_inputs_cannot_fit_before_allocating(report_pm, capsys):
    built = []
    example = _recording_example(built, "empty")
    report_pm.register_adopter(_report_adopter(example, configs=_data_dependent_configs))
    status, out, err = run(capsys, "report", "big", "--target", "sm_90", "--shape", "100000000x100000000")
    assert status == 2 and out == ""
    line = one_error_line(err)
    assert "argument --shape: 100000000x100000000 is too large: its bf16 inputs take 20000000000000000 bytes" in line
    assert "cannot be evaluated on torch's meta device" in line
    assert set(built) == {"meta"}  # tried and sized on meta; no CPU allocation tried


def test_report_evaluates_a_space_of_shapes_on_meta_so_any_shape_is_reported(report_pm, capsys):
    built = []
    example = _recording_example(built, "empty")
    report_pm.register_adopter(_report_adopter(example))
    status, out, err = run(capsys, "report", "big", "--target", "sm_90", "--shape", "100000000x100000000")
    assert status == 0, err
    assert "big 100000000x100000000 bf16 compiled for sm_90 (1 candidate, no GPU used)" in out
    assert "BLOCK=4" in out
    assert set(built) == {"meta"}  # 20 PB of inputs never allocated


def test_report_evaluates_a_data_dependent_space_on_the_cpu(report_pm, capsys):
    built = []
    example = _recording_example(built, "ones")
    report_pm.register_adopter(_report_adopter(example, configs=_data_dependent_configs))
    status, out, err = run(capsys, "report", "big", "--target", "sm_90", "--shape", "4x8")
    assert status == 0, err
    assert "(1 candidate, no GPU used)" in out and "BLOCK=4" in out
    assert built[-1] == "cpu" and "meta" in built  # meta tried first, then the CPU


def test_report_names_the_shape_when_the_allocator_fails(report_pm, capsys):
    def example(shape, dtype, device):
        if device == "meta":
            raise NotImplementedError("no meta here")
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                           "memory: you tried to allocate 80000 bytes.")

    report_pm.register_adopter(_report_adopter(example))
    status, _, err = run(capsys, "report", "big", "--target", "sm_90", "--shape", "100x200")
    assert status == 2
    line = one_error_line(err)
    assert "argument --shape: 100x200 is too large: building its bf16 inputs on the CPU failed" in line
    assert "can't allocate memory" in line


# -- 5. values that start with '-' -------------------------------------------------------------------------


def test_negative_shape_names_the_shape_and_the_accepted_form(demo, bench, capsys):
    status, out, err = run(capsys, "tune", "demo", "--shape", "-4x64", "--device", "cpu")
    assert status == 2 and out == "" and bench.calls == 0
    assert one_error_line(err) == (
        "flyautotune: error: argument --shape: '-4x64' is not a shape; expected positive integers joined by "
        "'x', e.g. 4096x8192 (see 'flyautotune tune --help')")


def test_dash_value_of_a_free_form_argument_says_how_to_pass_it(demo, capsys, tmp_path):
    status, _, err = run(capsys, "tune", "demo", "--shape", "2x8", "--plot", "-chart.png")
    assert status == 2
    assert "argument --plot: '-chart.png' starts with '-', so it was read as an option; write " \
           "--plot=-chart.png" in one_error_line(err)


def test_missing_value_keeps_argparses_message(demo, capsys):
    status, _, err = run(capsys, "tune", "demo", "--shape", "--device", "cpu")
    assert status == 2 and "argument --shape: expected one argument" in one_error_line(err)


# -- 6. environment variables ------------------------------------------------------------------------------


def test_native_build_names_a_native_dir_that_is_a_file(pm, capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setenv("FLYAUTOTUNE_NATIVE_DIR", str(afile))
    status, out, err = run(capsys, "native", "build")
    assert status == 2 and out == ""
    line = one_error_line(err)
    assert f"FLYAUTOTUNE_NATIVE_DIR='{afile}' is a file, not a directory" in line
    assert "FileExistsError" not in line


def test_disabling_a_plugin_that_does_not_exist_warns_with_the_known_names(capsys, monkeypatch, caplog):
    monkeypatch.setenv("FLYAUTOTUNE_DISABLE_PLUGINS", "bogus")
    monkeypatch.setattr(plugins_mod, "_WARNED_UNKNOWN", set())
    with caplog.at_level(logging.WARNING, logger="flyautotune"):
        manager = fat.build_plugin_manager()
        fat.build_plugin_manager()  # once per process and name
    warnings = [r.getMessage() for r in caplog.records if "bogus" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "FLYAUTOTUNE_DISABLE_PLUGINS names 'bogus', but no plugin of that name exists" in warnings[0]
    assert "known plugins: " in warnings[0] and "flyautotune.cpu" in warnings[0]
    assert manager.unknown_disabled == ("bogus",)
    old = plugins_mod.set_plugin_manager(manager)
    try:
        status, out, _ = run(capsys, "plugins")
    finally:
        plugins_mod.set_plugin_manager(old)
    assert status == 0 and "Disabled by FLYAUTOTUNE_DISABLE_PLUGINS: bogus (no plugin of that name)" in out


def test_disabling_a_real_plugin_does_not_warn(monkeypatch, caplog):
    monkeypatch.setenv("FLYAUTOTUNE_DISABLE_PLUGINS", "flyautotune.cpu")
    monkeypatch.setattr(plugins_mod, "_WARNED_UNKNOWN", set())
    with caplog.at_level(logging.WARNING, logger="flyautotune"):
        manager = fat.build_plugin_manager()
    assert manager.unknown_disabled == ()
    assert not [r for r in caplog.records if "FLYAUTOTUNE_DISABLE_PLUGINS" in r.getMessage()]


@pytest.mark.parametrize("variable, value, read, words", [
    ("FLYAUTOTUNE_NATIVE_HIT", "maybe", "fastpath._native_off", ["the C hit path stays on", "0/false/no/off"]),
    ("FLYAUTOTUNE_TENSOR_CHECK", "bogus", "tcheck._off", ["compiled check", "accepted: torch"]),
    ("FLYAUTOTUNE_NATIVE_AUTO", "maybe", "tcheck._auto_off", ["background build", "0/false/no/off"]),
])
def test_a_setting_that_is_not_understood_warns_once(monkeypatch, caplog, variable, value, read, words):
    from flyautotune.tuning import env, fastpath, tcheck

    monkeypatch.setattr(env, "_warned", set())
    monkeypatch.setenv(variable, value)
    module, name = read.split(".")
    fn = getattr({"fastpath": fastpath, "tcheck": tcheck}[module], name)
    with caplog.at_level(logging.WARNING, logger="flyautotune"):
        assert fn() is False and fn() is False  # the default stays
    messages = [r.getMessage() for r in caplog.records if variable in r.getMessage()]
    assert len(messages) == 1, messages
    assert f"{variable}={value!r} is not understood" in messages[0]
    for word in words:
        assert word in messages[0]


@pytest.mark.parametrize("variable, value, read", [
    ("FLYAUTOTUNE_NATIVE_HIT", "0", "fastpath._native_off"), ("FLYAUTOTUNE_NATIVE_HIT", "1", "fastpath._native_off"),
    ("FLYAUTOTUNE_TENSOR_CHECK", "torch", "tcheck._off"), ("FLYAUTOTUNE_NATIVE_AUTO", "0", "tcheck._auto_off"),
    ("FLYAUTOTUNE_NATIVE_AUTO", "1", "tcheck._auto_off"),
])
def test_accepted_settings_do_not_warn(monkeypatch, caplog, variable, value, read):
    from flyautotune.tuning import fastpath, tcheck

    monkeypatch.setenv(variable, value)
    module, name = read.split(".")
    with caplog.at_level(logging.WARNING, logger="flyautotune"):
        getattr({"fastpath": fastpath, "tcheck": tcheck}[module], name)()
    assert not [r for r in caplog.records if variable in r.getMessage()]


def test_the_hit_path_setting_is_read_once_per_process(monkeypatch, caplog):
    from flyautotune.tuning import fastpath

    monkeypatch.setattr(fastpath, "_native", None)
    monkeypatch.setattr("flyautotune.tuning.env._warned", set())
    monkeypatch.setenv("FLYAUTOTUNE_NATIVE_HIT", "maybe")
    reads = []
    real = fastpath._native_off
    monkeypatch.setattr(fastpath, "_native_off", lambda: reads.append(1) or real())
    with caplog.at_level(logging.WARNING, logger="flyautotune"):
        for _ in range(5):
            fastpath.native_type()
    assert len(reads) == 1


# -- 9. import: keys that are not a tuner's keys -----------------------------------------------------------


def _pack_entry(key):
    cfg = {"kwargs": {"BLOCK": 4}, "compile_hints": {}}
    return {"tuner": "demo", "key": key, "timing_key": key, "config": cfg,
            "timings": [{"config": cfg, "ms": 1.0, "error": None}], "provenance": {}, "created": 1.0}


def test_import_refuses_an_entry_whose_key_is_not_json(pm, capsys, tmp_path):
    good = json.dumps({"args": {"n": 16}}, sort_keys=True, separators=(",", ":"))
    pack = tmp_path / "pack.json"
    pack.write_text(json.dumps({"format": "flyautotune-pack", "version": 1,
                                "entries": [_pack_entry(good), _pack_entry("notjson")]}))
    status, out, err = run(capsys, "import", pack)
    assert status == 1 and "add 1" not in out
    line = one_error_line(err)
    assert f"tuning pack {pack}: entries[1].key is not JSON: 'notjson'" in line
    assert store_mod.get_store().entries() == []  # nothing imported, not even the good entry


@pytest.mark.parametrize("key, problem", [
    ("[1, 2]", "is JSON list, not a JSON object"),
    ('"k"', "is JSON str, not a JSON object"),
    ("{not json}", "is not JSON"),
])
def test_import_refuses_keys_no_lookup_would_find(pm, capsys, tmp_path, key, problem):
    pack = tmp_path / "pack.json"
    pack.write_text(json.dumps({"format": "flyautotune-pack", "version": 1, "entries": [_pack_entry(key)]}))
    status, _, err = run(capsys, "import", pack, "--dry-run")
    assert status == 1 and f"entries[0].key {problem}" in one_error_line(err)


@pytest.mark.parametrize("spelling", [{"sort_keys": True, "separators": (",", ":")}, {}])
def test_import_of_json_object_keys_still_works(pm, capsys, tmp_path, spelling):
    key = json.dumps({"target": {"arch": "x86_64"}, "args": {"n": 16}}, **spelling)
    pack = tmp_path / "pack.json"
    pack.write_text(json.dumps({"format": "flyautotune-pack", "version": 1, "entries": [_pack_entry(key)]}))
    status, out, err = run(capsys, "import", pack)
    assert status == 0 and "add 1" in out, err
    assert [e.key for e in store_mod.get_store().entries()] == [key]


def test_every_argument_of_every_command_says_what_it_takes_in_its_help(capsys):
    import argparse

    from flyautotune.cli.main import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    silent = [f"{name} {'/'.join(a.option_strings) or a.metavar or a.dest}" for name, p in commands.items()
              for a in p._actions if not a.help]
    assert silent == []
    assert main(["report", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "--shape MxN input shape, e.g. 4096x8192; repeat for several shapes" in shown
    assert "--dtype DTYPE bf16 (default), fp16 or fp32" in shown
