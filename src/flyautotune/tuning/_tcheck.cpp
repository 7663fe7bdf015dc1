// The cache hit's tensor check, compiled against the installed torch (flyautotune.tuning.tcheck builds
// it into the user cache, never at install time, and loads it only under the torch it was built for).
//
// TensorCheck(*tensors) records each tensor's Python type, dispatch keys, dtype, device, requires_grad,
// dimensions and strides (sizes free); calling it with tensors returns True only for the same count of
// distinct objects that match all of those, False for anything else, non-tensors included. That is what
// torch's own TensorGuards.check returns for such tensors (without the thread's dispatch-key modes, which
// do not change what a Triton launch reads), read from the TensorImpl directly instead of through
// pybind11's dispatcher: the dispatcher is most of that call's cost on a cache hit.

#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <vector>

#ifndef FAT_TORCH_VERSION
#error "build with -DFAT_TORCH_VERSION=\"<torch.__version__>\""
#endif

namespace {

struct Expect {
    PyTypeObject *type;
    uint64_t keys;
    caffe2::TypeMeta dtype;
    c10::Device device{c10::kCPU};
    bool requires_grad;
    int64_t dim;
    int64_t *strides;  // dim of them, in the owner's block
};

struct TensorCheck {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Py_ssize_t n;
    Expect *expect;   // n entries
    int64_t *block;   // every entry's strides
};

// The tensor's impl, or nullptr where ``obj`` is no plain strided tensor this check can read.
c10::TensorImpl *impl_of(PyObject *obj) {
    if (!THPVariable_Check(obj))
        return nullptr;
    const at::Tensor &t = THPVariable_Unpack(obj);
    if (!t.defined())
        return nullptr;
    c10::TensorImpl *impl = t.unsafeGetTensorImpl();
    if (impl->layout() != c10::kStrided || impl->has_symbolic_sizes_strides())
        return nullptr;
    return impl;
}

bool matches(const Expect &e, PyObject *obj) {
    if (Py_TYPE(obj) != e.type)
        return false;
    const at::Tensor &t = THPVariable_Unpack(obj);
    c10::TensorImpl *impl = t.unsafeGetTensorImpl();
    if (impl->key_set().raw_repr() != e.keys || impl->dtype() != e.dtype || impl->device() != e.device
            || impl->dim() != e.dim || impl->has_symbolic_sizes_strides() || impl->requires_grad() != e.requires_grad)
        return false;
    c10::IntArrayRef strides = impl->strides();
    return std::memcmp(strides.data(), e.strides, sizeof(int64_t) * e.dim) == 0;
}

PyObject *check_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    auto *self = reinterpret_cast<TensorCheck *>(op);
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "TensorCheck takes tensors by position only");
        return nullptr;
    }
    if (n != self->n)
        Py_RETURN_FALSE;
    try {
        for (Py_ssize_t i = 0; i < n; i++) {
            for (Py_ssize_t j = 0; j < i; j++)
                if (args[i] == args[j])
                    Py_RETURN_FALSE;  // as torch's check: one object twice is an aliasing the caller keys apart
            if (!matches(self->expect[i], args[i]))
                Py_RETURN_FALSE;
        }
    } catch (...) {
        Py_RETURN_FALSE;  // a tensor whose strides cannot be read (a custom policy) is no match
    }
    Py_RETURN_TRUE;
}

void check_dealloc(PyObject *op) {
    auto *self = reinterpret_cast<TensorCheck *>(op);
    for (Py_ssize_t i = 0; i < self->n; i++)
        Py_XDECREF(reinterpret_cast<PyObject *>(self->expect[i].type));
    delete[] self->expect;
    delete[] self->block;
    Py_TYPE(op)->tp_free(op);
}

PyObject *check_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (kwargs != nullptr && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "TensorCheck(*tensors) takes no keyword arguments");
        return nullptr;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args), total = 0;
    std::vector<c10::TensorImpl *> impls(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *obj = PyTuple_GET_ITEM(args, i);
        c10::TensorImpl *impl = impls[i] = impl_of(obj);
        if (impl == nullptr) {
            PyErr_Format(PyExc_TypeError, "TensorCheck: argument %zd must be a strided torch.Tensor with "
                         "concrete strides, got %.100s", i, Py_TYPE(obj)->tp_name);
            return nullptr;
        }
        for (Py_ssize_t j = 0; j < i; j++)
            if (PyTuple_GET_ITEM(args, j) == obj) {
                PyErr_Format(PyExc_ValueError, "TensorCheck: arguments %zd and %zd are one tensor; pass "
                             "distinct tensors", j, i);
                return nullptr;
            }
        total += impl->dim();
    }
    auto *self = reinterpret_cast<TensorCheck *>(type->tp_alloc(type, 0));
    if (self == nullptr)
        return nullptr;
    self->vectorcall = check_call;
    self->n = 0;
    self->expect = new Expect[n ? n : 1];
    self->block = new int64_t[total ? total : 1];
    int64_t *next = self->block;
    try {
        for (Py_ssize_t i = 0; i < n; i++) {
            c10::TensorImpl *impl = impls[i];
            Expect &e = self->expect[i];
            e.type = Py_TYPE(PyTuple_GET_ITEM(args, i));
            Py_INCREF(reinterpret_cast<PyObject *>(e.type));
            self->n = i + 1;
            e.keys = impl->key_set().raw_repr();
            e.dtype = impl->dtype();
            e.device = impl->device();
            e.requires_grad = impl->requires_grad();
            e.dim = impl->dim();
            c10::IntArrayRef strides = impl->strides();
            std::memcpy(next, strides.data(), sizeof(int64_t) * e.dim);
            e.strides = next;
            next += e.dim;
        }
    } catch (const std::exception &err) {
        PyErr_Format(PyExc_TypeError, "TensorCheck: %s", err.what());
        Py_DECREF(self);
        return nullptr;
    }
    return reinterpret_cast<PyObject *>(self);
}

PyTypeObject TensorCheckType = {
    PyVarObject_HEAD_INIT(nullptr, 0)
    "flyautotune.tuning._tcheck.TensorCheck",  // tp_name
    sizeof(TensorCheck),                        // tp_basicsize
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_tcheck",
    "The cache hit's tensor check, compiled against one torch build (see TORCH_VERSION).", -1,
};

}  // namespace

PyMODINIT_FUNC PyInit__tcheck(void) {
    TensorCheckType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    TensorCheckType.tp_doc = "TensorCheck(*tensors): check(*tensors) -> bool, True for tensors laid out as these";
    TensorCheckType.tp_new = check_new;
    TensorCheckType.tp_dealloc = check_dealloc;
    TensorCheckType.tp_call = PyVectorcall_Call;
    TensorCheckType.tp_vectorcall_offset = offsetof(TensorCheck, vectorcall);
    if (PyType_Ready(&TensorCheckType) < 0)
        return nullptr;
    PyObject *m = PyModule_Create(&module_def);
    if (m == nullptr)
        return nullptr;
    if (PyModule_AddObjectRef(m, "TensorCheck", reinterpret_cast<PyObject *>(&TensorCheckType)) < 0
            || PyModule_AddStringConstant(m, "TORCH_VERSION", FAT_TORCH_VERSION) < 0) {
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
