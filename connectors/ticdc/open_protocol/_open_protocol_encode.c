/* _open_protocol_encode: OpenCDC records -> TiCDC open-protocol messages (key, value), in C.
 *
 * The compiled twin of `OpenProtocolEncoder.encode(events.from_records(records, store))`. Row
 * records in the usual shape (a table-schema reference, a decimal commit ts, full row dicts) are
 * written straight from the record to the framed key and value JSON, with a per-table plan built
 * once in Python (open_protocol._TableEncoding.kernel_plan). Any other record (DDL, resolved, key
 * extras, partial rows, unknown operations, ...) goes to a Python fallback callable that returns
 * its message parts, framed here in order. A value outside a column's fast path goes to the
 * column's Python converter, which returns the wire value or raises the typed error.
 *
 * What this module cannot write the way the Python path would (orjson's error cases, a row over
 * max-message-bytes) raises HandBack; so does any exception from the Python callables. The caller
 * then runs the Python path, which produces the result or the error with its context.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdlib.h>

#include "tidbtext.h"

/* column kinds, exported as K_* for open_protocol._kernel_kind */
enum {
    K_CONV = 0,     /* always the Python converter (SET, ENUM without elements, odd columns) */
    K_INT = 1,      /* int within [lo, hi] (TINYINT..BIGINT, YEAR, BIT) */
    K_DOUBLE = 2,   /* finite float */
    K_FLOAT32 = 3,  /* float that is exactly a float32, written with its shortest digits */
    K_DECIMAL = 4,  /* Decimal with the column's scale: param = scale (-1 None) */
    K_DATE = 5,
    K_DATETIME = 6, /* param = fsp (-1 None) */
    K_TIME = 7,     /* param = fsp (-1 None) */
    K_STR = 8,      /* str as is (text types, JSON) */
    K_ENUM = 9,     /* element name -> index through `map` */
    K_BLOB = 10,    /* base64; param = 1: bytes only (binary), 0: bytes or str (text) */
    K_BINSTR = 11,  /* VARBINARY/BINARY: printable ASCII as is, else Go quoting in Python */
    K_LAST = 11
};

/* TiCDC's Kafka sizing: per-message record overhead and per-row slack (open_protocol/schema.py) */
#define RECORD_OVERHEAD 36
#define ROW_SLACK 16
/* TIME's range, -838:59:59 .. 838:59:59, in microseconds */
#define TIME_MAX_US (((838LL * 60 + 59) * 60 + 59) * 1000000LL)

static PyObject *HandBack; /* module constant: the exception type set at init */

/* Set HandBack (the caller runs the Python path) and return -1. */
static int hand_back(const char *why)
{
    PyErr_SetString(HandBack, why);
    return -1;
}

/* ------------------------------------------------------------------ values orjson writes */

/* orjson's text of a finite double: repr's shortest digits, in exponent form only when the
 * decimal exponent is < -5 or >= 16 (repr switches at < -4), exponent unpadded ("1e-7", repr
 * "1e-07"). Only this kernel writes JSON numbers for floats (the other codecs write TiDB texts). */
static int put_json_float(tt_buf *b, double d)
{
    char *r = tt_float_repr(d);
    if (r == NULL)
        return -1;
    const char *e = strchr(r, 'e');
    int res;
    if (e == NULL) {
        res = tt_buf_put(b, r, (Py_ssize_t)strlen(r));
    } else {
        int exp = atoi(e + 1);
        const char *m = r;
        res = 0;
        if (*m == '-') {
            res = tt_buf_putc(b, '-');
            m++;
        }
        if (exp == -5) { /* orjson's fixed form reaches one digit further: 0.0000ddd */
            res = res < 0 ? -1 : tt_buf_put(b, "0.0000", 6);
            for (const char *p = m; p < e && res == 0; p++)
                if (*p != '.')
                    res = tt_buf_putc(b, *p);
        } else {
            if (res == 0)
                res = tt_buf_put(b, m, e - m);
            if (res == 0)
                res = tt_buf_put(b, exp < 0 ? "e-" : "e+", 2);
            if (res == 0)
                res = tt_buf_put_u64(b, (unsigned long long)(exp < 0 ? -exp : exp));
        }
    }
    PyMem_Free(r);
    return res;
}

/* open_protocol.float32_short for a double that is exactly a float32: the value with the fewest
 * significant digits (1..9) that still rounds to the same float32 (FLOAT 0.1 travels as 0.1).
 * Formatting and parsing go through the same routines Python's "%.*g" and float() use. */
static int float32_short(double d, double *out)
{
    for (int digits = 1; digits < 10; digits++) {
        char *s = PyOS_double_to_string(d, 'g', digits, 0, NULL);
        if (s == NULL)
            return -1;
        double shorter = PyOS_string_to_double(s, NULL, NULL);
        PyMem_Free(s);
        if (shorter == -1.0 && PyErr_Occurred())
            return -1;
        float f = (float)shorter;
        if (isinf(f) && !isinf(shorter)) /* rounded past the float32 range (struct.pack raises) */
            continue;
        if ((double)f == d) {
            *out = shorter;
            return 0;
        }
    }
    *out = d;
    return 0;
}

