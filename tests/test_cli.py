"""The ``flyautotune`` command, run the way a user runs it: a subprocess of
``python -m flyautotune`` or the ``flyautotune`` console script.

Most tests use a tiny adopter package ("clidemo", pure Python, no GPU) made
visible to the subprocess through a real entry point (a dist-info folder on
PYTHONPATH), so they are quick on a CPU; tests/test_cli_rmsnorm.py runs the
RMSNorm adopter itself.
"""

from __future__ import annotations

import json
import os
import re
import select
import sqlite3
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

DEMO_HOOKS = '''
import time

import flyautotune as fat


_ran = {}


def _launch(x, out, n, BLOCK=None):
    if BLOCK == 3:
        raise ValueError("BLOCK=3 does not divide the rows")
    _ran["BLOCK"] = BLOCK
    out[:] = [v * 2.0 for v in x]
    return out


def _bench(fn, setup=None):
    # A fixed cost per config (BLOCK=4 fastest, by construction): the winner
    # must not depend on how loaded the machine running the tests is.
    if setup is not None:
        setup()
    time.sleep(0.001)
    fn()
    return {1: 4.0, 2: 3.0, 4: 1.0}[_ran["BLOCK"]]


_tuned = fat.autotune(
    configs=[fat.Config(BLOCK=b) for b in (1, 2, 3, 4)],
    key=["n"],
    name="clidemo",
    default=lambda n, **_: fat.Config(BLOCK=1),
    do_bench=_bench,
)(_launch)


_tuned_untunable = fat.autotune(configs=[fat.Config(BLOCK=1)], key=["n"], name="clidemo_untunable")(_launch)


def entry(x):
    out = [0.0] * len(x)
    return _tuned(x, out, len(x))


def example(shape, dtype, device):
    if len(shape) != 2:
        raise ValueError(f"clidemo takes MxN shapes, got {len(shape)} dimensions")
    return ([1.0] * (shape[0] * shape[1]),), {}


def compile_spec(shape, dtype, config):
    import triton
    import triton.language as tl

    def _copy(X, Y, SIZE: tl.constexpr):
        offs = tl.arange(0, SIZE)
        tl.store(Y + offs, tl.load(X + offs) * 2.0)

    kernel = triton.runtime.jit.JITFunction(_copy)
    return kernel, {"X": f"*{dtype}", "Y": f"*{dtype}"}, {"SIZE": 32 * config.kwargs["BLOCK"]}


@fat.hookimpl
def flyautotune_register_adopters(register):
    register(fat.Adopter(
        name="clidemo",
        tuner=_tuned,
        entry=entry,
        tuner_args=lambda x: ((x, [0.0] * len(x), len(x)), {}),
        example=example,
        compile_spec=compile_spec,
        description="doubles a list (command-line tests)",
    ))
    register(fat.Adopter(name="clidemo_untunable", tuner=_tuned_untunable))
'''


def _dist(site: Path, dist: str, version: str, package: str, hooks: str, ep_name: str) -> None:
    pkg = site / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "hooks.py").write_text(hooks)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[flyautotune]\n{ep_name} = {package}.hooks\n")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A folder with an installed-looking distribution: the demo adopter."""
    root = tmp_path_factory.mktemp("site")
    _dist(root, "fat-cli-demo", "0.2.0", "fat_cli_demo", DEMO_HOOKS, "clidemo")
    return root


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory):
    """A plugin whose module fails to import."""
    root = tmp_path_factory.mktemp("broken")
    _dist(root, "fat-cli-broken", "0.1.0", "fat_cli_broken",
          "raise ImportError('fat_cli_broken needs missing_dependency_xyz')\n", "clibroken")
    return root


@pytest.fixture
def cli(site, tmp_path):
    """``cli(*args, script=False, env=None)`` -> CompletedProcess, with an isolated store."""
    cache = tmp_path / "cache"

    def run(*args, script=False, env=None, timeout=180):
        full_env = dict(os.environ)
        for name in ("FLYAUTOTUNE", "FLYAUTOTUNE_LOG", "FLYAUTOTUNE_EVENT_LOG", "FLYAUTOTUNE_DISABLE_PLUGINS"):
            full_env.pop(name, None)
        full_env["FLYAUTOTUNE_CACHE_DIR"] = str(cache)
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), full_env.get("PYTHONPATH")]))
        full_env.update(env or {})
        cmd = [console_script()] if script else [sys.executable, "-m", "flyautotune"]
        return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, env=full_env,
                              cwd=str(tmp_path), timeout=timeout)

    run.cache = cache
    run.site = site
    return run


def console_script() -> str:
    path = Path(sys.executable).parent / ("flyautotune.exe" if os.name == "nt" else "flyautotune")
    if not path.exists():
        pytest.skip(f"the flyautotune console script is not installed next to {sys.executable}")
    return str(path)


def ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


# -- plugins ------------------------------------------------------------------------------


