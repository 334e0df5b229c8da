/* _decode.c: the compiled twin of AvroDecoder._read (connectors/ticdc/avro/decode.py).
 *
 * The reference reads a message body with fastavro's schemaless_reader, then converts the
 * columns that need it in place (plan.in_place). This kernel does the same two steps in one
 * pass over the bytes, for the flat records TiCDC writes: per field an optional [null, T] /
 * [T, null] union index, a primitive (boolean, int/long, float, double, string, bytes), and the
 * column's converter (the C twins below carry the Python converters' names). The result is the
 * dict the reference returns: same keys in field order, same value types and values.
 *
 * The plan is decode.KernelPlan (a NamedTuple of KernelField), compiled once per schema into a
 * Reader. Reader.read(data) returns the row dict, or None when the kernel does not decide:
 * data that is not exact bytes, truncation, trailing bytes, a varint beyond 64 bits, a boolean
 * byte other than 0/1, a union index other than 0/1, invalid UTF-8, or a converter (C twin or,
 * where the twin does not take the value, the Python converter itself) rejecting the value.
 * The caller then runs the reference on the same bytes, which returns the row or raises the
 * typed error naming the part and byte. Only MemoryError-class failures (and non-Exception
 * errors raised inside a Python converter) propagate from here.
 *
 * Public C API only (no _Py* calls); builds on CPython 3.10-3.13.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tidbparse.h"

/* Avro primitive read for a field (int and long are both zig-zag varints) */
enum { AVRO_BOOLEAN = 0, AVRO_LONG, AVRO_FLOAT, AVRO_DOUBLE, AVRO_STRING, AVRO_BYTES, AVRO_COUNT };

/* column converters: CONV_NONE keeps the Avro value; CONV_CALL calls the Python converter; the
 * others are C twins of schema.py's converters, falling back to the Python one per value */
enum {
    CONV_NONE = 0,
    CONV_CALL,
    CONV_UNWRAP_U64,          /* _unwrap_u64 (long) */
    CONV_INT_TEXT,            /* _int_text (string) */
    CONV_FLOAT,               /* float (int/long) */
    CONV_BITS_TO_INT,         /* _bits_to_int (bytes) */
    CONV_DECIMAL_FROM_UNSCALED, /* _decimal_from_unscaled(precision, scale) (bytes) */
    CONV_DECIMAL_TEXT,        /* _decimal_text (string) */
    CONV_PARSE_DATE,          /* _parse_date_once (string) */
    CONV_PARSE_DATETIME,      /* parse_datetime (string) */
    CONV_PARSE_TIME,          /* parse_time (string) */
    CONV_COUNT
};

/* status of a step */
#define ST_OK 0
#define ST_PASS 1    /* not decided here: the message goes to the reference */
#define ST_ERR (-1)  /* a Python exception is set (MemoryError-class) */

typedef struct {
    PyObject *name;   /* the row key */
    PyObject *call;   /* the Python converter, or None */
    int avro;
    int null_branch;  /* -1: not a union; 0 / 1: the union index that is null */
    int conv;
    int precision, scale;
    int64_t limit;    /* CONV_DECIMAL_FROM_UNSCALED: 10**precision when it fits, else 0 (no bound needed) */
} Field;

typedef struct {
    PyObject_HEAD
    PyObject *plan;   /* the KernelPlan: keeps every borrowed name and converter alive */
    Py_ssize_t count;
    Field *fields;
} Reader;

typedef struct {
    const unsigned char *p, *end;
} Cursor;

/* ======================================================================== primitive reads */

/* A zig-zag varint of at most 10 bytes and 64 bits; anything longer is the reference's call. */
static inline int read_long(Cursor *c, int64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (c->p >= c->end)
            return ST_PASS;
        unsigned b = *c->p++;
        if (shift == 63 && (b & 0x7F) > 1)
            return ST_PASS;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
            return ST_OK;
        }
    }
    return ST_PASS;
}

