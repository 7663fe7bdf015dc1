"""The config space, the default, the adopter's registration, and the tuned entry's selection."""

import os
import shutil

import pytest
import torch

import flyautotune as fat
from flyautotune_rmsnorm import api, cuda_space, default_config, rmsnorm_autotuned, rocm_space
from flyautotune_rmsnorm.api import tuned_launch
from flyautotune_rmsnorm.factory import ELEMENT_SIZE, make_launcher, next_pow2
from flyautotune_rmsnorm.space import KNOBS, MAX_REGISTER_ROW, SMALL_N, _cfg, split_configs

ANCHOR_SHAPES = [
    (1, 4096, "bf16"), (32, 4096, "bf16"), (256, 8192, "bf16"), (4096, 4096, "bf16"), (4096, 8192, "bf16"),
    (16384, 8192, "bf16"), (32768, 4096, "bf16"), (65536, 1024, "bf16"), (8192, 16384, "bf16"),
    (2048, 32768, "bf16"), (1024, 65536, "bf16"), (256, 8192, "fp32"), (4096, 8192, "fp32"),
    (32768, 4096, "fp32"),
]


@pytest.mark.parametrize("N", [64, 128, 300, SMALL_N])
def test_short_rows_search_rows_per_program_warps_and_access_width(N):
    for ds in ("bf16", "fp16", "fp32"):
        for space, most in ((cuda_space(65536, N, ds), 30), (cuda_space(256, N, ds), 24), (rocm_space(65536, N, ds), 16)):
            assert default_config(65536, N, ds) in space
            assert 4 <= len(space) <= most
            knobs = {(c.kwargs["BLOCK_THREADS"], c.kwargs["ROWS_PER_PROGRAM"], c.kwargs["VEC"]) for c in space}
            assert len({k[0] for k in knobs}) >= 3 and len({k[1] for k in knobs}) >= 3
            assert {k[2] for k in knobs} == {8, 16}


@pytest.mark.parametrize("N", [64, 128, 256, SMALL_N])
def test_short_rows_on_cuda_try_both_cache_policies_with_16_byte_accesses(N):
    # measured on the H200: streaming x and keeping the weight (policy 1) led at 65536 x 128, lost at 262144 x 256
    for ds in ("bf16", "fp32"):
        cuda = cuda_space(65536, N, ds)
        wide = {(c.kwargs["BLOCK_THREADS"], c.kwargs["ROWS_PER_PROGRAM"]) for c in cuda if c.kwargs["VEC"] == 16}
        for policy in (0, 1):
            assert {(c.kwargs["BLOCK_THREADS"], c.kwargs["ROWS_PER_PROGRAM"]) for c in cuda
                    if c.kwargs["VEC"] == 16 and c.kwargs["CACHE_POLICY"] == policy} == wide
        assert {c.kwargs["CACHE_POLICY"] for c in rocm_space(65536, N, ds)} == {0}  # unmeasured on ROCm


@pytest.mark.parametrize("M,N,ds", [(65536, 128, "bf16"), (262144, 256, "bf16"), (64, 8, "fp32"), (8, 300, "bf16")])
def test_rocm_short_rows_time_no_binary_twice(M, N, ds):
    """On a 64-lane wavefront a 32-thread program runs as 64 lanes: the ROCm space names every short-row
    program by the threads that run it, never below a wavefront, and its candidates cross-compile for
    gfx942 to as many distinct binaries as there are candidates, so a search times no program twice."""
    pytest.importorskip("triton.backends.amd")
    pytest.importorskip("flyautotune_rocm.report")  # the plugin that compiles reports for gfx targets
    from flyautotune.report import resource_report

    target = fat.Target("rocm", "gfx942", 64)
    space = rocm_space(M, N, ds)
    assert min(c.kwargs["BLOCK_THREADS"] for c in space) == 64
    assert default_config(M, N, ds, "rocm") in space
    rows = resource_report(fat.plugin_manager().get_adopter("rmsnorm"), (M, N), ds, target, configs=space)
    assert all(r.error is None for r in rows), [r.error for r in rows if r.error]
    assert len({r.binary_sha256 for r in rows}) == len(space), [(str(r.config), r.binary_sha256[:12]) for r in rows]


def test_rows_shorter_than_a_vector_still_get_a_choice():
    assert len(cuda_space(4096, 1, "bf16")) >= 2 and default_config(4096, 1, "bf16") in cuda_space(4096, 1, "bf16")


@pytest.mark.parametrize("M,N", [(4096, 1001), (32, 3001), (8, 777)])
def test_widths_off_the_16_byte_grid_search_more_threads(M, N):
    space = cuda_space(M, N, "bf16")
    assert default_config(M, N, "bf16") in space and len(space) >= 6
    assert len({c.kwargs["BLOCK_THREADS"] for c in space}) >= 3


@pytest.mark.parametrize("M,N,ds", ANCHOR_SHAPES, ids=str)
def test_cuda_space_is_small_and_holds_the_default(M, N, ds):
    space = cuda_space(M, N, ds)
    assert 2 <= len(space) <= 24
    assert default_config(M, N, ds) in space
    assert len(set(space)) == len(space)
    for cfg in space:
        assert set(cfg.kwargs) == set(KNOBS)
        assert not cfg.hints  # no occupancy hint needed on CUDA: nothing in the space spills


@pytest.mark.parametrize("N", [1024, 4096, 65536])
def test_rocm_space_is_seven_block_threads_by_waves_per_eu(N):
    space = rocm_space(4096, N, "bf16")
    pairs = {(c.kwargs["BLOCK_THREADS"], c.hints.get("waves_per_eu", 0)) for c in space}
    assert len(space) == 7 and len(pairs) == 7
    assert default_config(4096, N, "bf16", "rocm") in space  # the default is one of the seven, timed once


def test_rows_too_long_for_registers_stream_in_chunks_and_short_ones_may():
    for M, N in ((1024, 65536), (16, 131072)):
        cfg = default_config(M, N, "bf16")
        assert cfg.kwargs["CHUNK"] and cfg.kwargs["CHUNK"] < N
        assert all(c.kwargs["CHUNK"] or c.kwargs["SPLIT"] > 1 for c in cuda_space(M, N, "bf16"))
        # HOLD (a whole row in registers) is not offered; a cluster's slice in registers (COOP=3) is
        assert not any(c.kwargs["HOLD"] and c.kwargs["COOP"] != 3
                       for c in cuda_space(M, N, "bf16") + cuda_space(M, N, "fp32"))
    # Rows that fit in registers stay there when there are few of them (latency-bound) ...
    assert default_config(64, MAX_REGISTER_ROW, "bf16").kwargs["CHUNK"] == 0
    assert default_config(200, 8192, "bf16").kwargs["CHUNK"] == 0
    # ... and stream in two passes when many rows keep every SM busy (measured faster on H200).
    assert default_config(4096, MAX_REGISTER_ROW, "bf16").kwargs["CHUNK"] > 0
    assert default_config(4096, 8192, "bf16").kwargs["CHUNK"] > 0


@pytest.mark.parametrize("M,N", [(1, 65536), (4, 131072), (1, 262144), (16, 32768)])
def test_few_long_rows_may_split_across_programs(M, N):
    space = cuda_space(M, N, "bf16")
    splits = [c for c in space if c.kwargs["SPLIT"] > 1]
    assert splits and {c.kwargs["SPLIT"] for c in splits} <= {2, 4, 8, 16, 32, 64, 128}
    assert split_configs(4096, N, "bf16") == []  # enough rows fill the GPU without splitting


@pytest.mark.parametrize("M,N,ds,split", [(1, 32768, "bf16", 16), (1, 65536, "bf16", 32), (8, 65536, "bf16", 16),
                                          (4, 131072, "bf16", 32), (1, 262144, "bf16", 128),
                                          (2, 65536, "fp32", 32), (3, 40000, "bf16", 32), (16, 32768, "bf16", 8),
                                          (32, 32768, "bf16", 0), (16, 65536, "bf16", 0)])
