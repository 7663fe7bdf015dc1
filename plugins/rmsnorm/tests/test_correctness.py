"""The kernel computes RMSNorm (fp64-referenced), on CPU through Triton's interpreter."""

import pytest
import torch
import torch.nn.functional as F

from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance
from flyautotune_rmsnorm import make_launcher, rmsnorm, rmsnorm_autotuned
from flyautotune_rmsnorm.api import dtype_str
from flyautotune_rmsnorm.factory import _CONST_NAMES, CACHE_POLICIES, next_pow2
from flyautotune_rmsnorm.space import KNOBS, cuda_space, rocm_space

DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def assert_close(y, x, w, eps=1e-6):
    assert not torch.isnan(y).any(), "NaN in the output (an element was not written)"
    err = relative_error(y, rmsnorm_reference(x, w, eps))
    assert err <= tolerance(y.dtype), f"relative error {err:.3g} > {tolerance(y.dtype)} for {y.dtype}"


def inputs(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    w = (torch.rand(shape[-1], generator=g) + 0.5).to(dtype)
    return x, w


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 4096), (3, 1000), (5, 33), (2, 7), (4, 3, 128), (2, 2, 2, 300), (37,)],
                         ids=str)
def test_rmsnorm_matches_fp64_reference(shape, dtype):
    x, w = inputs(shape, dtype)
    y = rmsnorm(x, w)
    assert y.shape == x.shape and y.dtype == dtype
    assert_close(y, x, w)


def test_eps_is_honoured():
    x, w = inputs((3, 64), torch.float32)
    x[1] = 1e-3  # mean square 1e-6: eps of the same size halves the scale
    y = rmsnorm(x, w, eps=1e-6)
    assert_close(y, x, w, eps=1e-6)
    assert relative_error(y, rmsnorm_reference(x, w, eps=0.0)) > 1e-3


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_rows_are_read_in_place(dtype):
    base, w = inputs((6, 160), dtype)
    x = base[::2, 16:144]  # row stride 320, column offset 16
    assert x.stride() == (320, 1)
    y = rmsnorm(x, w[:128].contiguous())
    assert_close(y, x, w[:128])


def test_3d_input_with_padded_rows():
    base, _ = inputs((2, 3, 100), torch.float32)
    x = base[:, :, :96]  # leading dims collapse to one row stride of 100
    w = torch.rand(96) + 0.5
    assert_close(rmsnorm(x, w), x, w)


def test_leading_dims_without_one_row_stride_are_copied_once():
    base, _ = inputs((4, 6, 64), torch.float32)
    x = base[:, ::2, :].transpose(0, 1)  # (3, 4, 64): no single row stride
    w = torch.rand(64) + 0.5
    y = rmsnorm(x, w)
    assert y.shape == x.shape
    assert_close(y, x, w)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_out_is_written_and_returned(dtype):
    x, w = inputs((4, 96), dtype)
    out = torch.full_like(x, float("nan"))
    got = rmsnorm(x, w, out=out)
    assert got is out
    assert_close(out, x, w)


def test_out_with_strided_rows_leaves_the_gaps_alone():
    x, w = inputs((3, 64), torch.float32)
    buf = torch.full((3, 80), -7.0)
    out = buf[:, :64]
    rmsnorm(x, w, out=out)
    assert_close(out, x, w)
    assert torch.all(buf[:, 64:] == -7.0)


def test_in_place_out_equals_x():
    x, w = inputs((5, 48), torch.float32)
    expected = rmsnorm_reference(x, w)
    got = rmsnorm(x, w, out=x)
    assert got is x
    assert relative_error(x, expected) <= tolerance(torch.float32)


def test_weight_of_another_float_dtype():
    x, _ = inputs((3, 64), torch.bfloat16)
    w = torch.rand(64, dtype=torch.float32) + 0.5
    y = rmsnorm(x, w)
    assert y.dtype == torch.bfloat16
    assert_close(y, x, w)



