"""A lean C launch path for a loaded Triton CUDA kernel.

Triton 3.5/3.6's generated launcher parses ~13 fixed arguments, every kernel
argument and a metadata tuple on each call. Here a tiny CPython extension
launches with ``cuLaunchKernel`` from a ``bytes`` state packed once per binary:
``launch(state, gx, gy, stream, *args)`` converts each argument by its one-byte
type code and appends Triton's two (null) scratch pointer parameters. A kernel
compiled for programmatic dependent launch (``launch_pdl``) or for a cooperative
grid (``launch_cooperative_grid``: the driver guarantees every program resident at
once, or refuses the launch) is launched with ``cuLaunchKernelEx`` and those launch
attributes, as Triton's launcher does.

The extension is built on first use by Triton's ``compile_module_from_src``
(cached by source hash); it includes no CUDA header and loads ``libcuda.so.1``
at its first real launch, so it builds and imports without a GPU driver.
``FLYAUTOTUNE_RMSNORM_CLAUNCH=0`` turns the path off (:func:`direct_launcher`
returns None).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import struct
import threading
from typing import Any, Callable, Mapping, Optional

_log = logging.getLogger(__name__)

#: The most kernel parameters one launch passes (the kernel's own plus the null extras).
MAX_PARAMS = 64
#: Codes ``launch`` understands: a pointer, integers, floats, and ``-`` for a constexpr (accepted, ignored).
CODES = "piIlLcfdhb-"
#: Triton signature type -> code (pointers, any ``*...`` type, map to ``p``).
_TYPE_CODES = {
    "i1": "c", "i8": "c", "i32": "i", "u32": "I", "i64": "l", "u64": "L",
    "fp16": "h", "bf16": "b", "fp32": "f", "f32": "f", "fp64": "d", "constexpr": "-",
}
#: ``state`` header: CUfunction, block_x, shared bytes, n_args, n_extra_null_params, device ordinal, flags
#: (native order, no padding).
_HEADER = struct.Struct("=QIIIIiI")
#: ``flags`` bit: launch with programmatic stream serialization (PDL).
FLAG_PDL = 1
#: ``flags`` bit: a cooperative launch (every program resident at once, or ``CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE``).
FLAG_COOP = 2
#: The driver's answer to a cooperative grid it cannot hold resident at once.
CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720
#: The ``__call__`` parameters of Triton 3.5/3.6's ``CudaLauncher``.
_TRITON_36_CALL = ["self", "gridX", "gridY", "gridZ", "stream", "function", "args"]
_OFF = ("0", "false", "no", "off")

MODULE_NAME = "flyautotune_claunch"

C_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

typedef int CUresult;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUcontext;
typedef CUresult (*cuLaunchKernel_t)(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                     unsigned int bx, unsigned int by, unsigned int bz,
                                     unsigned int sharedMemBytes, CUstream s, void **kernelParams,
                                     void **extra);
typedef CUresult (*cuCtxGetCurrent_t)(CUcontext *pctx);
typedef int CUdevice;
typedef CUresult (*cuDeviceGet_t)(CUdevice *device, int ordinal);
typedef CUresult (*cuDevicePrimaryCtxRetain_t)(CUcontext *pctx, CUdevice device);
typedef CUresult (*cuCtxSetCurrent_t)(CUcontext ctx);
typedef CUresult (*cuGetErrorString_t)(CUresult error, const char **pStr);
/* cuLaunchKernelEx's configuration, laid out as in cuda.h (CUDA 12+). */
typedef union {
  char pad[64];
  int programmaticStreamSerializationAllowed;
  int cooperative;
} CUlaunchAttributeValue;
typedef struct {
  int id;
  char pad[8 - sizeof(int)];
  CUlaunchAttributeValue value;
} CUlaunchAttribute;
typedef struct {
  unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned int numAttrs;
} CUlaunchConfig;
typedef CUresult (*cuLaunchKernelEx_t)(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                       void **extra);
#define CU_LAUNCH_ATTRIBUTE_COOPERATIVE 2
#define CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6

#define MAX_PARAMS 64
#define HEADER_BYTES 32 /* uint64 function, uint32 block_x, shared, n_args, n_extra, int32 device, uint32 flags */
#define FLAG_PDL 1u
#define FLAG_COOP 2u

static cuLaunchKernel_t p_cuLaunchKernel = NULL;
static cuCtxGetCurrent_t p_cuCtxGetCurrent = NULL;
static cuDeviceGet_t p_cuDeviceGet = NULL;
static cuDevicePrimaryCtxRetain_t p_cuDevicePrimaryCtxRetain = NULL;
static cuCtxSetCurrent_t p_cuCtxSetCurrent = NULL;
static cuGetErrorString_t p_cuGetErrorString = NULL;
static cuLaunchKernelEx_t p_cuLaunchKernelEx = NULL; /* NULL: a driver without it (PDL states fail) */

typedef union {
  uint64_t u64;
  int64_t i64;
  uint32_t u32;
  int32_t i32;
  int8_t i8;
  uint16_t u16;
  float f32;
  double f64;
} slot_t;

/* Loads the three driver entry points (the GIL serializes callers). */
static int load_driver(void) {
  if (p_cuLaunchKernel != NULL)
    return 0;
  void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == NULL) {
    const char *why = dlerror();
    PyErr_Format(PyExc_RuntimeError, "claunch: cannot load libcuda.so.1 (the CUDA driver): %s",
                 why ? why : "unknown error");
    return -1;
  }
  void *launch = dlsym(lib, "cuLaunchKernel");
  void *ctx = dlsym(lib, "cuCtxGetCurrent");
  void *err = dlsym(lib, "cuGetErrorString");
  void *dev = dlsym(lib, "cuDeviceGet");
  void *retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
  void *set = dlsym(lib, "cuCtxSetCurrent");
  if (launch == NULL || ctx == NULL || err == NULL || dev == NULL || retain == NULL || set == NULL) {
    PyErr_SetString(PyExc_RuntimeError,
                    "claunch: libcuda.so.1 lacks cuLaunchKernel, cuCtxGetCurrent, cuGetErrorString, cuDeviceGet, "
                    "cuDevicePrimaryCtxRetain or cuCtxSetCurrent");
    return -1;
  }
  p_cuDeviceGet = (cuDeviceGet_t)dev;
  p_cuDevicePrimaryCtxRetain = (cuDevicePrimaryCtxRetain_t)retain;
  p_cuCtxSetCurrent = (cuCtxSetCurrent_t)set;
  p_cuGetErrorString = (cuGetErrorString_t)err;
  p_cuCtxGetCurrent = (cuCtxGetCurrent_t)ctx;
  p_cuLaunchKernelEx = (cuLaunchKernelEx_t)dlsym(lib, "cuLaunchKernelEx");
  p_cuLaunchKernel = (cuLaunchKernel_t)launch;
  return 0;
}

static PyObject *cuda_error(const char *what, CUresult code) {
  const char *text = NULL;
  if (p_cuGetErrorString == NULL || p_cuGetErrorString(code, &text) != 0 || text == NULL)
    text = "unknown error";
  PyErr_Format(PyExc_RuntimeError, "claunch: %s failed: %s (CUresult %d)", what, text, (int)code);
  return NULL;
}

static int type_error(Py_ssize_t pos, char code, const char *want, PyObject *obj) {
  PyErr_Format(PyExc_TypeError, "claunch: kernel argument %zd (type code '%c') must be %s, not %.200s", pos,
               code, want, Py_TYPE(obj)->tp_name);
  return -1;
}

static int range_error(Py_ssize_t pos, char code, const char *what) {
  PyErr_Clear();
  PyErr_Format(PyExc_OverflowError, "claunch: kernel argument %zd (type code '%c') does not fit %s", pos, code,
               what);
  return -1;
}

/* An integer argument as its 64 bits: a Python int (or an object with __index__) within [lo, hi] for a
   signed code, [0, uhi] for an unsigned one; out of range raises OverflowError naming ``what``. */
static int as_int(PyObject *obj, Py_ssize_t pos, char code, int is_signed, long long lo, long long hi,
                  unsigned long long uhi, const char *what, uint64_t *bits) {
  PyObject *n;
  int failed;
  if (PyLong_Check(obj)) {
    Py_INCREF(obj);
    n = obj;
  } else if (PyIndex_Check(obj)) {
    n = PyNumber_Index(obj);
    if (n == NULL)
      return -1;
  } else {
    return type_error(pos, code, code == 'p' ? "an int (a device pointer) or None" : "an int", obj);
  }
  if (is_signed) {
    long long v = PyLong_AsLongLong(n);
    failed = v == -1 && PyErr_Occurred();
    if (!failed && (v < lo || v > hi)) {
      Py_DECREF(n);
      return range_error(pos, code, what);
    }
    *bits = (uint64_t)v;
  } else {
    unsigned long long u = PyLong_AsUnsignedLongLong(n);
    failed = u == (unsigned long long)-1 && PyErr_Occurred();
    if (!failed && u > uhi) {
      Py_DECREF(n);
      return range_error(pos, code, what);
    }
    *bits = (uint64_t)u;
  }
  Py_DECREF(n);
  if (failed)
    return PyErr_ExceptionMatches(PyExc_OverflowError) ? range_error(pos, code, what) : -1;
  return 0;
}

static int as_double(PyObject *obj, Py_ssize_t pos, char code, double *out) {
  if (PyFloat_CheckExact(obj)) {
    *out = PyFloat_AS_DOUBLE(obj);
    return 0;
  }
  *out = PyFloat_AsDouble(obj);
  if (*out == -1.0 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      return type_error(pos, code, "a float or an int", obj);
    }
    return -1;
  }
  return 0;
}

static int convert(PyObject *obj, Py_ssize_t pos, char code, slot_t *slot) {
  uint64_t bits;
  double d;
  slot->u64 = 0;
  switch (code) {
  case 'p':
    if (obj == Py_None)
      return 0;
    if (as_int(obj, pos, code, 0, 0, 0, UINT64_MAX, "a 64-bit pointer", &bits) < 0)
      return -1;
    slot->u64 = bits;
    return 0;
  case 'i':
    if (as_int(obj, pos, code, 1, INT32_MIN, INT32_MAX, 0, "int32", &bits) < 0)
      return -1;
    slot->i32 = (int32_t)(int64_t)bits;
    return 0;
  case 'I':
    if (as_int(obj, pos, code, 0, 0, 0, UINT32_MAX, "uint32", &bits) < 0)
      return -1;
    slot->u32 = (uint32_t)bits;
    return 0;
  case 'l':
  case 'L':
    if (as_int(obj, pos, code, code == 'l', INT64_MIN, INT64_MAX, UINT64_MAX, code == 'l' ? "int64" : "uint64",
               &bits) < 0)
      return -1;
    slot->u64 = bits;
    return 0;
  case 'c':
    if (as_int(obj, pos, code, 1, INT8_MIN, INT8_MAX, 0, "int8", &bits) < 0)
      return -1;
    slot->i8 = (int8_t)(int64_t)bits;
    return 0;
  case 'f':
    if (as_double(obj, pos, code, &d) < 0)
      return -1;
    slot->f32 = (float)d;
    return 0;
  case 'd':
    if (as_double(obj, pos, code, &d) < 0)
      return -1;
    slot->f64 = d;
    return 0;
  case 'h':
    if (as_double(obj, pos, code, &d) < 0)
      return -1;
#if PY_VERSION_HEX < 0x030B0000
    if (_PyFloat_Pack2(d, (unsigned char *)&slot->u16, 1) < 0)
#else
    if (PyFloat_Pack2(d, (char *)&slot->u16, 1) < 0)
#endif
      return range_error(pos, code, "fp16");
    return 0;
  case 'b': {
    if (as_double(obj, pos, code, &d) < 0)
      return -1;
    float f = (float)d;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    slot->u16 = (uint16_t)(bits >> 16);
    return 0;
  }
  default:
    PyErr_Format(PyExc_ValueError, "claunch: unknown type code '%c' for kernel argument %zd", code, pos);
    return -1;
  }
}

static int as_dim(PyObject *obj, const char *name, unsigned int *out) {
  unsigned long long u;
  if (!PyLong_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "claunch: %s must be an int, not %.200s", name, Py_TYPE(obj)->tp_name);
    return -1;
  }
  u = PyLong_AsUnsignedLongLong(obj);
  if (u == (unsigned long long)-1 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError))
      return -1;
    u = (unsigned long long)UINT32_MAX + 1;
  }
  if (u > UINT32_MAX) {
    PyErr_Clear();
    PyErr_Format(PyExc_OverflowError, "claunch: %s does not fit uint32", name);
    return -1;
  }
  *out = (unsigned int)u;
  return 0;
}

static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  uint64_t function;
  uint32_t block_x, shared, n_args, n_extra, flags;
  int32_t device;
  unsigned int gx, gy;
  unsigned long long stream = 0;
  slot_t slots[MAX_PARAMS];
  void *params[MAX_PARAMS];
  int np = 0;
  (void)self;

  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "claunch: launch() expected at least 4 arguments (state, gx, gy, stream), got 0");
    return NULL;
  }
  if (!PyBytes_Check(args[0])) {
    PyErr_Format(PyExc_TypeError, "claunch: state must be bytes (from pack_state), not %.200s",
                 Py_TYPE(args[0])->tp_name);
    return NULL;
  }
  Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
  const char *buf = PyBytes_AS_STRING(args[0]);
  if (size < HEADER_BYTES) {
    PyErr_SetString(PyExc_ValueError, "claunch: state is too short (not made by pack_state)");
    return NULL;
  }
  memcpy(&function, buf, 8);
  memcpy(&block_x, buf + 8, 4);
  memcpy(&shared, buf + 12, 4);
  memcpy(&n_args, buf + 16, 4);
  memcpy(&n_extra, buf + 20, 4);
  memcpy(&device, buf + 24, 4);
  memcpy(&flags, buf + 28, 4);
  if ((Py_ssize_t)n_args != size - HEADER_BYTES || n_extra > MAX_PARAMS) {
    PyErr_SetString(PyExc_ValueError, "claunch: state is malformed (not made by pack_state)");
    return NULL;
  }
  const char *codes = buf + HEADER_BYTES;
  if (nargs != 4 + (Py_ssize_t)n_args) {
    PyErr_Format(PyExc_TypeError,
                 "claunch: launch() expected %zd arguments (state, gx, gy, stream and %u kernel arguments), "
                 "got %zd",
                 4 + (Py_ssize_t)n_args, (unsigned)n_args, nargs);
    return NULL;
  }
  if (as_dim(args[1], "gx", &gx) < 0 || as_dim(args[2], "gy", &gy) < 0)
    return NULL;
  if (args[3] != Py_None) {
    if (!PyLong_Check(args[3])) {
      PyErr_Format(PyExc_TypeError, "claunch: stream must be an int (a CUstream handle) or None, not %.200s",
                   Py_TYPE(args[3])->tp_name);
      return NULL;
    }
    stream = PyLong_AsUnsignedLongLong(args[3]);
    if (stream == (unsigned long long)-1 && PyErr_Occurred())
      return NULL;
  }

  for (Py_ssize_t k = 0; k < (Py_ssize_t)n_args; k++) {
    char code = codes[k];
    if (code == '-')
      continue;
    if (np >= MAX_PARAMS) {
      PyErr_Format(PyExc_ValueError, "claunch: more than %d kernel parameters", MAX_PARAMS);
      return NULL;
    }
    if (convert(args[4 + k], k, code, &slots[np]) < 0)
      return NULL;
    params[np] = &slots[np];
    np++;
  }
  for (uint32_t e = 0; e < n_extra; e++) {
    if (np >= MAX_PARAMS) {
      PyErr_Format(PyExc_ValueError, "claunch: more than %d kernel parameters", MAX_PARAMS);
      return NULL;
    }
    slots[np].u64 = 0;
    params[np] = &slots[np];
    np++;
  }

  if ((unsigned long long)gx * gy == 0)
    Py_RETURN_NONE;
  if (load_driver() < 0)
    return NULL;
  CUcontext ctx = NULL;
  CUresult rc = p_cuCtxGetCurrent(&ctx);
  if (rc != 0)
    return cuda_error("cuCtxGetCurrent", rc);
  if (ctx == NULL) {
    /* A thread that has not touched CUDA yet: make the primary context of the kernel's device current,
       as Triton's launcher does (for device 0). */
    CUdevice d;
    if ((rc = p_cuDeviceGet(&d, device)) != 0)
      return cuda_error("cuDeviceGet", rc);
    if ((rc = p_cuDevicePrimaryCtxRetain(&ctx, d)) != 0)
      return cuda_error("cuDevicePrimaryCtxRetain", rc);
    if ((rc = p_cuCtxSetCurrent(ctx)) != 0)
      return cuda_error("cuCtxSetCurrent", rc);
  }
  if (flags & (FLAG_PDL | FLAG_COOP)) {
    if (p_cuLaunchKernelEx == NULL) {
      PyErr_SetString(PyExc_RuntimeError, "claunch: this libcuda.so.1 lacks cuLaunchKernelEx, which a "
                                          "programmatic dependent or cooperative launch needs");
      return NULL;
    }
    CUlaunchAttribute attrs[2];
    unsigned int n_attrs = 0;
    memset(attrs, 0, sizeof attrs);
    if (flags & FLAG_PDL) {
      attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs[n_attrs++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (flags & FLAG_COOP) {
      attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n_attrs++].value.cooperative = 1;
    }
    CUlaunchConfig config = {gx, gy, 1, block_x, 1, 1, shared, (CUstream)(uintptr_t)stream, attrs, n_attrs};
    Py_BEGIN_ALLOW_THREADS;
    rc = p_cuLaunchKernelEx(&config, (CUfunction)(uintptr_t)function, params, NULL);
    Py_END_ALLOW_THREADS;
    if (rc != 0)
      return cuda_error("cuLaunchKernelEx", rc);
    Py_RETURN_NONE;
  }
  Py_BEGIN_ALLOW_THREADS;
  rc = p_cuLaunchKernel((CUfunction)(uintptr_t)function, gx, gy, 1, block_x, 1, 1, shared,
                        (CUstream)(uintptr_t)stream, params, NULL);
  Py_END_ALLOW_THREADS;
  if (rc != 0)
    return cuda_error("cuLaunchKernel", rc);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
     "launch(state, gx, gy, stream, *args): one cuLaunchKernel of the kernel packed in state."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "flyautotune_claunch", NULL, -1, methods,
                                        NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_flyautotune_claunch(void) { return PyModule_Create(&module_def); }
"""

