/* tracing.otlp_protobuf's span encoder, compiled: the extension tracing._otlp_native.
 * Follows tracing/otlp_protobuf.py's span_fields_proto (with _put_attributes, the common
 * types of _any_value, and _event_bytes), which is its reference;
 * tests/unit/tracing/test_export_encoding.py runs both against the SDK's encoder.
 *
 * It runs on the exporter's OS thread, once per span of every sampled request, when the
 * worker exports OTLP. A span is written into one growing byte buffer; a length-delimited
 * field gets one byte for its length, and its body is moved when the length needs more.
 *
 * The common shapes are written here: ids that fit, str, int (int64), float, bool and
 * non-empty tuples of them as values, str keys, events of the usual types. Everything
 * else is handed to the reference's own helpers, passed in by configure(): a value of
 * another type to _any_value, a non-str key to _key_value, a link to _link_bytes, a
 * span with a field of another type (an odd id, a float time) to the whole reference.
 * An attribute that fails to encode is left out and reported through _encode_failed, as
 * the reference does.
 */
#include <stdint.h>

#include "_encode.h"

/* The reference's helpers (configure). */
static PyObject *g_reference;   /* span_fields_proto itself */
static PyObject *g_any_value;   /* _any_value: an AnyValue's body, any value */
static PyObject *g_key_value;   /* _key_value: a KeyValue's body, any key */
static PyObject *g_link_bytes;  /* _link_bytes */
static PyObject *g_kinds;       /* _KINDS: SpanKind -> its field's bytes */
static PyObject *g_failed;      /* _encode_failed(key, error) */
static PyObject *s_timestamp, *s_name, *s_attributes, *s_dropped_attributes, *s_items;

/* A field of the span that only the reference writes (or raises on, as it does): the
 * whole span is the reference's. No exception is set. */
#define NOT_MINE (-2)

/* == wire primitives =================================================================== */

static int put_byte(Buf *b, unsigned char c) {
    if (buf_reserve(b, 1) < 0)
        return -1;
    b->data[b->len++] = (char)c;
    return 0;
}

static int varint_bytes(unsigned long long n, char out[10]) {
    int i = 0;
    while (n >= 0x80) {
        out[i++] = (char)((n & 0x7f) | 0x80);
        n >>= 7;
    }
    out[i++] = (char)n;
    return i;
}

static int put_varint(Buf *b, unsigned long long n) {
    char bytes[10];
    return put(b, bytes, varint_bytes(n, bytes));
}

static int put_fixed(Buf *b, unsigned long long value, int size, int big_endian) {
    char bytes[16];
    for (int i = 0; i < size; i++, value >>= 8)
        bytes[big_endian ? size - 1 - i : i] = (char)(value & 0xff);
    return put(b, bytes, size);
}

/* A length-delimited field: open_field writes *tag* and a byte for the length and
 * returns where the body starts (or -1); close_field sets the length once the body is
 * written, moving it when the length takes more than one byte. */
static Py_ssize_t open_field(Buf *b, unsigned char tag) {
    if (buf_reserve(b, 2) < 0)
        return -1;
    b->data[b->len++] = (char)tag;
    b->data[b->len++] = 0;
    return b->len;
}

static int close_field(Buf *b, Py_ssize_t start) {
    Py_ssize_t size = b->len - start;
    if (size < 0x80) {
        b->data[start - 1] = (char)size;
        return 0;
    }
    char bytes[10];
    int n = varint_bytes((unsigned long long)size, bytes);
    if (buf_reserve(b, n - 1) < 0)
        return -1;
    memmove(b->data + start + n - 1, b->data + start, size);
    memcpy(b->data + start - 1, bytes, n);
    b->len += n - 1;
    return 0;
}

/* *tag*, the length and the UTF-8 of the str *s* (its .encode(): a lone surrogate
 * raises UnicodeEncodeError, as there). */
static int put_str_field(Buf *b, unsigned char tag, PyObject *s) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(s, &n);
    if (utf8 == NULL || put_byte(b, tag) < 0 || put_varint(b, (unsigned long long)n) < 0)
        return -1;
    return put(b, utf8, n);
}