@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("M", [2, 300])  # few rows (64-bit offsets, runtime strides) and many
def test_non_finite_values_stay_where_torch_puts_them(dtype, M):
    """An infinite or NaN weight spoils its own column only, and a NaN in x its own row only, as in
    torch's RMSNorm: no non-finite weight may reach the sum of squares."""
    x, w = inputs((M, 256), dtype, seed=11)
    w[3], w[7], w[100] = float("inf"), float("-inf"), float("nan")
    x[1, 5] = float("nan")
    L = make_launcher(256, {torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype], 64)
    y = torch.empty_like(x)
    L(x, w, y, M, 256, 256, 1e-6)
    bad_cols = torch.zeros(256, dtype=torch.bool)
    bad_cols[[3, 7, 100]] = True
    ref = F.rms_norm(x.double(), (256,), w.double(), 1e-6)
    assert torch.isnan(y[1]).all()
    good = torch.ones(M, dtype=torch.bool)
    good[1] = False
    assert torch.isfinite(y[good][:, ~bad_cols]).all()
    assert torch.equal(torch.isnan(y[good]), torch.isnan(ref[good]))
    assert torch.equal(torch.isinf(y[good]), torch.isinf(ref[good]))
    assert relative_error(y[good][:, ~bad_cols], ref[good][:, ~bad_cols].to(dtype)) <= tolerance(dtype)

def test_autotuned_entry_matches_the_default_on_cpu():
    x, w = inputs((3, 200), torch.float16)
    assert torch.equal(rmsnorm_autotuned(x, w), rmsnorm(x, w))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_held_rows_strided_and_into_out_on_cpu(dtype):
    """HOLD under the interpreter: an odd width, rows 8 elements apart more than N, out= a strided view."""
    N = 16384 - 3
    ds = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    big, w = inputs((3, N + 8), dtype, seed=5)
    w = w[:N].contiguous()
    x = big[:, :N]
    out = torch.full((3, N + 8), float("nan"), dtype=dtype)
    y = out[:, :N]
    make_launcher(N, ds, 512, HOLD=1, CACHE_POLICY=2)(x, w, y, 3, N + 8, N + 8, 1e-6)
    assert_close(y, x, w)
    assert torch.isnan(out[:, N:]).all(), "wrote past the row"



@pytest.mark.parametrize("body,N,tile", [(1, 1000, (128, 4, 0)), (2, 3000, (256, 1, 1)), (2, 4096, (512, 1, 1))])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gluon_bodies_run_the_triton_body_of_their_tile_on_the_cpu(dtype, body, N, tile):
    """ASYNC=1 and ASYNC=2 (Gluon bodies, which have no interpreter) compute on the CPU through the Triton
    body of the same tile: the same rows bit for bit, strided rows and a strided out= included."""
    ds = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    threads, rows, policy = tile
    big, w = inputs((7, N + 8), dtype, seed=3)
    w = w[:N].contiguous()
    x = big[:, :N]
    out = torch.full((7, N + 8), float("nan"), dtype=dtype)
    L = make_launcher(N, ds, threads, rows, CACHE_POLICY=policy, ASYNC=body)
    L(x, w, out[:, :N], 7, N + 8, N + 8, 1e-6)
    plain = torch.empty(7, N, dtype=dtype)
    make_launcher(N, ds, threads, rows, CACHE_POLICY=policy)(x, w, plain, 7, N + 8, N, 1e-6)
    assert torch.equal(out[:, :N], plain)
    assert_close(out[:, :N], x, w)
    assert torch.isnan(out[:, N:]).all(), "wrote past the row"


@pytest.mark.parametrize("body,N,tile", [(1, 1000, (128, 4)), (2, 3000, (256, 1))])
def test_gluon_launchers_take_the_base_launch_paths_arguments(body, N, tile):
    """The Gluon launchers run the base class's launch path (on a GPU) with their own constexprs: whatever
    that path passes (the PDL flag, the pointers' alignment) gives the Gluon body's constexprs, never the
    Triton body's (the GPU tests found a launcher that did not take the alignment flag)."""
    L = make_launcher(N, "bf16", tile[0], tile[1], CACHE_POLICY=0, ASYNC=body)
    for pdl, aligned in ((0, True), (1, False)):
        assert L._constexprs(37, 8, N, N, pdl, aligned) == L._async_consts