static const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* `"` + standard base64 with padding + `"` (binascii.b2a_base64(newline=False)). */
static int put_json_base64(tt_buf *b, const unsigned char *s, Py_ssize_t n)
{
    if (n > (PY_SSIZE_T_MAX - 8) / 4 * 3) {
        PyErr_NoMemory();
        return -1;
    }
    if (tt_buf_reserve(b, (n + 2) / 3 * 4 + 2) < 0)
        return -1;
    char *o = b->data + b->len;
    *o++ = '"';
    Py_ssize_t i = 0;
    for (; i + 2 < n; i += 3) {
        unsigned int w = (unsigned int)s[i] << 16 | (unsigned int)s[i + 1] << 8 | s[i + 2];
        *o++ = b64_alphabet[w >> 18];
        *o++ = b64_alphabet[(w >> 12) & 63];
        *o++ = b64_alphabet[(w >> 6) & 63];
        *o++ = b64_alphabet[w & 63];
    }
    if (i < n) {
        unsigned int w = (unsigned int)s[i] << 16 | (i + 1 < n ? (unsigned int)s[i + 1] << 8 : 0);
        *o++ = b64_alphabet[w >> 18];
        *o++ = b64_alphabet[(w >> 12) & 63];
        *o++ = i + 1 < n ? b64_alphabet[(w >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o++ = '"';
    b->len = o - b->data;
    return 0;
}

/* bytes go_quote leaves as they are: printable ASCII except " and \ (open_protocol._GO_PLAIN) */
static int is_go_plain(const unsigned char *s, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7E || s[i] == '"' || s[i] == '\\')
            return 0;
    return 1;
}

/* A converter's result as orjson writes it; HandBack for what orjson would refuse (a str with a
 * lone surrogate, an int beyond 64 bits) or write otherwise (nan). */
static int put_wire_value(tt_buf *b, PyObject *w)
{
    int r;
    if (w == Py_None)
        return tt_buf_put(b, "null", 4);
    if (PyUnicode_CheckExact(w))
        r = tt_json_str(b, w, TT_JSON_ORJSON);
    else if (PyBool_Check(w))
        return w == Py_True ? tt_buf_put(b, "true", 4) : tt_buf_put(b, "false", 5);
    else if (PyLong_CheckExact(w))
        r = tt_text_int(b, w);
    else if (PyFloat_CheckExact(w) && isfinite(PyFloat_AS_DOUBLE(w)))
        return put_json_float(b, PyFloat_AS_DOUBLE(w));
    else
        r = TT_PASS;
    if (r == TT_PASS)
        return hand_back("converter result orjson would not write as is");
    return r == TT_OK ? 0 : -1;
}

/* ------------------------------------------------------------------ table plans */

typedef struct {
    PyObject *name;   /* str: the row dict's key */
    PyObject *prefix; /* bytes: `"name":{"t":8,"h":true,"f":11,"v":` */
    int kind;
    int param;
    long long lo;       /* K_INT bounds, inclusive */
    unsigned long long hi;
    PyObject *map;  /* K_ENUM: {element: index}; else None */
    PyObject *conv; /* the Python converter: returns the wire value or raises the typed error */
} Column;

typedef struct {
    PyObject_HEAD
    PyObject *key_suffix; /* bytes: the key JSON after `{"ts":N` */
    int has_handle;       /* a handle key exists (delete-only-output-handle-key-columns) */
    Py_ssize_t ncols;
    Column *cols;
} PlanObject;

static void Plan_dealloc(PlanObject *self)
{
    for (Py_ssize_t i = 0; i < self->ncols; i++) {
        Column *c = &self->cols[i];
        Py_XDECREF(c->name);
        Py_XDECREF(c->prefix);
        Py_XDECREF(c->map);
        Py_XDECREF(c->conv);
    }
    PyMem_Free(self->cols);
    Py_XDECREF(self->key_suffix);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* One column spec into `c`: mirrors the Python NamedTuple open_protocol/encode.py PlanColumn, read by
 * position (name, prefix, kind, param, lo, hi, map, conv). */
static int plan_column(Column *c, PyObject *spec, Py_ssize_t i)
{
    PyObject *lo, *hi;
    if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "UO!iiOOOO;plan column: (name, prefix, kind, param, lo, hi, map, conv)",
                                                  &c->name, &PyBytes_Type, &c->prefix, &c->kind, &c->param, &lo,
                                                  &hi, &c->map, &c->conv)) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "plan column %zd is not a tuple", i);
        c->name = c->prefix = c->map = c->conv = NULL;
        return -1;
    }
    Py_INCREF(c->name);
    Py_INCREF(c->prefix);
    Py_INCREF(c->map);
    Py_INCREF(c->conv);
    if (c->kind < 0 || c->kind > K_LAST || !PyCallable_Check(c->conv)
        || (c->kind == K_ENUM && !PyDict_CheckExact(c->map))) {
        PyErr_Format(PyExc_ValueError, "plan column %zd: bad kind %d, map or converter", i, c->kind);
        return -1;
    }
    c->lo = 0;
    c->hi = 0;
    if (c->kind == K_INT) {
        c->lo = PyLong_AsLongLong(lo);
        if (c->lo == -1 && PyErr_Occurred())
            return -1;
        c->hi = PyLong_AsUnsignedLongLong(hi);
        if (c->hi == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

static PyObject *Plan_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *key_suffix, *columns;
    int has_handle;
    if (!PyArg_ParseTuple(args, "O!pO!:TablePlan", &PyBytes_Type, &key_suffix, &has_handle, &PyTuple_Type,
                          &columns))
        return NULL;
    PlanObject *self = (PlanObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    Py_INCREF(key_suffix);
    self->key_suffix = key_suffix;
    self->has_handle = has_handle;
    Py_ssize_t n = PyTuple_GET_SIZE(columns);
    self->cols = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Column));
    if (self->cols == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        self->ncols = i + 1; /* dealloc releases what the failed column took */
        if (plan_column(&self->cols[i], PyTuple_GET_ITEM(columns, i), i) < 0) {
            Py_DECREF(self);
            return NULL;
        }
    }
    self->ncols = n;
    return (PyObject *)self;
}

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.connectors.ticdc.open_protocol._open_protocol_encode.TablePlan",
    .tp_doc = "TablePlan(key_suffix, has_handle, columns): one table's encoding, built once in Python.",
    .tp_basicsize = sizeof(PlanObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Plan_new,
    .tp_dealloc = (destructor)Plan_dealloc,
};

