/* A request's measurement begun and finished. Follows tracing/timing/server_timing.py
 * (begin_request, RequestMeasurement.finish, _timing, _explain_wait). */

#include "timing.h"

/* == a request's measurement begun and finished (server_timing) ==========================
 * The reference is server_timing.begin_request / RequestMeasurement.finish and ._timing
 * with _explain_wait; this follows them. The objects are the reference's own types
 * (RequestMeasurement, RequestState), written slot by slot at offsets found once by
 * configure_requests; the RequestTiming is made from one tuple, as a CallTiming is. */

enum {
    RM_inbound, RM_offset_ns, RM_state, RM_tag, RM_arrival_unix_ns, RM_inbound_cpu_wait_ns,
    RM_inbound_culprits_ns, RM_start_ns, RM_timing, RM_COUNT
};
static const char *const RM_NAMES[RM_COUNT] = {
    "_inbound", "_offset_ns", "_state", "_tag", "arrival_unix_ns", "inbound_cpu_wait_ns",
    "inbound_culprits_ns", "start_ns", "timing",
};
enum { RS_in_ns, RS_out_ns, RS_running_ns, RS_waits, RS_COUNT };
static const char *const RS_NAMES[RS_COUNT] = {"in_ns", "out_ns", "running_ns", "waits"};
/* RequestTiming's fields, in the order the tuple is made. */
#define RT_COUNT 15
static const char *const RT_NAMES[RT_COUNT] = {
    "arrival_unix_ns", "start_unix_ns", "end_unix_ns", "inbound_delay_s",
    "inbound_cpu_wait_s", "inbound_culprits", "duration_s", "running_s", "waiting_s",
    "critical", "critical_upstream", "presend_delay_s", "wake_delay_s", "overlap_s", "calls",
};
static Py_ssize_t rm_offset[RM_COUNT], rs_offset[RS_COUNT];
/* server_timing.RequestMeasurement, request_state.RequestState, RequestTiming (NULL: not
 * configured). */
static PyTypeObject *g_rm_type, *g_rs_type, *g_rt_type;

/* call_state.realtime_offset_ns: (CLOCK_REALTIME - CLOCK_MONOTONIC, now), the tightest of
 * three bracketed samples. Under a test clock, the reference's own function. */
static int realtime_offset(int64_t *offset, int64_t *now) {
    if (g_clock != NULL) {
        PyObject *pair = PyObject_CallMethodNoArgs(g_call_state, s_realtime_offset_ns);
        if (pair == NULL) return -1;
        int rc = -1;
        if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2) {
            *offset = as_i64(PyTuple_GET_ITEM(pair, 0));
            *now = as_i64(PyTuple_GET_ITEM(pair, 1));
            rc = PyErr_Occurred() ? -1 : 0;
        } else {
            PyErr_SetString(PyExc_TypeError, "realtime_offset_ns must give a pair");
        }
        Py_DECREF(pair);
        return rc;
    }
    int64_t best_gap = INT64_MAX, best = 0, after = 0;
    for (int i = 0; i < 3; i++) {
        struct timespec a, r, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        clock_gettime(CLOCK_REALTIME, &r);
        clock_gettime(CLOCK_MONOTONIC, &b);
        int64_t before = (int64_t)a.tv_sec * 1000000000LL + a.tv_nsec;
        int64_t realtime = (int64_t)r.tv_sec * 1000000000LL + r.tv_nsec;
        after = (int64_t)b.tv_sec * 1000000000LL + b.tv_nsec;
        if (after - before < best_gap) {
            best_gap = after - before;
            best = realtime - (before + after) / 2;
            if (best_gap <= 20000) break; /* call_state._MAX_OFFSET_GAP_NS */
        }
    }
    *offset = best;
    *now = after;
    return 0;
}

