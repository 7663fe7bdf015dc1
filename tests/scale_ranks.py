"""Rank bodies for the agreement tests (spawned by torch.multiprocessing; results go to JSON files)."""

from __future__ import annotations

import datetime
import importlib
import json
import logging
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


def _leave(rank: int, out: str, report: dict, caught: list) -> None:
    """Write this rank's report (with flyautotune's warnings) once every rank is done, then exit at once:
    without the fix under test a tuning collective may be left pending, and a normal exit would wait on it."""
    import torch.distributed as dist

    report["warnings"] = [str(w.message) for w in caught if "flyautotune" in str(w.message)]
    dist.barrier()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.barrier()
    os._exit(0)


def _tuner(rank: int, out: str, **options):
    """A tuner whose candidate ``B`` times as ``rank_ms(rank, B)`` on this rank, with its own store per rank."""
    os.environ["FLYAUTOTUNE_CACHE_DIR"] = os.path.join(out, f"store{rank}")
    import flyautotune as fat

    pm = fat.build_plugin_manager(entry_points=False)

    options.setdefault("do_bench", lambda fn, setup=None: rank_ms(rank, fn()))

    @fat.autotune(configs=[fat.Config(B=b) for b in range(N)], key=["n"], plugin_manager=pm, name="agreed",
                  **options)
    def launch(x, n, B=None):
        return B

    return launch


def own_answers_scenario(rank: int, world: int, port: int, out: str) -> None:
    """A tuner with a default: what each rank holds alone (memory, store) gives way to rank 0's answer."""
    import torch
    import torch.distributed as dist

    import flyautotune as fat

    _init(rank, world, port)
    launch = _tuner(rank, out, default=lambda **_: fat.Config(B=0))
    x = torch.zeros(2)
    report: dict = {}
    # n=2: only rank 1 searched alone (its winner in its store and memory); rank 0 would run the default
    if rank == 1:
        report["alone2"] = launch.select(x, 2, force=True).config.kwargs["B"]
    # n=3: each rank searched alone and stored its own winner
    report["alone3"] = launch.select(x, 3, force=True).config.kwargs["B"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fat.distributed(timeout_s=20):
            report["ran2"], report["source2"] = launch(x, 2), launch.last_source
            report["ran3"], report["source3"] = launch(x, 3), launch.last_source
            report["again3"], report["source_again3"] = launch(x, 3), launch.last_source
            # the ranks ask about different keys: both run the default, and the group stays usable
            report["stray"], report["source_stray"] = launch(x, 4 + rank), launch.last_source
            report["forced7"] = launch.select(x, 7, force=True).config.kwargs["B"]
    report["warnings"] = [str(w.message) for w in caught if "flyautotune" in str(w.message)]
    own = importlib.import_module("flyautotune.scale.distributed")._own["group"][1]
    report["own_group_live"] = own() is not None
    dist.destroy_process_group()
    # flyautotune does not keep its group alive past the job's: torn down at exit, gloo's threads abort
    report["own_group_released"] = own() is None
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)


def silent_rank_scenario(rank: int, world: int, port: int, out: str, timeout_s: float) -> None:
    """Rank 1 enters the block but never makes the tuning call; the job's own collective still works."""
    import torch
    import torch.distributed as dist

    import flyautotune as fat

    _init(rank, world, port)
    launch = _tuner(rank, out)  # no default: a cold key is tuned by the group
    report: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fat.distributed(timeout_s=timeout_s):
            if rank == 0:
                t0 = time.monotonic()
                report["ran"], report["source"] = launch(torch.zeros(2), 2), launch.last_source
                report["took"] = time.monotonic() - t0
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)  # the job's own next collective, on the default group
    report["sum"] = float(total[0])
    report["warnings"] = [str(w.message) for w in caught if "flyautotune" in str(w.message)]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.barrier()
    os._exit(0)  # the tuning collective rank 1 never joined is still pending on the tuning group


