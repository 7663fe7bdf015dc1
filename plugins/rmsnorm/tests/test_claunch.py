"""The lean C launch path (claunch): type codes, state packing, the C module's argument handling,
when a compiled kernel takes the path, and (on a GPU) launches against torch."""

import ctypes
import functools
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import types

import pytest
import torch
import triton
import triton.language as tl

from flyautotune_rmsnorm import claunch

HAS_CC = bool(shutil.which("cc") or shutil.which("gcc"))
needs_cc = pytest.mark.skipif(not HAS_CC, reason="no C compiler (cc/gcc) to build the launch module")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
TRITON_36 = triton.__version__.startswith(("3.5.", "3.6."))

# The signature Triton 3.6 gives the RMSNorm body for bf16 x/w/y (constexprs keep their place).
RMSNORM_SIG = {"X": "*bf16", "W": "*bf16", "Y": "*bf16", "M": "i32", "sx_vec": "i32", "sy_vec": "i32",
               "eps": "fp32", "N": "constexpr", "BLOCK_N": "constexpr", "ROWS": "constexpr", "HOLD": "constexpr"}


def _libcuda_loadable() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


# -- codes_for / pack_state ----------------------------------------------------------------------------
def test_codes_for_an_rmsnorm_signature():
    assert claunch.codes_for(RMSNORM_SIG) == "pppiiif----"


def test_codes_for_every_scalar_type():
    sig = {"a": "i1", "b": "i8", "c": "i32", "d": "u32", "e": "i64", "f": "u64", "g": "fp16", "h": "bf16",
           "i": "fp32", "j": "fp64", "k": "*fp32", "l": "*i8", "m": "constexpr"}
    assert claunch.codes_for(sig) == "cciIlLhbfdpp-"


@pytest.mark.parametrize("ty", ["tensordesc<bf16[64, 64]>", "nvTmaDesc", ("*fp32", "i32"), "i16", "u8"],
                         ids=str)
def test_codes_for_names_the_unsupported_argument(ty):
    with pytest.raises(ValueError, match=r"argument 'desc' has type .* does not handle"):
        claunch.codes_for({"X": "*fp32", "desc": ty})


def test_pack_state_layout():
    state = claunch.pack_state(0xABCDEF, 8, 1024, "pi-f")
    assert state == struct.pack("=QIIIIiI", 0xABCDEF, 256, 1024, 4, 2, 0, 0) + b"pi-f"
    assert claunch.pack_state(1, 1, 0, "p", device=3)[24:28] == struct.pack("=i", 3)
    assert claunch.pack_state(1, 1, 0, "p", pdl=True)[28:32] == struct.pack("=I", claunch.FLAG_PDL)
    assert claunch.pack_state(1, 1, 0, "", extra_null_params=0)[8:24] == struct.pack("=IIII", 32, 0, 0, 0)


@pytest.mark.parametrize("kw,match", [
    (dict(function=0), r"function=0 must be in"),
    (dict(function=None), r"function=None must be an int"),
    (dict(function=2**64), r"function=.* must be in"),
    (dict(num_warps=0), r"num_warps=0 must be in \[1, 32\]"),
    (dict(num_warps=64), r"num_warps=64 must be in \[1, 32\]"),
    (dict(num_warps=True), r"num_warps=True must be an int"),
    (dict(shared=-1), r"shared=-1 must be in"),
    (dict(codes="pz"), r"unknown type codes 'z'"),
    (dict(codes=b"p"), r"must be a str"),
    (dict(extra_null_params=-1), r"extra_null_params=-1 must be in"),
    (dict(codes="p" * 63), r"65 kernel parameters; at most 64"),
])
def test_pack_state_rejects_bad_values(kw, match):
    args = dict(function=1, num_warps=4, shared=0, codes="pi")
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        claunch.pack_state(**args)


def test_pack_state_counts_only_real_parameters_toward_the_cap():
    claunch.pack_state(1, 4, 0, "p" * 62 + "-" * 10)  # 62 + 2 null extras = 64


# -- the C module --------------------------------------------------------------------------------------
@needs_cc
def test_module_builds_and_imports_without_a_driver():
    mod = claunch.module()
    assert callable(mod.launch)
    assert claunch.module() is mod  # built once


@pytest.fixture
def launch():
    if not HAS_CC:
        pytest.skip("no C compiler (cc/gcc) to build the launch module")
    return claunch.module().launch


