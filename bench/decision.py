"""How often a search's decision is wrong when timings wander (no GPU needed).

A benchmark plugin times four configs: the default, two challengers and one far slower. Each timing is
the config's true time times ``1 + gauss(0, sigma)`` (a GPU's clocks and neighbours move between timings
while the replays of one timing agree closely: the plugin reports a 0.1 % spread, or, through
``do_bench=``, a bare number). Many forced searches per case, each in the same process, from a seeded
generator; the table gives how often the default was replaced and how many timings a search took.

* ``tie``: both challengers as fast as the default: every replacement is a wrong decision (harmless in
  speed, but a winner that is no better, stored and shipped);
* ``win x``: one challenger ``x`` faster, the other ``x/2``: how often a real win is found;
* ``loss x``: both challengers ``x`` slower: every replacement makes the tuned kernel slower than its
  default.

    python bench/decision.py [--searches 300] [--seed 7]
"""

from __future__ import annotations

import argparse
import datetime
import logging
import platform
import random
import sys

import torch

import flyautotune as fat
from flyautotune.measurement import Measurement

CASES = [("tie", 0.0), ("win 1%", 0.01), ("win 3%", 0.03), ("win 5%", 0.05), ("loss 1%", -0.01)]
SIGMAS = [0.001, 0.003, 0.01, 0.02]


def run_case(gain: float, sigma: float, via: str, searches: int, seed: int) -> tuple:
    """``(replaced, timings a search)`` over ``searches`` forced searches."""
    rng = random.Random(seed)
    true = {1: 1.0, 2: 1.0 - gain, 3: 1.0 - gain / 2, 4: 1.2}
    timings = [0]

    def timed(b: int) -> float:
        timings[0] += 1
        return true[b] * (1 + rng.gauss(0, sigma))

    class Wander:
        @fat.hookimpl(tryfirst=True)
        def flyautotune_benchmark(self, fn, setup, target, stream, warmup, rep, rotations, cutoff_ms):
            return Measurement(timed(fn()), spread=0.001, method="wander", reps=rep)

    pm = fat.build_plugin_manager(entry_points=False)
    if via == "hook":
        pm.register(Wander())

    @fat.autotune(configs=[fat.Config(B=b) for b in (1, 2, 3, 4)], key=["n"], plugin_manager=pm,
                  name=f"decision_{via}_{gain}_{sigma}", default=lambda **_: fat.Config(B=1),
                  do_bench=None if via == "hook" else (lambda fn, setup=None: timed(fn())))
    def launch(x, n, B=None):
        return B

    x = torch.zeros(2)
    replaced = sum(launch.select(x, 2, force=True).config != fat.Config(B=1) for _ in range(searches))
    return replaced, timings[0] / searches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--searches", type=int, default=300, help="forced searches per case (default 300)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--via", choices=("hook", "do_bench", "both"), default="both")
    args = ap.parse_args()
    if args.searches < 1:
        ap.error(f"--searches {args.searches}: expected a positive count")
    logging.disable(logging.WARNING)  # a forced search logs its winner; hundreds of them say nothing here
    vias = ("hook", "do_bench") if args.via == "both" else (args.via,)
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, flyautotune {fat.__version__}, "
          f"Python {platform.python_version()}, {args.searches} searches a case, seed {args.seed}\n")
    print("| timing | sigma | " + " | ".join(name for name, _ in CASES) + " |")
    print("|---|---|" + "---|" * len(CASES))
    for via in vias:
        for sigma in SIGMAS:
            cells = []
            for _, gain in CASES:
                replaced, per = run_case(gain, sigma, via, args.searches, args.seed)
                cells.append(f"{replaced / args.searches:.1%} ({per:.0f})")
            print(f"| {via} | {sigma:.1%} | " + " | ".join(cells) + " |")
            sys.stdout.flush()
    print("\nEach cell: share of searches that replaced the default (timings a search).")


if __name__ == "__main__":
    main()
