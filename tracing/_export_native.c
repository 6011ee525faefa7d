/* tracing.export's span encoder, compiled: the extension tracing._export_native.
 * Follows tracing/export.py's span_fields_text (with _attributes_text, the common types
 * of _value_text, and _event_text), which is its reference;
 * tests/unit/tracing/test_export_encoding.py runs both against the SDK's encoder.
 *
 * It runs on the exporter's OS thread, once per span of every sampled request: with
 * full sampling, the span file's encoding was the largest share of a worker's tracing
 * CPU. The text is written into one growing byte buffer (everything is ASCII: strings
 * are escaped as json.dumps's ensure_ascii does), not joined from Python strings.
 *
 * The common shapes are written here: ids that fit, str (ASCII), int (int64), float,
 * bool, and non-empty tuples and lists of them. Everything else is handed to the
 * reference's own helpers, passed in by configure(): a value of another type (or a
 * non-ASCII string) to _value_text, a non-ASCII name or key to _string, a link to
 * _link_text, an odd id to the whole reference. An attribute whose value fails to encode
 * is left out and reported through _encode_failed, as the reference does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_encode.h"

/* The reference's helpers (configure). */
static PyObject *g_reference;   /* span_fields_text itself: odd ids */
static PyObject *g_value_text;  /* _value_text: any value not written here */
static PyObject *g_string;      /* _string: a non-ASCII str as JSON */
static PyObject *g_key_prefix;  /* _key_prefix: a key that is not an ASCII str */
static PyObject *g_link_text;   /* _link_text */
static PyObject *g_kinds;       /* _KINDS: SpanKind -> its OTLP number's text */
static PyObject *g_failed;      /* _encode_failed(key, error) */
static PyObject *s_timestamp, *s_name, *s_attributes, *s_dropped_attributes, *s_items;

/* A str the reference's helpers returned (ASCII: they escape), as it is. Steals it. */
static int put_text(Buf *b, PyObject *text) {
    if (text == NULL)
        return -1;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "an encoder helper returned a non-str");
        Py_DECREF(text);
        return -1;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    int rc = s == NULL ? -1 : put(b, s, n);
    Py_DECREF(text);
    return rc;
}

static int put_call1(Buf *b, PyObject *helper, PyObject *arg) {
    return put_text(b, PyObject_CallOneArg(helper, arg));
}

/* The decimal digits of *value*, written backwards ending at *end*: where they start. */
static char *digits_of(unsigned long long value, char *end) {
    do {
        *--end = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    return end;
}

static int put_i64(Buf *b, long long value) {
    char digits[24], *end = digits + sizeof(digits);
    unsigned long long magnitude = value < 0 ? 0ULL - (unsigned long long)value
                                             : (unsigned long long)value;
    char *start = digits_of(magnitude, end);
    if (value < 0)
        *--start = '-';
    return put(b, start, end - start);
}

static const char hexdigits[] = "0123456789abcdef";

/* *value* as 16 lowercase hex digits (an id's half: every id here is written so). */
static int put_hex16(Buf *b, unsigned long long value) {
    if (buf_reserve(b, 16) < 0)
        return -1;
    char *out = b->data + b->len;
    for (int i = 15; i >= 0; i--, value >>= 4)
        out[i] = hexdigits[value & 0xf];
    b->len += 16;
    return 0;
}

/* Python's str(number) of an int (or int(number) of anything else), as the reference's
 * f-strings write it. */
static int put_int_text(Buf *b, PyObject *number) {
    if (PyLong_CheckExact(number)) {
        int overflow;
        long long value = PyLong_AsLongLongAndOverflow(number, &overflow);
        if (!overflow && !(value == -1 && PyErr_Occurred()))
            return put_i64(b, value);
        PyErr_Clear();
    }
    PyObject *as_int = PyNumber_Long(number);
    if (as_int == NULL)
        return -1;
    PyObject *text = PyObject_Str(as_int);
    Py_DECREF(as_int);
    return put_text(b, text);
}

/* A JSON string literal of *s*, escaped to ASCII as json.encoder.encode_basestring_ascii
 * (its C): a non-ASCII str goes through it. */
static int put_string(Buf *b, PyObject *s) {
    if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_ASCII(s))
        return put_call1(b, g_string, s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const unsigned char *in = PyUnicode_1BYTE_DATA(s);
    /* At most 6 bytes out per byte in (\u00XX), and the quotes. */
    if (buf_reserve(b, 6 * n + 2) < 0)
        return -1;
    char *out = b->data + b->len;
    *out++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = in[i];
        if (c >= ' ' && c <= '~' && c != '\\' && c != '"') {
            *out++ = (char)c;
            continue;
        }
        *out++ = '\\';
        switch (c) {
        case '\\': *out++ = '\\'; break;
        case '"': *out++ = '"'; break;
        case '\b': *out++ = 'b'; break;
        case '\f': *out++ = 'f'; break;
        case '\n': *out++ = 'n'; break;
        case '\r': *out++ = 'r'; break;
        case '\t': *out++ = 't'; break;
        default:
            *out++ = 'u';
            *out++ = '0';
            *out++ = '0';
            *out++ = hexdigits[(c >> 4) & 0xf];
            *out++ = hexdigits[c & 0xf];
        }
    }
    *out++ = '"';
    b->len = out - b->data;
    return 0;
}

