/* call_state.CallState's accounting of a socket wait and call_state.explain_delay.
 * Follows tracing/timing/call_state.py. */

#include "timing.h"

/* call_state.explain_delay(start, end, into): culprits into *into*, CPU wait in *wait.
 * The switch log and the run-queue clock are the ones call_state.configure() was given;
 * each is read here when it is the compiled log or a RunQueueClock, else its Python
 * method runs. */
int explain_into(int64_t start, int64_t end, PyObject *into, int64_t *wait) {
    *wait = 0;
    int64_t threshold;
    if (get_i64(g_call_state, s_culprit_threshold_ns, &threshold) < 0) return -1;
    if (end - start < threshold) return 0;
    PyObject *log = PyObject_GetAttr(g_call_state, s_switch_log_attr);
    if (log == NULL) return -1;
    int rc = 0;
    if (Py_TYPE(log) == &SwitchLogType) {
        rc = log_attribute((SwitchLogObject *)log, start, end, into);
    } else if (log != Py_None) {
        PyObject *r = PyObject_CallMethod(log, "attribute", "LLO", (long long)start,
                                          (long long)end, into);
        rc = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    }
    Py_DECREF(log);
    if (rc < 0) return -1;
    PyObject *clock = PyObject_GetAttr(g_call_state, s_cpu_wait_attr);
    if (clock == NULL) return -1;
    if (clock == Py_None) {
        rc = 0;
    } else if (g_runqueue_type != NULL && Py_TYPE(clock) == (PyTypeObject *)g_runqueue_type) {
        rc = runqueue_wait_between(clock, start, end, wait);
    } else {
        PyObject *r = PyObject_CallMethod(clock, "wait_between", "LL", (long long)start,
                                          (long long)end);
        if (r == NULL) {
            rc = -1;
        } else {
            *wait = as_i64(r);
            rc = (*wait == -1 && PyErr_Occurred()) ? -1 : 0;
            Py_DECREF(r);
        }
    }
    Py_DECREF(clock);
    return rc;
}



static int call_method_2(PyObject *call, PyObject *name, int64_t a, int64_t b) {
    PyObject *r = PyObject_CallMethod(call, PyUnicode_AsUTF8(name), "LL", (long long)a,
                                      (long long)b);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* CallState.add_network, inline unless the piece must be remembered (awaiting_first_read). */
static int add_network(PyObject *call, int64_t start, int64_t end, int awaiting) {
    if (awaiting) return call_method_2(call, s_add_network, start, end);
    if (end > start) return add_i64(call, s_network_ns, end - start);
    return 0;
}

/* CallState: culprits and CPU wait of a delay piece (call_state.explain_delay). */
static int explain_delay(PyObject *call, int64_t start, int64_t end) {
    PyObject *culprits = attr(call, s_culprits_ns);
    if (culprits == NULL) return -1;
    int64_t cpu_wait = 0;
    int rc = PyDict_Check(culprits) ? explain_into(start, end, culprits, &cpu_wait) : -1;
    if (rc < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "culprits_ns: not a dict");
    Py_DECREF(culprits);
    if (rc < 0) return -1;
    return cpu_wait ? add_i64(call, s_cpu_wait_ns, cpu_wait) : 0;
}

PyObject *py_explain_delay(PyObject *mod, PyObject *args) {
    long long start, end;
    PyObject *into;
    if (!PyArg_ParseTuple(args, "LLO!", &start, &end, &PyDict_Type, &into)) return NULL;
    int64_t wait;
    if (explain_into(start, end, into, &wait) < 0) return NULL;
    return PyLong_FromLongLong(wait);
}

/* CallState.on_socket_wait */
int on_socket_wait(PyObject *call, int64_t started, int64_t resumed, int known,
                   int64_t ready) {
    if (add_i64(call, s_socket_waits, 1) < 0) return -1;
    int awaiting = get_truth(call, s_awaiting_first_read);
    if (awaiting < 0) return -1;
    if (!known || ready >= resumed) return add_network(call, started, resumed, awaiting);
    if (ready <= started) return call_method_2(call, s_add_delay, started, resumed);
    if (awaiting) {
        if (add_network(call, started, ready, 1) < 0) return -1;
        return call_method_2(call, s_add_delay, ready, resumed);
    }
    if (add_i64(call, s_network_ns, ready - started) < 0) return -1;
    int64_t delay = resumed - ready;
    if (add_i64(call, s_delay_ns, delay) < 0) return -1;
    int64_t threshold;
    if (get_i64(g_call_state, s_culprit_threshold_ns, &threshold) < 0) return -1;
    if (delay >= threshold) return explain_delay(call, ready, resumed);
    return 0;
}
