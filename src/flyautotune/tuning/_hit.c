/* The cache-hit path of a tuner's first arity, in C (see fastpath.py, which generates the same path in
 * Python and keeps it as this one's fallback).
 *
 * A HitPath is the ``__call__`` of one tuner's own class. A call with exactly the arity it was made for
 * and no keywords checks, in order: the non-tensor arguments' exact types, the environment's size, the
 * open compile_hints block; builds the short key ``(arity, hint key, key values...)`` (a tuple key value
 * only of ints and strs: see fastpath.plain); looks it up in the
 * tuner's memo; runs the entry's tensor check (torch's C check; for in-place and alternating calls the
 * entry's spec of such checks, see check_tensors) over the call's tensors; records the hit; and calls
 * the plan's ``direct`` launch with the call's own argument array.
 * A hit whose only keyword is ``stream=`` (where the tuned function takes one) makes the same checks and
 * calls the plan's ``direct_stream`` with the stream ``resolve`` (streams.resolve_stream) makes of it.
 * Anything else -- other keywords, another arity or type, a changed environment, an unhashable key
 * value, a miss, a failed tensor check, a stream hit without ``direct_stream`` or inside a hints block --
 * calls the generated Python ``call`` with the same arguments, which decides as it always did. A hit
 * whose launch needs the hints context (an open block, hint layers, no direct launch) runs the
 * generated ``launch_rest``.
 *
 * It builds against CPython 3.10+ (the core's floor); where it cannot be built, the Python path serves.
 * The module's VERSION must equal fastpath.HIT_VERSION (raise both with every change here): a build of
 * other source is not used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Py_ssize_t n;          /* the arity (user arguments, the tuner not counted) */
    PyObject *types;       /* tuple of n: the exact type of each non-tensor argument, None for a tensor */
    Py_ssize_t *key_idx;   /* argument index of each key value */
    char *key_shape;       /* 1 where that key value is the argument's .shape */
    Py_ssize_t n_key;
    Py_ssize_t *tensor_idx;
    Py_ssize_t n_tensor;
    PyObject *arity;       /* int n, the short key's first element */
    PyObject *tuner;       /* the one instance of the class this is the __call__ of */
    PyObject *tuner_dict;  /* its __dict__: _env_size read, _last written */
    PyObject *memo;        /* dict: short key -> (tensor check, plan) */
    PyObject *state;       /* context._local: .stack */
    PyObject *environ;     /* os.environ's own dict */
    PyObject *fallback;    /* the generated call(tuner, *args, **kwargs) */
    PyObject *rest;        /* launch_rest(plan, stack, *args): a hit that needs the hints context */
    PyObject *resolve;     /* streams.resolve_stream where hits may pass ``stream=``, else None */
} HitPath;

static PyObject *s_env_size, *s_last, *s_stack, *s_key, *s_hit, *s_direct, *s_shape, *empty_tuple;
static PyObject *s_stream, *s_direct_stream, *s_device, *stream_kwnames;

static PyObject *
fall_back(HitPath *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return PyObject_Vectorcall(self->fallback, args, nargsf & ~PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
}

/* A memo entry's tensor check: ``entry[0](*tensors)``, or where the entry has a spec (``entry[2]``,
 * fastpath.make_entry) its alternatives in turn: ``(inner, pattern)`` passes when every tensor ``i`` is the
 * tensor ``pattern[i]`` and ``inner`` passes over the tensors ``pattern`` keeps (``pattern[i] == i``), or
 * over all of them where ``pattern`` is None. 1: passed, 0: failed, -1: an error is set. */
static int
check_tensors(PyObject *entry, PyObject **tensors, Py_ssize_t n)
{
    PyObject *spec = PyTuple_GET_SIZE(entry) > 2 ? PyTuple_GET_ITEM(entry, 2) : Py_None, *r;
    Py_ssize_t a, i;
    int passed;

    if (spec == Py_None) {
        r = PyObject_Vectorcall(PyTuple_GET_ITEM(entry, 0), tensors, n, NULL);
        if (r == NULL)
            return -1;
        passed = r == Py_True;
        Py_DECREF(r);
        return passed;
    }
    if (!PyTuple_CheckExact(spec))
        return 0;
    for (a = 0; a < PyTuple_GET_SIZE(spec); a++) {
        PyObject *alt = PyTuple_GET_ITEM(spec, a), *pattern, *picked[16];
        Py_ssize_t k = 0;
        int fits = 1;
        if (!PyTuple_CheckExact(alt) || PyTuple_GET_SIZE(alt) != 2)
            return 0;
        pattern = PyTuple_GET_ITEM(alt, 1);
        if (pattern == Py_None) {
            for (i = 0; i < n; i++)
                picked[k++] = tensors[i];
        } else if (!PyTuple_CheckExact(pattern) || PyTuple_GET_SIZE(pattern) != n) {
            fits = 0;
        } else {
            for (i = 0; i < n && fits; i++) {
                Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(pattern, i));
                if (j == -1 && PyErr_Occurred())
                    return -1;
                if (j == i)
                    picked[k++] = tensors[i];
                else if (j < 0 || j >= n || tensors[i] != tensors[j])
                    fits = 0;
            }
        }
        if (!fits)
            continue;
        r = PyObject_Vectorcall(PyTuple_GET_ITEM(alt, 0), picked, k, NULL);
        if (r == NULL)
            return -1;
        passed = r == Py_True;
        Py_DECREF(r);
        if (passed)
            return 1;
    }
    return 0;
}