def test_plugins_lists_backends_adopters_versions_and_load_failures(cli, site, broken_site):
    result = cli("plugins", script=True, env={"PYTHONPATH": os.pathsep.join([str(site), str(broken_site)])})
    out = ok(result)
    assert "plugin 'clibroken' from fat-cli-broken 0.1.0 failed to load" in result.stderr  # the log warning
    assert "flyautotune.cpu" in out and "backend" in out
    demo = next(line for line in out.splitlines() if line.strip().startswith("clidemo "))
    assert "fat-cli-demo" in demo
    plugin_row = next(line for line in out.splitlines()
                      if "fat-cli-demo" in line and "register_adopters" in line)
    assert "0.2.0" in plugin_row
    failed = out.split("Failed to load:", 1)[1]
    assert "clibroken" in failed and "fat-cli-broken 0.1.0" in failed
    assert "ImportError: fat_cli_broken needs missing_dependency_xyz" in failed


def test_an_unknown_adopter_names_the_plugins_that_failed_to_load(cli, site, broken_site):
    """The adopter a user asks for may be in a plugin that failed to import: the error says which ones did."""
    result = cli("tune", "clibroken", "--shape", "2x8", "--device", "cpu",
                 env={"PYTHONPATH": os.pathsep.join([str(site), str(broken_site)])})
    assert result.returncode == 2
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("flyautotune: error: unknown adopter 'clibroken'; registered adopters: ")
    assert line.endswith("; plugins that failed to load, one of which may register it: 'clibroken' from "
                         "fat-cli-broken (ImportError: fat_cli_broken needs missing_dependency_xyz)")


def test_an_unknown_adopter_names_the_plugins_the_environment_disables(cli):
    result = cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu",
                 env={"FLYAUTOTUNE_DISABLE_PLUGINS": "clidemo"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(
        "; FLYAUTOTUNE_DISABLE_PLUGINS disables 'clidemo', which may register it")


def test_plugins_json_and_disabled_plugins(cli, site, broken_site):
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(broken_site)]), "FLYAUTOTUNE_DISABLE_PLUGINS": "clibroken"}
    data = json.loads(ok(cli("plugins", "--json", env=env)))
    names = {a["name"]: a for a in data["adopters"]}
    assert names["clidemo"]["tunable"] and names["clidemo"]["report"]
    assert not names["clidemo_untunable"]["tunable"]
    assert data["failures"] == []  # the broken one is blocked, so it is never imported
    assert data["disabled"] == ["clibroken"]
    demo = next(p for p in data["plugins"] if p["name"] == "clidemo")
    assert (demo["distribution"], demo["version"], demo["hooks"]) == ("fat-cli-demo", "0.2.0", ["register_adopters"])
    assert data["hit_path"]["kind"] in ("c", "python") and data["hit_path"]["why"]


def test_plugins_says_which_path_serves_cache_hits(cli):
    """The C hit path where it is built; with FLYAUTOTUNE_NATIVE_HIT=0, the Python one, saying why."""
    from flyautotune.tuning import fastpath

    off = ok(cli("plugins", env={"FLYAUTOTUNE_NATIVE_HIT": "0"}))
    assert "Cache hits: in Python (FLYAUTOTUNE_NATIVE_HIT turns the C one off)." in off
    on = json.loads(ok(cli("plugins", "--json")))["hit_path"]
    if fastpath.native_type() is not None:
        assert on == {"kind": "c", "why": "flyautotune.tuning._hit"}
    else:
        assert on["kind"] == "python" and "is not built" in on["why"]


# -- tune -----------------------------------------------------------------------------------


