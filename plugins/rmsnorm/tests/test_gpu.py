"""The same kernel compiled for a CUDA GPU (skipped without one)."""

import pytest
import torch

import flyautotune as fat
from flyautotune_rmsnorm import cuda_space, default_config, make_launcher, rmsnorm, rmsnorm_autotuned
from flyautotune_rmsnorm.api import dtype_str, launch, tuned_launch
from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CPU counterparts run the "
                                                              "same kernel under Triton's interpreter)"),
]

ANCHOR_NS = (1024, 4096, 8192, 16384, 32768, 65536)


def _inputs(M, N, dtype):
    x = torch.randn(M, N, device="cuda", dtype=dtype) * 2
    w = torch.rand(N, device="cuda", dtype=dtype) + 0.5
    return x, w


def _check(y, x, w):
    assert not torch.isnan(y).any(), "an output element was not written"
    err = relative_error(y, rmsnorm_reference(x, w))
    assert err <= tolerance(y.dtype), f"relative error {err:.3g}"


@pytest.mark.parametrize("N", ANCHOR_NS + (1000, 33, 128, 40000))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_every_config_of_the_space_is_right_on_the_gpu(N, dtype):
    ds = {torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
    M = 37  # not a multiple of any ROWS_PER_PROGRAM > 1: the row mask runs
    x, w = _inputs(M, N, dtype)
    # many short rows (65536) also try deeper tiles than 4096 rows do
    for cfg in cuda_space(65536 if N <= 512 else 4096, N, ds) + [default_config(M, N, ds)]:
        kw = cfg.kwargs
        L = make_launcher(N, ds, **kw)
        for attempt in ("jit", "direct"):  # first call compiles via JITFunction, then the cached launcher
            y = torch.full_like(x, float("nan"))
            L(x, w, y, M, N, N, 1e-6, None, (("num_warps", kw["BLOCK_THREADS"] // 32),))
            torch.cuda.synchronize()
            _check(y, x, w)


def _gluon_body_runs(L, N, dtype, counts, strided_rows):
    """A Gluon body's launcher on the GPU: the body itself runs (its own binaries, none of the fallback's)
    for each row count of ``counts`` (one row first: its binary must not be specialized on M == 1), strided
    rows into a strided out=; rows whose stride is not whole vectors take the Triton body of the same tile;
    a search's precompile builds it without launching; the tuned entry's hit path (bind) fills itself on a
    first call and takes its direct launch on the second, for one row and for the last count. Every output
    against fp64. Returns the precompiled kernel."""
    ds = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    for M in counts:
        x, w = _inputs(M, N, dtype)
        y = torch.full_like(x, float("nan"))
        L(x, w, y, M, N, N, 1e-6)
        torch.cuda.synchronize()
        _check(y, x, w)
    assert L._launches and not L.fallback._launches, "the Gluon body did not run"
    vec = 16 // x.element_size()
    for pad in (vec, 1):  # whole vectors: the Gluon body; otherwise the fallback
        big = torch.randn(strided_rows, N + pad, device="cuda", dtype=dtype)
        out = torch.full((strided_rows, N + pad), float("nan"), device="cuda", dtype=dtype)
        L(big[:, :N], w, out[:, :N], strided_rows, N + pad, N + pad, 1e-6)
        torch.cuda.synchronize()
        _check(out[:, :N], big[:, :N], w)
        assert torch.isnan(out[:, N:]).all(), "wrote past the row"
    assert L.fallback._launches, "rows of a stride off the vectors did not take the fallback"
    k = L.compiled(x, w, torch.empty_like(x), M, N, N)
    assert not k.n_spills
    for m in (1, M):
        run = L.bind(m, N, N, 0, w.dtype, ())
        for _ in range(2):
            y = torch.full_like(x[:m], float("nan"))
            run(x[:m], w, y, m, N, ds, 1e-6, N, N)
            torch.cuda.synchronize()
            _check(y, x[:m], w)
    return k


def _needs_gluon():
    from flyautotune_rmsnorm.async_rows import async_capable

    if not async_capable(0):
        pytest.skip("the Gluon bodies need compute capability 8.0+ on NVIDIA and a Triton with Gluon")


@pytest.mark.parametrize("N", [520, 1000, 1024, 2048])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_async_rows_are_right_on_the_gpu_and_run_the_gluon_body(N, dtype):
    """ASYNC=1 on the GPU (:func:`_gluon_body_runs`): one row, a row count that is not a multiple of 4,
    300; x staged in shared memory."""
    _needs_gluon()
    ds = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    L = make_launcher(N, ds, 128, 4, CACHE_POLICY=0, ASYNC=1)
    k = _gluon_body_runs(L, N, dtype, (1, 4097, 300), 37)
    assert k.metadata.shared
    # every binary the body launched copies x through L1 (Triton 3.9's own .ca, or l1_copies' PTX edit)
    for launch in L._launches.values():
        ptx = launch.kernel.asm["ptx"]
        assert "cp.async.ca.shared.global" in ptx and "cp.async.cg" not in ptx


@pytest.mark.parametrize("N", [2056, 3000, 4096, 8192, 16384])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_the_gluon_row_body_is_right_on_the_gpu_and_runs(N, dtype):
    """ASYNC=2 (one row a program, one barrier) on the GPU at every thread count the space offers
    (:func:`_gluon_body_runs`): one row, 37, 263."""
    from flyautotune_rmsnorm.space import row_configs

    _needs_gluon()
    ds = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    configs = row_configs(1, N, ds)
    assert configs, "the space offers the row body here"
    for cfg in configs:
        _gluon_body_runs(make_launcher(N, ds, **cfg.kwargs), N, dtype, (1, 37, 263), 5)


@pytest.mark.parametrize("N", [16384, 32768 - 5, 65536, 65536 - 3])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_held_rows_are_right_on_the_gpu_strided_and_into_out(N, dtype):
    """HOLD (the row kept in 16 bits across the reduction): odd widths, rows 8 elements apart more
    than N (strided), and out= a strided view too."""
    ds = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    big = torch.randn(3, N + 8, device="cuda", dtype=dtype) * 2
    x, w = big[:, :N], torch.rand(N, device="cuda", dtype=dtype) + 0.5
    out = torch.full((3, N + 8), float("nan"), device="cuda", dtype=dtype)
    for bt in (512, 1024):
        y = out[:, :N]
        y.fill_(float("nan"))
        launch(x, w, y, 3, N, ds, 1e-6, N + 8, N + 8, None, BLOCK_THREADS=bt, HOLD=1, CACHE_POLICY=2)
        torch.cuda.synchronize()
        _check(y, x, w)
        assert torch.isnan(out[:, N:]).all(), "wrote past the row"


@pytest.mark.parametrize("M,N", [(1, 65536), (4, 131072), (1, 262144), (3, 40001), (32, 4096), (2, 3000)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_split_rows_are_right_on_the_gpu(M, N, dtype):
    ds = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    x, w = _inputs(M, N, dtype)
    splits = [c for c in cuda_space(M, N, ds) if c.kwargs["SPLIT"] > 1] or [
        fat.Config(BLOCK_THREADS=256, SPLIT=4, CHUNK=512)]
    for cfg in splits:
        for attempt in ("jit", "direct"):
            y = torch.full_like(x, float("nan"))
            launch(x, w, y, M, N, ds, 1e-6, N, N, None, **cfg.kwargs)
            torch.cuda.synchronize()
            _check(y, x, w)


def test_split_rows_replay_in_a_cuda_graph_on_the_given_stream():
    x, w = _inputs(2, 65536, torch.bfloat16)
    kw = dict(BLOCK_THREADS=256, SPLIT=16, CACHE_POLICY=2)
    y = torch.full_like(x, float("nan"))
    launch(x, w, y, 2, 65536, "bf16", 1e-6, 65536, 65536, None, **kw)  # compiled outside the capture
    y.fill_(float("nan"))
    cap = torch.cuda.Stream()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=cap):
        launch(x, w, y, 2, 65536, "bf16", 1e-6, 65536, 65536, cap, **kw)
    torch.cuda.synchronize()
    assert torch.isnan(y).all()
    g.replay()
    torch.cuda.synchronize()
    _check(y, x, w)


@pytest.mark.parametrize("N", ANCHOR_NS)
def test_no_config_in_the_space_spills(N):
    x, w = _inputs(16, N, torch.bfloat16)
    y = torch.empty_like(x)
    for cfg in cuda_space(4096, N, "bf16") + cuda_space(1, N, "bf16"):
        kw = cfg.kwargs
        if kw["COOP"] == 3:
            continue  # the cluster body is CuTe DSL: test_cluster.py assembles its PTX and reads its spills
        L = make_launcher(N, "bf16", **kw)
        k = L.compiled(x, w, y, 16 * kw["ROWS_PER_PROGRAM"], N, N, (("num_warps", kw["BLOCK_THREADS"] // 32),))
        assert k.n_spills == 0, f"{cfg} spills {k.n_spills} registers ({k.n_regs} used)"


@pytest.mark.parametrize("M,coop", [(1, 1), (1, 0), (300, 1)])
def test_a_split_config_compiles_the_kernel_its_launch_runs(M, coop):
    """What the search's precompile pool builds for a split config is what its launch runs: the
    one-launch kernel where COOP takes it (every program resident), else the two-launch pair."""
    from flyautotune_rmsnorm.split import sm_count

    N = 65536
    x, w = _inputs(M, N, torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    L = make_launcher(N, "bf16", 256, CACHE_POLICY=2, SPLIT=32, COOP=coop)
    one = coop == 1 and M * L.programs <= sm_count(x.get_device())
    assert L.uses_coop(M, x.get_device()) == one
    k = L.compiled(x, w, y, M, N, N, (("num_warps", 8),))
    assert k.metadata.name == ("_split_coop" if one else "_split_normalize")
    L(x, w, y, M, N, N, 1e-6, None, (("num_warps", 8),))
    torch.cuda.synchronize()
    _check(y, x, w)


def test_strided_rows_and_out_on_the_gpu():
    base, w = _inputs(64, 1100, torch.float16)
    x = base[::2, 50:1074]
    out_buf = torch.full((32, 1200), 3.0, device="cuda", dtype=torch.float16)
    out = out_buf[:, 100:1124]
    got = rmsnorm(x, w[:1024].contiguous(), out=out)
    torch.cuda.synchronize()
    assert got is out
    _check(out, x, w[:1024])
    assert torch.all(out_buf[:, :100] == 3.0) and torch.all(out_buf[:, 1124:] == 3.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("N", [9, 1001, 2999, 3001, 5001])
def test_rows_off_the_vector_grid_on_the_gpu(N, dtype):
    """Odd widths run the aligned-vector body (``ALIGN``): every config of the space into a padded output
    (nothing outside the rows written), strided rows, ``out=x``, the tuned entry's hit path, and a tensor
    off a 16-byte boundary (element-wise addresses): each against fp64."""
    ds = dtype_str(dtype)
    M = 37
    base, w = _inputs(M, N + 3, dtype)
    w = w[:N].contiguous()
    for x in (base[:, :N], base[:, :N].contiguous()):
        sx = x.stride(0)
        for cfg in cuda_space(4096, N, ds) + [default_config(M, N, ds)]:
            kw = cfg.kwargs
            L = make_launcher(N, ds, **kw)
            for attempt in ("jit", "direct"):
                y = torch.full((M, sx), float("nan"), device="cuda", dtype=dtype)
                L(x, w, y, M, sx, sx, 1e-6, None, (("num_warps", kw["BLOCK_THREADS"] // 32),))
                torch.cuda.synchronize()
                _check(y[:, :N], x, w)
                assert torch.isnan(y[:, N:]).all(), f"{kw}: an element outside the rows was written"
    x = base[:, :N].contiguous()
    ref = x.clone()
    assert rmsnorm(x, w, out=x) is x
    torch.cuda.synchronize()
    _check(x, ref, w)
    for _ in range(2):  # the second call takes the specialized hit
        _check(rmsnorm_autotuned(ref, w), ref, w)
    shifted = torch.randn(M * N + 1, device="cuda", dtype=dtype)[1:].view(M, N)
    _check(rmsnorm(shifted, w), shifted, w)


def test_unaligned_pointer_gets_its_own_binary():
    base, w = _inputs(8, 4097, torch.bfloat16)
    x_aligned = base[:, :4096]
    x_shifted = base[:, 1:]  # 2-byte offset: not 16-byte aligned
    for x in (x_aligned, x_shifted, x_aligned):
        y = rmsnorm(x, w[:4096].contiguous())
        torch.cuda.synchronize()
        _check(y, x, w[:4096])


def test_cache_hits_through_the_specialized_launch_stay_right():
    """After a hit primes the specialized launch, calls that differ in alignment, weight dtype, out=,
    strides or stream still give the right rows (they fall back to the general launch)."""
    M, N = 64, 4096
    base, w = _inputs(M, N + 8, torch.bfloat16)
    x, w = base[:, :N].contiguous(), w[:N].contiguous()
    for _ in range(3):  # search or default, general hit, fast hit
        y = rmsnorm_autotuned(x, w)
    torch.cuda.synchronize()
    _check(y, x, w)
    x2 = torch.randn_like(x)
    _check(rmsnorm_autotuned(x2, w), x2, w)  # new data, same everything else
    shifted = base[:, 1:N + 1]  # unaligned rows, a row stride of N + 8
    _check(rmsnorm_autotuned(shifted, w), shifted, w)
    xu = torch.empty(M * N + 1, device="cuda", dtype=torch.bfloat16)[1:].view(M, N)
    xu.copy_(x)
    _check(rmsnorm_autotuned(xu, w), xu, w)  # contiguous but unaligned: same key, its own binary
    out = torch.empty_like(x)
    assert rmsnorm_autotuned(x, w, out=out) is out
    _check(out, x, w)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = rmsnorm_autotuned(x, w)
    s.synchronize()
    _check(y, x, w)
    torch.cuda.synchronize()


@pytest.mark.parametrize("as_handle", [False, True], ids=["stream object", "raw handle"])
def test_launch_goes_to_the_given_stream(as_handle):
    """Captured into a graph on stream ``cap`` while another stream is current: only a launch
    on ``cap`` is recorded instead of run (deterministic, no timing)."""
    x, w = _inputs(256, 4096, torch.bfloat16)
    rmsnorm(x, w, out=torch.empty_like(x))  # compiled outside the capture
    y = torch.full_like(x, float("nan"))
    cap, other = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=cap):
        with torch.cuda.stream(other):
            rmsnorm(x, w, out=y, stream=cap.cuda_stream if as_handle else cap)
    torch.cuda.synchronize()
    assert torch.isnan(y).all(), "the kernel ran on another stream instead of being captured on cap"
    g.replay()
    torch.cuda.synchronize()
    _check(y, x, w)


@pytest.mark.parametrize("as_handle", [False, True], ids=["stream object", "raw handle"])
def test_tuned_hits_launch_on_the_given_stream_without_entering_it(as_handle, monkeypatch):
    """``rmsnorm_autotuned(stream=s)`` on a cache hit launches the specialized binary on ``s``: captured into
    a graph on ``cap`` while another stream is current, with no stream entered (``torch.cuda.stream`` is
    never called), and the rows right on replay. ``rmsnorm(stream=s)`` likewise."""
    x, w = _inputs(256, 4096, torch.bfloat16)
    cap, other = torch.cuda.Stream(), torch.cuda.Stream()
    given = cap.cuda_stream if as_handle else cap
    for _ in range(3):  # the default or a stored winner, the general path's hit, the generated path's
        rmsnorm_autotuned(x, w, stream=given)
        rmsnorm(x, w, stream=given)
    torch.cuda.synchronize()
    ys = [torch.full_like(x, float("nan")) for _ in range(2)]
    entered = []
    real = torch.cuda.stream
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=cap):
        with torch.cuda.stream(other):
            monkeypatch.setattr(torch.cuda, "stream", lambda s: entered.append(s) or real(s))
            assert rmsnorm_autotuned(x, w, out=ys[0], stream=given) is ys[0]
            assert tuned_launch.last_source == "memory"
            assert rmsnorm(x, w, out=ys[1], stream=given) is ys[1]
            monkeypatch.setattr(torch.cuda, "stream", real)
    assert entered == []
    torch.cuda.synchronize()
    assert all(torch.isnan(y).all() for y in ys), "a kernel ran on another stream instead of being captured"
    g.replay()
    torch.cuda.synchronize()
    for y in ys:
        _check(y, x, w)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs (a stream of the other one)")
def test_a_stream_of_another_device_is_named():
    x, w = _inputs(4, 1024, torch.bfloat16)
    for fn in (rmsnorm, rmsnorm_autotuned):
        with pytest.raises(ValueError, match=r"is a stream of cuda:1, but x is on cuda:0"):
            fn(x, w, stream=torch.cuda.Stream(device=1))


def test_forced_search_on_the_gpu_picks_from_the_space(monkeypatch):
    x, w = _inputs(2048, 8192, torch.bfloat16)
    monkeypatch.setenv("FLYAUTOTUNE", "1")
    y = rmsnorm_autotuned(x, w)
    torch.cuda.synchronize()
    assert tuned_launch.last_source == "search"
    assert tuned_launch.last_config in cuda_space(2048, 8192, "bf16")
    _check(y, x, w)
    monkeypatch.delenv("FLYAUTOTUNE")
    rmsnorm_autotuned(x, w)
    assert tuned_launch.last_source == "memory"


def test_a_search_on_the_gpu_times_one_binary_once():
    """precompile names each build (the binary, its grid and launch): at 64 x 4 bf16 the row is one access
    at VEC=16 or VEC=8, the same binary, so a search over both times only the first; other threads are
    another binary, timed. The winner still runs right."""
    from flyautotune_rmsnorm import api

    M, N = 64, 4
    base = default_config(M, N, "bf16")
    space = [base, fat.Config(**dict(base.kwargs, VEC=8)),
             fat.Config(**dict(base.kwargs, BLOCK_THREADS=2 * base.kwargs["BLOCK_THREADS"]))]
    tuner = fat.autotune(configs=space, key=["M", "N", "dtype"], name="rmsnorm_gpu_twins",
                         default=lambda **_: base, precompile=api.precompile, restore_value=["x"])(api.launch)
    x, w = _inputs(M, N, torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    sel = tuner.select(x, w, y, M, N, "bf16", 1e-6, N, N, force=True)
    rows = {r["config"]["kwargs"]["VEC"] * 1000 + r["config"]["kwargs"]["BLOCK_THREADS"]: r for r in sel.timings}
    twin = rows[8000 + base.kwargs["BLOCK_THREADS"]]
    assert twin["ms"] is None and twin["error"].startswith("skipped: same build as ")
    assert all(r["ms"] is not None for k, r in rows.items() if r is not twin)
    tuner(x, w, y, M, N, "bf16", 1e-6, N, N)
    torch.cuda.synchronize()
    _check(y, x, w)


def test_target_and_hints_on_the_gpu():
    assert fat.target_for(torch.device("cuda")) == fat.Target(
        "cuda", "sm_%d%d" % torch.cuda.get_device_capability(), 32)
    x, w = _inputs(64, 8192, torch.bfloat16)
    with fat.compile_hints(maxnreg=64):
        y = rmsnorm(x, w)
    torch.cuda.synchronize()
    _check(y, x, w)
    y = torch.empty_like(x)
    with pytest.raises(ValueError, match="maxnreg=255"):  # 255 x 1024 threads > the register file
        with fat.compile_hints(maxnreg=255):
            launch(x, w, y, 64, 8192, "bf16", 1e-6, 8192, 8192, None, BLOCK_THREADS=1024)
    with pytest.raises(ValueError, match="waves_per_eu"):
        with fat.compile_hints(waves_per_eu=2):
            rmsnorm(x, w)


def test_weight_on_another_device_is_rejected():
    x, w = _inputs(4, 64, torch.float32)
    with pytest.raises(ValueError, match="weight is on cpu"):
        rmsnorm(x, w.cpu())


@pytest.mark.parametrize("M,N", [(1, 4096), (32, 4096), (2048, 1000), (256, 8192)])
def test_a_chain_of_pdl_launches_reads_each_previous_output(M, N, monkeypatch):
    """With FLYAUTOTUNE_RMSNORM_PDL=1 the one-launch body runs with programmatic dependent launch on
    Hopper, so each call may start before the call ahead has finished. In a chain where every call reads
    the buffer the call ahead writes (NaN until then), no output holds a NaN or a wrong row: each call
    waited for its input. Eager, and replayed from a CUDA graph."""
    from flyautotune_rmsnorm import factory
    from flyautotune_rmsnorm.factory import _CONST_NAMES, _launchers, pdl_for

    dev = torch.cuda.current_device()
    if torch.cuda.get_device_capability(dev)[0] < 9:
        pytest.skip("programmatic dependent launch needs Hopper or newer")
    assert pdl_for(dev) == 0  # off unless asked for
    monkeypatch.setenv("FLYAUTOTUNE_RMSNORM_PDL", "1")
    monkeypatch.setattr(factory, "_pdl_env", None)  # read again for this test, forgotten after it
    monkeypatch.setattr(factory, "_pdl_devices", {})
    assert pdl_for(dev) == 1
    x, w = _inputs(M, N, torch.bfloat16)
    bufs = [x] + [torch.empty_like(x) for _ in range(24)]

    def chain():
        for a, b in zip(bufs, bufs[1:]):
            rmsnorm(a, w, 1e-6, out=b)

    def check(what):
        for i, (a, b) in enumerate(zip(bufs, bufs[1:])):
            assert not torch.isnan(b).any(), f"{what}: call {i} read its input before the call ahead wrote it"
            err = relative_error(b, rmsnorm_reference(a, w))
            assert err <= tolerance(torch.bfloat16), f"{what}: call {i}: relative error {err:.3g}"

    def poison():
        for b in bufs[1:]:
            b.fill_(float("nan"))

    poison()
    chain()
    torch.cuda.synchronize()
    check("eager")
    pdl_at = _CONST_NAMES.index("PDL")
    ours = [launch for L in _launchers.values() if getattr(L, "N", None) == N and L.SPLIT == 1
            and not hasattr(L, "fallback")  # the Gluon body (ASYNC=1) has constexprs of its own and no PDL
            for key, launch in L._launches.items() if key[1][pdl_at] == 1]  # the binaries built with PDL=1
    assert ours and all(launch.kernel.metadata.launch_pdl for launch in ours)
    from flyautotune_rmsnorm import claunch

    if claunch.enabled() and all(claunch._why_not(lc.kernel, lc.kernel.run, lc.kernel.metadata) is None
                                 for lc in ours):  # Triton 3.5/3.6: claunch's cuLaunchKernelEx serves them
        assert all(getattr(lc.call, "func", None) is claunch.module().launch for lc in ours)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        chain()
    for _ in range(3):
        poison()
        g.replay()
        torch.cuda.synchronize()
        check("graph replay")


def test_row_offsets_past_two_to_the_31_take_64_bit_addresses():
    """Three rows 2**30 elements apart (a 4 GiB bf16 buffer): the last row starts past 2**31 elements, so
    the launch takes the body's 64-bit row offsets (``WIDE``); a row misplaced by a 32-bit wrap would
    leave its output NaN or read the wrong row. The same rows packed close together agree."""
    M, N, gap = 3, 4096, 2**30
    try:
        buf = torch.empty(gap * (M - 1) + N, device="cuda", dtype=torch.bfloat16)
    except torch.cuda.OutOfMemoryError:
        pytest.skip("needs 4 GiB of free GPU memory")
    x = buf.as_strided((M, N), (gap, 1))
    x.copy_(torch.randn(M, N, device="cuda", dtype=torch.bfloat16))
    w = torch.rand(N, device="cuda", dtype=torch.bfloat16) + 0.5
    L = make_launcher(N, "bf16", 512)
    assert L.addressing(M, gap, N) == (1, 0)
    y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    L(x, w, y, M, gap, N, 1e-6)
    packed = x.contiguous()
    del buf
    y_packed = torch.full_like(y, float("nan"))
    L(packed, w, y_packed, M, N, N, 1e-6)
    torch.cuda.synchronize()
    _check(y, packed, w)
    assert torch.equal(y, y_packed)


def test_packed_rows_past_two_to_the_31_elements():
    """Packed rows (the stride the constant N) whose last rows start past 2**31 elements (4 GiB of bf16
    in, 4 GiB out): 64-bit offsets from the constant stride. The rows on both sides of the line are
    checked, and none of the output is left unwritten."""
    N = 4096
    M = 2**31 // N + 3
    try:
        x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        y = torch.full_like(x, float("nan"))
    except torch.cuda.OutOfMemoryError:
        pytest.skip("needs 8 GiB of free GPU memory")
    w = torch.rand(N, device="cuda", dtype=torch.bfloat16) + 0.5
    L = make_launcher(N, "bf16", 512)
    assert L.addressing(M, N, N) == (1, 1)
    L(x, w, y, M, N, N, 1e-6)
    torch.cuda.synchronize()
    assert not torch.isnan(y).any(), "an output row was not written"
    for rows in (slice(0, 2), slice(2**31 // N - 2, M)):
        _check(y[rows], x[rows], w)
    del x, y
    torch.cuda.empty_cache()


@pytest.mark.parametrize("M,N,dtype", [(1, 65536, torch.bfloat16), (3, 40000, torch.bfloat16),
                                       (8, 65536, torch.float16), (2, 65536, torch.float32),
                                       (1, 262144, torch.bfloat16), (16384, 2999, torch.bfloat16),
                                       (33, 5001, torch.float16)], ids=str)
def test_the_default_runs_on_the_gpu(M, N, dtype):
    """``rmsnorm()`` without a search: a few long rows take the one-launch split (every program resident),
    rows off the 16-byte grid a whole row read as aligned vectors; eager and in a CUDA graph, each against
    fp64."""
    from flyautotune_rmsnorm.split import sm_count

    ds = dtype_str(dtype)
    kw = default_config(M, N, ds).kwargs
    L = make_launcher(N, ds, **kw)
    if kw["SPLIT"] > 1:
        assert kw["COOP"] == 1 and L.uses_coop(M, 0) == (M * kw["SPLIT"] <= sm_count(0))
    else:
        assert L.align(N, N)
    x, w = _inputs(M, N, dtype)
    _check(rmsnorm(x, w), x, w)
    y = torch.full_like(x, float("nan"))
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        rmsnorm(x, w, out=y)  # the stream's first launch makes the one-launch form's workspace
    torch.cuda.synchronize()
    y.fill_(float("nan"))
    with torch.cuda.graph(g, stream=s):
        rmsnorm(x, w, out=y)
    g.replay()
    torch.cuda.synchronize()
    _check(y, x, w)


@pytest.mark.parametrize("N,dtype", [(4096, torch.bfloat16), (1000, torch.float16), (3001, torch.float32),
                                     (65536, torch.bfloat16)], ids=str)
def test_the_defaults_bound_launch_follows_every_call(N, dtype, monkeypatch):
    """``rmsnorm()`` resolves its default binary once per shape, layout, device and hints: repeated calls
    with a new row count, in place, strided rows, another weight dtype, a hint block and a stream each get
    their own launch and stay right."""
    from flyautotune_rmsnorm import api

    monkeypatch.setattr(api, "_default_runs", {})  # this test's calls only
    for M in (1, 3, 64, 3):
        x, w = _inputs(M, N, dtype)
        _check(rmsnorm(x, w), x, w)
        xi = x.clone()
        assert rmsnorm(xi, w, out=xi) is xi
        _check(xi, x, w)
        wide = torch.randn(M, N + 64, device="cuda", dtype=dtype)[:, :N]  # rows N + 64 apart
        _check(rmsnorm(wide, w), wide, w)
        w32 = w.float()
        _check(rmsnorm(x, w32), x, w32)
        with fat.compile_hints(maxnreg=64):  # 64 x 1024 threads still fits the register file
            _check(rmsnorm(x, w), x, w)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            y = rmsnorm(x, w, stream=s)
        s.synchronize()
        _check(y, x, w)
    runs = api._default_runs
    assert {k[0] for k in runs} == {1, 3, 64} and {k[3] for k in runs} == {N, N + 64}
    assert {k[6] for k in runs} == {dtype, torch.float32} and any(k[7] for k in runs)  # weight dtypes, hints
    split = [k for k, run in runs.items() if run is None]  # rows the bound launch does not serve (split)
    assert all(default_config(k[0], N, dtype_str(dtype)).kwargs["SPLIT"] > 1 for k in split)


@pytest.mark.parametrize("M,N", [(300, 2560), (4096, 3072), (16384, 3584), (4096, 5120), (8192, 6144)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_the_default_of_llm_widths_runs_on_the_gpu(M, N, dtype):
    """``rmsnorm()`` without a search at the hidden sizes of common LLMs (widths off the power of two):
    against fp64, into a fresh output and in place."""
    x, w = _inputs(M, N, dtype)
    _check(rmsnorm(x, w), x, w)
    y = x.clone()
    rmsnorm(y, w, out=y)
    _check(y, x, w)


@pytest.mark.parametrize("M,N,dtype", [(4096, 768, torch.bfloat16), (8192, 1000, torch.bfloat16),
                                       (8192, 1024, torch.float16), (16384, 1000, torch.bfloat16),
                                       (8192, 2000, torch.bfloat16), (8192, 1000, torch.float32)], ids=str)
def test_the_default_of_middling_x_runs_on_the_gpu(M, N, dtype):
    """``rmsnorm()`` without a search where x is 6-36 MiB of rows of 513-2048 elements (the asynchronous
    copy, or x streamed): against fp64, into a fresh output, in place and with strided rows into a padded
    output whose padding stays untouched."""
    from flyautotune_rmsnorm.space import mid_rows

    assert mid_rows(M, N, dtype_str(dtype)) == default_config(M, N, dtype_str(dtype)) is not None
    x, w = _inputs(M, N, dtype)
    _check(rmsnorm(x, w), x, w)
    y = x.clone()
    rmsnorm(y, w, out=y)
    _check(y, x, w)
    base = torch.randn(M, N + 8, device="cuda", dtype=dtype)
    out = torch.full_like(base, float("nan"))
    rmsnorm(base[:, :N], w, out=out[:, :N])
    _check(out[:, :N], base[:, :N], w)
    assert torch.isnan(out[:, N:]).all()