/* RequestMeasurement(tag, start_ns, offset_ns): a new reference. */
static PyObject *new_request_measurement(PyObject *tag, int64_t start, int64_t offset) {
    PyObject *start_obj = PyLong_FromLongLong(start);
    PyObject *offset_obj = PyLong_FromLongLong(offset);
    PyObject *waits = PyList_New(0);
    PyObject *culprits = PyDict_New();
    PyObject *inbound = tag == Py_None ? Py_NewRef(Py_None) : attr(tag, s_inbound);
    PyObject *state = g_rs_type->tp_alloc(g_rs_type, 0);
    PyObject *m = g_rm_type->tp_alloc(g_rm_type, 0);
    if (start_obj == NULL || offset_obj == NULL || waits == NULL || culprits == NULL ||
        inbound == NULL || state == NULL || m == NULL) {
        Py_XDECREF(start_obj);
        Py_XDECREF(offset_obj);
        Py_XDECREF(waits);
        Py_XDECREF(culprits);
        Py_XDECREF(inbound);
        Py_XDECREF(state);
        Py_XDECREF(m);
        return NULL;
    }
    /* RequestState(start_ns) */
    SLOT_AT(state, rs_offset[RS_in_ns]) = Py_NewRef(start_obj);
    SLOT_AT(state, rs_offset[RS_out_ns]) = Py_NewRef(start_obj);
    SLOT_AT(state, rs_offset[RS_running_ns]) = Py_NewRef(g_zero);
    SLOT_AT(state, rs_offset[RS_waits]) = waits;
    SLOT_AT(m, rm_offset[RM_tag]) = Py_NewRef(tag);
    SLOT_AT(m, rm_offset[RM_offset_ns]) = offset_obj;
    SLOT_AT(m, rm_offset[RM_start_ns]) = start_obj;
    SLOT_AT(m, rm_offset[RM_state]) = state;
    SLOT_AT(m, rm_offset[RM_inbound]) = inbound;
    SLOT_AT(m, rm_offset[RM_arrival_unix_ns]) = Py_NewRef(Py_None);
    SLOT_AT(m, rm_offset[RM_inbound_culprits_ns]) = culprits;
    SLOT_AT(m, rm_offset[RM_inbound_cpu_wait_ns]) = Py_NewRef(g_zero);
    SLOT_AT(m, rm_offset[RM_timing]) = Py_NewRef(Py_None);
    return m;
}

/* server_timing.begin_request, past the clock reads; a new reference. */
static PyObject *begin_request(int64_t offset, int64_t now) {
    PyObject *tag = current_tag();
    if (tag == NULL) return NULL;
    PyObject *request = NULL, *m = new_request_measurement(tag, now, offset);
    if (m == NULL) goto fail;
    PyObject *watch = SLOT_AT(m, rm_offset[RM_inbound]); /* borrowed */
    if (watch != Py_None) {
        PyObject *arrival_obj = attr(watch, s_arrival_unix_ns);
        if (arrival_obj == NULL) goto fail;
        if (arrival_obj != Py_None) {
            int64_t arrival = as_i64(arrival_obj);
            if ((arrival == -1 && PyErr_Occurred()) ||
                set_attr(watch, s_arrival_unix_ns, Py_None) < 0) {
                Py_DECREF(arrival_obj);
                goto fail;
            }
            if (arrival <= now + offset) {
                Py_SETREF(SLOT_AT(m, rm_offset[RM_arrival_unix_ns]), Py_NewRef(arrival_obj));
                int64_t wait;
                PyObject *culprits = SLOT_AT(m, rm_offset[RM_inbound_culprits_ns]);
                PyObject *wait_obj = explain_into(arrival - offset, now, culprits, &wait) < 0
                                         ? NULL
                                         : PyLong_FromLongLong(wait);
                if (wait_obj == NULL) {
                    Py_DECREF(arrival_obj);
                    goto fail;
                }
                Py_SETREF(SLOT_AT(m, rm_offset[RM_inbound_cpu_wait_ns]), wait_obj);
            }
        }
        Py_DECREF(arrival_obj);
    }
    request = attr(tag, s_request);
    if (request == NULL) goto fail;
    if (request == Py_None && measuring_add(1) < 0) goto fail;
    if (set_attr(tag, s_request, SLOT_AT(m, rm_offset[RM_state])) < 0) goto fail;
    Py_DECREF(request);
    Py_DECREF(tag);
    return m;
fail:
    Py_XDECREF(request);
    Py_XDECREF(m);
    Py_DECREF(tag);
    return NULL;
}