/* ``func(*head, *a, *tail)``, the call's ``n`` arguments ``a`` spliced into one argument array between
 * ``nhead`` leading and ``ntail`` trailing ones; ``kwnames`` names the last of them (or NULL). */
static PyObject *
call_spliced(PyObject *func, PyObject *const *head, Py_ssize_t nhead, PyObject *const *a, Py_ssize_t n,
             PyObject *const *tail, Py_ssize_t ntail, PyObject *kwnames)
{
    PyObject *small[20], **all = small, *result;
    Py_ssize_t total = nhead + n + ntail, i;

    if (total > 20) {
        all = PyMem_Malloc(total * sizeof(PyObject *));
        if (all == NULL)
            return PyErr_NoMemory();
    }
    for (i = 0; i < nhead; i++)
        all[i] = head[i];
    for (i = 0; i < n; i++)
        all[nhead + i] = a[i];
    for (i = 0; i < ntail; i++)
        all[nhead + n + i] = tail[i];
    result = PyObject_Vectorcall(func, all, total - (kwnames ? PyTuple_GET_SIZE(kwnames) : 0), kwnames);
    if (all != small)
        PyMem_Free(all);
    return result;
}

/* A hit with ``stream=`` (not None) whose plan's specialized callable takes the stream
 * (``plan.direct_stream``): ``direct_stream(*a, stream=resolve_stream(stream, first tensor's device))``.
 * Sets ``*defer`` (and returns NULL with no error) where the Python path must decide instead. */
static PyObject *
stream_launch(HitPath *self, PyObject *plan, PyObject *const *a, Py_ssize_t n, PyObject *stream, int *defer)
{
    PyObject *direct, *device, *resolved, *result;

    direct = PyObject_GetAttr(plan, s_direct_stream);
    if (direct == NULL)
        return NULL;
    if (direct == Py_None) {
        Py_DECREF(direct);
        *defer = 1;
        return NULL;
    }
    device = self->n_tensor ? PyObject_GetAttr(a[self->tensor_idx[0]], s_device) : Py_NewRef(Py_None);
    if (device == NULL) {
        Py_DECREF(direct);
        return NULL;
    }
    resolved = PyObject_CallFunctionObjArgs(self->resolve, stream, device, NULL);
    Py_DECREF(device);
    if (resolved == NULL) {
        Py_DECREF(direct);
        return NULL;
    }
    result = call_spliced(direct, NULL, 0, a, n, &resolved, 1, stream_kwnames);
    Py_DECREF(resolved);
    Py_DECREF(direct);
    return result;
}

/* Whether every part of the tuple key value ``v`` is an int or a str (fastpath.plain). */
static int
plain_tuple(PyObject *v)
{
    Py_ssize_t i;
    for (i = 0; i < PyTuple_GET_SIZE(v); i++) {
        PyObject *part = PyTuple_GET_ITEM(v, i);
        if (!PyLong_CheckExact(part) && !PyUnicode_CheckExact(part))
            return 0;
    }
    return 1;
}

