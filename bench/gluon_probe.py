"""QuACK's short-row kernel written in Gluon, against QuACK and ours, on one CUDA GPU.

At 4096 x 1000 bf16 QuACK leads every Triton config of our space by about 1.4 %. Its kernel there: 128
threads a CTA, one warp a row (4 rows x 1024 columns a CTA, 4 vectors of 8 bf16 a lane), x copied
global -> shared with 16-byte ``cp.async.ca`` while the weight is loaded into registers, x read back
from shared memory, the sum of squares reduced with warp shuffles alone (no CTA barrier, no
shared-memory reduction), ``y = x * rstd * w`` stored from registers with 16-byte stores. Triton's
language cannot choose that layout nor issue one unpipelined ``cp.async``; Gluon
(``triton.experimental.gluon``: explicit layouts, ``ampere.async_copy``) can. This probe times, in
CUDA-graph replay as ``bench/rmsnorm.py`` times its peers:

* the peers (torch.compile, QuACK when installed), a clone, ``rmsnorm_autotuned`` and its pick through
  our launch path;
* one Gluon body (a ``[rows, next_pow2(N)]`` blocked layout, ``VEC`` 16-byte vectors a lane, the weight
  in the layout's column slice so it broadcasts without a conversion) in these modes:
  ``regs`` (x loaded straight into registers, the weight after it), ``cp.async`` (x through shared
  memory as Triton lowers it: ``cp.async.cg`` for 16-byte copies whatever cache modifier is asked
  for, and a CTA barrier after the wait), ``.ca`` (the copies rewritten to ``cp.async.ca`` in the PTX),
  ``no bar`` (the barrier after the wait dropped from the PTX: each thread reads back only what it
  copied, which ``cp.async.wait_group`` makes visible to it; kept where the layout repeats lanes);
* with 4 or 8 rows a CTA, one warp a row, and 8 rows on 4 warps (2 rows a warp).

Before timing, every variant is checked against the fp64 reference on each shape and on odd ones (rows
not a multiple of 4 or 8, widths 1024 and 72, fp16, fp32, a row stride wider than the row); Gluon has
no CPU interpreter. ``--check`` also says where ptxas issues the weight's loads: before the wait for the
copies (and the reduction) or after it, which the PTX alone does not tell.

Nothing here enters the config space: if a mode pays, it is then built into the product body.

    python bench/gluon_probe.py --out DIR [--shapes 4096x1000:bf16,...] [--rounds 5] [--warm]
    python bench/gluon_probe.py --check   # CPU: every variant cross-compiled for sm_90 (PTX, ptxas, SASS):
                                          # copies, loads and their widths, barriers, shuffles, registers
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = "4096x1000:bf16,16384x1000:bf16,65536x1024:bf16,4096x2048:bf16"

try:  # Gluon's API moves between Triton releases; this probe is written against Triton 3.6
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp
except ImportError as exc:  # said by check() and main()
    gluon = gl = cp = None
    GLUON_ERROR = f"{type(exc).__name__}: {exc}"
else:  # later releases renamed or removed what this probe calls (async_copy_global_to_shared, ...)
    GLUON_ERROR = None if triton.__version__.startswith("3.6") else "written against the Gluon API of Triton 3.6"

#: name -> (rows a program, rows a warp, mode). Modes: "regs"; "cg" (Triton's cp.async lowering: .cg and a
#: barrier after the wait); "ca" (.ca copies); "cg nobar", "ca nobar" (the barrier after the wait dropped).
VARIANTS = {
    "gluon regs 4r 4w": (4, 1, "regs"),
    "gluon regs 8r 8w": (8, 1, "regs"),
    "gluon regs 8r 4w": (8, 2, "regs"),
    "gluon cp.async 4r 4w": (4, 1, "cg"),
    "gluon cp.async 8r 8w": (8, 1, "cg"),
    "gluon cp.async .ca 4r 4w": (4, 1, "ca"),
    "gluon cp.async no bar 4r 4w": (4, 1, "cg nobar"),
    "gluon cp.async .ca no bar 4r 4w": (4, 1, "ca nobar"),
    "gluon cp.async .ca no bar 8r 8w": (8, 1, "ca nobar"),
    "gluon cp.async .ca no bar 8r 4w": (8, 2, "ca nobar"),
}


if gluon is not None:
    @gluon.jit
    def _body(X, W, Y, M, SX, SY, eps, N: gl.constexpr, BLOCK_N: gl.constexpr, ROWS: gl.constexpr,
              RPW: gl.constexpr, VEC: gl.constexpr, CP: gl.constexpr):
        """ROWS rows of RMSNorm, RPW rows a warp (ROWS // RPW warps), VEC elements (16 bytes) a vector.
        Row strides come as ``stride // VEC`` (times VEC here) so that every row starts 16-byte aligned
        for the compiler; offsets are 32-bit (the launch checks they fit)."""
        layout: gl.constexpr = gl.BlockedLayout([1, VEC], [RPW, 32 // RPW], [ROWS // RPW, 1], [1, 0])
        rows = gl.program_id(0) * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
        col_ok = cols < N
        ok = (rows < M)[:, None] & col_ok[None, :]
        x_ptrs = X + ((rows * (SX * VEC))[:, None] + cols[None, :])
        if CP:
            smem = gl.allocate_shared_memory(X.dtype.element_ty, [ROWS, BLOCK_N],
                                             gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
            # Triton 3.6 lowers 16-byte copies to cp.async.cg whatever cache_modifier says (see _edit_ptx).
            cp.async_copy_global_to_shared(smem, x_ptrs, mask=ok)
            cp.commit_group()
            w = gl.load(W + cols, mask=col_ok, other=0.0).to(gl.float32)
            cp.wait_group(0)
            x = smem.load(layout).to(gl.float32)
        else:
            x = gl.load(x_ptrs, mask=ok, other=0.0).to(gl.float32)
            w = gl.load(W + cols, mask=col_ok, other=0.0).to(gl.float32)
        rstd = gl.rsqrt(gl.sum(x * x, axis=1) / N + eps)
        y = x * rstd[:, None] * w[None, :]
        gl.store(Y + ((rows * (SY * VEC))[:, None] + cols[None, :]), y.to(Y.dtype.element_ty), mask=ok)

    # One kernel a PTX edit: the stages hook (_install_ptx_hook) picks the edit by the kernel's name.
    @gluon.jit
    def gluon_rmsnorm(X, W, Y, M, SX, SY, eps, N: gl.constexpr, BLOCK_N: gl.constexpr, ROWS: gl.constexpr,
                      RPW: gl.constexpr, VEC: gl.constexpr, CP: gl.constexpr):
        _body(X, W, Y, M, SX, SY, eps, N, BLOCK_N, ROWS, RPW, VEC, CP)

    @gluon.jit
    def gluon_rmsnorm_ca(X, W, Y, M, SX, SY, eps, N: gl.constexpr, BLOCK_N: gl.constexpr, ROWS: gl.constexpr,
                         RPW: gl.constexpr, VEC: gl.constexpr, CP: gl.constexpr):
        _body(X, W, Y, M, SX, SY, eps, N, BLOCK_N, ROWS, RPW, VEC, CP)

    @gluon.jit
    def gluon_rmsnorm_nobar(X, W, Y, M, SX, SY, eps, N: gl.constexpr, BLOCK_N: gl.constexpr, ROWS: gl.constexpr,
                            RPW: gl.constexpr, VEC: gl.constexpr, CP: gl.constexpr):
        _body(X, W, Y, M, SX, SY, eps, N, BLOCK_N, ROWS, RPW, VEC, CP)

    @gluon.jit
    def gluon_rmsnorm_ca_nobar(X, W, Y, M, SX, SY, eps, N: gl.constexpr, BLOCK_N: gl.constexpr,
                               ROWS: gl.constexpr, RPW: gl.constexpr, VEC: gl.constexpr, CP: gl.constexpr):
        _body(X, W, Y, M, SX, SY, eps, N, BLOCK_N, ROWS, RPW, VEC, CP)

    KERNELS = {"regs": gluon_rmsnorm, "cg": gluon_rmsnorm, "ca": gluon_rmsnorm_ca,
               "cg nobar": gluon_rmsnorm_nobar, "ca nobar": gluon_rmsnorm_ca_nobar}

#: kernel name -> (copies rewritten to .ca, the barrier after the wait dropped)
PTX_EDITS = {"gluon_rmsnorm_ca": (True, False), "gluon_rmsnorm_nobar": (False, True),
             "gluon_rmsnorm_ca_nobar": (True, True)}
_WAIT_BAR = re.compile(r"(cp\.async\.wait_group\s+0;\s*\n)\s*bar\.sync\s+0;[ \t]*\n")


def _edit_ptx(ptx: str, ca: bool, nobar: bool) -> str:
    """``ptx`` with its 16-byte ``cp.async.cg`` copies made ``.ca`` (through L1, as QuACK copies; Triton 3.6
    emits ``.cg`` for every 16-byte copy and ignores ``cache_modifier=".ca"``), and/or the ``bar.sync`` that
    follows ``cp.async.wait_group 0`` removed (Triton's barrier analysis puts one between the copies and
    the read-back; it is not needed when each thread reads only what it copied). Raises when the PTX does
    not hold exactly what is to be edited."""
    if ca:
        ptx, n = re.subn(r"cp\.async\.cg\.shared\.global", "cp.async.ca.shared.global", ptx)
        if not n:
            raise RuntimeError("gluon_probe: no cp.async.cg copy to make .ca")
    if nobar:
        ptx, n = _WAIT_BAR.subn(r"\1", ptx)
        if n != 1 or ptx.count("bar.sync") != 0:
            raise RuntimeError(f"gluon_probe: expected one bar.sync after cp.async.wait_group 0 and no other "
                               f"barrier, found {n} and {ptx.count('bar.sync')} more")
    return ptx


_HOOKED = False


def _install_ptx_hook():
    """Make Triton's ``ptx`` stage apply :data:`PTX_EDITS` to this probe's kernels (by name); any other
    kernel's PTX passes untouched, and a hook already installed still runs."""
    global _HOOKED
    if _HOOKED:
        return
    from triton import knobs

    prev = knobs.runtime.add_stages_inspection_hook

    def hook(*args):
        if not args:  # later Triton releases ask the hook for a part of the cache key first
            import hashlib

            key, digest = prev() if prev is not None else ("", "")
            key += f"-gluon_probe PTX edits {sorted(PTX_EDITS.items())}"
            return key, hashlib.sha256((digest + key).encode()).hexdigest()
        backend, stages, options, language, capability = args
        if prev is not None:
            prev(backend, stages, options, language, capability)
        make_ptx = stages.get("ptx")
        if make_ptx is None:
            return

        def ptx_stage(src, metadata):
            ptx = make_ptx(src, metadata)
            edit = PTX_EDITS.get(metadata.get("name"))
            return _edit_ptx(ptx, *edit) if edit else ptx

        stages["ptx"] = ptx_stage

    knobs.runtime.add_stages_inspection_hook = hook
    _HOOKED = True


def vec_of(N: int, elem: int) -> int:
    """Elements a 16-byte vector holds; the probe takes widths that are whole vectors."""
    vec = 16 // elem
    if N % vec:
        raise ValueError(f"gluon_probe takes rows of whole 16-byte vectors ({vec} elements); {N} is not")
    return vec


def repeats_lanes(N: int, rpw: int, vec: int) -> bool:
    """Whether the layout holds some columns in two lanes (a row narrower than one warp's vectors): then
    one lane copies what another reads back, and the barrier after the wait must stay."""
    return triton.next_power_of_2(N) < vec * (32 // rpw)


def _kernel_for(N: int, rpw: int, vec: int, mode: str):
    if mode.endswith("nobar") and repeats_lanes(N, rpw, vec):
        mode = mode.split()[0]
    return KERNELS[mode]


def gluon_call(x, w, y, knobs, eps=1e-6):
    """Launch one variant (``knobs`` from :data:`VARIANTS`) on ``x`` into ``y``; the compiled kernel."""
    M, N = x.shape
    rows, rpw, mode = knobs
    vec = vec_of(N, x.element_size())
    if x.stride(1) != 1 or y.stride(1) != 1 or x.stride(0) % vec or y.stride(0) % vec:
        raise ValueError("gluon_probe takes rows of unit stride that start on 16-byte boundaries")
    if max(M * x.stride(0), M * y.stride(0)) >= 2 ** 31:
        raise ValueError("gluon_probe's offsets are 32-bit")
    kernel = _kernel_for(N, rpw, vec, mode)
    return kernel[(triton.cdiv(M, rows),)](x, w, y, M, x.stride(0) // vec, y.stride(0) // vec, eps, N=N,
                                           BLOCK_N=triton.next_power_of_2(N), ROWS=rows, RPW=rpw, VEC=vec,
                                           CP=mode != "regs", num_warps=rows // rpw)


def gluon_launch(x, w, y, knobs, eps=1e-6):
    gluon_call(x, w, y, knobs, eps)
    return y


def ptx_counts(ptx: str) -> dict:
    """Copies, global loads and stores (by width), barriers, shuffles and shared loads in one PTX."""
    def count(pattern):
        return dict(sorted(collections.Counter(re.findall(pattern, ptx)).items()))

    out = {"cp.async": count(r"cp\.async\.c[ag]\.shared\.global(?:\.\S+)?(?=\s)"),
           "cp.async bytes": dict(sorted(collections.Counter(
               re.findall(r"cp\.async\.c[ag]\.shared\.global[^;]*?,\s*(0x[0-9a-f]+|\d+)\s*[,;]", ptx)).items())),
           "ld.global": count(r"ld\.global(?:\.\w+)*"), "st.global": count(r"st\.global(?:\.\w+)*"),
           "ld.shared": count(r"ld\.shared(?:\.\w+)*"), "bar.sync": len(re.findall(r"\bbar\.sync\b", ptx)),
           "shfl.sync": len(re.findall(r"\bshfl\.sync", ptx))}
    return out


def sass_counts(cubin: bytes) -> dict:
    """LDG, LDGSTS, LDS, STG, BAR and SHFL in the sm_90 SASS (nvdisasm shipped with Triton)."""
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
    ins = [ln.split("*/", 1)[1].strip() for ln in sass.splitlines() if ln.strip().startswith("/*") and ";" in ln]
    # "@!PT" instructions never run (ptxas pads LDGSTS sequences with "@!PT LDS RZ, [RZ]"): left out
    ins = [i for i in ins if not i.startswith("@!PT ")]
    ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", i).split(" ", 1)[0] for i in ins)
    pick = ("LDG", "LDGSTS", "LDGDEPBAR", "DEPBAR", "LDS", "STG", "BAR", "SHFL")
    out = {"instructions": len(ins), **{p: {k: v for k, v in sorted(ops.items()) if k.split(".")[0] == p}
                                        for p in pick}}

    def ldg_before(op):  # plain global loads ptxas issues before the first ``op`` (all of them if none)
        first = next((n for n, i in enumerate(ins) if re.sub(r"^@!?U?P\w+\s+", "", i).startswith(op)), len(ins))
        return sum(re.sub(r"^@!?U?P\w+\s+", "", i).startswith("LDG.") for i in ins[:first])

    # Where ptxas put the global loads (the weight's, in the cp.async variants): before the wait for the
    # copies, and before the reduction's first shuffle.
    out["LDG before DEPBAR"] = ldg_before("DEPBAR") if out["DEPBAR"] else None
    out["LDG before SHFL"] = ldg_before("SHFL")
    return out


def ptxas_info(ptx: str) -> dict:
    """Registers and spills ptxas reports for ``ptx`` (the ptxas Triton compiles sm_90 with)."""
    from triton.backends.nvidia.compiler import get_ptxas

    ptxas = get_ptxas(90).path
    arch = re.search(r"\.target\s+(sm_\w+)", ptx).group(1)
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        log = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", src, "-o", os.path.join(d, "k.o")],
                             capture_output=True, text=True, check=True).stderr
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return {"registers": int(regs.group(1)) if regs else None,
            "spills": [int(spill.group(1)), int(spill.group(2))] if spill else None}


def compile_sm90(N: int, knobs, ds: str = "bf16"):
    """One variant cross-compiled for sm_90 (no GPU needed): Triton's CompiledKernel."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    rows, rpw, mode = knobs
    from rmsnorm import ELEM_BYTES

    vec = vec_of(N, ELEM_BYTES[ds])
    sig = {"X": f"*{ds}", "W": f"*{ds}", "Y": f"*{ds}", "M": "i32", "SX": "i32", "SY": "i32", "eps": "fp32"}
    consts = dict(N=N, BLOCK_N=triton.next_power_of_2(N), ROWS=rows, RPW=rpw, VEC=vec, CP=mode != "regs")
    sig.update({k: "constexpr" for k in consts})
    src = GluonASTSource(_kernel_for(N, rpw, vec, mode), sig, consts,
                         {(i,): [["tt.divisibility", 16]] for i in range(3)})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": rows // rpw})


def check() -> int:
    if GLUON_ERROR:
        print(f"not compiled: Triton {triton.__version__} here, and this probe is {GLUON_ERROR}"
              if gluon is not None else f"no Gluon in this Triton ({triton.__version__}): {GLUON_ERROR}")
        return 0
    _install_ptx_hook()
    print(f"Triton {triton.__version__}: every variant cross-compiled for sm_90 (bf16); Gluon has no CPU "
          "interpreter, so correctness is checked on the GPU only")
    for N in (1000, 1024, 4096):
        for name, knobs in VARIANTS.items():
            try:
                k = compile_sm90(N, knobs)
            except Exception as exc:
                msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                if re.search(r"active drivers|libcuda|cuInit|no CUDA", msg, re.I):
                    print(f"sm_90, {N} wide, {name}: no compile without a GPU here ({msg})")
                    return 0
                raise
            ptx = k.asm["ptx"]
            row = {"name": k.metadata.name, "shared": k.metadata.shared, **ptx_counts(ptx), **ptxas_info(ptx)}
            try:
                row["sass"] = sass_counts(k.asm["cubin"])
            except Exception as exc:  # no nvdisasm: the PTX counts stand
                row["sass"] = f"{type(exc).__name__}: {exc}"[:120]
            print(f"sm_90, {N} wide, {name}: {json.dumps(row)}")
            mode = knobs[2]
            if mode == "regs":
                assert row["bar.sync"] == 0 and row["shared"] == 0, (N, name, "barrier or shared memory")
            if mode.endswith("nobar"):
                assert row["bar.sync"] == 0, (N, name, "a barrier left")
            if mode.startswith("ca"):
                assert list(row["cp.async"]) == ["cp.async.ca.shared.global"], (N, name, row["cp.async"])
            assert all(w.endswith(("v4.b32", "v4.u32")) for w in row["ld.global"]), (N, name, row["ld.global"])
            assert set(row["cp.async bytes"]) <= {"0x10", "16"}, (N, name, row["cp.async bytes"])
    for N, ds in ((1000, "fp16"), (1000, "fp32"), (72, "bf16")):  # the GPU's odd cases compile too
        for name, knobs in VARIANTS.items():
            k = compile_sm90(N, knobs, ds)
            c = ptx_counts(k.asm["ptx"])
            print(f"sm_90, {N} wide {ds}, {name}: {k.metadata.name}, cp.async {c['cp.async']}, ld.global "
                  f"{c['ld.global']}, bar.sync {c['bar.sync']}, {ptxas_info(k.asm['ptx'])}")
    print("every variant: 16-byte global loads and copies only; no barrier nor shared memory in the register "
          "variants; no barrier where the PTX edit drops it")
    return 0


def _odd_cases(check_ptx, check_out):
    """Every variant on shapes the timed ones do not reach: rows not a multiple of any ROWS, widths 1024 and
    72 (a row narrower than one warp's vectors), fp16 and fp32, a row stride wider than the row."""
    import torch

    from rmsnorm import EPS

    cases = [(4097, 1000, torch.bfloat16, 0), (4097, 1024, torch.bfloat16, 0), (4097, 72, torch.bfloat16, 0),
             (4097, 1000, torch.float16, 0), (4097, 1000, torch.float32, 0), (4097, 1000, torch.bfloat16, 24)]
    for M, N, dt, pad in cases:
        torch.manual_seed(M + N)
        x = (torch.randn(M, N + pad, device="cuda", dtype=dt) * 2)[:, :N]
        w = torch.rand(N, device="cuda", dtype=dt) + 0.5
        for name, knobs in VARIANTS.items():
            y = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
            check_ptx(gluon_call(x, w, y, knobs, EPS), name, knobs, N, x.element_size())
            check_out(y, x, w, f"{name} at {M}x{N} {dt} (row stride {x.stride(0)})")
    print(f"every Gluon variant matches the fp64 reference on {len(cases)} odd cases", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--check", action="store_true", help="CPU: every variant cross-compiled for sm_90, counted")
    ap.add_argument("--warm", action="store_true",
                    help="also time every implementation on an x just written (space_probe.py's --warm)")
    args = ap.parse_args(argv)
    if args.check:
        return check()
    if GLUON_ERROR:
        print(f"Triton {triton.__version__} here: {GLUON_ERROR}")
        return 1
    _install_ptx_hook()
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("FLYAUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="fat-gluon-"))
    import torch

    from rmsnorm import (EPS, check_and_rank, load_quack, print_ranking, probe_fns, rotating_inputs, save_and_rank,
                         searched_inputs, shape_spec, warm_gbps)
    from space_probe import describe

    from flyautotune_rmsnorm.api import launch
    from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance

    def check_ptx(k, name, knobs, N, elem):
        """The binary a variant launched holds the edits its mode asks for (a stale cache would not)."""
        _, rpw, mode = knobs
        ptx = k.asm["ptx"]
        if mode.startswith("ca"):
            assert "cp.async.cg" not in ptx and "cp.async.ca" in ptx, (name, N, "copies not .ca")
        if mode.endswith("nobar") and not repeats_lanes(N, rpw, 16 // elem):
            assert "bar.sync" not in ptx, (name, N, "the barrier was not dropped")

    def check_out(y, x, w, what):
        assert not y.isnan().any(), f"{what}: an output element was not written"
        ref = rmsnorm_reference(x, w, EPS)
        err = relative_error(y, ref)
        worst = ((y.double() - ref).norm(dim=-1) / ref.norm(dim=-1)).max().item()  # one row's error
        assert err <= 5 * tolerance(x.dtype) and worst <= 10 * tolerance(x.dtype), (what, err, worst)

    _odd_cases(check_ptx, check_out)
    quack = load_quack()
    rows = []
    for spec in args.shapes.split(","):
        M, N, ds = shape_spec(spec)
        x, w, picked = searched_inputs(M, N, ds)
        fns = probe_fns(N, quack, x, w)
        fns[describe(picked)] = lambda x, w, kw=picked: launch(x, w, torch.empty_like(x), M, N, ds, EPS, N, N, None,
                                                               **kw)
        for name, knobs in VARIANTS.items():
            fns[name] = lambda x, w, knobs=knobs: gluon_launch(x, w, torch.empty_like(x), knobs, EPS)
        kernels = {}
        for name, knobs in VARIANTS.items():
            k = gluon_call(x, w, torch.empty_like(x), knobs, EPS)
            kernels[name] = {"n_regs": getattr(k, "n_regs", None), "n_spills": getattr(k, "n_spills", None),
                             "shared": k.metadata.shared}
        row = check_and_rank(fns, x, w, spec, args.rounds, describe(picked), kernels=kernels)
        if args.warm:
            row["warm"], row["warm_spread"] = warm_gbps(fns, rotating_inputs(x, M, N, ds), w, args.rounds, M, N, ds)
        rows.append(row)
        del x
        torch.cuda.empty_cache()
    save_and_rank(args.out, "gluon_probe.json", rows)
    for r in rows:
        if "warm" in r:
            print_ranking(f"{r['shape']}, x just written (warm)", r["warm"], r["warm_spread"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
