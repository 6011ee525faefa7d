/* The module tracing.timing._native: its state, configure() and the slot cache the
 * other files read the timing core's objects through. Follows tracing/timing/native.py
 * (the Python side that loads and configures it). */

#include "timing.h"

/* -- module state (one interpreter, the hub's thread) ---------------------------------- */

unsigned long long bad_states = 0;
/* call_state.NO_CULPRITS (set by configure_calls) and the int 0. */
PyObject *g_no_culprits, *g_zero;

PyObject *s_tag_attr, *s_label, *s_call, *s_request, *s_in_socket_wait,
    *s_out_since_send, *s_last_in_ns, *s_out_ns, *s_on_switch_out, *s_on_switch_in,
    *s_switch, *s_throw, *s_in_ns, *s_running_ns, *s_waits, *s_reply_pending, *s_sent_ns,
    *s_read_event, *s_sock, *s_reply_arrived_unix_ns, *s_realtime_offset_ns,
    *s_socket_waits, *s_awaiting_first_read, *s_network_ns, *s_delay_ns, *s_cpu_wait_ns,
    *s_culprits_ns, *s_add_network, *s_add_delay, *s_spawning_greenlet,
    *s_culprit_threshold_ns, *s_unknown, *s_unrecorded, *s_since_send, *s_inbound, *s_armed, *s_fd,
    *s_watched_sock, *s_switch_log_attr, *s_cpu_wait_attr, *s_samples, *s_due_ns,
    *s_sample_interval_ns, *s_attribute, *s_wait_between, *s_depth, *s_previous, *s_absorb,
    *s_blocked_ns, *s_start_ns, *s_arrival_unix_ns, *s_timeout, *s_wait_method, *s_end_ns,
    *s_fields, *s_append, *s_on_first_read;

/* Set by configure(): what the C code needs from the Python side, passed down (the
 * timing core's modules, never imported from here). */
PyObject *g_getcurrent, *g_measuring, *g_tag_of, *g_call_state, *g_request_type;
/* labels.GreenletTag (NULL: every new tag is made by labels.tag_of). */
PyObject *g_tag_type;
/* labels.GreenletTag's slot offsets, in this order (configure refuses a tag type without
 * exactly these four). make_tag fills them as GreenletTag(label) does: label, the rest
 * None. */
const char *const TAG_NAMES[TAG_SLOT_COUNT] = {"label", "call", "inbound", "request"};
Py_ssize_t g_tag_slots[TAG_SLOT_COUNT];
/* runqueue.RunQueueClock: its reads and samples are done here for that exact class. */
PyObject *g_runqueue_type;
Py_ssize_t g_max_waits = 64;
/* A replacement for CLOCK_MONOTONIC (tests replay recorded sequences); NULL: the clock. */
PyObject *g_clock;

/* Told of every accounted wait and send (bench timing-accuracy compares the raw pieces
 * with ground truth, as it spies on CallState's methods in the reference); NULL: none. */
PyObject *g_observer;

void observe(const char *what, PyObject *call, int64_t a, int64_t b, int known,
             int64_t ready) {
    if (g_observer == NULL) return;
    PyObject *r = known ? PyObject_CallFunction(g_observer, "sOLLL", what, call, (long long)a,
                                                (long long)b, (long long)ready)
                        : PyObject_CallFunction(g_observer, "sOLLO", what, call, (long long)a,
                                                (long long)b, Py_None);
    if (r == NULL) drop();
    Py_XDECREF(r);
}



/* -- attribute access ------------------------------------------------------------------
 * The objects read here are the timing core's own classes with __slots__ (GreenletTag,
 * CallState, RequestState, InboundWatch). A slot is a member descriptor on the type that
 * stores the value at a fixed offset in the object: found once per (type, name), later
 * reads and writes go straight to it, as the descriptor itself would, instead of through
 * the generic getattr (type lookup, descriptor call: tens of ns, several per switch).
 * Anything else (another type, a custom __getattribute__, a slot never set) takes the
 * generic path. Each cached type is held (a strong reference): a type freed and another
 * made at its address cannot inherit its offsets; and its version tag is kept: a class
 * changed since (CPython retags it) is looked at again. */
