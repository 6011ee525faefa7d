/* switch_tracer.SwitchTracer's trace function, compiled: what runs on every greenlet
 * switch (the switch log, a measured call's and a request's switch-out and -in, route_cpu's
 * runs). Follows tracing/timing/switch_tracer.py, with route_cpu.py and request_state.py's
 * on_switch_out / on_switch_in. */

#include "timing.h"

/* == Tracer: the greenlet trace function ================================================ */


static void clear_runs(TracerObject *self) {
    for (int i = 0; i < RUN_SLOTS; i++) {
        Py_CLEAR(self->runs[i].label);
        self->runs[i].ns = 0;
    }
}

/* by_label_ns[label] += ns, held in runs until the next pull (the dict when full). */
static int add_run(TracerObject *self, PyObject *label, int64_t ns) {
    size_t h = ((uintptr_t)label >> 4) & (RUN_SLOTS - 1);
    for (int probe = 0; probe < 4; probe++) {
        size_t i = (h + probe) & (RUN_SLOTS - 1);
        PyObject *held = self->runs[i].label;
        if (held == label) {
            self->runs[i].ns += ns;
            return 0;
        }
        if (held == NULL) {
            self->runs[i].label = Py_NewRef(label);
            self->runs[i].ns = ns;
            return 0;
        }
    }
    return dict_add_ns(self->by_label, label, ns);
}

/* Tracer.pull_route_cpu: the runs held here into by_label_ns, the run in progress into
 * since. 0, or -1 with an error set (what was not moved stays). */
static int pull_runs(TracerObject *self) {
    if (self->by_label == NULL || self->since == NULL) return 0;
    for (int i = 0; i < RUN_SLOTS; i++) {
        PyObject *label = self->runs[i].label;
        if (label == NULL) continue;
        if (dict_add_ns(self->by_label, label, self->runs[i].ns) < 0) return -1;
        self->runs[i].label = NULL;
        self->runs[i].ns = 0;
        Py_DECREF(label);
    }
    PyObject *at = PyLong_FromLongLong(self->since_ns);
    if (at == NULL) return -1;
    PyList_SetItem(self->since, 0, at); /* steals */
    PyList_SetItem(self->since, 1, Py_NewRef(self->since_label));
    return 0;
}