def test_a_few_long_rows_default_to_the_one_launch_split_on_cuda(M, N, ds, split):
    """Without a search, a few long rows split into slices of 2048 elements (up to 4096 where the rows would
    pass one program per SM; none where that is not enough), in one launch (COOP=1), a config the space
    offers; the CPU and ROCm defaults keep one program per row."""
    from flyautotune_rmsnorm.space import COOP_PROGRAMS, MIN_SLICE

    kw = default_config(M, N, ds).kwargs
    if not split:  # 32 x 32768 and 16 x 65536 would need slices of 8192: one program a row
        assert kw["SPLIT"] == 1
        return
    assert (kw["SPLIT"], kw["COOP"], kw["CHUNK"]) == (split, 1, 0)
    assert M * split <= COOP_PROGRAMS and MIN_SLICE <= next_pow2(N) // split <= 4096
    assert kw["BLOCK_THREADS"] * 16 == next_pow2(N) // split  # 16 elements of the slice a thread
    assert default_config(M, N, ds) in cuda_space(M, N, ds)
    make_launcher(N, ds, **kw)  # the factory builds it
    assert default_config(M, N, ds, "cpu").kwargs["SPLIT"] == 1


@pytest.mark.parametrize("M,N,ds,split", [(1, 32768, "bf16", 16), (1, 65536, "bf16", 32), (8, 65536, "bf16", 32),
                                          (4, 131072, "bf16", 32), (1, 262144, "bf16", 64), (2, 65536, "fp32", 32),
                                          (1, 131072, "fp32", 64), (8, 131072, "fp32", 0), (3, 40000, "bf16", 32),
                                          (32, 32768, "bf16", 8), (64, 65536, "bf16", 0), (1, 16384, "bf16", 0)])
def test_a_few_long_rows_default_to_the_two_launch_split_on_rocm(M, N, ds, split):
    """ROCm has no one-launch split: its default for a few rows of 32 K elements and more is the two-launch
    form at 256 threads, slices of 2048 (4096 from 131072 up in 16-bit: two 16-byte vectors a thread at most)
    with at most SPLIT_PROGRAMS programs, a config its space offers; more rows, or shorter ones, keep one
    program per row."""
    from flyautotune_rmsnorm.space import SPLIT_PROGRAMS, rocm_space

    cfg = default_config(M, N, ds, "rocm")
    kw = cfg.kwargs
    if not split:
        assert kw["SPLIT"] == 1
        return
    assert (kw["SPLIT"], kw["COOP"], kw["CHUNK"], kw["BLOCK_THREADS"]) == (split, 0, 0, 256)
    assert M * split <= SPLIT_PROGRAMS and 2048 <= next_pow2(N) // split <= 256 * 2 * 16 // ELEMENT_SIZE[ds]
    assert cfg in rocm_space(M, N, ds)
    make_launcher(N, ds, **kw)  # the factory builds it


@pytest.mark.parametrize("M,N", [(64, 65536), (1024, 65536), (16, 131072), (4096, 32768), (200, 16384)])
def test_rows_that_fill_the_gpu_or_fit_one_program_keep_one_program_per_row_by_default(M, N):
    assert default_config(M, N, "bf16").kwargs["SPLIT"] == 1


@pytest.mark.parametrize("M,N,ds,threads", [(16384, 2999, "bf16", 128), (32, 3001, "bf16", 128),
                                            (1024, 5001, "fp16", 256), (8, 5001, "fp32", 256),
                                            (4096, 3001, "fp32", 128)])
def test_rows_off_the_vector_grid_default_to_a_whole_row_read_as_aligned_vectors(M, N, ds, threads):
    """Rows of 2-8 K elements whose width is not whole 16-byte vectors stay whole by default (32 elements a
    thread), so the launch reads them as aligned vectors (ALIGN), not in two element-wise passes."""
    cfg = default_config(M, N, ds)
    kw = cfg.kwargs
    assert (kw["BLOCK_THREADS"], kw["CHUNK"], kw["SPLIT"]) == (threads, 0, 1)
    assert cfg in cuda_space(M, N, ds)
    assert make_launcher(N, ds, **kw).align(N, N) == 16 // ELEMENT_SIZE[ds]
    # a width whose padded row cannot hold the aligned window keeps the old default
    assert default_config(M, 4095, "bf16") == default_config(M, 4096, "bf16")


def test_adopter_is_registered_through_its_entry_point():
    pm = fat.build_plugin_manager()
    ad = pm.get_adopter("rmsnorm")
    assert ad.distribution.startswith("flyautotune-rmsnorm")
    assert ad.key == ("M", "N", "dtype") and ad.tuner is tuned_launch
    assert ad.entry is rmsnorm_autotuned
    (x, w), kw = ad.example((3, 256), "bf16", "cpu")
    assert x.shape == (3, 256) and x.dtype == torch.bfloat16 and w.shape == (256,)
    assert ad.bytes_moved(x, w) == 2 * 3 * 256 * 2 + 256 * 2
    args, kwargs = ad.bind(x, w, **kw)
    assert args[3:6] == (3, 256, "bf16") and kwargs == {}
    assert set(ad.default(M=3, N=256, dtype="bf16").kwargs) == set(KNOBS)
    cpu = ad.configs(M=1024, N=65536, dtype="bf16", x=torch.empty(0))
    assert default_config(1024, 65536, "bf16", "cpu") in cpu
    assert sorted(c.kwargs["SPLIT"] for c in cpu) == [1, 2, 4]  # chunked rows: split, one row per program
    assert {c.kwargs["ROWS_PER_PROGRAM"] for c in cpu} == {1}
    cpu = ad.configs(M=8, N=4096, dtype="bf16", x=torch.empty(0))
    assert sorted(c.kwargs["ROWS_PER_PROGRAM"] for c in cpu) == [1, 2, 4]
    assert ad.configs(M=8, N=256, dtype="bf16", x=torch.empty(0)) == [default_config(8, 256, "bf16", "cpu")]


needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None and not os.path.exists(
    os.path.join(os.path.dirname(__import__("triton").__file__), "backends/nvidia/bin/ptxas")),
    reason="needs Triton's NVIDIA backend (ptxas) to cross-compile")

# Triton 3.8 (only) widens x's copy across the reduction one element a register, so a 64 K row at 512-1024
# threads spills a few bytes; no space offers these configs (NOTES.md, "Why the held row spills").
spills_on_triton_38 = pytest.mark.xfail(__import__("importlib.metadata").metadata.version("triton").startswith("3.8."),
                                        raises=AssertionError, strict=True,
                                        reason="Triton 3.8 spills this config outside the space (NOTES.md)")


@pytest.mark.parametrize("target", [pytest.param(fat.Target("cuda", "sm_90", 32), marks=needs_ptxas),
                                    fat.Target("rocm", "gfx942", 64)], ids=["sm_90", "gfx942"])
@pytest.mark.parametrize("N,ds", [(4, "bf16"), (3, "fp16"), (2, "fp32"), (1, "fp32")])
def test_rows_shorter_than_a_vector_offer_each_binary_once(target, N, ds):
    """A row within one 16-byte access builds the same binary at either access width, so such rows are
    offered each (threads, rows per program) once: as many binaries as candidates, on both backends."""
    from flyautotune.report import resource_report

    if target.backend == "rocm":
        pytest.importorskip("triton.backends.amd")
        pytest.importorskip("flyautotune_rocm.report")
    space = (cuda_space if target.backend == "cuda" else rocm_space)(65536, N, ds)
    assert len(space) >= 2 and default_config(65536, N, ds, target.backend) in space
    rows = resource_report(fat.plugin_manager().get_adopter("rmsnorm"), (65536, N), ds, target, configs=space)
    assert all(r.error is None for r in rows), [r.error for r in rows if r.error]
    assert len({r.binary_sha256 for r in rows}) == len(space), [(str(r.config), r.binary_sha256[:12]) for r in rows]


def _sm90(M: int, N: int, ds: str, cfg, **overrides) -> tuple:
    """``(compiled kernel, constexprs, extra)``: ``api.compile_spec``'s kernel of ``cfg`` cross-compiled for
    sm_90, every pointer argument 16-byte aligned (the pointers lead the signature). ``overrides`` replace
    constexprs in what is compiled; the constexprs returned are ``compile_spec``'s own."""
    import triton
    from triton.backends.compiler import GPUTarget

    kernel, sig, consts, extra = api.compile_spec((M, N), ds, cfg, target=fat.Target("cuda", "sm_90", 32))
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(sig.values()) if t.startswith("*")}
    k = triton.compile(triton.compiler.ASTSource(kernel, sig, dict(consts, **overrides), attrs),
                       target=GPUTarget("cuda", 90, 32), options=extra["options"])
    return k, consts, extra


@pytest.mark.parametrize("target", [pytest.param(fat.Target("cuda", "sm_90", 32), marks=needs_ptxas),
                                    fat.Target("rocm", "gfx942", 64)], ids=["sm_90", "gfx942"])
