"""The persistent split (COOP=2: resident programs loop over the rows, a tagged barrier per row in global
memory) on a CUDA GPU.

Everything runs in a child process with a deadline (conftest's ``gpu_child``): a barrier that never opens
hangs its kernel, and a hung kernel must fail this test, not the whole suite.
"""

import textwrap

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the CPU counterparts: the "
                                                              "cross-compiled barrier in test_space.py, the same "
                                                              "rows through the two-launch bodies in test_split.py)"),
]

CHILD = textwrap.dedent("""
    import torch
    from flyautotune_rmsnorm import cuda_space
    from flyautotune_rmsnorm.api import launch
    from flyautotune_rmsnorm.reference import check_against_reference as check
    from flyautotune_rmsnorm.space import _cfg, persist_configs
    from gpu_checks import on_side_stream, replay_and_check, run_and_check

    ran = 0
    # Many rows (each group of programs loops over rows), odd N, fewer rows than groups, N = 1.
    shapes = [(1024, 65536), (2048, 32768), (301, 40001), (7, 65536), (1001, 32769)]
    for M, N in shapes:
        for dtype, ds in [(torch.bfloat16, "bf16"), (torch.float16, "fp16"), (torch.float32, "fp32")]:
            x = torch.randn(M, N, device="cuda", dtype=dtype) * 2
            w = torch.rand(N, device="cuda", dtype=dtype) + 0.5
            persist = persist_configs(max(M, 132), N, ds)
            assert bool(persist) == (ds != "fp32" and N % 8 == 0), (M, N, ds)
            # The bench's shapes for any dtype and width, and rows per trip (ROWS_PER_PROGRAM 2 and 4: one
            # barrier for several rows, the last trip partly empty)
            npad = 1 << (N - 1).bit_length()
            persist += [_cfg(t, 1, 0, 2, split=npad * x.element_size() // (32 * t), coop=2) for t in (1024, 256)]
            persist += [_cfg(256, rows, 0, 2, split=npad * x.element_size() // (32 * 256), coop=2) for rows in (2, 4)]
            for cfg in persist:
                what = f"{M}x{N} {ds} {cfg}"
                for rows in (M, max(1, M // 3)):  # the same binary on fewer rows: fewer loop trips
                    y = torch.full_like(x, float("nan"))
                    launch(x[:rows], w, y[:rows], rows, N, ds, 1e-6, N, N, None, **cfg.kwargs)
                    torch.cuda.synchronize()
                    check(y[:rows], x[:rows], w, what)
                    assert torch.isnan(y[rows:]).all(), f"{what}: wrote past row {rows}"
                ran += 1
    for N in (1, 5):  # rows shorter than the split: empty slices
        x = torch.randn(500, N, device="cuda", dtype=torch.bfloat16)
        w = torch.rand(N, device="cuda", dtype=torch.bfloat16) + 0.5
        run_and_check(lambda y: launch(x, w, y, 500, N, "bf16", 1e-6, N, N, None,
                                       **_cfg(128, 1, 0, 2, split=2, coop=2).kwargs), x, w, f"500x{N}")
    # strided rows, out= and a side stream (its own barrier words)
    base = torch.randn(600, 70000, device="cuda", dtype=torch.bfloat16)
    x = base[:, 100:65636]
    w = torch.rand(65536, device="cuda", dtype=torch.bfloat16) + 0.5
    out = torch.empty((600, 66000), device="cuda", dtype=torch.bfloat16)[:, :65536]
    cfg = persist_configs(600, 65536, "bf16")[0]
    run_and_check(on_side_stream(lambda y, s: launch(x, w, y, 600, 65536, "bf16", 1e-6, 70000, 66000, None,
                                                     **cfg.kwargs)), x, w, "strided rows on a side stream", out=out)
    # a CUDA graph of back-to-back launches, replayed many times
    x = torch.randn(1024, 65536, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(65536, device="cuda", dtype=torch.bfloat16) + 0.5
    for cfg in persist_configs(1024, 65536, "bf16"):
        replay_and_check(lambda y: launch(x, w, y, 1024, 65536, "bf16", 1e-6, 65536, 65536, None, **cfg.kwargs),
                         x, w, f"graph replay {cfg}")
    # A capture on a stream that never launched (no barrier memory made outside a capture): the two-launch
    # form runs instead, with the same rows; COOP=1 the same way.
    for cfg, (M, N) in [(persist_configs(1024, 65536, "bf16")[0], (1024, 65536)),
                        (next(c for c in cuda_space(2, 131072, "bf16") if c.kwargs["COOP"] == 1), (2, 131072))]:
        x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        w = torch.rand(N, device="cuda", dtype=torch.bfloat16) + 0.5
        replay_and_check(lambda y: launch(x, w, y, M, N, "bf16", 1e-6, N, N, None, **cfg.kwargs), x, w,
                         f"graph replay on a fresh stream {cfg}", warm=False)
    print("ok", ran)
""")


def test_persistent_split_rows_are_right_and_never_hang(gpu_child):
    words = gpu_child(CHILD, 240, "a row's barrier never opened")
    assert words[0] == "ok" and int(words[1]) >= 55, words