static PyObject *Tracer_pull_route_cpu(TracerObject *self, PyObject *Py_UNUSED(ignored)) {
    if (pull_runs(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static int Tracer_init(TracerObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"log", "previous", "route_cpu", "sampler", "hub_label", NULL};
    PyObject *log, *previous, *route_cpu, *sampler = Py_None, *hub_label = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OO|OO", kwlist, &SwitchLogType, &log,
                                     &previous, &route_cpu, &sampler, &hub_label))
        return -1;
    int inline_long = hub_label != Py_None;
    PyObject *blocks = NULL, *runqueue = NULL;
    int64_t block_ns = 0;
    if (inline_long) {
        /* a route_cpu.RouteCpu: its charge_long is done here */
        blocks = PyObject_GetAttrString(route_cpu, "blocks");
        runqueue = blocks == NULL ? NULL : PyObject_GetAttrString(route_cpu, "runqueue");
        PyObject *b = runqueue == NULL ? NULL : PyObject_GetAttrString(route_cpu, "block_ns");
        if (b != NULL) {
            block_ns = as_i64(b);
            Py_DECREF(b);
        }
        if (b == NULL || PyErr_Occurred() || !PyDict_Check(blocks)) {
            Py_XDECREF(blocks);
            Py_XDECREF(runqueue);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "route_cpu.blocks: a dict");
            return -1;
        }
        if (runqueue == Py_None) Py_CLEAR(runqueue);
    }
    PyObject *since = PyObject_GetAttrString(route_cpu, "since");
    PyObject *by_label = PyObject_GetAttrString(route_cpu, "by_label_ns");
    PyObject *charge_long = PyObject_GetAttrString(route_cpu, "charge_long");
    int64_t long_ns = 0;
    PyObject *long_obj = PyObject_GetAttrString(route_cpu, "long_ns");
    if (long_obj != NULL) {
        long_ns = as_i64(long_obj);
        Py_DECREF(long_obj);
    }
    if (since == NULL || by_label == NULL || charge_long == NULL || PyErr_Occurred()) goto fail;
    if (!PyList_Check(since) || PyList_GET_SIZE(since) != 2 || !PyDict_Check(by_label)) {
        PyErr_SetString(PyExc_TypeError, "route_cpu.since must be a 2-list, by_label_ns a dict");
        goto fail;
    }
    int64_t since_ns = as_i64(PyList_GET_ITEM(since, 0));
    if (since_ns == -1 && PyErr_Occurred()) goto fail;
    PyObject *sample = NULL, *due = NULL;
    if (sampler != Py_None) {
        sample = PyObject_GetAttrString(sampler, "sample");
        due = PyObject_GetAttrString(sampler, "due_ns");
        if (sample == NULL || due == NULL || !PyList_Check(due) || PyList_GET_SIZE(due) < 1) {
            Py_XDECREF(sample);
            Py_XDECREF(due);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "sampler.due_ns must be a one-element list");
            goto fail;
        }
    }
    Py_INCREF(log);
    Py_XSETREF(self->log, (SwitchLogObject *)log);
    Py_XSETREF(self->previous, previous == Py_None ? NULL : Py_NewRef(previous));
    Py_XSETREF(self->sample, sample);
    Py_XSETREF(self->due, due);
    Py_CLEAR(self->sampler);
    Py_CLEAR(self->samples_append);
    self->sample_interval_ns = 0;
    if (sampler != Py_None) {
        /* A RunQueueClock (its _fd, _samples, sample_interval_ns): sampled in C. */
        PyObject *samples = PyObject_GetAttrString(sampler, "_samples");
        PyObject *interval = samples == NULL ? NULL
                                             : PyObject_GetAttrString(sampler, "sample_interval_ns");
        PyObject *fd = interval == NULL ? NULL : PyObject_GetAttrString(sampler, "_fd");
        if (fd != NULL && PyLong_Check(fd) && PyLong_Check(interval)) {
            self->samples_append = PyObject_GetAttrString(samples, "append");
            self->sample_interval_ns = as_i64(interval);
            if (self->samples_append != NULL && !PyErr_Occurred())
                self->sampler = Py_NewRef(sampler);
        }
        PyErr_Clear(); /* not a RunQueueClock: its sample() is called instead */
        Py_XDECREF(samples);
        Py_XDECREF(interval);
        Py_XDECREF(fd);
    }
    Py_XSETREF(self->since, since);
    Py_XSETREF(self->by_label, by_label);
    clear_runs(self);
    self->since_ns = since_ns;
    Py_XSETREF(self->since_label, Py_NewRef(PyList_GET_ITEM(since, 1)));
    self->due_seen = INT64_MIN;
    Py_XSETREF(self->charge_long, charge_long);
    Py_XSETREF(self->blocks, blocks);
    Py_XSETREF(self->runqueue, runqueue);
    Py_XSETREF(self->hub_label, inline_long ? Py_NewRef(hub_label) : NULL);
    self->block_ns = block_ns;
    self->long_ns = long_ns;
    self->enabled = 1;
    return 0;
fail:
    Py_XDECREF(blocks);
    Py_XDECREF(runqueue);
    Py_XDECREF(since);
    Py_XDECREF(by_label);
    Py_XDECREF(charge_long);
    return -1;
}

static int Tracer_traverse(TracerObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->log);
    Py_VISIT(self->previous);
    Py_VISIT(self->sample);
    Py_VISIT(self->due);
    Py_VISIT(self->sampler);
    Py_VISIT(self->samples_append);
    Py_VISIT(self->since);
    Py_VISIT(self->by_label);
    Py_VISIT(self->since_label);
    for (int i = 0; i < RUN_SLOTS; i++) Py_VISIT(self->runs[i].label);
    Py_VISIT(self->charge_long);
    Py_VISIT(self->blocks);
    Py_VISIT(self->runqueue);
    Py_VISIT(self->hub_label);
    return 0;
}

