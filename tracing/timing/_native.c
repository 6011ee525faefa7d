/* The timing core's hot path, compiled: what runs on every greenlet switch and around
 * every socket wait, and a call's measurement begun and finished. The Python modules
 * are the reference (switch_tracer, switchlog, socket_hooks, kernel_rx, call_state,
 * call_timing); this file follows them line for line, and
 * tests/unit/tracing/timing/test_native.py replays the same switch, wait and call
 * sequences through both and compares every number.
 *
 * Never raise into the code it observes: a hook that finds a state it cannot handle
 * (a missing attribute, a non-integer, a failed syscall) counts it in bad_states, clears
 * the error and carries on, exactly where the Python reference would call swallow().
 * The one exception is the previously installed greenlet tracer, which is chained to
 * as is: its errors are its own, as in the reference.
 *
 * Objects the C code reads (greenlet tags, CallState, RequestState) stay Python objects
 * with __slots__: attribute access through interned names costs tens of ns, against a
 * Python frame per switch (0.4 us) in the reference.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <stddef.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* kernel_rx: SO_TIMESTAMPNS_OLD, whose payload is a native struct timespec. */
#define RX_SO_TIMESTAMPNS 35
#define TCP_INFO_LAST_ACK_RECV_OFFSET 56
#define TCP_INFO_LEN 64
#define TCP_INFO_RESOLUTION_NS 4000000LL

/* -- module state (one interpreter, the hub's thread) ---------------------------------- */

static unsigned long long bad_states = 0;
/* call_state.NO_CULPRITS (set by configure_calls) and the int 0. */
static PyObject *g_no_culprits, *g_zero;

static PyObject *s_tag_attr, *s_label, *s_call, *s_request, *s_in_socket_wait,
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
static PyObject *g_getcurrent, *g_measuring, *g_tag_of, *g_call_state, *g_request_type;
/* labels.GreenletTag (NULL: every new tag is made by labels.tag_of). */
static PyObject *g_tag_type;
/* labels.GreenletTag's slot offsets, in this order (configure refuses a tag type without
 * exactly these four). make_tag fills them as GreenletTag(label) does: label, the rest
 * None. */
enum { TAG_label, TAG_call, TAG_inbound, TAG_request, TAG_SLOT_COUNT };
static const char *const TAG_NAMES[TAG_SLOT_COUNT] = {"label", "call", "inbound", "request"};
static Py_ssize_t g_tag_slots[TAG_SLOT_COUNT];
/* runqueue.RunQueueClock: its reads and samples are done here for that exact class. */
static PyObject *g_runqueue_type;
static Py_ssize_t g_max_waits = 64;
/* A replacement for CLOCK_MONOTONIC (tests replay recorded sequences); NULL: the clock. */
static PyObject *g_clock;
/* int(v) as int64: PyLong_AsLongLong takes a slow byte-array path for any value above
 * 2**30 (every ns timestamp); this one reads the digits. -1 with an error set. */
static int64_t as_i64(PyObject *v) {
    int overflow;
    long long r = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "int too large for the timing core");
        return -1;
    }
    return r;
}

static void drop(void) {
    bad_states++;
    PyErr_Clear();
}

/* Told of every accounted wait and send (bench timing-accuracy compares the raw pieces
 * with ground truth, as it spies on CallState's methods in the reference); NULL: none. */
static PyObject *g_observer;

static void observe(const char *what, PyObject *call, int64_t a, int64_t b, int known,
                    int64_t ready) {
    if (g_observer == NULL) return;
    PyObject *r = known ? PyObject_CallFunction(g_observer, "sOLLL", what, call, (long long)a,
                                                (long long)b, (long long)ready)
                        : PyObject_CallFunction(g_observer, "sOLLO", what, call, (long long)a,
                                                (long long)b, Py_None);
    if (r == NULL) drop();
    Py_XDECREF(r);
}


