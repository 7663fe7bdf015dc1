"""x's copies through L1 on Triton releases that lower every 16-byte copy to ``cp.async.cg``
(``l1_copies``): the PTX edit in Triton's own ``ptx`` stage, cross-compiled for sm_90 on the CPU."""

import os
import shutil
import types
import warnings

import pytest

pytest.importorskip("triton.experimental.gluon")
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None and not os.path.exists(
    os.path.join(os.path.dirname(__import__("triton").__file__), "backends/nvidia/bin/ptxas")),
    reason="needs Triton's NVIDIA backend (ptxas) to cross-compile")


from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp  # noqa: E402

from flyautotune_rmsnorm import l1_copies as _l1  # noqa: E402

_copy = getattr(cp, "async_load", None) or cp.async_copy_global_to_shared


# Two kernels that ask for .cg copies (which every Triton honours): one named as the body the edit is for,
# one not.
@gluon.jit
def _copy_rows(X, Y):
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
    rows = gl.arange(0, 4, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, 256, layout=gl.SliceLayout(0, layout))
    offs = rows[:, None] * 256 + cols[None, :]
    smem = gl.allocate_shared_memory(gl.bfloat16, [4, 256], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
    _copy(smem, X + offs, cache_modifier=".cg")
    cp.commit_group()
    cp.wait_group(0)
    gl.store(Y + offs, smem.load(layout))


@gluon.jit
def rmsnorm_async(X, Y):
    _copy_rows(X, Y)


@gluon.jit
def another_kernel(X, Y):
    _copy_rows(X, Y)


def _kernels():
    return rmsnorm_async, another_kernel


def _compile(kernel):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    src = GluonASTSource(kernel, {"X": "*bf16", "Y": "*bf16"}, {}, {(0,): [["tt.divisibility", 16]],
                                                                    (1,): [["tt.divisibility", 16]]})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})


def _edit_mode(monkeypatch, tmp_path, mode):
    """As on a Triton of ``mode`` (``"process"``: 3.6; ``"scoped"``: 3.7-3.8); a fresh Triton cache; a stage
    hook of another's installed first, recording its calls. Triton's knob is restored afterwards."""
    from triton import knobs

    from flyautotune_rmsnorm import l1_copies

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(l1_copies, "mode", lambda: mode)
    calls = []

    def theirs(*args):
        calls.append(len(args))
        return ("theirs", "0" * 64) if not args else None

    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", theirs)
    return l1_copies, knobs, calls, theirs


@needs_ptxas
def test_the_ptx_edit_sends_the_bodys_copies_through_l1_and_leaves_other_kernels_alone(monkeypatch, tmp_path,
                                                                                       sass_of):
    """Triton 3.6 (no cache key from the hook): installed for the process, every compile of the body edited."""
    l1_copies, knobs, calls, theirs = _edit_mode(monkeypatch, tmp_path, "process")
    body, other = _kernels()
    assert not l1_copies.installed()
    l1_copies.install()
    assert l1_copies.installed()
    hook = knobs.runtime.add_stages_inspection_hook
    l1_copies.install()
    assert knobs.runtime.add_stages_inspection_hook is hook, "wrapped twice"
    assert hook() == theirs(), "the cache-key part of the hook installed before changed"
    calls.clear()
    o = _compile(other)  # the same copies, another name: left as asked (.cg, L1 bypassed)
    copies = o.asm["ptx"].count("cp.async.cg.shared.global")
    assert copies >= 1 and "cp.async.ca" not in o.asm["ptx"]
    bypass = [op for op in sass_of(o) if "LDGSTS" in op]
    assert len(bypass) == copies and all("BYPASS" in op for op in bypass), bypass
    k = _compile(body)
    ptx = k.asm["ptx"]
    assert ptx.count("cp.async.ca.shared.global") == copies and "cp.async.cg" not in ptx
    sass = [op for op in sass_of(k) if "LDGSTS" in op]
    assert len(sass) == copies and not [op for op in sass if "BYPASS" in op], sass  # the edited PTX's cubin
    assert l1_copies.check(k, "the body")
    assert 5 in calls, "the hook installed before no longer ran"


@needs_ptxas
def test_a_stage_hook_set_since_is_wrapped_again_before_the_next_compile(monkeypatch, tmp_path):
    l1_copies, knobs, calls, _ = _edit_mode(monkeypatch, tmp_path, "process")
    body, _ = _kernels()
    l1_copies.install()
    later = []
    knobs.runtime.add_stages_inspection_hook = lambda *a: later.append(len(a)) or (("", "") if not a else None)
    assert not l1_copies.installed()
    with l1_copies.editing():
        assert l1_copies.installed()
        k = _compile(body)
    assert "cp.async.cg" not in k.asm["ptx"] and "cp.async.ca.shared.global" in k.asm["ptx"]
    assert 5 in later, "the hook set since no longer ran"


@needs_ptxas
@pytest.mark.skipif(_l1._version() < (3, 7), reason="Triton before 3.7 keys no compile by the stage hook, so it "
                    "takes the hook for the process (the two tests above); this mode needs 3.7+")
