"""Ranks of a job agree on one RMSNorm winner (one GPU shared by two gloo ranks, or one GPU each).

    python bench/agree_gpu.py --out DIR [--ranks 2] [--shape 4096x8192]

Each rank runs ``rmsnorm_autotuned`` once inside ``fat.distributed(...)`` with a forced search and
its own store; the script prints every rank's config, where it came from, whether its store
holds the winner, and the wall time of the call.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import tempfile


def _rank(rank: int, world: int, port: int, out: str, M: int, N: int) -> None:
    import time

    import torch
    import torch.distributed as dist

    os.environ["FLYAUTOTUNE_CACHE_DIR"] = os.path.join(out, f"store{rank}")
    os.environ["FLYAUTOTUNE"] = "1"
    gpus = torch.cuda.device_count()
    torch.cuda.set_device(rank % gpus)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    import flyautotune as fat
    from flyautotune_rmsnorm import rmsnorm_autotuned
    from flyautotune_rmsnorm.api import tuned_launch

    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(N, device="cuda", dtype=torch.bfloat16) + 0.5
    t0 = time.perf_counter()
    with fat.distributed(timeout_s=60):
        rmsnorm_autotuned(x, w)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    stored = bool(tuned_launch.store().entries("rmsnorm"))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "gpu": rank % gpus, "config": tuned_launch.last_config.kwargs,
                   "source": tuned_launch.last_source, "stored": stored, "wall_s": wall}, f)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--shape", default="4096x8192")
    args = ap.parse_args()
    import torch.multiprocessing as mp

    M, N = (int(v) for v in args.shape.split("x"))
    work = tempfile.mkdtemp(prefix="agree-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(args.ranks, port, work, M, N), nprocs=args.ranks, join=True)
    rows = [json.load(open(os.path.join(work, f"rank{r}.json"))) for r in range(args.ranks)]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "agree.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("| rank | GPU | config | source | stored here | wall s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['rank']} | {r['gpu']} | {r['config']} | {r['source']} | {r['stored']} | {r['wall_s']:.2f} |")
    print("one config on every rank:", len({json.dumps(r["config"], sort_keys=True) for r in rows}) == 1)


if __name__ == "__main__":
    main()
