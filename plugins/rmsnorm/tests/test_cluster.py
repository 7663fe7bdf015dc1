"""The cluster body (COOP=3: one row across a Hopper cluster, CuTe DSL).

On CPU: the space offers it only where CuTe DSL is installed and for widths it takes whole; the body
cross-compiles to PTX for sm_90a with no GPU (CuTe DSL needs no driver to compile) and that PTX holds the
cluster exchange; ptxas assembles it without spills; any call it cannot take runs the two-launch split
(test_split.py checks those rows under the interpreter). On a CUDA GPU: a child process with a deadline
checks every cluster config of the space against fp64, in bf16/fp16/fp32, with strided rows, out=, a side
stream, a mixed-dtype weight, graph replay and the fallbacks (odd N, N = 1, unaligned rows).
"""

import os
import re
import subprocess
import textwrap

import pytest
import torch

import flyautotune as fat
from flyautotune_rmsnorm import api, cuda_space, kernel_cluster, make_launcher
from flyautotune_rmsnorm import space as space_mod
from flyautotune_rmsnorm.space import _cfg, cluster_configs

needs_cute = pytest.mark.skipif(not kernel_cluster.available(),
                                reason="needs nvidia-cutlass-dsl (the test extra installs it)")


@pytest.mark.parametrize("M,N,ds", [(1024, 65536, "bf16"), (1, 262144, "bf16"), (4, 131072, "fp16"),
                                    (512, 65536, "fp32"), (8192, 16384, "bf16")])
@needs_cute
def test_the_space_offers_cluster_configs_it_takes_whole(M, N, ds):
    space = cuda_space(M, N, ds)
    cluster = [c for c in space if c.kwargs["COOP"] == 3]
    assert cluster and cluster == cluster_configs(M, N, ds)
    elem = 4 if ds == "fp32" else 2
    for c in cluster:
        kw = c.kwargs
        assert kernel_cluster.takes(N, kw["SPLIT"], kw["BLOCK_THREADS"], elem)
        assert N // (kw["SPLIT"] * kw["BLOCK_THREADS"]) in space_mod.CLUSTER_PER_THREAD
    assert len(space) <= 24  # the bound test_space.py holds every space to


@pytest.mark.parametrize("M,N,ds", [(1024, 65537, "bf16"), (64, 8192, "bf16"), (1024, 65000, "bf16")])
def test_no_cluster_configs_for_short_rows_or_widths_it_cannot_take(M, N, ds):
    assert not any(c.kwargs["COOP"] == 3 for c in cuda_space(M, N, ds))


def test_without_cute_dsl_the_space_has_no_cluster_configs_and_rejects_stored_ones(monkeypatch):
    monkeypatch.setattr(kernel_cluster, "available", lambda: False)
    assert not any(c.kwargs["COOP"] == 3 for c in cuda_space(1024, 65536, "bf16"))
    stored = _cfg(256, 1, 0, 2, split=8, coop=3)
    assert not space_mod.validate(stored, 1024, 65536, "bf16")


@needs_cute
def test_a_stored_cluster_winner_is_valid_where_cute_dsl_is_installed():
    assert space_mod.validate(_cfg(256, 1, 0, 2, split=8, coop=3), 1024, 65536, "bf16")
    assert not space_mod.validate(_cfg(256, 1, 0, 2, split=8, coop=3), 1024, 65544, "bf16")  # not whole tiles


class _FakeCudaTensor:
    is_cuda = True
    device = "cuda:0"

    def get_device(self):
        return 0


@needs_cute
@pytest.mark.parametrize("capability,hip,offered", [((9, 0), None, True), ((8, 0), None, False),
                                                    ((9, 4), "6.2", False)])
def test_the_search_offers_cluster_configs_only_to_gpus_with_clusters(monkeypatch, capability, hip, offered):
    from flyautotune_rmsnorm import cluster, factory

    monkeypatch.setattr(cluster, "_capable", {})
    monkeypatch.setattr(factory, "_ROCM", None)  # read again from the torch.version.hip set below
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: capability)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(space_mod, "backend_of", lambda device: "cuda")
    x = _FakeCudaTensor()
    got = space_mod.configs(1024, 65536, "bf16", x=x)
    assert any(c.kwargs["COOP"] == 3 for c in got) == offered
    assert len(got) == len(cuda_space(1024, 65536, "bf16")) - (0 if offered else len(cluster_configs(1024, 65536,
                                                                                                     "bf16")))
    # a stored cluster winner is used only where the GPU runs it
    assert space_mod.validate(_cfg(256, 1, 0, 2, split=8, coop=3), 1024, 65536, "bf16", x=x) == offered


