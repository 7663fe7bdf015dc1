"""Rank bodies for the agreement tests (spawned by torch.multiprocessing; results go to JSON files)."""

from __future__ import annotations

import datetime
import json
import os
import time
import warnings

N = 7  # candidates
ROOT_STORED = {"kwargs": {"BLOCK": 64}, "hints": {}}
OTHER_STORED = {"kwargs": {"BLOCK": 32}, "hints": {}}


def rank_ms(rank: int, i: int) -> float:
    """Each rank sees a different candidate as fastest: alone, the ranks would disagree."""
    return 1.0 + ((i + 3 * rank) % N) / 10.0


def decide(timings: dict) -> int:
    return min(sorted(timings), key=lambda i: timings[i])


def _init(rank: int, world: int, port: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))


def agree_scenarios(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from flyautotune.scale.distributed import agree

    _init(rank, world, port)
    report: dict = {}
    timed: list = []

    def time_some(indices):
        timed.append(list(indices))
        return {i: rank_ms(rank, i) for i in indices}

    a = agree(key="cold", n_candidates=N, time_some=time_some, decide=decide, stored=None, timeout_s=20)
    report["cold"] = {"winner": a.winner, "writer": a.writer, "failed": a.failed, "timed": timed[:],
                      "alone": decide({i: rank_ms(rank, i) for i in range(N)})}
    timed.clear()
    stored = ROOT_STORED if rank == 0 else OTHER_STORED
    a = agree(key="stored", n_candidates=N, time_some=time_some, decide=decide, stored=stored, timeout_s=20)
    report["stored"] = {"config": a.config, "winner": a.winner, "writer": a.writer, "timed": timed[:]}
    timed.clear()
    stored = None if rank == 0 else OTHER_STORED
    a = agree(key="root-cold", n_candidates=N, time_some=time_some, decide=decide, stored=stored, timeout_s=20)
    report["root_cold"] = {"config": a.config, "winner": a.winner, "timed": timed[:]}
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


def absent_rank(rank: int, world: int, port: int, out: str, timeout_s: float) -> None:
    from flyautotune.scale.distributed import agree

    _init(rank, world, port)
    if rank != 0:  # never joins the tuning collective; leaves after rank 0 has given up
        time.sleep(timeout_s + 4)
        os._exit(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.monotonic()
        a = agree(key="k", n_candidates=N, time_some=lambda ix: {i: 1.0 for i in ix}, decide=decide,
                  stored=None, timeout_s=timeout_s)
        took = time.monotonic() - t0
        b = agree(key="k2", n_candidates=N, time_some=lambda ix: {i: 1.0 for i in ix}, decide=decide,
                  stored=None, timeout_s=timeout_s)
    with open(os.path.join(out, "rank0.json"), "w") as f:
        json.dump({"winner": a.winner, "failed": a.failed, "took": took, "second_failed": b.failed,
                   "warnings": [str(w.message) for w in caught]}, f)
    os._exit(0)  # the collective rank 1 never joined is still pending: do not wait for it


def tuner_scenario(rank: int, world: int, port: int, out: str) -> None:
    """A real ``@autotune`` inside ``fat.distributed``: ranks with different timings run one config."""
    import torch
    import torch.distributed as dist

    os.environ["FLYAUTOTUNE_CACHE_DIR"] = os.path.join(out, f"store{rank}")
    import flyautotune as fat

    _init(rank, world, port)
    pm = fat.build_plugin_manager(entry_points=False)

    @fat.autotune(configs=[fat.Config(B=b) for b in range(N)], key=["n"], plugin_manager=pm, name="agreed",
                  do_bench=lambda fn, setup=None: rank_ms(rank, fn()))
    def launch(x, n, B=None):
        return B

    with fat.distributed(timeout_s=20):
        ran = launch(torch.zeros(2), 2)
    stored = [e.config for e in launch.store().entries("agreed")]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"ran": ran, "source": launch.last_source, "stored": stored,
                   "alone": decide({i: rank_ms(rank, i) for i in range(N)})}, f)
    dist.destroy_process_group()
