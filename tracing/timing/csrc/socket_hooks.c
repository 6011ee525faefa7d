/* socket_hooks' _wait, sendall and read hooks, compiled. Follows
 * tracing/timing/socket_hooks.py (and server_timing.stamp_arrival for the inbound stamp). */

#include "timing.h"

/* == socket wait hook ==================================================================== */

/* socket_hooks._ready_ns: 1 with *ready set, 0 unknown, -1 error. */
static int ready_ns(PyObject *call, PyObject *sock, int is_read, int64_t resumed,
                    int64_t *ready) {
    int fd = fd_of_raw(sock);
    if (fd < 0) return -1;
    if (is_read) {
        int64_t arrival;
        if (!peek_arrival(fd, &arrival)) return 0;
        if (set_i64(call, s_reply_arrived_unix_ns, arrival) < 0) return -1;
        int64_t offset;
        if (get_i64(call, s_realtime_offset_ns, &offset) < 0) return -1;
        *ready = arrival - offset;
        return 1;
    }
    int64_t age;
    if (!last_ack_age(fd, &age)) return 0;
    int64_t age_at_resume = age - (now_ns() - resumed);
    if (age_at_resume <= TCP_INFO_RESOLUTION_NS) return 0;
    *ready = resumed - (age_at_resume - TCP_INFO_RESOLUTION_NS);
    return 1;
}


/* The greenlet is back from a socket wait begun at *started*: when it resumed. -1 on error. */
static int wait_ended(PyObject *call, int64_t started, int64_t *resumed) {
    if (set_attr(call, s_in_socket_wait, Py_False) < 0) return -1;
    if (get_i64(call, s_last_in_ns, resumed) < 0) return -1;
    if (*resumed <= started) *resumed = now_ns(); /* no switch tracer: date it now */
    return 0;
}

/* socket_hooks._account_wait; never leaves an error set. */
static void account_wait(PyObject *call, PyObject *sock, int64_t started, int is_read,
                         int succeeded) {
    int64_t resumed;
    if (wait_ended(call, started, &resumed) < 0) goto fail;
    int known = 0;
    int64_t ready = 0;
    if (succeeded) {
        known = ready_ns(call, sock, is_read, resumed, &ready);
        if (known < 0) {
            drop(); /* still count the wait, undivided (as network) */
            known = 0;
        }
    }
    observe("wait", call, started, resumed, known, ready);
    if (on_socket_wait(call, started, resumed, known, ready) < 0) goto fail;
    return;
fail:
    drop();
}

/* A wait that raised (timeout, cancel_wait, GreenletExit: it never saw its data),
 * accounted with that error kept for the caller. */
static void account_failed_wait(PyObject *call, PyObject *sock, int64_t started, int is_read) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    account_wait(call, sock, started, is_read, 0);
    PyErr_Restore(type, value, tb);
}

/* socket_hooks._account_read_wait: a read wait whose data came with its stamp (*have*,
 * *arrival*: CLOCK_REALTIME ns), read by the stamped read itself. Never leaves an error. */
static void account_read_wait(PyObject *call, int64_t started, int have, int64_t arrival) {
    int64_t resumed, ready = 0;
    if (wait_ended(call, started, &resumed) < 0) goto fail;
    if (have) {
        int64_t offset;
        if (set_i64(call, s_reply_arrived_unix_ns, arrival) < 0 ||
            get_i64(call, s_realtime_offset_ns, &offset) < 0)
            goto fail;
        ready = arrival - offset;
    }
    observe("wait", call, started, resumed, have, ready);
    if (on_socket_wait(call, started, resumed, have, ready) < 0) goto fail;
    return;
fail:
    drop();
}

/* The current greenlet's CallState (new reference), or NULL (none, or a bad state). */
static PyObject *current_call(void) {
    PyObject *current = PyObject_CallNoArgs(g_getcurrent);
    if (current == NULL) goto fail;
    PyObject *tag = tag_of_greenlet(current);
    Py_DECREF(current);
    if (tag == NULL) goto fail;
    if (tag == Py_None) {
        Py_DECREF(tag);
        return NULL;
    }
    PyObject *call = attr(tag, s_call);
    Py_DECREF(tag);
    if (call == NULL) goto fail;
    if (call == Py_None) {
        Py_DECREF(call);
        return NULL;
    }
    return call;
fail:
    drop();
    return NULL;
}

