/* switchlog.SwitchLog, compiled: the ring of switches the culprits of a delay are read
 * from. Follows tracing/timing/switchlog.py. */

#include "timing.h"

/* == SwitchLog ========================================================================== */

static int SwitchLog_init(SwitchLogObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"size", NULL};
    Py_ssize_t size = 8192;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|n", kwlist, &size)) return -1;
    if (size < 2) {
        PyErr_Format(PyExc_ValueError, "switch log size must be at least 2, got %zd", size);
        return -1;
    }
    if (self->times != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SwitchLog already initialised");
        return -1;
    }
    self->times = PyMem_Calloc((size_t)size, sizeof(int64_t));
    self->labels = PyMem_Calloc((size_t)size, sizeof(PyObject *));
    if (self->times == NULL || self->labels == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->size = size;
    self->count = 0;
    self->head = 0;
    return 0;
}

static int SwitchLog_clear(SwitchLogObject *self) {
    if (self->labels != NULL) {
        for (Py_ssize_t i = 0; i < self->size; i++) Py_CLEAR(self->labels[i]);
    }
    self->count = 0;
    return 0;
}

static int SwitchLog_traverse(SwitchLogObject *self, visitproc visit, void *arg) {
    if (self->labels != NULL) {
        for (Py_ssize_t i = 0; i < self->size; i++) Py_VISIT(self->labels[i]);
    }
    return 0;
}

static void SwitchLog_dealloc(SwitchLogObject *self) {
    PyObject_GC_UnTrack(self);
    SwitchLog_clear(self);
    PyMem_Free(self->times);
    PyMem_Free(self->labels);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t SwitchLog_len(SwitchLogObject *self) { return self->count; }

static Py_ssize_t log_index(SwitchLogObject *self, Py_ssize_t back) {
    /* back = 0: newest */
    Py_ssize_t i = self->head - 1 - back;
    while (i < 0) i += self->size;
    return i;
}

static PyObject *SwitchLog_append(SwitchLogObject *self, PyObject *entry) {
    PyObject *t_obj, *label;
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
        PyErr_SetString(PyExc_TypeError, "a switch log entry is (time_ns, label)");
        return NULL;
    }
    t_obj = PyTuple_GET_ITEM(entry, 0);
    label = PyTuple_GET_ITEM(entry, 1);
    int64_t t = as_i64(t_obj);
    if (t == -1 && PyErr_Occurred()) return NULL;
    log_push(self, t, label);
    Py_RETURN_NONE;
}

static PyObject *entry_tuple(SwitchLogObject *self, Py_ssize_t i) {
    PyObject *label = self->labels[i] ? self->labels[i] : Py_None;
    return Py_BuildValue("(LO)", (long long)self->times[i], label);
}

static PyObject *SwitchLog_last(SwitchLogObject *self, PyObject *Py_UNUSED(ignored)) {
    if (self->count == 0) Py_RETURN_NONE;
    return entry_tuple(self, log_index(self, 0));
}

static PyObject *SwitchLog_entries(SwitchLogObject *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New(self->count);
    if (out == NULL) return NULL;
    for (Py_ssize_t k = 0; k < self->count; k++) {
        PyObject *e = entry_tuple(self, log_index(self, self->count - 1 - k));
        if (e == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, e);
    }
    return out;
}

/* The k-th oldest entry's slot (k = 0: the oldest). */
static Py_ssize_t log_slot(SwitchLogObject *self, Py_ssize_t k) {
    Py_ssize_t i = self->head - self->count + k;
    return i < 0 ? i + self->size : i;
}

/* One label's share of an interval, summed before it goes into the caller's dict. */
typedef struct {
    PyObject *name; /* borrowed from the log */
    int64_t ns;
} Share;

#define MAX_SHARES 32

static int flush_shares(Share *shares, int *n, PyObject *into) {
    for (int k = 0; k < *n; k++) {
        if (shares[k].ns > 0 && dict_add_ns(into, shares[k].name, shares[k].ns) < 0) return -1;
    }
    *n = 0;
    return 0;
}

/* switchlog.SwitchLog.attribute: the same numbers, by a walk over the entries inside
 * [start, end) from the last one at or before start (a binary search). The reference
 * keeps cumulative counters so that Python's cost does not grow with the interval; here
 * a walk costs a few ns an entry and the log's size bounds it, so nothing is kept
 * between calls and an append stays a store. */
int log_attribute(SwitchLogObject *self, int64_t start, int64_t end, PyObject *into) {
    if (end <= start) return 0;
    if (self->count == 0) return dict_add_ns(into, s_unrecorded, end - start);
    int64_t oldest = self->times[log_slot(self, 0)];
    Py_ssize_t k = 0;
    if (start < oldest) {
        int64_t until = end < oldest ? end : oldest;
        if (dict_add_ns(into, s_unrecorded, until - start) < 0) return -1;
        if (end <= oldest) return 0;
        start = oldest;
    } else {
        Py_ssize_t lo = 0, hi = self->count; /* bisect_right on the times */
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (start < self->times[log_slot(self, mid)])
                hi = mid;
            else
                lo = mid + 1;
        }
        k = lo - 1;
    }
    Share shares[MAX_SHARES];
    int n = 0;
    for (; k < self->count; k++) {
        Py_ssize_t i = log_slot(self, k);
        int64_t from = self->times[i];
        if (from >= end) break;
        if (from < start) from = start;
        int64_t until = k + 1 < self->count ? self->times[log_slot(self, k + 1)] : end;
        if (until > end) until = end;
        if (until <= from) continue;
        PyObject *name = self->labels[i] ? self->labels[i] : s_unknown;
        int j = 0;
        while (j < n && shares[j].name != name) j++;
        if (j == n) {
            if (n == MAX_SHARES && flush_shares(shares, &n, into) < 0) return -1;
            j = n++;
            shares[j].name = name;
            shares[j].ns = 0;
        }
        shares[j].ns += until - from;
    }
    return flush_shares(shares, &n, into);
}

static PyObject *SwitchLog_attribute(SwitchLogObject *self, PyObject *args) {
    long long start, end;
    PyObject *into;
    if (!PyArg_ParseTuple(args, "LLO!", &start, &end, &PyDict_Type, &into)) return NULL;
    if (log_attribute(self, start, end, into) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef SwitchLog_methods[] = {
    {"append", (PyCFunction)SwitchLog_append, METH_O, "Append one (time_ns, label) entry."},
    {"last", (PyCFunction)SwitchLog_last, METH_NOARGS, "The newest entry, or None."},
    {"entries", (PyCFunction)SwitchLog_entries, METH_NOARGS, "Every entry, oldest first."},
    {"attribute", (PyCFunction)SwitchLog_attribute, METH_VARARGS,
     "attribute(start_ns, end_ns, into): add who ran during the interval to into."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods SwitchLog_as_sequence = {
    .sq_length = (lenfunc)SwitchLog_len,
};

PyTypeObject SwitchLogType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracing.timing._native.SwitchLog",
    .tp_doc = "switchlog.SwitchLog, compiled: a ring of (time_ns, label) switch entries.",
    .tp_basicsize = sizeof(SwitchLogObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SwitchLog_init,
    .tp_dealloc = (destructor)SwitchLog_dealloc,
    .tp_traverse = (traverseproc)SwitchLog_traverse,
    .tp_clear = (inquiry)SwitchLog_clear,
    .tp_methods = SwitchLog_methods,
    .tp_as_sequence = &SwitchLog_as_sequence,
};
