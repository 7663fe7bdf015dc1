"""The documentation's examples work: every ```python block of docs/*.md and the
README runs (blocks of one file in order, in one namespace, in a fresh
interpreter on the CPU), and every `flyautotune ...` line of a ```bash block is
a command the parser accepts.

A block that cannot run here (a fragment of a file, GPU-only code) is marked
with an HTML comment on the line before it: ``<!-- docs-test: skip (why) -->``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\b")
FENCE = re.compile(r"^```(\w*)\s*$")


def blocks(path: Path, language: str) -> list:
    """``(line number, code)`` of the fenced blocks in ``language`` that are not marked skip."""
    out = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m and m.group(1):
            lang, start = m.group(1), i
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
            if lang == language and not SKIP.search(prev):
                out.append((start + 1, "\n".join(lines[start + 1:j])))
            i = j + 1
        else:
            i += 1
    return out


# Each block is written to a file of its own: Triton's @jit reads a kernel's source from its file.
RUNNER = r"""
import json, os, sys, traceback
blocks = json.load(open(sys.argv[1]))
namespace = {"__name__": "__docs__"}
for name, line, code in blocks:
    path = os.path.abspath(name.replace("/", "_").replace(".", "_") + f"_line{line}.py")
    with open(path, "w") as f:
        f.write(code + "\n")
    try:
        exec(compile(code, path, "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"\nthe python block at {name}:{line} failed", file=sys.stderr)
        sys.exit(1)
"""

PY_DOCS = [d for d in DOCS if d.exists() and blocks(d, "python")]


@pytest.mark.parametrize("doc", PY_DOCS, ids=[d.name for d in PY_DOCS])
def test_python_blocks_run(doc, tmp_path):
    rel = str(doc.relative_to(ROOT))
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps([[rel, line, code] for line, code in blocks(doc, "python")]))
    env = dict(os.environ, FLYAUTOTUNE_CACHE_DIR=str(tmp_path / "cache"), TRITON_INTERPRET="1",
               PYTHONWARNINGS="ignore", FLYAUTOTUNE_LOG="warning")
    for name in ("FLYAUTOTUNE", "FLYAUTOTUNE_EVENT_LOG"):
        env.pop(name, None)
    result = subprocess.run([sys.executable, "-c", RUNNER, str(spec)], capture_output=True, text=True, env=env,
                            cwd=str(tmp_path), timeout=600)
    assert result.returncode == 0, f"{rel}:\n{result.stdout}\n{result.stderr}"
    # an example copied as it stands runs clean: no failed candidate, no store or plugin trouble
    assert "[flyautotune WARNING]" not in result.stderr, f"{rel}:\n{result.stderr}"


def _command_lines(doc: Path) -> list:
    lines = []
    for line_no, code in blocks(doc, "bash"):
        for offset, raw in enumerate(code.splitlines()):
            for part in re.split(r"&&|;", raw.split(" #", 1)[0]):
                words = shlex.split(part)
                while words and re.match(r"^\w+=", words[0]):  # VAR=value prefixes
                    words = words[1:]
                if words and words[0] == "flyautotune":
                    lines.append((f"{doc.name}:{line_no + offset + 1}", words[1:]))
    return lines


COMMANDS = [c for d in DOCS if d.exists() for c in _command_lines(d)]


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 10
    used = {words[0] for _, words in COMMANDS if words and not words[0].startswith("-")}
    assert {"plugins", "tune", "show", "export", "import", "clear", "report"} <= used


@pytest.mark.parametrize("where, argv", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_commands_parse(where, argv):
    from flyautotune.cli import UsageError, build_parser

    try:
        build_parser().parse_args(argv)
    except UsageError as exc:
        pytest.fail(f"{where}: flyautotune {' '.join(argv)}: {exc}")