static PyObject *
hit_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    HitPath *self = (HitPath *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t n = self->n, i;
    PyObject *const *a = args + 1;  /* args[0] is the tuner */
    PyObject *stack = NULL, *hint_key, *key = NULL, *entry, *plan, *hit, *direct, *result, *size;
    PyObject *stream = NULL;  /* a hit's ``stream=`` (borrowed), when it passes one other than None */
    PyObject *tensors[16];
    int empty, passed, defer = 0;

    if (nargs != n + 1 || args[0] != self->tuner)
        return fall_back(self, args, nargsf, kwnames);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) {  /* only ``stream=``, where the tuned function takes it */
        PyObject *name = PyTuple_GET_ITEM(kwnames, 0);
        if (self->resolve == Py_None || PyTuple_GET_SIZE(kwnames) != 1
                || (name != s_stream && PyUnicode_Compare(name, s_stream) != 0)) {
            PyErr_Clear();
            return fall_back(self, args, nargsf, kwnames);
        }
        if (args[nargs] != Py_None)
            stream = args[nargs];  /* stream=None is a plain hit, as the Python path has it */
    }
    for (i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(self->types, i);
        if (t != Py_None && (PyObject *)Py_TYPE(a[i]) != t)
            return fall_back(self, args, nargsf, kwnames);
    }
    size = PyDict_GetItemWithError(self->tuner_dict, s_env_size);  /* borrowed */
    if (size == NULL || !PyLong_CheckExact(size) || PyLong_AsSsize_t(size) != PyDict_Size(self->environ)) {
        PyErr_Clear();
        return fall_back(self, args, nargsf, kwnames);
    }
    stack = PyObject_GetAttr(self->state, s_stack);
    if (stack == NULL)
        return NULL;
    empty = stack == Py_None || (PyList_CheckExact(stack) && PyList_GET_SIZE(stack) == 0);
    if (empty) {
        hint_key = Py_NewRef(empty_tuple);
    } else if (PyList_CheckExact(stack)) {
        hint_key = PyObject_GetAttr(PyList_GET_ITEM(stack, PyList_GET_SIZE(stack) - 1), s_key);
        if (hint_key == NULL)
            goto error;
    } else {
        Py_DECREF(stack);
        return fall_back(self, args, nargsf, kwnames);
    }
    key = PyTuple_New(2 + self->n_key);
    if (key == NULL) {
        Py_DECREF(hint_key);
        goto error;
    }
    PyTuple_SET_ITEM(key, 0, Py_NewRef(self->arity));
    PyTuple_SET_ITEM(key, 1, hint_key);
    for (i = 0; i < self->n_key; i++) {
        PyObject *v = a[self->key_idx[i]];
        if (!self->key_shape[i] && PyTuple_Check(v) && !plain_tuple(v)) {
            /* 1.0 and True equal 1: the Python path sends such a value to the general path's key */
            Py_DECREF(key);
            Py_DECREF(stack);
            return fall_back(self, args, nargsf, kwnames);
        }
        v = self->key_shape[i] ? PyObject_GetAttr(v, s_shape) : Py_NewRef(v);
        if (v == NULL)
            goto error;
        PyTuple_SET_ITEM(key, 2 + i, v);
    }
    entry = PyDict_GetItemWithError(self->memo, key);  /* borrowed; the memo may change below */
    Py_CLEAR(key);
    if (entry == NULL || !PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) < 2 || PyTuple_GET_SIZE(entry) > 3) {
        if (PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError))  /* an unhashable key value: the general path */
                goto error;
            PyErr_Clear();
        }
        Py_DECREF(stack);
        return fall_back(self, args, nargsf, kwnames);
    }
    Py_INCREF(entry);
    for (i = 0; i < self->n_tensor; i++)
        tensors[i] = a[self->tensor_idx[i]];
    passed = check_tensors(entry, tensors, self->n_tensor);
    if (passed != 1) {  /* a miss or an error: the generated path refills or raises */
        PyErr_Clear();
        Py_DECREF(entry);
        Py_DECREF(stack);
        return fall_back(self, args, nargsf, kwnames);
    }
    plan = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
    Py_DECREF(entry);
    hit = PyObject_GetAttr(plan, s_hit);
    if (hit == NULL || PyDict_SetItem(self->tuner_dict, s_last, hit) < 0) {
        Py_XDECREF(hit);
        Py_DECREF(plan);
        goto error;
    }
    Py_DECREF(hit);
    if (stream != NULL) {
        if (empty) {
            result = stream_launch(self, plan, a, n, stream, &defer);
            if (!defer) {
                Py_DECREF(plan);
                Py_DECREF(stack);
                return result;
            }
        }
        /* hints in force or no callable that takes the stream: the Python path (launch_on) decides */
        Py_DECREF(plan);
        Py_DECREF(stack);
        return fall_back(self, args, nargsf, kwnames);
    }
    if (empty) {
        direct = PyObject_GetAttr(plan, s_direct);
        if (direct == NULL) {
            Py_DECREF(plan);
            goto error;
        }
        if (direct != Py_None) {
            Py_DECREF(plan);
            Py_DECREF(stack);
            result = PyObject_Vectorcall(direct, a, n, NULL);
            Py_DECREF(direct);
            return result;
        }
        Py_DECREF(direct);
    }
    {
        /* launch_rest(plan, stack, *args): the generated body after its direct launch */
        PyObject *head[2] = {plan, stack};
        result = call_spliced(self->rest, head, 2, a, n, NULL, 0, NULL);
    }
    Py_DECREF(plan);
    Py_DECREF(stack);
    return result;
