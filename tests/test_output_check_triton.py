"""A Triton candidate that skips its last block is rejected: under the interpreter on the CPU, and on a GPU."""

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

import flyautotune as fat


def _double(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < n) * 2, mask=offs < n)


cpu_kernel = InterpretedFunction(_double)
gpu_kernel = triton.runtime.jit.JITFunction(_double)


def make(pm, name):
    @fat.autotune(configs=[fat.Config(BLOCK=b, TAIL=t) for b, t in ((32, True), (64, False), (64, True))],
                  key=["n"], name=name, plugin_manager=pm, default=lambda **a: fat.Config(BLOCK=32, TAIL=True))
    def launch(x, out, n, BLOCK=None, TAIL=None):
        kernel = cpu_kernel if x.device.type == "cpu" else gpu_kernel
        grid = triton.cdiv(n, BLOCK) if TAIL else n // BLOCK  # TAIL=False forgets the last, partial block
        kernel[(grid,)](x, out, n, BLOCK=BLOCK, **({} if x.device.type == "cpu" else fat.lower_compile_hints()))

    return launch


def check(pm, device):
    launch = make(pm, f"t_tail_{device}")
    x = torch.randn(100, device=device)
    out = torch.empty_like(x)
    sel = launch.select(x, out, 100, force=True)
    rows = {(r["config"]["kwargs"]["BLOCK"], r["config"]["kwargs"]["TAIL"]): r for r in sel.timings}
    assert rows[(64, False)]["ms"] is None
    assert rows[(64, False)]["error"].startswith("rejected: argument out differs from the reference in 36 of 100")
    assert sel.config != fat.Config(BLOCK=64, TAIL=False)
    launch(x, out, 100)
    assert torch.equal(out, x * 2)


def test_a_kernel_that_skips_its_last_block_is_rejected_under_the_interpreter(pm):
    check(pm, "cpu")


def test_gluon_keeps_tritons_own_functions_after_an_interpreted_search(pm):
    """An interpreted launch swaps triton.language's functions for the interpreter's while it runs, and
    Triton imports Gluon on first use from inside a launch: the suite imports Gluon first (conftest), so
    its functions still wrap Triton's own after this file's interpreted search, and later Gluon compiles
    in the session (the RMSNorm plugin's bodies) work."""
    check(pm, "cpu")
    gl = pytest.importorskip("triton.experimental.gluon.language")
    import triton.language.math as tl_math

    assert getattr(gl.rsqrt, "__wrapped__", tl_math.rsqrt) is tl_math.rsqrt


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU; the interpreter case above runs on CPU")
def test_a_kernel_that_skips_its_last_block_is_rejected_on_the_gpu():
    check(fat.build_plugin_manager(), "cuda")