/* ------------------------------------------------------------------ one value */

/* The value through the column's Python converter (which raises the typed error). */
static int put_converted(tt_buf *b, const Column *c, PyObject *v)
{
    Py_INCREF(v); /* the converter is Python code: keep the value alive whatever it does */
    PyObject *w = PyObject_CallOneArg(c->conv, v);
    Py_DECREF(v);
    if (w == NULL)
        return -1;
    int r = put_wire_value(b, w);
    Py_DECREF(w);
    return r;
}

/* `"` + tt_text_* + `"`: a quoted text, or TT_PASS with nothing written. */
static int put_quoted_text(tt_buf *b, int tt_kind, PyObject *v, int param)
{
    Py_ssize_t start = b->len;
    if (tt_buf_putc(b, '"') < 0)
        return TT_ERR;
    int r = tt_text_of(b, tt_kind, v, param);
    if (r != TT_OK) {
        b->len = start;
        return r;
    }
    return tt_buf_putc(b, '"') < 0 ? TT_ERR : TT_OK;
}

static int fast_int(tt_buf *b, const Column *c, PyObject *v)
{
    if (!PyLong_CheckExact(v))
        return TT_PASS;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return TT_ERR;
    if (!overflow) {
        if (x < c->lo || (x > 0 && (unsigned long long)x > c->hi))
            return TT_PASS;
        return tt_buf_put_i64(b, x) < 0 ? TT_ERR : TT_OK;
    }
    if (overflow < 0 || c->hi <= (unsigned long long)LLONG_MAX)
        return TT_PASS;
    unsigned long long u = PyLong_AsUnsignedLongLong(v); /* BIGINT UNSIGNED, BIT(64) */
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return TT_ERR;
        PyErr_Clear();
        return TT_PASS;
    }
    return u > c->hi ? TT_PASS : tt_buf_put_u64(b, u) < 0 ? TT_ERR : TT_OK;
}

static int fast_float32(tt_buf *b, PyObject *v)
{
    if (!PyFloat_CheckExact(v))
        return TT_PASS;
    double d = PyFloat_AS_DOUBLE(v), shorter;
    /* not finite or not exactly a float32: the converter raises */
    if (!isfinite(d) || (double)(float)d != d)
        return TT_PASS;
    if (float32_short(d, &shorter) < 0)
        return TT_ERR;
    return put_json_float(b, shorter) < 0 ? TT_ERR : TT_OK;
}

/* TIME within TiDB's range; outside it the converter raises */
static int fast_time(tt_buf *b, PyObject *v, int fsp)
{
    if (!PyDelta_CheckExact(v))
        return TT_PASS;
    int days = PyDateTime_DELTA_GET_DAYS(v);
    if (days < -35 || days > 35)
        return TT_PASS;
    long long us = ((long long)days * 86400 + PyDateTime_DELTA_GET_SECONDS(v)) * 1000000LL
        + PyDateTime_DELTA_GET_MICROSECONDS(v);
    if (us > TIME_MAX_US || us < -TIME_MAX_US)
        return TT_PASS;
    return put_quoted_text(b, TT_K_TIME, v, fsp);
}