/* CallState.wait_start_ns, inline. -1 on error. */
static int wait_start(PyObject *call, int64_t now, int is_read, int64_t *started) {
    *started = now;
    if (!is_read) return 0;
    int pending = get_truth(call, s_reply_pending);
    if (pending <= 0) return pending;
    if (set_attr(call, s_reply_pending, Py_False) < 0) return -1;
    int out_since_send = get_truth(call, s_out_since_send);
    if (out_since_send < 0) return -1;
    if (out_since_send) return 0;
    int64_t sent;
    if (get_i64(call, s_sent_ns, &sent) < 0) return -1;
    if (0 < sent && sent <= now) *started = sent;
    return 0;
}

/* HOOK_READ: SSLSocket.read (the inbound stamp and the first read after a send, by peeking);
 * HOOK_RECV, HOOK_RECV_INTO: SocketMixin.recv / recv_into, the same with the stamped read. */
enum { HOOK_WAIT, HOOK_SENDALL, HOOK_READ, HOOK_RECV, HOOK_RECV_INTO };

typedef struct {
    PyObject_HEAD
    PyObject *original;
    PyObject *dict;
    int kind;
    /* HOOK_READ: server_timing.watching, socket_hooks._check_queued_reply */
    PyObject *watching, *check_queued_reply;
} WaitHookObject;

static int list_flag(PyObject *list) {
    if (list == NULL || !PyList_Check(list) || PyList_GET_SIZE(list) < 1) return 0;
    int r = PyObject_IsTrue(PyList_GET_ITEM(list, 0));
    if (r < 0) {
        drop();
        return 0;
    }
    return r;
}

/* socket_hooks' sendall: note when the request was handed to the kernel (on_send). */
static PyObject *sendall_call(WaitHookObject *self, PyObject *args, PyObject *kwds) {
    if (!measuring_now()) return PyObject_Call(self->original, args, kwds);
    int64_t started = now_ns();
    PyObject *result = PyObject_Call(self->original, args, kwds);
    if (result == NULL) return NULL;
    PyObject *call = current_call();
    if (call == NULL) return result;
    /* CallState.on_send */
    int64_t last_in;
    if (get_i64(call, s_last_in_ns, &last_in) < 0) goto fail;
    int64_t now = now_ns();
    if (set_i64(call, s_sent_ns, last_in > started ? now : started) < 0 ||
        set_attr(call, s_reply_pending, Py_True) < 0 ||
        set_attr(call, s_awaiting_first_read, Py_True) < 0 ||
        set_attr(call, s_out_since_send, Py_False) < 0)
        goto fail;
    PyObject *pieces = attr(call, s_since_send);
    if (pieces == NULL) goto fail;
    int rc = PyList_Check(pieces) ? PyList_SetSlice(pieces, 0, PyList_GET_SIZE(pieces), NULL)
                                  : 0;
    Py_DECREF(pieces);
    if (rc < 0) goto fail;
    observe("send", call, started, now, 0, 0);
    Py_DECREF(call);
    return result;
fail:
    drop();
    Py_DECREF(call);
    return result;
}

/* server_timing.stamp_arrival: note when a watched connection's request reached the
 * kernel, waiting for its first bytes (through the socket's own _wait, as the read would)
 * when none are queued yet. 0, or -1 with the error the wait raised. */
static int stamp_arrival(PyObject *watch, PyObject *sock) {
    int fd = fd_of_raw(sock);
    if (fd < 0) return -1;
    int64_t arrival;
    int have = peek_arrival(fd, &arrival);
    if (!have) {
        PyObject *timeout = PyObject_GetAttr(sock, s_timeout);
        if (timeout == NULL) return -1;
        int blocking = PyFloat_Check(timeout) ? PyFloat_AS_DOUBLE(timeout) != 0.0
                                              : PyObject_RichCompareBool(timeout, g_zero, Py_NE);
        Py_DECREF(timeout);
        if (blocking < 0) return -1;
        if (blocking) {
            PyObject *event = PyObject_GetAttr(sock, s_read_event);
            if (event == NULL) return -1;
            PyObject *r = PyObject_CallMethodOneArg(sock, s_wait_method, event);
            Py_DECREF(event);
            if (r == NULL) return -1; /* the socket's timeout, as the read would raise it */
            Py_DECREF(r);
            have = peek_arrival(fd, &arrival);
        }
    }
    PyObject *value = have ? PyLong_FromLongLong(arrival) : Py_NewRef(Py_None);
    if (value == NULL) return -1;
    int rc = set_attr(watch, s_armed, Py_False);
    if (rc == 0) rc = set_attr(watch, s_arrival_unix_ns, value);
    Py_DECREF(value);
    return rc;
}