/* A length-prefixed run of bytes that lies wholly inside the input. */
static inline int read_span(Cursor *c, const char **s, Py_ssize_t *n)
{
    int64_t len;
    if (read_long(c, &len) != ST_OK || len < 0 || len > c->end - c->p)
        return ST_PASS;
    *s = (const char *)c->p;
    *n = (Py_ssize_t)len;
    c->p += len;
    return ST_OK;
}

/* little-endian IEEE 754, assembled bytewise as fastavro does (any host byte order) */
static inline int read_float(Cursor *c, double *out)
{
    if (c->end - c->p < 4)
        return ST_PASS;
    uint32_t u = (uint32_t)c->p[0] | (uint32_t)c->p[1] << 8 | (uint32_t)c->p[2] << 16 | (uint32_t)c->p[3] << 24;
    float f;
    memcpy(&f, &u, 4);
    c->p += 4;
    *out = (double)f;
    return ST_OK;
}

static inline int read_double(Cursor *c, double *out)
{
    if (c->end - c->p < 8)
        return ST_PASS;
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--)
        u = u << 8 | c->p[i];
    memcpy(out, &u, 8);
    c->p += 8;
    return ST_OK;
}

/* ======================================================================== converters */

/* A Python-level failure inside a converter: an Exception means "the reference decides";
 * anything else (KeyboardInterrupt, ...) and MemoryError propagate. */
static int pass_on_exception(void)
{
    if (PyErr_ExceptionMatches(PyExc_MemoryError) || !PyErr_ExceptionMatches(PyExc_Exception))
        return ST_ERR;
    PyErr_Clear();
    return ST_PASS;
}

/* The field's Python converter applied to the raw value (a new reference is stolen). */
static int call(const Field *f, PyObject *raw, PyObject **out)
{
    if (raw == NULL)
        return ST_ERR;
    PyObject *v = PyObject_CallOneArg(f->call, raw);
    Py_DECREF(raw);
    if (v == NULL)
        return pass_on_exception();
    *out = v;
    return ST_OK;
}

static int utf8(const char *s, Py_ssize_t n, PyObject **out)
{
    PyObject *v = PyUnicode_DecodeUTF8(s, n, NULL);  /* strict, as fastavro's bytes.decode() */
    if (v == NULL)
        return pass_on_exception();
    *out = v;
    return ST_OK;
}

/* tidbparse result -> step status; "not handled" goes to the Python converter */
static int parsed(int rc, const Field *f, const char *s, Py_ssize_t n, PyObject **out)
{
    if (rc == TIDBPARSE_OK)
        return ST_OK;
    if (rc == TIDBPARSE_ERROR)
        return ST_ERR;
    PyObject *text;
    int st = utf8(s, n, &text);
    return st != ST_OK ? st : call(f, text, out);
}

static int unwrap_u64(int64_t v, PyObject **out)
{
    *out = PyLong_FromUnsignedLongLong((unsigned long long)v);  /* v < 0: v + 2**64 */
    return *out != NULL ? ST_OK : ST_ERR;
}

static int int_text(const Field *f, const char *s, Py_ssize_t n, PyObject **out)
{
    if (n > 0 && s[0] == '-')  /* "-0" and real negatives: the Python converter decides */
        return parsed(TIDBPARSE_NOT_HANDLED, f, s, n, out);
    return parsed(tidbparse_int(s, n, out), f, s, n, out);
}

/* The signed value of 1..8 big-endian two's complement bytes. */
static inline int64_t be_signed64(const unsigned char *s, Py_ssize_t n)
{
    uint64_t u = (s[0] & 0x80) ? ~(uint64_t)0 : 0;
    for (Py_ssize_t i = 0; i < n; i++)
        u = u << 8 | s[i];
    return (int64_t)u;
}

