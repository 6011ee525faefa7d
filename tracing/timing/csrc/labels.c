/* labels.GreenletTag made and a new greenlet tagged (labels.tag_of's common case).
 * Follows tracing/timing/labels.py. */

#include "timing.h"

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
PyObject *new_tag(PyObject *greenlet) {
    if (g_tag_type == NULL) goto reference;
    PyObject *ref = get_optional(greenlet, s_spawning_greenlet);
    if (ref == NULL) return NULL;
    if (!PyWeakref_CheckRef(ref)) {
        Py_DECREF(ref);
        goto reference;
    }
    PyObject *spawner = weakref_target(ref);
    Py_DECREF(ref);
    if (spawner == NULL) return NULL;
    if (spawner == Py_None || spawner == greenlet) {
        Py_DECREF(spawner);
        goto reference;
    }
    PyObject *spawner_tag = tag_of_greenlet(spawner);
    Py_DECREF(spawner);
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