def checked_search_scenario(rank: int, world: int, port: int, out: str) -> None:
    """The group's search checks outputs and restores inputs as a search of one process does: candidate B=3
    is the fastest but computes the wrong answer; the launch adds to ``acc`` in place (``restore_value``)."""
    import torch
    import torch.distributed as dist

    import flyautotune as fat

    _init(rank, world, port)
    seen: dict = {}

    def bench(fn, setup=None):
        if setup is not None:
            setup()
        fn()
        return {3: 0.5, 4: 0.7}.get(seen["B"], 1.0 + seen["B"] / 10.0)

    os.environ["FLYAUTOTUNE_CACHE_DIR"] = os.path.join(out, f"store{rank}")
    pm = fat.build_plugin_manager(entry_points=False)

    @fat.autotune(configs=[fat.Config(B=b) for b in range(N)], key=["n"], plugin_manager=pm, name="checked",
                  restore_value=["acc"], do_bench=bench)
    def launch(x, acc, n, B=None):
        seen["B"] = B
        acc.add_(x * (3 if B == 3 else 2))

    x, acc = torch.ones(4), torch.zeros(4)
    with fat.distributed(timeout_s=20):
        launch(x, acc, 2)
    report = {"ran": seen["B"], "source": launch.last_source, "acc": acc.tolist(),
              "stored": [e.config["kwargs"] for e in launch.store().entries("checked")]}
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


def slow_share_scenario(rank: int, world: int, port: int, out: str, timeout_s: float) -> None:
    """Rank 1's share of the group's search takes longer than the bound: rank 0 gives up in the gather of the
    timings; rank 1 gets there later, when rank 0's share of that gather is already sent."""
    import torch
    import torch.distributed as dist

    import flyautotune as fat

    _init(rank, world, port)
    seen: dict = {}

    def bench(fn, setup=None):
        b = fn()
        if rank == 1 and b == 1:
            time.sleep(timeout_s + 2)
        return 0.5 if b == 3 else 1.0 + b / 10.0  # B=3 wins the search, over B=0 (the fallback)

    os.environ["FLYAUTOTUNE_CACHE_DIR"] = os.path.join(out, f"store{rank}")
    pm = fat.build_plugin_manager(entry_points=False)

    @fat.autotune(configs=[fat.Config(B=b) for b in range(N)], key=["n"], plugin_manager=pm, name="slow",
                  do_bench=bench)
    def launch(x, n, B=None):
        seen["B"] = B
        return B

    report: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fat.distributed(timeout_s=timeout_s):
            report["ran"], report["source"] = launch(torch.zeros(2), 2), launch.last_source
    dist.barrier()  # on the job's own group: rank 0 is still there while rank 1 gathers
    report["warnings"] = [str(w.message) for w in caught if "flyautotune" in str(w.message)]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.barrier()
    os._exit(0)  # the tuning collectives rank 0 left are still pending on the tuning group


def refused_scenario(rank: int, world: int, port: int, out: str, timeout_s: float) -> None:
    """Rank 0's stored winner (B=5) passes every rank's check, but rank 0's launcher refuses it at launch."""
    import torch
    import torch.distributed as dist

    import flyautotune as fat

    _init(rank, world, port)
    refuse = {"on": False}
    os.environ["FLYAUTOTUNE_CACHE_DIR"] = os.path.join(out, f"store{rank}")
    pm = fat.build_plugin_manager(entry_points=False)

    @fat.autotune(configs=[fat.Config(B=b) for b in range(N)], key=["n"], plugin_manager=pm, name="refused",
                  default=lambda **_: fat.Config(B=0), do_bench=lambda fn, setup=None: 0.5 if fn() == 5 else 1.0)
    def launch(x, n, B=None):
        if refuse["on"] and rank == 0 and B == 5:
            raise fat.IncompatibleConfigError("B=5 needs more shared memory than this device has")
        return B

    logged: list = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("flyautotune").addHandler(handler)
    x = torch.zeros(2)
    report: dict = {}
    if rank == 0:  # an earlier job stored B=5 on rank 0
        report["stored"] = launch.select(x, 3, force=True).config.kwargs["B"]
        launch.clear()
    refuse["on"] = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fat.distributed(timeout_s=timeout_s):
            report["ran3"], report["source3"] = launch(x, 3), launch.last_source
            report["again3"], report["source_again3"] = launch(x, 3), launch.last_source
            report["ran4"], report["source4"] = launch(x, 4), launch.last_source  # the group's next key
    report["warnings"] = [str(w.message) for w in caught if "flyautotune" in str(w.message)]
    report["in_store"] = [e.config["kwargs"] for e in launch.store().entries("refused")]
    report["logged"] = logged
    dist.barrier()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.barrier()
    os._exit(0)  # without the fix a tuning collective is left pending


