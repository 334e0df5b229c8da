/* _encode.c: the compiled twin of a row's encoding in encode.py (AvroEncoder._encode_row).
 *
 * The reference turns a row into a datum with the column converters of schema._encoder_for,
 * then fastavro's schemaless_writer writes the body. This kernel does both in one pass from the
 * row dict, for the flat records TiCDC registers: per field the column's converter (C twins of
 * the integer range check, the unsigned BIGINT wrap, the FLOAT / DOUBLE checks; any other
 * converter is called), an optional [null, T] / [T, null] union index and a primitive (int/long,
 * float, double, string, bytes; a decimal is bytes once converted). The TiDB extension fields
 * come from the `ext` tuple.
 *
 * The plan is encode.KernelPlan (a NamedTuple of KernelField), compiled once per schema into a
 * Writer. Writer.write(head, row, ext) returns head + body as bytes, or None when the kernel does
 * not decide: a column missing from the row, a value a converter (C twin or Python) rejects, a
 * converted value whose Python type is not exactly the one the field takes (int for int/long,
 * float for float/double, str, bytes, None for a union's null), an int beyond 64 bits, or text
 * that is not valid UTF-8 (lone surrogates). The caller then runs the reference on the same row,
 * which writes the same bytes or raises the typed error naming the column. Only MemoryError-class
 * failures (and non-Exception errors raised inside a Python converter) propagate from here.
 *
 * Public C API only (no _Py* calls); builds on CPython 3.10-3.13.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tidbtext.h" /* tt_buf: the growable byte buffer */

/* the primitive written for a field (int and long are both zig-zag varints) */
enum { AVRO_LONG = 0, AVRO_FLOAT, AVRO_DOUBLE, AVRO_STRING, AVRO_BYTES, AVRO_COUNT };

#define ST_OK 0
#define ST_PASS 1    /* not decided here: the datum goes to the reference */
#define ST_ERR (-1)  /* a Python exception is set (MemoryError) */

/* column converters: C twins of schema._encoder_for's, by what they check */
enum {
    CONV_NONE = 0,  /* the value as is (strings, bytes, JSON, SET) */
    CONV_CALL,      /* call the Python converter */
    CONV_INT_RANGE, /* exact int in [lo, hi] (the integer types, YEAR) */
    CONV_U64_WRAP,  /* BIGINT UNSIGNED as long: exact int in [0, 2**64), above 2**63-1 wrapped */
    CONV_FLOAT32,   /* FLOAT: exact float, exact in 32 bits (or NaN / inf) */
    CONV_DOUBLE,    /* DOUBLE: exact float */
    CONV_EXT,       /* a TiDB extension field: ext[lo] */
    CONV_COUNT
};

typedef struct {
    PyObject *key;    /* the row key (borrowed from the plan) */
    PyObject *call;   /* the Python converter, or None (borrowed) */
    int avro;
    int null_branch;  /* -1: not a union; 0 / 1: the union index that is null */
    int conv;
    long long lo, hi;
} Field;

typedef struct {
    PyObject_HEAD
    PyObject *plan;   /* the KernelPlan: keeps every borrowed name alive */
    Py_ssize_t count;
    Field *fields;
} Writer;

