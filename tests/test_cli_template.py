"""docs/write_adopter.md, followed for real: pip-install examples/adopter_template into
a fresh environment, see it in `flyautotune plugins`, tune it, call it, report it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "examples" / "adopter_template"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A new environment that sees this one's packages (as a user's would already have
    flyautotune, torch and Triton) and has the template installed into it by pip."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    root = tmp_path_factory.mktemp("template-env")
    env_dir = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    parent = sysconfig.get_paths()["purelib"]
    Path(site, "_parent_env.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    # pip builds from a copy: the repository's template folder stays clean
    src = root / "template"
    subprocess.run(["cp", "-r", str(TEMPLATE), str(src)], check=True)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", str(src)],
        capture_output=True, text=True,
    )
    assert install.returncode == 0, install.stderr
    return python, root


def run(venv, *args, code=None):
    python, root = venv
    env = dict(os.environ, FLYAUTOTUNE_CACHE_DIR=str(root / "cache"))
    for name in ("FLYAUTOTUNE", "FLYAUTOTUNE_LOG", "FLYAUTOTUNE_EVENT_LOG", "FLYAUTOTUNE_DISABLE_PLUGINS",
                 "PYTHONPATH"):
        env.pop(name, None)
    cmd = [str(python), "-c", code] if code else [str(python), "-m", "flyautotune", *args]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(root), timeout=300)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def test_installed_template_is_listed_by_flyautotune_plugins(venv):
    data = json.loads(run(venv, "plugins", "--json"))
    plugin = next(p for p in data["plugins"] if p["name"] == "vscale")
    assert (plugin["distribution"], plugin["version"]) == ("my-flyautotune-adopter", "0.1.0")
    adopter = next(a for a in data["adopters"] if a["name"] == "vscale")
    assert adopter["tunable"] and adopter["report"]
    assert "my-flyautotune-adopter" in adopter["distribution"]


def test_loading_the_template_imports_neither_its_kernel_nor_triton(venv):
    """docs/write_adopter.md: a command that needs no adopter never pays for the kernels."""
    probe = textwrap.dedent("""
        import sys
        import flyautotune as fat
        fat.plugin_manager()
        print(sorted(m for m in ("triton", "torch", "my_flyautotune_adopter.kernel") if m in sys.modules))
        import my_flyautotune_adopter
        print(my_flyautotune_adopter.vscale.__name__)  # the public name still works, imported on use
    """)
    imported, name = run(venv, code=probe).splitlines()
    assert imported == "[]" and name == "vscale"


def test_installed_template_tunes_and_its_entry_uses_the_winner(venv):
    out = run(venv, "tune", "vscale", "--shape", "4x64", "--device", "cpu")
    assert "vscale 4x64 bf16 on cpu (Triton interpreter): searched 4 candidates" in out
    winner = next(line for line in out.splitlines() if line.startswith("* winner: "))[len("* winner: "):]
    assert winner in {"BLOCK=64, num_warps=1", "BLOCK=128, num_warps=2", "BLOCK=256, num_warps=4",
                      "BLOCK=1024, num_warps=4"}
    probe = textwrap.dedent("""
        import torch
        from my_flyautotune_adopter import kernel, vscale, vscale_default
        x = torch.randn(4, 64, dtype=torch.bfloat16)
        y = vscale(x)
        assert torch.equal(y, (x.float() * 2.0).to(torch.bfloat16))
        assert torch.equal(vscale_default(x), y)
        print(kernel.tuned.last_source, kernel.tuned.last_config)
    """)
    source, config = run(venv, code=probe).split(" ", 1)
    assert source == "store"  # a new process: the winner the command stored
    assert config.strip() == winner


def test_installed_template_reports_for_sm90(venv):
    pytest.importorskip("triton.backends.nvidia")
    data = json.loads(run(venv, "report", "vscale", "--target", "sm_90", "--shape", "64x64", "--json"))
    rows = data[0]["candidates"]
    # what a search times, in its order: the default (BLOCK=1024 for 4096 elements) first, then the space
    assert [r["config"]["kwargs"]["BLOCK"] for r in rows] == [1024, 64, 128, 256]
    assert [r["options"]["num_warps"] for r in rows] == [4, 1, 2, 4]
    assert all(r["error"] is None and r["registers"] > 0 for r in rows)
    assert len({r["binary_sha256"] for r in rows}) == 4


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available() or getattr(__import__("torch").version, "hip", None),
                    reason="needs an NVIDIA GPU (the sm_90 report test above cross-compiles on the CPU)")
def test_report_binary_is_the_binary_a_launch_builds(venv):
    major, minor = __import__("torch").cuda.get_device_capability()
    target = f"sm_{major}{minor}"
    if target not in ("sm_80", "sm_86", "sm_89", "sm_90"):
        pytest.skip(f"{target} has no report target")
    rows = json.loads(run(venv, "report", "vscale", "--target", target, "--shape", "4096x4096", "--json"))[0]
    probe = textwrap.dedent("""
        import hashlib, json, torch, triton
        from my_flyautotune_adopter import kernel as k
        n = 4096 * 4096
        x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        out = []
        for b, w in ((64, 1), (128, 2), (256, 4), (1024, 4)):
            c = k._jit[(triton.cdiv(n, b),)](x, y, n, 2.0, BLOCK=b, num_warps=w)
            out.append([c.n_regs, hashlib.sha256(c.asm["cubin"]).hexdigest()])
        print(json.dumps(out))
    """)
    launched = json.loads(run(venv, code=probe))
    assert [[r["registers"], r["binary_sha256"]] for r in rows["candidates"]] == launched
