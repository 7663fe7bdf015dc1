"""A kernel body run by Triton's interpreter that calls ``tl.sum`` needs ``TRITON_INTERPRET=1`` before
``triton`` is imported. Without it Triton's own error says nothing about the cause; a tuned launch adds
the remedy to the error, in a call and in a search, and with the variable set the same code runs."""

import os
import subprocess
import sys
import textwrap

from flyautotune.devices import INTERPRETER_HINT

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    import flyautotune as fat


    def _rowsum(X, Y, N: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(Y, tl.sum(tl.load(X + offs, mask=offs < N, other=0.0), axis=0))


    kernel = InterpretedFunction(_rowsum)


    @fat.autotune(configs=[fat.Config(BLOCK=b) for b in (64, 128)], key=["n"], name="hint_rowsum",
                  default=lambda **_: fat.Config(BLOCK=64))
    def launch(x, y, n, BLOCK=None):
        kernel[(1,)](x, y, N=n, BLOCK=BLOCK)


    x, y = torch.arange(50, dtype=torch.float32), torch.zeros(1)
    for what in ("call", "search"):
        try:
            launch(x, y, 50) if what == "call" else launch.select(x, y, 50, force=True)
        except Exception as exc:
            print(what, "raised", type(exc).__name__, "|", " ".join(getattr(exc, "__notes__", [])))
        else:
            print(what, "ran", float(y[0]))
""")


def _run(tmp_path, interpret):
    script = tmp_path / "rowsum.py"  # Triton reads a body's source from its file
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "FLYAUTOTUNE")}
    env["FLYAUTOTUNE_CACHE_DIR"] = str(tmp_path / "store")
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_without_the_variable_the_error_says_how_to_fix_it(tmp_path):
    lines = _run(tmp_path, interpret=False)
    assert len(lines) == 2
    for line, what in zip(lines, ("call", "search")):
        assert line.startswith(f"{what} raised"), line
        assert INTERPRETER_HINT in line, line  # the note names the variable and when to set it
    assert "TRITON_INTERPRET=1" in INTERPRETER_HINT and "before triton is first imported" in INTERPRETER_HINT


def test_with_the_variable_the_same_kernel_runs(tmp_path):
    assert _run(tmp_path, interpret=True) == ["call ran 1225.0", "search ran 1225.0"]