/* The times measured here are whole nanoseconds in seconds: a value that is n / 1e9 for
 * a whole n, under a million seconds. Its shortest round-tripping digits, what repr
 * writes, are then n's, trailing zeros dropped: parsing them gives the double nearest
 * n / 10**9, which the division made (IEEE division rounds correctly); and any other
 * decimal with no more digits differs from it by 1e-9 or more, more than the spacing
 * of doubles under a million (2**-33), so rounds elsewhere. Written as repr lays it out
 * ('r' with Py_DTSF_ADD_DOT_0): an exponent below 1e-4, else fixed with a point.
 * Returns 0 when *value* is not such a value (and nothing was written). */
static int put_nanos_double(Buf *b, double value, int *written) {
    *written = 0;
    double magnitude = fabs(value);
    if (!(magnitude < 1e6) || magnitude == 0.0)
        return 0;
    double scaled = magnitude * 1e9;
    unsigned long long n = (unsigned long long)llround(scaled);
    if (n == 0 || (double)n / 1e9 != magnitude)
        return 0;
    int zeros = 0;
    while (n % 10 == 0) {
        n /= 10;
        zeros++;
    }
    char digits[24], *end = digits + sizeof(digits);
    char *start = digits_of(n, end);
    int count = (int)(end - start);
    /* value = 0.<digits> x 10**point */
    int point = count + zeros - 9;
    char text[48], *out = text;
    if (value < 0)
        *out++ = '-';
    if (point <= -4) {
        int exponent = point - 1;
        *out++ = start[0];
        if (count > 1) {
            *out++ = '.';
            memcpy(out, start + 1, count - 1);
            out += count - 1;
        }
        *out++ = 'e';
        *out++ = '-';
        exponent = -exponent;
        if (exponent < 10)
            *out++ = '0';
        char exp_digits[8], *exp_end = exp_digits + sizeof(exp_digits);
        char *exp_start = digits_of((unsigned long long)exponent, exp_end);
        memcpy(out, exp_start, exp_end - exp_start);
        out += exp_end - exp_start;
    } else if (point <= 0) {
        *out++ = '0';
        *out++ = '.';
        memset(out, '0', -point);
        out += -point;
        memcpy(out, start, count);
        out += count;
    } else if (point < count) {
        memcpy(out, start, point);
        out += point;
        *out++ = '.';
        memcpy(out, start + point, count - point);
        out += count - point;
    } else {
        memcpy(out, start, count);
        out += count;
        memset(out, '0', point - count);
        out += point - count;
        *out++ = '.';
        *out++ = '0';
    }
    *written = 1;
    return put(b, text, out - text);
}

