/* A call's measurement begun and finished. Follows tracing/timing/call_timing.py
 * (begin_call, CallMeasurement.finish) and call_state.CallState's __init__ and to_timing. */

#include "timing.h"

/* == a call's measurement begun and finished (call_timing.begin_call, .finish) ============
 * The reference is call_timing.begin_call / CallMeasurement.finish and CallState.__init__
 * / .to_timing; this follows them. A new CallState is written slot by slot at the
 * offsets found once by configure_calls (its __init__ is 21 attribute stores in Python),
 * and its CallTiming is made from one tuple (a named tuple: tuple.__new__ of that type). */

enum {
    CS_awaiting_first_read, CS_blocked_ns, CS_cpu_wait_ns, CS_culprits_ns, CS_delay_ns,
    CS_depth, CS_in_socket_wait, CS_last_in_ns, CS_network_ns, CS_out_ns, CS_out_ready_ns,
    CS_out_since_send, CS_pending_done, CS_previous, CS_realtime_offset_ns,
    CS_reply_arrived_unix_ns, CS_reply_pending, CS_sent_ns, CS_since_send, CS_socket_waits,
    CS_start_ns, CS_COUNT
};
static const char *const CS_NAMES[CS_COUNT] = {
    "awaiting_first_read", "blocked_ns", "cpu_wait_ns", "culprits_ns", "delay_ns",
    "depth", "in_socket_wait", "last_in_ns", "network_ns", "out_ns", "out_ready_ns",
    "out_since_send", "pending_done", "previous", "realtime_offset_ns",
    "reply_arrived_unix_ns", "reply_pending", "sent_ns", "since_send", "socket_waits",
    "start_ns",
};
static Py_ssize_t cs_offset[CS_COUNT];
/* call_timing.CallMeasurement's slots. */
enum { CM_state, CM_tag, CM_timing, CM_COUNT };
static const char *const CM_NAMES[CM_COUNT] = {"_state", "_tag", "timing"};
static Py_ssize_t cm_state_offset, cm_tag_offset, cm_timing_offset;
/* call_timing.CallMeasurement, call_state.CallState, CallTiming (NULL: not configured). */
static PyTypeObject *g_measurement_type, *g_state_type;
PyTypeObject *g_timing_type;
static int64_t g_max_nesting = 8;

int measuring_add(long delta) {
    if (g_measuring == NULL || !PyList_Check(g_measuring) || PyList_GET_SIZE(g_measuring) < 1) {
        PyErr_SetString(PyExc_TypeError, "measuring must be a one-element list");
        return -1;
    }
    long long v = PyLong_AsLongLong(PyList_GET_ITEM(g_measuring, 0));
    if (v == -1 && PyErr_Occurred()) return -1;
    PyObject *n = PyLong_FromLongLong(v + delta);
    if (n == NULL) return -1;
    return PyList_SetItem(g_measuring, 0, n); /* steals */
}

/* A CallState as CallState(previous, offset_ns) makes it; a new reference. */
static PyObject *new_call_state(PyObject *previous, PyObject *offset) {
    int64_t depth = 1;
    if (previous != Py_None && get_i64(previous, s_depth, &depth) < 0) return NULL;
    if (previous != Py_None) depth += 1;
    PyObject *offset_obj, *start_obj;
    if (offset == Py_None) {
        PyObject *pair = PyObject_CallMethodNoArgs(g_call_state, s_realtime_offset_ns);
        if (pair == NULL) return NULL;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            Py_DECREF(pair);
            PyErr_SetString(PyExc_TypeError, "realtime_offset_ns must give a pair");
            return NULL;
        }
        offset_obj = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
        start_obj = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
        Py_DECREF(pair);
    } else {
        offset_obj = Py_NewRef(offset);
        start_obj = PyLong_FromLongLong(now_ns());
        if (start_obj == NULL) {
            Py_DECREF(offset_obj);
            return NULL;
        }
    }
    PyObject *depth_obj = PyLong_FromLongLong(depth);
    PyObject *culprits = PyDict_New();
    PyObject *since_send = PyList_New(0);
    PyObject *state = g_state_type->tp_alloc(g_state_type, 0);
    if (depth_obj == NULL || culprits == NULL || since_send == NULL || state == NULL) {
        Py_XDECREF(depth_obj);
        Py_XDECREF(culprits);
        Py_XDECREF(since_send);
        Py_XDECREF(state);
        Py_DECREF(offset_obj);
        Py_DECREF(start_obj);
        return NULL;
    }
    PyObject *values[CS_COUNT];
    values[CS_previous] = Py_NewRef(previous);
    values[CS_depth] = depth_obj;
    values[CS_realtime_offset_ns] = offset_obj;
    values[CS_start_ns] = start_obj;
    values[CS_network_ns] = Py_NewRef(g_zero);
    values[CS_delay_ns] = Py_NewRef(g_zero);
    values[CS_blocked_ns] = Py_NewRef(g_zero);
    values[CS_cpu_wait_ns] = Py_NewRef(g_zero);
    values[CS_reply_arrived_unix_ns] = Py_NewRef(Py_None);
    values[CS_culprits_ns] = culprits;
    values[CS_socket_waits] = Py_NewRef(g_zero);
    values[CS_in_socket_wait] = Py_NewRef(Py_False);
    values[CS_last_in_ns] = Py_NewRef(g_zero);
    values[CS_out_ns] = Py_NewRef(Py_None);
    values[CS_out_ready_ns] = Py_NewRef(Py_None);
    values[CS_pending_done] = Py_NewRef(Py_None);
    values[CS_sent_ns] = Py_NewRef(g_zero);
    values[CS_reply_pending] = Py_NewRef(Py_False);
    values[CS_awaiting_first_read] = Py_NewRef(Py_False);
    values[CS_out_since_send] = Py_NewRef(Py_False);
    values[CS_since_send] = since_send;
    for (int i = 0; i < CS_COUNT; i++) SLOT_AT(state, cs_offset[i]) = values[i]; /* steals */
    return state;
}