def test_where_triton_keys_by_the_hook_it_is_set_only_while_the_body_compiles(monkeypatch, tmp_path):
    """Triton 3.7-3.8 (a cache key from the hook, asked on every JIT launch): the hook is there only inside
    editing(), the edited binary has a cache key of its own, and the hook set before comes back."""
    l1_copies, knobs, calls, theirs = _edit_mode(monkeypatch, tmp_path, "scoped")
    body, _ = _kernels()
    l1_copies.install()
    assert knobs.runtime.add_stages_inspection_hook is theirs, "installed for the whole process"
    plain = _compile(body)
    assert "cp.async.cg.shared.global" in plain.asm["ptx"]
    calls.clear()
    with l1_copies.editing():
        hook = knobs.runtime.add_stages_inspection_hook
        assert l1_copies.installed() and hook is not theirs
        key, _ = hook()
        assert key == "theirs" + l1_copies.KEY_PART
        with l1_copies.editing():  # nested: still set
            pass
        assert knobs.runtime.add_stages_inspection_hook is hook
        edited = _compile(body)
    assert knobs.runtime.add_stages_inspection_hook is theirs, "the hook set before was not put back"
    assert "cp.async.cg" not in edited.asm["ptx"] and "cp.async.ca.shared.global" in edited.asm["ptx"]
    assert edited.hash != plain.hash, "the edited binary shares the unedited one's cache entry"
    assert 5 in calls, "the hook set before did not run inside the block"
    assert "cp.async.cg.shared.global" in _compile(body).asm["ptx"], "compiles after the block are edited"


@needs_ptxas
def test_the_body_this_package_compiles_copies_through_l1_on_this_triton(monkeypatch, tmp_path):
    """What the launcher and the reports compile (``compile_for``), with the edit as this Triton gets it:
    natively (3.9+), for the process (3.6) or around the compile (3.7-3.8), a hook of another's kept."""
    from triton.backends.compiler import GPUTarget

    from flyautotune_rmsnorm import kernel_async, l1_copies

    mode = l1_copies.mode()
    _, knobs, _, theirs = _edit_mode(monkeypatch, tmp_path, mode)
    k = kernel_async.compile_for(GPUTarget("cuda", 90, 32), "bf16", 1000, 4)
    per_lane = 1024 * 2 // 16 // 32
    assert "cp.async.cg" not in k.asm["ptx"] and k.asm["ptx"].count("cp.async.ca.shared.global") == per_lane
    hook = knobs.runtime.add_stages_inspection_hook
    assert hook is theirs if mode != "process" else (l1_copies.installed() and hook.wrapped is theirs)


def test_a_binary_of_bypassing_copies_warns_once_and_says_what_to_do():
    from flyautotune_rmsnorm import l1_copies

    bypass = types.SimpleNamespace(asm={"ptx": "cp.async.cg.shared.global [%r1], [%rd2], 16;"})
    through = types.SimpleNamespace(asm={"ptx": "cp.async.ca.shared.global [%r1], [%rd2], 16;"})
    what = f"the test's body {os.getpid()}"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert l1_copies.check(through, what)
        assert not l1_copies.check(bypass, what) and not l1_copies.check(bypass, what)
    assert len(seen) == 1 and seen[0].category is RuntimeWarning
    text = str(seen[0].message)
    assert what in text and "cp.async.cg" in text and "TRITON_CACHE_DIR" in text and "add_stages_inspection_hook" in text


@pytest.mark.parametrize("version,mode", [("3.5.1", "process"), ("3.6.0", "process"), ("3.7.1", "scoped"),
                                          ("3.8.0", "scoped"), ("3.9.0", "native"), ("3.10.0+git1234", "native"),
                                          ("4.0.0", "native")])
def test_how_the_edit_is_made_follows_the_triton_release(version, mode, monkeypatch):
    import triton

    from flyautotune_rmsnorm import l1_copies

    monkeypatch.setattr(triton, "__version__", version)
    l1_copies.mode.cache_clear()
    try:
        assert l1_copies.mode() == mode and l1_copies.native() is (mode == "native")
    finally:
        l1_copies.mode.cache_clear()


@needs_ptxas
def test_the_report_of_the_body_reads_the_binary_its_launch_builds(monkeypatch, tmp_path):
    """``flyautotune report`` compiles the staged-rows body inside the same edit as the launch, so its
    binary (and digest) is the one with x's copies through L1, on every Triton mode."""
    import hashlib

    from triton.backends.compiler import GPUTarget

    import flyautotune as fat
    from flyautotune.report import resource_report
    from flyautotune_rmsnorm import api, kernel_async, l1_copies, space

    _, _, _, theirs = _edit_mode(monkeypatch, tmp_path, l1_copies.mode())
    (cfg,) = space.async_configs(1000, "bf16")  # 128 threads, 4 rows a program
    one = fat.autotune(configs=[cfg], key=["N"], name="l1_report")(lambda x, N, **_: None)
    adopter = fat.Adopter(name="l1_report", tuner=one, compile_spec=api.compile_spec)
    (row,) = resource_report(adopter, (4096, 1000), "bf16", fat.Target("cuda", "sm_90", 32))
    launched = kernel_async.compile_for(GPUTarget("cuda", 90, 32), "bf16", 1000, 4)
    assert "cp.async.cg" not in launched.asm["ptx"]
    assert row.error is None and row.binary_sha256 == hashlib.sha256(launched.asm["cubin"]).hexdigest()