def forced_on_one_rank_scenario(rank: int, world: int, port: int, out: str) -> None:
    """``FLYAUTOTUNE=1`` on rank 1 only; rank 0 runs its default on a miss, so the group does not search."""
    import torch

    import flyautotune as fat

    _init(rank, world, port)
    if rank == 1:
        os.environ["FLYAUTOTUNE"] = "1"
    launch = _tuner(rank, out, default=lambda **_: fat.Config(B=0))
    x = torch.zeros(2)
    report: dict = {"ran": [], "sources": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fat.distributed(timeout_s=20):
            for n in (3, 3, 3, 4):  # keyword calls and select() look the key up in the tuner's memory each time
                report["ran"].append(launch(x, n=n))
                report["sources"].append(launch.last_source)
            report["select"] = launch.select(x, 3).source
    _leave(rank, out, report, caught)


def candidates_scenario(rank: int, world: int, port: int, out: str) -> None:
    """Spaces that differ between the ranks: listed in another order (n=3), raising on rank 1 (n=4, n=5)."""
    import torch
    import torch.distributed as dist

    import flyautotune as fat

    _init(rank, world, port)

    def space(n, **_):
        if n == 3:  # the same configs, in a rank's own order (as a list made from a set can be)
            return [fat.Config(B=b) for b in (range(N) if rank == 0 else reversed(range(N)))]
        if n in (4, 5) and rank == 1:
            raise RuntimeError("no space for n=%d on this rank" % n)
        return [fat.Config(B=b) for b in range(N)]

    os.environ["FLYAUTOTUNE_CACHE_DIR"] = os.path.join(out, f"store{rank}")
    pm = fat.build_plugin_manager(entry_points=False)

    @fat.autotune(configs=space, key=["n"], plugin_manager=pm, name="agreed", default=lambda **_: fat.Config(B=0),
                  do_bench=lambda fn, setup=None: rank_ms(rank, fn()))
    def launch(x, n, B=None):
        return B

    x = torch.zeros(2)
    report: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fat.distributed(timeout_s=20):
            # forced: the group searches, and finds that the ranks list the candidates in other orders
            sel = launch.select(x, 3, force=True)
            report["n3"] = (sel.config.kwargs["B"], sel.source)
            # not forced: rank 0 runs the default; no rank needs the space, as outside the block
            report["n4"] = (launch(x, 4), launch.last_source)
            # forced: rank 1's space raises there; rank 0 runs the default
            try:
                sel = launch.select(x, 5, force=True)
                report["n5"] = (sel.config.kwargs["B"], sel.source)
            except RuntimeError as exc:
                report["n5"] = str(exc)
            # the group is still in step: the next search takes one winner from both ranks' timings
            report["n6"] = launch.select(x, 6, force=True).config.kwargs["B"]
    report["warnings"] = [str(w.message) for w in caught if "flyautotune" in str(w.message)]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


def subgroup_scenario(rank: int, world: int, port: int, out: str, timeout_s: float) -> None:
    """Every step: the job's block, and inside it a block of a subgroup that only rank 1 is in (and enters)."""
    import torch
    import torch.distributed as dist

    import flyautotune as fat

    _init(rank, world, port)
    sub = dist.new_group(ranks=[1], backend="gloo")  # a collective of every rank, member or not
    launch = _tuner(rank, out, default=lambda **_: fat.Config(B=0))
    x = torch.zeros(2)
    report: dict = {"alone": launch.select(x, 3, force=True).config.kwargs["B"], "steps": []}
    launch.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            step = {}
            with fat.distributed(timeout_s=timeout_s):
                step["job"] = (launch(x, 3), launch.last_source)
                if rank == 1:
                    with fat.distributed(group=sub, timeout_s=timeout_s):
                        step["sub"] = (launch(x, 3), launch.last_source)
                step["job_after"] = (launch(x, 3), launch.last_source)
            report["steps"].append(step)
    _leave(rank, out, report, caught)


def non_member_scenario(rank: int, world: int, port: int, out: str) -> None:
    """Rank 1 enters the block of a subgroup it is not in."""
    import torch
    import torch.distributed as dist

    import flyautotune as fat

    _init(rank, world, port)
    sub = dist.new_group(ranks=[0], backend="gloo")
    launch = _tuner(rank, out, default=lambda **_: fat.Config(B=0))
    report: dict = {}
    try:
        with fat.distributed(group=sub, timeout_s=20):
            report["ran"] = launch(torch.zeros(2), 3)
    except ValueError as exc:
        report["error"] = str(exc)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


def threads_scenario(rank: int, world: int, port: int, out: str, timeout_s: float) -> None:
    """Two threads on each rank tune in blocks of the same group at once; rank 0 holds a winner for every key,
    so every agreement has several collectives (the key, rank 0's answer, every rank's check of it)."""
    import threading

    import torch
    import torch.distributed as dist

    import flyautotune as fat

    _init(rank, world, port)
    launch = _tuner(rank, out, default=lambda **_: fat.Config(B=0),
                    do_bench=lambda fn, setup=None: 0.5 if fn() == 2 else 1.0)
    x = torch.zeros(2)
    keys = {"a": list(range(10, 16)), "b": list(range(20, 26))}
    if rank == 0:
        for ns in keys.values():
            for n in ns:
                launch.select(x, n, force=True)  # B=2 stored for every key
        launch.clear()
    ran: dict = {}
    with fat.distributed(timeout_s=timeout_s):  # the group made on the main thread, where every rank is
        pass

    def work(name):
        with fat.distributed(timeout_s=timeout_s):
            for n in keys[name]:
                ran[n] = launch(x, n)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=work, args=(name,)) for name in keys]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    report = {"ran": ran, "warnings": [str(w.message) for w in caught if "flyautotune" in str(w.message)]}
    dist.barrier()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.barrier()
    os._exit(0)  # without the fix a tuning collective may be left pending


