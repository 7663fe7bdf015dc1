"""The tensor check compiled against the installed torch (``flyautotune.tuning.tcheck``, ``_tcheck.cpp``):
it is built by the first cache hit in the background or by ``flyautotune native build``, loads only under
the torch it was built for, gives the same verdicts as torch's TensorGuards, and is what cache hits check
their tensors with once built."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import torch

import flyautotune as fat
from flyautotune.cli.main import main as cli
from flyautotune.tuning import fastpath, tcheck


@pytest.fixture
def fresh(monkeypatch):
    """The loader's and fastpath's once-per-process reads, made again for this test and after it."""
    monkeypatch.setattr(tcheck, "_loaded", None)
    monkeypatch.setattr(fastpath, "_guards", None)
    yield
    tcheck._loaded = None
    fastpath._guards = None


@pytest.fixture
def in_built(compiled_check, monkeypatch, fresh):
    monkeypatch.setenv(tcheck.DIR_ENV, str(compiled_check))
    monkeypatch.delenv(tcheck.ENV, raising=False)
    return compiled_check


def _guards(*tensors):
    return fastpath.torch_check(torch._C._dynamo.guards.TensorGuards, tensors)


def _variants():
    base = torch.randn(6, 8)
    return {
        "2d": base,
        "2d other sizes": torch.randn(3, 8),
        "2d other rows": torch.randn(6, 16),
        "transposed": torch.randn(8, 6).t(),
        "row slice": torch.randn(6, 16)[:, :8],
        "expanded": torch.randn(1, 8).expand(6, 8),
        "1d": torch.randn(8),
        "3d": torch.randn(2, 3, 8),
        "fp64": base.double(),
        "bf16": base.bfloat16(),
        "int": torch.ones(6, 8, dtype=torch.int32),
        "requires grad": torch.randn(6, 8, requires_grad=True),
        "parameter": torch.nn.Parameter(torch.randn(6, 8)),
        "0-d": torch.tensor(1.0),
        "empty": torch.empty(0, 8),
    }


def test_its_verdicts_are_torchs_over_layouts_dtypes_and_subclasses(in_built):
    TensorCheck = tcheck.check_type()
    assert TensorCheck is not None
    variants = _variants()
    w = torch.randn(8)
    disagree = []
    for made_name, made in variants.items():
        ours, theirs = TensorCheck(made, w), _guards(made, w)
        for name, t in variants.items():
            for w2 in (w, torch.randn(8), torch.randn(8).double(), torch.randn(16)[::2]):
                if ours(t, w2) != theirs(t, w2):
                    disagree.append((made_name, name, w2.dtype, w2.stride()))
    assert disagree == []
    check = TensorCheck(variants["2d"], w)
    assert check(variants["2d other sizes"], w) is True  # sizes are free: the key carries them
    assert check(variants["transposed"], w) is False
    assert check(variants["2d"], w, w) is False and check(variants["2d"]) is False
    assert check(variants["2d"], 1.0) is False and check("x", w) is False


def test_one_tensor_twice_fails_as_torchs_does_and_is_refused_at_construction(in_built):
    TensorCheck = tcheck.check_type()
    x, w = torch.randn(4, 8), torch.randn(8)
    check = TensorCheck(x, torch.randn(4, 8), w)
    assert check(x, torch.randn(4, 8), w) is True
    assert check(x, x, w) is False
    with pytest.raises(ValueError, match="arguments 0 and 1 are one tensor"):
        TensorCheck(x, x)
    with pytest.raises(TypeError, match="argument 1 must be a strided torch.Tensor.*float"):
        TensorCheck(x, 2.0)
    with pytest.raises(TypeError, match="argument 0 must be a strided"):
        TensorCheck(torch.randn(4, 4).to_sparse())
    with pytest.raises(TypeError, match="keyword"):
        TensorCheck(x, other=w)


@pytest.mark.parametrize("path", ["C hit path", "Python hit path"])
def test_cache_hits_check_their_tensors_with_it_in_place_calls_too(in_built, pm, counting_bench, hit_path, path):
    hit_path(path)

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], do_bench=counting_bench(),
                  plugin_manager=pm, name=f"t_tcheck_hits_{path[0]}")
    def launch(x, w, out, n, B=None):
        out.copy_(x * w + B)
        return B

    x, w, out = torch.randn(4, 8), torch.randn(8), torch.empty(4, 8)
    chosen = launch(x, w, out, 4)
    for _ in range(3):
        assert launch(x, w, out, 4) == chosen and launch.last_source == "memory"
        assert launch(x, w, x.clone(), 4) == chosen
    checks = [entry[0] for entry in launch._fast_memo.values()]
    assert checks and all(isinstance(c, tcheck.check_type()) for c in checks)
    y = x.clone()
    assert launch(y, w, y, 4) == chosen  # in place: a check over the distinct tensors and the pattern
    torch.testing.assert_close(y, x * w + chosen)
    inner = [alt[0] for e in launch._fast_memo.values() if e[2] for alt in e[2]]
    assert inner and all(isinstance(c, tcheck.check_type()) for c in inner)
    # a layout the entry was not made for still runs correctly (a fresh check for it)
    xt = torch.randn(8, 4).t()
    assert launch(xt, w, out, 4) == chosen
    torch.testing.assert_close(out, xt * w + chosen)


def test_a_build_for_another_torch_or_a_broken_file_is_never_loaded(in_built, monkeypatch, caplog):
    good = tcheck.build_path()
    monkeypatch.setattr(torch, "__version__", "0.0.0+elsewhere")
    other = tcheck.build_path()
    assert other != good and tcheck.check_type() is None  # another torch: its own file name, not built
    assert tcheck.status() == ("torch", "not built for this torch yet (FLYAUTOTUNE_NATIVE_AUTO=0 keeps hits from "
                                        "building it; flyautotune native build compiles it now)")
    shutil.copy(good, other)  # a file under that name built for another torch (as a copied cache would be)
    monkeypatch.setattr(tcheck, "_loaded", None)
    with caplog.at_level("WARNING", logger="flyautotune"):
        assert tcheck.check_type() is None
    assert "was built for torch" in caplog.text and "0.0.0+elsewhere" in caplog.text
    monkeypatch.setattr(torch, "__version__", "0.0.1+broken")  # a fresh name: a loaded one stays loaded
    broken = tcheck.build_path()
    broken.write_bytes(b"not a shared object")
    monkeypatch.setattr(tcheck, "_loaded", None)
    caplog.clear()
    with caplog.at_level("WARNING", logger="flyautotune"):
        assert tcheck.check_type() is None
    assert "does not load" in caplog.text and "flyautotune native build" in caplog.text


def test_the_environment_keeps_torchs_check(in_built, monkeypatch):
    monkeypatch.setenv(tcheck.ENV, "torch")
    assert tcheck.check_type() is None
    assert tcheck.status() == ("torch", "FLYAUTOTUNE_TENSOR_CHECK=torch")
    x = torch.randn(2, 3)
    check = fastpath.tensor_guards()((x,))
    assert not isinstance(check, type) and check(torch.randn(5, 3)) and not check(x.t())


def test_the_native_command_builds_and_reports(in_built, capsys):
    assert cli(["native", "build", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["check"] == "compiled" and report["torch"] == torch.__version__
    assert report["built"]["path"] == str(tcheck.build_path())
    assert cli(["native", "build"]) == 0  # built already: nothing is compiled, and the command says so
    assert capsys.readouterr().out.startswith(f"already built: {tcheck.build_path()} (--force compiles it again)")
    assert cli(["native"]) == 0
    assert "compiled check" in capsys.readouterr().out
    assert cli(["plugins"]) == 0
    assert "Tensor check: compiled for this torch" in capsys.readouterr().out


def test_the_native_command_without_a_build_says_how_to_get_one(tmp_path, monkeypatch, fresh, capsys):
    monkeypatch.setenv(tcheck.DIR_ENV, str(tmp_path))
    monkeypatch.delenv(tcheck.ENV, raising=False)
    assert cli(["native"]) == 0
    assert "TensorGuards (not built for this torch yet (FLYAUTOTUNE_NATIVE_AUTO=0" in capsys.readouterr().out
    monkeypatch.delenv(tcheck.AUTO_ENV)
    assert cli(["native"]) == 0
    assert "the first cache hit compiles it in the background" in capsys.readouterr().out
    assert cli(["native", "--force"]) == 2
    assert "--force goes with build" in capsys.readouterr().err


def test_a_failing_compiler_is_reported_with_its_output(tmp_path, monkeypatch, fresh):
    monkeypatch.setenv(tcheck.DIR_ENV, str(tmp_path))
    monkeypatch.setenv("CXX", f"{sys.executable} -c 'import sys; sys.stderr.write(\"no such header\"); sys.exit(3)'")
    with pytest.raises(RuntimeError, match="(?s)the compiler failed \\(exit 3\\).*no such header"):
        tcheck.build()
    assert not list(tmp_path.iterdir())  # nothing half-written takes the name
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler: '/nonexistent/c\\+\\+'"):
        tcheck.build()


@pytest.mark.skipif(not os.environ.get("CI"), reason="only CI promises a C++ compiler")
def test_ci_builds_the_tensor_check(compiled_check):
    assert any(compiled_check.iterdir())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; the CPU tensors above cover every other part")
def test_on_the_gpu_its_verdicts_are_torchs_and_the_device_counts(in_built):
    TensorCheck = tcheck.check_type()
    x, w = torch.randn(6, 8, device="cuda"), torch.randn(8, device="cuda")
    cases = [torch.randn(3, 8, device="cuda"), torch.randn(6, 8), torch.randn(8, 6, device="cuda").t(),
             torch.randn(6, 8, device="cuda", dtype=torch.bfloat16), torch.randn(6, 16, device="cuda")[:, :8]]
    ours, theirs = TensorCheck(x, w), _guards(x, w)
    for t in cases:
        for w2 in (w, w.cpu(), torch.randn(8, device="cuda").half()):
            assert ours(t, w2) == theirs(t, w2), (t.device, t.dtype, t.stride(), w2.device, w2.dtype)
    assert ours(cases[0], w) is True and ours(cases[1], w) is False


FAILING_CXX = f"{sys.executable} -c 'import sys; sys.stderr.write(\"no such header\"); sys.exit(3)'"


@pytest.fixture
def background(tmp_path, monkeypatch, fresh):
    """An empty build folder with the background build allowed, and the once-per-process attempt reset."""
    monkeypatch.setenv(tcheck.DIR_ENV, str(tmp_path / "native"))
    monkeypatch.delenv(tcheck.ENV, raising=False)
    monkeypatch.delenv(tcheck.AUTO_ENV, raising=False)
    monkeypatch.setattr(tcheck, "_background", None)
    return tmp_path / "native"


def _wait_for_build(files, deadline_s=300):
    """Wait until the background build's lock is released (its child finished)."""
    end = time.monotonic() + deadline_s
    while files["lock"].exists():
        assert time.monotonic() < end, f"the background build did not finish in {deadline_s} s"
        time.sleep(0.2)