_module: Any = None
_module_error: Optional[str] = None
_module_lock = threading.Lock()
_logged = False


def codes_for(signature: Mapping[str, Any]) -> str:
    """The type-code string of a Triton signature (argument name -> type string), in its order.

    Raises ValueError naming the first argument whose type the direct launch does not handle
    (tuples, tensor descriptors, ``nvTmaDesc``, 16-bit or unsigned 8-bit integers ...).
    """
    codes = []
    for name, ty in signature.items():
        if isinstance(ty, str) and ty.startswith("*"):
            codes.append("p")
        elif isinstance(ty, str) and ty in _TYPE_CODES:
            codes.append(_TYPE_CODES[ty])
        else:
            raise ValueError(f"claunch: argument {name!r} has type {ty!r}, which the direct launch does not handle")
    return "".join(codes)


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"claunch: {name}={value!r} must be an int")
    if not lo <= value <= hi:
        raise ValueError(f"claunch: {name}={value} must be in [{lo}, {hi}]")


def pack_state(function: int, num_warps: int, shared: int, codes: str, extra_null_params: int = 2,
               device: int = 0, pdl: bool = False, cooperative: bool = False) -> bytes:
    """The ``state`` argument of ``launch``: the kernel handle, ``32 * num_warps`` threads, the shared
    memory bytes, the argument codes, how many null pointer parameters follow the kernel's own, the
    device the kernel is loaded on (its primary context is made current on a thread that has none), and
    whether the kernel is launched with programmatic dependent launch or as a cooperative grid (either
    through ``cuLaunchKernelEx``)."""
    _check_int("function", function, 1, 2**64 - 1)
    _check_int("device", device, 0, 2**31 - 1)
    _check_int("num_warps", num_warps, 1, 32)
    _check_int("shared", shared, 0, 2**32 - 1)
    _check_int("extra_null_params", extra_null_params, 0, MAX_PARAMS)
    if not isinstance(codes, str):
        raise ValueError(f"claunch: codes={codes!r} must be a str")
    bad = sorted(set(codes) - set(CODES))
    if bad:
        raise ValueError(f"claunch: codes={codes!r} has unknown type codes {''.join(bad)!r}; known: {CODES!r}")
    n_params = len(codes) - codes.count("-") + extra_null_params
    if n_params > MAX_PARAMS:
        raise ValueError(f"claunch: {n_params} kernel parameters; at most {MAX_PARAMS}")
    for name, flag in (("pdl", pdl), ("cooperative", cooperative)):
        if not isinstance(flag, bool):
            raise ValueError(f"claunch: {name}={flag!r} must be a bool")
    return (_HEADER.pack(function, 32 * num_warps, shared, len(codes), extra_null_params, device,
                         (FLAG_PDL if pdl else 0) | (FLAG_COOP if cooperative else 0)) + codes.encode("ascii"))


