/* tracing.client's call observer around an upstream call, compiled: the extension
 * tracing._client_native. Follows tracing/client.py (TracingCallObserver.call, _Call's
 * __enter__ and __exit__, TracingCallObserver._finish, and PoolMetrics.observe_call for
 * the histograms), which is its reference; tests/unit/tracing/test_client.py runs both.
 *
 * It sits in the OpenTelemetry wiring's layer, above the timing core: what it needs of
 * the timing core's compiled path (a call's measurement begun and finished, the slot
 * cache, the compiled histogram) it takes from the C API the core exports in a capsule
 * (tracing/timing/csrc/capi.h), once at import. The timing core's C knows nothing of it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <time.h>

#include "timing/csrc/capi.h"

/* The timing core's C API, its pointers copied once at import (no lookup per call). */
static PyObject *(*core_begin_call)(PyObject *offset_ns);
static PyObject *(*core_finish_call)(PyObject *measurement);
static void (*drop)(void);
static PyObject *(*core_attr_at)(PyObject *obj, PyObject *name, SlotSite *site);
static int (*core_table_slots)(PyTypeObject *type, const char *const *names, int count,
                               Py_ssize_t *offsets);
static PyObject *(*core_names_tuple)(const char *const *names, int count);
static PyTypeObject *core_histogram_type;
static PyObject *(*core_histogram_observe)(PyObject *histogram, PyObject *value);
static PyTypeObject *const *core_timing_type;

/* getattr(obj, name) through the timing core's slot cache, a SlotSite per call site. */
#define attr(obj, name)                                                                   \
    ({                                                                                    \
        static SlotSite site_;                                                            \
        core_attr_at(obj, name, &site_);                                                  \
    })
/* The slot at a plain slot's offset (found once: configure_observer). */
#define SLOT_AT(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))

static PyObject *g_zero;

/* == an upstream call observed (tracing.client's _Call and its observer) =================
 * The reference is tracing.client: TracingCallObserver.call makes a _Call, whose
 * __enter__ and __exit__ (with the observer's _finish and the metrics' observe_call) run
 * around every upstream call, six Python frames. This follows them for the common case,
 * a request Envoy did not sample (its RequestTotals carries the incoming traceparent),
 * and hands every other case to the reference's own methods: no request, a sampled
 * one, a live span, an exception. The _Call is the reference's subclass _CompiledCall,
 * written slot by slot at offsets found once (configure_observer). A failure inside the
 * compiled __exit__ goes to hook_errors.swallow, as the reference's try does. */

enum {
    CO_upstream, CO_method, CO_host, CO_port, CO_path, CO_start_unix_ns, CO_end_unix_ns,
    CO_status, CO_timing, CO_error_type, CO_span_id, CO_exception, CO_headers, CO_observer,
    CO_measurement, CO_span, CO_span_scope, CO_totals, CO_core, CO_COUNT
};
static const char *const CO_NAMES[CO_COUNT] = {
    "upstream", "method", "host", "port", "path", "start_unix_ns", "end_unix_ns", "status",
    "timing", "error_type", "span_id", "exception", "headers", "_observer", "_measurement",
    "_span", "_span_scope", "_totals", "_core",
};
static Py_ssize_t co_offset[CO_COUNT];
/* _CompiledCall, _Call.__enter__ and __exit__ (the reference, for the other cases),
 * hook_errors.swallow; NULL until configure_observer. */
static PyTypeObject *g_co_type;
static PyObject *g_ref_enter, *g_ref_exit, *g_swallow;
static PyObject *s_traceparent, *s_offset_ns, *s_records, *s_call_histograms, *s_observe,
    *s_append, *s_finish_what, *g_status_error;

#define CO_SLOT(call, name) SLOT_AT(call, co_offset[CO_##name])
#define CO_SET(call, name, value) Py_XSETREF(CO_SLOT(call, name), (value))

typedef struct {
    PyObject_HEAD
    PyObject *observer;   /* the TracingCallObserver, each _Call's _observer */
    PyObject *totals_var; /* tracing.client.request_totals */
    PyObject *metrics;    /* CallMetrics or None */
    PyObject *histograms; /* upstream -> (network, delay, cpu wait): call_histograms' */
    int measure;
} CallObserverObject;