def test_compile_spec_names_the_cluster_body_instead_of_a_triton_kernel():
    with pytest.raises(fat.IncompatibleConfigError, match="cluster body .COOP=3.*CuTe DSL"):
        api.compile_spec((1024, 65536), "bf16", _cfg(256, 1, 0, 2, split=8, coop=3))


def _ptxas():
    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    return path if os.path.exists(path) else None


@needs_cute
@pytest.mark.parametrize("ds,w_ds,N,split,threads", [
    ("bf16", "bf16", 65536, 8, 256), ("bf16", "fp32", 65536, 4, 512), ("fp16", "fp16", 131072, 8, 256),
    ("fp32", "fp32", 65536, 8, 256), ("bf16", "bf16", 16384, 2, 256), ("bf16", "bf16", 262144, 8, 512),
    ("bf16", "bf16", 262144, 16, 256), ("bf16", "bf16", 65536, 16, 128)])
@pytest.mark.parametrize("hold", [1, 0])
def test_cluster_body_cross_compiles_to_a_dsmem_exchange(tmp_path, ds, w_ds, N, split, threads, hold):
    L = make_launcher(N, ds, threads, SPLIT=split, COOP=3, CACHE_POLICY=2, HOLD=hold)
    ptx = kernel_cluster.ptx(ds, w_ds, N, split, threads, str(tmp_path), **L.variant())  # what launches build
    assert ".target sm_90a" in ptx
    # The row is read and written in 16-byte vectors, each thread's share once: into registers
    # (HOLD=1), or into shared memory by cp.async through L1 and read back twice (HOLD=0).
    per_thread = N // (split * threads) * (4 if ds == "fp32" else 2) // 16
    w_per_thread = per_thread * (4 if w_ds == "fp32" else 2) // (4 if ds == "fp32" else 2)
    loads = len(re.findall(r"ld\.global(\.\w+)*\.v4\.[bf]32", ptx))
    if hold:
        assert loads == per_thread + w_per_thread and "cp.async" not in ptx
    else:
        assert loads == w_per_thread and "cp.async.cg" not in ptx
        assert ptx.count("cp.async.ca.shared.global") == per_thread
        assert len(re.findall(r"ld\.shared\.v4", ptx)) == 2 * per_thread
    assert len(re.findall(r"st\.global(\.\w+)*\.v4\.[bf]32", ptx)) == per_thread
    # The exchange: an mbarrier set up before the cluster's first barrier, warp sums pushed to every peer
    # through distributed shared memory, completing the peer's transaction; a wait on the own mbarrier.
    init, arrive = ptx.index("mbarrier.init.shared.b64"), ptx.index("barrier.cluster.arrive.relaxed")
    assert init < ptx.index("fence.mbarrier_init") < arrive
    assert "mbarrier.arrive.expect_tx" in ptx
    wait = ptx.index("barrier.cluster.wait")
    push = ptx.index("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32")
    assert arrive < wait < push and "mapa.shared::cluster.u32" in ptx
    assert push < ptx.index("mbarrier.try_wait.parity.shared.b64")
    assert ptx.count("barrier.cluster.wait") == 1  # no barrier at the exit
    ptxas = _ptxas()
    if ptxas:  # Triton ships ptxas: the PTX assembles for sm_90a, with no spills
        src = tmp_path / "k.ptx"
        src.write_text(ptx)
        out = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                             capture_output=True, text=True)
        if "Unsupported .version" in out.stderr:
            return  # an older Triton's ptxas (3.6 ships CUDA 12.8's): CuTe DSL assembles with its own
        assert out.returncode == 0, out.stderr
        assert "0 bytes spill stores, 0 bytes spill loads" in out.stdout + out.stderr