def test_build_name_is_the_same_for_one_binary_and_differs_for_another(target):
    """What ``precompile`` returns to a search (the GPU path names its build with the same call): a row of 4
    bf16 elements is one 8-byte access at ``VEC=16`` or ``VEC=8``, the same binary; so is a 32-thread
    program on a 64-lane wavefront and a 64-thread one. More threads (warps) or fewer rows per program are
    another program. The split rows run more than one binary and name none."""
    import triton
    from triton.backends.compiler import GPUTarget

    from flyautotune_rmsnorm.factory import build_name

    if target.backend == "rocm":
        pytest.importorskip("triton.backends.amd")
    base, M = default_config(64, 4, "bf16"), 64

    def name(**kw):
        cfg = fat.Config(**dict(base.kwargs, **kw))
        kernel, sig, consts, extra = api.compile_spec((M, 4), "bf16", cfg, target=target)
        attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(sig.values()) if t.startswith("*")}
        k = triton.compile(triton.compiler.ASTSource(kernel, sig, consts, attrs), options=extra["options"],
                           target=GPUTarget("cuda", 90, 32) if target.backend == "cuda" else
                           GPUTarget("hip", target.arch, 64))
        return build_name(make_launcher(4, "bf16", **cfg.kwargs), k, M)

    assert name(VEC=16) == name(VEC=8) and name(VEC=16).startswith("sha256=")
    assert name(ROWS_PER_PROGRAM=32) != name(ROWS_PER_PROGRAM=64)
    if target.warp_size == 64:
        assert name(BLOCK_THREADS=32) == name(BLOCK_THREADS=64) != name(BLOCK_THREADS=128)
    else:
        assert name(BLOCK_THREADS=32) != name(BLOCK_THREADS=64)
    split = split_configs(1, 65536, "bf16")[0]
    assert build_name(make_launcher(65536, "bf16", **split.kwargs), object(), 1) is None


def _stack_and_local(k, name: str) -> tuple:
    """``((stack bytes, local bytes), report)`` of a cross-compiled kernel, from cuobjdump's resource usage."""
    import re
    import subprocess

    import triton

    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"{name}_{os.getpid()}.cubin")
    with open(path, "wb") as f:
        f.write(k.asm["cubin"])
    report = subprocess.run([cuobjdump, "-res-usage", path], capture_output=True, text=True).stdout
    os.unlink(path)
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", report)
    assert m, report
    return (int(m.group(2)), int(m.group(3))), report


@needs_ptxas
@pytest.mark.parametrize("M,N,split", [(1024, 65536, 1), (1024, 32768, 1), (1024, 8192, 1), (1, 65536, 16),
                                       (1, 262144, 32)])