#define SLOT_CACHE_SIZE 128 /* a power of two */
typedef struct {
    PyTypeObject *type;    /* strong reference; NULL: empty */
    PyObject *name;        /* interned, strong reference */
    Py_ssize_t offset;     /* 0: not a plain slot of that type */
    unsigned int version;  /* the type's version tag when found; a changed type is looked at again */
} SlotEntry;
static SlotEntry slot_cache[SLOT_CACHE_SIZE];

Py_ssize_t find_slot(PyTypeObject *type, PyObject *name) {
    if (type->tp_getattro != PyObject_GenericGetAttr ||
        type->tp_setattro != PyObject_GenericSetAttr)
        return 0;
    PyObject *descr = _PyType_Lookup(type, name); /* borrowed; never raises */
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) return 0;
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY)) return 0;
    return member->offset;
}

/* The slot of *name* in *obj*, or NULL when the generic path must be taken. */
PyObject **slot_of(PyObject *obj, PyObject *name) {
    PyTypeObject *type = Py_TYPE(obj);
    size_t h = (((uintptr_t)type >> 4) * 31u + ((uintptr_t)name >> 4)) & (SLOT_CACHE_SIZE - 1);
    for (int probe = 0; probe < 8; probe++) {
        SlotEntry *e = &slot_cache[(h + probe) & (SLOT_CACHE_SIZE - 1)];
        if (e->type == type && e->name == name) {
            if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) ||
                type->tp_version_tag != e->version) {
                /* the class was changed since (an attribute set on it): look again */
                e->offset = find_slot(type, name);
                e->version = type->tp_version_tag;
                if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)) return NULL;
            }
            return e->offset ? (PyObject **)((char *)obj + e->offset) : NULL;
        }
        if (e->type == NULL) {
            if (!PyUnicode_CheckExact(name) || !PyUnicode_CHECK_INTERNED(name)) return NULL;
            e->type = (PyTypeObject *)Py_NewRef((PyObject *)type);
            e->name = Py_NewRef(name);
            e->offset = find_slot(type, name);
            e->version = type->tp_version_tag;
            if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)) return NULL;
            return e->offset ? (PyObject **)((char *)obj + e->offset) : NULL;
        }
    }
    return NULL; /* the cache is full around here: generic */
}

/* The plain slot offset of *name* in *type*, or -1 with an error set. */
Py_ssize_t required_slot(PyTypeObject *type, const char *name) {
    PyObject *key = PyUnicode_InternFromString(name);
    if (key == NULL) return -1;
    Py_ssize_t offset = find_slot(type, key);
    Py_DECREF(key);
    if (offset == 0) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a plain slot", type->tp_name, name);
        return -1;
    }
    return offset;
}

/* 1 when *name* is one of *names*. */
static int in_table(PyObject *name, const char *const *names, int count) {
    for (int i = 0; i < count; i++)
        if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, names[i]) == 0)
            return 1;
    return 0;
}

/* The offsets of *names* (a C table) in *type*: each a plain slot, and together every
 * object slot its instances have, so that an object the C code makes slot by slot has
 * them all set. Read from the class when it is configured: a class whose __slots__ and
 * the table disagree is refused, with a TypeError that names the difference. 0, or -1
 * with the error set. */
int table_slots(PyTypeObject *type, const char *const *names, int count, Py_ssize_t *offsets) {
    for (int i = 0; i < count; i++) {
        offsets[i] = required_slot(type, names[i]);
        if (offsets[i] < 0) return -1;
    }
    PyObject *unknown = PyList_New(0);
    if (unknown == NULL) return -1;
    PyObject *mro = type->tp_mro;
    for (Py_ssize_t i = 0; mro != NULL && i < PyTuple_GET_SIZE(mro); i++) {
        PyObject *base = PyTuple_GET_ITEM(mro, i);
        if (!PyType_HasFeature((PyTypeObject *)base, Py_TPFLAGS_HEAPTYPE)) continue;
        PyObject *dict = PyObject_GetAttrString(base, "__dict__");
        PyObject *items = dict == NULL ? NULL : PyMapping_Items(dict);
        Py_XDECREF(dict);
        if (items == NULL) goto fail;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(items); j++) {
            PyObject *item = PyList_GET_ITEM(items, j);
            PyObject *name = PyTuple_GET_ITEM(item, 0), *value = PyTuple_GET_ITEM(item, 1);
            if (!Py_IS_TYPE(value, &PyMemberDescr_Type)) continue;
            if (((PyMemberDescrObject *)value)->d_member->type != T_OBJECT_EX) continue;
            if (!in_table(name, names, count) && PyList_Append(unknown, name) < 0) {
                Py_DECREF(items);
                goto fail;
            }
        }
        Py_DECREF(items);
    }
    if (PyList_GET_SIZE(unknown) > 0) {
        PyErr_Format(PyExc_TypeError,
                     "%s has slots the compiled path does not know: %R (its C table and the "
                     "class's __slots__ disagree)",
                     type->tp_name, unknown);
        goto fail;
    }
    Py_DECREF(unknown);
    return 0;