def reinit_scenario(rank: int, world: int, port: int, out: str, timeout_s: float) -> None:
    """A job ends (destroy_process_group) and another starts in the same processes (init_process_group)."""
    import torch
    import torch.distributed as dist

    import flyautotune as fat

    _init(rank, world, port)
    launch = _tuner(rank, out, default=lambda **_: fat.Config(B=0))
    x = torch.zeros(2)
    report: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fat.distributed(timeout_s=timeout_s):
            if rank == 0:  # only rank 0 tunes n=3 in the first job (a collective of its own: it times out)
                report["first"] = (launch(x, 3), launch.last_source)
        report["first_warnings"] = len(caught)
        dist.barrier()
        dist.destroy_process_group()
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port + 1}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=30))
        del caught[:]
        with fat.distributed(timeout_s=timeout_s):  # the new job's group: agreement on again, nothing carried
            report["n3"] = (launch(x, 3), launch.last_source)
            report["n4"] = (launch(x, 4), launch.last_source)
        report["warnings"] = [str(w.message) for w in caught if "flyautotune" in str(w.message)]
    dist.barrier()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.barrier()
    os._exit(0)  # the first job's timed-out collective is still pending


#: Each rank's device: rank r times every config ``SPEED[r]`` times as long as rank 0 does (a faster GPU).
SPEED = (1.0, 0.8, 0.9, 0.7)
#: What each config takes on rank 0, side by side, per case (configs not named take 1.0 ms).
RETIME_CASES = {
    # every challenger is 2% slower than the default; those timed on the faster devices look fastest
    "flattered": {b: 1.02 for b in range(1, N)},
    # B=5 (timed by rank 1) is 10% faster than the default on every device
    "faster": {5: 0.9},
    # B=1 is 0.4% faster than the default on every device, below what a bare number (no spread) can show
    "slight": {1: 0.996},
    # B=3 looks fastest and is, but fails when rank 1 times it again; B=5 is 10% faster
    "flaky": {3: 0.8, 5: 0.9},
    # the default fails when rank 1 times it again; B=2 is the fastest of the rest
    "default flaky": {1: 0.95, 2: 0.9},
    # on a slower rank 1 (RETIME_SPEED): B=5, its share, is the fastest; B=2 and B=4 (rank 0's) beat its time there
    "hidden": {2: 0.97, 4: 0.98, 5: 0.95},
}
#: Devices per case where they are not ``SPEED``: rank 1's is 10% slower.
RETIME_SPEED = {"hidden": (1.0, 1.1, 1.0, 1.0)}