def module() -> Any:
    """The C launch module, built (or taken from Triton's cache) and imported once per process.

    Raises RuntimeError when it cannot be built (no C compiler, no Python headers ...); the failure is
    remembered, so later calls raise at once.
    """
    global _module, _module_error
    mod = _module
    if mod is not None:
        return mod
    with _module_lock:
        if _module is None:
            if _module_error is not None:
                raise RuntimeError(_module_error)
            try:
                from triton.runtime.build import compile_module_from_src

                _module = compile_module_from_src(src=C_SOURCE, name=MODULE_NAME, library_dirs=[], include_dirs=[],
                                                  libraries=[])
            except Exception as e:
                _module_error = (f"claunch: cannot build the C launch module (needs a C compiler and the Python "
                                 f"headers): {type(e).__name__}: {e}")
                raise RuntimeError(_module_error) from e
        return _module


def enabled() -> bool:
    """False when ``FLYAUTOTUNE_RMSNORM_CLAUNCH`` is 0 (or false/no/off)."""
    return os.environ.get("FLYAUTOTUNE_RMSNORM_CLAUNCH", "1").strip().lower() not in _OFF


def _is_triton_36_launcher(run: Any) -> bool:
    if type(run).__name__ != "CudaLauncher" or not callable(getattr(run, "launch", None)):
        return False
    try:
        params = list(inspect.signature(type(run).__call__).parameters)
    except (TypeError, ValueError):
        return False
    return params == _TRITON_36_CALL