/* float.__repr__, or OTLP/JSON's text for what JSON cannot hold (_double). */
static int put_double(Buf *b, double value) {
    if (isnan(value))
        return PUTS(b, "\"NaN\"");
    if (isinf(value))
        return value > 0 ? PUTS(b, "\"Infinity\"") : PUTS(b, "\"-Infinity\"");
    int written;
    int rc = put_nanos_double(b, value, &written);
    if (written || rc < 0)
        return rc;
    char *text = PyOS_double_to_string(value, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (text == NULL)
        return -1;
    rc = put(b, text, (Py_ssize_t)strlen(text));
    PyMem_Free(text);
    return rc;
}

/* == values and attributes (_value_text, _attributes_text) ============================ */

static int put_value(Buf *b, PyObject *value);

static int put_array(Buf *b, PyObject *value) {
    PyObject **items = PySequence_Fast_ITEMS(value);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
    if (Py_EnterRecursiveCall(" while encoding an attribute's value") < 0)
        return -1;
    int rc = PUTS(b, "{\"arrayValue\":{\"values\":[");
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        if ((i && PUTS(b, ",") < 0) || put_value(b, items[i]) < 0)
            rc = -1;
    }
    Py_LeaveRecursiveCall();
    return rc < 0 ? -1 : PUTS(b, "]}}");
}

/* An AnyValue: the types the SDK keeps, by exact type, as the reference's first checks;
 * anything else is the reference's. */
static int put_value(Buf *b, PyObject *value) {
    PyTypeObject *type = Py_TYPE(value);
    if (type == &PyUnicode_Type && PyUnicode_IS_ASCII(value)) {
        if (PUTS(b, "{\"stringValue\":") < 0 || put_string(b, value) < 0)
            return -1;
        return PUTS(b, "}");
    }
    if (type == &PyFloat_Type) {
        if (PUTS(b, "{\"doubleValue\":") < 0 || put_double(b, PyFloat_AS_DOUBLE(value)) < 0)
            return -1;
        return PUTS(b, "}");
    }
    if (type == &PyLong_Type) {
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (!overflow) {
            if (number == -1 && PyErr_Occurred())
                return -1;
            if (PUTS(b, "{\"intValue\":\"") < 0 || put_i64(b, number) < 0)
                return -1;
            return PUTS(b, "\"}");
        }
    } else if (type == &PyBool_Type) {
        return value == Py_True ? PUTS(b, "{\"boolValue\":true}")
                                : PUTS(b, "{\"boolValue\":false}");
    } else if ((type == &PyTuple_Type || type == &PyList_Type) && Py_SIZE(value) > 0) {
        if (type == &PyTuple_Type)
            return put_array(b, value);
        /* A list could change under a callback: walk a copy. */
        PyObject *copy = PyList_AsTuple(value);
        if (copy == NULL)
            return -1;
        int rc = put_array(b, copy);
        Py_DECREF(copy);
        return rc;
    }
    return put_call1(b, g_value_text, value);
}

/* '{"key":"k","value":' (or '{"value":' for an empty key), as _key_prefix. */
static int put_key_prefix(Buf *b, PyObject *key) {
    if (!PyUnicode_CheckExact(key) || !PyUnicode_IS_ASCII(key))
        return put_call1(b, g_key_prefix, key);
    if (PyUnicode_GET_LENGTH(key) == 0)
        return PUTS(b, "{\"value\":");
    if (PUTS(b, "{\"key\":") < 0 || put_string(b, key) < 0)
        return -1;
    return PUTS(b, ",\"value\":");
}