def retime_scenario(rank: int, world: int, port: int, out: str, case: str, via: str = "hook", n: int = N) -> None:
    """A forced search of the group with a default, timed through a benchmark hook (``via="hook"``) or the
    tuner's own ``do_bench=`` (``via="do_bench"``, a bare number of ms): config B takes
    ``RETIME_CASES[case].get(B, 1.0) * speed`` ms on this rank (``speed``: ``RETIME_SPEED[case][rank]``, else
    ``SPEED[rank]``); the configs are B=0 (the default) to
    B=n-1."""
    import torch

    import flyautotune as fat
    from flyautotune.measurement import Measurement

    _init(rank, world, port)
    calls: dict = {}
    speed = RETIME_SPEED.get(case, SPEED)[rank]

    class RankTimes:
        @fat.hookimpl(tryfirst=True)
        def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
            if setup is not None:
                setup()
            b = fn()
            calls[b] = calls.get(b, 0) + 1
            if case == "flaky" and rank == 1 and b == 3 and calls[b] > 1:
                raise RuntimeError("B=3 lost its device on the re-run")
            if case == "default flaky" and rank == 1 and b == 0 and calls[b] > 1:
                raise RuntimeError("the default lost its device on the re-run")
            return Measurement(RETIME_CASES[case].get(b, 1.0) * speed, spread=0.001, method="fixed", reps=rep)

    def do_bench(fn, setup=None):
        if setup is not None:
            setup()
        b = fn()
        calls[b] = calls.get(b, 0) + 1
        return RETIME_CASES[case].get(b, 1.0) * speed

    os.environ["FLYAUTOTUNE_CACHE_DIR"] = os.path.join(out, f"store{rank}")
    pm = fat.build_plugin_manager(entry_points=False)
    pm.register(RankTimes())

    @fat.autotune(configs=[fat.Config(B=b) for b in range(n)], key=["n"], plugin_manager=pm, name="retimed",
                  default=lambda **_: fat.Config(B=0), do_bench=do_bench if via == "do_bench" else None)
    def launch(x, n, B=None):
        return B

    rounds: list = []
    listener = fat.add_listener(lambda e: rounds.append(e["round"]) if e["event"] == "retime" else None)
    logged: list = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("flyautotune").addHandler(handler)
    logging.getLogger("flyautotune").setLevel(logging.INFO)
    x = torch.zeros(2)
    report: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.monotonic()
        with fat.distributed(timeout_s=20):
            sel = launch.select(x, 2, force=True)
            report["ran"] = launch(x, 2)
        report["took"] = time.monotonic() - t0
    fat.remove_listener(listener)
    report.update(selected=sel.config.kwargs["B"], source=sel.source, margin=sel.margin, noise=sel.noise,
                  rounds=rounds, calls=calls, logged=logged,
                  stored=[{"B": e.config["kwargs"]["B"], "margin": e.provenance.get("margin"),
                           "noise": e.provenance.get("noise")} for e in launch.store().entries("retimed")])
    _leave(rank, out, report, caught)


