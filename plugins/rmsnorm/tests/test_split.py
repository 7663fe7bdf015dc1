"""Split rows (SPLIT > 1) and narrow accesses (VEC) against the fp64 reference, under the interpreter."""

import pytest
import torch

from flyautotune_rmsnorm import api, make_launcher
from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
DS = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def inputs(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(dtype), (torch.rand(shape[-1], generator=g) + 0.5).to(dtype)


def assert_close(y, x, w, eps=1e-6):
    assert not torch.isnan(y).any(), "an output element was not written"
    err = relative_error(y, rmsnorm_reference(x, w, eps))
    tol = tolerance(y.dtype)
    if x.shape[-1] == 1 and y.dtype == torch.bfloat16:
        # y = w * (1 - eps/x**2 / 2): the interpreter rounds fp32 -> bf16 toward zero, one ulp (2**-8) below w.
        tol = 2.0 ** -7
    assert err <= tol, f"relative error {err:.3g} > {tol} for {y.dtype}"


def run(x, w, out=None, **knobs):
    """One launch of a forced config through the adopter's launch, as the tuner runs it."""
    (x2, w2, y, M, N, ds, eps, sx, sy), _ = api.tuner_args(x, w, out=out)
    api.launch(x2, w2, y, M, N, ds, eps, sx, sy, **dict(dict(BLOCK_THREADS=256), **knobs))
    return y


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("N", [1, 7, 1000, 4093, 4096])
@pytest.mark.parametrize("split,chunk", [(2, 0), (8, 0), (4, 256), (128, 0)])
def test_split_rows_match_fp64(N, split, chunk, dtype):
    x, w = inputs((3 if N > 1 else 64, N), dtype, seed=N + split)
    y = run(x, w, SPLIT=split, CHUNK=chunk, CACHE_POLICY=2)
    assert y.shape == x.shape
    assert_close(y, x, w)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_split_rows_strided_in_and_out(dtype):
    base, w = inputs((6, 3100), dtype)
    x = base[::2, 37:3037]  # row stride 6200, 3000 columns at an odd offset
    buf = torch.full((3, 3200), -7.0, dtype=dtype)
    out = buf[:, 100:3100]
    got = run(x, w[:3000].contiguous(), out=out, SPLIT=4, CHUNK=512)
    assert got.data_ptr() == out.data_ptr()
    assert_close(out, x, w[:3000])
    assert torch.all(buf[:, :100] == -7.0) and torch.all(buf[:, 3100:] == -7.0)


def test_split_rows_in_place_and_3d():
    x, w = inputs((2, 3, 2000), torch.float32)
    ref = rmsnorm_reference(x, w)
    run(x, w, out=x, SPLIT=8)
    assert relative_error(x, ref) <= tolerance(torch.float32)


def test_split_launcher_covers_the_row_with_at_most_split_programs():
    L = make_launcher(4093, "bf16", 256, 1, 256, 1, 0, 8)
    assert (L.BLOCK_N, L.TILES, L.programs) == (256, 2, 8)
    assert L.programs * L.slice >= 4093 > (L.programs - 1) * L.slice
    short = make_launcher(100, "bf16", 256, 1, 0, 1, 0, 64)  # slices of 2: 50 programs do the work
    assert short.programs == 50


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("vec", [4, 8])
@pytest.mark.parametrize("shape,rows", [((37, 128), 8), ((5, 300), 2), ((9, 1), 4)], ids=str)
def test_narrow_accesses_match_fp64(shape, rows, vec, dtype):
    x, w = inputs(shape, dtype, seed=vec)
    assert_close(run(x, w, VEC=vec, ROWS_PER_PROGRAM=rows, CACHE_POLICY=0), x, w)


@pytest.mark.parametrize("knobs,words", [
    (dict(SPLIT=3), "SPLIT=3"),
    (dict(SPLIT=4, ROWS_PER_PROGRAM=2), "needs ROWS_PER_PROGRAM=1"),
    (dict(SPLIT=4, CHUNK=1024, PREFETCH=1), "PREFETCH=0"),
    (dict(VEC=32), "VEC=32"),
    (dict(COOP=1), "COOP=1; accepted: 0, or with SPLIT > 1 and CHUNK=0"),
    (dict(SPLIT=4, CHUNK=1024, COOP=1), "got SPLIT=4, CHUNK=1024"),
    (dict(SPLIT=4, COOP=4), "COOP=4; accepted"),
    (dict(SPLIT=32, COOP=3), "COOP=3 .a cluster per row. takes SPLIT 2-16"),
    (dict(SPLIT=4, COOP=3, VEC=8), "got SPLIT=4, ROWS_PER_PROGRAM=1, VEC=8"),
    (dict(COOP=2), "COOP=2; accepted"),
])
def test_factory_refuses_split_and_vec_values_it_cannot_build(knobs, words):
    with pytest.raises(ValueError, match=words):
        make_launcher(4096, "bf16", 256, **knobs)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("N,split,coop", [(4096, 8, 1), (4093, 4, 1), (1000, 2, 1), (4096, 4, 2), (4093, 2, 2),
                                          (1, 2, 2), (4096, 4, 3), (4093, 2, 3), (1, 2, 3)])
def test_cooperative_split_configs_compute_the_same_rows_on_cpu(N, split, coop, dtype):
    """COOP=1 and 2 never run their barrier under the interpreter (programs run one at a time), and
    COOP=3's cluster body needs a Hopper GPU: the two-launch bodies compute the rows there, so a CPU search
    over a space with cooperative configs stays right."""
    x, w = inputs((3, N), dtype, seed=N + split)
    assert_close(run(x, w, SPLIT=split, COOP=coop, CACHE_POLICY=2), x, w)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("M,N,block_n,rows,groups", [(7, 64, 64, 4, 1), (13, 64, 64, 4, 3), (9, 50, 64, 2, 2),
                                                     (16, 128, 128, 1, 4), (5, 64, 64, 4, 2), (1, 1, 1, 1, 1)])
def test_persistent_body_under_the_interpreter_with_groups_of_one(M, N, block_n, rows, groups, dtype):
    """The COOP=2 body's row loop, rows per trip, masks, buffers and counts, where the interpreter can run it:
    groups of one program (SPLIT=1), which never wait on another. Run twice: the first launch leaves the
    counts at zero for the next."""
    from triton.runtime.interpreter import InterpretedFunction

    from flyautotune_rmsnorm import kernel_split

    x, w = inputs((M, N), dtype, seed=M * N + rows)
    p = torch.full((groups * 2 * rows,), float("nan"))
    d = torch.zeros(2 * groups, dtype=torch.int32)
    body = InterpretedFunction(kernel_split._split_persist)
    for _ in range(2):
        y = torch.full_like(x, float("nan"))
        body[(groups,)](x, w, y, p, d, M, N, N, 1e-6, groups, N=N, BLOCK_N=block_n, SPLIT=1, SPLIT_POW2=1, ROWS=rows,
                        EVEN_N=N % block_n == 0, ROW_VEC=1, X_LAST="", W_POLICY="", Y_POLICY="")
        assert_close(y, x, w)
        assert not d.any(), f"counts left at {d.tolist()}"


def test_persistent_grid_fits_what_the_gpu_holds(monkeypatch):
    """The persistent launch's row groups: as many as are resident, then as few as keep the same rows per
    group; without a CUDA driver to ask (this machine, or HIP) one program per SM, which always fits."""
    import types

    from flyautotune_rmsnorm import split

    assert [split.row_groups(M, 33) for M in (1, 32, 33, 34, 1024)] == [1, 32, 33, 17, 32]
    assert split.row_groups(5, 0) == 1
    monkeypatch.setitem(split._sm_counts, 7, 132)
    import ctypes

    def no_driver(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    k = types.SimpleNamespace(function=1, n_regs=32, metadata=types.SimpleNamespace(shared=0))
    assert split.resident_programs(k, 256, 7) == 132


def test_cooperative_one_launch_form_is_cuda_only(monkeypatch):
    """COOP=1's wait polls with a PTX acquire load, so on ROCm (HIP's torch) its rows take the two-launch
    form, whatever the grid; on CUDA the one-launch form is taken while the grid fits the SMs."""
    from flyautotune_rmsnorm import factory, split

    L = make_launcher(262144, "bf16", 128, 1, 0, 2, 0, 128, 16, 1)
    assert (L.COOP, L.programs, L.TILES) == (1, 128, 1)
    monkeypatch.setitem(split._sm_counts, 7, 132)
    monkeypatch.setattr(factory, "_ROCM", False)
    assert L.uses_coop(1, 7) and not L.uses_coop(2, 7)  # 256 programs do not fit 132 SMs
    monkeypatch.setattr(factory, "_ROCM", None)
    monkeypatch.setattr(torch.version, "hip", "6.2.0")
    assert not L.uses_coop(1, 7)