/* socket_hooks._first_read: the first read after a send, done (*have*, *arrival*: the stamp
 * of what it read; nothing read: have 0). Never leaves an error set. */
static void first_read(PyObject *call, int have, int64_t arrival) {
    int awaiting = get_truth(call, s_awaiting_first_read);
    if (awaiting == 0) return;
    if (awaiting < 0) goto fail;
    int out = get_truth(call, s_out_since_send);
    if (out < 0 || set_attr(call, s_awaiting_first_read, Py_False) < 0) goto fail;
    if (!out) return; /* ran without pause since the send: no delay to find */
    /* socket_hooks._queued_reply, with the read's own stamp instead of a peek */
    PyObject *ready = Py_NewRef(Py_None);
    if (have) {
        int64_t offset;
        if (set_i64(call, s_reply_arrived_unix_ns, arrival) < 0 ||
            get_i64(call, s_realtime_offset_ns, &offset) < 0) {
            Py_DECREF(ready);
            goto fail;
        }
        Py_SETREF(ready, PyLong_FromLongLong(arrival - offset));
        if (ready == NULL) goto fail;
    }
    PyObject *now = PyLong_FromLongLong(now_ns());
    PyObject *r = now == NULL ? NULL
                              : PyObject_CallMethodObjArgs(call, s_on_first_read, ready, now, NULL);
    Py_XDECREF(now);
    Py_DECREF(ready);
    if (r == NULL) goto fail;
    Py_DECREF(r);
    return;
fail:
    drop();
}

/* socket_hooks._stamped_read: gevent's recv / recv_into loop (read; on EAGAIN wait for the
 * socket and read again), the reads asking for the receive stamp themselves, in place of
 * a peek before them: the stamp of what a watched connection's request read first
 * (*watch*) and of a call's reply (*call*: its wait split at it, or its first read). 1
 * with *result* set (NULL: the error the read or the wait raised), 0 when the arguments
 * are not the plain ones (the original then runs). */
