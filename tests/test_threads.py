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