static int bits_to_int(const Field *f, const char *s, Py_ssize_t n, PyObject **out)
{
    if (n > 8)
        return call(f, PyBytes_FromStringAndSize(s, n), out);
    uint64_t u = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        u = u << 8 | (unsigned char)s[i];
    *out = PyLong_FromUnsignedLongLong(u);
    return *out != NULL ? ST_OK : ST_ERR;
}

/* Unscaled n (at most 8 bytes) within the precision -> Decimal("<n>E-<scale>"): coefficient n,
 * exponent -scale, as the reference's exact n * 1E-scale. Wider values: the Python converter. */
static int decimal_from_unscaled(const Field *f, const char *s, Py_ssize_t n, PyObject **out)
{
    if (n > 8)
        return call(f, PyBytes_FromStringAndSize(s, n), out);
    int64_t v = n == 0 ? 0 : be_signed64((const unsigned char *)s, n);
    if (f->limit && !(v > -f->limit && v < f->limit))
        return ST_PASS;  /* more digits than the column holds: the reference names it */
    char text[48];
    int len = snprintf(text, sizeof text, "%lldE-%d", (long long)v, f->scale);
    PyObject *str = PyUnicode_FromStringAndSize(text, len);
    if (str == NULL)
        return ST_ERR;
    PyObject *d = PyObject_CallOneArg(tidbparse_decimal_type, str);
    Py_DECREF(str);
    if (d == NULL)
        return pass_on_exception();
    *out = d;
    return ST_OK;
}

/* ======================================================================== the read */

static int read_field(const Field *f, Cursor *c, PyObject **out)
{
    int64_t i;
    double d;
    const char *s;
    Py_ssize_t n;
    int st;
    if (f->null_branch >= 0) {
        if ((st = read_long(c, &i)) != ST_OK)
            return st;
        if (i != 0 && i != 1)
            return ST_PASS;
        if (i == f->null_branch) {
            *out = Py_NewRef(Py_None);
            return ST_OK;
        }
    }
    switch (f->avro) {
    case AVRO_BOOLEAN:
        if (c->p >= c->end || *c->p > 1)
            return ST_PASS;
        *out = PyBool_FromLong(*c->p++);
        return f->conv == CONV_NONE ? ST_OK : call(f, *out, out);
    case AVRO_LONG:
        if ((st = read_long(c, &i)) != ST_OK)
            return st;
        switch (f->conv) {
        case CONV_UNWRAP_U64:
            return unwrap_u64(i, out);
        case CONV_FLOAT:
            *out = PyFloat_FromDouble((double)i);
            return *out != NULL ? ST_OK : ST_ERR;
        case CONV_NONE:
            *out = PyLong_FromLongLong(i);
            return *out != NULL ? ST_OK : ST_ERR;
        default:
            return call(f, PyLong_FromLongLong(i), out);
        }
    case AVRO_FLOAT:
    case AVRO_DOUBLE:
        if ((st = f->avro == AVRO_FLOAT ? read_float(c, &d) : read_double(c, &d)) != ST_OK)
            return st;
        *out = PyFloat_FromDouble(d);
        if (*out == NULL)
            return ST_ERR;
        return f->conv == CONV_NONE ? ST_OK : call(f, *out, out);
    default:
        break;
    }
    if ((st = read_span(c, &s, &n)) != ST_OK)
        return st;
    if (f->avro == AVRO_BYTES) {
        switch (f->conv) {
        case CONV_BITS_TO_INT:
            return bits_to_int(f, s, n, out);
        case CONV_DECIMAL_FROM_UNSCALED:
            return decimal_from_unscaled(f, s, n, out);
        case CONV_NONE:
            *out = PyBytes_FromStringAndSize(s, n);
            return *out != NULL ? ST_OK : ST_ERR;
        default:
            return call(f, PyBytes_FromStringAndSize(s, n), out);
        }
    }
    switch (f->conv) {  /* AVRO_STRING */
    case CONV_INT_TEXT:
        return int_text(f, s, n, out);
    case CONV_DECIMAL_TEXT:
        return parsed(tidbparse_decimal(s, n, out), f, s, n, out);
    case CONV_PARSE_DATE:
        return parsed(tidbparse_date(s, n, out), f, s, n, out);
    case CONV_PARSE_DATETIME:
        return parsed(tidbparse_datetime(s, n, out), f, s, n, out);
    case CONV_PARSE_TIME:
        return parsed(tidbparse_time(s, n, -1, out), f, s, n, out);
    case CONV_NONE:
        return utf8(s, n, out);
    default:
        if ((st = utf8(s, n, out)) != ST_OK)
            return st;
        return call(f, *out, out);
    }
}