def _check_in_a_new_process():
    code = "import torch; from flyautotune.tuning import tcheck; print(tcheck.status()[0])"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_the_first_hit_builds_it_in_the_background_for_later_processes(compiled_check, background, pm,
                                                                      counting_bench):
    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], do_bench=counting_bench(),
                  plugin_manager=pm, name="t_tcheck_background")
    def launch(x, out, n, B=None):
        out.copy_(x + B)
        return B

    x, out = torch.randn(4, 8), torch.empty(4, 8)
    chosen = launch(x, out, 4)
    assert launch(x, out, 4) == chosen and launch.last_source == "memory"  # served at once, by torch's check
    assert tcheck._background.startswith("started (pid ")
    files = tcheck.side_files(tcheck.build_path())
    assert files["lock"].is_file()
    assert tcheck.status()[0] == "torch" and "being compiled in the background" in tcheck.status()[1]
    _wait_for_build(files)
    assert tcheck.build_path().is_file() and not files["failed"].exists(), files["log"].read_text()
    assert "built " in files["log"].read_text()
    assert tcheck.status() == ("torch", f"{tcheck.build_path()} is built; processes started from now on use it")
    assert _check_in_a_new_process() == "compiled"
    assert tcheck.start_background_build() == tcheck._background  # once per process