/* *prefix* and a JSON array of KeyValue, or nothing when no attribute is written. */
static int put_attributes(Buf *b, PyObject *attributes, const char *prefix) {
    if (attributes == Py_None)
        return 0;
    int truth = PyObject_IsTrue(attributes);
    if (truth <= 0)
        return truth;
    Py_ssize_t prefix_len = (Py_ssize_t)strlen(prefix);
    int written = 0;
    PyObject *items = NULL, *iterator = NULL, *pair = NULL;
    Py_ssize_t position = 0;
    int exact_dict = PyDict_CheckExact(attributes);
    if (!exact_dict) {
        items = PyObject_CallMethodNoArgs(attributes, s_items);
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
        int rc = written ? PUTS(b, ",") : put(b, prefix, prefix_len) < 0 ? -1 : PUTS(b, "[");
        /* The reference's try covers the key and the value (an Exception, as its except). */
        if (rc == 0 && (put_key_prefix(b, key) < 0 || put_value(b, value) < 0 ||
                        PUTS(b, "}") < 0)) {
            rc = PyErr_ExceptionMatches(PyExc_Exception)
                     ? attribute_failed(b, mark, key, g_failed)
                     : -1;
            if (rc == 0)
                rc = 1;  /* left out */
        }
        Py_DECREF(key);
        Py_DECREF(value);
        if (rc < 0)
            goto error;
        if (rc == 0)
            written = 1;
    }
    Py_XDECREF(pair);
    Py_XDECREF(iterator);
    return written ? PUTS(b, "]") : 0;
error:
    Py_XDECREF(pair);
    Py_XDECREF(iterator);
    return -1;
}

/* == events and the span (_event_text, span_fields_text) ============================== */

static int put_event(Buf *b, PyObject *event) {
    int rc = -1, comma = 0;
    PyObject *timestamp = NULL, *name = NULL, *attributes = NULL, *dropped = NULL;
    if (PUTS(b, "{") < 0)
        return -1;
    timestamp = PyObject_GetAttr(event, s_timestamp);
    if (timestamp == NULL)
        goto done;
    int truth = PyObject_IsTrue(timestamp);
    if (truth < 0)
        goto done;
    if (truth) {
        if (PUTS(b, "\"timeUnixNano\":\"") < 0 || put_int_text(b, timestamp) < 0 ||
            PUTS(b, "\"") < 0)
            goto done;
        comma = 1;
    }
    name = PyObject_GetAttr(event, s_name);
    if (name == NULL || (truth = PyObject_IsTrue(name)) < 0)
        goto done;
    if (truth) {
        if ((comma && PUTS(b, ",") < 0) || PUTS(b, "\"name\":") < 0 || put_string(b, name) < 0)
            goto done;
        comma = 1;
    }
    attributes = PyObject_GetAttr(event, s_attributes);
    if (attributes == NULL)
        goto done;
    Py_ssize_t before = b->len;
    if (put_attributes(b, attributes, comma ? ",\"attributes\":" : "\"attributes\":") < 0)
        goto done;
    comma = comma || b->len > before;
    dropped = PyObject_GetAttr(event, s_dropped_attributes);
    if (dropped == NULL || (truth = PyObject_IsTrue(dropped)) < 0)
        goto done;
    if (truth) {
        if ((comma && PUTS(b, ",") < 0) || PUTS(b, "\"droppedAttributesCount\":") < 0 ||
            put_text(b, PyObject_Str(dropped)) < 0)
            goto done;
    }
    rc = PUTS(b, "}");
done:
    Py_XDECREF(timestamp);
    Py_XDECREF(name);
    Py_XDECREF(attributes);
    Py_XDECREF(dropped);
    return rc;
}

/* Each item of *sequence* written by *write*, comma-separated, after *prefix*; nothing
 * for an empty (or false) one. */
static int put_list(Buf *b, PyObject *sequence, const char *prefix,
                    int (*write)(Buf *, PyObject *)) {
    int truth = PyObject_IsTrue(sequence);
    if (truth <= 0)
        return truth;
    PyObject *fast = PySequence_Fast(sequence, "events and links are sequences");
    if (fast == NULL)
        return -1;
    int rc = put(b, prefix, (Py_ssize_t)strlen(prefix));
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        if (i)
            rc = PUTS(b, ",");
        if (rc == 0)
            rc = write(b, PySequence_Fast_GET_ITEM(fast, i));
    }
    Py_DECREF(fast);
    return rc < 0 ? -1 : PUTS(b, "]");
}

static int put_link(Buf *b, PyObject *link) {
    return put_call1(b, g_link_text, link);
}