def test_compile_spec_cross_compiles_for_sm90_without_spills(M, N, split):
    """The CPU counterpart of the GPU no-spill test: ptxas's resource report of the default, or of a
    split config of the space (its normalize kernel)."""
    import re

    cfg = default_config(M, N, "bf16")
    if split > 1:
        cfg = next(c for c in cuda_space(M, N, "bf16") if c.kwargs["SPLIT"] == split)
    k, _, extra = _sm90(M, N, "bf16", cfg)
    assert extra["options"] == {"num_warps": cfg.kwargs["BLOCK_THREADS"] // 32}
    stack_and_local, report = _stack_and_local(k, f"rmsnorm_{N}")
    assert stack_and_local == (0, 0), f"{cfg} spills: {report}"
    assert "ld.global.v4" in k.asm["ptx"] or "ld.global.L1::evict_first.v4" in k.asm["ptx"] or re.search(
        r"ld\.global[\w:.]*\.v4", k.asm["ptx"]), "rows are not read with 16-byte loads"


@needs_ptxas
@pytest.mark.parametrize("M,N,ds", [(16384, 8192, "bf16"), (32768, 4096, "fp32")])
def test_the_one_chunk_reread_cross_compiles_to_two_passes_without_spills(M, N, ds):
    """The space's whole row as one chunk read twice (torch.compile's kernel for these rows, many of them): sm_90, no
    stack or local memory, and x read twice as two 16-byte vectors a thread, kept in L2 by the first pass
    (``evict_last``) and streamed by the second (``evict_first``), next to the weight's two."""
    import re

    cfg = next(c for c in cuda_space(M, N, ds) if c.kwargs["CHUNK"] >= N and c.kwargs["CACHE_POLICY"] == 1)
    assert cfg.kwargs["BLOCK_THREADS"] == 512
    # a few rows (latency-bound: the search picked it at 32 x 4096 and the bench read it 10 % slower) never
    assert not any(c.kwargs["CHUNK"] >= N for c in cuda_space(32, N, ds))
    k, consts, _ = _sm90(M, N, ds, cfg)
    assert consts["REREAD"] == 1 and consts["NUM_CHUNKS"] == 1
    stack_and_local, report = _stack_and_local(k, f"rmsnorm_reread_{N}")
    assert stack_and_local == (0, 0), f"{cfg} spills: {report}"
    ptx = k.asm["ptx"]
    assert len(re.findall(r"ld\.global\.L1::evict_first[\w:.]*\.v4", ptx)) == 2  # x, second pass
    assert len(re.findall(r"ld\.global\.L1::evict_last[\w:.]*\.v4", ptx)) == 4  # x, first pass; the weight


@needs_ptxas
@pytest.mark.parametrize("N,ds", [(128, "bf16"), (64, "fp16"), (256, "bf16"), (512, "bf16"), (128, "fp32")])
def test_many_short_rows_also_try_eight_vectors_a_thread_without_spilling(N, ds):
    """Many short rows (65536 x 128 bf16: 128t x 64r led the two-vector tiles by 1.9 % on the H200) try
    tiles of eight 16-byte vectors a thread, in both cache policies; a few rows, whose grid would leave
    SMs idle, do not. Each such tile cross-compiles for sm_90 with no stack and no local memory."""
    from flyautotune_rmsnorm.space import deep_short_tiles

    many, few = cuda_space(65536, N, ds), cuda_space(64, N, ds)
    elem = {"bf16": 2, "fp16": 2, "fp32": 4}[ds]

    def per_thread(c):
        return c.kwargs["ROWS_PER_PROGRAM"] * N // c.kwargs["BLOCK_THREADS"]

    deep = [c for c in many if c.kwargs["VEC"] == 16 and per_thread(c) * elem == 128]
    assert deep and {c.kwargs["CACHE_POLICY"] for c in deep} == {0, 1}
    assert not [c for c in few if per_thread(c) * elem == 128]
    assert len(many) <= 30
    for cfg in deep_short_tiles(65536, N, ds):
        k, _, _ = _sm90(65536, N, ds, cfg)
        stack_and_local, report = _stack_and_local(k, f"rmsnorm_deep_{N}")
        assert stack_and_local == (0, 0), f"{cfg} spills: {report}"


@pytest.mark.parametrize("M,sx,sy,expected", [
    (2**31 // 128 - 9, 128, 128, (0, 1)),  # the grid's last rows end just under 2**31 elements
    (2**31 // 128 - 8, 128, 128, (1, 1)),  # ... and at it
    (2**31 // 136 - 9, 136, 128, (0, 0)),  # strided x: runtime strides
    (300, 128, 2**23, (1, 0)),  # the output's stride alone passes it
    (300, 136, 128, (0, 0)),
    (264, 128, 128, (0, 1)),  # the first launch of FEW_ROWS rows streams
    (263, 128, 128, (1, 0)),  # fewer rows are latency-bound: the original addressing
    (1, 2**30, 2**30, (1, 0)),
    (0, 2**40, 2**40, (1, 0)),
])
def test_row_addressing_fits_the_launch(M, sx, sy, expected):
    """``(WIDE, PACKED)``: 64-bit row offsets exactly when a row of the launch's grid (8 rows a program
    here, masked or not) may start 2**31 elements or more from the tensor's start; the constant stride
    exactly when both strides are N. Launches of fewer than FEW_ROWS rows, and held rows, keep 64-bit
    offsets and runtime strides (measured faster there)."""
    from flyautotune_rmsnorm import make_launcher
    from flyautotune_rmsnorm.factory import FEW_ROWS

    assert FEW_ROWS == 264
    assert make_launcher(128, "bf16", 64, 8).addressing(M, sx, sy) == expected
    assert make_launcher(16384, "bf16", 1024, CACHE_POLICY=1, HOLD=1).addressing(M, sx, sy) == (1, 0)


@needs_ptxas
def test_32_bit_row_offsets_cross_compile_without_64_bit_multiplies():
    """The row address of a launch whose offsets fit 32 bits is one 32-bit multiply-add widened into the
    pointer; a launch that may pass 2**31 elements multiplies in 64 bits (rows with runtime strides: with
    packed rows the constant stride is a shift either way)."""
    import re

    for M, wide in ((65536, 0), (1 << 24, 1)):
        k, consts, _ = _sm90(M, 128, "bf16", default_config(M, 128, "bf16"), PACKED=0)
        assert consts["WIDE"] == wide
        mul64 = re.findall(r"\b(?:mul|mad)\.lo\.s64\b", k.asm["ptx"])
        assert bool(mul64) == bool(wide), (M, mul64)


@needs_ptxas
@pytest.mark.parametrize("M,N", [(65536, 128), (2048, 1000), (1024, 8192)])
def test_a_packed_launch_never_reads_the_runtime_strides(M, N):
    """A launch of packed rows (``compile_spec`` describes one) addresses its rows from the constant N:
    its PTX never loads the stride parameters, while the same config for strided rows does."""
    import re

    from flyautotune_rmsnorm.kernel import jit_kernel

    cfg = default_config(M, N, "bf16")
    k, consts, _ = _sm90(M, N, "bf16", cfg)
    assert consts["PACKED"] == 1
    loads = set(re.findall(r"ld\.param\.\w+\s+%\w+, \[(\w+_param_\d+)\]", k.asm["ptx"]))
    strided, _, _ = _sm90(M, N, "bf16", cfg, PACKED=0)
    strided_loads = set(re.findall(r"ld\.param\.\w+\s+%\w+, \[(\w+_param_\d+)\]", strided.asm["ptx"]))
    names = jit_kernel().arg_names
    stride_params = {p for p in strided_loads if int(p.rsplit("_", 1)[1]) in (names.index("sx_vec"),
                                                                               names.index("sy_vec"))}
    assert len(stride_params) == 2, strided_loads
    assert not stride_params & loads, f"the packed launch reads {stride_params & loads}"


@pytest.mark.parametrize("M,N,ds", [(4096, 1000, "bf16"), (65536, 1024, "bf16"), (64, 2048, "fp32"),
                                    (4096, 520, "fp16")])
def test_rows_of_513_to_2048_also_try_the_asynchronous_copy_body(M, N, ds):
    """One candidate of the CUDA space runs the Gluon body (x staged by cp.async, one warp a row): 4 rows
    on 4 warps, built by the factory; none for rows it does not take (odd widths, 512 or fewer, over 2048)."""
    from flyautotune_rmsnorm import kernel_async
    from flyautotune_rmsnorm.async_rows import AsyncRowsLauncher

    assert kernel_async.available()  # Triton 3.6-3.9 have the Gluon pieces the body uses
    got = [c for c in cuda_space(M, N, ds) if c.kwargs.get("ASYNC")]
    assert [(c.kwargs["BLOCK_THREADS"], c.kwargs["ROWS_PER_PROGRAM"]) for c in got] == [(128, 4)]
    assert isinstance(make_launcher(N, ds, **got[0].kwargs), AsyncRowsLauncher)
    for M2, N2, ds2 in ((4096, 1004, "bf16"), (65536, 256, "bf16"), (4096, 4096, "bf16"), (4096, 1002, "fp32")):
        assert not [c for c in cuda_space(M2, N2, ds2) if c.kwargs.get("ASYNC")], (M2, N2, ds2)


@pytest.mark.parametrize("M,N,ds,threads", [(1, 4096, "bf16", [256, 512]), (32, 3000, "bf16", [256, 512]),
                                            (256, 8192, "fp32", [512, 1024]), (8, 16384, "fp16", [1024]),
                                            (263, 2056, "bf16", [256, 512])])
def test_a_few_long_rows_also_try_the_gluon_row_body(M, N, ds, threads):
    """A few rows of 2049-16384 elements of whole 16-byte vectors get the Gluon row body (ASYNC=2: one row
    a program, one barrier) at 16 and 8 elements a thread, streaming x (CACHE_POLICY=1), built by the
    factory; many rows, odd widths and rows outside that range get none."""
    from flyautotune_rmsnorm.async_rows import AsyncRowsLauncher

    got = [c for c in cuda_space(M, N, ds) if c.kwargs["ASYNC"] == 2]
    assert [c.kwargs["BLOCK_THREADS"] for c in got] == threads
    assert {(c.kwargs["ROWS_PER_PROGRAM"], c.kwargs["CACHE_POLICY"], c.kwargs["CHUNK"]) for c in got} == {(1, 1, 0)}
    for c in got:
        L = make_launcher(N, ds, **c.kwargs)
        assert isinstance(L, AsyncRowsLauncher) and L.ASYNC == 2
    for M2, N2, ds2 in ((264, 4096, "bf16"), (4096, 8192, "bf16"), (1, 4100, "bf16"), (1, 2048, "bf16"),
                        (1, 32768, "bf16"), (1, 4098, "fp32")):
        assert not [c for c in cuda_space(M2, N2, ds2) if c.kwargs["ASYNC"] == 2], (M2, N2, ds2)


def test_every_body_leaves_the_row_count_and_strides_unspecialized():
    """A launcher keeps one binary per constexpr tuple and runs it for every row count and stride: Triton
    must not specialize those arguments (on 1, or on divisibility by 16), or the binary built for one row
    would run a later launch of many with M fixed at 1 (and claunch's runtime-only launch would refuse it).
    Checked through Triton's own argument binder (what a GPU launch runs) for M = 1, SX = 1, SY = 32: each
    stays a runtime i32 with no attribute."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    from flyautotune_rmsnorm import kernel, kernel_async

    backend = make_backend(GPUTarget("cuda", 90, 32))
    x = torch.empty(64, 4096, dtype=torch.bfloat16)
    for fn in (kernel.jit_kernel(), kernel_async.rmsnorm_async, kernel_async.rmsnorm_row):
        names = [p.name for p in fn.params][3:6]  # M and the two row strides
        assert {p.name for p in fn.params if p.do_not_specialize} >= set(names), fn
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        consts = [1] * sum(p.is_constexpr for p in fn.params)
        _, spec, _ = binder(x, x, x, 1, 1, 32, 1e-6, *consts)
        assert list(spec[3:6]) == [("i32", None)] * 3, (fn, dict(zip(names, spec[3:6])))


@needs_ptxas
@pytest.mark.parametrize("N,threads", [(3000, 256), (4096, 256), (4096, 512), (8192, 512), (16384, 1024)])
@pytest.mark.parametrize("ds", ["bf16", "fp16", "fp32"])
def test_the_gluon_row_body_meets_its_sum_behind_one_barrier(N, threads, ds, sass_of):
    """sm_90: each warp sums its part with five shuffles, writes it to shared memory once, and after the one
    barrier every thread reads all the warps' sums with 16-byte shared loads (Triton's tl.sum over the same
    row: two barriers and a second round of shuffles). x and the weight arrive by 16-byte loads, all issued
    before the barrier (ptxas places the weight's with x's, or, where registers are scarce, among the first
    shuffles); 16-byte stores; no spills."""
    import re

    from triton.backends.compiler import GPUTarget

    from flyautotune_rmsnorm import kernel_async

    k = kernel_async.compile_row_for(GPUTarget("cuda", 90, 32), ds, N, threads, ("evict_first", "evict_last", ""))
    ptx = k.asm["ptx"]
    elem = {"bf16": 2, "fp16": 2, "fp32": 4}[ds]
    per_lane = next_pow2(N) * elem // threads // 16  # 16-byte vectors of x a thread holds
    assert len(re.findall(r"ld\.global[.\w:]*\.v4\.b32", ptx)) == 2 * per_lane  # x and the weight
    assert len(re.findall(r"st\.global[.\w:]*\.v4\.b32", ptx)) == per_lane
    assert ptx.count("bar.sync") == 1 and ptx.count("shfl.sync.bfly") == 5
    assert k.metadata.shared == 4 * threads // 32  # one fp32 sum a warp
    assert _stack_and_local(k, f"row_{ds}_{N}_{threads}")[0] == (0, 0)
    ins = sass_of(k)
    bars = [i for i, op in enumerate(ins) if re.search(r"\bBAR\.SYNC", op)]
    loads = [i for i, op in enumerate(ins) if re.search(r"\bLDG\b|\bLDG\.", op)]
    assert len(bars) == 1 and len(loads) == 2 * per_lane and max(loads) < bars[0], "the weight waits for the sum"
    # CACHE_POLICY=1's policies reach the loads: x streamed (evict-first), the weight kept (evict-last)
    assert sum(".EF." in ins[i] for i in loads) == per_lane and sum(".EL." in ins[i] for i in loads) == per_lane
    assert sum(bool(re.match(r"(@!?\w+\s+)?STS\b", op)) for op in ins) == 1


@pytest.mark.parametrize("clusters,copies", [(True, True), (True, False), (False, True), (False, False)])
def test_a_gpu_that_cannot_run_a_body_is_not_offered_its_configs(monkeypatch, clusters, copies):
    """The space a search times drops the cluster configs (COOP=3) on a GPU without clusters and the
    asynchronous-copy ones (ASYNC=1) on one without cp.async or Gluon: they would only time their fallback."""
    import types

    from flyautotune_rmsnorm import async_rows, cluster
    from flyautotune_rmsnorm.space import _here

    monkeypatch.setattr(cluster, "cluster_capable", lambda dev: clusters)
    monkeypatch.setattr(async_rows, "async_capable", lambda dev: copies)
    gpu = types.SimpleNamespace(is_cuda=True, get_device=lambda: 0)
    space = cuda_space(4096, 1000, "bf16") + [_cfg(256, 1, 0, 2, split=8, coop=3)]
    kept = _here(space, gpu)
    assert any(c.kwargs["COOP"] == 3 for c in kept) == clusters
    assert any(c.kwargs["ASYNC"] for c in kept) == copies
    assert [c for c in space if c.kwargs["COOP"] != 3 and not c.kwargs["ASYNC"]] == \
        [c for c in kept if c.kwargs["COOP"] != 3 and not c.kwargs["ASYNC"]]
    assert _here(space, None) == space

@needs_ptxas
@pytest.mark.parametrize("N", [520, 1000, 2048])
@pytest.mark.parametrize("ds", ["bf16", "fp16", "fp32"])
def test_the_asynchronous_copy_body_cross_compiles_to_copies_and_warp_sums(N, ds, sass_of):
    """sm_90: x arrives by 16-byte cp.async copies through L1 (``.ca``: SASS ``LDGSTS`` without ``BYPASS``)
    read back from shared memory, the weight by 16-byte loads, each row's sum is one warp's five shuffles
    (no shared-memory reduction: the one barrier is the one after the copies' wait, and shared memory holds
    just the x tile), stores are 16 bytes; no spills."""
    import re

    from triton.backends.compiler import GPUTarget

    from flyautotune_rmsnorm import kernel_async

    k = kernel_async.compile_for(GPUTarget("cuda", 90, 32), ds, N, 4)
    ptx = k.asm["ptx"]
    elem = {"bf16": 2, "fp16": 2, "fp32": 4}[ds]
    per_lane = next_pow2(N) * elem // 16 // 32  # 16-byte vectors of a row a lane holds
    assert len(re.findall(r"cp\.async\.ca\.shared\.global \[[^]]+\], \[[^]]+\], (?:16|0x10)\b", ptx)) == per_lane
    assert "cp.async.cg" not in ptx
    assert ptx.count("ld.global.v4.b32") == per_lane and ptx.count("st.global.v4.b32") == per_lane
    assert ptx.count("ld.shared.v4.b32") == per_lane and "st.shared" not in ptx
    assert ptx.count("bar.sync") == 1 and ptx.count("shfl.sync.bfly") == 5
    assert k.metadata.shared == 4 * next_pow2(N) * elem
    assert _stack_and_local(k, f"async_{ds}_{N}")[0] == (0, 0)
    ins = sass_of(k)
    copies = [op for op in ins if "LDGSTS" in op]
    assert len(copies) == per_lane and not [op for op in copies if "BYPASS" in op], copies
    assert not [op for op in ins if re.match(r"(@!?\w+\s+)?STS\b", op)], "a shared-memory reduction"


@needs_ptxas
def test_a_cpu_call_first_in_a_process_leaves_the_gluon_bodies_compiling(gpu_child, monkeypatch, tmp_path):
    """Triton imports Gluon on first use, from inside a launch, and an interpreted launch runs with
    triton.language's functions swapped for the interpreter's: a Gluon imported there keeps those, and
    the Gluon bodies' cross-compile after it fails ("Did you forget to add @triton.gluon.jit ?"). The
    launcher imports Gluon before its first interpreted launch. A fresh process (Gluon is imported once a
    process) whose first launch is a CPU call, and a fresh Triton cache (a cached binary compiles nothing)."""
    from flyautotune_rmsnorm import kernel_async

    if not kernel_async.available():
        pytest.skip("this Triton has no Gluon: no Gluon body to compile")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    out = gpu_child(
        "import sys, torch\n"
        "from triton.backends.compiler import GPUTarget\n"
        "from flyautotune_rmsnorm import rmsnorm\n"
        "print('triton.experimental.gluon' in sys.modules)\n"
        "rmsnorm(torch.randn(4, 3000), torch.ones(3000))\n"
        "from flyautotune_rmsnorm import kernel_async\n"
        "k = kernel_async.compile_row_for(GPUTarget('cuda', 90, 32), 'bf16', 3000, 256)\n"
        "print(k.asm['ptx'].count('bar.sync'))\n", 300, "a CPU call and one cross-compile")
    assert out == ["False", "1"]

def _pdl_env(monkeypatch, value):
    """Set (or, with None, unset) FLYAUTOTUNE_RMSNORM_PDL and forget the process's reading of it (it is
    read once per process)."""
    from flyautotune_rmsnorm import factory

    if value is None:
        monkeypatch.delenv("FLYAUTOTUNE_RMSNORM_PDL", raising=False)
    else:
        monkeypatch.setenv("FLYAUTOTUNE_RMSNORM_PDL", value)
    monkeypatch.setattr(factory, "_pdl_env", None)


@needs_ptxas
@pytest.mark.parametrize("M,N", [(1, 4096), (2048, 1000), (1024, 65536)])
def test_the_one_launch_body_waits_for_the_kernel_ahead_before_touching_memory_on_hopper(M, N, monkeypatch):
    """With programmatic dependent launch (asked for) the body may start while the kernel ahead still
    runs: the compiled sm_90 binary asks for the launch attribute, and its PTX waits
    (``griddepcontrol.wait``) before its first global load or store, then lets the kernel behind launch.
    By default, or switched off, neither is there."""
    import re

    _pdl_env(monkeypatch, "1")
    cfg = default_config(M, N, "bf16")
    k, consts, extra = _sm90(M, N, "bf16", cfg)
    ptx = k.asm["ptx"]
    assert consts["PDL"] == 1 and extra["options"]["launch_pdl"] is True and k.metadata.launch_pdl
    wait = ptx.index("griddepcontrol.wait")
    first_access = re.search(r"(ld|st)\.global", ptx).start()
    assert wait < first_access, "the body touches global memory before the kernel ahead is done"
    assert "griddepcontrol.launch_dependents" in ptx
    for env in ("0", None):
        _pdl_env(monkeypatch, env)
        k, consts, extra = _sm90(M, N, "bf16", cfg)
        assert consts["PDL"] == 0 and "launch_pdl" not in extra["options"] and "griddepcontrol" not in k.asm["ptx"]


@pytest.mark.parametrize("arch,env,expected", [("sm_90", "1", 1), ("sm_90a", "on", 1), ("sm_100", "yes", 1),
                                               ("sm_80", "1", 0), ("sm_89", "1", 0), ("sm_90", "0", 0),
                                               ("sm_90", "off", 0), ("sm_90", None, 0)])
def test_pdl_is_asked_for_and_needs_hopper(arch, env, expected, monkeypatch):
    from flyautotune_rmsnorm.factory import pdl_for_arch

    _pdl_env(monkeypatch, env)
    assert pdl_for_arch(arch) == expected


def test_winners_are_keyed_by_whether_the_body_runs_with_pdl(monkeypatch):
    """A winner timed with programmatic dependent launch is not reused without it (by default, switched
    off, or on an arch without it): the key has ``rmsnorm.pdl`` only while PDL is on, so by default no
    tuner's key changes; other backends add nothing."""
    from flyautotune_rmsnorm import hooks

    def pdl_axis(arch):
        return (hooks.flyautotune_cache_key(fat.Target("cuda", arch, 32)) or {}).get("rmsnorm.pdl")

    _pdl_env(monkeypatch, None)
    assert pdl_axis("sm_90") is None
    _pdl_env(monkeypatch, "1")
    assert pdl_axis("sm_90") == 1 and pdl_axis("sm_80") is None
    monkeypatch.setenv("FLYAUTOTUNE_RMSNORM_PDL", "0")  # read once per process: the key keeps agreeing
    assert pdl_axis("sm_90") == 1  # with the launches
    _pdl_env(monkeypatch, "0")
    assert pdl_axis("sm_90") is None
    assert hooks.flyautotune_cache_key(fat.Target("rocm", "gfx942", 64)) is None


def _assert_one_thread_polls_for_the_cta(wait: str) -> None:
    """The body of a wait loop polls the count with acquire semantics from one thread and shares what it
    read with the CTA through shared memory (so every warp leaves the wait together)."""
    import re

    assert re.search(r"@%p\d+ (ld\.global\.gpu\.acquire|atom\.global\.gpu\.acquire)", wait), \
        "the wait does not poll the count with acquire semantics from one thread"
    assert "st.shared" in wait and "ld.shared" in wait, "the count is not shared by the CTA"


@needs_ptxas
@pytest.mark.parametrize("M,N,forced", [(1, 65536, None), (4, 131072, None), (1, 262144, None), (3, 40001, None),
                                        (1, 65536, (256, 64)), (1, 65536, (1024, 8))])
def test_cooperative_split_cross_compiles_to_one_sense_reversing_wait_per_row(M, N, forced):
    """The CPU counterpart of the GPU barrier test: the one-launch kernel of each cooperative config, or of
    ``forced`` (threads, SPLIT) outside the space (64 sums at 256 threads add up through shared memory after
    the wait), writes its partial sum from one thread and releases its arrival after a CTA barrier; program 0
    of the row adds ``2**31 - (SPLIT - 1)`` and the others 1, so the count's top bit flips when the last one
    arrives; the wait polls with plain acquire loads (no read-modify-write, no CTA barrier inside the loop)
    until that bit differs from the one the program arrived on, and a CTA barrier follows it; nothing counts
    departures or resets the count; and the kernel does not spill."""
    import re

    if forced:
        coop = [_cfg(forced[0], 1, 0, 2, split=forced[1], coop=1)]
    else:
        coop = [c for c in cuda_space(M, N, "bf16") if c.kwargs["COOP"] == 1]
        assert coop and all(M * c.kwargs["SPLIT"] <= 132 for c in coop)
    for cfg in coop:
        k, consts, _ = _sm90(M, N, "bf16", cfg)
        ptx, split = k.asm["ptx"], consts["SPLIT"]
        assert re.search(r"@%p\d+ st\.global\.b32 [^\n]*\n[^@]*bar\.sync\s+0;[^@]*"
                         r"@%p\d+ atom\.global\.gpu\.release\.add", ptx), \
            "the sum is not written by one thread and released after a CTA barrier"
        assert re.search(rf"selp\.b32\s+%r\d+, {2**31 - (split - 1)}, 1, %p\d+;", ptx), \
            "program 0 does not add 2**31 - (SPLIT - 1) and the others 1"
        wait = re.search(r"(\$L__BB\d+_\d+):[^\n]*Loop Header(.*?)bra(\.uni)?\s+\1;", ptx, re.S)
        assert wait, "no wait loop"
        body = wait.group(2)
        assert "ld.global.acquire.gpu.b32" in body, "the wait does not poll with acquire loads"
        assert "atom." not in body and "bar.sync" not in body, "the wait has a read-modify-write or a CTA barrier"
        assert re.search(r"xor\.b32[^\n]*\n\s*(//[^\n]*\n\s*|\.loc[^\n]*\n\s*)*setp\.gt\.s32\s+%p\d+, %r\d+, -1;", body), \
            "the wait does not compare the count's top bit with the one it arrived on"
        after = ptx[wait.end():]
        assert re.match(r"(\s*(//|\.loc)[^\n]*\n)*\s*bar\.sync\s+0;", after), "no CTA barrier after the wait"
        if forced == (256, 64):
            assert "st.shared" in after and after.count("bar.sync") >= 2, "the 64 sums are not added through shared memory"
        assert "acq_rel" not in ptx and "exch" not in ptx, "departures are counted or the count is reset"
        stack_and_local, report = _stack_and_local(k, f"rmsnorm_coop_{N}")
        assert stack_and_local == (0, 0), f"{cfg} spills: {report}"


@needs_ptxas
@pytest.mark.parametrize("M,N,threads", [pytest.param(1024, 65536, 1024, marks=spills_on_triton_38),
                                         (2048, 32768, 1024), (2048, 32768, 512),
                                         (8192, 16384, 512)])
def test_held_rows_cross_compile_to_one_read_of_x_without_spills(M, N, threads):
    """The CPU counterpart of the GPU test of HOLD: a held row reads each 16-byte vector once (x's
    loads + the weight's = 2 x the stores) in at most 64 registers at 1024 threads, and nothing
    spills (without HOLD, the 64 K row spills at 1024 threads)."""
    import re

    for cfg in [_cfg(threads, 1, 0, policy, hold=1) for policy in (1, 2)]:
        k, _, _ = _sm90(M, N, "bf16", cfg)
        ptx = k.asm["ptx"]
        stores = len(re.findall(r"st\.global[\w:.]*\.v4", ptx))
        assert stores == N // 8 // cfg.kwargs["BLOCK_THREADS"], f"{cfg}: {stores} stores"
        assert len(re.findall(r"ld\.global[\w:.]*\.v4", ptx)) == 2 * stores, f"{cfg}: the row is read twice"
        stack_and_local, report = _stack_and_local(k, f"rmsnorm_held_{N}")
        assert stack_and_local == (0, 0), f"{cfg} spills: {report}"
        assert int(re.search(r"REG:(\d+)", report).group(1)) <= 65536 // cfg.kwargs["BLOCK_THREADS"]


# -- the tuned entry's selection, with a fake GPU backend on CPU tensors --------------------------------

class FakeGpu:
    """Claims CPU tensors as an sm_90 target and times a config by a fixed cost table."""

    def __init__(self, fastest):
        self.fastest = fastest
        self.timed = []

    @fat.hookimpl(tryfirst=True)
    def flyautotune_target(self, device):
        return fat.Target("cuda", "sm_90", 32)

    @fat.hookimpl(tryfirst=True)
    def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep):
        if setup is not None:
            setup()
        fn()
        self.timed.append(1)
        return 1.0


@pytest.mark.parametrize("N,ds,winner", [(4096, "fp32", lambda space: space[-2]),
                                         (1000, "bf16", lambda space: next(c for c in space if c.kwargs.get("ASYNC")))],
                         ids=["4096-fp32", "1000-bf16-async-wins"])
def test_forced_search_benchmarks_the_cuda_space_and_stores_the_winner(fresh_pm, monkeypatch, N, ds, winner):
    """A forced search over the CUDA space (a fake GPU's benchmark; the configs run under the interpreter)
    times every candidate, the asynchronous-copy one included where offered, and stores the fastest."""
    picked = []
    knobs_of = lambda kw: tuple(kw[k] for k in KNOBS)  # noqa: E731

    class Bench(FakeGpu):
        @fat.hookimpl(tryfirst=True)
        def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep):
            seen = {}
            orig = api.make_launcher

            def spy(N, dtype_str, *knobs):
                seen["cfg"] = knobs
                return orig(N, dtype_str, *knobs)

            monkeypatch.setattr(api, "make_launcher", spy)
            if setup is not None:
                setup()
            fn()
            monkeypatch.setattr(api, "make_launcher", orig)
            picked.append(seen["cfg"])
            return 0.5 if seen["cfg"] == self.fastest else 1.0

    space = cuda_space(4, N, ds)
    best = winner(space)
    plug = Bench(knobs_of(best.kwargs))
    fresh_pm(plug)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[ds]
    x, w = torch.randn(4, N).to(dt), (torch.rand(N) + 0.5).to(dt)
    monkeypatch.setenv("FLYAUTOTUNE", "1")
    y = rmsnorm_autotuned(x, w)
    assert tuned_launch.last_source == "search"
    # every candidate was timed; then the default and the best two were re-timed in 3 interleaved rounds
    assert set(picked) == {knobs_of(c.kwargs) for c in space}
    assert len(picked) == len(space) + 3 * 3
    timed = len(picked)
    assert N == 1000 or any(c[5] > 1 for c in picked)  # the split rows ran too (through the interpreter)
    assert tuned_launch.last_config == best
    assert torch.allclose(y.float(), api.rmsnorm(x, w).float())
    monkeypatch.delenv("FLYAUTOTUNE")
    api.clear_caches()  # also forgets the tuner's in-memory plans: the winner comes back from the store
    rmsnorm_autotuned(x, w)
    assert tuned_launch.last_source == "store" and tuned_launch.last_config == best
    assert len(picked) == timed


