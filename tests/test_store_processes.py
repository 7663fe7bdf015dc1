"""The tuning store shared by real processes: concurrent writers, a killed writer,
two writers on one key, a read-only directory."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from flyautotune.store import TuningStore, canonical_config_json

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process control (SIGKILL, setuid)")


def spawn(code: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs,
    )


def start_together(procs, sync_dir, timeout=60.0) -> None:
    """Release the workers at once, after every one has imported and opened the store."""
    deadline = time.monotonic() + timeout
    while len([p for p in os.listdir(sync_dir) if p.startswith("ready-")]) < len(procs):
        assert time.monotonic() < deadline, "workers did not start"
        for p in procs:
            assert p.poll() is None, p.communicate()
        time.sleep(0.01)
    open(os.path.join(sync_dir, "go"), "w").close()


WRITER = """
    import os, sys, time
    from flyautotune.store import TuningStore
    directory, sync, worker, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = TuningStore(directory)
    store.get("conc", "warm-up")
    open(os.path.join(sync, f"ready-{worker}"), "w").close()
    while not os.path.exists(os.path.join(sync, "go")):
        time.sleep(0.001)
    failed = 0
    for i in range(n):
        cfg = {"kwargs": {"BLOCK": i, "W": worker}, "compile_hints": {}}
        bad = {"kwargs": {"BLOCK": -1, "W": worker}, "compile_hints": {}}
        timings = [{"config": cfg, "ms": float(i + 1), "error": None}, {"config": bad, "ms": None, "error": "boom"}]
        if not store.put("conc", f"w{worker}-{i}", f"tw{worker}", cfg, timings, {"worker": worker, "i": i}):
            failed += 1
    print(failed)
"""


def test_eight_processes_times_200_writes_all_land(tmp_path):
    store_dir, sync = tmp_path / "store", tmp_path / "sync"
    sync.mkdir()
    procs = [spawn(WRITER, store_dir, sync, w, 200) for w in range(8)]
    start_together(procs, sync)
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.strip() == "0", f"failed puts: {out!r} {err!r}"
        assert "WARNING" not in err, err
    store = TuningStore(store_dir)
    entries = {(e.key): e for e in store.entries("conc")}
    assert len(entries) == 8 * 200
    for w in range(8):
        for i in range(200):
            e = store.get("conc", f"w{w}-{i}")
            want = {"kwargs": {"BLOCK": i, "W": w}, "compile_hints": {}}
            assert e is not None and e.config == want and e.provenance == {"worker": w, "i": i}
            assert e.timings[0] == {"config": want, "ms": float(i + 1), "error": None}
        pool = store.get_timings("conc", f"tw{w}")
        assert len(pool) == 201
        assert pool[canonical_config_json({"kwargs": {"BLOCK": -1, "W": w}, "compile_hints": {}})] is None
    assert store._conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"


KILLED = """
    import sys
    from flyautotune.store import TuningStore
    store = TuningStore(sys.argv[1])
    start = int(sys.argv[2])
    space = [{"kwargs": {"BLOCK": j}, "compile_hints": {"waves_per_eu": 2}} for j in range(64)]
    timings = [{"config": c, "ms": float(j), "error": None} for j, c in enumerate(space)]
    i = start
    while True:
        if not store.put("killed", f"k{i}", f"t{i % 7}", space[i % 64], timings, {"i": i, "pad": "x" * 3000}):
            sys.exit(f"put k{i} failed")  # closes stdout: the parent stops waiting
        sys.stdout.write(f"{i}\\n")  # reported only after the commit returned
        sys.stdout.flush()
        i += 1
"""


def test_writer_killed_mid_write_loses_no_committed_entry(tmp_path):
    committed = []
    for start, kill_after in ((0, 40), (100_000, 90), (200_000, 15)):
        p = spawn(KILLED, tmp_path, start)
        seen = 0
        while seen < kill_after:
            line = p.stdout.readline()
            assert line, p.stderr.read()
            committed.append(int(line))
            seen += 1
        os.kill(p.pid, signal.SIGKILL)  # no cleanup, no checkpoint, likely inside a transaction
        out, _ = p.communicate(timeout=30)
        committed += [int(x) for x in out.split()]  # commits reported before the kill landed
        assert p.returncode == -signal.SIGKILL
    store = TuningStore(tmp_path)
    for i in committed:
        e = store.get("killed", f"k{i}")
        assert e is not None, f"committed entry k{i} lost"
        assert e.config == {"kwargs": {"BLOCK": i % 64}, "compile_hints": {"waves_per_eu": 2}}
        assert e.provenance["i"] == i and len(e.timings) == 64 and e.timing_key == f"t{i % 7}"
    assert len(store.get_timings("killed", "t0")) == 64
    conn = store._conn()
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert store.put("killed", "after", "t", {"kwargs": {}}, [], {})


SAME_KEY = """
    import os, sys, time
    from flyautotune.store import TuningStore
    directory, sync, who = sys.argv[1], sys.argv[2], sys.argv[3]
    store = TuningStore(directory)
    store.get("same", "hot")
    open(os.path.join(sync, f"ready-{who}"), "w").close()
    while not os.path.exists(os.path.join(sync, "go")):
        time.sleep(0.001)
    for i in range(150):
        win = {"kwargs": {"WHO": who, "I": i}, "compile_hints": {}}
        lose = {"kwargs": {"WHO": who, "I": -1}, "compile_hints": {}}
        timings = [{"config": win, "ms": 1.0 + i, "error": None}, {"config": lose, "ms": 1e6, "error": None}]
        assert store.put("same", "hot", "hot-t", win, timings, {"who": who, "i": i})
