"""The cooperative split (COOP=1: one launch, a barrier per row in global memory) on a CUDA GPU.

Everything runs in a child process with a deadline (conftest's ``gpu_child``): a barrier that never
opens hangs its kernel, and a hung kernel must fail this test, not the whole suite.
"""

import textwrap

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the CPU counterparts: the "
                                                              "cross-compiled barrier in test_space.py, the rows "
                                                              "in test_split.py)"),
]

CHILD = textwrap.dedent("""
    import torch
    from flyautotune_rmsnorm import cuda_space
    from flyautotune_rmsnorm.api import launch
    from gpu_checks import check_space_configs, on_side_stream, replay_and_check, run_and_check

    # the barrier resets itself between launches
    ran = check_space_configs([(1, 65536), (4, 131072), (1, 262144), (3, 40001), (64, 8192), (2, 3000), (1, 4096)],
                              coop=1, launches=3)
    # a 64-way split at 256 threads: the sums' reduction goes through shared memory after the wait, where
    # warps that left a replicated wait apart would pair the CTA barriers wrongly
    wide = dict(BLOCK_THREADS=256, ROWS_PER_PROGRAM=1, CHUNK=0, CACHE_POLICY=2, PREFETCH=0, SPLIT=64, VEC=16,
                COOP=1, HOLD=0)
    for M, dtype, ds in [(1, torch.float32, "fp32"), (2, torch.bfloat16, "bf16")]:
        x = torch.randn(M, 262144, device="cuda", dtype=dtype)
        w = torch.rand(262144, device="cuda", dtype=dtype) + 0.5
        for _ in range(20):
            run_and_check(lambda y: launch(x, w, y, M, 262144, ds, 1e-6, 262144, 262144, None, **wide), x, w,
                          f"{M}x262144 {dtype} SPLIT=64 at 256 threads")
    # strided rows, out= and a side stream (its own barrier)
    base = torch.randn(4, 70000, device="cuda", dtype=torch.bfloat16)
    x = base[:, 100:65636]
    w = torch.rand(65536, device="cuda", dtype=torch.bfloat16) + 0.5
    out = torch.empty((4, 66000), device="cuda", dtype=torch.bfloat16)[:, :65536]
    cfg = next(c for c in cuda_space(4, 65536, "bf16") if c.kwargs["COOP"] == 1)
    run_and_check(on_side_stream(lambda y, s: launch(x, w, y, 4, 65536, "bf16", 1e-6, 70000, 66000, None,
                                                     **cfg.kwargs)), x, w, "strided rows on a side stream", out=out)
    # a CUDA graph of back-to-back launches, replayed many times
    x = torch.randn(2, 131072, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(131072, device="cuda", dtype=torch.bfloat16) + 0.5
    cfg = next(c for c in cuda_space(2, 131072, "bf16") if c.kwargs["COOP"] == 1)
    replay_and_check(lambda y: launch(x, w, y, 2, 131072, "bf16", 1e-6, 131072, 131072, None, **cfg.kwargs),
                     x, w, "graph replay", outputs=4, replays=50)
    print("ok", ran)
""")


def test_cooperative_split_rows_are_right_and_never_hang(gpu_child):
    words = gpu_child(CHILD, 180, "a row's barrier never opened")
    assert words[0] == "ok" and int(words[1]) >= 21, words



REFUSED_CHILD = textwrap.dedent("""
    import logging
    import torch
    from flyautotune_rmsnorm import factory, split
    from flyautotune_rmsnorm.api import launch
    from gpu_checks import run_and_check

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("flyautotune_rmsnorm.split").addHandler(handler)
    cfg = dict(BLOCK_THREADS=128, ROWS_PER_PROGRAM=1, CHUNK=0, CACHE_POLICY=2, PREFETCH=0, SPLIT=128, VEC=16,
               COOP=1, HOLD=0)
    w = torch.rand(262144, device="cuda", dtype=torch.bfloat16) + 0.5

    def rows(M, what):
        x = torch.randn(M, 262144, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            run_and_check(lambda y: launch(x, w, y, M, 262144, "bf16", 1e-6, 262144, 262144, None, **cfg), x, w,
                          what)

    rows(1, "1 row, one launch")
    # the one-launch binary is a cooperative launch: the driver holds its whole grid resident, or refuses it
    (launcher,) = [l for l in factory._launchers.values() if isinstance(l, split.SplitLauncher) and l.COOP == 1]
    ones = [v for v in launcher._launches.values() if isinstance(v, factory.Launch)]
    assert ones and all(v.kernel.metadata.launch_cooperative_grid for v in ones), ones
    assert not records
    # a grid the driver cannot hold at once (as under an MPS thread limit, where the device still reports
    # all its SMs): the launcher is told the GPU has far more SMs, the driver refuses the cooperative grid,
    # and the rows take the two-launch form, right, with one warning
    split._sm_counts[torch.cuda.current_device()] = 100000
    rows(64, "64 rows x SPLIT 128, refused by the driver")
    said = [r.getMessage() for r in records]
    assert len(said) == 1 and "will not hold the 8192 programs" in said[0], said
    assert "CUresult 720" in said[0] or "too many blocks in cooperative launch" in said[0], said
    print("ok")
""")


def test_a_cooperative_grid_the_driver_refuses_takes_the_two_launch_form(gpu_child):
    words = gpu_child(REFUSED_CHILD, 180, "a refused cooperative grid hung")
    assert words == ["ok"], words