/* A non-zero count of what was dropped, as ',"<field>":N'. */
static int put_count(Buf *b, const char *field, PyObject *count) {
    int truth = PyObject_IsTrue(count);
    if (truth <= 0)
        return truth;
    if (put(b, field, (Py_ssize_t)strlen(field)) < 0)
        return -1;
    return put_text(b, PyObject_Str(count));
}

static PyObject *span_fields_text(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"trace_id",       "span_id", "trace_state", "parent_span_id",
                               "parent_remote",  "name",    "kind",        "start_ns",
                               "end_ns",         "attributes", "events",   "status_code",
                               "status_message", "dropped", "links",       NULL};
    PyObject *trace_id, *span_id, *trace_state, *parent_span_id, *parent_remote, *name, *kind;
    PyObject *start_ns, *end_ns, *attributes, *events, *status_code;
    PyObject *status_message = Py_None, *dropped = NULL, *links = NULL;
    if (g_reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_export_native.configure() was not called");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOOOO|O$OO", keywords, &trace_id,
                                     &span_id, &trace_state, &parent_span_id, &parent_remote,
                                     &name, &kind, &start_ns, &end_ns, &attributes, &events,
                                     &status_code, &status_message, &dropped, &links))
        return NULL;
    unsigned long long trace_high, trace_low, span, parent = 0;
    PyObject *dropped_fast = NULL;
    if (dropped != NULL) {
        dropped_fast = PySequence_Fast(dropped, "dropped: (attributes, events, links)");
        if (dropped_fast == NULL)
            return NULL;
        if (PySequence_Fast_GET_SIZE(dropped_fast) != 3) {
            Py_DECREF(dropped_fast);
            PyErr_SetString(PyExc_ValueError, "dropped: (attributes, events, links)");
            return NULL;
        }
    }
    if (trace_id_of(trace_id, &trace_high, &trace_low) < 0 || span_id_of(span_id, &span) < 0 ||
        (parent_span_id != Py_None && span_id_of(parent_span_id, &parent) < 0)) {
        Py_XDECREF(dropped_fast);
        return PyObject_Call(g_reference, args, kwargs);  /* ids the formats do not fit */
    }
    Buf b;
    buf_init(&b);
    int truth;
    PyObject *result = NULL;
    if (PUTS(&b, "{\"traceId\":\"") < 0 || put_hex16(&b, trace_high) < 0 ||
        put_hex16(&b, trace_low) < 0 || PUTS(&b, "\",\"spanId\":\"") < 0 ||
        put_hex16(&b, span) < 0 || PUTS(&b, "\"") < 0)
        goto done;
    if ((truth = PyObject_IsTrue(trace_state)) < 0)
        goto done;
    if (truth && (PUTS(&b, ",\"traceState\":") < 0 || put_string(&b, trace_state) < 0))
        goto done;
    if (parent_span_id != Py_None &&
        (PUTS(&b, ",\"parentSpanId\":\"") < 0 || put_hex16(&b, parent) < 0 ||
         PUTS(&b, "\"") < 0))
        goto done;
    if ((truth = PyObject_IsTrue(name)) < 0)
        goto done;
    if (truth && (PUTS(&b, ",\"name\":") < 0 || put_string(&b, name) < 0))
        goto done;
    PyObject *kind_text = PyDict_GetItemWithError(g_kinds, kind);  /* borrowed */
    if (kind_text == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, kind);
        goto done;
    }
    Py_INCREF(kind_text);
    if (PUTS(&b, ",\"kind\":") < 0 || put_text(&b, kind_text) < 0)
        goto done;
    if ((truth = PyObject_IsTrue(start_ns)) < 0)
        goto done;
    if (truth && (PUTS(&b, ",\"startTimeUnixNano\":\"") < 0 || put_int_text(&b, start_ns) < 0 ||
                  PUTS(&b, "\"") < 0))
        goto done;
    if ((truth = PyObject_IsTrue(end_ns)) < 0)
        goto done;
    if (truth && (PUTS(&b, ",\"endTimeUnixNano\":\"") < 0 || put_int_text(&b, end_ns) < 0 ||
                  PUTS(&b, "\"") < 0))
        goto done;
    if (put_attributes(&b, attributes, ",\"attributes\":") < 0)
        goto done;
    if (dropped_fast != NULL &&
        put_count(&b, ",\"droppedAttributesCount\":", PySequence_Fast_GET_ITEM(dropped_fast, 0)) < 0)
        goto done;
    if (put_list(&b, events, ",\"events\":[", put_event) < 0)
        goto done;
    if (dropped_fast != NULL &&
        put_count(&b, ",\"droppedEventsCount\":", PySequence_Fast_GET_ITEM(dropped_fast, 1)) < 0)
        goto done;
    if (links != NULL && put_list(&b, links, ",\"links\":[", put_link) < 0)
        goto done;
    if (dropped_fast != NULL &&
        put_count(&b, ",\"droppedLinksCount\":", PySequence_Fast_GET_ITEM(dropped_fast, 2)) < 0)
        goto done;
    if (status_code != Py_None) {
        int comma = 0;
        if (PUTS(&b, ",\"status\":{") < 0 || (truth = PyObject_IsTrue(status_message)) < 0)
            goto done;
        if (truth) {
            if (PUTS(&b, "\"message\":") < 0 || put_string(&b, status_message) < 0)
                goto done;
            comma = 1;
        }
        if ((truth = PyObject_IsTrue(status_code)) < 0)
            goto done;
        if (truth && ((comma && PUTS(&b, ",") < 0) || PUTS(&b, "\"code\":") < 0 ||
                      put_text(&b, PyObject_Str(status_code)) < 0))
            goto done;
        if (PUTS(&b, "}") < 0)
            goto done;
    }
    if ((truth = PyObject_IsTrue(parent_remote)) < 0)
        goto done;
    /* OTLP's span flags: bit 8, the parent's "is remote" is known; bit 9, it is. */
    if ((truth ? PUTS(&b, ",\"flags\":768}") : PUTS(&b, ",\"flags\":256}")) < 0)
        goto done;
    result = PyUnicode_DecodeUTF8(b.data, b.len, "strict");