def test_without_a_stored_winner_the_default_runs_unbenchmarked(fresh_pm):
    plug = FakeGpu(None)
    fresh_pm(plug)
    x, w = torch.randn(3, 2048), torch.rand(2048) + 0.5
    rmsnorm_autotuned(x, w)
    assert tuned_launch.last_source == "default"
    assert tuned_launch.last_config == default_config(3, 2048, "fp32")
    assert plug.timed == []


@pytest.mark.parametrize("bad", [{"BLOCK_THREADS": 7}, {"stream": 3735928559}, {"BLOCK_THREADS": "banana"}])
def test_a_stored_winner_outside_the_space_runs_the_default_once_warned(bad, caplog):
    x, w = torch.randn(4, 64), torch.rand(64) + 0.5
    targs, tkw = api.tuner_args(x, w)
    sel = tuned_launch.select(*targs, **tkw)
    assert sel.source == "default"
    stored = {"kwargs": {**sel.config.kwargs, **bad}, "compile_hints": {}}
    tuned_launch.store().put("rmsnorm", sel.key, sel.key, stored, [], {})
    tuned_launch.clear()
    with caplog.at_level("WARNING"):
        y = rmsnorm_autotuned(x, w)
        rmsnorm_autotuned(x, w)
    assert torch.allclose(y, api.rmsnorm(x, w)) and tuned_launch.last_config == sel.config
    assert caplog.text.count("ignoring the stored winner") == 1
    assert tuned_launch.store().get("rmsnorm", sel.key) is None