static int fast_enum(tt_buf *b, const Column *c, PyObject *v)
{
    if (!PyUnicode_CheckExact(v))
        return TT_PASS;
    PyObject *index = PyDict_GetItemWithError(c->map, v);
    if (index == NULL)
        return PyErr_Occurred() ? TT_ERR : TT_PASS;
    return tt_text_int(b, index);
}

static int fast_blob(tt_buf *b, const Column *c, PyObject *v)
{
    if (PyBytes_CheckExact(v))
        return put_json_base64(b, (const unsigned char *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v)) < 0
            ? TT_ERR : TT_OK;
    if (c->param || !PyUnicode_CheckExact(v))
        return TT_PASS;
    const char *p;
    Py_ssize_t n;
    int r = tt_utf8_of(v, &p, &n);
    if (r == TT_PASS) /* a lone surrogate: str.encode raises in the Python path */
        return hand_back("TEXT value with a lone surrogate");
    return r != TT_OK ? r : put_json_base64(b, (const unsigned char *)p, n) < 0 ? TT_ERR : TT_OK;
}

static int fast_binstr(tt_buf *b, PyObject *v)
{
    if (!PyBytes_CheckExact(v))
        return TT_PASS;
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(v);
    Py_ssize_t n = PyBytes_GET_SIZE(v);
    if (!is_go_plain(s, n))
        return TT_PASS;
    /* plain bytes need no JSON escaping either */
    if (tt_buf_reserve(b, n + 2) < 0)
        return TT_ERR;
    b->data[b->len++] = '"';
    memcpy(b->data + b->len, s, (size_t)n);
    b->len += n;
    b->data[b->len++] = '"';
    return TT_OK;
}

static int fast_str(tt_buf *b, PyObject *v)
{
    if (!PyUnicode_CheckExact(v))
        return TT_PASS;
    int r = tt_json_str(b, v, TT_JSON_ORJSON);
    if (r == TT_PASS) /* a lone surrogate: orjson raises */
        return hand_back("str with a lone surrogate");
    return r;
}

/* The fast path of one value: TT_OK written, TT_PASS for the converter, TT_ERR. */
static int fast_value(tt_buf *b, const Column *c, PyObject *v)
{
    switch (c->kind) {
    case K_INT:
        return fast_int(b, c, v);
    case K_DOUBLE:
        if (!PyFloat_CheckExact(v) || !isfinite(PyFloat_AS_DOUBLE(v)))
            return TT_PASS;
        return put_json_float(b, PyFloat_AS_DOUBLE(v)) < 0 ? TT_ERR : TT_OK;
    case K_FLOAT32:
        return fast_float32(b, v);
    case K_DECIMAL:
        return put_quoted_text(b, TT_K_DECIMAL, v, c->param);
    case K_DATE:
        return put_quoted_text(b, TT_K_DATE, v, -1);
    case K_DATETIME:
        return put_quoted_text(b, TT_K_DATETIME, v, c->param);
    case K_TIME:
        return fast_time(b, v, c->param);
    case K_STR:
        return fast_str(b, v);
    case K_ENUM:
        return fast_enum(b, c, v);
    case K_BLOB:
        return fast_blob(b, c, v);
    case K_BINSTR:
        return fast_binstr(b, v);
    default:
        return TT_PASS;
    }
}

static int put_value(tt_buf *b, const Column *c, PyObject *v)
{
    if (v == Py_None)
        return tt_buf_put(b, "null", 4);
    int r = fast_value(b, c, v);
    if (r == TT_PASS)
        return put_converted(b, c, v);
    return r == TT_OK ? 0 : -1;
}

/* ------------------------------------------------------------------ encoder */

/* metadata keys the encoder reads (open_protocol builds the tuple from events' constants) */
enum { MK_CONTROL, MK_SUBJECT, MK_VERSION, MK_PARTITION, MK_COMMIT_TS, MK_ROW_ID, MK_ONLY_HANDLE_KEY,
       MK_CLAIM_CHECK, MK_COUNT };
/* Record slots read directly (Record has __slots__) */
enum { SL_OPERATION, SL_METADATA, SL_KEY, SL_BEFORE, SL_AFTER, SL_COUNT };
static const char *const slot_names[SL_COUNT] = {"operation", "metadata", "key", "before", "after"};

typedef struct {
    PyObject_HEAD
    Py_ssize_t max_batch, max_bytes;
    int old_value, only_updated, delete_handle_only;
    PyTypeObject *record_type;
    Py_ssize_t slot_offset[SL_COUNT];
    PyObject *op_create, *op_snapshot, *op_update, *op_delete;
    PyObject *meta[MK_COUNT];
} EncoderObject;

static void Encoder_dealloc(EncoderObject *self)
{
    Py_XDECREF(self->record_type);
    Py_XDECREF(self->op_create);
    Py_XDECREF(self->op_snapshot);
    Py_XDECREF(self->op_update);
    Py_XDECREF(self->op_delete);
    for (int i = 0; i < MK_COUNT; i++)
        Py_XDECREF(self->meta[i]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Offsets of Record's object slots, so a record's fields are one load each (no attribute lookup). */
static int find_slots(EncoderObject *self)
{
    for (int i = 0; i < SL_COUNT; i++) {
        PyObject *d = PyObject_GetAttrString((PyObject *)self->record_type, slot_names[i]);
        if (d == NULL)
            return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok)
            self->slot_offset[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "record type has no object slot %s", slot_names[i]);
            return -1;
        }
    }
    return 0;
}