def test_async_rows_are_refused_where_the_body_cannot_apply():
    with pytest.raises(ValueError, match=r"ASYNC=1 takes .* one warp a row .*BLOCK_THREADS=256, ROWS_PER_PROGRAM=4"):
        make_launcher(1000, "bf16", 256, 4, ASYNC=1)
    with pytest.raises(ValueError, match=r"ASYNC=1 takes a whole row of at most 2048 .*N=4096"):
        make_launcher(4096, "bf16", 128, 4, ASYNC=1)
    with pytest.raises(ValueError, match=r"ASYNC=3; accepted: 0, 1 \(x staged by cp.async, one warp a row\) or 2"):
        make_launcher(1000, "bf16", 128, 4, ASYNC=3)
    with pytest.raises(ValueError, match=r"ASYNC=2 takes one whole row a program .*ROWS_PER_PROGRAM=4"):
        make_launcher(4096, "bf16", 256, 4, ASYNC=2)
    with pytest.raises(ValueError, match=r"ASYNC=2 takes .*8-32 elements a thread.*N=4096, .*BLOCK_THREADS=1024"):
        make_launcher(4096, "bf16", 1024, ASYNC=2)  # 4 elements a thread: less than a 16-byte vector
    with pytest.raises(ValueError, match=r"ASYNC=2 takes .*4-32 elements a thread.*N=65536, .*BLOCK_THREADS=1024"):
        make_launcher(65536, "fp32", 1024, ASYNC=2)  # 64 elements a thread
    with pytest.raises(ValueError, match=r"ASYNC=2 takes .*CHUNK=2048"):
        make_launcher(4096, "bf16", 256, CHUNK=2048, ASYNC=2)

