/* runqueue.RunQueueClock's reads and samples, for that exact class. Follows
 * tracing/timing/runqueue.py. */

#include "timing.h"

/* runqueue.RunQueueClock.read_ns: the second field of /proc/thread-self/schedstat.
 * 1 read, 0 not readable (a closed descriptor, an odd file). */
static int read_schedstat(int64_t fd_value, int64_t *wait) {
    if (fd_value < 0 || fd_value > INT32_MAX) return 0;
    char buf[97];
    ssize_t n = pread((int)fd_value, buf, 96, 0);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = buf;
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    if (*p < '0' || *p > '9') return 0;
    int64_t value = 0;
    while (*p >= '0' && *p <= '9') value = value * 10 + (*p++ - '0');
    *wait = value;
    return 1;
}

/* What RunQueueClock.sample does once the read is taken: remember (now, wait) through
 * *append*, and move the next periodic sample to now + interval in *due*. */
static int remember_sample(PyObject *append, PyObject *due, int64_t now, int64_t wait,
                           int64_t interval) {
    PyObject *entry = Py_BuildValue("(LL)", (long long)now, (long long)wait);
    if (entry == NULL) return -1;
    PyObject *r = PyObject_CallOneArg(append, entry);
    Py_DECREF(entry);
    if (r == NULL) return -1;
    Py_DECREF(r);
    PyObject *next = PyLong_FromLongLong(now + interval);
    if (next == NULL) return -1;
    PyList_SetItem(due, 0, next); /* steals */
    return 0;
}

/* runqueue.RunQueueClock.sample, for that class: 1 done, 0 not possible here (the Python
 * method runs instead), -1 error. */
int sample_runqueue(TracerObject *self, int64_t now) {
    int64_t fd_value, wait;
    if (get_i64(self->sampler, s_fd, &fd_value) < 0) return -1;
    if (!read_schedstat(fd_value, &wait)) return 0;
    return remember_sample(self->samples_append, self->due, now, wait, self->sample_interval_ns)
               < 0
               ? -1
               : 1;
}

/* RunQueueClock.wait_between(start, end) for that exact class: the newest sample at or
 * before *start* (a binary search over its deque), and a fresh sample at *end*. */
int runqueue_wait_between(PyObject *clock, int64_t start, int64_t end, int64_t *wait) {
    *wait = 0;
    if (end <= start) return 0;
    PyObject *samples = attr(clock, s_samples);
    if (samples == NULL) return -1;
    int rc = -1;
    PyObject *append = NULL, *due = NULL;
    Py_ssize_t n = PySequence_Size(samples);
    if (n < 0) goto done;
    if (n == 0) {
        rc = 0;
        goto done;
    }
    /* bisect_right(samples, (start, _LATEST)) - 1: the last sample taken at or before */
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        PyObject *entry = PySequence_GetItem(samples, mid);
        if (entry == NULL) goto done;
        int64_t t = PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == 2
                        ? as_i64(PyTuple_GET_ITEM(entry, 0))
                        : -1;
        Py_DECREF(entry);
        if (t == -1 && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "bad sample");
        if (PyErr_Occurred()) goto done;
        if (start < t)
            hi = mid;
        else
            lo = mid + 1;
    }
    PyObject *entry = PySequence_GetItem(samples, lo > 0 ? lo - 1 : 0);
    if (entry == NULL) goto done;
    int64_t before = PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == 2
                         ? as_i64(PyTuple_GET_ITEM(entry, 1))
                         : -1;
    Py_DECREF(entry);
    if (PyErr_Occurred()) goto done;
    int64_t fd_value, interval, after;
    if (get_i64(clock, s_fd, &fd_value) < 0 || get_i64(clock, s_sample_interval_ns, &interval) < 0)
        goto done;
    if (!read_schedstat(fd_value, &after)) {
        PyErr_SetString(PyExc_OSError, "run-queue wait not readable");
        goto done;
    }
    append = PyObject_GetAttr(samples, s_append);
    due = attr(clock, s_due_ns);
    if (append == NULL || due == NULL) goto done;
    if (!PyList_Check(due) || PyList_GET_SIZE(due) < 1) {
        PyErr_SetString(PyExc_TypeError, "due_ns must be a one-element list");
        goto done;
    }
    if (remember_sample(append, due, end, after, interval) < 0) goto done;
    int64_t got = after - before;
    if (got < 0) got = 0;
    if (got > end - start) got = end - start;
    *wait = got;
    rc = 0;
done:
    Py_XDECREF(append);
    Py_XDECREF(due);
    Py_DECREF(samples);
    return rc;
}
