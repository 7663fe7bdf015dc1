"""What torch.compile runs for an RMSNorm shape: Inductor's generated Triton kernel and its launch config.

Where torch.compile leads every config of our space (short rows, many of them), its kernel says why.
For each shape this writes Inductor's generated module to ``OUT/inductor_<M>x<N>_<dtype>.py`` and prints
each Triton kernel's launch config (``num_warps``, ``num_stages`` and its block sizes, as launched after
Inductor's own choice) and its register and shared-memory use. Needs a CUDA GPU.

    python bench/inductor_code.py --out DIR --shapes 65536x128:bf16,262144x256:bf16
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default="65536x128:bf16,262144x256:bf16")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    from torch._inductor.utils import run_and_get_code
    from rmsnorm import shape_spec, torch_dtype

    os.makedirs(args.out, exist_ok=True)
    seen = set()  # kernels listed under an earlier shape
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        torch._dynamo.reset()
        fn = torch.compile(lambda x, w: F.rms_norm(x, (N,), w, 1e-6), dynamic=False)
        x = torch.randn(M, N, device="cuda", dtype=torch_dtype(ds))
        w = torch.rand(N, device="cuda", dtype=x.dtype) + 0.5
        _, codes = run_and_get_code(fn, x, w)
        path = os.path.join(args.out, f"inductor_{M}x{N}_{ds}.py")
        with open(path, "w") as f:
            f.write("\n\n# ---- next module ----\n\n".join(codes))
        print(f"### {M} × {N} {ds}: {len(codes)} module(s) in {os.path.basename(path)}")
        for obj in gc.get_objects():
            # type(), not isinstance(): the heap holds weak proxies, whose dead referents raise on isinstance
            if issubclass(type(obj), CachingAutotuner) and obj.launchers and id(obj) not in seen:
                seen.add(id(obj))
                for launcher in obj.launchers:
                    cfg = launcher.config
                    binary = getattr(launcher, "bin", None)
                    regs = getattr(binary, "n_regs", None)
                    print(f"- {obj.fn.__name__}: {cfg.kwargs} num_warps={cfg.num_warps} "
                          f"num_stages={cfg.num_stages} registers={regs} "
                          f"shared={getattr(launcher, 'shared', None)}")


if __name__ == "__main__":
    main()