STATE = claunch.pack_state(0x1234, 4, 0, "pi-f")  # pointer, i32, constexpr, fp32


def test_wrong_argument_count_names_both_counts(launch):
    with pytest.raises(TypeError, match=r"expected 8 arguments .* got 7"):
        launch(STATE, 1, 1, 0, 0, 5, 64)
    with pytest.raises(TypeError, match=r"expected 8 arguments .* got 9"):
        launch(STATE, 1, 1, 0, 0, 5, 64, 1.0, 2)


def test_bad_argument_type_names_its_position(launch):
    with pytest.raises(TypeError, match=r"kernel argument 1 \(type code 'i'\) must be an int, not str"):
        launch(STATE, 0, 1, 0, 0, "5", 64, 1.0)
    with pytest.raises(TypeError, match=r"kernel argument 0 \(type code 'p'\).*not float"):
        launch(STATE, 0, 1, 0, 1.5, 5, 64, 1.0)
    with pytest.raises(TypeError, match=r"kernel argument 3 \(type code 'f'\) must be a float or an int"):
        launch(STATE, 0, 1, 0, 0, 5, 64, "x")


def test_int32_overflow(launch):
    with pytest.raises(OverflowError, match=r"kernel argument 1 \(type code 'i'\) does not fit int32"):
        launch(STATE, 0, 1, 0, 0, 2**31, 64, 1.0)
    with pytest.raises(OverflowError, match="does not fit int32"):
        launch(STATE, 0, 1, 0, 0, -2**31 - 1, 64, 1.0)
    with pytest.raises(OverflowError, match="does not fit a 64-bit pointer"):
        launch(STATE, 0, 1, 0, -1, 5, 64, 1.0)


def test_empty_grid_returns_none_without_the_driver(launch):
    # No driver here: reaching it would raise (see the next test).
    assert launch(STATE, 0, 1, 0, 0, 5, "ignored constexpr", 1.0) is None
    assert launch(STATE, 7, 0, None, None, 5, 64, 3) is None


def test_without_libcuda_a_launch_raises(launch):
    if _libcuda_loadable():
        pytest.skip("libcuda.so.1 is loadable here")
    with pytest.raises(RuntimeError, match=r"libcuda\.so\.1"):
        launch(STATE, 1, 1, 0, 0, 5, 64, 1.0)


def test_bad_state_is_rejected(launch):
    with pytest.raises(TypeError, match="state must be bytes"):
        launch("pi", 1, 1, 0)
    with pytest.raises(ValueError, match="malformed"):
        launch(STATE + b"p", 1, 1, 0, 0, 5, 64, 1.0)


FAKE_DRIVER = r"""
#include <stdint.h>
#include <string.h>
typedef int CUresult;
uint64_t fake_vals[64];
unsigned fake_dims[7];
uint64_t fake_stream;
uint64_t fake_function;
int fake_nparams;
int fake_calls;
int fake_rc;
int fake_noctx;
int fake_device = -1;
CUresult cuCtxGetCurrent(void **pctx) { *pctx = fake_noctx ? 0 : (void *)0x1; return 0; }
CUresult cuDeviceGet(int *d, int ordinal) { *d = 100 + ordinal; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **pctx, int d) { fake_device = d; *pctx = (void *)0x2; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { fake_noctx = ctx == 0; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "fake failure"; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
  unsigned d[7] = {gx, gy, gz, bx, by, bz, shared};
  memcpy(fake_dims, d, sizeof d);
  fake_function = (uint64_t)(uintptr_t)f;
  fake_stream = (uint64_t)(uintptr_t)stream;
  for (int k = 0; k < fake_nparams; k++) memcpy(&fake_vals[k], params[k], 8);
  fake_calls += 1 + (extra != 0) * 1000;
  return fake_rc;
}
typedef struct { int id; char pad[4]; union { char pad[64]; int allowed; } value; } attr_t;
typedef struct { unsigned dims[7]; void *stream; attr_t *attrs; unsigned n_attrs; } config_t;
int fake_ex_calls;
int fake_ex_attr[4]; /* number of attributes, the first one's id and value, the second one's id */
CUresult cuLaunchKernelEx(const config_t *c, void *f, void **params, void **extra) {
  memcpy(fake_dims, c->dims, sizeof fake_dims);
  fake_function = (uint64_t)(uintptr_t)f;
  fake_stream = (uint64_t)(uintptr_t)c->stream;
  for (int k = 0; k < fake_nparams; k++) memcpy(&fake_vals[k], params[k], 8);
  fake_ex_attr[0] = (int)c->n_attrs;
  fake_ex_attr[1] = c->n_attrs ? c->attrs[0].id : -1;
  fake_ex_attr[2] = c->n_attrs ? c->attrs[0].value.allowed : -1;
  fake_ex_attr[3] = c->n_attrs > 1 ? c->attrs[1].id : -1;
  fake_ex_calls += 1 + (extra != 0) * 1000;
  return fake_rc;
}
"""

