/* bf16 reductions for host/elementwise.py: numpy has no bfloat16, and torch's own kernels would run in its
 * OpenMP pool (see the module docstring there for why the collectives keep out of it).
 *
 * Each element is widened to float32, combined in float32, and rounded back to bf16 to nearest even: what
 * c10::BFloat16's arithmetic does element by element, and so what gloo's reduction of bf16 does. A NaN result is
 * written as 0x7FC0 (c10's scalar rounding; torch's vectorised kernels write 0xFFFF: both are NaN). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

static inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_to_bf16(float f)
{
    if (isnan(f))
        return 0x7FC0;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* NaN-propagating min/max, as torch.minimum/maximum: a NaN in either operand gives NaN. */
static inline float min_nan(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b); }
static inline float max_nan(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b); }

enum { OP_SUM = 0, OP_PROD = 1, OP_MIN = 2, OP_MAX = 3 };

#define BF16_LOOP(EXPR)                                                                                         \
    for (Py_ssize_t i = 0; i < n; i++) {                                                                        \
        float x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]);                                                     \
        out[i] = f32_to_bf16(EXPR);                                                                             \
    }

PyDoc_STRVAR(bf16_combine_doc,
"bf16_combine(op, out, a, b)\n"
"--\n\n"
"``out = a op b`` element by element over bf16 words (uint16 buffers of equal length, C-contiguous; ``out`` may\n"
"be ``a`` or ``b``), op 0 sum, 1 product, 2 min, 3 max; float32 arithmetic, rounded to nearest even. The GIL is\n"
"released throughout.");

static PyObject *bf16_combine(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "bf16_combine takes 4 arguments, got %zd", nargs);
        return NULL;
    }
    long op = PyLong_AsLong(args[0]);
    if (op == -1 && PyErr_Occurred())
        return NULL;
    if (op < OP_SUM || op > OP_MAX) {
        PyErr_Format(PyExc_ValueError, "bf16_combine: op must be 0..3 (sum, product, min, max), got %ld", op);
        return NULL;
    }
    Py_buffer vo, va, vb;
    if (PyObject_GetBuffer(args[1], &vo, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &va, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&vo);
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &vb, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&va);
        PyBuffer_Release(&vo);
        return NULL;
    }
    PyObject *result = NULL;
    if (vo.len != va.len || vo.len != vb.len || vo.len % 2) {
        PyErr_Format(PyExc_ValueError, "bf16_combine: out, a and b must hold the same whole number of bf16 words "
                     "(got %zd, %zd and %zd bytes)", vo.len, va.len, vb.len);
        goto done;
    }
    Py_ssize_t n = vo.len / 2;
    uint16_t *out = (uint16_t *)vo.buf;
    const uint16_t *a = (const uint16_t *)va.buf, *b = (const uint16_t *)vb.buf;
    Py_BEGIN_ALLOW_THREADS
    switch (op) {
    case OP_SUM: BF16_LOOP(x + y) break;
    case OP_PROD: BF16_LOOP(x * y) break;
    case OP_MIN: BF16_LOOP(min_nan(x, y)) break;
    default: BF16_LOOP(max_nan(x, y)) break;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&vb);
    PyBuffer_Release(&va);
    PyBuffer_Release(&vo);
    return result;
}

PyDoc_STRVAR(bf16_divide_doc,
"bf16_divide(t, d)\n"
"--\n\n"
"``t = t / d`` in place over bf16 words (a C-contiguous uint16 buffer), float32 division, rounded to nearest even\n"
"(as torch's ``div_`` by a scalar on a bf16 tensor). The GIL is released throughout.");

static PyObject *bf16_divide(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "bf16_divide takes 2 arguments, got %zd", nargs);
        return NULL;
    }
    double d = PyFloat_AsDouble(args[1]);
    if (d == -1.0 && PyErr_Occurred())
        return NULL;
    Py_buffer vt;
    if (PyObject_GetBuffer(args[0], &vt, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        return NULL;
    if (vt.len % 2) {
        PyErr_Format(PyExc_ValueError, "bf16_divide: the buffer holds %zd bytes, not whole bf16 words", vt.len);
        PyBuffer_Release(&vt);
        return NULL;
    }
    Py_ssize_t n = vt.len / 2;
    uint16_t *t = (uint16_t *)vt.buf;
    float df = (float)d;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        t[i] = f32_to_bf16(bf16_to_f32(t[i]) / df);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&vt);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bf16_combine", (PyCFunction)(void (*)(void))bf16_combine, METH_FASTCALL, bf16_combine_doc},
    {"bf16_divide", (PyCFunction)(void (*)(void))bf16_divide, METH_FASTCALL, bf16_divide_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_elementwise",
    "bf16 element-wise reductions for the collectives, on the calling thread with the GIL released.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__elementwise(void) { return PyModule_Create(&module); }