def test_a_failed_background_build_is_said_and_not_tried_again_until_asked(background, monkeypatch, capsys):
    monkeypatch.setenv("CXX", FAILING_CXX)
    assert tcheck.start_background_build().startswith("started")
    files = tcheck.side_files(tcheck.build_path())
    _wait_for_build(files)
    assert not tcheck.build_path().exists()
    assert "the compiler failed (exit 3)" in files["failed"].read_text()
    assert "no such header" in files["log"].read_text()
    kind, why = tcheck.status()
    assert kind == "torch" and "its background build failed (RuntimeError: the compiler failed (exit 3)" in why
    assert cli(["native"]) == 0 and "flyautotune native build tries again" in capsys.readouterr().out
    monkeypatch.setattr(tcheck, "_background", None)  # a later process: it does not start the compiler again
    assert tcheck.start_background_build() == f"not started: the last build failed (see {files['failed']})"
    with pytest.raises(RuntimeError, match="no such header"):
        tcheck.build()  # asked for in the foreground: it tries, and says why it failed there
    assert not files["failed"].exists()  # so hits may try again in the background after it


def test_one_process_builds_at_a_time_and_a_dead_builders_lock_is_taken_over(background, monkeypatch):
    monkeypatch.setenv("CXX", FAILING_CXX)
    files = tcheck.side_files(tcheck.build_path())
    background.mkdir(parents=True)
    files["lock"].write_text("12345\n")
    assert tcheck.start_background_build() == "not started: another process is building it"
    old = time.time() - tcheck.STALE_LOCK_S - 5
    os.utime(files["lock"], (old, old))
    monkeypatch.setattr(tcheck, "_background", None)
    assert tcheck.start_background_build().startswith("started")
    _wait_for_build(files)
    assert files["failed"].is_file()