@needs_cute
def test_the_few_rows_variant_loads_the_weight_while_the_sums_travel(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    early = kernel_cluster.ptx("bf16", "bf16", 131072, 16, 256, str(tmp_path / "a"))
    late = kernel_cluster.ptx("bf16", "bf16", 131072, 16, 256, str(tmp_path / "b"), late_w=True)
    for ptx, loads_after_push in ((early, 0), (late, 4)):  # 32 weight elements: four 16-byte loads
        push = ptx.index("st.async.shared::cluster")
        after = ptx[push:ptx.index("mbarrier.try_wait")]
        assert len(re.findall(r"ld\.global(\.\w+)*\.v4", after)) == loads_after_push


def test_the_space_tries_16_ctas_for_rows_of_128k_and_more_or_a_few_rows():
    if not kernel_cluster.available():
        pytest.skip("needs nvidia-cutlass-dsl (the test extra installs it)")

    def splits(M, N):
        return {c.kwargs["SPLIT"] for c in cluster_configs(M, N, "bf16")}

    assert 16 in splits(4, 131072) and 16 in splits(1024, 131072)
    # 64 K rows: 16 CTAs while 16 * M clusters' CTAs fit the SMs at once
    few = space_mod.FEW_CLUSTERS // 16
    assert 16 in splits(1, 65536) and 16 in splits(few, 65536)
    assert 16 not in splits(few + 1, 65536) and 16 not in splits(1024, 65536)


def test_the_space_holds_slices_in_registers_for_a_few_rows_and_stages_them_for_many():
    if not kernel_cluster.available():
        pytest.skip("needs nvidia-cutlass-dsl (the test extra installs it)")

    def holds(M, N):
        out = {}
        for c in cluster_configs(M, N, "bf16"):
            per_thread = N // (c.kwargs["SPLIT"] * c.kwargs["BLOCK_THREADS"])
            out.setdefault(per_thread, set()).add((c.kwargs["SPLIT"], c.kwargs["HOLD"]))
        return out

    few, many = holds(1, 262144), holds(1024, 65536)
    # one wave of clusters: registers only (1 x 262144 at 16 x 256 and 16 x 512)
    assert (16, 1) in few[64] and (16, 1) in few[32] and {h for p in few.values() for _, h in p} == {1}
    assert {h for _, h in many[32]} == {0, 1}  # many rows at 32 a thread: both
    assert all(h == 0 for _, h in many[64])  # and staged at 64
    # "a few rows" is M * SPLIT against FEW_CLUSTERS, not the row count alone
    edge = holds(space_mod.FEW_CLUSTERS // 4, 65536)
    assert (4, 1) in edge[64] and (2, 1) in edge[64] and (4, 0) not in edge[64]
    assert (4, 1) in edge[32] and (4, 0) not in edge[32] and {(8, 0), (8, 1)} <= edge[32]


def test_cluster_launcher_takes_only_what_the_body_takes():
    L = make_launcher(65536, "bf16", 256, SPLIT=8, COOP=3, CACHE_POLICY=2)
    assert type(L).__name__ == "ClusterLauncher" and L.cluster_ok and not L.uses_coop(1, 0)
    assert not make_launcher(65544, "bf16", 256, SPLIT=8, COOP=3, CACHE_POLICY=2).cluster_ok
    x = torch.randn(2, 65536, dtype=torch.bfloat16)
    w = torch.ones(65536, dtype=torch.bfloat16)
    assert not L.takes(x, w, x, 65536, 65532)  # a row stride that is not whole vectors


pytestmark_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason=(
    "needs a CUDA GPU (the CPU counterparts: the cross-compiled PTX above, the fallback rows in test_split.py)"))

CHILD = textwrap.dedent("""
    import torch
    from flyautotune_rmsnorm.api import launch
    from flyautotune_rmsnorm.cluster import cluster_capable
    from flyautotune_rmsnorm.factory import make_launcher
    from flyautotune_rmsnorm.space import _cfg
    from gpu_checks import check_space_configs, on_side_stream, replay_and_check, run_and_check

    if not cluster_capable(0):
        print("skip", "no clusters on this GPU or no CuTe DSL")
        raise SystemExit(0)
    ran = check_space_configs([(1, 65536), (4, 131072), (1024, 65536), (3, 16384), (1, 262144), (300, 32768),
                               (64, 131072)], coop=3, launches=2)
    # both places a CTA keeps its slice: registers (HOLD=1) and shared memory (HOLD=0)
    for hold in (1, 0):
        cfg = _cfg(256, 1, 0, 2, split=8, coop=3, hold=hold)
        L = make_launcher(65536, "bf16", 256, 1, 0, 2, 0, 8, 16, 3, hold)
        # strided rows and out= on a side stream; a float32 weight with bf16 rows
        base = torch.randn(4, 70000, device="cuda", dtype=torch.bfloat16)
        x = base[:, 96:65632]
        w = torch.rand(65536, device="cuda", dtype=torch.float32) + 0.5
        out = torch.empty((4, 66000), device="cuda", dtype=torch.bfloat16)[:, :65536]
        assert L.takes(x, w, out, 70000, 66000)
        # the stream passed explicitly
        run_and_check(on_side_stream(lambda y, s: launch(x, w, y, 4, 65536, "bf16", 1e-6, 70000, 66000, s,
                                                         **cfg.kwargs)),
                      x, w, f"strided rows, fp32 weight, side stream, HOLD={hold}", out=out)
        # rows the body cannot take run the two-launch split: an unaligned start, odd N, N = 1
        x = base[:, 3:65539]
        wb = w.to(torch.bfloat16)
        assert not L.takes(x, wb, x.clone(), 70000, 65536)
        run_and_check(lambda y: launch(x, wb, y, 4, 65536, "bf16", 1e-6, 70000, 65536, None, **cfg.kwargs),
                      x, wb, f"unaligned rows (fallback), HOLD={hold}")
        fallback = _cfg(256, 1, 0, 2, split=2, coop=3, hold=hold)
        for N in (65537, 1):
            x = torch.randn(5, N, device="cuda", dtype=torch.float32)
            w = torch.rand(N, device="cuda", dtype=torch.float32) + 0.5
            run_and_check(lambda y: launch(x, w, y, 5, N, "fp32", 1e-6, N, N, None, **fallback.kwargs), x, w,
                          f"N={N} (fallback), HOLD={hold}")
        # a CUDA graph of back-to-back launches, replayed many times
        x = torch.randn(64, 65536, device="cuda", dtype=torch.bfloat16)
        w = torch.rand(65536, device="cuda", dtype=torch.bfloat16) + 0.5
        replay_and_check(lambda y: launch(x, w, y, 64, 65536, "bf16", 1e-6, 65536, 65536, None, **cfg.kwargs),
                         x, w, f"graph replay, HOLD={hold}", outputs=4, replays=50)
    # the tuner's specialized hit (api.specialize -> ClusterLauncher.bind): the body itself for the calls it
    # was bound to, the launcher for every other call
    from flyautotune_rmsnorm import api
    for hold in (1, 0):
        cfg = _cfg(128, 1, 0, 2, split=16, coop=3, hold=hold)
        x = torch.randn(4, 65536, device="cuda", dtype=torch.bfloat16)
        w = torch.rand(65536, device="cuda", dtype=torch.bfloat16) + 0.5
        run = api.specialize(cfg, x, w, None, 4, 65536, "bf16", 1e-6, 65536, 65536)
        assert run is not None, "no specialized launch for a cluster config"
        for _ in range(3):
            run_and_check(lambda y: run(x, w, y, 4, 65536, "bf16", 1e-6, 65536, 65536), x, w,
                          f"specialized hit, HOLD={hold}")
        x3 = x.view(2, 2, 65536)  # leading dims that collapse to one row stride
        run_and_check(lambda y: run(x3, w, y, 4, 65536, "bf16", 1e-6, 65536, 65536), x3, w,
                      f"specialized hit, 3-D rows, HOLD={hold}")
        run_and_check(lambda y: run(x[:2], w, y, 2, 65536, "bf16", 1e-6, 65536, 65536), x[:2], w,
                      f"specialized launch, other M, HOLD={hold}")
        xm = torch.randn(4 * 65536 + 1, device="cuda", dtype=torch.bfloat16)[1:].view(4, 65536)  # 2-byte offset
        run_and_check(lambda y: run(xm, w, y, 4, 65536, "bf16", 1e-6, 65536, 65536), xm, w,
                      f"specialized launch, unaligned rows, HOLD={hold}")
        run_and_check(on_side_stream(lambda y, s: run(x, w, y, 4, 65536, "bf16", 1e-6, 65536, 65536, stream=s)),
                      x, w, f"specialized launch, side stream, HOLD={hold}")
        replay_and_check(lambda y: run(x, w, y, 4, 65536, "bf16", 1e-6, 65536, 65536), x, w,
                         f"specialized hit, graph replay, HOLD={hold}", outputs=4, replays=20)
    print("ok", ran)
""")


@pytest.mark.gpu
@pytestmark_gpu
def test_cluster_rows_are_right_on_the_gpu(gpu_child):
    words = gpu_child(CHILD, 600, "a cluster's exchange never completed")
    if words and words[0] == "skip":
        pytest.skip(" ".join(words[1:]))
    assert words[0] == "ok" and int(words[1]) >= 40, words


def test_a_bound_cluster_launch_of_rows_the_body_cannot_take_runs_the_split_rows_on_cpu():
    """``ClusterLauncher.bind`` (what a cache hit calls) for a width the body does not take whole: every call
    goes through the launcher, which runs the two-launch split under the interpreter on a CPU."""
    from flyautotune_rmsnorm.reference import check_against_reference

    N = 4104  # not a multiple of SPLIT * BLOCK_THREADS 16-byte vectors
    L = make_launcher(N, "fp32", 128, SPLIT=2, COOP=3, CACHE_POLICY=2)
    assert not L.cluster_ok
    run = L.bind(3, N, N, -1, torch.float32, ())
    x = torch.randn(3, N)
    w = torch.rand(N) + 0.5
    y = torch.full_like(x, float("nan"))
    assert run(x, w, y, 3, N, "fp32", 1e-6, N, N) is y
    check_against_reference(y, x, w, "bound cluster launch, split rows")