FAKE_RUN = r"""
import ctypes, struct, sys
from flyautotune_rmsnorm import claunch
lib = ctypes.CDLL("libcuda.so.1")
n = 12
ctypes.c_int.in_dll(lib, "fake_nparams").value = n
state = claunch.pack_state(0xF00D, 8, 4096, "pciIlL-fdhbp")
launch = claunch.module().launch
launch(state, 3, 5, 0xBEEF, 0x7F00DEAD0000, -3, -7, 2**32 - 1, -2**40, 2**64 - 1, "cx", 1.5, 0.1, 2.5, 3.0, None)
vals = (ctypes.c_uint64 * 64).in_dll(lib, "fake_vals")
dims = list((ctypes.c_uint * 7).in_dll(lib, "fake_dims"))
b = [struct.pack("<Q", vals[k]) for k in range(n)]
assert dims == [3, 5, 1, 256, 1, 1, 4096], dims
assert ctypes.c_uint64.in_dll(lib, "fake_function").value == 0xF00D
assert ctypes.c_uint64.in_dll(lib, "fake_stream").value == 0xBEEF
assert ctypes.c_int.in_dll(lib, "fake_calls").value == 1
assert struct.unpack("<Q", b[0])[0] == 0x7F00DEAD0000
assert struct.unpack("<b", b[1][:1])[0] == -3
assert struct.unpack("<i", b[2][:4])[0] == -7
assert struct.unpack("<I", b[3][:4])[0] == 2**32 - 1
assert struct.unpack("<q", b[4])[0] == -2**40
assert struct.unpack("<Q", b[5])[0] == 2**64 - 1
assert struct.unpack("<f", b[6][:4])[0] == 1.5
assert struct.unpack("<d", b[7])[0] == 0.1
assert struct.unpack("<e", b[8][:2])[0] == 2.5
assert b[9][:2] == struct.pack("<f", 3.0)[2:4]  # bf16: the upper half of the fp32
assert b[10] == b[11] == bytes(8), (b[10], b[11])  # the pointer passed as None, then the first null extra
def fails_with(state, text):  # a launch while the driver returns an error raises, naming the driver call
    ctypes.c_int.in_dll(lib, "fake_rc").value = 700
    try:
        launch(state, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0)
    except RuntimeError as e:
        assert text in str(e), e
    else:
        sys.exit(f"no error from {text}")
    ctypes.c_int.in_dll(lib, "fake_rc").value = 0
fails_with(state, "cuLaunchKernel failed: fake failure")
# A thread without a context: the primary context of the kernel's device is made current.
ctypes.c_int.in_dll(lib, "fake_noctx").value = 1
on_dev2 = claunch.pack_state(0xF00D, 8, 4096, "pciIlL-fdhbp", device=2)
launch(on_dev2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0)
assert ctypes.c_int.in_dll(lib, "fake_device").value == 102
assert ctypes.c_int.in_dll(lib, "fake_noctx").value == 0
# A kernel compiled for programmatic dependent launch: cuLaunchKernelEx with that one attribute (id 6).
pdl = claunch.pack_state(0xCAFE, 4, 128, "pciIlL-fdhbp", pdl=True)
launch(pdl, 9, 2, 0xD00D, 0x7F00DEAD0000, -3, -7, 2**32 - 1, -2**40, 2**64 - 1, "cx", 1.5, 0.1, 2.5, 3.0, None)
assert ctypes.c_int.in_dll(lib, "fake_ex_calls").value == 1
assert ctypes.c_int.in_dll(lib, "fake_calls").value == 3  # the two launches above, none here
assert list((ctypes.c_int * 4).in_dll(lib, "fake_ex_attr")) == [1, 6, 1, -1]
assert list((ctypes.c_uint * 7).in_dll(lib, "fake_dims")) == [9, 2, 1, 128, 1, 1, 128]
assert ctypes.c_uint64.in_dll(lib, "fake_function").value == 0xCAFE
assert ctypes.c_uint64.in_dll(lib, "fake_stream").value == 0xD00D
assert struct.unpack("<i", struct.pack("<Q", vals[2])[:4])[0] == -7
fails_with(pdl, "cuLaunchKernelEx failed: fake failure")
# A cooperative grid: cuLaunchKernelEx with the cooperative attribute (id 2); with PDL too, both.
coop = claunch.pack_state(0xCAFE, 4, 128, "pciIlL-fdhbp", cooperative=True)
launch(coop, 9, 2, 0xD00D, 0x7F00DEAD0000, -3, -7, 2**32 - 1, -2**40, 2**64 - 1, "cx", 1.5, 0.1, 2.5, 3.0, None)
assert ctypes.c_int.in_dll(lib, "fake_ex_calls").value == 3  # the failed PDL launch counted too
assert list((ctypes.c_int * 4).in_dll(lib, "fake_ex_attr")) == [1, 2, 1, -1]
both = claunch.pack_state(0xCAFE, 4, 128, "pciIlL-fdhbp", pdl=True, cooperative=True)
launch(both, 9, 2, 0xD00D, 0x7F00DEAD0000, -3, -7, 2**32 - 1, -2**40, 2**64 - 1, "cx", 1.5, 0.1, 2.5, 3.0, None)
assert list((ctypes.c_int * 4).in_dll(lib, "fake_ex_attr")) == [2, 6, 1, 2]
ctypes.c_int.in_dll(lib, "fake_rc").value = 720  # the driver refusing a grid it cannot hold resident
try:
    launch(coop, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0)
except RuntimeError as e:
    assert claunch.too_large(e), e
else:
    sys.exit("no error from a refused cooperative launch")
ctypes.c_int.in_dll(lib, "fake_rc").value = 0
print("fake driver ok")
"""