/* Reader.read(data): the row dict, or None for the reference to decide. Framed messages carry
 * the body from byte 5 on (decode.py has checked the header before). */
static PyObject *Reader_read(PyObject *self, PyObject *data)
{
    const Reader *r = (const Reader *)self;
    if (!PyBytes_CheckExact(data) || PyBytes_GET_SIZE(data) < 5)
        Py_RETURN_NONE;
    const unsigned char *start = (const unsigned char *)PyBytes_AS_STRING(data);
    Cursor c = {start + 5, start + PyBytes_GET_SIZE(data)};
    PyObject *row = PyDict_New();
    if (row == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < r->count; k++) {
        const Field *f = &r->fields[k];
        PyObject *v = NULL;
        int st = read_field(f, &c, &v);
        if (st == ST_OK) {
            st = PyDict_SetItem(row, f->name, v) < 0 ? ST_ERR : ST_OK;
            Py_DECREF(v);
        }
        if (st != ST_OK) {
            Py_DECREF(row);
            if (st == ST_ERR)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    if (c.p != c.end) {  /* trailing bytes: the reference names them */
        Py_DECREF(row);
        Py_RETURN_NONE;
    }
    return row;
}

/* ======================================================================== the Reader type */

/* item i of a tuple-like plan entry as a C int in [lo, hi]; -1 with ValueError otherwise */
static int int_item(PyObject *entry, Py_ssize_t i, long lo, long hi, int *out)
{
    long v = PyLong_AsLong(PyTuple_GET_ITEM(entry, i));
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "kernel plan field %R: item %zd out of range", entry, i);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Which Avro primitive each C twin reads (the plan builder only pairs them so). */
static int conv_fits(int conv, int avro)
{
    switch (conv) {
    case CONV_NONE:
    case CONV_CALL:
        return 1;
    case CONV_UNWRAP_U64:
    case CONV_FLOAT:
        return avro == AVRO_LONG;
    case CONV_BITS_TO_INT:
    case CONV_DECIMAL_FROM_UNSCALED:
        return avro == AVRO_BYTES;
    default:
        return avro == AVRO_STRING;
    }
}

/* KernelField(name, avro, null_branch, conv, call, precision, scale) -> Field */
static int compile_field(PyObject *entry, Field *f)
{
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 7) {
        PyErr_SetString(PyExc_TypeError, "kernel plan fields must be KernelField tuples of 7 items");
        return -1;
    }
    f->name = PyTuple_GET_ITEM(entry, 0);
    f->call = PyTuple_GET_ITEM(entry, 4);
    if (!PyUnicode_Check(f->name)) {
        PyErr_Format(PyExc_TypeError, "kernel plan field %R: name must be str", entry);
        return -1;
    }
    if (int_item(entry, 1, 0, AVRO_COUNT - 1, &f->avro) < 0 || int_item(entry, 2, -1, 1, &f->null_branch) < 0
        || int_item(entry, 3, 0, CONV_COUNT - 1, &f->conv) < 0 || int_item(entry, 5, 0, 1000, &f->precision) < 0
        || int_item(entry, 6, 0, 1000, &f->scale) < 0)
        return -1;
    if (!conv_fits(f->conv, f->avro) || (f->conv != CONV_NONE && !PyCallable_Check(f->call))) {
        PyErr_Format(PyExc_ValueError, "kernel plan field %R: converter and Avro type do not fit", entry);
        return -1;
    }
    f->limit = 0;
    if (f->conv == CONV_DECIMAL_FROM_UNSCALED && f->precision <= 18) {
        f->limit = 1;
        for (int k = 0; k < f->precision; k++)
            f->limit *= 10;
    }
    return 0;
}

static int Reader_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((Reader *)self)->plan);
    return 0;
}