static PyObject *new_measurement(PyObject *state, PyObject *tag) {
    PyObject *m = g_measurement_type->tp_alloc(g_measurement_type, 0);
    if (m == NULL) return NULL;
    SLOT_AT(m, cm_state_offset) = Py_NewRef(state);
    SLOT_AT(m, cm_tag_offset) = Py_NewRef(tag);
    SLOT_AT(m, cm_timing_offset) = Py_NewRef(Py_None);
    return m;
}

/* labels.tag_of(getcurrent()): the running greenlet's tag, made on first use. A new
 * reference, or NULL with an error set. */
PyObject *current_tag(void) {
    PyObject *current = PyObject_CallNoArgs(g_getcurrent);
    if (current == NULL) return NULL;
    PyObject *tag = tag_of_greenlet(current);
    if (tag != NULL && tag == Py_None) {
        Py_DECREF(tag);
        tag = PyObject_CallOneArg(g_tag_of, current);
    }
    Py_DECREF(current);
    return tag;
}

static PyObject *begin_call(PyObject *offset) {
    PyObject *tag = current_tag();
    if (tag == NULL) return NULL;
    PyObject *state = NULL, *result = NULL;
    PyObject *previous = attr(tag, s_call);
    if (previous == NULL) goto done;
    if (previous != Py_None) {
        int64_t depth;
        if (get_i64(previous, s_depth, &depth) < 0) goto done;
        if (depth >= g_max_nesting) {
            /* drop the innermost: it was never finished */
            PyObject *outer = attr(previous, s_previous);
            if (outer == NULL) goto done;
            Py_SETREF(previous, outer);
            if (measuring_add(-1) < 0) goto done;
        }
    }
    state = new_call_state(previous, offset);
    if (state == NULL) goto done;
    if (set_attr(tag, s_call, state) < 0 || measuring_add(1) < 0) goto done;
    result = new_measurement(state, tag);
done:
    Py_XDECREF(previous);
    Py_XDECREF(state);
    Py_DECREF(tag);
    return result;
}

PyObject *py_begin_call(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (g_state_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure_calls was not called");
        return NULL;
    }
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "begin_call takes at most one argument");
        return NULL;
    }
    PyObject *m = begin_call(nargs ? args[0] : Py_None);
    if (m != NULL) return m;
    drop(); /* as the reference's swallow: a measurement of nothing */
    PyObject *state = PyObject_CallNoArgs((PyObject *)g_state_type);
    if (state == NULL) return NULL;
    m = new_measurement(state, Py_None);
    Py_DECREF(state);
    return m;
}

PyObject *ns_seconds(int64_t ns) { return PyFloat_FromDouble((double)ns / 1e9); }

/* An instance of the named tuple *type* holding *fields*' items (any of them NULL: an
 * error is set); *fields* is released. What tuple.__new__(type, fields) makes, without
 * its two intermediate tuples. A new reference. */