def test_launch_passes_converted_arguments_to_the_driver(launch, tmp_path):
    """Against a stand-in libcuda.so.1 (built here, loaded in a child process through LD_LIBRARY_PATH)
    that records what cuLaunchKernel received."""
    src = tmp_path / "fake.c"
    src.write_text(FAKE_DRIVER)
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(tmp_path / "libcuda.so.1"), str(src)], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=f"{tmp_path}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(FAKE_RUN)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fake driver ok" in proc.stdout


# -- direct_launcher ---------------------------------------------------------------------------------------
class CudaLauncher:
    """Shaped like Triton 3.5/3.6's launcher: scratch sizes, flags and a C ``launch``."""

    launch = staticmethod(len)  # any builtin stands in for the generated C function
    num_ctas = 1
    global_scratch_size = 0
    profile_scratch_size = 0
    launch_cooperative_grid = False
    launch_pdl = False

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        raise AssertionError("the direct path never calls run")


def _fake_compiled(run=None, signature=None, **meta):
    md = dict(num_warps=4, num_ctas=1, shared=0, global_scratch_size=0, profile_scratch_size=0,
              launch_cooperative_grid=False, launch_pdl=False)
    md.update(meta)
    return types.SimpleNamespace(run=run or CudaLauncher(), function=0x5000, name="fake",
                                 src=types.SimpleNamespace(signature=signature or RMSNORM_SIG),
                                 metadata=types.SimpleNamespace(**md))


ARGS = (0x1000, 0x2000, 0x3000, 4, 4096, 4096, 1e-6, 4096, 4096, 1, 0)


def test_direct_launcher_takes_a_triton_36_kernel(launch, monkeypatch):
    monkeypatch.delenv("FLYAUTOTUNE_RMSNORM_CLAUNCH", raising=False)
    call = claunch.direct_launcher(_fake_compiled())
    assert isinstance(call, functools.partial) and call.func is launch
    assert call.args[0] == claunch.pack_state(0x5000, 4, 0, "pppiiif----")
    assert call(0, 1, 0, *ARGS) is None  # empty grid: accepted, nothing launched
    with pytest.raises(TypeError, match=r"expected 15 arguments .* got 14"):
        call(0, 1, 0, *ARGS[:-1])