static void Reader_dealloc(PyObject *self)
{
    Reader *r = (Reader *)self;
    PyObject_GC_UnTrack(self);
    PyMem_Free(r->fields);
    Py_XDECREF(r->plan);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *Reader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *plan;
    static char *keywords[] = {"plan", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Reader", keywords, &plan))
        return NULL;
    PyObject *fields = PyTuple_Check(plan) && PyTuple_GET_SIZE(plan) == 1 ? PyTuple_GET_ITEM(plan, 0) : NULL;
    if (fields == NULL || !PyTuple_Check(fields)) {
        PyErr_SetString(PyExc_TypeError, "Reader(plan): plan must be a KernelPlan (a tuple of KernelField)");
        return NULL;
    }
    Reader *r = (Reader *)type->tp_alloc(type, 0);
    if (r == NULL)
        return NULL;
    r->plan = Py_NewRef(plan);
    r->count = PyTuple_GET_SIZE(fields);
    r->fields = PyMem_Calloc((size_t)r->count + 1, sizeof(Field));
    if (r->fields == NULL) {
        Py_DECREF(r);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < r->count; k++) {
        if (compile_field(PyTuple_GET_ITEM(fields, k), &r->fields[k]) < 0) {
            Py_DECREF(r);
            return NULL;
        }
    }
    return (PyObject *)r;
}

static PyMethodDef Reader_methods[] = {
    {"read", Reader_read, METH_O,
     "read(data: bytes) -> the row dict of a framed message, or None when the reference must decide"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.connectors.ticdc.avro._decode.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = Reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = Reader_traverse,
    .tp_doc = "Reader(plan: decode.KernelPlan): one TiCDC Avro schema, compiled for read().",
    .tp_methods = Reader_methods,
    .tp_new = Reader_new,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_decode", "TiCDC Avro decode kernel (the twin of avro/decode.py's _read)", -1, NULL,
};

PyMODINIT_FUNC PyInit__decode(void)
{
    if (tidbparse_init() < 0 || PyType_Ready(&ReaderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    static const struct { const char *name; int value; } constants[] = {
        {"AVRO_BOOLEAN", AVRO_BOOLEAN}, {"AVRO_LONG", AVRO_LONG}, {"AVRO_FLOAT", AVRO_FLOAT},
        {"AVRO_DOUBLE", AVRO_DOUBLE}, {"AVRO_STRING", AVRO_STRING}, {"AVRO_BYTES", AVRO_BYTES},
        {"CONV_NONE", CONV_NONE}, {"CONV_CALL", CONV_CALL}, {"CONV_UNWRAP_U64", CONV_UNWRAP_U64},
        {"CONV_INT_TEXT", CONV_INT_TEXT}, {"CONV_FLOAT", CONV_FLOAT}, {"CONV_BITS_TO_INT", CONV_BITS_TO_INT},
        {"CONV_DECIMAL_FROM_UNSCALED", CONV_DECIMAL_FROM_UNSCALED}, {"CONV_DECIMAL_TEXT", CONV_DECIMAL_TEXT},
        {"CONV_PARSE_DATE", CONV_PARSE_DATE}, {"CONV_PARSE_DATETIME", CONV_PARSE_DATETIME},
        {"CONV_PARSE_TIME", CONV_PARSE_TIME},
    };
    for (size_t k = 0; k < sizeof constants / sizeof constants[0]; k++) {
        if (PyModule_AddIntConstant(m, constants[k].name, constants[k].value) < 0)
            goto fail;
    }
    if (PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