static PyTypeObject CallObserverType;

static int CallObserver_init(CallObserverObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"observer", "totals_var", "metrics", "measure", NULL};
    PyObject *observer, *totals_var, *metrics;
    int measure;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!Op:CallObserver", kwlist, &observer,
                                     &PyContextVar_Type, &totals_var, &metrics, &measure))
        return -1;
    if (g_co_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure_observer was not called");
        return -1;
    }
    PyObject *histograms = PyDict_New();
    if (histograms == NULL) return -1;
    Py_XSETREF(self->observer, Py_NewRef(observer));
    Py_XSETREF(self->totals_var, Py_NewRef(totals_var));
    Py_XSETREF(self->metrics, Py_NewRef(metrics));
    Py_XSETREF(self->histograms, histograms);
    self->measure = measure;
    return 0;
}

static int CallObserver_traverse(CallObserverObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->observer);
    Py_VISIT(self->totals_var);
    Py_VISIT(self->metrics);
    Py_VISIT(self->histograms);
    return 0;
}

static int CallObserver_clear(CallObserverObject *self) {
    Py_CLEAR(self->observer);
    Py_CLEAR(self->totals_var);
    Py_CLEAR(self->metrics);
    Py_CLEAR(self->histograms);
    return 0;
}

static void CallObserver_dealloc(CallObserverObject *self) {
    PyObject_GC_UnTrack(self);
    CallObserver_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return PyLong_FromLongLong((long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
}

/* TracingCallObserver.call(upstream, method, host, port, path): a _CompiledCall, as
 * _Call.__init__ makes one (positional arguments, as pricing's client passes them). */
static PyObject *CallObserver_call(CallObserverObject *self, PyObject *const *args,
                                   Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "call() takes 5 positional arguments (%zd given)", nargs);
        return NULL;
    }
    if (self->observer == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "CallObserver.__init__ was not called");
        return NULL;
    }
    PyObject *start = unix_now();
    PyObject *headers = start == NULL ? NULL : PyDict_New();
    PyObject *call = headers == NULL ? NULL : g_co_type->tp_alloc(g_co_type, 0);
    if (call == NULL) {
        Py_XDECREF(start);
        Py_XDECREF(headers);
        return NULL;
    }
    for (int i = 0; i < 5; i++) SLOT_AT(call, co_offset[i]) = Py_NewRef(args[i]);
    CO_SLOT(call, end_unix_ns) = Py_NewRef(start);
    CO_SLOT(call, start_unix_ns) = start;
    CO_SLOT(call, headers) = headers;
    CO_SLOT(call, status) = Py_NewRef(Py_None);
    CO_SLOT(call, timing) = Py_NewRef(Py_None);
    CO_SLOT(call, error_type) = Py_NewRef(Py_None);
    CO_SLOT(call, span_id) = Py_NewRef(g_zero);
    CO_SLOT(call, exception) = Py_NewRef(Py_None);
    CO_SLOT(call, observer) = Py_NewRef(self->observer);
    CO_SLOT(call, measurement) = Py_NewRef(Py_None);
    CO_SLOT(call, span) = Py_NewRef(Py_None);
    CO_SLOT(call, span_scope) = Py_NewRef(Py_None);
    CO_SLOT(call, totals) = Py_NewRef(Py_None);
    CO_SLOT(call, core) = Py_NewRef((PyObject *)self);
    return call;
}

/* The call's core, if it is a _CompiledCall made by CallObserver.call (borrowed). */
static CallObserverObject *core_of(PyObject *call) {
    if (g_co_type == NULL || !Py_IS_TYPE(call, g_co_type)) return NULL;
    PyObject *core = CO_SLOT(call, core);
    if (core == NULL || !Py_IS_TYPE(core, &CallObserverType)) return NULL;
    CallObserverObject *c = (CallObserverObject *)core;
    return c->observer == NULL ? NULL : c;
}

/* _Call.__enter__: the traceparent of an unsampled request goes upstream, and the call's
 * measurement begins (the compiled begin_call, with the request's realtime offset). */