PyObject *named_tuple(PyTypeObject *type, PyObject *fields) {
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    PyObject *out = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyTuple_GET_ITEM(fields, i) == NULL) goto done;
    }
    if (PyErr_Occurred()) goto done;
    out = type->tp_alloc(type, n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++)
        PyTuple_SET_ITEM(out, i, Py_NewRef(PyTuple_GET_ITEM(fields, i)));
done:
    if (out == NULL && !PyErr_Occurred()) PyErr_NoMemory();
    Py_DECREF(fields);
    return out;
}

/* {label: ns} as a read-only {label: seconds}, or the shared empty one. */
PyObject *seconds_proxy(PyObject *culprits_ns) {
    if (!PyDict_Check(culprits_ns)) {
        PyErr_SetString(PyExc_TypeError, "culprits must be a dict");
        return NULL;
    }
    if (PyDict_GET_SIZE(culprits_ns) == 0) return Py_NewRef(g_no_culprits);
    PyObject *seconds = PyDict_New();
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (seconds != NULL && PyDict_Next(culprits_ns, &pos, &key, &value)) {
        int64_t ns = as_i64(value);
        PyObject *s = (ns == -1 && PyErr_Occurred()) ? NULL : ns_seconds(ns);
        if (s == NULL || PyDict_SetItem(seconds, key, s) < 0) Py_CLEAR(seconds);
        Py_XDECREF(s);
    }
    PyObject *proxy = seconds == NULL ? NULL : PyDictProxy_New(seconds);
    Py_XDECREF(seconds);
    return proxy;
}

/* CallState.to_timing(end_ns): a new reference. */
static PyObject *to_timing(PyObject *state, int64_t end) {
    int64_t network, delay, blocked, cpu_wait, start;
    if (get_i64(state, s_network_ns, &network) < 0 || get_i64(state, s_delay_ns, &delay) < 0 ||
        get_i64(state, s_blocked_ns, &blocked) < 0 ||
        get_i64(state, s_cpu_wait_ns, &cpu_wait) < 0 || get_i64(state, s_start_ns, &start) < 0)
        return NULL;
    PyObject *culprits_ns = attr(state, s_culprits_ns);
    if (culprits_ns == NULL) return NULL;
    PyObject *culprits = seconds_proxy(culprits_ns);
    Py_DECREF(culprits_ns);
    if (culprits == NULL) return NULL;
    delay = delay > 0 ? delay : 0;
    cpu_wait = cpu_wait < 0 ? 0 : cpu_wait > delay ? delay : cpu_wait;
    PyObject *socket_waits = attr(state, s_socket_waits);
    PyObject *start_obj = attr(state, s_start_ns);
    PyObject *arrived = attr(state, s_reply_arrived_unix_ns);
    PyObject *fields = PyTuple_New(10);
    if (socket_waits == NULL || start_obj == NULL || arrived == NULL || fields == NULL) {
        Py_XDECREF(socket_waits);
        Py_XDECREF(start_obj);
        Py_XDECREF(arrived);
        Py_XDECREF(fields);
        Py_DECREF(culprits);
        return NULL;
    }
    /* the field order of CallTiming */
    PyTuple_SET_ITEM(fields, 0, ns_seconds(end - start));
    PyTuple_SET_ITEM(fields, 1, ns_seconds(network > 0 ? network : 0));
    PyTuple_SET_ITEM(fields, 2, ns_seconds(delay));
    PyTuple_SET_ITEM(fields, 3, ns_seconds(blocked > 0 ? blocked : 0));
    PyTuple_SET_ITEM(fields, 4, culprits);
    PyTuple_SET_ITEM(fields, 5, socket_waits);
    PyTuple_SET_ITEM(fields, 6, ns_seconds(cpu_wait));
    PyTuple_SET_ITEM(fields, 7, start_obj);
    PyTuple_SET_ITEM(fields, 8, PyLong_FromLongLong(end));
    PyTuple_SET_ITEM(fields, 9, arrived);
    return named_tuple(g_timing_type, fields);
}

/* Take *state* off its greenlet's chain of measurements (CallMeasurement.finish). */
static int unlink_call(PyObject *tag, PyObject *state) {
    PyObject *node = attr(tag, s_call);
    if (node == NULL) return -1;
    PyObject *previous = attr(state, s_previous);
    if (previous == NULL) {
        Py_DECREF(node);
        return -1;
    }
    int rc = 0;
    if (node == state) {
        rc = set_attr(tag, s_call, previous);
        if (rc == 0) rc = measuring_add(-1);
        if (rc == 0 && previous != Py_None) {
            PyObject *r = PyObject_CallMethodOneArg(previous, s_absorb, state);
            rc = r == NULL ? -1 : 0;
            Py_XDECREF(r);
        }
    } else {
        /* Finished out of order (an outer call before an inner one): unlink it so that
         * it does not come back to life when the inner one finishes. */
        while (rc == 0 && node != Py_None) {
            PyObject *before = attr(node, s_previous);
            if (before == NULL) {
                rc = -1;
                break;
            }
            if (before == state) {
                Py_DECREF(before);
                rc = set_attr(node, s_previous, previous);
                if (rc == 0) rc = measuring_add(-1);
                break;
            }
            Py_SETREF(node, before);
        }
    }
    Py_DECREF(node);
    Py_DECREF(previous);
    return rc;
}