static int Tracer_clear(TracerObject *self) {
    Py_CLEAR(self->log);
    Py_CLEAR(self->previous);
    Py_CLEAR(self->sample);
    Py_CLEAR(self->due);
    Py_CLEAR(self->sampler);
    Py_CLEAR(self->samples_append);
    Py_CLEAR(self->since);
    Py_CLEAR(self->by_label);
    Py_CLEAR(self->since_label);
    clear_runs(self);
    Py_CLEAR(self->charge_long);
    Py_CLEAR(self->blocks);
    Py_CLEAR(self->runqueue);
    Py_CLEAR(self->hub_label);
    return 0;
}

static void Tracer_dealloc(TracerObject *self) {
    PyObject_GC_UnTrack(self);
    Tracer_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* request_state.RequestState.on_switch_out / on_switch_in, inline for that exact type. */
static int request_switch_out(PyObject *request, int64_t now) {
    if (Py_TYPE(request) != (PyTypeObject *)g_request_type) {
        PyObject *n = PyLong_FromLongLong(now);
        if (n == NULL) return -1;
        PyObject *r = PyObject_CallMethodOneArg(request, s_on_switch_out, n);
        Py_DECREF(n);
        if (r == NULL) return -1;
        Py_DECREF(r);
        return 0;
    }
    int64_t in_ns;
    if (get_i64(request, s_in_ns, &in_ns) < 0) return -1;
    if (add_i64(request, s_running_ns, now - in_ns) < 0) return -1;
    return set_i64(request, s_out_ns, now);
}

static int request_switch_in(PyObject *request, int64_t now) {
    if (Py_TYPE(request) != (PyTypeObject *)g_request_type) {
        PyObject *n = PyLong_FromLongLong(now);
        if (n == NULL) return -1;
        PyObject *r = PyObject_CallMethodOneArg(request, s_on_switch_in, n);
        Py_DECREF(n);
        if (r == NULL) return -1;
        Py_DECREF(r);
        return 0;
    }
    PyObject *waits = attr(request, s_waits);
    if (waits == NULL) return -1;
    int rc = 0;
    if (PyList_Check(waits) && PyList_GET_SIZE(waits) < g_max_waits) {
        PyObject *out = attr(request, s_out_ns);
        PyObject *in = out == NULL ? NULL : PyLong_FromLongLong(now);
        PyObject *pair = in == NULL ? NULL : PyTuple_New(2);
        if (pair != NULL) {
            PyTuple_SET_ITEM(pair, 0, out); /* steals */
            PyTuple_SET_ITEM(pair, 1, in);
            out = in = NULL;
        }
        Py_XDECREF(out);
        Py_XDECREF(in);
        rc = (pair == NULL) ? -1 : PyList_Append(waits, pair);
        Py_XDECREF(pair);
    }
    Py_DECREF(waits);
    if (rc < 0) return -1;
    return set_i64(request, s_in_ns, now);
}

static int call_method_i64(PyObject *obj, PyObject *name, PyObject *first, int64_t now) {
    PyObject *n = PyLong_FromLongLong(now);
    if (n == NULL) return -1;
    PyObject *r = first == NULL ? PyObject_CallMethodOneArg(obj, name, n)
                                : PyObject_CallMethodObjArgs(obj, name, first, n, NULL);
    Py_DECREF(n);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* The measured side of a switch (switch_tracer: `if active[0]: ...`). */
static int trace_measured(PyObject *origin, PyObject *target_tag, int64_t now) {
    PyObject *origin_tag = tag_of_greenlet(origin);
    if (origin_tag == NULL) return -1;
    if (origin_tag != Py_None) {
        PyObject *call = attr(origin_tag, s_call);
        if (call == NULL) goto fail_origin;
        if (call != Py_None) {
            int in_wait = get_truth(call, s_in_socket_wait);
            int rc;
            if (in_wait < 0)
                rc = -1;
            else if (in_wait)
                rc = set_attr(call, s_out_since_send, Py_True);
            else
                rc = call_method_i64(call, s_on_switch_out, origin, now);
            if (rc < 0) {
                Py_DECREF(call);
                goto fail_origin;
            }
        }
        Py_DECREF(call);
        PyObject *request = attr(origin_tag, s_request);
        if (request == NULL) goto fail_origin;
        if (request != Py_None && request_switch_out(request, now) < 0) {
            Py_DECREF(request);
            goto fail_origin;
        }
        Py_DECREF(request);
    }
    Py_DECREF(origin_tag);

    PyObject *call = attr(target_tag, s_call);
    if (call == NULL) return -1;
    if (call != Py_None) {
        if (set_i64(call, s_last_in_ns, now) < 0) {
            Py_DECREF(call);
            return -1;
        }
        PyObject *out = attr(call, s_out_ns);
        if (out == NULL) {
            Py_DECREF(call);
            return -1;
        }
        int rc = 0;
        if (out != Py_None) rc = call_method_i64(call, s_on_switch_in, NULL, now);
        Py_DECREF(out);
        if (rc < 0) {
            Py_DECREF(call);
            return -1;
        }
    }
    Py_DECREF(call);
    PyObject *request = attr(target_tag, s_request);
    if (request == NULL) return -1;
    int rc = (request != Py_None) ? request_switch_in(request, now) : 0;
    Py_DECREF(request);
    return rc;
fail_origin:
    Py_DECREF(origin_tag);
    return -1;
}



/* route_cpu.RouteCpu.charge_long: a run of *label* that lasted at least long_ns. */
static int charge_long(TracerObject *self, PyObject *label, int64_t start, int64_t end) {
    if (self->blocks == NULL) {
        PyObject *r = PyObject_CallFunction(self->charge_long, "OLL", label, (long long)start,
                                            (long long)end);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    int64_t ran = end - start;
    /* the hub's long runs are its idle waits: not worth a pread */
    int hub = PyObject_RichCompareBool(label, self->hub_label, Py_EQ);
    if (hub < 0) return -1;
    if (hub) return dict_add_ns(self->by_label, label, ran);
    if (ran >= self->block_ns && dict_add_ns(self->blocks, label, 1) < 0) return -1;
    if (self->runqueue != NULL) {
        int64_t wait = 0;
        if (g_runqueue_type != NULL && Py_TYPE(self->runqueue) == (PyTypeObject *)g_runqueue_type) {
            if (runqueue_wait_between(self->runqueue, start, end, &wait) < 0) return -1;
        } else {
            PyObject *r = PyObject_CallMethod(self->runqueue, "wait_between", "LL",
                                              (long long)start, (long long)end);
            if (r == NULL) return -1;
            wait = as_i64(r);
            Py_DECREF(r);
            if (wait == -1 && PyErr_Occurred()) return -1;
        }
        ran -= wait;
    }
    return dict_add_ns(self->by_label, label, ran > 0 ? ran : 0);
}

/* The run of since_label since since_ns ended at *now*: charged to its label (route_cpu's
 * fast path, or charge_long), and since_ns moved to *now*. */
static int charge_run(TracerObject *self, int64_t now) {
    int64_t start = self->since_ns;
    int64_t ran = now - start;
    self->since_ns = now;
    if (ran < self->long_ns) return add_run(self, self->since_label, ran);
    PyObject *label = Py_NewRef(self->since_label);
    int rc = charge_long(self, label, start, now);
    Py_DECREF(label);
    return rc;
}

static int trace_switch(TracerObject *self, PyObject *pair) {
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, "switch arguments must be (origin, target)");
        return -1;
    }
    PyObject *origin = PyTuple_GET_ITEM(pair, 0);
    PyObject *target = PyTuple_GET_ITEM(pair, 1);
    int64_t now = now_ns();
    PyObject *target_tag = tag_of_greenlet(target);
    if (target_tag == NULL) return -1;
    if (target_tag == Py_None) {
        Py_DECREF(target_tag);
        target_tag = new_tag(target);
        if (target_tag == NULL) return -1;
    }
    PyObject *label = attr(target_tag, s_label);
    if (label == NULL) {
        Py_DECREF(target_tag);
        return -1;
    }
    log_push(self->log, now, label);

    /* route_cpu: charge the run that just ended to its label */
    if (charge_run(self, now) < 0) goto fail;
    Py_SETREF(self->since_label, Py_NewRef(label));

    /* due_ns only moves later (a sample taken anywhere moves it): read it again only
     * once the time last read has come */
    if (self->due != NULL && now >= self->due_seen) {
        int64_t due = as_i64(PyList_GET_ITEM(self->due, 0));
        if (due == -1 && PyErr_Occurred()) goto fail;
        if (now >= due && self->sampler != NULL) {
            int rc = sample_runqueue(self, now);
            if (rc < 0) goto fail;
            if (rc > 0) due = INT64_MAX; /* done here */
        }
        if (now >= due) {
            PyObject *n = PyLong_FromLongLong(now);
            PyObject *r = n == NULL ? NULL : PyObject_CallOneArg(self->sample, n);
            Py_XDECREF(n);
            if (r == NULL) goto fail;
            Py_DECREF(r);
        }
        self->due_seen = as_i64(PyList_GET_ITEM(self->due, 0));
        if (self->due_seen == -1 && PyErr_Occurred()) goto fail;
    }
    if (measuring_now() && trace_measured(origin, target_tag, now) < 0) goto fail;
    Py_DECREF(label);
    Py_DECREF(target_tag);
    return 0;
fail:
    Py_DECREF(label);
    Py_DECREF(target_tag);
    return -1;
}

static int is_switch_event(PyObject *event) {
    if (event == s_switch || event == s_throw) return 1;
    if (!PyUnicode_Check(event)) return 0;
    return PyUnicode_Compare(event, s_switch) == 0 || PyUnicode_Compare(event, s_throw) == 0;
}

static PyObject *Tracer_call(TracerObject *self, PyObject *args, PyObject *kwds) {
    PyObject *event, *pair;
    if (!PyArg_UnpackTuple(args, "trace", 2, 2, &event, &pair)) return NULL;
    if (self->enabled && self->log != NULL && is_switch_event(event)) {
        if (trace_switch(self, pair) < 0) drop();
    }
    if (self->previous != NULL) return PyObject_Call(self->previous, args, kwds);
    Py_RETURN_NONE;
}

static PyObject *Tracer_get_enabled(TracerObject *self, void *closure) {
    return PyBool_FromLong(self->enabled);
}

static int Tracer_set_enabled(TracerObject *self, PyObject *value, void *closure) {
    int r = value == NULL ? 0 : PyObject_IsTrue(value);
    if (r < 0) return -1;
    self->enabled = r;
    return 0;
}

/* SwitchTracer._on_relabel: the running greenlet relabelled itself; from now on, *label*
 * runs (logged like a switch, and route_cpu.RouteCpu.switch). Never raises. */
static PyObject *Tracer_relabel(TracerObject *self, PyObject *label) {
    if (!self->enabled || self->log == NULL) Py_RETURN_NONE;
    int64_t now = now_ns();
    log_push(self->log, now, label);
    if (self->since_label == NULL) Py_RETURN_NONE;
    /* route_cpu.RouteCpu.switch: a run of no time adds nothing */
    int rc = now > self->since_ns ? charge_run(self, now) : 0;
    self->since_ns = now;
    if (rc < 0) drop();
    Py_SETREF(self->since_label, Py_NewRef(label));
    Py_RETURN_NONE;
}

static PyMethodDef Tracer_methods[] = {
    {"relabel", (PyCFunction)Tracer_relabel, METH_O,
     "The running greenlet's label is now this one (labels.current_label_listener)."},
    {"pull_route_cpu", (PyCFunction)Tracer_pull_route_cpu, METH_NOARGS,
     "Bring the runs held here into route_cpu.by_label_ns, the run in progress into "
     "route_cpu.since (RouteCpu.pull)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Tracer_getset[] = {
    {"enabled", (getter)Tracer_get_enabled, (setter)Tracer_set_enabled,
     "False: forward to the previous tracer only.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject TracerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracing.timing._native.Tracer",
    .tp_doc = "switch_tracer's trace function, compiled: Tracer(log, previous, route_cpu, "
              "sampler=None, hub_label=None); with hub_label, route_cpu (a RouteCpu) has "
              "its long runs charged here.",
    .tp_basicsize = sizeof(TracerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Tracer_init,
    .tp_dealloc = (destructor)Tracer_dealloc,
    .tp_traverse = (traverseproc)Tracer_traverse,
    .tp_clear = (inquiry)Tracer_clear,
    .tp_call = (ternaryfunc)Tracer_call,
    .tp_methods = Tracer_methods,
    .tp_getset = Tracer_getset,
};