fail:
    Py_DECREF(unknown);
    return -1;
}

/* A C name table as a tuple of str (the module's SLOT_TABLES, which tests compare with
 * the classes); NULL with an error set. */
PyObject *names_tuple(const char *const *names, int count) {
    PyObject *t = PyTuple_New(count);
    if (t == NULL) return NULL;
    for (int i = 0; i < count; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (name == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, name);
    }
    return t;
}


int dict_add_ns(PyObject *into, PyObject *key, int64_t ns) {
    PyObject *cur = PyDict_GetItemWithError(into, key);
    int64_t base = 0;
    if (cur != NULL) {
        base = as_i64(cur);
        if (base == -1 && PyErr_Occurred()) return -1;
    } else if (PyErr_Occurred()) {
        return -1;
    }
    PyObject *v = PyLong_FromLongLong(base + ns);
    if (v == NULL) return -1;
    int r = PyDict_SetItem(into, key, v);
    Py_DECREF(v);
    return r;
}


/* == module ============================================================================== */

static PyObject *py_configure(PyObject *mod, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"getcurrent", "measuring",     "tag_of",   "call_state",
                             "request_type", "max_waits", "runqueue_type", "tag_type", NULL};
    PyObject *getcurrent, *measuring, *tag_of, *call_state, *request_type,
        *runqueue_type = NULL, *tag_type = NULL;
    Py_ssize_t max_waits;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!OOO!n|O!O!", kwlist, &getcurrent,
                                     &PyList_Type, &measuring, &tag_of, &call_state,
                                     &PyType_Type, &request_type, &max_waits, &PyType_Type,
                                     &runqueue_type, &PyType_Type, &tag_type))
        return NULL;
    Py_ssize_t tag_slots[TAG_SLOT_COUNT] = {0};
    if (tag_type != NULL) {
        if (table_slots((PyTypeObject *)tag_type, TAG_NAMES, TAG_SLOT_COUNT, tag_slots) < 0)
            return NULL;
        if (((PyTypeObject *)tag_type)->tp_basicsize !=
            (Py_ssize_t)(sizeof(PyObject) + TAG_SLOT_COUNT * sizeof(PyObject *))) {
            PyErr_SetString(PyExc_TypeError, "tag_type must have exactly the four slots");
            return NULL;
        }
    }
    memcpy(g_tag_slots, tag_slots, sizeof(tag_slots));
    Py_XSETREF(g_tag_type, tag_type == NULL ? NULL : Py_NewRef(tag_type));
    Py_XSETREF(g_runqueue_type, runqueue_type == NULL ? NULL : Py_NewRef(runqueue_type));
    Py_XSETREF(g_getcurrent, Py_NewRef(getcurrent));
    Py_XSETREF(g_measuring, Py_NewRef(measuring));
    Py_XSETREF(g_tag_of, Py_NewRef(tag_of));
    Py_XSETREF(g_call_state, Py_NewRef(call_state));
    Py_XSETREF(g_request_type, Py_NewRef(request_type));
    g_max_waits = max_waits;
    Py_RETURN_NONE;
}

static PyObject *py_set_clock(PyObject *mod, PyObject *clock) {
    Py_XSETREF(g_clock, clock == Py_None ? NULL : Py_NewRef(clock));
    Py_RETURN_NONE;
}

static PyObject *py_set_observer(PyObject *mod, PyObject *observer) {
    Py_XSETREF(g_observer, observer == Py_None ? NULL : Py_NewRef(observer));
    Py_RETURN_NONE;
}

