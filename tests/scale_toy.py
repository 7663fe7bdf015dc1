"""A tiny adopter for the scale-out tests, registered as a plugin module (``plugins = ["scale_toy"]``).

Its "launch" times nothing: it returns a cost that depends on the row length and
BLOCK, so the serial run and every Ray worker pick the same winner. It takes fp32
and bf16 only. With ``SCALE_TOY_KILL`` set to a marker path, the first process that
tunes a row of 13 elements writes its pid to the marker and kills itself (a crashed worker). With
``SCALE_TOY_KILL_MID`` set likewise, the first process that times BLOCK=64 on a row of 14 elements does so:
mid-search, after two candidates were timed.
"""

from __future__ import annotations

import os
import signal

import flyautotune as fat

KILL_ENV = "SCALE_TOY_KILL"
KILL_N = 13
KILL_MID_ENV, KILL_MID_N, KILL_MID_BLOCK = "SCALE_TOY_KILL_MID", 14, 64
BLOCKS = (16, 32, 64, 128)


def cost(n: int, block: int) -> float:
    """The fake time of one launch: the best BLOCK is the one nearest n // 2."""
    return 1.0 + abs(block - n // 2) / 64.0


def _bench(fn, setup=None, **kwargs):
    if setup is not None:
        setup()
    return fn()


@fat.autotune(configs=[fat.Config(BLOCK=b) for b in BLOCKS], key=["x"], name="scale_toy", do_bench=_bench)
def launch(x, BLOCK=None):
    if x.shape[-1] == KILL_MID_N and BLOCK == KILL_MID_BLOCK:
        _die_once(KILL_MID_ENV)
    return cost(x.shape[-1], BLOCK)


def _die_once(env):
    """The first process to get here (with ``env`` naming a marker file) writes its pid there and is killed."""
    marker = os.environ.get(env)
    if marker and not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)


def example(shape, dtype, device):
    import torch

    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16}.get(dtype)
    if tdt is None:
        raise TypeError(f"scale_toy: dtype {dtype!r} is not supported; accepted: fp32, bf16")
    if len(shape) != 2:
        raise ValueError(f"scale_toy: shape {shape} must have two dimensions (rows, n)")
    if device != "meta" and shape[-1] == KILL_N:
        _die_once(KILL_ENV)
    return (torch.zeros(shape, dtype=tdt, device=device),), {}


@fat.autotune(configs=[fat.Config(BLOCK=32)], key=["x"], name="scale_one", do_bench=_bench)
def launch_one(x, BLOCK=None):
    """One candidate only: a plan has nothing to time for it."""
    return cost(x.shape[-1], BLOCK)


@fat.hookimpl
def flyautotune_register_adopters(register):
    register(fat.Adopter(name="scale_toy", tuner=launch, example=example))
    register(fat.Adopter(name="scale_one", tuner=launch_one, example=example))
