"""Host time of a `flyautotune` command that needs no adopter (`show`), and what loading the plugins imports.

Runs the `flyautotune` on PATH (the installed checkout) in fresh processes with an empty store, REPEAT times
each, and prints a markdown table: the command as installed, the same with the RMSNorm adopter disabled
(`FLYAUTOTUNE_DISABLE_PLUGINS=rmsnorm`: what loading costs without it), and whether building the process-wide
plugin manager imported torch, Triton and the RMSNorm kernels (`flyautotune_rmsnorm.api`).

    python bench/cli_startup.py [--repeat 5]

No GPU is needed; run it in each checkout to compare two versions on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PROBE = """
import json, sys
import flyautotune as fat
fat.plugin_manager()
print(json.dumps({m: m in sys.modules for m in ("torch", "triton", "flyautotune_rmsnorm.api")}))
"""


def timed(cmd: list, env: dict, repeat: int) -> list:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - t0)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    exe = shutil.which("flyautotune")
    if exe is None:
        ap.error("no flyautotune on PATH: install the checkout first (see the README)")
    env = dict(os.environ, FLYAUTOTUNE_CACHE_DIR=tempfile.mkdtemp(prefix="fat-startup-"))
    env.pop("FLYAUTOTUNE_DISABLE_PLUGINS", None)
    rows = [("flyautotune show", timed([exe, "show"], env, args.repeat)),
            ("flyautotune show, RMSNorm adopter disabled",
             timed([exe, "show"], dict(env, FLYAUTOTUNE_DISABLE_PLUGINS="rmsnorm"), args.repeat))]
    imported = json.loads(subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                                         check=True).stdout)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    print(f"{platform.node()} ({os.cpu_count()} cores), Python {platform.python_version()}, checkout {head}, "
          f"{args.repeat} runs each")
    print()
    print("| command | median s | min s | max s |")
    print("|---|---|---|---|")
    for name, times in rows:
        print(f"| {name} | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} |")
    print()
    print("plugin_manager() imported: " + ", ".join(f"{m} {'yes' if v else 'no'}" for m, v in imported.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