static PyObject *compiled_enter(PyObject *call, PyObject *Py_UNUSED(ignored)) {
    CallObserverObject *core = core_of(call);
    if (core == NULL) return PyObject_CallOneArg(g_ref_enter, call);
    PyObject *totals = NULL;
    if (PyContextVar_Get(core->totals_var, Py_None, &totals) < 0) {
        drop();
        return PyObject_CallOneArg(g_ref_enter, call);
    }
    PyObject *traceparent = totals == Py_None ? Py_NewRef(Py_None) : attr(totals, s_traceparent);
    if (traceparent == NULL || traceparent == Py_None) {
        if (traceparent == NULL) drop();
        Py_XDECREF(traceparent);
        Py_DECREF(totals);
        return PyObject_CallOneArg(g_ref_enter, call); /* sampled, or no request */
    }
    if (PyObject_SetItem(CO_SLOT(call, headers), s_traceparent, traceparent) < 0) drop();
    Py_DECREF(traceparent);
    CO_SET(call, totals, totals);
    if (core->measure) {
        PyObject *offset = attr(totals, s_offset_ns);
        if (offset == NULL) {
            drop();
            offset = Py_NewRef(Py_None);
        }
        PyObject *m = core_begin_call(offset);
        Py_DECREF(offset);
        if (m == NULL)
            drop(); /* not even an empty measurement (no memory): the call goes unmeasured */
        else
            CO_SET(call, measurement, m);
    }
    return Py_NewRef(call);
}

/* The three histograms a call's timing goes into (call_histograms(upstream), kept per
 * upstream), borrowed; NULL with an error set. */
static PyObject *histograms_of(CallObserverObject *core, PyObject *upstream) {
    PyObject *found = PyDict_GetItemWithError(core->histograms, upstream);
    if (found != NULL || PyErr_Occurred()) return found;
    PyObject *made = PyObject_CallMethodOneArg(core->metrics, s_call_histograms, upstream);
    if (made == NULL) return NULL;
    if (!PyTuple_Check(made) || PyTuple_GET_SIZE(made) != 3) {
        Py_DECREF(made);
        PyErr_SetString(PyExc_TypeError, "call_histograms must give 3 histograms");
        return NULL;
    }
    int rc = PyDict_SetItem(core->histograms, upstream, made);
    Py_DECREF(made); /* the dict holds it */
    return rc < 0 ? NULL : made;
}

