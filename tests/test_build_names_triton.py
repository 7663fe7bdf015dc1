"""A Triton kernel's ``precompile`` names each build by the binary ``warmup`` compiled and its launch
(docs/autotune.md): configs that differ only in ``num_stages``, in a kernel with no loop, build one
program. Cross-compiled on the CPU for sm_90 and gfx942; searched on a GPU, where the twin is not timed."""

import hashlib
import os
import shutil

import pytest
import torch
import triton
import triton.language as tl

import flyautotune as fat


def _double(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < n) * 2, mask=offs < n)


gpu_kernel = triton.runtime.jit.JITFunction(_double)


def build_name(k, grid) -> str:
    """The name docs/autotune.md's example gives a compiled kernel launched over ``grid``."""
    binary = k.asm.get("cubin") or k.asm.get("hsaco")
    launch = [getattr(k.metadata, f, None) for f in ("num_warps", "num_ctas", "shared", "global_scratch_size",
                                                      "launch_pdl", "launch_cooperative_grid")]
    return f"{hashlib.sha256(binary).hexdigest()} grid={grid} launch={launch}"


def precompile(config, x, out, n, **_):
    grid = (triton.cdiv(n, config.kwargs["BLOCK"]),)
    k = gpu_kernel.warmup(x, out, n, **config.kwargs, grid=grid, **fat.lower_compile_hints())
    return build_name(k, grid)


ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")


@pytest.mark.parametrize("target", [
    pytest.param(("cuda", 90, 32), marks=pytest.mark.skipif(
        shutil.which("ptxas") is None and not os.path.exists(ptxas), reason="needs Triton's ptxas to cross-compile")),
    ("hip", "gfx942", 64)], ids=["sm_90", "gfx942"])
def test_num_stages_builds_one_binary_in_a_kernel_without_a_loop(target):
    from triton.backends.compiler import GPUTarget

    if target[0] == "hip":
        pytest.importorskip("triton.backends.amd")
    sig = {"X": "*fp32", "Y": "*fp32", "n": "i32", "BLOCK": "constexpr"}

    def name(num_warps, num_stages, BLOCK=128):
        k = triton.compile(triton.compiler.ASTSource(gpu_kernel, sig, {"BLOCK": BLOCK}), target=GPUTarget(*target),
                           options={"num_warps": num_warps, "num_stages": num_stages})
        return build_name(k, (8,))

    assert name(4, 2) == name(4, 3) == name(4, 4)  # a search over these would time one program three times
    if target[0] == "cuda":  # one binary launched another way (programmatic dependent launch) is another run
        k = triton.compile(triton.compiler.ASTSource(gpu_kernel, sig, {"BLOCK": 128}), target=GPUTarget(*target),
                           options={"num_warps": 4, "num_stages": 2, "launch_pdl": True})
        assert build_name(k, (8,)) != name(4, 2)
    assert name(8, 2) != name(4, 2) and name(4, 2, BLOCK=64) != name(4, 2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the CPU case above cross-compiles)")
def test_a_search_times_one_of_the_configs_that_build_one_program():
    timed = []

    @fat.autotune(configs=[fat.Config(BLOCK=128, num_warps=4, num_stages=s) for s in (2, 3)]
                  + [fat.Config(BLOCK=256, num_warps=4, num_stages=2)], key=["n"], name="t_build_names",
                  precompile=precompile)
    def launch(x, out, n, BLOCK=None):
        timed.append(fat.current_hints().get("num_stages"))
        gpu_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK, **fat.lower_compile_hints())

    x = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    sel = launch.select(x, out, 4096, force=True)
    rows = {(r["config"]["kwargs"]["BLOCK"], r["config"]["compile_hints"]["num_stages"]): r for r in sel.timings}
    assert rows[(128, 3)]["ms"] is None
    assert rows[(128, 3)]["error"].startswith("skipped: same build as BLOCK=128, num_stages=2, num_warps=4")
    assert rows[(128, 2)]["ms"] is not None and rows[(256, 2)]["ms"] is not None
    assert 3 not in timed  # never launched, not even for the output check
    launch(x, out, 4096)
    assert torch.equal(out, x * 2)
