"""The README's command on the bundled RMSNorm adopter, and its static report
(no GPU needed); the GPU variant runs where a GPU is visible."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("flyautotune_rmsnorm", reason="the flyautotune-rmsnorm plugin is not installed")
torch = pytest.importorskip("torch")


def cli(tmp_path, *args, env=None):
    full = dict(os.environ, FLYAUTOTUNE_CACHE_DIR=str(tmp_path / "cache"))
    for name in ("FLYAUTOTUNE", "FLYAUTOTUNE_LOG", "FLYAUTOTUNE_EVENT_LOG", "FLYAUTOTUNE_DISABLE_PLUGINS"):
        full.pop(name, None)
    full.update(env or {})
    result = subprocess.run([sys.executable, "-m", "flyautotune", *map(str, args)], capture_output=True,
                            text=True, env=full, cwd=str(tmp_path), timeout=600)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result


@pytest.mark.slow
def test_tune_rmsnorm_on_cpu_ends_in_a_table(tmp_path):
    out = cli(tmp_path, "tune", "rmsnorm", "--shape", "4x64", "--device", "cpu", "--plot", tmp_path / "r.png").stdout
    assert "running on the CPU under Triton's interpreter" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if "time (ms)" in line)
    row = lines[header + 1]
    assert row.startswith("*") and "BLOCK_THREADS=" in row
    cells = row.split()
    method = next(i for i, c in enumerate(cells) if c == "wall")  # time, its spread, how it was timed
    assert float(cells[method - 2]) > 0 and cells[method - 1].endswith("%")
    assert any(line.startswith("* winner: ") and "BLOCK_THREADS=" in line for line in lines)
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_rmsnorm_for_gfx942_and_sm90(tmp_path):
    pytest.importorskip("flyautotune_rocm.report")
    pytest.importorskip("triton.backends.amd")
    pytest.importorskip("triton.backends.nvidia")
    data = json.loads(cli(tmp_path, "report", "rmsnorm", "--target", "gfx942", "--shape", "64x8192", "--json").stdout)
    rows = data[0]["candidates"]
    # ROCm searches seven BLOCK_THREADS x waves_per_eu combinations for long rows; the default is one of them
    # (waves_per_eu unset), so a search times seven programs, each once
    assert len(rows) == 7 and all(r["error"] is None for r in rows), [r["error"] for r in rows if r["error"]]
    assert len({r["binary_sha256"] for r in rows}) == 7
    by_wpe = {}
    for r in rows:
        by_wpe.setdefault(r["config"]["compile_hints"].get("waves_per_eu", 0), set()).add(r["occupancy"])
    assert by_wpe[1] == {1} and by_wpe[2] == {2}  # the hint reached the AMDGCN: LLVM's occupancy follows it
    out = cli(tmp_path, "report", "rmsnorm", "--target", "sm_90", "--shape", "64x8192").stdout
    assert "compiled for sm_90" in out and "warps/SM" in out and "distinct binar" in out
    # rows of about a thousand elements: the Gluon body (ASYNC=1) compiles too, with its x tile in shared memory
    data = json.loads(cli(tmp_path, "report", "rmsnorm", "--target", "sm_90", "--shape", "4096x1000", "--json").stdout)
    rows = data[0]["candidates"]
    assert all(r["error"] is None for r in rows), [r["error"] for r in rows if r["error"]]
    gluon = [r for r in rows if r["config"]["kwargs"].get("ASYNC") == 1]
    assert len(gluon) == 1 and gluon[0]["shared_bytes"] == 4 * 1024 * 2 and gluon[0]["spills"] == 0
    assert gluon[0]["details"]["kernel"] == "rmsnorm_async"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU (the CPU test above runs "
                                                          "the same command under the interpreter)")
def test_tune_rmsnorm_on_the_gpu_searches_and_stores(tmp_path):
    events = tmp_path / "events.jsonl"
    result = cli(tmp_path, "tune", "rmsnorm", "--shape", "256x8192", env={"FLYAUTOTUNE_EVENT_LOG": str(events)})
    out = result.stdout
    assert "on cuda:0: searched" in out and "GB/s" in out and "winner stored in" in out
    assert "candidate 1 of" in result.stderr
    kinds = [json.loads(line)["event"] for line in events.read_text().splitlines()]
    assert "search_end" in kinds
    assert "winner from the store" in cli(tmp_path, "tune", "rmsnorm", "--shape", "256x8192").stdout