static int observe_into(PyObject *histogram, PyObject *value) {
    PyObject *r = Py_IS_TYPE(histogram, core_histogram_type)
                      ? core_histogram_observe(histogram, value)
                      : PyObject_CallMethodOneArg(histogram, s_observe, value);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* PoolMetrics.observe_call: the call's network time, scheduling delay and CPU wait. */
static int observe_call(CallObserverObject *core, PyObject *upstream, PyObject *timing) {
    PyObject *hs = histograms_of(core, upstream);
    if (hs == NULL) return -1;
    if (!Py_IS_TYPE(timing, *core_timing_type) || PyTuple_GET_SIZE(timing) < 7) {
        PyErr_SetString(PyExc_TypeError, "a call's timing must be a CallTiming");
        return -1;
    }
    /* CallTiming: network_s, scheduling_delay_s at 1 and 2, cpu_wait_s at 6 */
    if (observe_into(PyTuple_GET_ITEM(hs, 0), PyTuple_GET_ITEM(timing, 1)) < 0 ||
        observe_into(PyTuple_GET_ITEM(hs, 1), PyTuple_GET_ITEM(timing, 2)) < 0 ||
        observe_into(PyTuple_GET_ITEM(hs, 2), PyTuple_GET_ITEM(timing, 6)) < 0)
        return -1;
    return 0;
}

/* TracingCallObserver._finish without a span: 0, or -1 with an error set. */
static int finish_observed(CallObserverObject *core, PyObject *call, PyObject *measurement,
                           PyObject *totals) {
    PyObject *end = unix_now();
    if (end == NULL) return -1;
    CO_SET(call, end_unix_ns, end);
    PyObject *status = CO_SLOT(call, status);
    if (CO_SLOT(call, error_type) == Py_None && status != Py_None) {
        int failed = PyObject_RichCompareBool(status, g_status_error, Py_GE);
        if (failed < 0) return -1;
        if (failed) {
            PyObject *text = PyObject_Str(status);
            if (text == NULL) return -1;
            CO_SET(call, error_type, text);
        }
    }
    if (measurement != Py_None) {
        PyObject *timing = core_finish_call(measurement);
        if (timing == NULL) return -1;
        CO_SET(call, timing, Py_NewRef(timing));
        PyObject *upstream = CO_SLOT(call, upstream);
        int rc = 0;
        if (core->metrics != Py_None && upstream != NULL) {
            Py_INCREF(upstream); /* call_histograms is Python: hold what it is given */
            rc = observe_call(core, upstream, timing);
            Py_DECREF(upstream);
        }
        Py_DECREF(timing);
        if (rc < 0) return -1;
    }
    if (totals != Py_None && CO_SLOT(call, timing) != Py_None) {
        PyObject *records = attr(totals, s_records);
        if (records == NULL) return -1;
        int rc = PyList_Check(records) ? PyList_Append(records, call)
                                       : (PyObject_CallMethodOneArg(records, s_append, call) ==
                                                  NULL
                                              ? -1
                                              : 0);
        Py_DECREF(records);
        return rc;
    }
    return 0;
}

/* hook_errors.swallow(what, the error set): what the reference's except does. */
static void swallow_error(void) {
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (exc != NULL && tb != NULL) PyException_SetTraceback(exc, tb);
    PyObject *r = exc == NULL ? NULL
                              : PyObject_CallFunctionObjArgs(g_swallow, s_finish_what, exc, NULL);
    if (r == NULL) drop();
    Py_XDECREF(r);
    Py_XDECREF(type);
    Py_XDECREF(exc);
    Py_XDECREF(tb);
}

/* _Call.__exit__(exc_type, exc, tb) when the call raised nothing and has no live span:
 * its record finished (end, error type, timing, metrics) and added to the request's. */
static PyObject *compiled_exit(PyObject *call, PyObject *const *args, Py_ssize_t nargs) {
    CallObserverObject *core = core_of(call);
    if (nargs != 3 || core == NULL || args[1] != Py_None || CO_SLOT(call, span) != Py_None ||
        CO_SLOT(call, span_scope) != Py_None || CO_SLOT(call, totals) == NULL ||
        CO_SLOT(call, measurement) == NULL) {
        PyObject *full[4] = {call, NULL, NULL, NULL};
        for (Py_ssize_t i = 0; i < nargs && i < 3; i++) full[i + 1] = args[i];
        return PyObject_Vectorcall(g_ref_exit, full, nargs < 3 ? nargs + 1 : 4, NULL);
    }
    PyObject *totals = CO_SLOT(call, totals), *measurement = CO_SLOT(call, measurement);
    CO_SLOT(call, totals) = Py_NewRef(Py_None); /* the record joins totals.records: no cycle */
    CO_SLOT(call, measurement) = Py_NewRef(Py_None);
    Py_INCREF(core);
    if (finish_observed(core, call, measurement, totals) < 0) swallow_error();
    Py_DECREF(core);
    Py_DECREF(totals);
    Py_DECREF(measurement);
    Py_RETURN_NONE;
}

static PyMethodDef compiled_enter_def = {"__enter__", (PyCFunction)compiled_enter, METH_NOARGS,
                                         "_Call.__enter__, compiled."};
static PyMethodDef compiled_exit_def = {"__exit__", (PyCFunction)(void (*)(void))compiled_exit,
                                        METH_FASTCALL, "_Call.__exit__, compiled."};

/* configure_observer(_CompiledCall, _Call.__enter__, _Call.__exit__, swallow): the slots
 * found, and the compiled __enter__ and __exit__ returned, as method descriptors of that
 * class, for it to take. */
static PyObject *py_configure_observer(PyObject *mod, PyObject *args) {
    PyTypeObject *type;
    PyObject *ref_enter, *ref_exit, *swallow;
    if (!PyArg_ParseTuple(args, "O!OOO", &PyType_Type, &type, &ref_enter, &ref_exit, &swallow))
        return NULL;
    if (*core_timing_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure_calls was not called");
        return NULL;
    }
    Py_ssize_t offsets[CO_COUNT];
    if (core_table_slots(type, CO_NAMES, CO_COUNT, offsets) < 0) return NULL;
    PyObject *enter = PyDescr_NewMethod(type, &compiled_enter_def);
    PyObject *exit_ = enter == NULL ? NULL : PyDescr_NewMethod(type, &compiled_exit_def);
    if (exit_ == NULL) {
        Py_XDECREF(enter);
        return NULL;
    }
    memcpy(co_offset, offsets, sizeof offsets);
    Py_XSETREF(g_co_type, (PyTypeObject *)Py_NewRef((PyObject *)type));
    Py_XSETREF(g_ref_enter, Py_NewRef(ref_enter));
    Py_XSETREF(g_ref_exit, Py_NewRef(ref_exit));
    Py_XSETREF(g_swallow, Py_NewRef(swallow));
    PyObject *pair = PyTuple_Pack(2, enter, exit_);
    Py_DECREF(enter);
    Py_DECREF(exit_);
    return pair;
}

static PyMethodDef CallObserver_methods[] = {
    {"call", (PyCFunction)(void (*)(void))CallObserver_call, METH_FASTCALL,
     "TracingCallObserver.call(upstream, method, host, port, path), compiled."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CallObserverType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracing._client_native.CallObserver",
    .tp_doc = "CallObserver(observer, totals_var, metrics, measure): tracing.client's "
              "TracingCallObserver.call, compiled (configure_observer first).",
    .tp_basicsize = sizeof(CallObserverObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)CallObserver_init,
    .tp_traverse = (traverseproc)CallObserver_traverse,
    .tp_clear = (inquiry)CallObserver_clear,
    .tp_dealloc = (destructor)CallObserver_dealloc,
    .tp_methods = CallObserver_methods,
};

static PyMethodDef module_methods[] = {
    {"configure_observer", (PyCFunction)py_configure_observer, METH_VARARGS,
     "configure_observer(_CompiledCall, _Call.__enter__, _Call.__exit__, swallow): the "
     "class's slots found (exactly SLOT_NAMES, or TypeError); its compiled (__enter__, "
     "__exit__) returned."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef client_module = {
    PyModuleDef_HEAD_INIT, "_client_native",
    "tracing.client's call observer, compiled (see tracing/client.py).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

#define INTERN(var, text)                                  \
    do {                                                   \
        var = PyUnicode_InternFromString(text);            \
        if (var == NULL) return NULL;                      \
    } while (0)

PyMODINIT_FUNC PyInit__client_native(void) {
    const TimingCAPI *api = TimingCAPI_Import();
    if (api == NULL) return NULL;
    core_begin_call = api->begin_call;
    core_finish_call = api->finish_call;
    drop = api->drop;
    core_attr_at = api->attr_at;
    core_table_slots = api->table_slots;
    core_names_tuple = api->names_tuple;
    core_histogram_type = api->histogram_type;
    core_histogram_observe = api->histogram_observe;
    core_timing_type = api->timing_type;
    INTERN(s_traceparent, "traceparent");
    INTERN(s_offset_ns, "offset_ns");
    INTERN(s_records, "records");
    INTERN(s_call_histograms, "call_histograms");
    INTERN(s_observe, "observe");
    INTERN(s_append, "append");
    INTERN(s_finish_what, "client span attributes");
    g_status_error = PyLong_FromLong(400);
    if (g_status_error == NULL) return NULL;
    g_zero = PyLong_FromLong(0);
    if (g_zero == NULL) return NULL;
    if (PyType_Ready(&CallObserverType) < 0) return NULL;
    PyObject *m = PyModule_Create(&client_module);
    if (m == NULL) return NULL;
    PyObject *names = core_names_tuple(CO_NAMES, CO_COUNT);
    if (names == NULL || PyModule_AddObjectRef(m, "SLOT_NAMES", names) < 0 ||
        PyModule_AddObjectRef(m, "CallObserver", (PyObject *)&CallObserverType) < 0) {
        Py_XDECREF(names);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(names);
    return m;
}
