/* The timing core's C API: what tracing.timing._native gives compiled code in the layers
 * above it, as CPython's datetime module gives its C API: a table of pointers in a
 * capsule, tracing.timing._native._C_API, taken once at import (TimingCAPI_Import).
 * Nothing is linked across extensions, and the timing core knows nothing of who calls
 * it (tests/unit/test_layers.py reads these files for names of the layers above).
 *
 * A change to the table's layout bumps TIMING_CAPI_VERSION: a caller built against
 * another layout refuses to import (ImportError), and the Python side runs its reference.
 */
#ifndef PRICING_TIMING_CAPI_H
#define PRICING_TIMING_CAPI_H

#include <Python.h>

#define TIMING_CAPI_NAME "tracing.timing._native._C_API"
#define TIMING_CAPI_VERSION 1

/* A call site's inline cache for attr_at: the type and slot offset it last saw, checked
 * against the type's version tag (native.c, slot_of). One static per call site. */
typedef struct {
    PyTypeObject *type; /* borrowed: compared, never dereferenced before the version */
    Py_ssize_t offset;
    unsigned int version;
} SlotSite;

typedef struct {
    int version; /* TIMING_CAPI_VERSION */
    /* call_timing.begin_call(offset_ns): a CallMeasurement of the current greenlet (new
     * reference; NULL with an error set). */
    PyObject *(*begin_call)(PyObject *offset_ns);
    /* CallMeasurement.finish(): its CallTiming (new reference; NULL with an error set). */
    PyObject *(*finish_call)(PyObject *measurement);
    /* Clear the error set and count it in _native.bad_states() (a hook never raises). */
    void (*drop)(void);
    /* getattr(obj, name) through the slot cache (*name* interned): new reference, or NULL
     * with an error set. */
    PyObject *(*attr_at)(PyObject *obj, PyObject *name, SlotSite *site);
    /* The offsets of a C name table in a class: every name a plain slot, and together all
     * its slots; -1 with a TypeError naming the difference (native.c, table_slots). */
    int (*table_slots)(PyTypeObject *type, const char *const *names, int count,
                       Py_ssize_t *offsets);
    /* A C name table as a tuple of str. */
    PyObject *(*names_tuple)(const char *const *names, int count);
    /* histogram.Histogram, compiled, and its observe(value) (new reference to None). */
    PyTypeObject *histogram_type;
    PyObject *(*histogram_observe)(PyObject *histogram, PyObject *value);
    /* call_state.CallTiming once configure_calls ran (NULL before): read at each use. */
    PyTypeObject *const *timing_type;
} TimingCAPI;

/* The table, imported once (its module imported if need be); NULL with ImportError set. */
static inline const TimingCAPI *TimingCAPI_Import(void) {
    const TimingCAPI *api = (const TimingCAPI *)PyCapsule_Import(TIMING_CAPI_NAME, 0);
    if (api != NULL && api->version != TIMING_CAPI_VERSION) {
        PyErr_Format(PyExc_ImportError, "%s: version %d, %d expected", TIMING_CAPI_NAME,
                     api->version, TIMING_CAPI_VERSION);
        return NULL;
    }
    return api;
}

#endif /* PRICING_TIMING_CAPI_H */