def retime_agree_scenario(rank: int, world: int, port: int, out: str) -> None:
    """``agree`` with a re-timing step: a rank whose re-timing raises, a default that fails on one rank, and a
    challenger every rank finds faster."""
    from flyautotune.scale.distributed import agree

    _init(rank, world, port)

    def finalists(timings):
        return [0] + sorted((i for i in timings if i != 0), key=lambda i: (timings[i], i))[:2]

    def retimed(behaviour):
        def retime(order):
            if behaviour == "raises" and rank == 1:
                raise RuntimeError("the device went away")
            if behaviour == "default fails" and rank == 1:
                return {}
            return {i: ((0.0, 0.0) if i == 0 else (0.05 if i == order[-1] else -0.01, 0.01)) for i in order}
        return retime

    report: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for behaviour in ("raises", "default fails", "wins"):
            a = agree(key=behaviour, n_candidates=N, time_some=lambda ix: {i: rank_ms(rank, i) for i in ix},
                      decide=decide, stored=None, timeout_s=20, finalists=finalists, retime=retimed(behaviour))
            gathered = {i: rank_ms(i % world, i) for i in range(N)}
            report[behaviour] = {"winner": a.winner, "margin": a.margin, "noise": a.noise, "failed": a.failed,
                                 "finalists": finalists(gathered)}
    _leave(rank, out, report, caught)


#: What each candidate takes on a device as fast as rank 0's, in ``reference_agree_scenario``: B=1 (rank 1's
#: share) is the fastest, B=2 (rank 0's) the next.
REFERENCE_MS = {0: 1.0, 1: 0.9, 2: 0.95}


def reference_agree_scenario(rank: int, world: int, port: int, out: str) -> None:
    """``agree`` with ``reference=0`` and no re-timing (``decide`` takes the fastest gathered timing), where rank
    1's device is 20% slower than the others': as measured, B=1 (rank 1's) looks slower than B=2 (rank 0's)."""
    from flyautotune.scale.distributed import agree

    _init(rank, world, port)
    logged: list = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("flyautotune.scale").addHandler(handler)
    logging.getLogger("flyautotune.scale").setLevel(logging.INFO)
    speed = 1.2 if rank == 1 else 1.0
    report: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for case in ("relative", "reference fails on rank 1", "as measured"):
            timed: list = []

            def time_some(indices):
                timed.append(list(indices))
                return {i: (None if case == "reference fails on rank 1" and rank == 1 and i == 0
                            else REFERENCE_MS.get(i, 1.0 + i / 100) * speed) for i in indices}

            seen: list = []

            def decide(timings):
                seen.append(dict(timings))
                return min(sorted(timings), key=lambda i: timings[i])

            del logged[:]
            a = agree(key=case, n_candidates=N, time_some=time_some, decide=decide, stored=None, timeout_s=20,
                      reference=None if case == "as measured" else 0)
            report[case] = {"winner": a.winner, "failed": a.failed, "timed": timed, "seen": seen,
                            "logged": logged[:]}
    _leave(rank, out, report, caught)


def slower_rank_tuner_scenario(rank: int, world: int, port: int, out: str) -> None:
    """A forced search of the group for a tuner without a default (no re-timing: the fastest gathered timing
    wins), where rank 1's device is 20% slower: candidate B takes ``REFERENCE_MS.get(B, 1 + B / 100)`` ms on
    rank 0's."""
    import torch

    import flyautotune as fat

    _init(rank, world, port)
    speed = 1.2 if rank == 1 else 1.0
    calls: list = []

    def do_bench(fn, setup=None):
        b = fn()
        calls.append(b)
        return REFERENCE_MS.get(b, 1.0 + b / 100) * speed

    launch = _tuner(rank, out, do_bench=do_bench)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fat.distributed(timeout_s=20):
            sel = launch.select(torch.zeros(2), 2, force=True)
    report = {"selected": sel.config.kwargs["B"], "source": sel.source, "calls": calls,
              "stored": [e.config["kwargs"]["B"] for e in launch.store().entries("agreed")]}
    _leave(rank, out, report, caught)


