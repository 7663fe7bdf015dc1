"""Does where the input copies lie decide a config's speed? One shape, a few configs and QuACK, timed the
bench's way (CUDA-graph replay, one input copy a call, each call allocating its output) over input copies
placed two ways:

* ``set K``: a fresh set of separately allocated copies (as the bench makes them), after a spacer
  allocation of K MiB + K * 4 KiB that moves the allocator on;
* ``offset B``: the copies carved from one buffer, each starting B bytes past a 2 MiB boundary.

If a config reads differently from one ``set`` to the next but alike at every ``offset``, its speed follows
the physical pages it lands on, not the address's low bits; if it follows ``offset``, it names the bits.
If it reads alike everywhere in one process but differently from one process to the next (what the H200
showed at 4096 x 1000 bf16), two more things say whether the process differs: each config's compiled
binaries as launched (a digest of each cubin and its registers, from ``bench/rmsnorm.py``'s
``kernel_report``: the same in every process unless the compile differs),
and the GPU's clocks, power and temperature sampled by ``nvidia-smi`` every 50 ms while each placement
is timed (``--no-clocks`` leaves them out; without ``nvidia-smi`` the probe says so and goes on).

    python bench/placement_probe.py --out DIR [--shape 4096x1000:bf16] [--sets 4] [--offsets 0,256,4096,65536]
                                    [--copies 199] [--extra 128x4:0,...]

Prints one table (GB/s per placement and implementation) and writes placement_probe.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PAGE = 2 << 20
#: What ``nvidia-smi`` samples while a placement is timed.
CLOCK_QUERY = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu")


def parse_samples(text):
    """``{field: [value, ...]}`` of ``nvidia-smi --format=csv,noheader,nounits`` lines of
    :data:`CLOCK_QUERY`; lines that do not parse (a field ``[N/A]``, a cut last line) are skipped."""
    got = {f: [] for f in CLOCK_QUERY}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            values = [float(p) for p in parts]
        except ValueError:
            continue
        if len(values) == len(CLOCK_QUERY):
            for f, v in zip(CLOCK_QUERY, values):
                got[f].append(v)
    return got


class ClockSampler:
    """``nvidia-smi`` sampling :data:`CLOCK_QUERY` of one GPU every 50 ms inside a ``with`` block;
    :attr:`summary` is then ``{field: [lowest, median, highest]}`` (empty without ``nvidia-smi``)."""

    def __init__(self, gpu):
        self.gpu, self.proc, self.summary = gpu, None, {}

    def __enter__(self):
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "-i", str(self.gpu), "--query-gpu=" + ",".join(CLOCK_QUERY),
                                          "--format=csv,noheader,nounits", "-lms", "50"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError as exc:
            print(f"clocks not sampled: {exc}", flush=True)
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            out, _ = self.proc.communicate(timeout=10)
            self.summary = {f: [min(v), statistics.median(v), max(v)]
                            for f, v in parse_samples(out).items() if v}
        return False


def gpu_id(torch, device):
    """What ``nvidia-smi -i`` takes for ``device``: its UUID where torch has it (CUDA_VISIBLE_DEVICES may
    renumber devices), else its index."""
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    return f"GPU-{uuid}" if uuid is not None and not str(uuid).startswith("GPU-") else (uuid or device.index or 0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shape", default="4096x1000:bf16")
    ap.add_argument("--sets", type=int, default=4, help="fresh sets of separately allocated copies")
    ap.add_argument("--offsets", default="0,256,4096,65536", help="byte offsets past a 2 MiB boundary")
    ap.add_argument("--copies", type=int, default=199, help="input copies a graph replay reads (one a call)")
    ap.add_argument("--no-clocks", action="store_true", help="do not sample the GPU's clocks with nvidia-smi")
    ap.add_argument("--extra", default="128x4:0", help="configs besides the default and the search's pick "
                    "(space_probe's syntax: THREADSxROWS:POLICY[:KNOB=VALUE...]; other knobs as the default's)")
    args = ap.parse_args(argv)
    from space_probe import describe, extra_config, parse_extra
    try:
        extra = parse_extra(args.extra)
        offsets = [int(v) for v in filter(None, args.offsets.split(","))]
    except ValueError as exc:
        ap.error(str(exc))
    if args.copies < 2:
        ap.error(f"--copies: {args.copies}: at least 2 (one graph replay reads each once)")
    if args.sets < 0:
        ap.error(f"--sets: {args.sets}: 0 or more")
    bad = [b for b in offsets if not 0 <= b < PAGE or b % 16]
    if bad:
        ap.error(f"--offsets: {bad}: byte offsets past a 2 MiB boundary, multiples of 16 under {PAGE}")
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("FLYAUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="fat-placement-"))
    import torch
    from rmsnorm import (EPS, gbps_of, graph_time, kernel_report, load_quack, save_rows, searched_inputs,
                         shape_spec)

    from flyautotune_rmsnorm.api import launch
    from flyautotune_rmsnorm.space import default_config

    M, N, ds = shape_spec(args.shape)
    x, w, picked = searched_inputs(M, N, ds)
    default = default_config(M, N, ds).kwargs
    configs = {"default " + describe(default): default, "picked " + describe(picked): picked}
    for item in extra:
        kw = extra_config(default, item)  # other knobs as the default's (the pick's may be another body)
        configs.setdefault(describe(kw), kw)
    fns = {name: (lambda x, w, kw=kw: launch(x, w, torch.empty_like(x), M, N, ds, EPS, N, N, None, **kw))
           for name, kw in configs.items()}
    quack = load_quack()
    if quack is not None:
        fns["quack"] = lambda x, w: quack(x, w, eps=EPS)[0]
    fns["clone"] = lambda x, w: x.clone()

    gpu = gpu_id(torch, x.device)

    def timed(label, xs):
        sampler = ClockSampler(gpu)
        with contextlib.nullcontext() if args.no_clocks else sampler:
            ms = {name: graph_time(fn, xs, w, reps_ms=60, min_replay_ms=0) for name, fn in fns.items()}
        row = {"placement": label, "copies": len(xs), "gbps": gbps_of(ms, M, N, ds), "clocks": sampler.summary}
        print(label, {k: round(v) for k, v in row["gbps"].items()}, row["clocks"], flush=True)
        return row

    rows = []
    spacers = []
    for k in range(args.sets):
        spacers.append(torch.empty((k + 1) * (1 << 20) + k * 4096, dtype=torch.uint8, device=x.device))
        xs = [x.clone() for _ in range(args.copies)]
        rows.append(timed(f"set {k}", xs))
        del xs
        torch.cuda.empty_cache()  # back to the driver: the next set is mapped afresh, not the cached blocks
    spacers.clear()
    torch.cuda.empty_cache()
    nbytes = x.numel() * x.element_size()
    stride = -(-nbytes // PAGE) * PAGE  # whole 2 MiB pages a copy
    big = torch.empty(args.copies * stride + PAGE * 2, dtype=torch.uint8, device=x.device)
    base = (-big.data_ptr()) % PAGE  # the first 2 MiB boundary inside the buffer
    for off in offsets:
        xs = []
        for i in range(args.copies):
            start = base + i * stride + off
            xi = big[start:start + nbytes].view(x.dtype).view(M, N)
            xi.copy_(x)
            xs.append(xi)
        rows.append(timed(f"offset {off}", xs))
        del xs
    binaries = {name: ", ".join(f"{k['cubin']} ({k['n_regs']} registers)" for k in kernel_report(kw, N, ds))
                for name, kw in configs.items()}  # what each config launched above
    save_rows(args.out, "placement_probe.json", [{"binaries": binaries}] + rows)
    names = list(fns)
    print(f"\n### {args.shape}, GB/s per placement ({args.copies} input copies a replay)\n")
    print("| placement | " + " | ".join(names) + " | SM MHz (lowest–highest) | W (median) |")
    print("|---|" + "---|" * (len(names) + 2))
    for r in rows:
        sm, power = r["clocks"].get("clocks.sm"), r["clocks"].get("power.draw")
        print(f"| {r['placement']} | " + " | ".join(f"{r['gbps'][n]:.0f}" for n in names)
              + f" | {f'{sm[0]:.0f}–{sm[2]:.0f}' if sm else '—'} | {f'{power[1]:.0f}' if power else '—'} |")
    print("\nBinaries: " + "; ".join(f"{n}: {i}" for n, i in binaries.items()))


if __name__ == "__main__":
    sys.exit(main())