/* Bytes a reference helper returned, as they are. Steals them. */
static int put_bytes(Buf *b, PyObject *bytes) {
    if (bytes == NULL)
        return -1;
    int rc;
    if (!PyBytes_Check(bytes)) {
        PyErr_SetString(PyExc_TypeError, "an encoder helper returned non-bytes");
        rc = -1;
    } else {
        rc = put(b, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
    }
    Py_DECREF(bytes);
    return rc;
}

/* An int in [0, 2**64) (*bits* 64) or [0, 2**63), as the reference's struct and varint
 * take it; NOT_MINE for anything else (the reference raises, or writes it its way). */
static int unsigned_of(PyObject *number, unsigned long long *out, int bits) {
    if (!PyLong_CheckExact(number))
        return NOT_MINE;
    if (bits == 64) {
        *out = PyLong_AsUnsignedLongLong(number);
        if (*out == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return NOT_MINE;
        }
        return 0;
    }
    long long value = PyLong_AsLongLong(number);
    if (value < 0) {
        PyErr_Clear();
        return NOT_MINE;
    }
    *out = (unsigned long long)value;
    return 0;
}

/* == values and attributes (_any_value, _put_attributes) =============================== */

static int put_any_value(Buf *b, PyObject *value);

static int put_array(Buf *b, PyObject *tuple) {
    if (Py_EnterRecursiveCall(" while encoding an attribute's value") < 0)
        return -1;
    int rc = -1;
    Py_ssize_t array = open_field(b, 0x2a);
    if (array < 0)
        goto done;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
        Py_ssize_t item = open_field(b, 0x0a);
        if (item < 0 || put_any_value(b, PyTuple_GET_ITEM(tuple, i)) < 0 ||
            close_field(b, item) < 0)
            goto done;
    }
    rc = close_field(b, array);
done:
    Py_LeaveRecursiveCall();
    return rc;
}

/* An AnyValue's body: the types attribute values have, by exact type, as the
 * reference's first checks; anything else is the reference's. */
static int put_any_value(Buf *b, PyObject *value) {
    PyTypeObject *type = Py_TYPE(value);
    if (type == &PyUnicode_Type)
        return put_str_field(b, 0x0a, value);
    if (type == &PyLong_Type) {
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (!overflow) {
            if (number == -1 && PyErr_Occurred())
                return -1;
            if (put_byte(b, 0x18) < 0)
                return -1;
            return put_varint(b, (unsigned long long)number);  /* two's complement */
        }
    } else if (type == &PyFloat_Type) {
        char bytes[9] = {0x21};
        if (PyFloat_Pack8(PyFloat_AS_DOUBLE(value), bytes + 1, 1) < 0)
            return -1;
        return put(b, bytes, sizeof(bytes));
    } else if (type == &PyBool_Type) {
        return put(b, value == Py_True ? "\x10\x01" : "\x10\x00", 2);
    } else if (type == &PyTuple_Type && PyTuple_GET_SIZE(value) > 0) {
        return put_array(b, value);
    }
    return put_bytes(b, PyObject_CallOneArg(g_any_value, value));
}

/* A KeyValue field numbered by *tag*. */
static int put_key_value(Buf *b, unsigned char tag, PyObject *key, PyObject *value) {
    Py_ssize_t pair = open_field(b, tag);
    if (pair < 0)
        return -1;
    if (PyUnicode_CheckExact(key)) {
        if (PyUnicode_GET_LENGTH(key) > 0 && put_str_field(b, 0x0a, key) < 0)
            return -1;
        Py_ssize_t any = open_field(b, 0x12);
        if (any < 0 || put_any_value(b, value) < 0 || close_field(b, any) < 0)
            return -1;
    } else if (put_bytes(b, PyObject_CallFunctionObjArgs(g_key_value, key, value, NULL)) < 0) {
        return -1;
    }
    return close_field(b, pair);
}