static int stamped_read(WaitHookObject *self, PyObject *sock, PyObject *args, PyObject *kwds,
                        PyObject *watch, PyObject *call, PyObject **result) {
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if ((kwds != NULL && PyDict_GET_SIZE(kwds) > 0) || nargs < 2) return 0;
    int into = self->kind == HOOK_RECV_INTO;
    Py_ssize_t flags_at = into ? 3 : 2;
    if (nargs > flags_at + 1) return 0;
    if (nargs == flags_at + 1) {
        long flags = PyLong_AsLong(PyTuple_GET_ITEM(args, flags_at));
        if (flags != 0) {
            PyErr_Clear();
            return 0; /* flags (MSG_PEEK...): the original's business */
        }
    }
    Py_buffer view = {0};
    PyObject *bytes = NULL;
    char *buf;
    Py_ssize_t len;
    if (into) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, 1), &view, PyBUF_WRITABLE) < 0) {
            PyErr_Clear();
            return 0;
        }
        len = view.len;
        if (nargs > 2) {
            Py_ssize_t nbytes = PyLong_AsSsize_t(PyTuple_GET_ITEM(args, 2));
            if (nbytes < 0 || nbytes > view.len) { /* the original raises */
                PyErr_Clear();
                PyBuffer_Release(&view);
                return 0;
            }
            if (nbytes > 0) len = nbytes;
        }
        buf = view.buf;
    } else {
        len = PyLong_AsSsize_t(PyTuple_GET_ITEM(args, 1));
        if (len <= 0) {
            PyErr_Clear();
            return 0;
        }
        bytes = PyBytes_FromStringAndSize(NULL, len);
        if (bytes == NULL) {
            PyErr_Clear();
            return 0;
        }
        buf = PyBytes_AS_STRING(bytes);
    }
    int fd = len > 0 ? fd_of_raw(sock) : -1;
    if (fd < 0) { /* closed, or an empty buffer: the original says what that means */
        PyErr_Clear();
        Py_XDECREF(bytes);
        if (into) PyBuffer_Release(&view);
        return 0;
    }
    /* The wait to time: the original _wait under our hook (timed here, once). */
    PyObject *hooked = _PyType_Lookup(Py_TYPE(sock), s_wait_method);
    PyObject *raw_wait = hooked != NULL && Py_TYPE(hooked) == &WaitHookType &&
                                 ((WaitHookObject *)hooked)->kind == HOOK_WAIT
                             ? Py_NewRef(((WaitHookObject *)hooked)->original)
                             : NULL;
    PyObject *out = NULL;
    int waited = 0, first = 1;
    int64_t started = 0;
    for (;;) {
        int have;
        int64_t arrival = 0;
        ssize_t n = recv_stamped(fd, buf, (size_t)len, 0, &have, &arrival);
        if (n >= 0) {
            if (call != NULL) {
                if (waited)
                    account_read_wait(call, started, have, arrival);
                else if (first)
                    first_read(call, have, arrival);
            }
            if (watch != NULL) {
                PyObject *value = have ? PyLong_FromLongLong(arrival) : Py_NewRef(Py_None);
                if (value == NULL || set_attr(watch, s_armed, Py_False) < 0 ||
                    set_attr(watch, s_arrival_unix_ns, value) < 0)
                    drop();
                Py_XDECREF(value);
            }
            if (into) {
                out = PyLong_FromSsize_t(n);
            } else if (n == len) {
                out = Py_NewRef(bytes);
            } else if (_PyBytes_Resize(&bytes, n) == 0) {
                out = Py_NewRef(bytes);
            }
            break;
        }
        int err = errno;
        if (err == EINTR) {
            if (PyErr_CheckSignals() == 0) continue;
            if (call != NULL && waited) account_read_wait(call, started, 0, 0);
            break;
        }
        if (call != NULL) {
            if (waited)
                account_read_wait(call, started, 0, 0); /* woke to nothing: undivided */
            else if (first)
                first_read(call, 0, 0);
        }
        waited = first = 0;
        if (err != EAGAIN && err != EWOULDBLOCK) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            break;
        }
        PyObject *timeout = PyObject_GetAttr(sock, s_timeout);
        if (timeout == NULL) break;
        int blocking = PyFloat_Check(timeout) ? PyFloat_AS_DOUBLE(timeout) != 0.0
                                              : PyObject_RichCompareBool(timeout, g_zero, Py_NE);
        Py_DECREF(timeout);
        if (blocking <= 0) {
            if (blocking == 0) { /* a non-blocking socket: EAGAIN, as the original raises */
                errno = err;
                PyErr_SetFromErrno(PyExc_OSError);
            }
            break;
        }
        PyObject *event = PyObject_GetAttr(sock, s_read_event);
        if (event == NULL) break;
        PyObject *r;
        if (call != NULL && wait_start(call, now_ns(), 1, &started) == 0 &&
            set_attr(call, s_in_socket_wait, Py_True) == 0) {
            r = raw_wait != NULL ? PyObject_CallFunctionObjArgs(raw_wait, sock, event, NULL)
                                 : PyObject_CallMethodOneArg(sock, s_wait_method, event);
            if (r == NULL)
                account_failed_wait(call, sock, started, 1);
            else
                waited = 1;
        } else {
            if (call != NULL) {
                drop(); /* could not start timing it: wait untimed */
                if (set_attr(call, s_in_socket_wait, Py_False) < 0) drop();
            }
            r = PyObject_CallMethodOneArg(sock, s_wait_method, event);
        }
        Py_DECREF(event);
        if (r == NULL) break;
        Py_DECREF(r);
    }
    Py_XDECREF(raw_wait);
    Py_XDECREF(bytes);
    if (into) PyBuffer_Release(&view);
    *result = out;
    return 1;
}

/* What the stamped read is for on *sock*: the greenlet's armed inbound watch of it, and its
 * call. 0 when neither (or a bad state: the peeking path then runs), else stamped_read's. */
