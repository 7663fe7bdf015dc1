"""Many threads, one cold key: one search, one winner, no shared state mutated."""

import threading

import torch

import flyautotune as fat


def test_sixteen_threads_cold_key_run_one_search(pm):
    bench_calls = []
    lock = threading.Lock()

    def bench(fn, setup=None):
        with lock:
            bench_calls.append(1)
            n = len(bench_calls)
        fn()
        return {1: 2.0, 2: 1.0, 3: 3.0}.get(n, 9.0)

    @fat.autotune(configs=[fat.Config(B=b) for b in (1, 2, 3)], key=["n"], do_bench=bench,
                  plugin_manager=pm, name="t_threads")
    def launch(x, n, B=None):
        return B, fat.current_hints()

    barrier = threading.Barrier(16)
    results = []

    def worker(i):
        barrier.wait()
        with fat.compile_hints(num_warps=4):
            results.append(launch(torch.zeros(4), 4))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert launch.search_count == 1
    assert len(bench_calls) == 3
    assert results == [(2, {"num_warps": 4})] * 16


def test_hints_of_concurrent_callers_do_not_leak(pm, counting_bench):
    @fat.autotune(configs=[fat.Config(B=1)], key=[], plugin_manager=pm, name="t_leak")
    def launch(B=None):
        return fat.current_hints()

    out = {}

    def worker(w):
        with fat.compile_hints(num_warps=w):
            for _ in range(200):
                got = launch()
                if got != {"num_warps": w}:
                    out[w] = got
                    return
        out.setdefault(w, "ok")

    threads = [threading.Thread(target=worker, args=(w,)) for w in (1, 2, 4, 8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {1: "ok", 2: "ok", 4: "ok", 8: "ok"}


def test_a_tuner_called_again_for_the_key_it_is_picking_says_so_instead_of_waiting_forever(pm):
    """A ``check=`` that runs the tuned launch itself as the reference: the inner call of the key being
    searched cannot get a config, and waiting for the search it runs in would never end."""
    def check(result, x, n):
        return bool(torch.equal(result, launch(x, n)))

    @fat.autotune(configs=[fat.Config(B=1), fat.Config(B=2)], key=["n"], plugin_manager=pm, name="t_reenter",
                  check=check, do_bench=lambda fn, setup=None: (fn(), 1.0)[1])
    def launch(x, n, B=None):
        return x * 2

    got = []
    worker = threading.Thread(target=lambda: got.append(_raised(launch, torch.ones(4), 4)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the search waited forever on its own key"
    assert isinstance(got[0], fat.AutotuneError)
    assert "check(...) raised RuntimeError: t_reenter: called again, with the same key, while it picks" in str(got[0])


def _raised(fn, *args):
    try:
        fn(*args)
    except Exception as exc:
        return exc
    return None