/* Each of *attributes* as a KeyValue field numbered by *tag*. */
static int put_attributes(Buf *b, unsigned char tag, PyObject *attributes) {
    if (attributes == Py_None)
        return 0;
    int truth = PyObject_IsTrue(attributes);
    if (truth <= 0)
        return truth;
    PyObject *iterator = NULL, *pair = NULL;
    Py_ssize_t position = 0;
    int exact_dict = PyDict_CheckExact(attributes);
    if (!exact_dict) {
        PyObject *items = PyObject_CallMethodNoArgs(attributes, s_items);
        if (items == NULL)
            return -1;
        iterator = PyObject_GetIter(items);
        Py_DECREF(items);
        if (iterator == NULL)
            return -1;
    }
    for (;;) {
        PyObject *key, *value;
        Py_CLEAR(pair);
        if (exact_dict) {
            if (!PyDict_Next(attributes, &position, &key, &value))
                break;
        } else {
            pair = PyIter_Next(iterator);
            if (pair == NULL) {
                if (PyErr_Occurred())
                    goto error;
                break;
            }
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_TypeError, "attributes.items() gave a non-pair");
                goto error;
            }
            key = PyTuple_GET_ITEM(pair, 0);
            value = PyTuple_GET_ITEM(pair, 1);
        }
        Py_INCREF(key);  /* a helper called below could change the dict */
        Py_INCREF(value);
        Py_ssize_t mark = b->len;
        int rc = put_key_value(b, tag, key, value);
        /* The reference's try covers the key and the value (an Exception, as its except). */
        if (rc < 0 && PyErr_ExceptionMatches(PyExc_Exception))
            rc = attribute_failed(b, mark, key, g_failed);
        Py_DECREF(key);
        Py_DECREF(value);
        if (rc < 0)
            goto error;
    }
    Py_XDECREF(pair);
    Py_XDECREF(iterator);
    return 0;
error:
    Py_XDECREF(pair);
    Py_XDECREF(iterator);
    return -1;
}

/* == events, links and the span (_event_bytes, span_fields_proto) ====================== */

/* A truthy count as *tag* and its varint; NOT_MINE for a count of another type. */
static int put_count(Buf *b, unsigned char tag, PyObject *count) {
    int truth = PyObject_IsTrue(count);
    if (truth <= 0)
        return truth;
    unsigned long long n;
    int rc = unsigned_of(count, &n, 63);
    if (rc < 0)
        return rc;
    return put_byte(b, tag) < 0 ? -1 : put_varint(b, n);
}

static int put_event(Buf *b, PyObject *event) {
    int rc = -1, truth;
    unsigned long long when;
    PyObject *timestamp = NULL, *name = NULL, *attributes = NULL, *dropped = NULL;
    Py_ssize_t field = open_field(b, 0x5a);
    if (field < 0)
        return -1;
    if ((timestamp = PyObject_GetAttr(event, s_timestamp)) == NULL ||
        (truth = PyObject_IsTrue(timestamp)) < 0)
        goto done;
    if (truth) {
        if ((rc = unsigned_of(timestamp, &when, 64)) < 0)
            goto done;
        rc = -1;
        if (put_byte(b, 0x09) < 0 || put_fixed(b, when, 8, 0) < 0)
            goto done;
    }
    if ((name = PyObject_GetAttr(event, s_name)) == NULL || (truth = PyObject_IsTrue(name)) < 0)
        goto done;
    if (truth) {
        if (!PyUnicode_CheckExact(name)) {
            rc = NOT_MINE;
            goto done;
        }
        if (put_str_field(b, 0x12, name) < 0)
            goto done;
    }
    if ((attributes = PyObject_GetAttr(event, s_attributes)) == NULL ||
        put_attributes(b, 0x1a, attributes) < 0)
        goto done;
    if ((dropped = PyObject_GetAttr(event, s_dropped_attributes)) == NULL ||
        (rc = put_count(b, 0x20, dropped)) < 0)
        goto done;
    rc = close_field(b, field);
done:
    Py_XDECREF(timestamp);
    Py_XDECREF(name);
    Py_XDECREF(attributes);
    Py_XDECREF(dropped);
    return rc;
}

