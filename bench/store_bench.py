"""Host cost of the tuning store: cache-hit paths and cold start on a 10,000-entry store.

Run: ``python bench/store_bench.py [--entries 10000] [--repeat 7]``. Prints a markdown
table (median of ``--repeat`` runs) and the machine it ran on. CPU only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import timeit

from flyautotune import store as st
from flyautotune.store import packs, recovery

TUNER = "bench_kernel"


def key_of(i: int) -> str:
    # The shape of a real key: canonical JSON of args, dtypes, strides, backend axes, hints.
    return json.dumps(
        {"args": {"M": 64 * (i + 1), "N": 4096}, "dtypes": {"x": "bfloat16", "w": "bfloat16"},
         "strides": {"x": [2, 1], "w": [1]}, "backend": {"arch": "gfx942", "toolchain": "triton-3.9.0"},
         "source": "3f9a1c0d2b7e", "hints": {}},
        sort_keys=True, separators=(",", ":"),
    )


def config_of(i: int) -> dict:
    return {"kwargs": {"BLOCK_THREADS": 64 << (i % 5)}, "compile_hints": {"waves_per_eu": 1 + i % 4}}


def timings_of(i: int, n: int = 8) -> list:
    return [{"config": config_of(i + j), "ms": 0.01 * (j + 1), "error": None} for j in range(n)]


PROVENANCE = {"device": "AMD Instinct MI300X", "target": {"backend": "rocm", "arch": "gfx942", "warp_size": 64},
              "toolchain": "triton 3.9.0", "versions": {"flyautotune": "0.1.0"}, "search_s": 2.5}


def per_call_ns(stmt, number: int, repeat: int) -> float:
    """Median over ``repeat`` runs of the per-call time of ``stmt`` in nanoseconds."""
    runs = timeit.repeat(stmt, number=number, repeat=repeat)
    return statistics.median(runs) / number * 1e9


def fill(directory: str, n: int) -> st.TuningStore:
    store = st.TuningStore(directory)
    conn = store._conn()
    rows = [(TUNER, key_of(i), "t" + key_of(i), st.canonical_config_json(config_of(i)),
             json.dumps(timings_of(i), sort_keys=True, separators=(",", ":")),
             json.dumps(PROVENANCE, sort_keys=True, separators=(",", ":")), 1.7e9 + i) for i in range(n)]
    with recovery.transaction(conn):  # bulk setup; the timed paths below use the public API
        conn.executemany("INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?)", rows)
    store.close()
    return store


COLD = """
    import json, sys, time
    t0 = time.perf_counter()
    from flyautotune.store import TuningStore
    t1 = time.perf_counter()
    store = TuningStore(sys.argv[1])
    entry = store.get(sys.argv[2], sys.argv[3])
    t2 = time.perf_counter()
    assert entry is not None
    entries = store.entries()
    t3 = time.perf_counter()
    print(json.dumps({"import": t1 - t0, "open_get": t2 - t1, "all": t3 - t2, "n": len(entries)}))
"""


def cold(directory: str, key: str, repeat: int) -> dict:
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(COLD), directory, TUNER, key],
                             check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out))
    return {k: statistics.median(r[k] for r in runs) for k in ("import", "open_get", "all")} | {"n": runs[0]["n"]}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} logical CPUs; {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}; SQLite {sqlite3.sqlite_version}; "
            f"{datetime.date.today().isoformat()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="flyautotune-bench-") as tmp:
        os.environ[st.CACHE_DIR_ENV] = os.path.join(tmp, "store")
        store = fill(os.environ[st.CACHE_DIR_ENV], args.entries)
        key = key_of(args.entries // 2)
        store = st.get_store()

        # The autotuner's in-memory front: a dict from (call signature) to the chosen config.
        memo = {(TUNER, (4096, 8192), ("bfloat16",)): ("config", "target", "store")}
        mkey = (TUNER, (4096, 8192), ("bfloat16",))
        env = os.environ
        memo_dir = env.get(st.CACHE_DIR_ENV)
        n = 1_000_000
        base = per_call_ns(lambda: memo.get(mkey), n, args.repeat)
        rows.append(("cache hit: in-memory dict lookup (baseline)", base, ""))
        front = per_call_ns(lambda: env.get(st.CACHE_DIR_ENV) == memo_dir and memo.get(mkey), n, args.repeat)
        rows.append(("cache hit: dict lookup + FLYAUTOTUNE_CACHE_DIR check", front, f"+{front - base:.0f} ns"))
        gs = per_call_ns(lambda: st.get_store() and memo.get(mkey), n // 4, args.repeat)
        rows.append(("cache hit: get_store() + dict lookup", gs, f"+{gs - base:.0f} ns"))

        assert store.get(TUNER, key) is not None
        get_ns = per_call_ns(lambda: store.get(TUNER, key), 5_000, args.repeat)
        rows.append(("store.get() warm (SQLite read, 8 timings, JSON decode)", get_ns, "memory-front miss only"))
        miss_ns = per_call_ns(lambda: store.get(TUNER, "absent"), 5_000, args.repeat)
        rows.append(("store.get() warm, key absent", miss_ns, ""))
        store.put(TUNER, "pool", "pool", config_of(0), timings_of(0, 16), PROVENANCE)
        gt_ns = per_call_ns(lambda: store.get_timings(TUNER, "pool"), 5_000, args.repeat)
        rows.append(("store.get_timings(), 16 candidates", gt_ns, ""))
        counter = iter(range(10**9))
        put_ns = per_call_ns(
            lambda: store.put(TUNER, f"w{next(counter)}", "tw", config_of(1), timings_of(1), PROVENANCE),
            300, args.repeat)
        rows.append(("store.put() (winner + 8 timings, one transaction)", put_ns, "after a search only"))
        store.clear()
        store = fill(store.directory, args.entries)

        pack = os.path.join(tmp, "pack.json")
        store.export_pack(pack)
        packs._PACKS.clear()
        first = per_call_ns(lambda: (packs._PACKS.clear(), st.find_in_packs([pack], TUNER, key)), 1, 3)
        rows.append((f"find_in_packs() first call ({args.entries} entries: parse + validate)", first, ""))
        again = per_call_ns(lambda: st.find_in_packs([pack], TUNER, key), 20_000, args.repeat)
        rows.append(("find_in_packs() cached (stat + dict lookup)", again, ""))

        c = cold(os.path.dirname(store.path), key, args.repeat)
        rows.append(("cold process: import flyautotune.store", c["import"] * 1e9, "fresh interpreter"))
        rows.append((f"cold process: open {args.entries}-entry store + first get()", c["open_get"] * 1e9,
                     "connect, WAL, schema check, query"))
        rows.append((f"cold process: read all {c['n']} entries (entries())", c["all"] * 1e9, "JSON decode + validate"))
        size = os.path.getsize(store.path)

    print(f"Machine: {machine()}")
    print(f"Store: {args.entries} entries, {size / 1e6:.1f} MB file; median of {args.repeat} runs\n")
    print("| path | time | note |")
    print("|---|---|---|")
    for name, ns, note in rows:
        t = f"{ns:.0f} ns" if ns < 1e4 else f"{ns / 1e3:.1f} µs" if ns < 1e7 else f"{ns / 1e6:.1f} ms"
        print(f"| {name} | {t} | {note} |")


if __name__ == "__main__":
    main()