PyObject *py_begin_request(PyObject *mod, PyObject *Py_UNUSED(ignored)) {
    if (g_rm_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure_requests was not called");
        return NULL;
    }
    int64_t offset, now;
    if (realtime_offset(&offset, &now) < 0) return NULL;
    PyObject *m = begin_request(offset, now);
    if (m != NULL) return m;
    drop(); /* as the reference's swallow: a measurement of the handler's time alone */
    return new_request_measurement(Py_None, now, offset);
}

/* server_timing._explain_wait: (presend, wake, overlap) of a critical call from the
 * handler's waits, a list of (out, back) pairs. 0, or -1 with an error set. */
static int explain_wait(PyObject *waits, int64_t call_start, int64_t call_end,
                        int64_t *presend, int64_t *wake, int64_t *overlap) {
    *presend = *wake = *overlap = 0;
    if (!PyList_Check(waits)) {
        PyErr_SetString(PyExc_TypeError, "waits must be a list");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(waits), first = -1, last = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(waits, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a wait must be an (out, back) pair");
            return -1;
        }
        int64_t out = as_i64(PyTuple_GET_ITEM(pair, 0));
        int64_t back = as_i64(PyTuple_GET_ITEM(pair, 1));
        if (PyErr_Occurred()) return -1;
        if (out <= call_start) first = i;
        if (back >= call_end) {
            last = i;
            break;
        }
    }
    if (first < 0 || last < 0 || first > last) return 0;
    int64_t first_out = as_i64(PyTuple_GET_ITEM(PyList_GET_ITEM(waits, first), 0));
    int64_t last_back = as_i64(PyTuple_GET_ITEM(PyList_GET_ITEM(waits, last), 1));
    *presend = call_start - first_out > 0 ? call_start - first_out : 0;
    *wake = last_back - call_end;
    for (Py_ssize_t i = first; i < last; i++) {
        int64_t next_out = as_i64(PyTuple_GET_ITEM(PyList_GET_ITEM(waits, i + 1), 0));
        int64_t back = as_i64(PyTuple_GET_ITEM(PyList_GET_ITEM(waits, i), 1));
        *overlap += next_out - back;
    }
    return PyErr_Occurred() ? -1 : 0;
}

/* A CallTiming's start_ns (index 7) or end_ns (8), read as the reference reads them. */
static int timing_ns(PyObject *timing, int index, PyObject *name, int64_t *out) {
    if (g_timing_type != NULL && Py_IS_TYPE(timing, g_timing_type) &&
        PyTuple_GET_SIZE(timing) > index) {
        *out = as_i64(PyTuple_GET_ITEM(timing, index));
        return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
    }
    return get_i64(timing, name, out);
}