error:
    Py_XDECREF(key);
    Py_XDECREF(stack);
    return NULL;
}

static int
index_array(PyObject *seq, const char *what, Py_ssize_t n, Py_ssize_t **out, Py_ssize_t *count)
{
    Py_ssize_t i, len;
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return -1;
    len = PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Malloc((len ? len : 1) * sizeof(Py_ssize_t));
    if (*out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < len; i++) {
        Py_ssize_t v = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        if (v < 0 || v >= n) {
            Py_DECREF(fast);
            PyErr_Format(PyExc_ValueError, "HitPath: %s holds %zd, outside the arity %zd", what, v, n);
            return -1;
        }
        (*out)[i] = v;
    }
    *count = len;
    Py_DECREF(fast);
    return 0;
}

static PyObject *
hit_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"types", "key_idx", "key_shape", "tensor_idx", "tuner", "memo", "state", "environ",
                            "fallback", "rest", "resolve", NULL};
    PyObject *types, *key_idx, *key_shape, *tensor_idx, *tuner, *memo, *state, *environ, *fallback, *rest;
    PyObject *resolve = Py_None;
    PyObject *tdict, *shape_fast;
    HitPath *self;
    Py_ssize_t i, n_shape;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OOOOO!OO!OO|O:HitPath", names, &PyTuple_Type, &types, &key_idx,
                                     &key_shape, &tensor_idx, &tuner, &PyDict_Type, &memo, &state, &PyDict_Type,
                                     &environ, &fallback, &rest, &resolve))
        return NULL;
    tdict = PyObject_GetAttrString(tuner, "__dict__");
    if (tdict == NULL)
        return NULL;
    if (!PyDict_CheckExact(tdict)) {
        Py_DECREF(tdict);
        PyErr_SetString(PyExc_TypeError, "HitPath: the tuner's __dict__ is not a dict");
        return NULL;
    }
    self = (HitPath *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(tdict);
        return NULL;
    }
    self->vectorcall = hit_call;
    self->n = PyTuple_GET_SIZE(types);
    self->types = Py_NewRef(types);
    self->tuner = Py_NewRef(tuner);
    self->tuner_dict = tdict;
    self->memo = Py_NewRef(memo);
    self->state = Py_NewRef(state);
    self->environ = Py_NewRef(environ);
    self->fallback = Py_NewRef(fallback);
    self->rest = Py_NewRef(rest);
    self->resolve = Py_NewRef(resolve);
    self->arity = PyLong_FromSsize_t(self->n);
    if (self->arity == NULL)
        goto fail;
    if (index_array(key_idx, "key_idx", self->n, &self->key_idx, &self->n_key) < 0)
        goto fail;
    if (index_array(tensor_idx, "tensor_idx", self->n, &self->tensor_idx, &self->n_tensor) < 0)
        goto fail;
    if (self->n_tensor > 16) {
        PyErr_SetString(PyExc_ValueError, "HitPath: at most 16 tensors");
        goto fail;
    }
    shape_fast = PySequence_Fast(key_shape, "key_shape");
    if (shape_fast == NULL)
        goto fail;
    n_shape = PySequence_Fast_GET_SIZE(shape_fast);
    if (n_shape != self->n_key) {
        Py_DECREF(shape_fast);
        PyErr_SetString(PyExc_ValueError, "HitPath: key_shape and key_idx differ in length");
        goto fail;
    }
    self->key_shape = PyMem_Malloc(n_shape ? n_shape : 1);
    if (self->key_shape == NULL) {
        Py_DECREF(shape_fast);
        PyErr_NoMemory();
        goto fail;
    }
    for (i = 0; i < n_shape; i++) {
        int t = PyObject_IsTrue(PySequence_Fast_GET_ITEM(shape_fast, i));
        if (t < 0) {
            Py_DECREF(shape_fast);
            goto fail;
        }
        self->key_shape[i] = (char)t;
    }
    Py_DECREF(shape_fast);
    return (PyObject *)self;  /* tp_alloc tracked it */