def test_the_switches_keep_hits_from_starting_a_compiler(background, monkeypatch, pm, counting_bench):
    for name, value, said in ((tcheck.AUTO_ENV, "0", "not started: FLYAUTOTUNE_NATIVE_AUTO=0"),
                              (tcheck.ENV, "torch", "not started: FLYAUTOTUNE_TENSOR_CHECK=torch")):
        monkeypatch.setenv(name, value)
        monkeypatch.setattr(tcheck, "_background", None)
        monkeypatch.setattr(fastpath, "_guards", None)
        monkeypatch.setattr(tcheck, "_loaded", None)

        @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], do_bench=counting_bench(),
                      plugin_manager=pm, name=f"t_tcheck_switch_{name}")
        def launch(x, n, B=None):
            return B

        x = torch.randn(4, 8)
        chosen = launch(x, 4)
        assert launch(x, 4) == chosen and launch.last_source == "memory"
        assert tcheck._background == said
        assert not background.exists()  # nothing made in the build folder
        monkeypatch.delenv(name)


def test_a_build_folder_it_cannot_make_costs_the_build_never_the_hit(background, tmp_path, monkeypatch, pm,
                                                                      counting_bench):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the build folder's parent should be\n")
    monkeypatch.setenv(tcheck.DIR_ENV, str(blocker / "native"))  # mkdir fails, for root too

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], do_bench=counting_bench(),
                  plugin_manager=pm, name="t_tcheck_no_folder")
    def launch(x, n, B=None):
        return B

    x = torch.randn(4, 8)
    chosen = launch(x, 4)
    assert launch(x, 4) == chosen and launch.last_source == "memory"  # the hit is served, by torch's check
    said = tcheck._background
    assert said.startswith("not started: ") and "Not a directory" in said, said
    kind, why = tcheck.status()
    assert kind == "torch" and "not built for this torch yet" in why, why
