/* What the timing core's compiled files share. Internal: compiled code in the layers
 * above takes what it needs through the C API capsule (capi.h), never this header.
 *
 * The timing core's hot path, compiled: what runs on every greenlet switch and around
 * every socket wait, and a call's and a request's measurement begun and finished. The
 * Python modules are the reference; each .c file here follows the one it is named after
 * (native.c: the module itself), and tests/unit/tracing/timing/test_native.py replays the
 * same switch, wait and call sequences through both and compares every number. All the
 * files build one extension, tracing.timing._native (setup.py); their functions are
 * hidden (-fvisibility=hidden), so only PyInit__native leaves the module.
 *
 * Never raise into the code it observes: a hook that finds a state it cannot handle
 * (a missing attribute, a non-integer, a failed syscall) counts it in bad_states, clears
 * the error and carries on, exactly where the Python reference would call swallow().
 * The one exception is the previously installed greenlet tracer, which is chained to
 * as is: its errors are its own, as in the reference.
 *
 * Objects the C code reads (greenlet tags, CallState, RequestState) stay Python objects
 * with __slots__: attribute access through interned names costs tens of ns, against a
 * Python frame per switch in the reference. The private CPython APIs used here are listed,
 * with why, in docs/private-apis.md.
 */
#ifndef PRICING_TIMING_H
#define PRICING_TIMING_H

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

#include "capi.h"

/* -- CPython versions ------------------------------------------------------------------
 * getattr(obj, name) without raising AttributeError: 1 found (*out a new reference), 0
 * not (no error), -1 error. Public from 3.13 (PyObject_GetOptionalAttr); before, the
 * same function under its private name. */
#if PY_VERSION_HEX >= 0x030D0000
#define LOOKUP_OPTIONAL_ATTR(obj, name, out) PyObject_GetOptionalAttr((obj), (name), (out))
#else
#define LOOKUP_OPTIONAL_ATTR(obj, name, out) _PyObject_LookupAttr((obj), (name), (out))
#endif

/* A weak reference's object: a new reference (Py_None once it is dead), or NULL with an
 * error set. PyWeakref_GetObject (a borrowed reference) is deprecated from 3.13. */
static inline PyObject *weakref_target(PyObject *ref) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *obj;
    if (PyWeakref_GetRef(ref, &obj) < 0) return NULL;
    return obj != NULL ? obj : Py_NewRef(Py_None);
#else
    PyObject *obj = PyWeakref_GetObject(ref);
    return obj == NULL ? NULL : Py_NewRef(obj);
#endif
}

/* kernel_rx: SO_TIMESTAMPNS_OLD, whose payload is a native struct timespec. */
#define RX_SO_TIMESTAMPNS 35
#define TCP_INFO_LAST_ACK_RECV_OFFSET 56
#define TCP_INFO_LEN 64
#define TCP_INFO_RESOLUTION_NS 4000000LL

/* -- module state (native.c; one interpreter, the hub's thread) ------------------------ */

extern unsigned long long bad_states;
/* call_state.NO_CULPRITS (set by configure_calls) and the int 0. */
extern PyObject *g_no_culprits, *g_zero;

extern PyObject *s_tag_attr, *s_label, *s_call, *s_request, *s_in_socket_wait,
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
extern PyObject *g_getcurrent, *g_measuring, *g_tag_of, *g_call_state, *g_request_type;
/* labels.GreenletTag (NULL: every new tag is made by labels.tag_of). */
extern PyObject *g_tag_type;
/* labels.GreenletTag's slot offsets, in this order (configure refuses a tag type without
 * exactly these four). make_tag fills them as GreenletTag(label) does: label, the rest
 * None. */
enum { TAG_label, TAG_call, TAG_inbound, TAG_request, TAG_SLOT_COUNT };
extern const char *const TAG_NAMES[TAG_SLOT_COUNT];
extern Py_ssize_t g_tag_slots[TAG_SLOT_COUNT];
/* runqueue.RunQueueClock: its reads and samples are done here for that exact class. */
extern PyObject *g_runqueue_type;
extern Py_ssize_t g_max_waits;
/* A replacement for CLOCK_MONOTONIC (tests replay recorded sequences); NULL: the clock. */
extern PyObject *g_clock;

/* Told of every accounted wait and send (set_observer); NULL: none. */
extern PyObject *g_observer;
void observe(const char *what, PyObject *call, int64_t a, int64_t b, int known, int64_t ready);

/* int(v) as int64: PyLong_AsLongLong takes a slow byte-array path for any value above
 * 2**30 (every ns timestamp); this one reads the digits. -1 with an error set. */
static inline int64_t as_i64(PyObject *v) {
    int overflow;
    long long r = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "int too large for the timing core");
        return -1;
    }
    return r;
}

static inline void drop(void) {
    bad_states++;
    PyErr_Clear();
}