/* Encoder(limits, record_type, operations, metadata_keys): limits, operations and metadata_keys mirror
 * the Python NamedTuples open_protocol/encode.py EncoderLimits, EncoderOperations and
 * EncoderMetadataKeys (the MK_* order), read by position. */
static PyObject *Encoder_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Py_ssize_t max_batch, max_bytes;
    int old_value, only_updated, delete_handle_only;
    PyObject *record_type, *ops, *meta;
    if (!PyArg_ParseTuple(args, "(nnppp)O!O!O!:Encoder", &max_batch, &max_bytes, &old_value, &only_updated,
                          &delete_handle_only, &PyType_Type, &record_type, &PyTuple_Type, &ops, &PyTuple_Type,
                          &meta))
        return NULL;
    if (PyTuple_GET_SIZE(ops) != 4 || PyTuple_GET_SIZE(meta) != MK_COUNT) {
        PyErr_SetString(PyExc_ValueError, "Encoder needs 4 operations and 8 metadata keys");
        return NULL;
    }
    EncoderObject *self = (EncoderObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->max_batch = max_batch;
    self->max_bytes = max_bytes;
    self->old_value = old_value;
    self->only_updated = only_updated;
    self->delete_handle_only = delete_handle_only;
    Py_INCREF(record_type);
    self->record_type = (PyTypeObject *)record_type;
    PyObject **op_slots[4] = {&self->op_create, &self->op_snapshot, &self->op_update, &self->op_delete};
    for (int i = 0; i < 4; i++) {
        *op_slots[i] = PyTuple_GET_ITEM(ops, i);
        Py_INCREF(*op_slots[i]);
    }
    for (int i = 0; i < MK_COUNT; i++) {
        PyObject *k = PyTuple_GET_ITEM(meta, i);
        if (!PyUnicode_CheckExact(k)) {
            Py_DECREF(self);
            PyErr_SetString(PyExc_TypeError, "metadata keys must be str");
            return NULL;
        }
        Py_INCREF(k);
        self->meta[i] = k;
    }
    if (find_slots(self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* One encode() call's state: the open message and the last table reference seen. */
typedef struct {
    tt_buf keys;   /* batch version + framed key JSONs of the open message */
    tt_buf values; /* framed value JSONs */
    tt_buf row_key, row_value; /* the row being written */
    Py_ssize_t rows, size;     /* rows and framed bytes of the open message */
    PyObject *out;             /* list of (key, value) */
    /* last (subject, version, partition) and its plan (Py_None: rows of it go to the fallback) */
    PyObject *ref[3];
    PyObject *plan;
} Run;

static const char version_bytes[8] = {0, 0, 0, 0, 0, 0, 0, 1};

static void run_free(Run *st)
{
    tt_buf_free(&st->keys);
    tt_buf_free(&st->values);
    tt_buf_free(&st->row_key);
    tt_buf_free(&st->row_value);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(st->ref[i]);
    Py_XDECREF(st->plan);
}

static int append_message(PyObject *out, PyObject *key, PyObject *value)
{
    PyObject *msg = PyTuple_Pack(2, key, value);
    if (msg == NULL)
        return -1;
    int r = PyList_Append(out, msg);
    Py_DECREF(msg);
    return r;
}

/* Close the open message (if any rows) into `out`. */
static int flush(Run *st)
{
    if (st->rows == 0)
        return 0;
    PyObject *k = tt_buf_bytes(&st->keys);
    PyObject *v = k ? tt_buf_bytes(&st->values) : NULL;
    int r = v ? append_message(st->out, k, v) : -1;
    Py_XDECREF(k);
    Py_XDECREF(v);
    st->keys.len = 8; /* keep the batch version */
    st->values.len = 0;
    st->rows = st->size = 0;
    return r;
}

static int put_frame(tt_buf *b, const char *s, Py_ssize_t n)
{
    if (tt_buf_reserve(b, n + 8) < 0)
        return -1;
    unsigned long long len = (unsigned long long)n;
    for (int i = 7; i >= 0; i--, len >>= 8)
        b->data[b->len + i] = (char)(len & 0xFF);
    memcpy(b->data + b->len + 8, s, (size_t)n);
    b->len += n + 8;
    return 0;
}

/* Add one row's key and value JSON to the open message, as OpenProtocolEncoder._encode batches. */
static int add_row(EncoderObject *self, Run *st, const char *k, Py_ssize_t klen, const char *v, Py_ssize_t vlen)
{
    Py_ssize_t row_bytes = klen + vlen + ROW_SLACK;
    if (row_bytes + 8 + RECORD_OVERHEAD > self->max_bytes)
        return hand_back("row exceeds max-message-bytes"); /* Python raises MessageTooLarge */
    if (st->rows && (st->rows >= self->max_batch || st->size + RECORD_OVERHEAD + row_bytes > self->max_bytes))
        if (flush(st) < 0)
            return -1;
    if (put_frame(&st->keys, k, klen) < 0 || put_frame(&st->values, v, vlen) < 0)
        return -1;
    st->rows++;
    st->size += row_bytes;
    return 0;
}

/* A row dict's key is the plan's column name: the same object (interned names), or an exact str
 * with the same text. */
static int same_name(PyObject *key, PyObject *name)
{
    if (key == name)
        return 1;
    if (!PyUnicode_CheckExact(key) || PyUnicode_GET_LENGTH(key) != PyUnicode_GET_LENGTH(name)
        || PyUnicode_KIND(key) != PyUnicode_KIND(name))
        return 0;
    return memcmp(PyUnicode_DATA(key), PyUnicode_DATA(name),
                  (size_t)(PyUnicode_GET_LENGTH(key) * PyUnicode_KIND(key))) == 0;
}

/* `{"name":{"t":..,"f":..,"v":..},...}` for a row holding exactly the plan's columns; TT_PASS for
 * any other row (the fallback's checked path takes it). */
static int put_image(tt_buf *b, const PlanObject *plan, PyObject *row)
{
    if (!PyDict_CheckExact(row) || PyDict_GET_SIZE(row) != plan->ncols)
        return TT_PASS;
    if (tt_buf_putc(b, '{') < 0)
        return TT_ERR;
    /* Rows usually hold their columns in table order: walk the dict alongside the plan while
     * the keys match, and look the rest up by name from the first key out of order. */
    Py_ssize_t pos = 0;
    int in_order = 1;
    for (Py_ssize_t i = 0; i < plan->ncols; i++) {
        const Column *c = &plan->cols[i];
        PyObject *key, *v = NULL;
        if (in_order) {
            in_order = PyDict_Next(row, &pos, &key, &v) && same_name(key, c->name);
            if (!in_order)
                v = NULL;
        }
        if (v == NULL && (v = PyDict_GetItemWithError(row, c->name)) == NULL)
            return PyErr_Occurred() ? TT_ERR : TT_PASS;
        if ((i && tt_buf_putc(b, ',') < 0)
            || tt_buf_put(b, PyBytes_AS_STRING(c->prefix), PyBytes_GET_SIZE(c->prefix)) < 0
            || put_value(b, c, v) < 0 || tt_buf_putc(b, '}') < 0)
            return TT_ERR;
    }
    return tt_buf_putc(b, '}') < 0 ? TT_ERR : TT_OK;
}

/* The commit ts text as from_records reads it (int(text)) when it is plain ASCII digits that fit
 * in 64 bits; 0 otherwise (the fallback reads anything else, or raises). */
static int parse_commit_ts(PyObject *text, unsigned long long *ts)
{
    if (!PyUnicode_CheckExact(text) || !PyUnicode_IS_ASCII(text))
        return 0;
    const char *s = (const char *)PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (n < 1 || n > 20)
        return 0;
    unsigned long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (d > 9 || v > (ULLONG_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *ts = v;
    return 1;
}

/* The plan for this metadata's table reference, asking `plan_for` only when the reference
 * changes (as from_records looks the table up only then). Borrowed plan or Py_None; NULL on error. */
static PyObject *plan_of(Run *st, PyObject *record, PyObject *subject, PyObject *version, PyObject *partition,
                         PyObject *plan_for)
{
    PyObject *ref[3] = {subject, version, partition ? partition : Py_None};
    int same = st->plan != NULL;
    for (int i = 0; i < 3 && same; i++) {
        same = PyObject_RichCompareBool(st->ref[i], ref[i], Py_EQ);
        if (same < 0)
            return NULL;
    }
    if (same)
        return st->plan;
    PyObject *plan = PyObject_CallOneArg(plan_for, record);
    if (plan == NULL)
        return NULL;
    if (plan != Py_None && !Py_IS_TYPE(plan, &PlanType)) {
        Py_DECREF(plan);
        PyErr_SetString(PyExc_TypeError, "plan_for must return a TablePlan or None");
        return NULL;
    }
    Py_XSETREF(st->plan, plan);
    for (int i = 0; i < 3; i++) {
        Py_INCREF(ref[i]);
        Py_XSETREF(st->ref[i], ref[i]);
    }
    return plan;
}

#define SLOT(self, rec, i) (*(PyObject **)((char *)(rec) + (self)->slot_offset[i]))

/* The metadata's table plan when the record is a row record in the usual shape, with its commit
 * ts; Py_None (borrowed) when the fallback takes the record; NULL on error. */
static PyObject *usual_row_plan(EncoderObject *self, Run *st, PyObject *rec, PyObject *md, PyObject *plan_for,
                                unsigned long long *ts)
{
    PyObject *found[MK_COUNT];
    for (int i = 0; i < MK_COUNT; i++) {
        found[i] = PyDict_GetItemWithError(md, self->meta[i]);
        if (found[i] == NULL && PyErr_Occurred())
            return NULL;
    }
    /* control records, no schema reference, key extras (row id, handle-key-only, claim check) */
    if (found[MK_CONTROL] || !found[MK_SUBJECT] || !found[MK_VERSION] || found[MK_ROW_ID]
        || found[MK_ONLY_HANDLE_KEY] || found[MK_CLAIM_CHECK])
        return Py_None;
    PyObject *plan = plan_of(st, rec, found[MK_SUBJECT], found[MK_VERSION], found[MK_PARTITION], plan_for);
    if (plan == NULL || plan == Py_None)
        return plan;
    if (!found[MK_COMMIT_TS] || !parse_commit_ts(found[MK_COMMIT_TS], ts))
        return Py_None;
    return plan;
}

/* The images a row record's value carries, as from_records and OpenProtocolEncoder._row pick
 * them: *row (borrowed), *old (borrowed or NULL) and the value's head; 0 when the fallback takes
 * the record (an unusual operation or shape, or options that write a partial image). */
static int pick_images(EncoderObject *self, PyObject *rec, const PlanObject *plan, PyObject **row, PyObject **old,
                       const char **head)
{
    PyObject *op = SLOT(self, rec, SL_OPERATION);
    *old = NULL;
    *head = "{\"u\":";
    if (op == self->op_create || op == self->op_snapshot) {
        *row = SLOT(self, rec, SL_AFTER);
    } else if (op == self->op_update) {
        *row = SLOT(self, rec, SL_AFTER);
        PyObject *before = SLOT(self, rec, SL_BEFORE);
        /* an unset slot or an old image that is not a dict: from_records raises */
        if (before == NULL || (before != Py_None && !PyDict_CheckExact(before)))
            return 0;
        if (before != Py_None && self->old_value) {
            if (self->only_updated)
                return 0; /* a partial old image: the fallback picks the changed columns */
            *old = before;
        }
    } else if (op == self->op_delete) {
        *row = SLOT(self, rec, SL_BEFORE);
        *head = "{\"d\":";
        if (self->delete_handle_only && plan->has_handle)
            return 0;
    } else {
        return 0;
    }
    /* no row, or a delete keyed by record.key: the fallback's path */
    return *row != NULL && *row != Py_None;
}

/* Key and value JSON of one row record into st->row_key / st->row_value: TT_OK, TT_PASS (the
 * fallback takes the record), TT_ERR. */
static int encode_row(EncoderObject *self, Run *st, PyObject *rec, PyObject *plan_for)
{
    if (Py_TYPE(rec) != self->record_type)
        return TT_PASS;
    PyObject *md = SLOT(self, rec, SL_METADATA);
    if (md == NULL || SLOT(self, rec, SL_OPERATION) == NULL || !PyDict_CheckExact(md))
        return TT_PASS;
    unsigned long long ts = 0;
    Py_INCREF(md); /* plan_for is Python code: hold what we read */
    PyObject *found = usual_row_plan(self, st, rec, md, plan_for, &ts);
    Py_DECREF(md);
    if (found == NULL || found == Py_None)
        return found == NULL ? TT_ERR : TT_PASS;
    PlanObject *plan = (PlanObject *)found;
    PyObject *row, *old;
    const char *head;
    if (!pick_images(self, rec, plan, &row, &old, &head))
        return TT_PASS;
    /* converters are Python code: hold the plan and images while writing */
    Py_INCREF(plan);
    Py_INCREF(row);
    Py_XINCREF(old);
    tt_buf *k = &st->row_key, *v = &st->row_value;
    k->len = v->len = 0;
    int r;
    if (tt_buf_put(k, "{\"ts\":", 6) < 0 || tt_buf_put_u64(k, ts) < 0
        || tt_buf_put(k, PyBytes_AS_STRING(plan->key_suffix), PyBytes_GET_SIZE(plan->key_suffix)) < 0
        || tt_buf_put(v, head, 5) < 0)
        r = TT_ERR;
    else
        r = put_image(v, plan, row);
    if (r == TT_OK && old != NULL)
        r = tt_buf_put(v, ",\"p\":", 5) < 0 ? TT_ERR : put_image(v, plan, old);
    if (r == TT_OK)
        r = tt_buf_putc(v, '}') < 0 ? TT_ERR : TT_OK;
    Py_DECREF(plan);
    Py_DECREF(row);
    Py_XDECREF(old);
    return r;
}

/* A record the fallback takes: it returns (key, value, is_row); a row joins the open message,
 * anything else is a message of its own after the open one. */
static int take_fallback(EncoderObject *self, Run *st, PyObject *rec, PyObject *fallback)
{
    PyObject *res = PyObject_CallOneArg(fallback, rec);
    if (res == NULL)
        return -1;
    PyObject *k, *v;
    int is_row;
    int r = -1;
    if (!PyTuple_Check(res) || !PyArg_ParseTuple(res, "SSp;fallback returns (key, value, is_row)", &k, &v, &is_row)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "fallback returns (key, value, is_row)");
    } else if (is_row) {
        r = add_row(self, st, PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k), PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    } else {
        r = flush(st) < 0 ? -1 : append_message(st->out, k, v);
    }
    Py_DECREF(res);
    return r;
}

static PyObject *Encoder_encode(EncoderObject *self, PyObject *args)
{
    PyObject *records, *plan_for, *fallback;
    if (!PyArg_ParseTuple(args, "O!OO:encode", &PyList_Type, &records, &plan_for, &fallback))
        return NULL;
    Run st = {0};
    st.out = PyList_New(0);
    if (st.out == NULL || tt_buf_init(&st.keys, 4096) < 0 || tt_buf_init(&st.values, 8192) < 0
        || tt_buf_init(&st.row_key, 256) < 0 || tt_buf_init(&st.row_value, 2048) < 0)
        goto fail;
    memcpy(st.keys.data, version_bytes, 8);
    st.keys.len = 8;
    /* the list may change under the Python callbacks: re-read its size, hold each record */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records); i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        Py_INCREF(rec);
        int r = encode_row(self, &st, rec, plan_for);
        if (r == TT_OK)
            r = add_row(self, &st, st.row_key.data, st.row_key.len, st.row_value.data, st.row_value.len);
        else if (r == TT_PASS)
            r = take_fallback(self, &st, rec, fallback);
        Py_DECREF(rec);
        if (r < 0)
            goto fail;
    }
    if (flush(&st) < 0)
        goto fail;
    run_free(&st);
    return st.out;
fail:
    run_free(&st);
    Py_XDECREF(st.out);
    return NULL;
}

static PyMethodDef Encoder_methods[] = {
    {"encode", (PyCFunction)Encoder_encode, METH_VARARGS,
     "encode(records: list, plan_for, fallback) -> [(key, value)]: the messages of the batch.\n"
     "plan_for(record) -> TablePlan | None for a row record's table; fallback(record) -> (key, value,\n"
     "is_row) for every record not in the usual shape. Raises HandBack (or the callables' errors)\n"
     "where the Python path is to decide."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.connectors.ticdc.open_protocol._open_protocol_encode.Encoder",
    .tp_doc = "Encoder((max_batch, max_bytes, old_value, only_updated, delete_handle_only), Record,\n"
              "(CREATE, SNAPSHOT, UPDATE, DELETE), metadata_keys)",
    .tp_basicsize = sizeof(EncoderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Encoder_new,
    .tp_dealloc = (destructor)Encoder_dealloc,
    .tp_methods = Encoder_methods,
};

/* ------------------------------------------------------------------ module */

static PyObject *py_json_float(PyObject *mod, PyObject *arg)
{
    double d = PyFloat_AsDouble(arg);
    if (d == -1.0 && PyErr_Occurred())
        return NULL;
    if (!isfinite(d)) {
        PyErr_SetString(PyExc_ValueError, "not finite");
        return NULL;
    }
    tt_buf b;
    if (tt_buf_init(&b, 32) < 0)
        return NULL;
    PyObject *res = put_json_float(&b, d) < 0 ? NULL : tt_buf_bytes(&b);
    tt_buf_free(&b);
    return res;
}

static PyMethodDef module_methods[] = {
    {"json_float", py_json_float, METH_O, "json_float(x) -> bytes: orjson's text of a finite float (for tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_open_protocol_encode",
    "OpenCDC records -> TiCDC open-protocol messages (the compiled twin of open_protocol's encoder).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__open_protocol_encode(void)
{
    if (tt_init() < 0 || PyType_Ready(&PlanType) < 0 || PyType_Ready(&EncoderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    HandBack = PyErr_NewExceptionWithDoc("cdcflow.connectors.ticdc.open_protocol._open_protocol_encode.HandBack",
                                         "The kernel leaves this batch to the Python path.", NULL, NULL);
    if (HandBack == NULL || PyModule_AddObjectRef(m, "HandBack", HandBack) < 0
        || PyModule_AddObjectRef(m, "TablePlan", (PyObject *)&PlanType) < 0
        || PyModule_AddObjectRef(m, "Encoder", (PyObject *)&EncoderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    static const struct { const char *name; int value; } kinds[] = {
        {"K_CONV", K_CONV}, {"K_INT", K_INT}, {"K_DOUBLE", K_DOUBLE}, {"K_FLOAT32", K_FLOAT32},
        {"K_DECIMAL", K_DECIMAL}, {"K_DATE", K_DATE}, {"K_DATETIME", K_DATETIME}, {"K_TIME", K_TIME},
        {"K_STR", K_STR}, {"K_ENUM", K_ENUM}, {"K_BLOB", K_BLOB}, {"K_BINSTR", K_BINSTR},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (PyModule_AddIntConstant(m, kinds[i].name, kinds[i].value) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    return m;
}