static int stamped_entry(WaitHookObject *self, PyObject *tag, PyObject *sock, PyObject *args,
                         PyObject *kwds, PyObject **result) {
    PyObject *watch = attr(tag, s_inbound);
    if (watch == NULL) goto fail;
    if (watch != Py_None) {
        int armed = get_truth(watch, s_armed);
        PyObject *watched = armed > 0 ? attr(watch, s_watched_sock) : NULL;
        if (armed < 0 || (armed > 0 && watched == NULL)) {
            Py_DECREF(watch);
            goto fail;
        }
        if (watched != sock) Py_SETREF(watch, Py_NewRef(Py_None));
        Py_XDECREF(watched);
    }
    PyObject *call = attr(tag, s_call);
    if (call == NULL) {
        Py_DECREF(watch);
        goto fail;
    }
    int done = 0;
    if (watch != Py_None || call != Py_None)
        done = stamped_read(self, sock, args, kwds, watch == Py_None ? NULL : watch,
                            call == Py_None ? NULL : call, result);
    Py_DECREF(watch);
    Py_DECREF(call);
    return done;
fail:
    drop();
    return 0;
}

/* socket_hooks' recv / recv_into / SSL read: the inbound stamp of a watched connection's
 * first read of a request, and the first read after a send. */
static PyObject *read_call(WaitHookObject *self, PyObject *args, PyObject *kwds) {
    if ((!measuring_now() && !list_flag(self->watching)) || PyTuple_GET_SIZE(args) < 1)
        return PyObject_Call(self->original, args, kwds);
    PyObject *sock = PyTuple_GET_ITEM(args, 0);
    PyObject *current = PyObject_CallNoArgs(g_getcurrent);
    PyObject *tag = current == NULL ? NULL : tag_of_greenlet(current);
    Py_XDECREF(current);
    if (tag == NULL) {
        drop();
        return PyObject_Call(self->original, args, kwds);
    }
    if (tag == Py_None) {
        Py_DECREF(tag);
        return PyObject_Call(self->original, args, kwds);
    }
    if (self->kind != HOOK_READ) {
        PyObject *result;
        int done = stamped_entry(self, tag, sock, args, kwds, &result);
        if (done) {
            Py_DECREF(tag);
            return result;
        }
    }
    PyObject *watch = attr(tag, s_inbound);
    if (watch == NULL) {
        drop();
    } else if (watch != Py_None) {
        int armed = get_truth(watch, s_armed);
        PyObject *watched = armed > 0 ? attr(watch, s_watched_sock) : NULL;
        if (armed < 0) drop();
        if (armed > 0 && watched == NULL) drop();
        if (watched != NULL && watched == sock) {
            if (stamp_arrival(watch, sock) < 0) {
                if (PyErr_ExceptionMatches(PyExc_TimeoutError) ||
                    !PyErr_ExceptionMatches(PyExc_Exception)) {
                    /* the socket's own timeout (the read would have raised it), or the
                     * greenlet killed (GreenletExit, gevent.Timeout) in the wait */
                    Py_DECREF(watched);
                    Py_DECREF(watch);
                    Py_DECREF(tag);
                    return NULL;
                }
                if (!PyErr_ExceptionMatches(PyExc_OSError)) bad_states++;
                PyErr_Clear(); /* an OSError: the read itself reports the failure */
                if (set_attr(watch, s_armed, Py_False) < 0) drop();
            }
        }
        Py_XDECREF(watched);
    }
    Py_XDECREF(watch);
    PyObject *call = attr(tag, s_call);
    Py_DECREF(tag);
    if (call == NULL) {
        drop();
    } else if (call != Py_None) {
        int awaiting = get_truth(call, s_awaiting_first_read);
        if (awaiting > 0) {
            int out = get_truth(call, s_out_since_send);
            if (out > 0) {
                PyObject *r = PyObject_CallFunctionObjArgs(self->check_queued_reply, call, sock,
                                                           NULL);
                if (r == NULL) drop();
                Py_XDECREF(r);
            } else if (out == 0) {
                /* Ran without pause since the send: no delay to find. */
                if (set_attr(call, s_awaiting_first_read, Py_False) < 0) drop();
            } else {
                drop();
            }
        } else if (awaiting < 0) {
            drop();
        }
    }
    Py_XDECREF(call);
    return PyObject_Call(self->original, args, kwds);
}

