"""Host time the autotune layer adds on a cache hit (no GPU needed).

Times, per call: the bare launch callable; the same callable behind
``flyautotune.autotune`` on a memory hit, also inside a ``compile_hints`` block
(next to the block's own cost around the bare callable); RMSNorm's shape of
tuned launch (3 tensors, 9 arguments, a ``specialize=`` hit) over its
specialized callable, also in place (the output argument is the input, as
``out=x`` passes it). Prints a markdown table (median of several timeit repeats, microseconds).

    python bench/overhead.py
"""

from __future__ import annotations

import datetime
import platform
import statistics
import sys
import timeit

import torch

import flyautotune as fat
from dispatch import calls_through
from flyautotune.tuning import fastpath, tcheck


def per_call_us(fn, *args, number=20000, repeat=7):
    """``(median, fastest)`` µs per call over ``repeat`` timeit runs: on a shared host other processes
    only ever add time, so the fastest run is the steadier figure (timeit's own advice); both are shown."""
    fn(*args)
    runs = timeit.repeat(lambda: fn(*args), number=number, repeat=repeat)
    return statistics.median(runs) / number * 1e6, min(runs) / number * 1e6


def main() -> None:
    x = torch.zeros(16, 64)
    w = torch.zeros(64)

    def launch(x, w, M, N, BLOCK=None, stream=None):
        return BLOCK

    tuned = fat.autotune(configs=[fat.Config(BLOCK=1), fat.Config(BLOCK=2)], key=["M", "N"],
                         default=lambda **a: fat.Config(BLOCK=1), name="bench_overhead")(launch)
    with_hints = fat.autotune(configs=[fat.Config(BLOCK=1, num_warps=4)], key=["M", "N"],
                              name="bench_overhead_hints")(launch)

    rows = [
        ("bare launch callable", per_call_us(launch, x, w, 16, 64, 1)),
        ("fat.autotune, memory hit (2 tensors, 2 key ints)", per_call_us(tuned, x, w, 16, 64)),
        ("fat.autotune, memory hit, config with a hint", per_call_us(with_hints, x, w, 16, 64)),
    ]

    def with_context():
        with fat.compile_hints(num_stages=2):
            return tuned(x, w, 16, 64)

    rows.append(("fat.autotune inside a compile_hints block", per_call_us(with_context)))

    def bare_in_context():
        with fat.compile_hints(num_stages=2):
            return launch(x, w, 16, 64, 1)

    rows.append(("the compile_hints block around the bare callable", per_call_us(bare_in_context)))

    # RMSNorm's shape of call: 3 tensors, 9 positional arguments, a specialized hit
    y = torch.zeros(16, 64)

    def norm(x, weight, out, M, N, dtype, eps, sx, sy, BLOCK=None, stream=None):
        return out

    def bound(x, weight, out, M, N, dtype, eps, sx, sy, stream=None):
        return out

    norm_tuned = fat.autotune(configs=[fat.Config(BLOCK=1), fat.Config(BLOCK=2)], key=["M", "N", "dtype"],
                              default=lambda **a: fat.Config(BLOCK=1), name="bench_overhead_norm",
                              specialize=lambda config, *a, **k: bound)(norm)
    nargs = (x, w, y, 16, 64, "fp32", 1e-6, 64, 64)
    rows.append(("specialized callable, 3 tensors + 6 values (RMSNorm's launch)", per_call_us(bound, *nargs)))
    rows.append(("fat.autotune over it, memory hit", per_call_us(norm_tuned, *nargs)))
    own = type(norm_tuned)
    native_call = own.__dict__.get("__call__")
    if hasattr(native_call, "fallback"):  # the C hit path: time the generated Python one it defers to, as __call__
        with calls_through(own, native_call.fallback):
            rows.append(("fat.autotune over it, memory hit, Python hit path", per_call_us(norm_tuned, *nargs)))
    class HostStream:  # a stream object of no known device: the core takes it as given (no device module on CPU)
        stream_id = 1

    side = HostStream()
    rows.append(("fat.autotune over it, memory hit, stream=", per_call_us(lambda: norm_tuned(*nargs, stream=side))))
    if hasattr(native_call, "fallback"):
        with calls_through(own, native_call.fallback):
            rows.append(("fat.autotune over it, memory hit, stream=, Python hit path",
                         per_call_us(lambda: norm_tuned(*nargs, stream=side))))
    in_place = (x, w, x) + nargs[3:]  # out=x: one tensor in two places (after the calls above: an alternation)
    rows.append(("fat.autotune over it, memory hit, in place", per_call_us(norm_tuned, *in_place)))
    if hasattr(native_call, "fallback"):
        with calls_through(own, native_call.fallback):
            rows.append(("fat.autotune over it, memory hit, in place, Python hit path",
                         per_call_us(norm_tuned, *in_place)))
    # out of place again: the key now keeps both kinds' checks, the in-place one tried first
    rows.append(("fat.autotune over it, memory hit, after in-place calls", per_call_us(norm_tuned, *nargs)))
    if hasattr(native_call, "fallback"):
        with calls_through(own, native_call.fallback):
            rows.append(("fat.autotune over it, memory hit, after in-place calls, Python hit path",
                         per_call_us(norm_tuned, *nargs)))
    base = {name: rows[0][1] for name, _ in rows}
    spec = dict(rows)["specialized callable, 3 tensors + 6 values (RMSNorm's launch)"]
    for name in ("fat.autotune over it, memory hit", "fat.autotune over it, memory hit, in place",
                 "fat.autotune over it, memory hit, Python hit path",
                 "fat.autotune over it, memory hit, in place, Python hit path",
                 "fat.autotune over it, memory hit, after in-place calls",
                 "fat.autotune over it, memory hit, after in-place calls, Python hit path",
                 "fat.autotune over it, memory hit, stream=", "fat.autotune over it, memory hit, stream=, Python hit path"):
        base[name] = spec
    print(f"device: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"torch {torch.__version__}, flyautotune {fat.__version__}, {datetime.date.today()}")
    print()
    print("| path | µs per call | added over bare | fastest run: µs per call | added over bare |")
    print("|---|---|---|---|---|")
    for name, (med, fast) in rows:
        print(f"| {name} | {med:.2f} | {med - base[name][0]:+.2f} | {fast:.2f} | {fast - base[name][1]:+.2f} |")
    timed = dict(rows)
    inside, block = timed["fat.autotune inside a compile_hints block"], timed[
        "the compile_hints block around the bare callable"]
    hit, bare = timed["fat.autotune over it, memory hit"], timed[
        "specialized callable, 3 tensors + 6 values (RMSNorm's launch)"]
    print()
    hit_path = "the C hit path" if fastpath.native_type() is not None else "the Python hit path (the C one is not built)"
    print(f"The layer on RMSNorm's shape of hit ({hit_path}): {hit[0] - bare[0]:.2f} µs (medians), {hit[1] - bare[1]:.2f} "
          f"(fastest runs); inside a compile_hints block (a hit in the block minus the block around the bare "
          f"callable): {inside[0] - block[0]:.2f} µs (medians), {inside[1] - block[1]:.2f} (fastest runs).")
    py = timed.get("fat.autotune over it, memory hit, Python hit path")
    if py is not None:
        print(f"With the Python hit path instead: {py[0] - bare[0]:.2f} µs (medians), {py[1] - bare[1]:.2f} (fastest runs).")
    kind, why = tcheck.status()
    print(f"Tensor check of the hits: {kind} ({why}).")


if __name__ == "__main__":
    sys.exit(main())
