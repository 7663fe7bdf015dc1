"""What the GPU child processes of ``test_coop_gpu.py``, ``test_persist_gpu.py`` and ``test_cluster.py``
share: a launch into a NaN-filled output checked against fp64, and a CUDA graph of launches replayed and
checked. The children run through conftest's ``gpu_child`` fixture, which puts this folder on their path."""

from __future__ import annotations


def run_and_check(run, x, weight, what: str, out=None):
    """``run(y)`` into ``out`` (default: a tensor shaped like ``x``) filled with NaN first, then every row
    of ``y`` against the fp64 reference of ``x`` and ``weight``. Returns ``y``."""
    import torch

    from flyautotune_rmsnorm.reference import check_against_reference

    y = torch.full_like(x, float("nan")) if out is None else out.fill_(float("nan"))
    run(y)
    torch.cuda.synchronize()
    check_against_reference(y, x, weight, what)
    return y


def on_side_stream(run):
    """``run(y, stream)`` made a ``run(y)`` that launches on a new side stream (current inside it), after
    the caller's stream's work (the NaN fill), and waits for it."""
    import torch

    side = torch.cuda.Stream()

    def launch(y):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run(y, side)
        side.synchronize()

    return launch


def replay_and_check(run, x, weight, what: str, outputs: int = 3, replays: int = 20, warm: bool = True) -> None:
    """One CUDA graph of ``run(y)`` into ``outputs`` tensors, replayed ``replays`` times with the outputs
    refilled with NaN before the first replay; every output checked against fp64. ``warm``: launch each
    once on the capture stream before capturing (False: capture on a stream that never launched)."""
    import torch

    from flyautotune_rmsnorm.reference import check_against_reference

    ys = [torch.full_like(x, float("nan")) for _ in range(outputs)]
    cap = torch.cuda.Stream()
    cap.wait_stream(torch.cuda.current_stream())
    if warm:
        with torch.cuda.stream(cap):
            for y in ys:
                run(y)
        cap.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=cap):
        for y in ys:
            run(y)
    for y in ys:
        y.fill_(float("nan"))
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
    for y in ys:
        check_against_reference(y, x, weight, what)


def check_space_configs(shapes, coop: int, launches: int) -> int:
    """Every config of the CUDA space with this ``COOP``, for each ``(M, N)`` of ``shapes`` in bf16, fp16
    and fp32: ``launches`` launches each (a barrier or an exchange must reset itself between them), every
    one into a NaN-filled output checked against fp64. Each shape must have such configs; returns how many
    configs ran."""
    import torch

    from flyautotune_rmsnorm import cuda_space
    from flyautotune_rmsnorm.api import launch

    ran = 0
    for M, N in shapes:
        for dtype, ds in [(torch.bfloat16, "bf16"), (torch.float16, "fp16"), (torch.float32, "fp32")]:
            x = torch.randn(M, N, device="cuda", dtype=dtype) * 2
            w = torch.rand(N, device="cuda", dtype=dtype) + 0.5
            configs = [c for c in cuda_space(M, N, ds) if c.kwargs["COOP"] == coop]
            assert configs, f"no COOP={coop} config for {M}x{N} {ds}"
            for cfg in configs:
                for _ in range(launches):
                    run_and_check(lambda y: launch(x, w, y, M, N, ds, 1e-6, N, N, None, **cfg.kwargs), x, w,
                                  f"{M}x{N} {ds} {cfg}")
                ran += 1
    return ran