static PyObject *WaitHook_call(WaitHookObject *self, PyObject *args, PyObject *kwds) {
    if (self->kind == HOOK_SENDALL) return sendall_call(self, args, kwds);
    if (self->kind >= HOOK_READ) return read_call(self, args, kwds);
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    /* (sock, watcher[, timeout_exc]); gevent.ssl passes timeout_exc by keyword. */
    if (n < 2 || n > 3 || !measuring_now())
        return PyObject_Call(self->original, args, kwds);
    PyObject *call = current_call();
    if (call == NULL) return PyObject_Call(self->original, args, kwds);
    PyObject *sock = PyTuple_GET_ITEM(args, 0);
    PyObject *watcher = PyTuple_GET_ITEM(args, 1);
    int is_read = 0;
    int64_t started = 0;
    PyObject *read_event = PyObject_GetAttr(sock, s_read_event);
    if (read_event == NULL) goto start_failed;
    is_read = watcher == read_event;
    Py_DECREF(read_event);
    if (wait_start(call, now_ns(), is_read, &started) < 0) goto start_failed;
    if (set_attr(call, s_in_socket_wait, Py_True) < 0) goto start_failed;

    PyObject *result = PyObject_Call(self->original, args, kwds);
    if (result == NULL)
        account_failed_wait(call, sock, started, is_read);
    else
        account_wait(call, sock, started, is_read, 1);
    Py_DECREF(call);
    return result;

start_failed:
    drop();
    if (set_attr(call, s_in_socket_wait, Py_False) < 0) drop();
    Py_DECREF(call);
    return PyObject_Call(self->original, args, kwds);
}

static PyObject *WaitHook_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static int WaitHook_init(WaitHookObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"original", "kind", "watching", "check_queued_reply", NULL};
    PyObject *original, *watching = NULL, *check = NULL;
    const char *kind = "wait";
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|sOO:Hook", kwlist, &original, &kind,
                                     &watching, &check))
        return -1;
    if (strcmp(kind, "wait") == 0) {
        self->kind = HOOK_WAIT;
    } else if (strcmp(kind, "sendall") == 0) {
        self->kind = HOOK_SENDALL;
    } else if (strcmp(kind, "read") == 0 || strcmp(kind, "recv") == 0 ||
               strcmp(kind, "recv_into") == 0) {
        if (watching == NULL || !PyList_Check(watching) || check == NULL) {
            PyErr_SetString(PyExc_TypeError,
                            "a read hook needs watching (a list) and check_queued_reply");
            return -1;
        }
        self->kind = strcmp(kind, "read") == 0   ? HOOK_READ
                     : strcmp(kind, "recv") == 0 ? HOOK_RECV
                                                 : HOOK_RECV_INTO;
    } else {
        PyErr_Format(PyExc_ValueError,
                     "kind must be wait, sendall, read, recv or recv_into, got %s", kind);
        return -1;
    }
    Py_XSETREF(self->original, Py_NewRef(original));
    Py_XSETREF(self->watching, Py_XNewRef(watching));
    Py_XSETREF(self->check_queued_reply, Py_XNewRef(check));
    return 0;
}

static int WaitHook_traverse(WaitHookObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->original);
    Py_VISIT(self->dict);
    Py_VISIT(self->watching);
    Py_VISIT(self->check_queued_reply);
    return 0;
}

static int WaitHook_clear(WaitHookObject *self) {
    Py_CLEAR(self->original);
    Py_CLEAR(self->dict);
    Py_CLEAR(self->watching);
    Py_CLEAR(self->check_queued_reply);
    return 0;
}

static void WaitHook_dealloc(WaitHookObject *self) {
    PyObject_GC_UnTrack(self);
    WaitHook_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef WaitHook_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject WaitHookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracing.timing._native.Hook",
    .tp_doc = "socket_hooks' replacements, compiled: Hook(original, kind='wait'|'sendall'|"
              "'read'|'recv'|'recv_into', watching=, check_queued_reply=) (the last two for "
              "the reads).",
    .tp_basicsize = sizeof(WaitHookObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)WaitHook_init,
    .tp_dealloc = (destructor)WaitHook_dealloc,
    .tp_traverse = (traverseproc)WaitHook_traverse,
    .tp_clear = (inquiry)WaitHook_clear,
    .tp_call = (ternaryfunc)WaitHook_call,
    .tp_descr_get = WaitHook_get,
    .tp_getset = WaitHook_getset,
    .tp_dictoffset = offsetof(WaitHookObject, dict),
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
};