/* RequestMeasurement._timing: a new reference. *calls* NULL: none. */
static PyObject *request_timing(PyObject *m, int64_t end, int64_t running, PyObject *waits,
                                PyObject *calls) {
    int64_t start = as_i64(SLOT_AT(m, rm_offset[RM_start_ns]));
    int64_t offset = as_i64(SLOT_AT(m, rm_offset[RM_offset_ns]));
    int64_t cpu_wait = as_i64(SLOT_AT(m, rm_offset[RM_inbound_cpu_wait_ns]));
    if (PyErr_Occurred()) return NULL;
    PyObject *arrival = SLOT_AT(m, rm_offset[RM_arrival_unix_ns]); /* borrowed */
    int64_t duration = end - start;
    PyObject *fast = calls == NULL ? PyTuple_New(0) : PySequence_Fast(calls, "calls");
    if (fast == NULL) return NULL;
    Py_ssize_t ncalls = PySequence_Fast_GET_SIZE(fast);
    PyObject *critical = NULL, *critical_name = NULL;
    int64_t best_end = 0, presend = 0, wake = 0, overlap = 0;
    for (Py_ssize_t i = 0; i < ncalls; i++) { /* call_state.critical_call */
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "a call must be an (upstream, timing) pair");
            goto fail;
        }
        int64_t call_end;
        if (timing_ns(PyTuple_GET_ITEM(item, 1), 8, s_end_ns, &call_end) < 0) goto fail;
        if (critical == NULL || call_end > best_end) {
            critical_name = PyTuple_GET_ITEM(item, 0);
            critical = PyTuple_GET_ITEM(item, 1);
            best_end = call_end;
        }
    }
    if (critical != NULL) {
        int64_t call_start;
        if (timing_ns(critical, 7, s_start_ns, &call_start) < 0 ||
            explain_wait(waits, call_start, best_end, &presend, &wake, &overlap) < 0)
            goto fail;
    }
    PyObject *fields = PyTuple_New(RT_COUNT);
    if (fields == NULL) goto fail;
    PyTuple_SET_ITEM(fields, 0, Py_NewRef(arrival));
    PyTuple_SET_ITEM(fields, 1, PyLong_FromLongLong(start + offset));
    PyTuple_SET_ITEM(fields, 2, PyLong_FromLongLong(end + offset));
    PyTuple_SET_ITEM(fields, 3,
                     arrival == Py_None ? Py_NewRef(Py_None)
                                        : ns_seconds(start + offset - as_i64(arrival)));
    PyTuple_SET_ITEM(fields, 4, ns_seconds(cpu_wait));
    PyTuple_SET_ITEM(fields, 5, seconds_proxy(SLOT_AT(m, rm_offset[RM_inbound_culprits_ns])));
    PyTuple_SET_ITEM(fields, 6, ns_seconds(duration));
    PyTuple_SET_ITEM(fields, 7, ns_seconds(running < duration ? running : duration));
    PyTuple_SET_ITEM(fields, 8, ns_seconds(duration - running > 0 ? duration - running : 0));
    PyTuple_SET_ITEM(fields, 9, Py_NewRef(critical == NULL ? Py_None : critical));
    PyTuple_SET_ITEM(fields, 10, Py_NewRef(critical_name == NULL ? Py_None : critical_name));
    PyTuple_SET_ITEM(fields, 11, ns_seconds(presend));
    PyTuple_SET_ITEM(fields, 12, ns_seconds(wake));
    PyTuple_SET_ITEM(fields, 13, ns_seconds(overlap));
    PyTuple_SET_ITEM(fields, 14, PyLong_FromSsize_t(ncalls));
    Py_DECREF(fast);
    return named_tuple(g_rt_type, fields);
fail:
    Py_DECREF(fast);
    return NULL;
}

/* RequestMeasurement.finish, past the idempotence check and the end's clock read. */
static PyObject *finish_request(PyObject *m, PyObject *calls, int64_t end) {
    PyObject *state = SLOT_AT(m, rm_offset[RM_state]); /* borrowed */
    PyObject *tag = SLOT_AT(m, rm_offset[RM_tag]);
    PyObject *inbound = SLOT_AT(m, rm_offset[RM_inbound]);
    if (tag != Py_None) {
        PyObject *request = attr(tag, s_request);
        if (request == NULL) return NULL;
        int rc = 0;
        if (request == state) {
            rc = set_attr(tag, s_request, Py_None);
            if (rc == 0) rc = measuring_add(-1);
        }
        Py_DECREF(request);
        if (rc < 0) return NULL;
    }
    if (inbound != Py_None && set_attr(inbound, s_armed, Py_True) < 0) return NULL;
    int64_t running_ns, in_ns;
    if (get_i64(state, s_running_ns, &running_ns) < 0 || get_i64(state, s_in_ns, &in_ns) < 0)
        return NULL;
    PyObject *waits = attr(state, s_waits);
    if (waits == NULL) return NULL;
    int64_t running = running_ns + (end - in_ns > 0 ? end - in_ns : 0);
    PyObject *timing = request_timing(m, end, running, waits, calls);
    Py_DECREF(waits);
    return timing;
}