def _current_device() -> int:
    """The CUDA device current now: where the caller just loaded the kernel (``compiled.run``)."""
    try:
        import triton

        return int(triton.runtime.driver.active.get_current_device())
    except Exception:  # no driver here (tests of the path without a GPU)
        return 0


def _signature(compiled: Any) -> Optional[Mapping]:
    for owner in (getattr(compiled, "src", None), getattr(compiled, "metadata", None), compiled):
        sig = getattr(owner, "signature", None)
        if isinstance(sig, Mapping):
            return sig
    return None


def _why_not(compiled: Any, run: Any, md: Any) -> Optional[str]:
    """Why ``compiled`` is outside the direct path (None: inside)."""
    if md is None:
        return "no metadata"
    if not _is_triton_36_launcher(run):
        return f"launcher {type(run).__name__} is not Triton 3.5/3.6's CudaLauncher"
    if getattr(md, "num_ctas", 1) != 1 or getattr(run, "num_ctas", 1) != 1:
        return "num_ctas != 1"
    cluster = getattr(md, "cluster_dims", None)
    if cluster is not None and tuple(cluster) != (1, 1, 1):
        return f"cluster_dims {tuple(cluster)}"
    for name in ("global_scratch_size", "profile_scratch_size"):
        if getattr(md, name, 0) or getattr(run, name, 0):
            return f"{name} is nonzero"
    if getattr(md, "tensordesc_meta", None):
        return "tensor descriptors"
    return None


