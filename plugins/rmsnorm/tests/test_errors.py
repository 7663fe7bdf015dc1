"""Bad input fails early with a message naming the argument, the value and what is accepted."""

import pytest
import torch

from flyautotune_rmsnorm import make_launcher, rmsnorm, rmsnorm_autotuned


@pytest.fixture(params=[rmsnorm, rmsnorm_autotuned], ids=["rmsnorm", "rmsnorm_autotuned"])
def entry(request):
    return request.param


def test_weight_of_the_wrong_shape(entry):
    with pytest.raises(ValueError, match=r"weight.shape=\(63,\) must be \(64,\).*x.shape=\(2, 64\)"):
        entry(torch.randn(2, 64), torch.randn(63))
    with pytest.raises(ValueError, match=r"weight.shape=\(1, 64\)"):
        entry(torch.randn(2, 64), torch.randn(1, 64))


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.float8_e4m3fn], ids=str)
def test_unsupported_dtypes(entry, dtype):
    x = torch.zeros(2, 64).to(dtype)
    with pytest.raises(TypeError, match=rf"x.dtype={dtype} is not supported; accepted: torch.bfloat16"):
        entry(x, torch.ones(64))
    with pytest.raises(TypeError, match=rf"weight.dtype={dtype} is not supported"):
        entry(torch.randn(2, 64), torch.ones(64).to(dtype))


def test_mixed_devices(entry):
    with pytest.raises(ValueError, match="x is on cpu but weight is on meta"):
        entry(torch.randn(2, 64), torch.empty(64, device="meta"))
    with pytest.raises(ValueError, match="x is on cpu but out is on meta"):
        entry(torch.randn(2, 64), torch.ones(64), out=torch.empty(2, 64, device="meta"))


def test_non_unit_last_dim_stride(entry):
    x = torch.randn(64, 4).t()  # (4, 64) with stride (1, 4)
    with pytest.raises(ValueError, match=r"x has stride 4 in its last dimension.*x.contiguous\(\)"):
        entry(x, torch.ones(64))


def test_bad_out(entry):
    x, w = torch.randn(2, 64), torch.ones(64)
    with pytest.raises(ValueError, match=r"out.shape=\(2, 32\) must equal x.shape=\(2, 64\)"):
        entry(x, w, out=torch.empty(2, 32))
    with pytest.raises(TypeError, match="out.dtype=torch.float16 must equal x.dtype=torch.float32"):
        entry(x, w, out=torch.empty(2, 64, dtype=torch.float16))
    with pytest.raises(ValueError, match="out has stride 2 in its last dimension"):
        entry(x, w, out=torch.empty(2, 128)[:, ::2])
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        entry(x, w, out=[1, 2])


def test_bad_eps_and_non_tensors(entry):
    with pytest.raises(ValueError, match="eps=-1.0 must be a non-negative float"):
        entry(torch.randn(2, 64), torch.ones(64), eps=-1.0)
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        entry([1.0], torch.ones(1))
    with pytest.raises(ValueError, match="at least one dimension"):
        entry(torch.tensor(1.0), torch.ones(1))


def test_bad_streams(entry):
    x, w = torch.randn(2, 64), torch.ones(64)
    for bad in (True, "fast", 1.5):
        with pytest.raises(TypeError, match=rf"stream={bad!r} must be a torch stream, a raw stream handle \(int\) or None"):
            entry(x, w, stream=bad)
    with pytest.raises(ValueError, match=r"stream=-3: a raw stream handle must be >= 0"):
        entry(x, w, stream=-3)
    with pytest.raises(ValueError, match=r"stream=1234: a raw stream handle needs a GPU tensor, x is on cpu"):
        entry(x, w, stream=1234)
    assert torch.allclose(entry(x, w, stream=0), entry(x, w), atol=0, rtol=0)  # 0: the default stream


@pytest.mark.parametrize("shape", [(0, 64), (3, 0, 64), (4, 0)], ids=str)
def test_empty_tensors_return_empty_results(entry, shape):
    x = torch.randn(shape)
    y = entry(x, torch.ones(shape[-1]))
    assert y.shape == x.shape
    out = torch.empty(shape)
    assert entry(x, torch.ones(shape[-1]), out=out) is out


@pytest.mark.parametrize("kw,words", [
    (dict(BLOCK_THREADS=96), "BLOCK_THREADS=96"),
    (dict(BLOCK_THREADS=256, ROWS_PER_PROGRAM=3), "ROWS_PER_PROGRAM=3"),
    (dict(BLOCK_THREADS=256, CHUNK=1000), "CHUNK=1000"),
    (dict(BLOCK_THREADS=256, ROWS_PER_PROGRAM=2, CHUNK=1024), "needs ROWS_PER_PROGRAM=1"),
    (dict(BLOCK_THREADS=256, CACHE_POLICY=3), "CACHE_POLICY=3"),
    (dict(BLOCK_THREADS=256, PREFETCH=1), "PREFETCH=1"),
])
def test_factory_rejects_knob_values_it_cannot_build(kw, words):
    with pytest.raises(ValueError, match=words):
        make_launcher(4096, "bf16", **kw)
    with pytest.raises(ValueError, match="dtype_str='fp64'"):
        make_launcher(4096, "fp64", 256)


@pytest.mark.parametrize("value, interprets", [("1", True), ("y", True), ("YES", True), (" 1", False), ("0", False)])
def test_the_factory_reads_triton_interpret_as_triton_does(value, interprets):
    """GPU tensors go through the interpreter exactly when Triton itself interprets (``y`` is on, `` 1`` is
    off): a factory that compiled while Triton interprets would hand Triton a binary it cannot run."""
    import subprocess
    import sys

    code = ("from triton import knobs; from flyautotune_rmsnorm import factory; "
            "print(factory._INTERPRET, knobs.runtime.interpret)")
    env = dict(__import__("os").environ, TRITON_INTERPRET=value)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(interprets), str(interprets)]