fail:
    Py_DECREF(self);
    return NULL;
}

static int
hit_traverse(HitPath *self, visitproc visit, void *arg)
{
    Py_VISIT(self->types);
    Py_VISIT(self->tuner);
    Py_VISIT(self->tuner_dict);
    Py_VISIT(self->memo);
    Py_VISIT(self->state);
    Py_VISIT(self->environ);
    Py_VISIT(self->fallback);
    Py_VISIT(self->rest);
    Py_VISIT(self->resolve);
    return 0;
}

static int
hit_clear(HitPath *self)
{
    Py_CLEAR(self->types);
    Py_CLEAR(self->tuner);
    Py_CLEAR(self->tuner_dict);
    Py_CLEAR(self->memo);
    Py_CLEAR(self->state);
    Py_CLEAR(self->environ);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->rest);
    Py_CLEAR(self->resolve);
    Py_CLEAR(self->arity);
    return 0;
}

static void
hit_dealloc(HitPath *self)
{
    PyObject_GC_UnTrack((PyObject *)self);
    hit_clear(self);
    PyMem_Free(self->key_idx);
    PyMem_Free(self->key_shape);
    PyMem_Free(self->tensor_idx);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Bound to an instance as a method (``tuner.__call__``), as a function would be. */
static PyObject *
hit_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *
hit_tp_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return PyVectorcall_Call(self, args, kwargs);
}

static PyObject *
hit_fallback(HitPath *self, void *closure)
{
    return Py_NewRef(self->fallback);
}

static PyObject *
hit_name(HitPath *self, void *closure)
{
    return PyUnicode_FromString(closure == NULL ? "__call__" : "Autotuner.__call__");
}

static PyGetSetDef hit_getset[] = {
    {"fallback", (getter)hit_fallback, NULL, "the generated Python call this one defers to", NULL},
    {"__name__", (getter)hit_name, NULL, NULL, NULL},
    {"__qualname__", (getter)hit_name, NULL, NULL, "qualified"},
    {NULL},
};

static PyTypeObject HitPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flyautotune.tuning._hit.HitPath",
    .tp_doc = "A tuner's cache-hit path for one arity, in C; see flyautotune.tuning.fastpath.",
    .tp_basicsize = sizeof(HitPath),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(HitPath, vectorcall),
    .tp_call = hit_tp_call,
    .tp_new = hit_new,
    .tp_dealloc = (destructor)hit_dealloc,
    .tp_traverse = (traverseproc)hit_traverse,
    .tp_clear = (inquiry)hit_clear,
    .tp_descr_get = hit_get,
    .tp_getset = hit_getset,
};

static struct PyModuleDef hit_module = {
    PyModuleDef_HEAD_INIT, "_hit", "flyautotune's cache-hit path in C (see fastpath.py).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__hit(void)
{
    PyObject *m;
    if (PyType_Ready(&HitPathType) < 0)
        return NULL;
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_env_size, "_env_size");
    INTERN(s_last, "_last");
    INTERN(s_stack, "stack");
    INTERN(s_key, "key");
    INTERN(s_hit, "hit");
    INTERN(s_direct, "direct");
    INTERN(s_shape, "shape");
    INTERN(s_stream, "stream");
    INTERN(s_direct_stream, "direct_stream");
    INTERN(s_device, "device");
#undef INTERN
    stream_kwnames = PyTuple_Pack(1, s_stream);
    if (stream_kwnames == NULL)
        return NULL;
    empty_tuple = PyTuple_New(0);
    if (empty_tuple == NULL)
        return NULL;
    m = PyModule_Create(&hit_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObject(m, "HitPath", Py_NewRef((PyObject *)&HitPathType)) < 0
            || PyModule_AddIntConstant(m, "VERSION", 2) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
