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