PyObject *py_finish_call(PyObject *mod, PyObject *m) {
    if (g_measurement_type == NULL || !Py_IS_TYPE(m, g_measurement_type)) {
        PyErr_SetString(PyExc_TypeError, "finish_call takes a CallMeasurement");
        return NULL;
    }
    PyObject *timing = SLOT_AT(m, cm_timing_offset);
    if (timing != NULL && timing != Py_None) return Py_NewRef(timing);
    int64_t end = now_ns();
    PyObject *state = SLOT_AT(m, cm_state_offset), *tag = SLOT_AT(m, cm_tag_offset);
    if (state == NULL || tag == NULL) {
        PyErr_SetString(PyExc_TypeError, "a CallMeasurement without its state");
        return NULL;
    }
    Py_INCREF(state);
    Py_INCREF(tag);
    timing = NULL;
    if (tag == Py_None || unlink_call(tag, state) == 0) timing = to_timing(state, end);
    if (timing == NULL) {
        drop(); /* as the reference: the call's duration, nothing else */
        int64_t start = 0;
        if (get_i64(state, s_start_ns, &start) < 0) drop();
        PyObject *d = ns_seconds(end - start);
        timing = d == NULL ? NULL
                           : PyObject_CallFunction((PyObject *)g_timing_type, "Oddd", d, 0.0,
                                                   0.0, 0.0);
        Py_XDECREF(d);
    }
    Py_DECREF(state);
    Py_DECREF(tag);
    if (timing == NULL) return NULL;
    Py_XSETREF(SLOT_AT(m, cm_timing_offset), Py_NewRef(timing));
    return timing;
}

PyObject *py_configure_calls(PyObject *mod, PyObject *args) {
    PyTypeObject *measurement_type, *state_type, *timing_type;
    PyObject *no_culprits;
    long long max_nesting;
    if (!PyArg_ParseTuple(args, "O!O!O!OL", &PyType_Type, &measurement_type, &PyType_Type,
                          &state_type, &PyType_Type, &timing_type, &no_culprits, &max_nesting))
        return NULL;
    if (!PyType_IsSubtype(timing_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "CallTiming must be a named tuple");
        return NULL;
    }
    Py_ssize_t offsets[CS_COUNT], m_offsets[CM_COUNT];
    if (table_slots(state_type, CS_NAMES, CS_COUNT, offsets) < 0 ||
        table_slots(measurement_type, CM_NAMES, CM_COUNT, m_offsets) < 0)
        return NULL;
    memcpy(cs_offset, offsets, sizeof offsets);
    cm_state_offset = m_offsets[CM_state];
    cm_tag_offset = m_offsets[CM_tag];
    cm_timing_offset = m_offsets[CM_timing];
    Py_XSETREF(g_measurement_type, (PyTypeObject *)Py_NewRef((PyObject *)measurement_type));
    Py_XSETREF(g_state_type, (PyTypeObject *)Py_NewRef((PyObject *)state_type));
    Py_XSETREF(g_timing_type, (PyTypeObject *)Py_NewRef((PyObject *)timing_type));
    Py_XSETREF(g_no_culprits, Py_NewRef(no_culprits));
    g_max_nesting = max_nesting;
    Py_RETURN_NONE;
}

/* The name tables above, for the module's SLOT_TABLES (keyed by the class they follow). */
int call_timing_tables(PyObject *tables) {
    PyObject *cs = names_tuple(CS_NAMES, CS_COUNT), *cm = names_tuple(CM_NAMES, CM_COUNT);
    int rc = (cs == NULL || cm == NULL ||
              PyDict_SetItemString(tables, "tracing.timing.call_state.CallState", cs) < 0 ||
              PyDict_SetItemString(tables, "tracing.timing.call_timing.CallMeasurement", cm) < 0)
                 ? -1
                 : 0;
    Py_XDECREF(cs);
    Py_XDECREF(cm);
    return rc;
}