def test_direct_launcher_runtime_only_takes_no_constexprs(launch, monkeypatch):
    """The specialized cache-hit path passes only what the kernel receives: the constexprs are dropped
    from the codes, and passing them anyway is a clear error."""
    monkeypatch.delenv("FLYAUTOTUNE_RMSNORM_CLAUNCH", raising=False)
    call = claunch.direct_launcher(_fake_compiled(), runtime_only=True)
    assert call.args[0] == claunch.pack_state(0x5000, 4, 0, "pppiiif")
    assert call(0, 1, 0, *ARGS[:7]) is None
    with pytest.raises(TypeError, match=r"expected 11 arguments .* got 15"):
        call(0, 1, 0, *ARGS)


def test_direct_launcher_reads_the_signature_from_metadata_without_src(launch):
    c = _fake_compiled(signature=None)
    c.src = None
    c.metadata.signature = {"X": "*fp32", "n": "i32"}
    assert claunch.direct_launcher(c).args[0].endswith(b"pi")


@pytest.mark.parametrize("change", [
    dict(num_ctas=2), dict(global_scratch_size=128),
    dict(profile_scratch_size=64), dict(cluster_dims=(2, 1, 1)),
    dict(signature={"X": "*fp32", "d": "tensordesc<fp32[16]>"}), dict(signature={"X": "*fp32", "t": ("i32",)}),
], ids=lambda d: next(iter(d)))
def test_direct_launcher_declines_what_it_cannot_launch(change, launch):
    meta = {k: v for k, v in change.items() if k != "signature"}
    assert claunch.direct_launcher(_fake_compiled(signature=change.get("signature"), **meta)) is None


def test_direct_launcher_packs_a_pdl_kernel_for_cuLaunchKernelEx(launch):
    """A kernel compiled with ``launch_pdl`` stays on the direct path; its state asks for the launch
    attribute (the fake-driver test checks what the driver then receives)."""
    call = claunch.direct_launcher(_fake_compiled(launch_pdl=True))
    assert call.args[0] == claunch.pack_state(0x5000, 4, 0, "pppiiif----", pdl=True)
    assert call.args[0] != claunch.pack_state(0x5000, 4, 0, "pppiiif----")
    with pytest.raises(ValueError, match="pdl=1 must be a bool"):
        claunch.pack_state(0x5000, 4, 0, "p", pdl=1)


def test_direct_launcher_packs_a_cooperative_kernel_for_cuLaunchKernelEx(launch):
    """A kernel compiled with ``launch_cooperative_grid`` (the split's one-launch bodies) stays on the
    direct path, its state asking for the cooperative attribute; a refusal of the grid is told apart
    from other launch errors, whichever launcher raised it."""
    call = claunch.direct_launcher(_fake_compiled(launch_cooperative_grid=True))
    assert call.args[0] == claunch.pack_state(0x5000, 4, 0, "pppiiif----", cooperative=True)
    assert call.args[0] not in (claunch.pack_state(0x5000, 4, 0, "pppiiif----"),
                                claunch.pack_state(0x5000, 4, 0, "pppiiif----", pdl=True))
    with pytest.raises(ValueError, match="cooperative=1 must be a bool"):
        claunch.pack_state(0x5000, 4, 0, "p", cooperative=1)
    assert claunch.too_large(RuntimeError("claunch: cuLaunchKernelEx failed: too many blocks in cooperative "
                                          "launch (CUresult 720)"))
    assert claunch.too_large(RuntimeError("Triton Error [CUDA]: too many blocks in cooperative launch"))
    assert not claunch.too_large(RuntimeError("claunch: cuLaunchKernelEx failed: unspecified launch failure "
                                              "(CUresult 719)"))
    assert not claunch.too_large(RuntimeError("claunch: cuLaunchKernel failed: x (CUresult 7200)"))


def test_direct_launcher_accepts_unit_cluster_dims(launch):
    assert claunch.direct_launcher(_fake_compiled(cluster_dims=[1, 1, 1])) is not None


def test_direct_launcher_declines_other_launchers(launch):
    class HIPLauncher(CudaLauncher):
        pass

    class Later(CudaLauncher):  # Triton 3.9 spells the metadata and hooks out
        def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata,
                     launch_enter_hook, launch_exit_hook, *args):
            pass

    Later.__name__ = "CudaLauncher"
    no_launch = CudaLauncher()
    no_launch.launch = None
    for run in (HIPLauncher(), Later(), no_launch):
        assert claunch.direct_launcher(_fake_compiled(run=run)) is None