static int put_link(Buf *b, PyObject *link) {
    Py_ssize_t field = open_field(b, 0x6a);
    if (field < 0 || put_bytes(b, PyObject_CallOneArg(g_link_bytes, link)) < 0)
        return -1;
    return close_field(b, field);
}

/* Each item of the list or tuple *items* written by *write*; NOT_MINE for another kind
 * of sequence (the reference iterates it, once). */
static int put_each(Buf *b, PyObject *items, int (*write)(Buf *, PyObject *)) {
    if (!PyList_CheckExact(items) && !PyTuple_CheckExact(items))
        return NOT_MINE;
    PyObject *fast = PySequence_Fast(items, "events and links are sequences");
    if (fast == NULL)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(fast); i++)
        rc = write(b, PySequence_Fast_GET_ITEM(fast, i));
    Py_DECREF(fast);
    return rc;
}

/* A truthy str field; NOT_MINE for a value of another type. */
static int put_text_field(Buf *b, unsigned char tag, PyObject *text) {
    int truth = PyObject_IsTrue(text);
    if (truth <= 0)
        return truth;
    return PyUnicode_CheckExact(text) ? put_str_field(b, tag, text) : NOT_MINE;
}

/* A truthy time as *tag* and fixed64; NOT_MINE for a value of another type. */
static int put_time(Buf *b, unsigned char tag, PyObject *time) {
    int truth = PyObject_IsTrue(time);
    if (truth <= 0)
        return truth;
    unsigned long long ns;
    int rc = unsigned_of(time, &ns, 64);
    if (rc < 0)
        return rc;
    return put_byte(b, tag) < 0 ? -1 : put_fixed(b, ns, 8, 0);
}

static int put_status(Buf *b, PyObject *code, PyObject *message) {
    if (code == Py_None)
        return 0;
    Py_ssize_t field = open_field(b, 0x7a);
    int rc;
    if (field < 0 || (rc = put_text_field(b, 0x12, message)) < 0 ||
        (rc = put_count(b, 0x18, code)) < 0)
        return field < 0 ? -1 : rc;
    return close_field(b, field);
}

static int put_span(Buf *b, PyObject **f, PyObject *dropped, PyObject *links) {
    enum { TRACE, SPAN, STATE, PARENT, REMOTE, NAME, KIND, START, END, ATTRS, EVENTS, CODE, MSG };
    unsigned long long high, low, span, parent = 0;
    if (trace_id_of(f[TRACE], &high, &low) < 0 || span_id_of(f[SPAN], &span) < 0 ||
        (f[PARENT] != Py_None && span_id_of(f[PARENT], &parent) < 0))
        return NOT_MINE;
    if (!PyTuple_CheckExact(dropped) || PyTuple_GET_SIZE(dropped) != 3)
        return NOT_MINE;
    PyObject *kind = PyDict_GetItemWithError(g_kinds, f[KIND]);  /* borrowed */
    if (kind == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, f[KIND]);
        return -1;
    }
    int rc, remote;
    Py_ssize_t field = open_field(b, 0x12);
    if (field < 0 || put(b, "\x0a\x10", 2) < 0 || put_fixed(b, high, 8, 1) < 0 ||
        put_fixed(b, low, 8, 1) < 0 || put(b, "\x12\x08", 2) < 0 || put_fixed(b, span, 8, 1) < 0)
        return -1;
    if ((rc = put_text_field(b, 0x1a, f[STATE])) < 0)
        return rc;
    if (f[PARENT] != Py_None && (put(b, "\x22\x08", 2) < 0 || put_fixed(b, parent, 8, 1) < 0))
        return -1;
    if ((rc = put_text_field(b, 0x2a, f[NAME])) < 0 || (rc = put_bytes(b, Py_NewRef(kind))) < 0 ||
        (rc = put_time(b, 0x39, f[START])) < 0 || (rc = put_time(b, 0x41, f[END])) < 0 ||
        (rc = put_attributes(b, 0x4a, f[ATTRS])) < 0 ||
        (rc = put_count(b, 0x50, PyTuple_GET_ITEM(dropped, 0))) < 0 ||
        (rc = put_each(b, f[EVENTS], put_event)) < 0 ||
        (rc = put_count(b, 0x60, PyTuple_GET_ITEM(dropped, 1))) < 0 ||
        (rc = put_each(b, links, put_link)) < 0 ||
        (rc = put_count(b, 0x70, PyTuple_GET_ITEM(dropped, 2))) < 0 ||
        (rc = put_status(b, f[CODE], f[MSG])) < 0)
        return rc;
    if ((remote = PyObject_IsTrue(f[REMOTE])) < 0)
        return -1;
    /* Span.flags, field 16, fixed32: bit 8, the parent's "is remote" is known; bit 9, it is. */
    if (put(b, "\x85\x01", 2) < 0 || put_fixed(b, remote ? 0x300 : 0x100, 4, 0) < 0)
        return -1;
    return close_field(b, field);
}