def _table_rows(out: str) -> dict:
    """config text -> the row's line, from the result table of one shape."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "time (ms)" in line)
    rows = {}
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith("* winner"):
            break
        body = line[1:].strip()
        rows[body.split("  ")[0].replace(" (default)", "")] = line
    return rows


def test_tune_searches_prints_a_table_stores_the_winner_and_reports_progress(cli):
    result = cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu")
    out = ok(result)
    assert "running on the CPU under Triton's interpreter" in out
    assert "clidemo 2x8 bf16 on cpu" in out and "searched 4 candidates" in out
    rows = _table_rows(out)
    assert set(rows) == {"BLOCK=1", "BLOCK=2", "BLOCK=3", "BLOCK=4"}
    assert rows["BLOCK=4"].startswith("*") and "1.00x" in rows["BLOCK=4"]
    assert not rows["BLOCK=1"].startswith("*")
    assert "BLOCK=1 (default)" in rows["BLOCK=1"]  # the default is marked: it is what a winner must beat
    assert re.search(r"vs the default: \d+\.\d% faster, beyond the noise band of \d+\.\d%", out)
    assert "failed" in rows["BLOCK=3"] and "BLOCK=3 does not divide the rows" in rows["BLOCK=3"]
    assert "* winner: BLOCK=4" in out
    assert f"winner stored in {cli.cache}" in out
    # progress: plain lines on a pipe, one per candidate, with n of m and the elapsed time
    progress = [line for line in result.stderr.splitlines() if line.startswith("clidemo 2x8 bf16: candidate ")]
    assert "\r" not in result.stderr
    assert [p.split("candidate ")[1].split(" [")[0] for p in progress[:4]] == [
        "1 of 4", "2 of 4", "3 of 4", "4 of 4"]
    assert all("(elapsed " in p for p in progress[:4])
    assert "failed: ValueError: BLOCK=3 does not divide the rows" in progress[2]
    assert "searched 4 candidates in" in result.stderr
    shown = ok(cli("show", "clidemo"))
    assert "clidemo" in shown and "n=16" in shown and "BLOCK=4" in shown and "cpu/" in shown


def test_tune_reuses_the_stored_winner_and_force_searches_again(cli):
    first = ok(cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu"))
    again = cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu")
    assert "winner from the store" in ok(again)
    decided = [line for line in first.splitlines() if line.startswith("vs the default: ")]
    assert len(decided) == 1 and decided[0] in again.stdout  # what the search decided, as it was stored
    assert "candidate 1 of" not in again.stderr
    rows = _table_rows(again.stdout)
    assert rows["BLOCK=4"].startswith("*")  # the stored timings, shown again
    assert "BLOCK=1 (default)" in rows["BLOCK=1"]  # with the default marked, as the search showed it
    assert sum("(default)" in line for line in rows.values()) == 1
    forced = cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu", "--force")
    assert "searched 4 candidates" in ok(forced)
    assert "candidate 4 of 4" in forced.stderr


def test_flyautotune_1_in_the_environment_makes_tune_search_again(cli):
    ok(cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu"))
    again = cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu", env={"FLYAUTOTUNE": "1"})
    assert "searched 4 candidates" in ok(again) and "winner from the store" not in again.stdout
    assert "candidate 4 of 4" in again.stderr
    assert "as FLYAUTOTUNE=1 does" in " ".join(ok(cli("tune", "--help")).split())


def test_tune_without_a_usable_store_still_tunes_and_says_nothing_was_stored(cli, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the store's folder should be")
    result = cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu",
                 env={"FLYAUTOTUNE_CACHE_DIR": str(blocker / "cache")})
    out = ok(result)
    assert "* winner: BLOCK=4" in out and "winner stored in" not in out
    assert out.splitlines()[-1].startswith("winner not stored: the store cannot take it (see the warning above)")
    warning = result.stderr.split("warning: ", 1)[1].splitlines()[0]  # said before the search began
    assert f"FLYAUTOTUNE_CACHE_DIR='{blocker / 'cache'}' cannot be created: {blocker} is a file" in warning
    assert result.stderr.index("warning: ") < result.stderr.index("searching 4 candidates")


def test_tune_with_the_store_locked_throughout_says_the_winner_was_not_stored(cli):
    ok(cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu"))  # creates the store
    holder = sqlite3.connect(cli.cache / "tuning.sqlite3", timeout=0)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing for the whole command
    try:
        result = cli("tune", "clidemo", "--shape", "4x8", "--device", "cpu")
    finally:
        holder.rollback()
        holder.close()
    out = ok(result)
    assert "* winner: BLOCK=" in out and "winner stored in" not in out  # kept in memory only, then lost
    assert out.splitlines()[-1].startswith("winner not stored: the store cannot take it")
    assert "4x8" not in ok(cli("show", "clidemo"))


def test_tune_several_shapes_and_the_console_script(cli):
    out = ok(cli("tune", "clidemo", "--shape", "2x8", "--shape", "4x8", "--device", "cpu", script=True))
    assert "clidemo 2x8 bf16" in out and "clidemo 4x8 bf16" in out
    shown = ok(cli("show", script=True))
    assert "2 tuned entries" in shown and "n=16" in shown and "n=32" in shown


def test_tune_progress_on_a_terminal_is_one_updating_line(cli, site, tmp_path):
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    env = dict(os.environ, FLYAUTOTUNE_CACHE_DIR=str(tmp_path / "c"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    env.pop("FLYAUTOTUNE", None)
    proc = subprocess.Popen([sys.executable, "-m", "flyautotune", "tune", "clidemo", "--shape", "2x8",
                             "--device", "cpu"], stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            break
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    term = b"".join(chunks).decode()
    assert "\r\x1b[K" in term  # the line is redrawn in place
    assert "candidate 1 of 4" in term and "[" in term
    assert "candidate 1 of 4 [BLOCK=1]" not in term  # not the pipe format
    assert term.count("\r\x1b[K") >= 5  # start, four candidates
    assert "\r\x1b[Kflyautotune: WARNING: clidemo: candidate 3/4" in term  # a log line clears it first
    assert "searched 4 candidates" in term
    assert b"* winner: BLOCK=4" in stdout


def _png_size(data: bytes) -> tuple:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_tune_plot_writes_a_png(cli, tmp_path):
    out_png = tmp_path / "timings.png"
    out = ok(cli("tune", "clidemo", "--shape", "2x8", "--shape", "4x8", "--device", "cpu", "--plot", out_png))
    assert f"plot: {out_png}" in out
    data = out_png.read_bytes()
    width, height = _png_size(data)
    assert width > 100 and height > 100


def test_plot_builtin_renderer_draws_every_bar():
    from flyautotune.plot import Bar, Panel, png_chart

    panels = [Panel("demo 2x8", [Bar("BLOCK=4", 1.0, True), Bar("BLOCK=1", 2.0), Bar("BLOCK=3", None)])]
    data = png_chart(panels)
    width, height = _png_size(data)
    # decode: IDAT holds one filter byte + RGB per row
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    assert len(raw) == height * (1 + 3 * width)
    assert bytes((44, 160, 44)) in raw  # the winner's green bar
    assert bytes((31, 119, 180)) in raw  # another candidate's blue bar


@pytest.mark.skipif(__import__("importlib").util.find_spec("matplotlib") is None,
                    reason="matplotlib is not installed (the built-in PNG renderer is tested instead)")
def test_plot_with_matplotlib(tmp_path):
    from flyautotune.plot import Bar, Panel, write_chart

    path = tmp_path / "m.png"
    assert write_chart(path, [Panel("demo", [Bar("a", 1.0, True), Bar("b", None)])]) == "matplotlib"
    assert _png_size(path.read_bytes())[0] > 0


def test_plot_without_matplotlib_needs_a_png_name(tmp_path):
    from flyautotune.plot import Bar, Panel, write_chart

    with pytest.raises(ValueError, match="only .png"):
        write_chart(tmp_path / "x.svg", [Panel("t", [Bar("a", 1.0)])], renderer="builtin")


# -- errors: exit 2 and one line ------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["tune", "nosuch", "--shape", "2x8", "--device", "cpu"], "unknown adopter 'nosuch'; registered adopters: "),
    (["tune", "nosuch", "--shape", "4096x8192", "--device", "cpu"], "unknown adopter 'nosuch'"),
    (["tune", "clidemo", "--shape", "2x", "--device", "cpu"], "argument --shape: '2x' is not a shape"),
    (["tune", "clidemo", "--shape", "0x8", "--device", "cpu"], "argument --shape: '0x8' is not a shape"),
    (["tune", "clidemo", "--shape", "axb"], "argument --shape: 'axb' is not a shape"),
    (["tune", "clidemo", "--shape", "2x8", "--dtype", "int3"], "argument --dtype: 'int3' is not a dtype; "
                                                                "accepted: bf16, fp16, fp32"),
    (["tune", "clidemo", "--shape", "2x8", "--device", "tpu:0"], "argument --device: 'tpu:0'"),
    (["tune", "clidemo", "--shape", "2x4x8", "--device", "cpu"],
     "adopter 'clidemo' cannot build inputs for --shape 2x4x8 --dtype bf16: clidemo takes MxN shapes"),
    (["tune", "clidemo_untunable", "--shape", "2x8", "--device", "cpu"],
     "adopter 'clidemo_untunable' cannot be tuned from the command line: it declares no example"),
    (["tune", "clidemo", "--device", "cpu"], "the following arguments are required: --shape"),
    (["report", "clidemo", "--shape", "2x8", "--target", "gfx1100"], "argument --target: 'gfx1100' is not a "
                                                                      "supported target; accepted: gfx90a"),
    (["report", "nosuch", "--shape", "2x8", "--target", "sm_90"], "unknown adopter 'nosuch'"),
    (["report", "clidemo_untunable", "--shape", "2x8", "--target", "sm_90"], "declares no compile_spec"),
    (["show", "nosuch"], "unknown adopter 'nosuch'"),
    (["clear", "nosuch"], "unknown adopter 'nosuch'"),
    (["import", "missing.json"], "argument FILE: 'missing.json' does not exist"),
    (["export", "."], "argument FILE: '.' is a folder; give a file to write, such as "),
    (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
    ([], "the following arguments are required: COMMAND"),
])
def test_bad_input_is_one_line_and_exit_2(cli, args, message):
    result = cli(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("flyautotune: error: ")
    assert message in lines[0]


def test_cuda_device_without_a_gpu_is_exit_2(cli):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: --device cuda:0 is valid here")
    result = cli("tune", "clidemo", "--shape", "2x8", "--device", "cuda:0")
    assert result.returncode == 2
    assert result.stderr.strip() == ("flyautotune: error: argument --device: 'cuda:0' but torch sees no "
                                     "accelerator; use --device cpu")


def test_a_bad_log_level_warns_and_the_command_still_runs(cli):
    result = cli("show", env={"FLYAUTOTUNE_LOG": "loud"})
    assert "No tuned entries" in ok(result)
    assert "FLYAUTOTUNE_LOG='loud' is not a log level; accepted: debug, info" in result.stderr


def test_a_malformed_pack_is_exit_1_with_the_reason(cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else", "version": 1, "entries": []}')
    result = cli("import", bad)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == (f"flyautotune: error: tuning pack {bad}: 'format' is 'something-else'; "
                                     f"expected 'flyautotune-pack'")


def test_help_and_version(cli):
    assert "tune" in ok(cli("--help")) and "report" in ok(cli("--help"))
    from flyautotune import __version__

    assert ok(cli("--version")).strip() == f"flyautotune {__version__}"


# -- the store -------------------------------------------------------------------------------------


@pytest.mark.skipif(not all(hasattr(__import__("flyautotune.store").store, n) for n in ("write_atomic", "plan_import")),
                    reason="the store's write_atomic and plan_import are not merged yet")
def test_show_export_clear_import_round_trip(cli, tmp_path):
    assert "No tuned entries" in ok(cli("show"))
    ok(cli("tune", "clidemo", "--shape", "2x8", "--shape", "4x8", "--device", "cpu"))
    before = ok(cli("show"))
    pack = tmp_path / "winners.json"
    assert ok(cli("export", pack)).strip() == f"exported 2 entries to {pack}"
    doc = json.loads(pack.read_text())
    assert doc["format"] == "flyautotune-pack" and len(doc["entries"]) == 2
    assert {e["config"]["kwargs"]["BLOCK"] for e in doc["entries"]} == {4}
    assert ok(cli("show", "--json")) == pack.read_text()  # show --json is the same canonical pack
    only = tmp_path / "clidemo.json"
    assert "exported 2 entries" in ok(cli("export", only, "--adopter", "clidemo"))
    assert ok(cli("clear", "clidemo")).startswith("removed 2 entries of clidemo from ")
    assert "No tuned entries" in ok(cli("show"))
    assert f"imported 2 entries from {pack}" in ok(cli("import", pack))
    assert ok(cli("show")).splitlines()[1:] == before.splitlines()[1:]
    again = cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu")
    assert "winner from the store" in ok(again)  # imported winners are used by the next tune
    assert ok(cli("clear", "--all")).startswith("removed 2 entries from ")


@pytest.mark.parametrize("suffix", ["", "-wal"])
def test_export_onto_the_store_itself_is_refused_and_keeps_the_winners(cli, suffix):
    ok(cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu"))
    target = cli.cache / ("tuning.sqlite3" + suffix)
    result = cli("export", target)
    assert result.returncode == 2
    assert f"argument FILE: '{target}' is the store's own file" in result.stderr
    assert "n=16" in ok(cli("show", "clidemo"))  # the store was not overwritten by a pack


def test_export_to_a_file_named_after_the_store_is_written(cli):
    # a pack beside the store whose name begins with the store's (tuning.sqlite3.pack.json) is no store file
    ok(cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu"))
    target = cli.cache / "tuning.sqlite3.pack.json"
    assert "exported 1 entry" in ok(cli("export", target))
    assert len(json.loads(target.read_text())["entries"]) == 1
    assert "n=16" in ok(cli("show", "clidemo"))  # the store is untouched


def test_import_says_which_entries_this_installation_will_never_look_up(cli, tmp_path):
    ok(cli("tune", "clidemo", "--shape", "2x8", "--shape", "4x8", "--device", "cpu"))
    pack = tmp_path / "winners.json"
    ok(cli("export", pack))
    doc = json.loads(pack.read_text())
    key = json.loads(doc["entries"][0]["key"])  # one entry from a machine with another torch and source
    key["backend"]["torch"] = "1.0.0+other"
    key["source"] = "0123456789abcdef"
    doc["entries"][0]["key"] = json.dumps(key, sort_keys=True, separators=(",", ":"))
    pack.write_text(json.dumps(doc))
    ok(cli("clear", "--all"))
    out = ok(cli("import", pack))
    lines = out.splitlines()
    note = lines.index("note: 1 entry written that this installation's lookups will not find (kept for the "
                       "machines they match; tune here to get winners for this one):")
    assert "n=16" in lines[note + 1] or "n=32" in lines[note + 1]
    assert "tuned with another version of its kernel's source (fingerprint 0123456789abcdef, installed " \
        in lines[note + 1]
    assert "; torch 1.0.0+other (here " in lines[note + 1]
    assert lines[-1].startswith("imported 2 entries")
    ok(cli("clear", "--all"))
    dry = ok(cli("import", pack, "--dry-run"))
    assert "note: 1 entry would be written that" in dry


def test_show_and_clear_stale_list_and_delete_only_winners_no_lookup_here_finds(cli, tmp_path):
    ok(cli("tune", "clidemo", "--shape", "2x8", "--shape", "4x8", "--device", "cpu"))
    assert "No stale entries in " in ok(cli("show", "--stale"))
    pack = tmp_path / "winners.json"
    ok(cli("export", pack))
    doc = json.loads(pack.read_text())
    key = json.loads(doc["entries"][0]["key"])  # the same shape, tuned under another torch
    key["backend"]["torch"] = "1.0.0+other"
    doc["entries"][0]["key"] = json.dumps(key, sort_keys=True, separators=(",", ":"))
    pack.write_text(json.dumps(doc))
    ok(cli("import", pack))
    assert ok(cli("show")).startswith("3 tuned entries")
    listed = ok(cli("show", "--stale")).splitlines()
    assert listed[0].startswith("1 stale entry in ") and "`flyautotune clear --stale` deletes them" in listed[0]
    (row,) = [line for line in listed if line.startswith("clidemo ")]
    assert "torch 1.0.0+other (here " in row
    (stale,) = json.loads(ok(cli("show", "--stale", "--json")))["entries"]
    assert json.loads(stale["key"])["backend"]["torch"] == "1.0.0+other"
    refused = cli("clear", "--stale", "--all")
    assert refused.returncode == 2 and "give --stale or --all, not both" in refused.stderr
    assert ok(cli("clear", "--stale", "clidemo")).startswith("removed 1 stale winner of clidemo from ")
    assert ok(cli("show")).startswith("2 tuned entries")  # the winners this installation uses are kept
    assert "No stale entries" in ok(cli("show", "--stale"))
    assert "winner from the store" in ok(cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu"))


# -- telemetry ---------------------------------------------------------------------------------


def test_flyautotune_log_shows_library_log_records(cli):
    quiet = cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu")
    assert "searching 4 configs" not in ok(quiet) + quiet.stderr
    loud = cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu", "--force", env={"FLYAUTOTUNE_LOG": "info"})
    ok(loud)
    line = next(line for line in loud.stderr.splitlines() if "searching 4 configs" in line)
    assert "[flyautotune INFO] clidemo: searching 4 configs on cpu/" in line
    verbose = cli("-v", "tune", "clidemo", "--shape", "2x8", "--device", "cpu", "--force")
    assert "[flyautotune INFO] clidemo: winner BLOCK=4 (" in ok(verbose) + verbose.stderr
    after = cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu", "--force", "-v")  # after the command too
    assert "[flyautotune INFO] clidemo: winner BLOCK=4 (" in ok(after) + after.stderr


def test_progress_formats_plain_lines():
    import io

    from flyautotune.progress import Progress

    stream = io.StringIO()
    p = Progress("demo 2x8 bf16", stream=stream, tty=False)
    p({"event": "search_start", "candidates": 2})
    p({"event": "candidate", "index": 1, "total": 2, "config": {"kwargs": {"BLOCK": 1}, "compile_hints": {}},
       "ms": 1.5, "error": None, "reused": False})
    p({"event": "candidate", "index": 2, "total": 2, "config": {"kwargs": {"BLOCK": 2}, "compile_hints": {}},
       "ms": None, "error": "ValueError: no\nmore", "reused": False})
    p({"event": "retime", "round": 1, "most": 6, "finalists": [{"kwargs": {"BLOCK": 1}}, {"kwargs": {"BLOCK": 2}}]})
    p({"event": "search_end", "duration_s": 0.25})
    lines = stream.getvalue().splitlines()
    assert lines[0] == "demo 2x8 bf16: searching 2 candidates"
    assert lines[1].startswith("demo 2x8 bf16: candidate 1 of 2 [BLOCK=1] 1.5000 ms (elapsed ")
    assert lines[2].startswith("demo 2x8 bf16: candidate 2 of 2 [BLOCK=2] failed: ValueError: no (elapsed ")
    assert lines[3].startswith("demo 2x8 bf16: re-timing the default and the best 1 side by side, round 1 of at "
                               "most 6 (elapsed ")
    assert lines[4] == "demo 2x8 bf16: searched 2 candidates in 0.2 s, 1 failed"


def test_progress_on_a_terminal_redraws_one_line_through_the_re_timing_rounds():
    import io
    import time

    from flyautotune.progress import Progress

    stream = io.StringIO()
    p = Progress("demo", stream=stream, tty=True, tick_s=0.01)
    p({"event": "search_start", "candidates": 1})
    p({"event": "candidate", "index": 1, "total": 1, "config": {"kwargs": {"B": 1}}, "ms": 1.0, "error": None})
    p({"event": "retime", "round": 2, "most": 6, "finalists": [{"kwargs": {"B": 1}}] * 3})
    time.sleep(0.05)  # the ticker keeps the clock moving on the re-timing line
    p({"event": "search_end", "duration_s": 0.5})
    text = stream.getvalue()
    redraws = [part for part in text.split("\r\x1b[K") if "re-timing the default and the best 2" in part]
    assert len(redraws) >= 2 and all("round 2 of at most 6 (" in part for part in redraws)
    assert "\n" not in text.rsplit("searched 1 candidates", 1)[0]  # one line, redrawn, until the summary


def _documented_events() -> dict:
    """event name -> documented field names, from the table in docs/telemetry.md."""
    text = (ROOT / "docs" / "telemetry.md").read_text()
    section = text.split("<!-- event-fields -->", 1)[1].split("<!-- /event-fields -->", 1)[0]
    events = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            fields = {f.strip().replace("`", "") for f in cells[1].split(",") if f.strip()}
            events[cells[0].strip("`")] = fields
    return events


def test_event_log_matches_the_documented_schema(cli, tmp_path):
    documented = _documented_events()
    assert {"select", "search_start", "candidate", "search_end"} <= set(documented)
    log_path = tmp_path / "events.jsonl"
    ok(cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu", env={"FLYAUTOTUNE_EVENT_LOG": str(log_path)}))
    ok(cli("tune", "clidemo", "--shape", "2x8", "--device", "cpu", env={"FLYAUTOTUNE_EVENT_LOG": str(log_path)}))
    records = [json.loads(line) for line in log_path.read_text().splitlines()]
    for r in records:
        # fields in parentheses in the table appear when they apply (a timed candidate, a protected default)
        fields = documented[r["event"]]
        assert set(r) - {"event", "time"} <= {f.strip("()") for f in fields}, r
        assert {f for f in fields if not f.startswith("(")} <= set(r), r
        assert isinstance(r["time"], float) and r["tuner"] == "clidemo"
        assert json.loads(r["key"])["args"] == {"n": 16}
    kinds = [r["event"] for r in records]
    # first run: the default answers the first call, then the command searches (the default and the best two
    # timed again side by side in three rounds, by the tuner's own do_bench); second run: the store
    assert kinds == (["select", "search_start"] + ["candidate"] * 4 + ["retime"] * 3
                     + ["search_end", "select", "select"])
    assert [r["source"] for r in records if r["event"] == "select"] == ["default", "search", "store"]
    start = records[1]
    assert start["candidates"] == 4
    cands = records[2:6]
    assert [c["index"] for c in cands] == [1, 2, 3, 4] and {c["total"] for c in cands} == {4}
    failed = next(c for c in cands if c["config"]["kwargs"]["BLOCK"] == 3)
    assert failed["ms"] is None and failed["error"] == "ValueError: BLOCK=3 does not divide the rows"
    assert all(c["ms"] > 0 and c["error"] is None for c in cands if c is not failed)
    assert [[f["kwargs"]["BLOCK"] for f in r["finalists"]] for r in records[6:9]] == [[1, 4, 2], [4, 2, 1],
                                                                                       [2, 1, 4]]
    end = records[9]
    assert end["winner"] == {"kwargs": {"BLOCK": 4}, "compile_hints": {}}
    assert end["duration_s"] > 0 and end["ms"] == min(c["ms"] for c in cands if c["ms"] is not None)
    assert len(end["candidates"]) == 4 and {"config", "ms", "error"} <= set(end["candidates"][0])
    assert records[10]["config"] == end["winner"]


# -- report ---------------------------------------------------------------------------------------------


def test_report_cross_compiles_each_candidate_for_sm90(cli):
    pytest.importorskip("triton.backends.nvidia")
    out = ok(cli("report", "clidemo", "--target", "sm_90", "--shape", "2x8"))
    assert "compiled for sm_90 (4 candidates, no GPU used)" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("BLOCK=")}
    assert set(lines) == {"BLOCK=1", "BLOCK=2", "BLOCK=3", "BLOCK=4"}
    assert "failed:" in lines["BLOCK=3"]  # 96 elements: tl.arange needs a power of two
    assert "3 of 4 candidates built 3 distinct binaries." in out
    data = json.loads(ok(cli("report", "clidemo", "--target", "sm_90", "--shape", "2x8", "--json")))
    rows = data[0]["candidates"]
    good = [r for r in rows if r["error"] is None]
    assert len(good) == 3
    for r in good:
        assert r["registers"] > 0 and r["spills"] == 0 and r["occupancy_unit"] == "warps/SM"
        assert 0 < r["occupancy"] <= r["occupancy_max"] == 64 and len(r["binary_sha256"]) == 64



def test_report_under_triton_interpret_says_so_and_exits_2(cli):
    """With TRITON_INTERPRET=1 in the environment Triton builds its own library functions for the
    interpreter, and no kernel using tl.sum could cross-compile: the report says which variable to unset
    instead of listing every candidate as failed. TRITON_INTERPRET=0 reports as usual."""
    pytest.importorskip("triton.backends.nvidia")
    result = cli("report", "clidemo", "--target", "sm_90", "--shape", "2x8", env={"TRITON_INTERPRET": "1"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == ("flyautotune: error: flyautotune report cross-compiles for a GPU target, but "
                                     "TRITON_INTERPRET='1' is set in the environment (Triton's interpreter); unset "
                                     "it or set it to 0")
    out = ok(cli("report", "clidemo", "--target", "sm_90", "--shape", "2x8", env={"TRITON_INTERPRET": "0"}))
    assert "3 of 4 candidates built 3 distinct binaries." in out


def test_report_reads_triton_interpret_as_triton_does(cli):
    """``y`` turns Triton's interpreter on, so the report refuses it; `` 1`` (with a space) does not, as
    Triton does not strip the value, so the report cross-compiles as usual."""
    pytest.importorskip("triton.backends.nvidia")
    result = cli("report", "clidemo", "--target", "sm_90", "--shape", "2x8", env={"TRITON_INTERPRET": "y"})
    assert result.returncode == 2 and "TRITON_INTERPRET='y' is set in the environment" in result.stderr
    out = ok(cli("report", "clidemo", "--target", "sm_90", "--shape", "2x8", env={"TRITON_INTERPRET": " 1"}))
    assert "3 of 4 candidates built 3 distinct binaries." in out

def _python(cli, program: str) -> subprocess.CompletedProcess:
    """Run ``program`` in a new Python process with the ``cli`` fixture's environment (demo adopter, store)."""
    env = {k: v for k, v in os.environ.items() if k not in ("FLYAUTOTUNE", "TRITON_INTERPRET")}
    env["FLYAUTOTUNE_CACHE_DIR"] = str(cli.cache)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(cli.site), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=180)