/* zig-zag varint of a 64-bit value; the caller reserved 10 bytes */
static inline void put_long(tt_buf *b, int64_t n)
{
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    while (z > 0x7F) {
        b->data[b->len++] = (char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    b->data[b->len++] = (char)z;
}

static int put_blob(tt_buf *b, const char *data, Py_ssize_t size)
{
    if (tt_buf_reserve(b, 10 + size) < 0)
        return ST_ERR;
    put_long(b, (int64_t)size);
    memcpy(b->data + b->len, data, (size_t)size);
    b->len += size;
    return ST_OK;
}

/* little-endian bytes of a float / double, as Avro (and fastavro's struct '<f' / '<d') */
static inline void put_le(tt_buf *b, const void *src, int size)
{
    const unsigned char *s = src;
    uint16_t probe = 1;
    if (*(unsigned char *)&probe) {
        memcpy(b->data + b->len, s, (size_t)size);
    } else {
        for (int i = 0; i < size; i++)
            b->data[b->len + i] = (char)s[size - 1 - i];
    }
    b->len += size;
}

static int write_value(tt_buf *b, const Field *f, PyObject *v)
{
    switch (f->avro) {
    case AVRO_LONG: {
        if (!PyLong_CheckExact(v))
            return ST_PASS;
        int overflow = 0;
        long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            return ST_PASS;
        if (n == -1 && PyErr_Occurred())
            return ST_ERR;
        if (tt_buf_reserve(b, 10) < 0)
            return ST_ERR;
        put_long(b, (int64_t)n);
        return ST_OK;
    }
    case AVRO_FLOAT: {
        if (!PyFloat_CheckExact(v))
            return ST_PASS;
        float x = (float)PyFloat_AS_DOUBLE(v);
        if (tt_buf_reserve(b, 4) < 0)
            return ST_ERR;
        put_le(b, &x, 4);
        return ST_OK;
    }
    case AVRO_DOUBLE: {
        if (!PyFloat_CheckExact(v))
            return ST_PASS;
        double x = PyFloat_AS_DOUBLE(v);
        if (tt_buf_reserve(b, 8) < 0)
            return ST_ERR;
        put_le(b, &x, 8);
        return ST_OK;
    }
    case AVRO_STRING: {
        if (!PyUnicode_CheckExact(v))
            return ST_PASS;
        Py_ssize_t size;
        const char *s = PyUnicode_AsUTF8AndSize(v, &size);
        if (s == NULL) {
            if (PyErr_ExceptionMatches(PyExc_MemoryError))
                return ST_ERR;
            PyErr_Clear();  /* not encodable (lone surrogates): the reference names the column */
            return ST_PASS;
        }
        return put_blob(b, s, size);
    }
    case AVRO_BYTES:
        if (!PyBytes_CheckExact(v))
            return ST_PASS;
        return put_blob(b, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    }
    return ST_PASS;
}

/* the C twins of the checking converters: ST_OK when the value passes unchanged, ST_PASS when
 * the reference must decide */
static int check_value(const Field *f, PyObject *v)
{
    switch (f->conv) {
    case CONV_INT_RANGE: {
        if (!PyLong_CheckExact(v))
            return ST_PASS;
        int overflow = 0;
        long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (n == -1 && PyErr_Occurred())
            return ST_ERR;
        return !overflow && n >= f->lo && n <= f->hi ? ST_OK : ST_PASS;
    }
    case CONV_FLOAT32: {
        if (!PyFloat_CheckExact(v))
            return ST_PASS;
        double x = PyFloat_AS_DOUBLE(v);
        if (!isfinite(x))
            return ST_OK;
        return fabs(x) <= FLT_MAX && (double)(float)x == x ? ST_OK : ST_PASS;
    }
    case CONV_DOUBLE:
        return PyFloat_CheckExact(v) ? ST_OK : ST_PASS;
    }
    return ST_OK;
}

/* BIGINT UNSIGNED in long mode: a new reference to the wrapped value, or NULL with *st set */
static PyObject *wrap_u64(PyObject *v, int *st)
{
    if (!PyLong_CheckExact(v)) {
        *st = ST_PASS;
        return NULL;
    }
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            *st = ST_ERR;
            return NULL;
        }
        PyErr_Clear();  /* negative or >= 2**64: the reference names the column */
        *st = ST_PASS;
        return NULL;
    }
    PyObject *out = PyLong_FromLongLong((long long)u);  /* two's complement: u - 2**64 above 2**63-1 */
    if (out == NULL)
        *st = ST_ERR;
    return out;
}

/* a Python converter's result (new reference), or NULL with *st set */
static PyObject *call_conv(const Field *f, PyObject *v, int *st)
{
    PyObject *out = PyObject_CallOneArg(f->call, v);
    if (out == NULL) {
        if (PyErr_ExceptionMatches(PyExc_Exception)) {
            PyErr_Clear();  /* the reference calls it again and raises its typed error */
            *st = ST_PASS;
        } else {
            *st = ST_ERR;
        }
    }
    return out;
}

static int write_field(tt_buf *b, const Field *f, PyObject *v)
{
    if (f->null_branch >= 0) {
        if (tt_buf_reserve(b, 1) < 0)
            return ST_ERR;
        if (v == Py_None) {
            b->data[b->len++] = (char)(f->null_branch << 1);  /* zig-zag of 0 / 1 */
            return ST_OK;
        }
        b->data[b->len++] = (char)((1 - f->null_branch) << 1);
    } else if (v == Py_None) {
        return ST_PASS;
    }
    return write_value(b, f, v);
}

/* one field of a row: look it up, convert, write */
static int row_field(tt_buf *b, const Field *f, PyObject *row, PyObject *ext)
{
    PyObject *v;
    if (f->conv == CONV_EXT) {
        if (ext == Py_None || f->lo >= PyTuple_GET_SIZE(ext))
            return ST_PASS;
        v = PyTuple_GET_ITEM(ext, (Py_ssize_t)f->lo);
    } else {
        v = PyDict_GetItemWithError(row, f->key);  /* borrowed */
        if (v == NULL)
            return PyErr_Occurred() ? ST_ERR : ST_PASS;
    }
    if (v == Py_None || f->conv == CONV_NONE || f->conv == CONV_EXT)
        return write_field(b, f, v);
    int st = ST_OK;
    PyObject *owned = NULL;
    if (f->conv == CONV_U64_WRAP)
        owned = wrap_u64(v, &st);
    else if (f->conv == CONV_CALL)
        owned = call_conv(f, v, &st);
    else
        return (st = check_value(f, v)) != ST_OK ? st : write_field(b, f, v);
    if (owned == NULL)
        return st;
    st = write_field(b, f, owned);
    Py_DECREF(owned);
    return st;
}

static PyObject *Writer_write(Writer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyDict_Check(args[1])
        || (args[2] != Py_None && !PyTuple_Check(args[2]))) {
        PyErr_SetString(PyExc_TypeError, "write(head: bytes, row: dict, ext: tuple | None)");
        return NULL;
    }
    PyObject *head = args[0], *row = args[1], *ext = args[2];
    tt_buf b;
    if (tt_buf_init(&b, PyBytes_GET_SIZE(head) + 16 * self->count + 16) < 0)
        return NULL;
    tt_buf_put(&b, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head));  /* fits: reserved above */
    int st = ST_OK;
    for (Py_ssize_t i = 0; i < self->count && st == ST_OK; i++)
        st = row_field(&b, &self->fields[i], row, ext);
    PyObject *out = NULL;
    if (st == ST_OK)
        out = tt_buf_bytes(&b);
    else if (st == ST_PASS)
        out = Py_NewRef(Py_None);
    tt_buf_free(&b);
    return out;
}