static inline int64_t now_ns(void) {
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


/* -- attribute access (the slot cache: native.c) ----------------------------------------
 * The objects read here are the timing core's own classes with __slots__; see native.c's
 * slot_of for how a slot is found once per (type, name). */
Py_ssize_t find_slot(PyTypeObject *type, PyObject *name);
PyObject **slot_of(PyObject *obj, PyObject *name);
Py_ssize_t required_slot(PyTypeObject *type, const char *name);
int table_slots(PyTypeObject *type, const char *const *names, int count, Py_ssize_t *offsets);
PyObject *names_tuple(const char *const *names, int count);
int dict_add_ns(PyObject *into, PyObject *key, int64_t ns);

/* The slot at a plain slot's offset (found once: find_slot, required_slot). */
#define SLOT_AT(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))

/* Each call site of the accessors below keeps the type and slot offset it last saw (a
 * monomorphic inline cache: the call sites each see one class, the same on every call),
 * checked against the type's version tag, which CPython never gives two types and
 * zeroes when a class changes. A hit touches the site and the type; slot_of's table
 * (hashed, 4 KB) is looked in only on a miss: on a cold worker, each of its entries a
 * switch touches is a cache miss. */
/* (SlotSite: capi.h, which the call observer uses too.) */

static inline PyObject **site_slot(PyObject *obj, PyObject *name, SlotSite *site) {
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
static inline PyObject *attr_at(PyObject *obj, PyObject *name, SlotSite *site) {
    PyObject **slot = site_slot(obj, name, site);
    if (slot != NULL && *slot != NULL) return Py_NewRef(*slot);
    return PyObject_GetAttr(obj, name);
}

/* setattr(obj, name, value): 0, or -1 with an error set. */
static inline int set_attr_at(PyObject *obj, PyObject *name, PyObject *value, SlotSite *site) {
    PyObject **slot = site_slot(obj, name, site);
    if (slot == NULL) return PyObject_SetAttr(obj, name, value);
    Py_XSETREF(*slot, Py_NewRef(value));
    return 0;
}

static inline int get_i64_at(PyObject *obj, PyObject *name, int64_t *out, SlotSite *site) {
    PyObject *v = attr_at(obj, name, site);
    if (v == NULL) return -1;
    *out = as_i64(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static inline int set_i64_at(PyObject *obj, PyObject *name, int64_t value, SlotSite *site) {
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL) return -1;
    int r = set_attr_at(obj, name, v, site);
    Py_DECREF(v);
    return r;
}

static inline int add_i64_at(PyObject *obj, PyObject *name, int64_t delta, SlotSite *site) {
    int64_t v;
    if (get_i64_at(obj, name, &v, site) < 0) return -1;
    return set_i64_at(obj, name, v + delta, site);
}

/* 1 true, 0 false, -1 error */
static inline int get_truth_at(PyObject *obj, PyObject *name, SlotSite *site) {
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
static inline PyObject *get_optional(PyObject *obj, PyObject *name) {
    PyObject *v;
    int found = LOOKUP_OPTIONAL_ATTR(obj, name, &v);
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
static inline PyObject *tag_at(PyObject *greenlet, SlotSite *site) {
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
static inline int measuring_now(void) {
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


/* -- the types, and what one file calls in another ------------------------------------- */

typedef struct {
    PyObject_HEAD
    Py_ssize_t size;
    Py_ssize_t count;
    Py_ssize_t head; /* next slot written */
    int64_t *times;
    PyObject **labels; /* strong references; NULL is the label None */
} SwitchLogObject;


static inline void log_push(SwitchLogObject *self, int64_t t, PyObject *label) {
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


/* call_state.c */
int explain_into(int64_t start, int64_t end, PyObject *into, int64_t *wait);
PyObject *py_explain_delay(PyObject *mod, PyObject *args);
int on_socket_wait(PyObject *call, int64_t started, int64_t resumed, int known,
                   int64_t ready);

/* call_timing.c */
int call_timing_tables(PyObject *tables);
int measuring_add(long delta);
PyObject *current_tag(void);
PyObject *py_begin_call(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);
PyObject *ns_seconds(int64_t ns);
PyObject *named_tuple(PyTypeObject *type, PyObject *fields);
PyObject *seconds_proxy(PyObject *culprits_ns);
PyObject *py_finish_call(PyObject *mod, PyObject *m);
PyObject *py_configure_calls(PyObject *mod, PyObject *args);
extern PyTypeObject *g_timing_type; /* call_state.CallTiming (NULL: not configured) */

/* histogram.c */
PyObject *histogram_observe(PyObject *histogram, PyObject *value);
extern PyTypeObject HistogramType;

/* kernel_rx.c */
ssize_t recv_stamped(int fd, void *buf, size_t len, int flags, int *have, int64_t *arrival);
int peek_arrival(int fd, int64_t *arrival);
int last_ack_age(int fd, int64_t *age);
int fd_of_raw(PyObject *sock);
PyObject *py_peek_arrival_ns(PyObject *mod, PyObject *raw);
extern unsigned long long peeks; /* MSG_PEEK recvmsg calls taken */

/* labels.c */
PyObject *new_tag(PyObject *greenlet);

/* runqueue.c */
int sample_runqueue(TracerObject *self, int64_t now);
int runqueue_wait_between(PyObject *clock, int64_t start, int64_t end, int64_t *wait);

/* server_timing.c */
int server_timing_tables(PyObject *tables);
PyObject *py_begin_request(PyObject *mod, PyObject *Py_UNUSED(ignored));
PyObject *py_finish_request(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);
PyObject *py_configure_requests(PyObject *mod, PyObject *args);

/* socket_hooks.c */
extern PyTypeObject WaitHookType;

/* switch_tracer.c */
extern PyTypeObject TracerType;

/* switchlog.c */
int log_attribute(SwitchLogObject *self, int64_t start, int64_t end, PyObject *into);
extern PyTypeObject SwitchLogType;

#endif /* PRICING_TIMING_H */