def direct_launcher(compiled: Any, runtime_only: bool = False) -> Optional[Callable[..., None]]:
    """``call(gx, gy, stream, *args)`` launching the loaded Triton ``CompiledKernel`` ``compiled`` through
    the C module, or None when the kernel is outside this path (another launcher or Triton version,
    clusters, scratch memory, an argument type without a code), when the
    module cannot be built, or when ``FLYAUTOTUNE_RMSNORM_CLAUNCH=0``.

    ``args`` are the kernel's arguments in signature order, constexprs included, pointers as ints; with
    ``runtime_only``, the arguments that are not constexprs only (nothing to pass that the launch skips).
    """
    global _logged
    if not enabled():
        return None
    run = getattr(compiled, "run", None)
    md = getattr(compiled, "metadata", None)
    why = _why_not(compiled, run, md)
    sig = _signature(compiled)
    if why is None and sig is None:
        why = "no signature"
    if why is None:
        try:
            codes = codes_for(sig)
            if runtime_only:
                codes = codes.replace("-", "")
            pdl = bool(getattr(md, "launch_pdl", False) or getattr(run, "launch_pdl", False))
            coop = bool(getattr(md, "launch_cooperative_grid", False) or getattr(run, "launch_cooperative_grid", False))
            state = pack_state(getattr(compiled, "function", None), getattr(md, "num_warps", None),
                               getattr(md, "shared", None), codes, device=_current_device(), pdl=pdl,
                               cooperative=coop)
        except ValueError as e:
            why = str(e)
    if why is not None:
        _log.debug("claunch: %s takes Triton's launcher: %s", getattr(compiled, "name", "kernel"), why)
        return None
    try:
        mod = module()
    except RuntimeError as e:
        if not _logged:
            _logged = True
            _log.debug("%s", e)
        return None
    return functools.partial(mod.launch, state)


def too_large(err: BaseException) -> bool:
    """Whether ``err``, raised by a launch (this module's or Triton's), is the driver refusing a
    cooperative grid it cannot hold resident at once (``CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE``: under
    an MPS thread limit or a green context, or a grid bigger than the GPU)."""
    text = str(err)
    return (f"CUresult {CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE})" in text
            or "too many blocks in cooperative launch" in text)