PyObject *py_finish_request(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 3 || g_rm_type == NULL || !Py_IS_TYPE(args[0], g_rm_type)) {
        PyErr_SetString(PyExc_TypeError,
                        "finish_request takes a RequestMeasurement, calls and end_ns");
        return NULL;
    }
    PyObject *m = args[0];
    PyObject *timing = SLOT_AT(m, rm_offset[RM_timing]);
    if (timing != NULL && timing != Py_None) return Py_NewRef(timing);
    int64_t end;
    if (nargs == 3 && args[2] != Py_None) {
        end = as_i64(args[2]);
        if (end == -1 && PyErr_Occurred()) return NULL;
    } else {
        end = now_ns();
    }
    for (int i = 0; i < RM_COUNT; i++) {
        if (SLOT_AT(m, rm_offset[i]) == NULL) {
            PyErr_SetString(PyExc_TypeError, "a RequestMeasurement not fully made");
            return NULL;
        }
    }
    timing = finish_request(m, nargs >= 2 ? args[1] : NULL, end);
    if (timing == NULL) {
        drop(); /* as the reference: the handler's time, nothing else */
        int64_t start = as_i64(SLOT_AT(m, rm_offset[RM_start_ns]));
        if (PyErr_Occurred()) return NULL;
        PyObject *none = PyList_New(0);
        timing = none == NULL ? NULL : request_timing(m, end, end - start, none, NULL);
        Py_XDECREF(none);
        if (timing == NULL) return NULL;
    }
    Py_XSETREF(SLOT_AT(m, rm_offset[RM_timing]), Py_NewRef(timing));
    return timing;
}

PyObject *py_configure_requests(PyObject *mod, PyObject *args) {
    PyTypeObject *measurement_type, *state_type, *timing_type;
    PyObject *no_culprits;
    if (!PyArg_ParseTuple(args, "O!O!O!O", &PyType_Type, &measurement_type, &PyType_Type,
                          &state_type, &PyType_Type, &timing_type, &no_culprits))
        return NULL;
    if (!PyType_IsSubtype(timing_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "RequestTiming must be a named tuple");
        return NULL;
    }
    PyObject *names = PyObject_GetAttr((PyObject *)timing_type, s_fields);
    if (names == NULL) return NULL;
    int same = PyTuple_Check(names) && PyTuple_GET_SIZE(names) == RT_COUNT;
    for (int i = 0; same && i < RT_COUNT; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        same = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, RT_NAMES[i]) == 0;
    }
    Py_DECREF(names);
    if (!same) {
        PyErr_SetString(PyExc_TypeError, "RequestTiming's fields are not the ones made here");
        return NULL;
    }
    Py_ssize_t m_offsets[RM_COUNT], s_offsets[RS_COUNT];
    if (table_slots(measurement_type, RM_NAMES, RM_COUNT, m_offsets) < 0 ||
        table_slots(state_type, RS_NAMES, RS_COUNT, s_offsets) < 0)
        return NULL;
    memcpy(rm_offset, m_offsets, sizeof m_offsets);
    memcpy(rs_offset, s_offsets, sizeof s_offsets);
    Py_XSETREF(g_rm_type, (PyTypeObject *)Py_NewRef((PyObject *)measurement_type));
    Py_XSETREF(g_rs_type, (PyTypeObject *)Py_NewRef((PyObject *)state_type));
    Py_XSETREF(g_rt_type, (PyTypeObject *)Py_NewRef((PyObject *)timing_type));
    Py_XSETREF(g_no_culprits, Py_NewRef(no_culprits));
    Py_RETURN_NONE;
}

/* The name tables above, for the module's SLOT_TABLES (keyed by the class they follow). */
int server_timing_tables(PyObject *tables) {
    PyObject *rm = names_tuple(RM_NAMES, RM_COUNT), *rs = names_tuple(RS_NAMES, RS_COUNT);
    int rc = (rm == NULL || rs == NULL ||
              PyDict_SetItemString(tables, "tracing.timing.server_timing.RequestMeasurement",
                                   rm) < 0 ||
              PyDict_SetItemString(tables, "tracing.timing.request_state.RequestState", rs) < 0)
                 ? -1
                 : 0;
    Py_XDECREF(rm);
    Py_XDECREF(rs);
    return rc;
}