def test_a_cpu_tune_run_from_python_leaves_triton_interpret_as_it_found_it(cli):
    """``main(["tune", ..., "--device", "cpu"])`` turns Triton's interpreter on for its own run only: the
    program that called it sees the variable as it was (unset, or the user's value). Triton itself was
    imported for its interpreter by then (the plugins import their kernels), so a report in the same
    process says to run it in a new one rather than failing every candidate."""
    pytest.importorskip("triton.backends.nvidia")
    program = (
        "import os, sys\n"
        "from flyautotune.cli import main\n"
        "for before in (None, '0'):\n"
        "    if before is not None:\n"
        "        os.environ['TRITON_INTERPRET'] = before\n"
        "    assert main(['tune', 'clidemo', '--shape', '2x8', '--device', 'cpu', '--force']) == 0\n"
        "    print('after tune:', os.environ.get('TRITON_INTERPRET'))\n"
        "print('report:', main(['report', 'clidemo', '--target', 'sm_90', '--shape', '2x8']))\n")
    result = _python(cli, program)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("after tune:")] == [
        "after tune: None", "after tune: 0"]
    assert "report: 2" in result.stdout and "run 'flyautotune report' in a new process" in result.stderr


def test_report_in_a_process_whose_triton_was_imported_for_the_interpreter_says_to_start_a_new_one(cli):
    """Triton imported while ``TRITON_INTERPRET`` was on keeps its library built for the interpreter after
    the variable is unset: a report in that process could only fail every candidate, so it exits 2 and
    says to run it in a new process."""
    pytest.importorskip("triton.backends.nvidia")
    program = (
        "import os\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "import triton.language\n"
        "del os.environ['TRITON_INTERPRET']\n"
        "from flyautotune.cli import main\n"
        "print('report:', main(['report', 'clidemo', '--target', 'sm_90', '--shape', '2x8']))\n")
    result = _python(cli, program)
    assert "report: 2" in result.stdout, result.stdout + result.stderr
    assert ("this process imported Triton while TRITON_INTERPRET was on (a CPU tune earlier in the same Python "
            "process, say), so Triton's library is built for its interpreter until the process ends; run "
            "'flyautotune report' in a new process") in result.stderr