static PyObject *py_bad_states(PyObject *mod, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromUnsignedLongLong(bad_states);
}

static PyObject *py_peeks(PyObject *mod, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromUnsignedLongLong(peeks);
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))py_configure, METH_VARARGS | METH_KEYWORDS,
     "Hand the C code what it needs from the timing core (once, at import)."},
    {"set_clock", (PyCFunction)py_set_clock, METH_O,
     "Replace CLOCK_MONOTONIC with a callable (tests); None restores the clock."},
    {"set_observer", (PyCFunction)py_set_observer, METH_O,
     "observer(kind, call, a, b, ready): told of each wait (kind 'wait': started, resumed, "
     "ready or None, before it is accounted) and send ('send': started, now, after); None "
     "removes it."},
    {"bad_states", (PyCFunction)py_bad_states, METH_NOARGS,
     "How many hook calls found a bad state, and were dropped."},
    {"peeks", (PyCFunction)py_peeks, METH_NOARGS,
     "How many receive-stamp peeks were taken (MSG_PEEK recvmsg calls)."},
    {"explain_delay", (PyCFunction)py_explain_delay, METH_VARARGS,
     "call_state.explain_delay(start_ns, end_ns, into): culprits into the dict, returns "
     "the CPU wait (ns); with the switch log and run-queue clock configured there."},
    {"configure_calls", (PyCFunction)py_configure_calls, METH_VARARGS,
     "configure_calls(CallMeasurement, CallState, CallTiming, NO_CULPRITS, MAX_NESTING): "
     "the types begin_call and finish_call make (their slots found once)."},
    {"begin_call", (PyCFunction)(void (*)(void))py_begin_call, METH_FASTCALL,
     "call_timing.begin_call(offset_ns=None): a CallMeasurement of the current greenlet."},
    {"configure_requests", (PyCFunction)py_configure_requests, METH_VARARGS,
     "configure_requests(RequestMeasurement, RequestState, RequestTiming, NO_CULPRITS): "
     "the types the compiled begin_request and finish_request make."},
    {"begin_request", (PyCFunction)py_begin_request, METH_NOARGS,
     "server_timing.begin_request, compiled."},
    {"finish_request", (PyCFunction)(void (*)(void))py_finish_request, METH_FASTCALL,
     "finish_request(measurement, calls=(), end_ns=None): RequestMeasurement.finish, "
     "compiled."},
    {"finish_call", (PyCFunction)py_finish_call, METH_O,
     "CallMeasurement.finish(): its CallTiming (the same one on a second call)."},
    {"peek_arrival_ns", (PyCFunction)py_peek_arrival_ns, METH_O,
     "kernel_rx.peek_arrival_ns on a socket (or descriptor)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native",
    "The timing core's per-switch and per-wait hot path, compiled (see native.py).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

/* -- the C API (capi.h) ------------------------------------------------------------------ */

static PyObject *capi_begin_call(PyObject *offset_ns) {
    return py_begin_call(NULL, &offset_ns, 1);
}

static PyObject *capi_finish_call(PyObject *measurement) {
    return py_finish_call(NULL, measurement);
}

static void capi_drop(void) { drop(); }

static const TimingCAPI capi_table = {
    .version = TIMING_CAPI_VERSION,
    .begin_call = capi_begin_call,
    .finish_call = capi_finish_call,
    .drop = capi_drop,
    .attr_at = attr_at,
    .table_slots = table_slots,
    .names_tuple = names_tuple,
    .histogram_type = &HistogramType,
    .histogram_observe = histogram_observe,
    .timing_type = &g_timing_type,
};

#define INTERN(var, text)                                  \
    do {                                                   \
        var = PyUnicode_InternFromString(text);            \
        if (var == NULL) return NULL;                      \
    } while (0)

PyMODINIT_FUNC PyInit__native(void) {
    INTERN(s_tag_attr, "_gevent_timing_tag");
    INTERN(s_label, "label");
    INTERN(s_call, "call");
    INTERN(s_on_first_read, "on_first_read");
    INTERN(s_request, "request");
    INTERN(s_in_socket_wait, "in_socket_wait");
    INTERN(s_out_since_send, "out_since_send");
    INTERN(s_last_in_ns, "last_in_ns");
    INTERN(s_out_ns, "out_ns");
    INTERN(s_on_switch_out, "on_switch_out");
    INTERN(s_on_switch_in, "on_switch_in");
    INTERN(s_switch, "switch");
    INTERN(s_throw, "throw");
    INTERN(s_in_ns, "in_ns");
    INTERN(s_running_ns, "running_ns");
    INTERN(s_waits, "waits");
    INTERN(s_reply_pending, "reply_pending");
    INTERN(s_sent_ns, "sent_ns");
    INTERN(s_read_event, "_read_event");
    INTERN(s_sock, "_sock");
    INTERN(s_reply_arrived_unix_ns, "reply_arrived_unix_ns");
    INTERN(s_realtime_offset_ns, "realtime_offset_ns");
    INTERN(s_socket_waits, "socket_waits");
    INTERN(s_awaiting_first_read, "awaiting_first_read");
    INTERN(s_network_ns, "network_ns");
    INTERN(s_delay_ns, "delay_ns");
    INTERN(s_cpu_wait_ns, "cpu_wait_ns");
    INTERN(s_culprits_ns, "culprits_ns");
    INTERN(s_add_network, "add_network");
    INTERN(s_add_delay, "add_delay");
    INTERN(s_spawning_greenlet, "spawning_greenlet");
    INTERN(s_culprit_threshold_ns, "_culprit_threshold_ns");
    INTERN(s_unknown, "<unknown>");
    INTERN(s_unrecorded, "<unrecorded>");
    INTERN(s_since_send, "since_send");
    INTERN(s_inbound, "inbound");
    INTERN(s_armed, "armed");
    INTERN(s_fd, "_fd");
    INTERN(s_watched_sock, "sock");
    INTERN(s_switch_log_attr, "_switch_log");
    INTERN(s_cpu_wait_attr, "_cpu_wait");
    INTERN(s_samples, "_samples");
    INTERN(s_due_ns, "due_ns");
    INTERN(s_sample_interval_ns, "sample_interval_ns");
    INTERN(s_attribute, "attribute");
    INTERN(s_wait_between, "wait_between");
    INTERN(s_depth, "depth");
    INTERN(s_previous, "previous");
    INTERN(s_absorb, "absorb");
    INTERN(s_blocked_ns, "blocked_ns");
    INTERN(s_start_ns, "start_ns");
    INTERN(s_arrival_unix_ns, "arrival_unix_ns");
    INTERN(s_timeout, "timeout");
    INTERN(s_wait_method, "_wait");
    INTERN(s_end_ns, "end_ns");
    INTERN(s_fields, "_fields");
    INTERN(s_append, "append");
    g_zero = PyLong_FromLong(0);
    if (g_zero == NULL) return NULL;
    if (PyType_Ready(&SwitchLogType) < 0 || PyType_Ready(&TracerType) < 0 ||
        PyType_Ready(&WaitHookType) < 0 || PyType_Ready(&HistogramType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL) return NULL;
    PyObject *tables = PyDict_New();
    PyObject *tag_names = names_tuple(TAG_NAMES, TAG_SLOT_COUNT);
    PyObject *capi = PyCapsule_New((void *)&capi_table, TIMING_CAPI_NAME, NULL);
    const char *tag_class = "tracing.timing.labels.GreenletTag";
    int failed = tables == NULL || tag_names == NULL || capi == NULL ||
                 PyDict_SetItemString(tables, tag_class, tag_names) < 0 ||
                 call_timing_tables(tables) < 0 || server_timing_tables(tables) < 0 ||
                 PyModule_AddObjectRef(m, "SLOT_TABLES", tables) < 0 ||
                 PyModule_AddObjectRef(m, "_C_API", capi) < 0;
    Py_XDECREF(tables);
    Py_XDECREF(tag_names);
    Py_XDECREF(capi);
    if (failed) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "SwitchLog", (PyObject *)&SwitchLogType) < 0 ||
        PyModule_AddObjectRef(m, "Tracer", (PyObject *)&TracerType) < 0 ||
        PyModule_AddObjectRef(m, "Hook", (PyObject *)&WaitHookType) < 0 ||
        PyModule_AddObjectRef(m, "Histogram", (PyObject *)&HistogramType) < 0 ||
        PyModule_AddObjectRef(m, "WaitHook", (PyObject *)&WaitHookType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