static int Writer_init(Writer *self, PyObject *args, PyObject *kwds)
{
    PyObject *plan;
    if (!PyArg_ParseTuple(args, "O!:Writer", &PyTuple_Type, &plan))
        return -1;
    if (PyTuple_GET_SIZE(plan) != 1 || !PyTuple_Check(PyTuple_GET_ITEM(plan, 0))) {
        PyErr_SetString(PyExc_TypeError, "Writer(plan): plan is encode.KernelPlan(fields)");
        return -1;
    }
    PyObject *fields = PyTuple_GET_ITEM(plan, 0);
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    Field *out = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Field));
    if (out == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *kf = PyTuple_GET_ITEM(fields, i);
        if (!PyTuple_Check(kf) || PyTuple_GET_SIZE(kf) != 7 || !PyUnicode_Check(PyTuple_GET_ITEM(kf, 0))) {
            PyMem_Free(out);
            PyErr_SetString(PyExc_TypeError,
                            "a KernelField is (key: str, avro: int, null_branch: int, conv: int, call, lo: int, hi: int)");
            return -1;
        }
        out[i].key = PyTuple_GET_ITEM(kf, 0);
        out[i].avro = (int)PyLong_AsLong(PyTuple_GET_ITEM(kf, 1));
        out[i].null_branch = (int)PyLong_AsLong(PyTuple_GET_ITEM(kf, 2));
        out[i].conv = (int)PyLong_AsLong(PyTuple_GET_ITEM(kf, 3));
        out[i].call = PyTuple_GET_ITEM(kf, 4);
        out[i].lo = PyLong_AsLongLong(PyTuple_GET_ITEM(kf, 5));
        out[i].hi = PyLong_AsLongLong(PyTuple_GET_ITEM(kf, 6));
        if (PyErr_Occurred() || out[i].avro < 0 || out[i].avro >= AVRO_COUNT || out[i].null_branch < -1
            || out[i].null_branch > 1 || out[i].conv < 0 || out[i].conv >= CONV_COUNT
            || (out[i].conv == CONV_CALL && !PyCallable_Check(out[i].call))) {
            PyMem_Free(out);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "KernelField: avro, null_branch or conv out of range");
            return -1;
        }
    }
    PyMem_Free(self->fields);
    PyObject *old = self->plan;
    self->plan = Py_NewRef(plan);
    Py_XDECREF(old);
    self->fields = out;
    self->count = n;
    return 0;
}

static void Writer_dealloc(Writer *self)
{
    PyMem_Free(self->fields);
    Py_XDECREF(self->plan);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Writer_methods[] = {
    {"write", (PyCFunction)(void (*)(void))Writer_write, METH_FASTCALL,
     "write(head, row, ext) -> head + Avro body, or None when the reference must encode the row"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.connectors.ticdc.avro._encode.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Writer(plan): writes Avro bodies of one schema (see encode.KernelPlan)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Writer_init,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_encode", "Compiled twin of a TiCDC Avro row's encoding (encode.AvroEncoder._encode_row).", -1, NULL,
};

PyMODINIT_FUNC PyInit__encode(void)
{
    if (PyType_Ready(&WriterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Writer", (PyObject *)&WriterType) < 0
        || PyModule_AddIntConstant(m, "AVRO_LONG", AVRO_LONG) < 0
        || PyModule_AddIntConstant(m, "AVRO_FLOAT", AVRO_FLOAT) < 0
        || PyModule_AddIntConstant(m, "AVRO_DOUBLE", AVRO_DOUBLE) < 0
        || PyModule_AddIntConstant(m, "AVRO_STRING", AVRO_STRING) < 0
        || PyModule_AddIntConstant(m, "AVRO_BYTES", AVRO_BYTES) < 0
        || PyModule_AddIntConstant(m, "CONV_NONE", CONV_NONE) < 0
        || PyModule_AddIntConstant(m, "CONV_CALL", CONV_CALL) < 0
        || PyModule_AddIntConstant(m, "CONV_INT_RANGE", CONV_INT_RANGE) < 0
        || PyModule_AddIntConstant(m, "CONV_U64_WRAP", CONV_U64_WRAP) < 0
        || PyModule_AddIntConstant(m, "CONV_FLOAT32", CONV_FLOAT32) < 0
        || PyModule_AddIntConstant(m, "CONV_DOUBLE", CONV_DOUBLE) < 0
        || PyModule_AddIntConstant(m, "CONV_EXT", CONV_EXT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