def test_a_winner_stored_before_the_async_knob_is_still_used(fresh_pm, caplog):
    """Winners stored before ASYNC existed carry no such key: they ran the Triton body, and still do."""
    x, w = torch.randn(4, 1000), torch.rand(1000) + 0.5
    targs, tkw = api.tuner_args(x, w)
    sel = tuned_launch.select(*targs, **tkw)
    from flyautotune_rmsnorm.space import cpu_space

    other = next(c for c in cpu_space(4, 1000, "fp32") if c != sel.config)
    old = {k: v for k, v in other.kwargs.items() if k != "ASYNC"}
    assert old != sel.config.kwargs
    tuned_launch.store().put("rmsnorm", sel.key, sel.key, {"kwargs": old, "compile_hints": {}}, [], {})
    tuned_launch.clear()
    with caplog.at_level("WARNING"):
        y = rmsnorm_autotuned(x, w)
    assert "ignoring" not in caplog.text
    assert tuned_launch.last_source == "store" and tuned_launch.last_config.kwargs == old
    assert torch.allclose(y, api.rmsnorm(x, w))


@needs_ptxas
@pytest.mark.parametrize("M,N,ds", [pytest.param(1024, 65536, "bf16", marks=spills_on_triton_38),
                                    (2048, 32768, "bf16"), (1024, 65536, "fp16"), (300, 40000, "fp16")])