"""


def consistent(e) -> bool:
    who, i = e.provenance["who"], e.provenance["i"]
    win = {"kwargs": {"WHO": who, "I": i}, "compile_hints": {}}
    return e.config == win and e.timings[0] == {"config": win, "ms": 1.0 + i, "error": None} and \
        e.timings[1]["config"] == {"kwargs": {"WHO": who, "I": -1}, "compile_hints": {}}


def test_two_processes_writing_one_key_leave_one_consistent_entry(tmp_path):
    store_dir, sync = tmp_path / "store", tmp_path / "sync"
    sync.mkdir()
    procs = [spawn(SAME_KEY, store_dir, sync, who) for who in ("A", "B")]
    start_together(procs, sync)
    reader = TuningStore(store_dir)
    observed = 0
    while any(p.poll() is None for p in procs):
        e = reader.get("same", "hot")  # a reader never sees a half-written winner
        if e is not None:
            assert consistent(e), e
            observed += 1
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    final = TuningStore(store_dir)
    entries = final.entries("same")
    assert len(entries) == 1 and consistent(entries[0])
    assert entries[0].provenance["i"] == 149  # the last write of one of the two
    assert len(final.get_timings("same", "hot-t")) == 2 * 150 + 2
    assert observed > 0


READ_ONLY = """
    import json, logging, os, sys
    from flyautotune.store import TuningStore
    records = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())
    logging.getLogger("flyautotune.store").addHandler(handler)
    if os.geteuid() == 0:  # root ignores permissions: run as nobody
        try:
            os.setgid(65534)
            os.setuid(65534)
        except OSError as exc:
            sys.exit(print(json.dumps({"skip": f"cannot drop root privileges: {exc}"})))
    if not os.access(os.path.dirname(sys.argv[1]), os.X_OK):
        sys.exit(print(json.dumps({"skip": "the temporary directory is not reachable without root"})))
    store = TuningStore(sys.argv[1])
    entry = store.get("rms", "k")
    ok = store.put("rms", "k2", "t", {"kwargs": {"B": 2}}, [], {})
    fresh = TuningStore(os.path.join(sys.argv[1], "sub"))
    print(json.dumps({"config": entry and entry.config, "put": ok, "fresh_get": fresh.get("rms", "k"),
                      "fresh_put": fresh.put("rms", "k", "t", {"kwargs": {}}, [], {}), "log": records}))
"""


@pytest.mark.parametrize("file_mode", [0o444, 0o666], ids=["read-only-file", "writable-file"])
def test_read_only_directory_reads_and_never_fails(file_mode):
    # pytest's tmp_path is private to root; the unprivileged child needs a world-readable dir.
    top = tempfile.mkdtemp(prefix="flyautotune-ro-", dir="/tmp" if os.path.isdir("/tmp") else None)
    try:
        d = os.path.join(top, "cache")
        TuningStore(d).put("rms", "k", "t", {"kwargs": {"B": 1}}, [], {})
        TuningStore(d).close()
        os.chmod(top, 0o755)
        if os.geteuid() == 0:  # the child runs as nobody: the store must be its own to be trusted
            for path in (d, os.path.join(d, "tuning.sqlite3")):
                os.chown(path, 65534, 65534)
        os.chmod(d, 0o555)
        os.chmod(os.path.join(d, "tuning.sqlite3"), file_mode)
        p = spawn(READ_ONLY, d)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        res = json.loads(out)
        if "skip" in res:
            pytest.skip(res["skip"])
        assert res["config"] == {"kwargs": {"B": 1}}  # the winner is still served
        assert res["put"] is False and res["fresh_get"] is None and res["fresh_put"] is False
        log = "\n".join(res["log"])
        assert f"flyautotune store {d}/tuning.sqlite3: cannot save the winner" in log
        assert "readonly database" in log or "read-only" in log
        assert f"flyautotune store {d}/sub/tuning.sqlite3: cannot read (PermissionError" in log
        assert "continuing without the store" in log
    finally:
        os.chmod(os.path.join(top, "cache"), 0o755)
        shutil.rmtree(top)