def test_hold_is_refused_where_it_cannot_apply():
    with pytest.raises(ValueError, match="HOLD=1.*16-bit"):
        make_launcher(65536, "fp32", 1024, HOLD=1)
    with pytest.raises(ValueError, match="HOLD=1.*CHUNK=8192"):
        make_launcher(65536, "bf16", 1024, CHUNK=8192, HOLD=1)
    with pytest.raises(TypeError, match="HOLD=True must be an int"):
        make_launcher(4096, "bf16", 256, HOLD=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("N", [1, 7, 1001, 4096])
def test_one_chunk_read_twice_computes_the_rows(N, dtype):
    """``CHUNK`` at or past the padded row: one chunk read twice (``REREAD``, Inductor's way with a block
    as wide as the row), never the aligned-window body. Odd widths, N = 1, strided rows into a strided
    ``out`` and in place give the reference, and the rows of the whole row held in registers."""
    ds = dtype_str(dtype)
    L = make_launcher(N, ds, 128, CHUNK=max(16, next_pow2(N)), CACHE_POLICY=1)
    held = make_launcher(N, ds, 128, CACHE_POLICY=1)
    assert (L.REREAD, L.NUM_CHUNKS, L.BLOCK_N) == (1, 1, next_pow2(N)) and held.REREAD == 0
    consts = dict(zip(_CONST_NAMES, L._constexprs(5, 1, N + 3, N + 5)))
    assert consts["REREAD"] == 1 and consts["ALIGN"] == 0
    M = 5
    base, w = inputs((M, N + 3), dtype, seed=N)
    x, w = base[:, 1:N + 1], w[:N].contiguous()  # rows N + 3 apart, off the vector grid
    y_full = torch.full((M, N + 5), float("nan"), dtype=dtype)
    y = y_full[:, 2:N + 2]
    L(x, w, y, M, N + 3, N + 5, 1e-6)
    if N > 1:
        assert_close(y, x, w)
    else:  # each output is about +-w: within an ulp of the 16-bit dtype (the interpreter truncates)
        assert torch.allclose(y.double(), rmsnorm_reference(x, w, 1e-6), rtol=2 ** -6, atol=0)
    assert torch.isnan(y_full[:, :2]).all() and torch.isnan(y_full[:, N + 2:]).all(), "wrote past a row"
    ref = torch.full_like(y_full, float("nan"))[:, 2:N + 2]
    held(x, w, ref, M, N + 3, N + 5, 1e-6)
    assert torch.equal(y, ref)  # the same sums in the same order: the same rows
    xi = x.clone()
    L(xi, w, xi, M, N, N, 1e-6)  # in place
    assert torch.equal(xi, y)


def _knob_points():
    """Every knob tuple the CUDA and ROCm spaces hold, with an N that uses it; every cache policy and
    prefetch value too."""
    seen = {}
    for N in (100, 128, 256, 1000, 1024, 2000, 3001, 4096, 8192, 16384, 32768, 65536):
        for dtype in ("bf16", "fp32"):
            for M in (65536, 4096, 8, 1):  # 65536: many short rows also try deeper tiles
                for cfg in cuda_space(M, N, dtype) + rocm_space(M, N, dtype):
                    seen.setdefault(tuple(cfg.kwargs[k] for k in KNOBS), N)
    for policy in CACHE_POLICIES:
        for prefetch in (0, 1):
            seen.setdefault((256, 1, 1024, policy, prefetch, 1, 16), 4096)
        seen.setdefault((256, 2, 0, policy, 0, 1, 16), 1024)
    return sorted(seen.items())


@pytest.mark.parametrize("knobs,N", _knob_points(), ids=lambda v: str(v))
def test_every_structural_knob_value_in_the_space(knobs, N):
    kw = dict(zip(KNOBS, knobs))
    rows = kw["ROWS_PER_PROGRAM"]
    # A row count that is not a multiple of ROWS_PER_PROGRAM exercises the row mask;
    # N - 3 (when chunked or split) leaves a partial last chunk or slice.
    M = rows + 1 if rows > 1 else 2
    n = N - 3 if kw["CHUNK"] or kw["SPLIT"] > 1 or kw.get("HOLD") else N
    ds, dtype = ("bf16", torch.bfloat16) if kw.get("HOLD") else ("fp32", torch.float32)  # HOLD keeps 16-bit rows narrow
    x, w = inputs((M, n), dtype, seed=sum(knobs))
    y = torch.full_like(x, float("nan"))
    make_launcher(n, ds, **kw)(x, w, y, M, n, n, 1e-6)
    assert_close(y, x, w)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("knobs", [(64, 8), (128, 1, 64)], ids=["rows", "chunks"])
@pytest.mark.parametrize("packed", [False, True], ids=["strided", "packed"])
def test_64_bit_row_offsets_compute_the_same_rows(dtype, knobs, packed):
    """Launches whose row offsets may pass 2**31 elements take the body's 64-bit addresses (``WIDE``); no
    CPU test can hold such a tensor, so a launcher that always asks for them runs here, on packed rows
    (``PACKED``: the stride is the constant N) or on strided rows into a strided ``out``, against the
    reference and the same launch with 32-bit offsets."""
    import copy

    M = 300  # enough rows for the launch to take 32-bit offsets (fewer are latency-bound: 64 bits)
    if packed:
        x = torch.randn(M, 128, dtype=dtype)
    else:
        x = torch.randn(M, 150, dtype=dtype)[:, 11:139]  # 128 wide, 150 apart
    w = torch.rand(128, dtype=dtype) + 0.5
    narrow = make_launcher(128, {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype],
                           *knobs)
    wide = copy.copy(narrow)
    wide.addressing = lambda M, sx, sy: (1, packed)
    sx, sy = x.stride(0), (128 if packed else 130)
    assert narrow.addressing(M, sx, sy) == (0, packed)
    outs = []
    for L in (narrow, wide):
        y_full = torch.full((M, sy), float("nan"), dtype=dtype)
        y = y_full[:, sy - 128:]
        L(x, w, y, M, sx, sy, 1e-6)
        assert torch.isnan(y_full[:, :sy - 128]).all(), "the gaps of out were written"
        outs.append(y)
    assert relative_error(outs[1], rmsnorm_reference(x, w)) <= tolerance(dtype)
    assert torch.equal(outs[0], outs[1])


def _padded_rows(M, N, sx, dtype, seed):
    """x: ``M`` rows of ``N`` at row stride ``sx`` (a view of a wider tensor) and a weight."""
    base, w = inputs((M, sx), dtype, seed=seed)
    return base[:, :N], w[:N].contiguous()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("N,stride_pad", [(9, 0), (9, 3), (33, 0), (100, 2), (1001, 0), (1001, 5), (3001, 0),
                                          (7, 1)])
@pytest.mark.parametrize("tile", [(64, 1), (128, 2), (256, 4)], ids=lambda t: f"{t[0]}t x {t[1]}r")
def test_rows_off_the_vector_grid_are_read_as_aligned_vectors(dtype, N, stride_pad, tile):
    """Rows whose width is not a multiple of the 16-byte vector start at any element: the body reads
    each as the aligned vectors that hold it (``ALIGN``), so the neighbouring rows' elements pass
    through its registers. The result is the fp64 reference, and nothing outside a row is written (the
    padding of a wider output keeps its NaN), for every row start in a vector, rows per program and
    row stride."""
    M = 13
    sx = N + stride_pad
    x, w = _padded_rows(M, N, sx, dtype, seed=N * 7 + stride_pad)
    L = make_launcher(N, dtype_str(dtype), tile[0], tile[1], 0, 1)
    elem_vec = 16 // x.element_size()
    assert L.align(sx, sx) == (elem_vec if N % elem_vec and L.BLOCK_N >= N + elem_vec - 1 else 0)
    y = torch.full((M, sx), float("nan"), dtype=dtype)
    L(x, w, y, M, sx, sx, 1e-6)
    assert_close(y[:, :N], x, w)
    assert y[:, N:].isnan().all(), "an element outside the rows was written"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_rows_off_the_vector_grid_in_place_and_from_unaligned_starts(dtype):
    """``out=x`` (rows overwrite what their neighbours still read as padding of their vectors), and a
    tensor that starts off a 16-byte boundary (the body then keeps element-wise addresses): both give
    the reference."""
    x, w = inputs((9, 1001), dtype, seed=5)
    ref = x.clone()
    y = rmsnorm(x, w, out=x)
    assert y is x
    assert_close(y, ref, w)
    flat, w2 = inputs((9 * 1001 + 1,), dtype, seed=6)
    x2 = flat[1:].view(9, 1001)  # one element past an aligned start
    assert x2.data_ptr() % 16
    L = make_launcher(1001, dtype_str(dtype), 128, 2, 0, 1)
    assert L._constexprs(9, 1, 1001, 1001, aligned=False)[_CONST_NAMES.index("ALIGN")] == 0
    assert_close(rmsnorm(x2, w2[:1001].contiguous()), x2, w2[:1001])


@pytest.mark.parametrize("M,N,dtype,pad", [(3, 40000, torch.bfloat16, 0), (2, 32768, torch.float32, 0),
                                           (2, 32768, torch.float16, 24)], ids=str)
def test_the_cuda_default_of_a_few_long_rows_computes_their_rows_on_cpu(M, N, dtype, pad):
    """The CUDA default of a few long rows splits each across programs (one launch on a GPU); under the
    interpreter the same config runs its two-launch form: the same rows, a partial last slice included;
    strided rows into a padded output leave the padding alone."""
    from flyautotune_rmsnorm.space import default_config

    kw = default_config(M, N, dtype_str(dtype)).kwargs
    assert kw["SPLIT"] > 1 and kw["COOP"] == 1
    base, w = inputs((M, N + pad), dtype, seed=N)
    x, w = base[:, :N], w[:N].contiguous()
    y = torch.full_like(base, float("nan"))
    make_launcher(N, dtype_str(dtype), **kw)(x, w, y, M, N + pad, N + pad, 1e-6)
    assert_close(y[:, :N], x, w)
    assert torch.isnan(y[:, N:]).all()


@pytest.mark.parametrize("M,N,dtype,pad", [(3, 40000, torch.bfloat16, 0), (2, 32768, torch.float32, 8),
                                           (1, 65536, torch.float16, 0)], ids=str)
def test_the_rocm_default_of_a_few_long_rows_computes_their_rows_on_cpu(M, N, dtype, pad):
    """ROCm's default of a few long rows is the two-launch split: under the interpreter its partial sums and
    normalize give the reference, a partial last slice included; strided rows into a padded output leave
    the padding alone."""
    from flyautotune_rmsnorm.space import default_config

    kw = default_config(M, N, dtype_str(dtype), "rocm").kwargs
    assert kw["SPLIT"] > 1 and kw["COOP"] == 0
    base, w = inputs((M, N + pad), dtype, seed=N + 1)
    x, w = base[:, :N], w[:N].contiguous()
    y = torch.full_like(base, float("nan"))
    make_launcher(N, dtype_str(dtype), **kw)(x, w, y, M, N + pad, N + pad, 1e-6)
    assert_close(y[:, :N], x, w)
    assert torch.isnan(y[:, N:]).all()


@pytest.mark.parametrize("N,dtype", [(2999, torch.bfloat16), (5001, torch.float16), (3001, torch.float32)], ids=str)
def test_the_cuda_default_of_rows_off_the_vector_grid_computes_their_rows_on_cpu(N, dtype):
    """The CUDA default of such rows holds a whole row (read as aligned vectors): strided rows into a
    padded output leave the padding alone."""
    from flyautotune_rmsnorm.space import default_config

    kw = default_config(16384, N, dtype_str(dtype)).kwargs
    L = make_launcher(N, dtype_str(dtype), **kw)
    assert L.align(N + 5, N + 5)
    base, w = inputs((7, N + 5), dtype, seed=N)
    x = base[:, :N]
    y = torch.full_like(base, float("nan"))
    L(x, w[:N].contiguous(), y, 7, N + 5, N + 5, 1e-6)
    assert_close(y[:, :N], x, w[:N])
    assert torch.isnan(y[:, N:]).all()


@pytest.mark.parametrize("M,N,dtype,middling", [
    (300, 2560, torch.bfloat16, False), (300, 5120, torch.float16, False), (9000, 3584, torch.bfloat16, False),
    (8192, 1000, torch.bfloat16, True), (8192, 1024, torch.float16, True), (16384, 1000, torch.bfloat16, True),
    (8192, 2000, torch.bfloat16, True), (8192, 1000, torch.float32, True)], ids=str)
def test_the_cuda_default_of_many_rows_computes_their_rows_on_cpu(M, N, dtype, middling):
    """The CUDA default of many rows of widths off the power of two (a whole row at 128 threads, chunks of
    2048 at 128 for many rows padded to 4096, or chunks of 4096 at 256), and where x is 6-36 MiB of rows of
    513-2048 elements (``middling``: the asynchronous copy, which takes the Triton body of its tile under
    the interpreter, or x streamed): the first rows of such a launch, strided into a padded output, give the
    reference and leave the padding alone."""
    from flyautotune_rmsnorm.space import default_config, mid_rows

    kw = default_config(M, N, dtype_str(dtype)).kwargs
    if middling:
        assert mid_rows(M, N, dtype_str(dtype)) is not None
    base, w = inputs((5, N + 16), dtype, seed=N)
    x, w = base[:, :N], w[:N].contiguous()
    y = torch.full_like(base, float("nan"))
    make_launcher(N, dtype_str(dtype), **kw)(x, w, y, 5, N + 16, N + 16, 1e-6)
    assert_close(y[:, :N], x, w)
    assert torch.isnan(y[:, N:]).all()