def test_persistent_split_cross_compiles_to_one_uniform_wait_per_trip(M, N, ds):
    """The CPU counterpart of the GPU test of COOP=2 (outside the space: measured slower): the persistent
    kernel of each config the bench measures writes its partial sum from one thread, releases its arrival after a CTA barrier, waits in a
    loop inside the row loop where one thread polls the count with acquire loads and the CTA reads the
    result through shared memory (so every warp leaves the wait together), counts departures once, and
    does not spill."""
    import re

    from flyautotune_rmsnorm.space import persist_configs

    persist = persist_configs(M, N, ds)
    assert len(persist) == 3 and not any(c.kwargs["COOP"] == 2 for c in cuda_space(M, N, ds))
    for cfg in persist:
        k, _, _ = _sm90(M, N, ds, cfg)
        ptx = k.asm["ptx"]
        assert re.search(r"bar\.sync\s+0;\s*(mov[^\n]*\n\s*)*//[^\n]*\n\s*@%p\d+ (red|atom)\.global\.gpu\.release\.add",
                         ptx) or re.search(r"bar\.sync[^@]*@%p\d+ (red|atom)\.global\.gpu\.release\.add", ptx), \
            "the arrival is not released by one thread after a CTA barrier"
        wait = re.search(r"(\$L__BB\d+_\d+):[^\n]*(\n\s*//[^\n]*)?Inner Loop Header(.*?)bra(\.uni)?\s+\1;", ptx, re.S)
        assert wait, "no wait loop inside the row loop"
        _assert_one_thread_polls_for_the_cta(wait.group(3))
        assert len(re.findall(r"atom\.global\.gpu\.acq_rel\.add\.u32", ptx)) == 1, "departures are not counted once"
        stack_and_local, report = _stack_and_local(k, f"rmsnorm_persist_{N}")
        assert stack_and_local == (0, 0), f"{cfg} spills: {report}"


def test_cooperative_config_cross_compiles_for_gfx942_as_its_two_launch_form():
    """On ROCm COOP=1's rows take the two-launch form (its wait's acquire load is PTX): ``compile_spec`` for a
    gfx942 target gives the normalize kernel, which compiles to AMDGCN; for sm_90 it gives the one-launch
    kernel."""
    pytest.importorskip("triton.backends.amd")
    import triton
    from triton.backends.compiler import GPUTarget

    cfg = _cfg(128, 1, 0, 2, split=128, coop=1)
    kernel, sig, consts, extra = api.compile_spec((1, 262144), "bf16", cfg, target=fat.Target("rocm", "gfx942", 64))
    assert kernel.fn.__name__ == "_split_normalize"
    k = triton.compile(triton.compiler.ASTSource(kernel, sig, consts), target=GPUTarget("hip", "gfx942", 64),
                       options=extra["options"])
    isa = k.asm["amdgcn"]
    assert "global_load" in isa and "global_store" in isa and "atomic" not in isa  # no barrier in global memory
    cuda, *_ = api.compile_spec((1, 262144), "bf16", cfg, target=fat.Target("cuda", "sm_90", 32))
    assert cuda.fn.__name__ == "_split_coop"


@needs_ptxas
@pytest.mark.parametrize("M,N,ds,tile", [(4096, 1001, "bf16", (64, 1)), (16384, 2999, "bf16", (256, 1)),
                                         (32, 3001, "bf16", (256, 1)), (4096, 1001, "fp32", (128, 2)),
                                         (1024, 5001, "fp16", (256, 1))])
def test_rows_off_the_vector_grid_cross_compile_to_16_byte_accesses(M, N, ds, tile):
    """The CPU counterpart of the GPU runs of odd widths: with ``ALIGN`` (what ``compile_spec`` reports for
    a contiguous input) x is read and y written by 16-byte vectors, each thread storing at most one edge
    element by itself; without it (a tensor off a 16-byte boundary) every access is one element wide."""
    import re

    cfg = _cfg(tile[0], tile[1], policy=0)
    vectors = {}
    for align in (None, 0):
        k, consts, _ = _sm90(M, N, ds, cfg, **({} if align is None else {"ALIGN": align}))
        ptx = k.asm["ptx"]
        vectors[align] = (len(re.findall(r"ld\.global[^\n]*\.v4", ptx)), len(re.findall(r"st\.global[^\n]*\.v4", ptx)),
                          len(re.findall(r"st\.global(?![^\n]*\.v[24])", ptx)))
        if align is None:
            assert consts["ALIGN"] == 16 // {"bf16": 2, "fp16": 2, "fp32": 4}[ds]
    per_thread = tile[1] * next_pow2(N) // tile[0]
    loads, stores, scalar_stores = vectors[None]
    assert loads * 16 >= per_thread * (2 if ds != "fp32" else 4) and stores == loads and scalar_stores == 1, vectors
    assert vectors[0][:2] == (0, 0) and vectors[0][2] >= per_thread, vectors