#: ``budget_scenario``: each rank's budget, and what B=1 and B=2 (and, in the "spent at once" case, the default
#: B=0) take to time: far more than the budget, far more than the rest of a rank's first steps.
BUDGET_S = 0.3
SLOW_S = 0.6


def budget_scenario(rank: int, world: int, port: int, out: str) -> None:
    """Forced searches of the group with ``max_search_s=BUDGET_S``, configs B=0 (the default) to B=6, B taking
    ``1 + B / 100`` ms: "spent later", where B=1 and B=2 (the first challenger of rank 1's and of rank 0's share)
    take ``SLOW_S`` to time, and "spent at once", where the default does."""
    import torch

    import flyautotune as fat

    _init(rank, world, port)
    os.environ["FLYAUTOTUNE_CACHE_DIR"] = os.path.join(out, f"store{rank}")
    pm = fat.build_plugin_manager(entry_points=False)
    report: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for case, slow in (("spent later", (1, 2)), ("spent at once", (0,))):
            calls: list = []
            rounds: list = []

            def do_bench(fn, setup=None, slow=slow, calls=calls):
                if setup is not None:
                    setup()
                b = fn()
                calls.append(b)
                if b in slow:
                    time.sleep(SLOW_S)
                return 1.0 + b / 100

            @fat.autotune(configs=[fat.Config(B=b) for b in range(N)], key=["n"], plugin_manager=pm,
                          name=case.replace(" ", "_"), default=lambda **_: fat.Config(B=0), do_bench=do_bench,
                          max_search_s=BUDGET_S)
            def launch(x, n, B=None):
                return B

            listener = fat.add_listener(lambda e, rounds=rounds: rounds.append(e["round"])
                                        if e["event"] == "retime" else None)
            with fat.distributed(timeout_s=20):
                sel = launch.select(torch.zeros(2), 2, force=True)
            fat.remove_listener(listener)
            report[case] = {"selected": sel.config.kwargs["B"], "source": sel.source, "calls": calls,
                            "rounds": rounds}
    _leave(rank, out, report, caught)


#: ``duplicates_scenario``: each config's time on a warm device (B=1 is 5% faster than the default); the first
#: timing of each config on a rank is ``COLD`` times that (a cold cache, clocks still rising).
WARM_MS = {0: 1.0, 1: 0.95, 2: 1.05, 3: 1.1}
COLD = 1.2


def duplicates_scenario(rank: int, world: int, port: int, out: str) -> None:
    """A forced search of the group over a space that lists the default B=0 three times (and B=2 twice): every
    rank's first timing of a config is ``COLD`` times slower than the rest (``WARM_MS``)."""
    import torch

    import flyautotune as fat

    _init(rank, world, port)
    os.environ["FLYAUTOTUNE_CACHE_DIR"] = os.path.join(out, f"store{rank}")
    pm = fat.build_plugin_manager(entry_points=False)
    calls: list = []

    def do_bench(fn, setup=None):
        if setup is not None:
            setup()
        b = fn()
        calls.append(b)
        return WARM_MS[b] * (COLD if calls.count(b) == 1 else 1.0)

    space = [0, 1, 0, 2, 0, 3, 2]

    @fat.autotune(configs=[fat.Config(B=b) for b in space], key=["n"], plugin_manager=pm, name="duplicates",
                  default=lambda **_: fat.Config(B=0), do_bench=do_bench)
    def launch(x, n, B=None):
        return B

    finalists: list = []
    listener = fat.add_listener(lambda e: finalists.append(sorted(f["kwargs"]["B"] for f in e["finalists"]))
                                if e["event"] == "retime" else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fat.distributed(timeout_s=20):
            sel = launch.select(torch.zeros(2), 2, force=True)
    fat.remove_listener(listener)
    report = {"selected": sel.config.kwargs["B"], "source": sel.source, "margin": sel.margin,
              "finalists": finalists, "calls": calls}
    _leave(rank, out, report, caught)