done:
    Py_XDECREF(dropped_fast);
    buf_free(&b);
    return result;
}

static PyObject *configure(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"reference", "value_text", "string", "key_prefix",
                               "link_text", "kinds",      "failed", NULL};
    PyObject *reference, *value_text, *string, *key_prefix, *link_text, *kinds, *failed;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOOOOO!O", keywords, &reference,
                                     &value_text, &string, &key_prefix, &link_text,
                                     &PyDict_Type, &kinds, &failed))
        return NULL;
    Py_XSETREF(g_key_prefix, Py_NewRef(key_prefix));
    Py_XSETREF(g_reference, Py_NewRef(reference));
    Py_XSETREF(g_value_text, Py_NewRef(value_text));
    Py_XSETREF(g_string, Py_NewRef(string));
    Py_XSETREF(g_link_text, Py_NewRef(link_text));
    Py_XSETREF(g_kinds, Py_NewRef(kinds));
    Py_XSETREF(g_failed, Py_NewRef(failed));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "Hand the encoder the reference's helpers (tracing.export does, once)."},
    {"span_fields_text", (PyCFunction)(void (*)(void))span_fields_text,
     METH_VARARGS | METH_KEYWORDS, "tracing.export.span_fields_text, compiled."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tracing._export_native",
    .m_doc = "tracing.export's span encoder, compiled (tracing/_export_native.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__export_native(void) {
    if ((s_timestamp = PyUnicode_InternFromString("timestamp")) == NULL ||
        (s_name = PyUnicode_InternFromString("name")) == NULL ||
        (s_attributes = PyUnicode_InternFromString("attributes")) == NULL ||
        (s_dropped_attributes = PyUnicode_InternFromString("dropped_attributes")) == NULL ||
        (s_items = PyUnicode_InternFromString("items")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