def test_report_cross_compiles_for_gfx942(cli):
    pytest.importorskip("flyautotune_rocm.report")
    pytest.importorskip("triton.backends.amd")
    data = json.loads(ok(cli("report", "clidemo", "--target", "gfx942", "--shape", "2x8", "--json")))
    good = [r for r in data[0]["candidates"] if r["error"] is None]
    assert len(good) == 3
    for r in good:
        assert r["registers"] > 0 and r["sgprs"] > 0 and r["occupancy_unit"] == "waves/SIMD"
        assert 0 < r["occupancy"] <= r["occupancy_max"] == 8
    assert len({r["binary_sha256"] for r in good}) == 3


def test_parse_target_names_what_is_accepted():
    pytest.importorskip("flyautotune_rocm")
    pytest.importorskip("flyautotune_cuda")
    import flyautotune as fat
    from flyautotune import Target
    from flyautotune.report import parse_target

    pm = fat.build_plugin_manager()  # the installed backends offer the names
    assert parse_target("gfx942", pm) == Target("rocm", "gfx942", 64)
    assert parse_target("SM_90", pm) == Target("cuda", "sm_90", 32)
    assert parse_target("sm90", pm) == Target("cuda", "sm_90", 32)
    with pytest.raises(ValueError, match=r"--target 'sm_75' is not a supported target; accepted: gfx90a, "):
        parse_target("sm_75", pm)


def test_python_m_and_console_script_are_the_same_command(cli):
    assert ok(cli("--help")) == ok(cli("--help", script=True))