static PyObject *span_fields_proto(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"trace_id",      "span_id", "trace_state", "parent_span_id",
                               "parent_remote", "name",    "kind",        "start_ns",
                               "end_ns",        "attributes", "events",   "status_code",
                               "status_message", "dropped", "links",      NULL};
    static PyObject *no_drops, *no_links;
    PyObject *f[13];
    f[12] = Py_None;
    PyObject *dropped = NULL, *links = NULL;
    if (g_reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_otlp_native.configure() was not called");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOOOO|O$OO", keywords, &f[0], &f[1],
                                     &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9],
                                     &f[10], &f[11], &f[12], &dropped, &links))
        return NULL;
    if (no_drops == NULL && (no_drops = Py_BuildValue("(iii)", 0, 0, 0)) == NULL)
        return NULL;
    if (no_links == NULL && (no_links = PyTuple_New(0)) == NULL)
        return NULL;
    Buf b;
    buf_init(&b);
    int rc = put_span(&b, f, dropped ? dropped : no_drops, links ? links : no_links);
    PyObject *result = rc == 0 ? PyBytes_FromStringAndSize(b.data, b.len) : NULL;
    buf_free(&b);
    if (rc == NOT_MINE)
        return PyObject_Call(g_reference, args, kwargs);
    return result;
}

static PyObject *configure(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"reference", "any_value", "key_value", "link_bytes",
                               "kinds",     "failed",    NULL};
    PyObject *reference, *any_value, *key_value, *link_bytes, *kinds, *failed;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOOOO!O", keywords, &reference,
                                     &any_value, &key_value, &link_bytes, &PyDict_Type, &kinds,
                                     &failed))
        return NULL;
    Py_XSETREF(g_reference, Py_NewRef(reference));
    Py_XSETREF(g_any_value, Py_NewRef(any_value));
    Py_XSETREF(g_key_value, Py_NewRef(key_value));
    Py_XSETREF(g_link_bytes, Py_NewRef(link_bytes));
    Py_XSETREF(g_kinds, Py_NewRef(kinds));
    Py_XSETREF(g_failed, Py_NewRef(failed));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "Hand the encoder the reference's helpers (tracing.otlp_protobuf does, once)."},
    {"span_fields_proto", (PyCFunction)(void (*)(void))span_fields_proto,
     METH_VARARGS | METH_KEYWORDS, "tracing.otlp_protobuf.span_fields_proto, compiled."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tracing._otlp_native",
    .m_doc = "tracing.otlp_protobuf's span encoder, compiled (tracing/_otlp_native.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__otlp_native(void) {
    if ((s_timestamp = PyUnicode_InternFromString("timestamp")) == NULL ||
        (s_name = PyUnicode_InternFromString("name")) == NULL ||
        (s_attributes = PyUnicode_InternFromString("attributes")) == NULL ||
        (s_dropped_attributes = PyUnicode_InternFromString("dropped_attributes")) == NULL ||
        (s_items = PyUnicode_InternFromString("items")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