static int64_t now_ns(void) {
    if (g_clock != NULL) {
        PyObject *r = PyObject_CallNoArgs(g_clock);
        if (r == NULL) {
            drop();
            return 0;
        }
        int64_t v = as_i64(r);
        Py_DECREF(r);
        if (v == -1 && PyErr_Occurred()) drop();
        return v;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
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

static Py_ssize_t find_slot(PyTypeObject *type, PyObject *name) {
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
static PyObject **slot_of(PyObject *obj, PyObject *name) {
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

/* The slot at a plain slot's offset (found once: find_slot, required_slot). */
#define SLOT_AT(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))
static Py_ssize_t required_slot(PyTypeObject *type, const char *name);

/* Each call site of the accessors below keeps the type and slot offset it last saw (a
 * monomorphic inline cache: the call sites each see one class, the same on every call),
 * checked against the type's version tag, which CPython never gives two types and
 * zeroes when a class changes. A hit touches the site and the type; slot_of's table
 * (hashed, 4 KB) is looked in only on a miss: on a cold worker, each of its entries a
 * switch touches is a cache miss. */
typedef struct {
    PyTypeObject *type; /* borrowed: compared, never dereferenced before the version */
    Py_ssize_t offset;
    unsigned int version;
} SlotSite;

static PyObject **site_slot(PyObject *obj, PyObject *name, SlotSite *site) {
    PyTypeObject *type = Py_TYPE(obj);
    if (site->type == type && site->version != 0 && type->tp_version_tag == site->version)
        return (PyObject **)((char *)obj + site->offset);
    PyObject **slot = slot_of(obj, name);
    if (slot != NULL && PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) &&
        type->tp_version_tag != 0) {
        site->type = type;
        site->offset = (char *)slot - (char *)obj;
        site->version = type->tp_version_tag;
    }
    return slot;
}

/* getattr(obj, name): a new reference, NULL with an error set. */
static PyObject *attr_at(PyObject *obj, PyObject *name, SlotSite *site) {
    PyObject **slot = site_slot(obj, name, site);
    if (slot != NULL && *slot != NULL) return Py_NewRef(*slot);
    return PyObject_GetAttr(obj, name);
}

/* setattr(obj, name, value): 0, or -1 with an error set. */
static int set_attr_at(PyObject *obj, PyObject *name, PyObject *value, SlotSite *site) {
    PyObject **slot = site_slot(obj, name, site);
    if (slot == NULL) return PyObject_SetAttr(obj, name, value);
    Py_XSETREF(*slot, Py_NewRef(value));
    return 0;
}

static int get_i64_at(PyObject *obj, PyObject *name, int64_t *out, SlotSite *site) {
    PyObject *v = attr_at(obj, name, site);
    if (v == NULL) return -1;
    *out = as_i64(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int set_i64_at(PyObject *obj, PyObject *name, int64_t value, SlotSite *site) {
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL) return -1;
    int r = set_attr_at(obj, name, v, site);
    Py_DECREF(v);
    return r;
}

static int add_i64_at(PyObject *obj, PyObject *name, int64_t delta, SlotSite *site) {
    int64_t v;
    if (get_i64_at(obj, name, &v, site) < 0) return -1;
    return set_i64_at(obj, name, v + delta, site);
}

/* 1 true, 0 false, -1 error */
static int get_truth_at(PyObject *obj, PyObject *name, SlotSite *site) {
    PyObject *v = attr_at(obj, name, site);
    if (v == NULL) return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* The accessors as the code calls them: a SlotSite per call site (GCC/Clang statement
 * expressions). */
#define SITE_CALL(fn, ...)                                                                \
    ({                                                                                    \
        static SlotSite site_;                                                            \
        fn(__VA_ARGS__, &site_);                                                          \
    })
#define attr(obj, name) SITE_CALL(attr_at, obj, name)
#define set_attr(obj, name, value) SITE_CALL(set_attr_at, obj, name, value)
#define get_i64(obj, name, out) SITE_CALL(get_i64_at, obj, name, out)
#define set_i64(obj, name, value) SITE_CALL(set_i64_at, obj, name, value)
#define add_i64(obj, name, delta) SITE_CALL(add_i64_at, obj, name, delta)
#define get_truth(obj, name) SITE_CALL(get_truth_at, obj, name)

/* getattr(obj, name, None) as a new reference; NULL with an error set on failure. */
static PyObject *get_optional(PyObject *obj, PyObject *name) {
    PyObject *v;
    int found = _PyObject_LookupAttr(obj, name, &v);
    if (found < 0) return NULL;
    if (found == 0) Py_RETURN_NONE;
    return v;
}

/* A greenlet's tag (getattr(greenlet, TAG_ATTR, None)), read from its instance dict when
 * its type has nothing of that name and the generic getattr: what the generic path would
 * find, without the type lookup and descriptor checks (a few per switch). Each call site
 * keeps the type it last checked, with its version tag (zeroed when a class changes): a
 * SlotSite, its offset unused. An instance of a Python class that keeps its attributes
 * inline gets its dict made, once (gevent's greenlets and the hub have a plain one). A
 * new reference, or NULL with an error set. */
static PyObject *tag_at(PyObject *greenlet, SlotSite *site) {
    PyTypeObject *type = Py_TYPE(greenlet);
    if (site->type != type || site->version == 0 || type->tp_version_tag != site->version) {
        if (type->tp_getattro != PyObject_GenericGetAttr || type->tp_dictoffset == 0 ||
            _PyType_Lookup(type, s_tag_attr) != NULL ||
            !PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) || type->tp_version_tag == 0)
            return get_optional(greenlet, s_tag_attr);
        site->type = type;
        site->version = type->tp_version_tag;
    }
    PyObject **dict = _PyObject_GetDictPtr(greenlet);
    if (dict == NULL || *dict == NULL) Py_RETURN_NONE;
    PyObject *tag = PyDict_GetItemWithError(*dict, s_tag_attr); /* borrowed */
    if (tag == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    return Py_NewRef(tag);
}
#define tag_of_greenlet(greenlet) SITE_CALL(tag_at, greenlet)

/* measuring[0] != 0; errors count as "not measuring". */
static int measuring_now(void) {
    if (g_measuring == NULL || !PyList_Check(g_measuring) || PyList_GET_SIZE(g_measuring) < 1)
        return 0;
    PyObject *v = PyList_GET_ITEM(g_measuring, 0);
    int r = PyObject_IsTrue(v);
    if (r < 0) {
        drop();
        return 0;
    }
    return r;
}

static int dict_add_ns(PyObject *into, PyObject *key, int64_t ns) {
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

/* == SwitchLog ========================================================================== */

typedef struct {
    PyObject_HEAD
    Py_ssize_t size;
    Py_ssize_t count;
    Py_ssize_t head; /* next slot written */
    int64_t *times;
    PyObject **labels; /* strong references; NULL is the label None */
} SwitchLogObject;

static PyTypeObject SwitchLogType;

static void log_push(SwitchLogObject *self, int64_t t, PyObject *label) {
    Py_ssize_t i = self->head;
    PyObject *old = self->labels[i];
    PyObject *keep = (label == Py_None) ? NULL : label;
    Py_XINCREF(keep);
    self->labels[i] = keep;
    self->times[i] = t;
    self->head = (i + 1 == self->size) ? 0 : i + 1;
    if (self->count < self->size) self->count++;
    Py_XDECREF(old);
}

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
static int log_attribute(SwitchLogObject *self, int64_t start, int64_t end, PyObject *into) {
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

static PyTypeObject SwitchLogType = {
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

/* == Tracer: the greenlet trace function ================================================ */

#define RUN_SLOTS 32 /* a power of two */

typedef struct {
    PyObject_HEAD
    SwitchLogObject *log;
    PyObject *previous;  /* or NULL */
    PyObject *sample;    /* sampler.sample, or NULL */
    PyObject *due;       /* sampler.due_ns: a one-element list, or NULL */
    PyObject *sampler;   /* for runqueue.RunQueueClock: read here, without a Python call */
    PyObject *samples_append;
    int64_t sample_interval_ns;
    PyObject *since;     /* route_cpu.since: [time_ns, label] */
    PyObject *by_label;  /* route_cpu.by_label_ns */
    PyObject *charge_long;
    int64_t long_ns;
    /* route_cpu.RouteCpu's own charge_long, done here (NULL blocks: call charge_long) */
    PyObject *blocks;    /* route_cpu.blocks */
    PyObject *runqueue;  /* route_cpu.runqueue, or NULL */
    PyObject *hub_label; /* labels.HUB_LABEL: the hub's long runs are charged as they are */
    int64_t block_ns;
    int enabled;
    /* route_cpu.since, kept here between pulls (pull_route_cpu writes it back) */
    int64_t since_ns;
    PyObject *since_label;
    /* the short runs' ns per label since the last pull: a label found by its pointer (a
     * route's label is one string object); added into by_label_ns by pull_route_cpu. A
     * dict update makes and frees an int object per switch, and touches the dict's
     * table: tens of cache lines a second of a cold worker's. */
    struct {
        PyObject *label; /* NULL: empty */
        int64_t ns;
    } runs[RUN_SLOTS];
    int64_t due_seen; /* the sampler's due_ns when last read: no read until then */
} TracerObject;

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
static int sample_runqueue(TracerObject *self, int64_t now) {
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
static int runqueue_wait_between(PyObject *clock, int64_t start, int64_t end, int64_t *wait) {
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

/* call_state.explain_delay(start, end, into): culprits into *into*, CPU wait in *wait.
 * The switch log and the run-queue clock are the ones call_state.configure() was given;
 * each is read here when it is the compiled log or a RunQueueClock, else its Python
 * method runs. */
static int explain_into(int64_t start, int64_t end, PyObject *into, int64_t *wait) {
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

/* GreenletTag(label), its slots set here as its __init__ sets them, without calling the
 * class: that would run __init__ as a Python frame inside the tracer, on the first switch
 * into every new greenlet. Only with g_tag_type set (new_tag checks). A new reference. */
static PyObject *make_tag(PyObject *label) {
    PyTypeObject *type = (PyTypeObject *)g_tag_type;
    PyObject *tag = type->tp_alloc(type, 0);
    if (tag == NULL) return NULL;
    for (int i = 0; i < TAG_SLOT_COUNT; i++)
        SLOT_AT(tag, g_tag_slots[i]) = Py_NewRef(i == TAG_label ? label : Py_None);
    return tag;
}

/* labels.tag_of for a greenlet the tracer meets without a tag, in the common case: a
 * greenlet gevent spawned (its ``spawning_greenlet`` weak reference) from a tagged one
 * inherits that one's label. Anything else (the hub, no spawner, a spawner without a tag
 * yet, no GreenletTag type given) is left to labels.tag_of. A new reference. */
static PyObject *new_tag(PyObject *greenlet) {
    if (g_tag_type == NULL) goto reference;
    PyObject *ref = get_optional(greenlet, s_spawning_greenlet);
    if (ref == NULL) return NULL;
    if (!PyWeakref_CheckRef(ref)) {
        Py_DECREF(ref);
        goto reference;
    }
    PyObject *spawner = PyWeakref_GetObject(ref); /* borrowed */
    if (spawner == NULL) {
        Py_DECREF(ref);
        return NULL;
    }
    if (spawner == Py_None || spawner == greenlet) {
        Py_DECREF(ref);
        goto reference;
    }
    PyObject *spawner_tag = tag_of_greenlet(spawner);
    Py_DECREF(ref);
    if (spawner_tag == NULL) return NULL;
    if (spawner_tag == Py_None) {
        Py_DECREF(spawner_tag);
        goto reference;
    }
    PyObject *label = attr(spawner_tag, s_label);
    Py_DECREF(spawner_tag);
    if (label == NULL) return NULL;
    PyObject *tag = make_tag(label);
    Py_DECREF(label);
    if (tag == NULL) return NULL;
    if (PyObject_SetAttr(greenlet, s_tag_attr, tag) < 0) {
        /* a greenlet type without a __dict__ cannot carry a tag: it stays unlabelled */
        if (!PyErr_ExceptionMatches(PyExc_AttributeError) &&
            !PyErr_ExceptionMatches(PyExc_TypeError)) {
            Py_DECREF(tag);
            return NULL;
        }
        PyErr_Clear();
    }
    return tag;
reference:
    return PyObject_CallOneArg(g_tag_of, greenlet);
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

static PyTypeObject TracerType = {
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

/* == kernel_rx, on the descriptor ======================================================= */

/* recvmsg(fd, buf[:len], flags | MSG_DONTWAIT) with room for a receive stamp: the bytes
 * read (-1 with errno set), and in *have / *arrival the stamp the kernel gave them
 * (kernel_rx.stamp_of). Data without a stamp switches the option on for the next time. */
static ssize_t recv_stamped(int fd, void *buf, size_t len, int flags, int *have,
                            int64_t *arrival) {
    char control[CMSG_SPACE(sizeof(struct timespec))];
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    *have = 0;
    ssize_t n = recvmsg(fd, &msg, flags | MSG_DONTWAIT);
    if (n < 0) return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == RX_SO_TIMESTAMPNS &&
            c->cmsg_len >= CMSG_LEN(16)) {
            long parts[2];
            memcpy(parts, CMSG_DATA(c), sizeof(parts));
            *arrival = (int64_t)parts[0] * 1000000000LL + parts[1];
            *have = 1;
            return n;
        }
    }
    if (n > 0) {
        int on = 1;
        (void)setsockopt(fd, SOL_SOCKET, RX_SO_TIMESTAMPNS, &on, sizeof(on));
    }
    return n;
}

/* Peeks taken (tests: a plain socket's read takes its stamp without one). */
static unsigned long long peeks = 0;

/* peek_arrival_ns: 1 with *arrival set, 0 none (and the option switched on when data
 * was queued without a stamp). Never fails: a failed peek is "none". */
static int peek_arrival(int fd, int64_t *arrival) {
    char byte;
    int have;
    peeks++;
    if (recv_stamped(fd, &byte, 1, MSG_PEEK, &have, arrival) < 0) return 0;
    return have;
}

/* last_ack_age_ns: 1 with *age set, 0 unknown. */
static int last_ack_age(int fd, int64_t *age) {
    unsigned char info[TCP_INFO_LEN];
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, info, &len) < 0) return 0;
    if (len < TCP_INFO_LAST_ACK_RECV_OFFSET + 4) return 0;
    uint32_t ms;
    memcpy(&ms, info + TCP_INFO_LAST_ACK_RECV_OFFSET, sizeof(ms));
    *age = (int64_t)ms * 1000000LL;
    return 1;
}

static int fd_of_raw(PyObject *sock) {
    PyObject *raw = PyObject_GetAttr(sock, s_sock);
    if (raw == NULL) return -1;
    int fd = PyObject_AsFileDescriptor(raw);
    Py_DECREF(raw);
    return fd;
}

static PyObject *py_peek_arrival_ns(PyObject *mod, PyObject *raw) {
    int fd = PyObject_AsFileDescriptor(raw);
    if (fd < 0) return NULL;
    int64_t arrival;
    if (!peek_arrival(fd, &arrival)) Py_RETURN_NONE;
    return PyLong_FromLongLong(arrival);
}

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

static PyObject *py_explain_delay(PyObject *mod, PyObject *args) {
    long long start, end;
    PyObject *into;
    if (!PyArg_ParseTuple(args, "LLO!", &start, &end, &PyDict_Type, &into)) return NULL;
    int64_t wait;
    if (explain_into(start, end, into, &wait) < 0) return NULL;
    return PyLong_FromLongLong(wait);
}

/* CallState.on_socket_wait */
static int on_socket_wait(PyObject *call, int64_t started, int64_t resumed, int known,
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

static PyTypeObject WaitHookType;

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

static PyTypeObject WaitHookType = {
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
static Py_ssize_t cm_state_offset, cm_tag_offset, cm_timing_offset;
/* call_timing.CallMeasurement, call_state.CallState, CallTiming (NULL: not configured). */
static PyTypeObject *g_measurement_type, *g_state_type, *g_timing_type;
static int64_t g_max_nesting = 8;

static int measuring_add(long delta) {
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

/* The plain slot offset of *name* in *type*, or -1 with an error set. */
static Py_ssize_t required_slot(PyTypeObject *type, const char *name) {
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
static PyObject *current_tag(void) {
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

static PyObject *py_begin_call(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
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

static PyObject *ns_seconds(int64_t ns) { return PyFloat_FromDouble((double)ns / 1e9); }

/* An instance of the named tuple *type* holding *fields*' items (any of them NULL: an
 * error is set); *fields* is released. What tuple.__new__(type, fields) makes, without
 * its two intermediate tuples. A new reference. */
static PyObject *named_tuple(PyTypeObject *type, PyObject *fields) {
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
static PyObject *seconds_proxy(PyObject *culprits_ns) {
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

static PyObject *py_finish_call(PyObject *mod, PyObject *m) {
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

static PyObject *py_configure_calls(PyObject *mod, PyObject *args) {
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
    Py_ssize_t offsets[CS_COUNT];
    for (int i = 0; i < CS_COUNT; i++) {
        offsets[i] = required_slot(state_type, CS_NAMES[i]);
        if (offsets[i] < 0) return NULL;
    }
    Py_ssize_t m_state = required_slot(measurement_type, "_state");
    Py_ssize_t m_tag = m_state < 0 ? -1 : required_slot(measurement_type, "_tag");
    Py_ssize_t m_timing = m_tag < 0 ? -1 : required_slot(measurement_type, "timing");
    if (m_timing < 0) return NULL;
    memcpy(cs_offset, offsets, sizeof offsets);
    cm_state_offset = m_state;
    cm_tag_offset = m_tag;
    cm_timing_offset = m_timing;
    Py_XSETREF(g_measurement_type, (PyTypeObject *)Py_NewRef((PyObject *)measurement_type));
    Py_XSETREF(g_state_type, (PyTypeObject *)Py_NewRef((PyObject *)state_type));
    Py_XSETREF(g_timing_type, (PyTypeObject *)Py_NewRef((PyObject *)timing_type));
    Py_XSETREF(g_no_culprits, Py_NewRef(no_culprits));
    g_max_nesting = max_nesting;
    Py_RETURN_NONE;
}

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

static PyTypeObject HistogramType;

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

static PyTypeObject HistogramType = {
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

static PyObject *py_begin_request(PyObject *mod, PyObject *Py_UNUSED(ignored)) {
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

static PyObject *py_finish_request(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
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

static PyObject *py_configure_requests(PyObject *mod, PyObject *args) {
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
    for (int i = 0; i < RM_COUNT; i++) {
        m_offsets[i] = required_slot(measurement_type, RM_NAMES[i]);
        if (m_offsets[i] < 0) return NULL;
    }
    for (int i = 0; i < RS_COUNT; i++) {
        s_offsets[i] = required_slot(state_type, RS_NAMES[i]);
        if (s_offsets[i] < 0) return NULL;
    }
    memcpy(rm_offset, m_offsets, sizeof m_offsets);
    memcpy(rs_offset, s_offsets, sizeof s_offsets);
    Py_XSETREF(g_rm_type, (PyTypeObject *)Py_NewRef((PyObject *)measurement_type));
    Py_XSETREF(g_rs_type, (PyTypeObject *)Py_NewRef((PyObject *)state_type));
    Py_XSETREF(g_rt_type, (PyTypeObject *)Py_NewRef((PyObject *)timing_type));
    Py_XSETREF(g_no_culprits, Py_NewRef(no_culprits));
    Py_RETURN_NONE;
}

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
    *s_finish_what, *g_status_error;

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
        PyObject *m = py_begin_call(NULL, &offset, 1);
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
    PyObject *r = Py_IS_TYPE(histogram, &HistogramType)
                      ? Histogram_observe((HistogramObject *)histogram, value)
                      : PyObject_CallMethodOneArg(histogram, s_observe, value);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* PoolMetrics.observe_call: the call's network time, scheduling delay and CPU wait. */
static int observe_call(CallObserverObject *core, PyObject *upstream, PyObject *timing) {
    PyObject *hs = histograms_of(core, upstream);
    if (hs == NULL) return -1;
    if (!Py_IS_TYPE(timing, g_timing_type) || PyTuple_GET_SIZE(timing) < 7) {
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
        PyObject *timing = py_finish_call(NULL, measurement);
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
    if (g_timing_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure_calls was not called");
        return NULL;
    }
    Py_ssize_t offsets[CO_COUNT];
    for (int i = 0; i < CO_COUNT; i++) {
        offsets[i] = required_slot(type, CO_NAMES[i]);
        if (offsets[i] < 0) return NULL;
    }
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
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracing.timing._native.CallObserver",
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
        for (int i = 0; i < TAG_SLOT_COUNT; i++) {
            tag_slots[i] = required_slot((PyTypeObject *)tag_type, TAG_NAMES[i]);
            if (tag_slots[i] < 0) return NULL;
        }
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
    {"configure_observer", (PyCFunction)py_configure_observer, METH_VARARGS,
     "configure_observer(_CompiledCall, _Call.__enter__, _Call.__exit__, swallow): the "
     "class's slots found; its compiled (__enter__, __exit__) returned."},
    {"peek_arrival_ns", (PyCFunction)py_peek_arrival_ns, METH_O,
     "kernel_rx.peek_arrival_ns on a socket (or descriptor)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native",
    "The timing core's per-switch and per-wait hot path, compiled (see native.py).", -1,
    module_methods, NULL, NULL, NULL, NULL,
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
    INTERN(s_traceparent, "traceparent");
    INTERN(s_offset_ns, "offset_ns");
    INTERN(s_records, "records");
    INTERN(s_call_histograms, "call_histograms");
    INTERN(s_observe, "observe");
    INTERN(s_finish_what, "client span attributes");
    g_status_error = PyLong_FromLong(400);
    if (g_status_error == NULL) return NULL;
    g_zero = PyLong_FromLong(0);
    if (g_zero == NULL) return NULL;
    if (PyType_Ready(&SwitchLogType) < 0 || PyType_Ready(&TracerType) < 0 ||
        PyType_Ready(&WaitHookType) < 0 || PyType_Ready(&HistogramType) < 0 ||
        PyType_Ready(&CallObserverType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "SwitchLog", (PyObject *)&SwitchLogType) < 0 ||
        PyModule_AddObjectRef(m, "Tracer", (PyObject *)&TracerType) < 0 ||
        PyModule_AddObjectRef(m, "Hook", (PyObject *)&WaitHookType) < 0 ||
        PyModule_AddObjectRef(m, "Histogram", (PyObject *)&HistogramType) < 0 ||
        PyModule_AddObjectRef(m, "CallObserver", (PyObject *)&CallObserverType) < 0 ||
        PyModule_AddObjectRef(m, "WaitHook", (PyObject *)&WaitHookType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
