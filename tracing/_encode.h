/* What the span encoders share (tracing/_export_native.c, OTLP/JSON, and
 * tracing/_otlp_native.c, OTLP protobuf): the growing byte buffer a span is written into,
 * the ids they write, and an attribute's failure reported. Each includes it: static
 * functions, one copy per extension. */
#ifndef PRICING_ENCODE_H
#define PRICING_ENCODE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
    char local[8192];
} Buf;

static inline void buf_init(Buf *b) {
    b->data = b->local;
    b->len = 0;
    b->cap = sizeof(b->local);
}

static inline void buf_free(Buf *b) {
    if (b->data != b->local)
        PyMem_Free(b->data);
}

static inline int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap * 2;
    while (cap < b->len + extra)
        cap *= 2;
    char *data;
    if (b->data == b->local) {
        data = PyMem_Malloc(cap);
        if (data != NULL)
            memcpy(data, b->local, b->len);
    } else {
        data = PyMem_Realloc(b->data, cap);
    }
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int put(Buf *b, const char *s, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

#define PUTS(b, literal) put((b), (literal), sizeof(literal) - 1)

/* A span id in [0, 2**64), or -1 without an exception when it is not one. */
static inline int span_id_of(PyObject *id, unsigned long long *out) {
    if (!PyLong_CheckExact(id))
        return -1;
    *out = PyLong_AsUnsignedLongLong(id);
    if (*out == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* A trace id in [0, 2**128), as its two halves, or -1 without an exception. */
static inline int trace_id_of(PyObject *id, unsigned long long *high, unsigned long long *low) {
    if (!PyLong_CheckExact(id))
        return -1;
    int overflow;
    long long small = PyLong_AsLongLongAndOverflow(id, &overflow);
    if (!overflow) {
        if (small == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        if (small < 0)
            return -1;
        *high = 0;
        *low = (unsigned long long)small;
        return 0;
    }
    if (overflow < 0)
        return -1;
    static PyObject *shift;
    if (shift == NULL && (shift = PyLong_FromLong(64)) == NULL) {
        PyErr_Clear();
        return -1;
    }
    PyObject *upper = PyNumber_Rshift(id, shift);
    if (upper == NULL) {
        PyErr_Clear();
        return -1;
    }
    int rc = span_id_of(upper, high);
    Py_DECREF(upper);
    if (rc < 0)
        return -1;
    *low = PyLong_AsUnsignedLongLongMask(id);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* An attribute failed to encode: what was written of it is cut off, and *failed* (the
 * reference's encode_failed) reports the error. */
static inline int attribute_failed(Buf *b, Py_ssize_t mark, PyObject *key, PyObject *failed) {
    b->len = mark;
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *error = PyErr_GetRaisedException();
#else
    PyObject *type, *error, *traceback;
    PyErr_Fetch(&type, &error, &traceback);
    PyErr_NormalizeException(&type, &error, &traceback);
    if (traceback != NULL && error != NULL)
        PyException_SetTraceback(error, traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
#endif
    PyObject *result = PyObject_CallFunctionObjArgs(failed, key, error ? error : Py_None, NULL);
    Py_XDECREF(error);
    if (result == NULL)
        return -1;
    Py_DECREF(result);
    return 0;
}

#endif