@pytest.mark.parametrize("M,N", [(1, 262144), (8, 65536)])
def test_the_rocm_default_of_a_few_long_rows_cross_compiles_for_gfx942_without_scratch(M, N):
    """The normalize kernel of ROCm's two-launch default (the heavier of its two) compiles to AMDGCN that
    reads x and the weight and writes y in 16-byte accesses, with no scratch and no spills."""
    pytest.importorskip("triton.backends.amd")
    import re

    import triton
    from triton.backends.compiler import GPUTarget

    cfg = default_config(M, N, "bf16", "rocm")
    kernel, sig, consts, extra = api.compile_spec((M, N), "bf16", cfg, target=fat.Target("rocm", "gfx942", 64))
    assert kernel.fn.__name__ == "_split_normalize" and extra["options"]["num_warps"] == 4
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(sig.values()) if t.startswith("*")}
    k = triton.compile(triton.compiler.ASTSource(kernel, sig, consts, attrs), target=GPUTarget("hip", "gfx942", 64),
                       options=extra["options"])
    isa = k.asm["amdgcn"]
    assert re.findall(r"ScratchSize: (\d+)", isa) == ["0"], "the normalize kernel uses scratch"
    assert re.findall(r"\.vgpr_spill_count: (\d+)", isa) == ["0"]
    per_thread = next_pow2(N) // cfg.kwargs["SPLIT"] // 256 // 8  # 16-byte vectors of the slice a thread
    assert len(re.findall(r"(global|buffer)_load_dwordx4", isa)) >= 2 * per_thread  # x and the weight
    assert len(re.findall(r"(global|buffer)_store_dwordx4", isa)) >= per_thread


def test_rows_off_the_vector_grid_cross_compile_to_16_byte_accesses_for_gfx942():
    """ROCm runs the same Triton body: a 2999-wide bf16 row of the ROCm space's first config compiles to
    16-byte loads and stores of x and y with ``ALIGN`` (one short store per thread for the edges), and to
    none without it."""
    pytest.importorskip("triton.backends.amd")
    import re

    import triton
    from triton.backends.compiler import GPUTarget

    cfg = rocm_space(16384, 2999, "bf16")[0]
    found = {}
    for override in ({}, {"ALIGN": 0}):
        kernel, sig, consts, extra = api.compile_spec((16384, 2999), "bf16", cfg,
                                                      target=fat.Target("rocm", "gfx942", 64))
        attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(sig.values()) if t.startswith("*")}
        k = triton.compile(triton.compiler.ASTSource(kernel, sig, dict(consts, **override), attrs),
                           target=GPUTarget("hip", "gfx942", 64), options=extra["options"])
        isa = k.asm["amdgcn"]
        found[bool(override)] = tuple(len(re.findall(p, isa)) for p in (
            r"(global|buffer)_load_dwordx4", r"(global|buffer)_store_dwordx4", r"(global|buffer)_store_short"))
        assert consts["ALIGN"] == 8
    assert found[False][0] >= 2 and found[False][1] >= 2 and found[False][2] == 1, found
    assert found[True][:2] == (0, 0) and found[True][2] >= 8, found


@pytest.mark.parametrize("M,N,want", [
    (4096, 2560, (128, 0)), (1024, 3584, (128, 0)), (4096, 3584, (128, 0)), (6144, 3072, (128, 2048)),
    (16384, 2560, (128, 2048)), (16384, 3072, (128, 2048)), (65536, 3584, (128, 2048)), (4096, 5120, (256, 4096)),
    (16384, 6144, (256, 4096)), (4096, 7168, (512, 4096)),
])
def test_many_rows_of_llm_widths_off_the_power_of_two_get_a_default_that_fills_their_threads(M, N, want):
    # H200: the general rule (two passes, one vector a thread a chunk) read 0.88-0.92 of the best config at
    # 2560-5120; padded to 4096 the whole row at 128 threads while x is under 32 MiB (chunks of 2048 at 128
    # threads from there), padded to 8192 (up to 6144) chunks of 4096 at 256 threads
    for ds in ("bf16", "fp16"):
        cfg = default_config(M, N, ds)
        assert cfg in cuda_space(M, N, ds)
        assert (cfg.kwargs["BLOCK_THREADS"], cfg.kwargs["CHUNK"]) == want, cfg
        if want == (128, 2048):  # streaming y, as the search's pick did at every one of these shapes
            assert cfg.kwargs["CACHE_POLICY"] == 2, cfg
    # powers of two, few rows and fp32 keep the rules they were measured with
    assert default_config(4096, 4096, "bf16").kwargs["CHUNK"] == 2048
    assert default_config(200, 3072, "bf16") == default_config(200, 4096, "bf16")
    assert default_config(M, N, "fp32").kwargs["BLOCK_THREADS"] != 128


@pytest.mark.parametrize("M,N,ds,want", [
    # (threads, rows a program, cache policy, ASYNC); x of 6-20 MiB, 16-bit rows padded to 1024: the copy
    (4096, 768, "bf16", (128, 4, 0, 1)), (4096, 1000, "bf16", (128, 4, 0, 1)), (8192, 1024, "fp16", (128, 4, 0, 1)),
    (10239, 1024, "bf16", (128, 4, 0, 1)),
    # 20-36 MiB: x streamed (rows padded to 1024 or 2048, fp32 too)
    (16384, 768, "bf16", (128, 2, 1, 0)), (16384, 1024, "bf16", (128, 2, 1, 0)), (8192, 2000, "bf16", (128, 1, 1, 0)),
    (8192, 1000, "fp32", (128, 2, 1, 0)), (10240, 1024, "bf16", (128, 2, 1, 0)), (18431, 1024, "bf16", (128, 2, 1, 0)),
    # outside the band: the general rule (2048 elements a program at 128 threads, x kept)
    (2048, 1000, "bf16", (128, 2, 0, 0)), (3071, 1024, "bf16", (128, 2, 0, 0)), (18432, 1024, "bf16", (128, 2, 0, 0)),
    (20480, 1024, "fp16", (128, 2, 0, 0)),
    (65536, 1024, "bf16", (128, 2, 0, 0)), (4096, 1000, "fp32", (128, 2, 0, 0)), (4096, 1536, "bf16", (128, 1, 0, 0)),
    # off the 16-byte grid, and short rows: not this rule
    (8192, 1001, "bf16", (128, 2, 0, 0)), (65536, 512, "bf16", None),
])
def test_the_cuda_default_of_rows_of_513_to_2048_follows_the_size_of_x(M, N, ds, want):
    # H200 (bench/space_probe.py, bench/rmsnorm.py): the general rule read 0.91-0.98 of the best config where
    # x is 6-36 MiB; the copy led at 6-16 MiB (16-bit, rows padded to 1024), x streamed at 20-32 MiB, x kept
    # from 40 MiB
    from flyautotune_rmsnorm import kernel_async
    from flyautotune_rmsnorm.space import mid_rows

    cfg = default_config(M, N, ds)
    assert cfg in cuda_space(M, N, ds)
    if want is None:
        assert mid_rows(M, N, ds) is None
        return
    if want[3] and not kernel_async.available():  # no Gluon in this Triton: the general rule serves
        want = (128, 2048 // next_pow2(N), 0, 0)
    k = cfg.kwargs
    assert (k["BLOCK_THREADS"], k["ROWS_PER_PROGRAM"], k["CACHE_POLICY"], k["ASYNC"]) == want, cfg
    assert (mid_rows(M, N, ds) is None) == (cfg == _cfg(128, 2048 // next_pow2(N), policy=0))
    # other backends keep their own rules
    assert default_config(M, N, ds, "cpu").kwargs["ASYNC"] == 0 == default_config(M, N, ds, "rocm").kwargs["ASYNC"]


@pytest.mark.parametrize("target", [fat.Target("cuda", "sm_90", 32), fat.Target("rocm", "gfx942", 64)],
                         ids=["sm_90", "gfx942"])
def test_report_space_on_meta_is_the_space_on_cpu(target):
    """``flyautotune report`` evaluates the space on torch's meta device (no memory, any shape); for this
    adopter that must be the space the CPU's inputs give, which is what a search on ``target`` times: the
    default first (timed also where the space lacks it), then the space."""
    from flyautotune.report import candidate_configs

    adopter = fat.plugin_manager().get_adopter("rmsnorm")
    shapes = [(M, N, ds) for M, N, ds in ANCHOR_SHAPES if M * N <= 1 << 24] + [
        (1, 65536, "bf16"), (4, 131072, "bf16"), (65536, 128, "fp16"), (4096, 1000, "bf16"), (32, 3001, "fp32"),
        (1, 1, "bf16")]
    for M, N, ds in shapes:
        on_meta = candidate_configs(adopter, (M, N), ds, target, devices=("meta",))
        on_cpu = candidate_configs(adopter, (M, N), ds, target, devices=("cpu",))
        assert on_meta == on_cpu, (M, N, ds)
        default = default_config(M, N, ds, target.backend)
        space = (cuda_space if target.backend == "cuda" else rocm_space)(M, N, ds)
        assert on_meta == [default] + [c for c in space if c != default], (M, N, ds)
