/* histogram.Histogram, compiled. Follows tracing/timing/histogram.py. */

#include "timing.h"

/* == Histogram (histogram.Histogram, compiled) ===========================================
 * Counts per bucket and the sum of observations; observe is a binary search over C
 * doubles and two additions (the reference: bisect_left over the bounds tuple). */

typedef struct {
    PyObject_HEAD
    PyObject *bounds; /* tuple of floats, as given */
    Py_ssize_t n;     /* bounds; counts has n + 1 buckets */
    double *edges;
    long long *counts;
    double sum;
} HistogramObject;

static int Histogram_init(HistogramObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"bounds", NULL};
    PyObject *given;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Histogram", kwlist, &given)) return -1;
    PyObject *bounds = PySequence_Tuple(given);
    if (bounds == NULL) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(bounds);
    double *edges = n ? PyMem_Malloc(sizeof(double) * n) : NULL;
    long long *counts = PyMem_Calloc(n + 1, sizeof(long long));
    int ok = n > 0 && edges != NULL && counts != NULL;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        edges[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(bounds, i));
        if (edges[i] == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            ok = 0;
        }
        if (ok && i > 0 && !(edges[i - 1] < edges[i])) ok = 0;
    }
    if (!ok) {
        PyMem_Free(edges);
        PyMem_Free(counts);
        PyObject *r = PyObject_Repr(given);
        if (r != NULL) {
            PyErr_Format(PyExc_ValueError,
                         "bucket bounds must be distinct and increasing, got %U", r);
            Py_DECREF(r);
        }
        Py_DECREF(bounds);
        return -1;
    }
    PyMem_Free(self->edges);
    PyMem_Free(self->counts);
    Py_XSETREF(self->bounds, bounds);
    self->n = n;
    self->edges = edges;
    self->counts = counts;
    self->sum = 0.0;
    return 0;
}

static void Histogram_dealloc(HistogramObject *self) {
    Py_XDECREF(self->bounds);
    PyMem_Free(self->edges);
    PyMem_Free(self->counts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Histogram_observe(HistogramObject *self, PyObject *value) {
    double v = PyFloat_Check(value) ? PyFloat_AS_DOUBLE(value) : PyFloat_AsDouble(value);
    if (v == -1.0 && PyErr_Occurred()) return NULL;
    if (self->counts == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Histogram.__init__ was not called");
        return NULL;
    }
    Py_ssize_t lo = 0, hi = self->n; /* bisect_left */
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (self->edges[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    self->counts[lo] += 1;
    self->sum += v;
    Py_RETURN_NONE;
}

static PyObject *Histogram_counts(HistogramObject *self, void *Py_UNUSED(closure)) {
    if (self->counts == NULL) return PyList_New(0);
    PyObject *out = PyList_New(self->n + 1);
    for (Py_ssize_t i = 0; out != NULL && i <= self->n; i++) {
        PyObject *c = PyLong_FromLongLong(self->counts[i]);
        if (c == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, c);
    }
    return out;
}

static PyObject *Histogram_count(HistogramObject *self, void *Py_UNUSED(closure)) {
    long long total = 0;
    for (Py_ssize_t i = 0; self->counts != NULL && i <= self->n; i++) total += self->counts[i];
    return PyLong_FromLongLong(total);
}

static PyObject *Histogram_sum(HistogramObject *self, void *Py_UNUSED(closure)) {
    return PyFloat_FromDouble(self->sum);
}

static PyObject *Histogram_bounds(HistogramObject *self, void *Py_UNUSED(closure)) {
    return Py_NewRef(self->bounds != NULL ? self->bounds : Py_None);
}

static PyObject *Histogram_cumulative(HistogramObject *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New(0);
    long long running = 0;
    for (Py_ssize_t i = 0; out != NULL && self->counts != NULL && i <= self->n; i++) {
        running += self->counts[i];
        PyObject *pair = Py_BuildValue("(dL)", i < self->n ? self->edges[i] : Py_HUGE_VAL,
                                       running);
        if (pair == NULL || PyList_Append(out, pair) < 0) Py_CLEAR(out);
        Py_XDECREF(pair);
    }
    return out;
}

static PyMethodDef Histogram_methods[] = {
    {"observe", (PyCFunction)Histogram_observe, METH_O, "Count one observation."},
    {"cumulative", (PyCFunction)Histogram_cumulative, METH_NOARGS,
     "(upper bound, observations <= bound) pairs, ending with (inf, count)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Histogram_getset[] = {
    {"bounds", (getter)Histogram_bounds, NULL, "The bucket bounds (without +Inf).", NULL},
    {"counts", (getter)Histogram_counts, NULL, "Counts per bucket (a new list).", NULL},
    {"count", (getter)Histogram_count, NULL, "Observations.", NULL},
    {"sum", (getter)Histogram_sum, NULL, "The sum of observations.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject HistogramType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracing.timing._native.Histogram",
    .tp_doc = "histogram.Histogram, compiled: Histogram(bounds).",
    .tp_basicsize = sizeof(HistogramObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Histogram_init,
    .tp_dealloc = (destructor)Histogram_dealloc,
    .tp_methods = Histogram_methods,
    .tp_getset = Histogram_getset,
};

/* Histogram.observe(value), for the C API (capi.h). */
PyObject *histogram_observe(PyObject *histogram, PyObject *value) {
    return Histogram_observe((HistogramObject *)histogram, value);
}