def test_direct_launcher_declines_a_kernel_the_launcher_flags(launch):
    run = CudaLauncher()
    run.global_scratch_size = 256
    assert claunch.direct_launcher(_fake_compiled(run=run)) is None


@pytest.mark.parametrize("value", ["0", "off"])
def test_env_switch_turns_it_off(value, launch, monkeypatch):
    monkeypatch.setenv("FLYAUTOTUNE_RMSNORM_CLAUNCH", value)
    assert claunch.direct_launcher(_fake_compiled()) is None
    monkeypatch.setenv("FLYAUTOTUNE_RMSNORM_CLAUNCH", "1")
    assert claunch.direct_launcher(_fake_compiled()) is not None


def test_direct_launcher_declines_when_the_module_cannot_be_built(monkeypatch):
    monkeypatch.setattr(claunch, "_module", None)
    monkeypatch.setattr(claunch, "_module_error", "claunch: cannot build the C launch module (test)")
    with pytest.raises(RuntimeError, match="cannot build"):
        claunch.module()
    assert claunch.direct_launcher(_fake_compiled()) is None


# -- on a GPU ------------------------------------------------------------------------------------------------
@triton.jit
def _axpb(X, Y, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=m) * a + 1, mask=m)


@needs_cuda
def test_direct_launch_of_a_triton_kernel_matches_torch():
    n, block, a = 1000, 256, 2.5
    grid = -(-n // block)
    x = torch.randn(n, device="cuda")
    y = torch.full_like(x, float("nan"))
    k = _axpb.warmup(x, y, n, a, BLOCK=block, grid=(grid,))
    k.run  # loads the binary
    call = claunch.direct_launcher(k)
    if call is None:
        assert not TRITON_36, "Triton 3.5/3.6 kernels must take the direct path"
        pytest.skip(f"triton {triton.__version__}: the direct path covers Triton 3.5/3.6's launcher only")
    call(grid, 1, torch.cuda.current_stream().cuda_stream, x.data_ptr(), y.data_ptr(), n, a, block)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x * a + 1)


def _launches(launcher):
    for v in launcher._launches.values():
        yield from (v if isinstance(v, tuple) else (v,))


@needs_cuda
def test_rmsnorm_through_the_direct_path_matches_the_reference():
    from flyautotune_rmsnorm import api, make_launcher, rmsnorm
    from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance

    x = torch.randn(4, 4096, device="cuda", dtype=torch.bfloat16) * 2
    w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
    for _ in range(2):  # the first call compiles; the second is a cache hit
        y = rmsnorm(x, w)
        torch.cuda.synchronize()
        err = relative_error(y, rmsnorm_reference(x, w))
        assert err <= tolerance(y.dtype), f"relative error {err:.3g}"
    if TRITON_36 and claunch.enabled():
        launcher = make_launcher(4096, "bf16", **api.space.default_config(4, 4096, "bf16", "cuda").kwargs)
        calls = [getattr(lc.call, "func", None) for lc in _launches(launcher)]
        assert claunch.module().launch in calls, "the cache hit did not take the direct path"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tuned_cache_hits_launch_the_runtime_only_form_and_stay_right():
    """rmsnorm_autotuned's specialized hit passes only the runtime arguments (claunch's runtime-only form
    on Triton 3.5/3.6); every hit computes the rows, into fresh outputs and into out=."""
    from flyautotune_rmsnorm import make_launcher, rmsnorm_autotuned
    from flyautotune_rmsnorm.api import tuned_launch
    from flyautotune_rmsnorm.reference import relative_error, rmsnorm_reference, tolerance

    x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16) * 2
    w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
    out = torch.full_like(x, float("nan"))
    for i in range(4):
        y = rmsnorm_autotuned(x, w) if i % 2 else rmsnorm_autotuned(x, w, out=out)
        torch.cuda.synchronize()
        assert relative_error(y, rmsnorm_reference(x, w)) <= tolerance(y.dtype)
        x = torch.randn_like(x)
    if TRITON_36 and claunch.enabled():
        launcher = make_launcher(4096, "bf16", **tuned_launch.last_config.kwargs)
        assert any(lc.runtime is not None for lc in _launches(launcher)), "no runtime-only launch was made"
