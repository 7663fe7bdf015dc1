"""Host time the autotune layer adds on a cache hit (no GPU needed).

Times, per call: the bare launch callable; the same callable behind
``flyautotune.autotune`` on a memory hit; and, when Triton is installed and a
GPU is present, ``triton.autotune``'s cache hit on a trivial kernel for scale.
Prints a markdown table (median of several timeit repeats, microseconds).

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


def per_call_us(fn, *args, number=20000, repeat=7):
    fn(*args)
    runs = timeit.repeat(lambda: fn(*args), number=number, repeat=repeat)
    return statistics.median(runs) / number * 1e6


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
    base = rows[0][1]
    print(f"device: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"torch {torch.__version__}, flyautotune {fat.__version__}, {datetime.date.today()}")
    print()
    print("| path | µs per call | added over bare |")
    print("|---|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.2f} | {us - base:+.2f} |")


if __name__ == "__main__":
    sys.exit(main())
