"""The zero-search default against the space's split and whole-row configs, on one CUDA GPU.

``rmsnorm()`` (and a tuned call before any search) runs :func:`~flyautotune_rmsnorm.space.default_config`.
For a few long rows the space's best configs split each row across programs; for rows off the 16-byte
grid they hold the whole row. Per shape this times the default, every split config of the CUDA space (two
launches, and the one-launch ``COOP=1`` form), every whole-row config of it, QuACK, torch.compile and a
clone, as ``bench/rmsnorm.py`` times its peers
(CUDA-graph replay over rotating inputs, interleaved rounds, medians kept). No search runs.

    python bench/default_probe.py --out DIR [--shapes 1x65536:bf16,...] [--rounds 3]
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = ("1x32768:bf16,1x65536:bf16,8x65536:bf16,16x65536:bf16,32x32768:bf16,1x131072:bf16,4x131072:bf16,"
          "1x262144:bf16,2x65536:fp32,8x5001:fp32,4096x3001:fp32,256x6001:bf16")


def main(argv=None):
    from rmsnorm import probe_args

    args = probe_args(argv, __doc__, SHAPES, "fat-default-")
    import torch

    from rmsnorm import EPS, check_and_rank, load_quack, probe_fns, save_and_rank, shape_spec, torch_dtype
    from space_probe import describe

    from flyautotune_rmsnorm.api import launch
    from flyautotune_rmsnorm.space import cuda_space, default_config, split_configs

    quack = load_quack()
    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        torch.manual_seed(M + N)
        x = torch.randn(M, N, device="cuda", dtype=torch_dtype(ds))
        w = torch.rand(N, device="cuda", dtype=x.dtype) + 0.5
        fns = probe_fns(N, quack, x, w)
        del fns["tuned"]  # no search here
        default = default_config(M, N, ds)
        configs = {"default: " + describe(default.kwargs): default.kwargs}
        whole = [c for c in cuda_space(M, N, ds) if not c.kwargs["CHUNK"] and c.kwargs["SPLIT"] == 1]
        for c in split_configs(M, N, ds, coop=True) + whole:
            name = describe(c.kwargs) + (" coop" if c.kwargs["COOP"] == 1 else "")
            configs.setdefault(name, c.kwargs)
        for name, kw in configs.items():
            fns[name] = lambda x, w, kw=kw: launch(x, w, torch.empty_like(x), M, N, ds, EPS, N, N, None, **kw)
        rows.append(check_and_rank(fns, x, w, spec, args.rounds, "default " + describe(default.kwargs),
                                   configs=configs))
        del x
        torch.cuda.empty_cache()
    save_and_rank(args.out, "default_probe.json", rows)


if __name__ == "__main__":
    sys.exit(main())
