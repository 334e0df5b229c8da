/* Reading the records of a plugin batch message straight from its bytes.
 *
 * Every record batch of the plugin protocols is ``repeated opencdc.v1.Record
 * records = 1``. This kernel reads the records that have the shape every
 * protobuf encoder writes (fields in number order, raw data only) and builds
 * ``cdcflow.record.Record`` objects for them; any other record it hands back to
 * Python (``fallback``), which parses it with upb and names any error. What
 * the metadata means (schema references, Avro codecs) stays in Python: the
 * kernel asks for a plan per distinct metadata block and calls the decoders
 * the plan names. See ``cdcflow.convert.protobuf.from_wire``.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <datetime.h>
#include <stdint.h>
#include <string.h>

/* Protobuf tags of the fields the usual record shape holds. */
enum {
    TAG_RECORDS = 0x0A,   /* batch message: records = 1, length-delimited */
    TAG_POSITION = 0x0A,  /* Record.position = 1 */
    TAG_OPERATION = 0x10, /* Record.operation = 2, varint */
    TAG_METADATA = 0x1A,  /* Record.metadata = 3, one map entry each */
    TAG_KEY = 0x22,       /* Record.key = 4 */
    TAG_PAYLOAD = 0x2A,   /* Record.payload = 5 */
    TAG_BEFORE = 0x0A,    /* Change.before = 1 */
    TAG_AFTER = 0x12,     /* Change.after = 2 */
    TAG_RAW_DATA = 0x0A,  /* Data.raw_data = 1 */
};

/* Record's slots in the order the reader fills them. */
enum { SLOT_POSITION, SLOT_OPERATION, SLOT_METADATA, SLOT_KEY, SLOT_BEFORE, SLOT_AFTER, N_SLOTS };
static const char *const SLOT_NAMES[N_SLOTS] = {"position", "operation", "metadata", "key", "before", "after"};

/* What a plan says about one part (key or payload) of the records carrying its metadata. */
enum { REF_NONE = 0, REF_EMPTY_SUBJECT = 1, REF_DECODE = 2 };
enum { PART_KEY = 0, PART_PAYLOAD = 1 };

/* Plan attribute names, interned once at module init (constants). */
static PyObject *str_metadata, *str_refs_metadata, *str_key_mode, *str_payload_mode;

/* -- bytes ------------------------------------------------------------------------------- */

/* A length prefix at *pp: at most 5 varint bytes (lengths below 2^35, far above any message
 * gRPC delivers) and no more than the bytes left before ``end``. Anything else is not the
 * usual shape; the caller hands it to upb, which decides. Returns 0 and advances *pp. */
static int read_length(const unsigned char **pp, const unsigned char *end, Py_ssize_t *out)
{
    const unsigned char *p = *pp;
    uint64_t value = 0;
    for (int shift = 0; shift < 35 && p < end; shift += 7) {
        unsigned char b = *p++;
        value |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            if (value > (uint64_t)(end - p))
                return -1;
            *out = (Py_ssize_t)value;
            *pp = p;
            return 0;
        }
    }
    return -1;
}

/* A Data message in [p, end): absent (empty Data: no raw nor structured data, which reads
 * as None) or exactly one raw_data field. Sets *data to NULL for absent. Structured data,
 * repeated or unknown fields: -1. */
static int read_data(const unsigned char *p, const unsigned char *end, const unsigned char **data, Py_ssize_t *len)
{
    if (p == end) {
        *data = NULL;
        *len = 0;
        return 0;
    }
    if (*p != TAG_RAW_DATA)
        return -1;
    p++;
    if (read_length(&p, end, len) < 0 || p + *len != end)
        return -1;
    *data = p;
    return 0;
}

/* A length-delimited field's value at *pp (just after its tag): [*value, *value_end). */
static int read_field(const unsigned char **pp, const unsigned char *end, const unsigned char **value,
                      const unsigned char **value_end)
{
    Py_ssize_t n;
    if (read_length(pp, end, &n) < 0)
        return -1;
    *value = *pp;
    *value_end = *pp + n;
    *pp += n;
    return 0;
}

/* The fields of one record in the usual shape, pointing into the message. */
typedef struct {
    const unsigned char *position;
    Py_ssize_t position_len;
    int operation;
    const unsigned char *block; /* the run of metadata map entries, kept as bytes */
    Py_ssize_t block_len;
    const unsigned char *part[3]; /* key, before, after; NULL when absent */
    Py_ssize_t part_len[3];
} Fields;

enum { PART_KEY_DATA = 0, PART_BEFORE_DATA = 1, PART_AFTER_DATA = 2 };

/* Split record [p, end) into its fields; -1 when it is not in the usual shape. */
static int read_fields(const unsigned char *p, const unsigned char *end, int n_operations, Fields *f)
{
    const unsigned char *v, *v_end;
    f->position = p;
    f->position_len = 0;
    f->operation = 0;
    f->part[0] = f->part[1] = f->part[2] = NULL;
    if (p < end && *p == TAG_POSITION) {
        p++;
        if (read_field(&p, end, &v, &v_end) < 0)
            return -1;
        f->position = v;
        f->position_len = v_end - v;
    }
    if (p < end && *p == TAG_OPERATION) {
        /* a valid operation number is one varint byte; longer forms go to upb */
        if (p + 1 >= end || p[1] >= n_operations)
            return -1;
        f->operation = p[1];
        p += 2;
    }
    f->block = p;
    while (p < end && *p == TAG_METADATA) {
        p++;
        if (read_field(&p, end, &v, &v_end) < 0)
            return -1;
    }
    f->block_len = p - f->block;
    if (p < end && *p == TAG_KEY) {
        p++;
        if (read_field(&p, end, &v, &v_end) < 0 ||
            read_data(v, v_end, &f->part[PART_KEY_DATA], &f->part_len[PART_KEY_DATA]) < 0)
            return -1;
    }
    if (p < end && *p == TAG_PAYLOAD) {
        const unsigned char *change, *change_end;
        p++;
        if (read_field(&p, end, &change, &change_end) < 0)
            return -1;
        if (change < change_end && *change == TAG_BEFORE) {
            change++;
            if (read_field(&change, change_end, &v, &v_end) < 0 ||
                read_data(v, v_end, &f->part[PART_BEFORE_DATA], &f->part_len[PART_BEFORE_DATA]) < 0)
                return -1;
        }
        if (change < change_end && *change == TAG_AFTER) {
            change++;
            if (read_field(&change, change_end, &v, &v_end) < 0 ||
                read_data(v, v_end, &f->part[PART_AFTER_DATA], &f->part_len[PART_AFTER_DATA]) < 0)
                return -1;
        }
        if (change != change_end)
            return -1;
    }
    return p == end ? 0 : -1;
}

/* -- Avro records of scalar fields ---------------------------------------------------------
 *
 * Structured data travels as Avro bytes; ``avro_values.Codec.decode`` (a generated Python
 * reader per schema) turns them back into a dict. For a record schema whose fields are all
 * scalars (or unions of scalars) an AvroDecoder does the same in C; for anything it does not
 * read (bytes that do not fit, values out of range) it calls the codec's decode, which gives
 * the reference answer or error. Values match the generated reader's exactly: the same int,
 * float, str, bytes, bool, date, datetime and timedelta objects.
 */

/* Field kinds (``convert.protobuf._AVRO_KINDS`` numbers them alike). */
enum {
    AVRO_NULL = 0, AVRO_BOOLEAN, AVRO_LONG, AVRO_FLOAT, AVRO_DOUBLE, AVRO_BYTES, AVRO_STRING,
    AVRO_DATE, AVRO_DATETIME, AVRO_TIME, AVRO_BIGINT, AVRO_DECIMAL, AVRO_DECIMAL_TEXT, N_AVRO_KINDS,
};
#define AVRO_MAX_BRANCHES 16

/* Constants set at module init: the epoch the logical types count from, decimal.Decimal and
 * the names of the decimal context methods. */
static PyObject *epoch_date, *epoch_datetime, *decimal_type, *str_create_decimal, *str_scaleb;

typedef struct {
    int n_branches;                  /* 0: a plain field of kind branch[0]; else a union */
    unsigned char branch[AVRO_MAX_BRANCHES];
    PyObject *context;               /* AVRO_DECIMAL: the decimal.Context of the precision */
    PyObject *neg_scale;             /* AVRO_DECIMAL: minus the scale, an int */
} AvroField;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n_fields;
    PyObject *names;     /* tuple of str: the dict keys, in field order */
    PyObject *fallback;  /* the codec's decode: the reference for what C does not read */
    AvroField *fields;
    vectorcallfunc vectorcall;
} AvroDecoder;

static PyTypeObject AvroDecoderType;

/* An Avro varint as the generated reader takes it: at most 10 bytes, value below 2^64. */
static int avro_varint(const unsigned char **pp, const unsigned char *end, uint64_t *out)
{
    const unsigned char *p = *pp;
    uint64_t value = 0;
    for (int i = 0; i < 10 && p < end; i++) {
        unsigned char b = *p++;
        if (i == 9 && b > 1)
            return -1; /* bits beyond 64 */
        value |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            *out = value;
            *pp = p;
            return 0;
        }
    }
    return -1;
}

static int avro_long(const unsigned char **pp, const unsigned char *end, int64_t *out)
{
    uint64_t z;
    if (avro_varint(pp, end, &z) < 0)
        return -1;
    *out = (int64_t)(z >> 1) ^ -(int64_t)(z & 1); /* zig-zag */
    return 0;
}

/* A length-prefixed byte string: [*data, *data + *len). */
static int avro_raw(const unsigned char **pp, const unsigned char *end, const unsigned char **data, Py_ssize_t *len)
{
    int64_t n;
    if (avro_long(pp, end, &n) < 0 || n < 0 || n > end - *pp)
        return -1;
    *data = *pp;
    *len = (Py_ssize_t)n;
    *pp += n;
    return 0;
}

/* A timedelta of ``us`` microseconds (what ``timedelta(0, 0, us)`` makes). */
static PyObject *delta_from_us(int64_t us)
{
    const int64_t per_day = INT64_C(86400000000);
    int64_t days = us / per_day, rest = us % per_day;
    if (rest < 0) { /* floor division, so the remainder fits the seconds and microseconds */
        rest += per_day;
        days -= 1;
    }
    return PyDelta_FromDSU((int)days, (int)(rest / 1000000), (int)(rest % 1000000));
}

/* ``epoch + timedelta(days or microseconds)``: the same arithmetic as the generated reader. */
static PyObject *epoch_plus(PyObject *epoch, int64_t count, int in_days)
{
    if (in_days && (count > 999999999 || count < -999999999))
        return NULL; /* beyond timedelta: the codec decides */
    PyObject *delta = in_days ? PyDelta_FromDSU((int)count, 0, 0) : delta_from_us(count);
    if (delta == NULL)
        return NULL;
    PyObject *v = PyNumber_Add(epoch, delta);
    Py_DECREF(delta);
    return v;
}

/* A fixed-point decimal: the two's-complement unscaled integer, at the field's precision and
 * scale (``context.create_decimal(unscaled).scaleb(-scale, context)``, as the codec reads it). */
static PyObject *avro_decimal(const AvroField *field, const unsigned char *data, Py_ssize_t len)
{
    PyObject *unscaled = _PyLong_FromByteArray(data, (size_t)len, 0, 1);
    if (unscaled == NULL)
        return NULL;
    PyObject *exact = PyObject_CallMethodOneArg(field->context, str_create_decimal, unscaled);
    Py_DECREF(unscaled);
    if (exact == NULL)
        return NULL;
    PyObject *value = PyObject_CallMethodObjArgs(exact, str_scaleb, field->neg_scale, field->context, NULL);
    Py_DECREF(exact);
    return value;
}

/* ``Decimal(text)`` of a decimal carried as its text (its own scale kept). */
static PyObject *avro_decimal_text(const unsigned char *data, Py_ssize_t len)
{
    PyObject *text = PyUnicode_DecodeUTF8((const char *)data, len, NULL);
    if (text == NULL)
        return NULL;
    PyObject *value = PyObject_CallOneArg(decimal_type, text);
    Py_DECREF(text);
    return value;
}

/* One value of a scalar ``kind`` of ``field`` at *pp; NULL (an error may be set) when it does
 * not read. */
static PyObject *avro_scalar(const AvroField *field, int kind, const unsigned char **pp, const unsigned char *end)
{
    const unsigned char *data;
    Py_ssize_t len;
    int64_t n;
    switch (kind) {
    case AVRO_NULL:
        Py_RETURN_NONE;
    case AVRO_BOOLEAN:
        if (*pp >= end || **pp > 1)
            return NULL;
        return PyBool_FromLong(*(*pp)++);
    case AVRO_LONG:
        return avro_long(pp, end, &n) < 0 ? NULL : PyLong_FromLongLong(n);
    case AVRO_FLOAT:
        if (end - *pp < 4)
            return NULL;
        *pp += 4;
        return PyFloat_FromDouble(PyFloat_Unpack4((const char *)*pp - 4, 1));
    case AVRO_DOUBLE:
        if (end - *pp < 8)
            return NULL;
        *pp += 8;
        return PyFloat_FromDouble(PyFloat_Unpack8((const char *)*pp - 8, 1));
    case AVRO_BYTES:
        return avro_raw(pp, end, &data, &len) < 0 ? NULL : PyBytes_FromStringAndSize((const char *)data, len);
    case AVRO_STRING:
        return avro_raw(pp, end, &data, &len) < 0 ? NULL : PyUnicode_DecodeUTF8((const char *)data, len, NULL);
    case AVRO_DATE:
        return avro_long(pp, end, &n) < 0 ? NULL : epoch_plus(epoch_date, n, 1);
    case AVRO_DATETIME:
        return avro_long(pp, end, &n) < 0 ? NULL : epoch_plus(epoch_datetime, n, 0);
    case AVRO_TIME:
        return avro_long(pp, end, &n) < 0 ? NULL : delta_from_us(n);
    case AVRO_BIGINT:
        return avro_raw(pp, end, &data, &len) < 0 ? NULL : _PyLong_FromByteArray(data, (size_t)len, 0, 1);
    case AVRO_DECIMAL:
        return avro_raw(pp, end, &data, &len) < 0 ? NULL : avro_decimal(field, data, len);
    case AVRO_DECIMAL_TEXT:
        return avro_raw(pp, end, &data, &len) < 0 ? NULL : avro_decimal_text(data, len);
    }
    return NULL;
}

/* The dict of record bytes [p, end), or NULL (an error may be set) when C does not read them. */
static PyObject *avro_read_record(AvroDecoder *self, const unsigned char *p, const unsigned char *end)
{
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < self->n_fields; i++) {
        const AvroField *field = &self->fields[i];
        int kind = field->branch[0];
        if (field->n_branches) {
            int64_t index;
            if (avro_long(&p, end, &index) < 0 || index < 0 || index >= field->n_branches)
                goto fail;
            kind = field->branch[index];
        }
        PyObject *value = avro_scalar(field, kind, &p, end);
        if (value == NULL)
            goto fail;
        int rc = PyDict_SetItem(out, PyTuple_GET_ITEM(self->names, i), value);
        Py_DECREF(value);
        if (rc < 0)
            goto fail;
    }
    if (p == end)
        return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* The decoded value of ``len`` bytes at ``data``; the fallback's answer when C does not read them. */
static PyObject *avro_decode(AvroDecoder *self, const unsigned char *data, Py_ssize_t len, PyObject *as_bytes)
{
    PyObject *value = avro_read_record(self, data, data + len);
    if (value != NULL)
        return value;
    if (PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError))
            return NULL;
        PyErr_Clear(); /* the codec names what is wrong, or reads what C does not */
    }
    if (as_bytes != NULL)
        return PyObject_CallOneArg(self->fallback, as_bytes);
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)data, len);
    if (bytes == NULL)
        return NULL;
    value = PyObject_CallOneArg(self->fallback, bytes);
    Py_DECREF(bytes);
    return value;
}

static PyObject *AvroDecoder_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    AvroDecoder *self = (AvroDecoder *)callable;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "AvroDecoder takes one argument, the data");
        return NULL;
    }
    if (!PyBytes_Check(args[0])) /* another bytes-like object: the codec reads it */
        return PyObject_CallOneArg(self->fallback, args[0]);
    return avro_decode(self, (const unsigned char *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), args[0]);
}

static int avro_kind(PyObject *item, unsigned char *kind)
{
    long k = PyLong_AsLong(item);
    if (k == -1 && PyErr_Occurred())
        return -1;
    if (k < 0 || k >= N_AVRO_KINDS) {
        PyErr_Format(PyExc_ValueError, "unknown Avro field kind %ld", k);
        return -1;
    }
    *kind = (unsigned char)k;
    return 0;
}

/* Release what fields [0, n) hold, and the array. */
static void free_fields(AvroField *fields, Py_ssize_t n)
{
    if (fields == NULL)
        return;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_CLEAR(fields[i].context);
        Py_CLEAR(fields[i].neg_scale);
    }
    PyMem_Free(fields);
}

/* Field ``field`` from its kind spec (a kind number, or a tuple of them for a union) and its
 * decimal parameters (None, or (decimal.Context, minus the scale) for a decimal branch). */
static int read_field_spec(AvroField *field, PyObject *kind, PyObject *decimal)
{
    if (PyTuple_Check(kind)) { /* a union: its branches' kinds */
        Py_ssize_t nb = PyTuple_GET_SIZE(kind);
        if (nb < 1 || nb > AVRO_MAX_BRANCHES) {
            PyErr_Format(PyExc_ValueError, "AvroDecoder: a union of 1 to %d branches", AVRO_MAX_BRANCHES);
            return -1;
        }
        field->n_branches = (int)nb;
        for (Py_ssize_t b = 0; b < nb; b++)
            if (avro_kind(PyTuple_GET_ITEM(kind, b), &field->branch[b]) < 0)
                return -1;
    } else if (avro_kind(kind, &field->branch[0]) < 0) {
        return -1;
    }
    int needs_decimal = 0;
    for (int b = 0; b < (field->n_branches ? field->n_branches : 1); b++)
        needs_decimal |= field->branch[b] == AVRO_DECIMAL;
    if (!needs_decimal)
        return 0;
    if (!PyTuple_Check(decimal) || PyTuple_GET_SIZE(decimal) != 2 || !PyLong_Check(PyTuple_GET_ITEM(decimal, 1))) {
        PyErr_SetString(PyExc_ValueError, "AvroDecoder: a decimal field needs (context, -scale)");
        return -1;
    }
    field->context = Py_NewRef(PyTuple_GET_ITEM(decimal, 0));
    field->neg_scale = Py_NewRef(PyTuple_GET_ITEM(decimal, 1));
    return 0;
}

static PyObject *AvroDecoder_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"names", "kinds", "decimals", "fallback", NULL};
    PyObject *names, *kinds, *decimals, *fallback;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O!O:AvroDecoder", kwlist, &PyTuple_Type, &names,
                                     &PyTuple_Type, &kinds, &PyTuple_Type, &decimals, &fallback))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(kinds) != n || PyTuple_GET_SIZE(decimals) != n || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_ValueError, "AvroDecoder: one kind and one decimal spec per name, a callable fallback");
        return NULL;
    }
    AvroField *fields = PyMem_Calloc(n ? (size_t)n : 1, sizeof(AvroField));
    if (fields == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(names, i))) {
            PyErr_SetString(PyExc_TypeError, "AvroDecoder: field names must be str");
            goto fail;
        }
        if (read_field_spec(&fields[i], PyTuple_GET_ITEM(kinds, i), PyTuple_GET_ITEM(decimals, i)) < 0)
            goto fail;
    }
    AvroDecoder *self = (AvroDecoder *)type->tp_alloc(type, 0);
    if (self == NULL)
        goto fail;
    self->n_fields = n;
    self->names = Py_NewRef(names);
    self->fallback = Py_NewRef(fallback);
    self->fields = fields;
    self->vectorcall = AvroDecoder_vectorcall;
    return (PyObject *)self;
fail:
    free_fields(fields, n);
    return NULL;
}

static int AvroDecoder_traverse(AvroDecoder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->names);
    Py_VISIT(self->fallback); /* a bound method of the codec: the codec may hold this decoder */
    for (Py_ssize_t i = 0; self->fields != NULL && i < self->n_fields; i++)
        Py_VISIT(self->fields[i].context);
    return 0;
}

static int AvroDecoder_clear(AvroDecoder *self)
{
    Py_CLEAR(self->names);
    Py_CLEAR(self->fallback);
    return 0;
}

static void AvroDecoder_dealloc(AvroDecoder *self)
{
    PyObject_GC_UnTrack(self);
    AvroDecoder_clear(self);
    free_fields(self->fields, self->n_fields);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(AvroDecoder_doc,
"AvroDecoder(names, kinds, decimals, fallback)\n\n"
"Callable: Avro bytes of a record of scalar fields -> dict {name: value}. ``kinds`` holds one\n"
"kind number per field, or a tuple of them for a union; ``decimals`` per field None or, for a\n"
"fixed-point decimal, (decimal.Context, -scale). Bytes it does not read go to\n"
"``fallback(data)`` (the codec's decode), which gives the answer or the error.");

static PyTypeObject AvroDecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.convert._wire.AvroDecoder",
    .tp_basicsize = sizeof(AvroDecoder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = AvroDecoder_doc,
    .tp_new = AvroDecoder_new,
    .tp_traverse = (traverseproc)AvroDecoder_traverse,
    .tp_clear = (inquiry)AvroDecoder_clear,
    .tp_dealloc = (destructor)AvroDecoder_dealloc,
    .tp_vectorcall_offset = offsetof(AvroDecoder, vectorcall),
    .tp_call = PyVectorcall_Call,
};

/* -- the Reader type ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyTypeObject *record_type;
    Py_ssize_t slot_offset[N_SLOTS]; /* where Record keeps each slot, from its member descriptors */
    PyObject *operations;            /* tuple: Operation members by number */
    PyObject *handback;              /* exception types that send a record back to Python */
} Reader;

/* The offset of ``name``'s slot in ``type``: the class must define it as a plain __slots__ member. */
static int slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    if (descr == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s has no slot %s", type->tp_name, name);
        }
        return -1;
    }
    int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type) && ((PyDescrObject *)descr)->d_type == type &&
             ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
    if (ok)
        *offset = ((PyMemberDescrObject *)descr)->d_member->offset;
    Py_DECREF(descr);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", type->tp_name, name);
        return -1;
    }
    return 0;
}

static int Reader_init(Reader *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"record_type", "operations", "handback", NULL};
    PyTypeObject *type;
    PyObject *operations, *handback;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O!:Reader", kwlist, &PyType_Type, &type, &PyTuple_Type,
                                     &operations, &PyTuple_Type, &handback))
        return -1;
    /* Records are made without calling __init__ (it only stores its arguments): that is safe
     * only for a class whose instances are exactly the six slots and plain object.__new__. */
    if (type->tp_dictoffset != 0 || type->tp_new != PyBaseObject_Type.tp_new || !(type->tp_flags & Py_TPFLAGS_HAVE_GC)) {
        PyErr_Format(PyExc_TypeError, "%s is not a plain __slots__ class", type->tp_name);
        return -1;
    }
    for (int i = 0; i < N_SLOTS; i++)
        if (slot_offset(type, SLOT_NAMES[i], &self->slot_offset[i]) < 0)
            return -1;
    if (PyTuple_GET_SIZE(operations) == 0 || PyTuple_GET_SIZE(operations) > 0x80) {
        PyErr_SetString(PyExc_ValueError, "operations must hold 1 to 128 members");
        return -1;
    }
    Py_INCREF(type);
    Py_XSETREF(self->record_type, type);
    Py_INCREF(operations);
    Py_XSETREF(self->operations, operations);
    Py_INCREF(handback);
    Py_XSETREF(self->handback, handback);
    return 0;
}

static void Reader_dealloc(Reader *self)
{
    Py_XDECREF(self->record_type);
    Py_XDECREF(self->operations);
    Py_XDECREF(self->handback);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The plan for the metadata block the current records carry, and its decoders once asked for. */
typedef struct {
    const unsigned char *block; /* NULL before the first record */
    Py_ssize_t block_len;
    PyObject *metadata;      /* the metadata as it arrived */
    PyObject *refs_metadata; /* the metadata once schema references were used; NULL without any */
    PyObject *plan;
    int mode[2];             /* REF_* per part */
    PyObject *decode[2];     /* per part; NULL until resolved */
} PlanState;

static void plan_clear(PlanState *s)
{
    Py_CLEAR(s->metadata);
    Py_CLEAR(s->refs_metadata);
    Py_CLEAR(s->plan);
    Py_CLEAR(s->decode[0]);
    Py_CLEAR(s->decode[1]);
}

static int read_mode(PyObject *plan, PyObject *name, int *mode)
{
    PyObject *v = PyObject_GetAttr(plan, name);
    if (v == NULL)
        return -1;
    long m = PyLong_AsLong(v);
    Py_DECREF(v);
    if (m == -1 && PyErr_Occurred())
        return -1;
    if (m < REF_NONE || m > REF_DECODE) {
        PyErr_Format(PyExc_SystemError, "metadata plan: %R = %ld is not a reference mode", name, m);
        return -1;
    }
    *mode = (int)m;
    return 0;
}

/* Make the plan of the block [block, block + len) current: from ``plans`` (bytes -> plan) or
 * ``new_plan(block)``. A failed plan leaves the previous one current. */
static int plan_switch(PlanState *s, const unsigned char *block, Py_ssize_t len, PyObject *plans, PyObject *new_plan)
{
    PyObject *key = PyBytes_FromStringAndSize((const char *)block, len);
    if (key == NULL)
        return -1;
    PyObject *plan = PyDict_GetItemWithError(plans, key); /* borrowed */
    if (plan != NULL)
        Py_INCREF(plan);
    else if (!PyErr_Occurred())
        plan = PyObject_CallOneArg(new_plan, key);
    Py_DECREF(key);
    if (plan == NULL)
        return -1;
    PyObject *metadata = PyObject_GetAttr(plan, str_metadata);
    PyObject *refs_metadata = metadata ? PyObject_GetAttr(plan, str_refs_metadata) : NULL;
    int mode[2];
    if (refs_metadata == NULL || read_mode(plan, str_key_mode, &mode[0]) < 0 ||
        read_mode(plan, str_payload_mode, &mode[1]) < 0) {
        Py_XDECREF(metadata);
        Py_XDECREF(refs_metadata);
        Py_DECREF(plan);
        return -1;
    }
    if (!PyDict_CheckExact(metadata) || (refs_metadata != Py_None && !PyDict_CheckExact(refs_metadata))) {
        PyErr_SetString(PyExc_SystemError, "metadata plan: metadata must be dicts");
        Py_DECREF(metadata);
        Py_DECREF(refs_metadata);
        Py_DECREF(plan);
        return -1;
    }
    if (refs_metadata == Py_None)
        Py_CLEAR(refs_metadata);
    plan_clear(s);
    s->block = block;
    s->block_len = len;
    s->plan = plan;
    s->metadata = metadata;
    s->refs_metadata = refs_metadata;
    s->mode[0] = mode[0];
    s->mode[1] = mode[1];
    return 0;
}

/* The current plan's decoder for ``part``: ``resolve(plan, part, position)`` the first time. */
static PyObject *plan_decoder(PlanState *s, int part, PyObject *resolve, PyObject *position)
{
    if (s->decode[part] == NULL) {
        PyObject *part_number = PyLong_FromLong(part);
        if (part_number == NULL)
            return NULL;
        s->decode[part] = PyObject_CallFunctionObjArgs(resolve, s->plan, part_number, position, NULL);
        Py_DECREF(part_number);
    }
    return s->decode[part]; /* borrowed from the state */
}

/* Outcome of reading one record. */
enum { READ_OK = 0, READ_HAND_BACK = 1, READ_ERROR = -1 };

/* A failure from Python code the plan runs: a handback-class exception means "Python decides"
 * (cleared, READ_HAND_BACK); anything else propagates. */
static int python_failed(Reader *self)
{
    if (PyErr_ExceptionMatches(self->handback)) {
        PyErr_Clear();
        return READ_HAND_BACK;
    }
    return READ_ERROR;
}

/* ``decode(data)`` into *value, for the ``len`` bytes at ``data``. An AvroDecoder reads them in
 * place; any other decoder gets them as a bytes object. */
static int decode_into(PyObject **value, PyObject *decode, const unsigned char *data, Py_ssize_t len)
{
    PyObject *decoded;
    if (Py_IS_TYPE(decode, &AvroDecoderType)) {
        decoded = avro_decode((AvroDecoder *)decode, data, len, NULL);
    } else {
        PyObject *bytes = PyBytes_FromStringAndSize((const char *)data, len);
        if (bytes == NULL)
            return -1;
        decoded = PyObject_CallOneArg(decode, bytes);
        Py_DECREF(bytes);
    }
    if (decoded == NULL)
        return -1;
    *value = decoded;
    return 0;
}

/* Build the Record of fields ``f`` into *out, applying the current plan. */
static int build_record(Reader *self, const Fields *f, PlanState *s, PyObject *resolve, PyObject **out)
{
    PyObject *values[N_SLOTS] = {NULL};
    int status = READ_ERROR;
    values[SLOT_POSITION] = PyBytes_FromStringAndSize((const char *)f->position, f->position_len);
    if (values[SLOT_POSITION] == NULL)
        goto done;
    int has_key = f->part[PART_KEY_DATA] != NULL;
    int has_payload = f->part[PART_BEFORE_DATA] != NULL || f->part[PART_AFTER_DATA] != NULL;
    /* The references count only when the part they name is there (as from_proto decides). */
    int use_refs = s->refs_metadata != NULL &&
                   ((has_key && s->mode[PART_KEY] != REF_NONE) || (has_payload && s->mode[PART_PAYLOAD] != REF_NONE));
    for (int i = 0; i < 3; i++) { /* key, before, after: decoded when a reference names a schema */
        if (f->part[i] == NULL)
            continue;
        int part = i == PART_KEY_DATA ? PART_KEY : PART_PAYLOAD;
        if (use_refs && s->mode[part] == REF_DECODE) {
            PyObject *decode = plan_decoder(s, part, resolve, values[SLOT_POSITION]);
            if (decode == NULL || decode_into(&values[SLOT_KEY + i], decode, f->part[i], f->part_len[i]) < 0) {
                status = python_failed(self);
                goto done;
            }
        } else {
            values[SLOT_KEY + i] = PyBytes_FromStringAndSize((const char *)f->part[i], f->part_len[i]);
            if (values[SLOT_KEY + i] == NULL)
                goto done;
        }
    }
    values[SLOT_METADATA] = PyDict_Copy(use_refs ? s->refs_metadata : s->metadata);
    if (values[SLOT_METADATA] == NULL)
        goto done;
    values[SLOT_OPERATION] = PyTuple_GET_ITEM(self->operations, f->operation);
    Py_INCREF(values[SLOT_OPERATION]);
    /* tp_alloc zero-fills and GC-tracks the instance; an empty slot reads as "not set", so it
     * is consistent at every step. __init__ is skipped: it would only store these values. */
    PyObject *record = self->record_type->tp_alloc(self->record_type, 0);
    if (record == NULL)
        goto done;
    for (int i = 0; i < N_SLOTS; i++) {
        PyObject *v = values[i] != NULL ? values[i] : Py_NewRef(Py_None);
        *(PyObject **)((char *)record + self->slot_offset[i]) = v; /* the record takes the reference */
        values[i] = NULL;
    }
    *out = record;
    status = READ_OK;
done:
    for (int i = 0; i < N_SLOTS; i++)
        Py_XDECREF(values[i]);
    return status;
}

/* One record [start, end) of ``buf`` into *out: READ_OK, READ_HAND_BACK or READ_ERROR. */
static int read_record(Reader *self, const unsigned char *start, const unsigned char *end, int n_operations,
                       PlanState *s, PyObject *plans, PyObject *new_plan, PyObject *resolve, PyObject **out)
{
    Fields f;
    if (read_fields(start, end, n_operations, &f) < 0)
        return READ_HAND_BACK;
    if (s->block == NULL || s->block_len != f.block_len || memcmp(s->block, f.block, (size_t)f.block_len) != 0) {
        if (plan_switch(s, f.block, f.block_len, plans, new_plan) < 0)
            return python_failed(self);
    }
    return build_record(self, &f, s, resolve, out);
}

/* Count the records of a batch message: -1 when it holds anything but well-framed field-1
 * records (other fields, a record running past the end): Python reads such a message. */
static Py_ssize_t count_records(const unsigned char *p, const unsigned char *end)
{
    Py_ssize_t count = 0, n;
    while (p < end) {
        if (*p++ != TAG_RECORDS || read_length(&p, end, &n) < 0)
            return -1;
        p += n;
        count++;
    }
    return count;
}

PyDoc_STRVAR(Reader_read_doc,
"read(message, plans, new_plan, resolve, fallback) -> list | None\n\n"
"The records of a batch message's bytes, or None when the message is not a plain run of\n"
"well-framed records (Python reads it then). Per distinct metadata block: ``plans[block]``\n"
"or ``new_plan(block)`` (an object with metadata, refs_metadata, key_mode, payload_mode);\n"
"``resolve(plan, part, position)`` gives a part's decoder (part 0 key, 1 payload);\n"
"``fallback(start, end, index)`` gives the record at message[start:end] (or None) for any\n"
"record the kernel does not read itself.");

static PyObject *Reader_read(Reader *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "read() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    if (self->record_type == NULL) {
        PyErr_SetString(PyExc_TypeError, "Reader was not initialised");
        return NULL;
    }
    PyObject *message = args[0], *plans = args[1], *new_plan = args[2], *resolve = args[3], *fallback = args[4];
    if (!PyDict_CheckExact(plans)) {
        PyErr_SetString(PyExc_TypeError, "read() needs a plans dict");
        return NULL;
    }
    if (!PyBytes_CheckExact(message))
        Py_RETURN_NONE; /* another bytes-like object: Python reads it */
    /* The message bytes are immutable and held by the caller for the whole call, so the
     * pointers into them (the current metadata block) stay valid while Python callbacks run. */
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(message);
    const unsigned char *end = buf + PyBytes_GET_SIZE(message);
    Py_ssize_t count = count_records(buf, end);
    if (count < 0)
        Py_RETURN_NONE;
    PyObject *out = PyList_New(count);
    if (out == NULL)
        return NULL;
    int n_operations = (int)PyTuple_GET_SIZE(self->operations);
    PlanState state = {0};
    const unsigned char *p = buf;
    for (Py_ssize_t index = 0; index < count; index++) {
        Py_ssize_t size = 0;
        p++; /* the records tag, checked by count_records */
        (void)read_length(&p, end, &size); /* cannot fail: count_records read the same bytes */
        const unsigned char *start = p;
        p += size;
        PyObject *record = NULL;
        int status = read_record(self, start, p, n_operations, &state, plans, new_plan, resolve, &record);
        if (status == READ_HAND_BACK)
            record = PyObject_CallFunction(fallback, "nnn", (Py_ssize_t)(start - buf), (Py_ssize_t)(p - buf), index);
        if (record == NULL) { /* READ_ERROR, or the fallback raised */
            plan_clear(&state);
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, index, record);
    }
    plan_clear(&state);
    return out;
}

static PyMethodDef Reader_methods[] = {
    {"read", (PyCFunction)(void (*)(void))Reader_read, METH_FASTCALL, Reader_read_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(Reader_doc,
"Reader(record_type, operations, handback)\n\n"
"Reads batch messages into ``record_type`` objects (a __slots__ class with position,\n"
"operation, metadata, key, before, after). ``operations``: the Operation members by number.\n"
"``handback``: exception types which, raised by a plan, resolver or decoder, send the record\n"
"to the fallback instead of failing the call.");

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.convert._wire.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = Reader_doc,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Reader_init,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_methods = Reader_methods,
};

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT, "_wire", "Batch messages of opencdc.v1.Record read in C (see Reader).", -1, NULL,
};

PyMODINIT_FUNC PyInit__wire(void)
{
    str_metadata = PyUnicode_InternFromString("metadata");
    str_refs_metadata = PyUnicode_InternFromString("refs_metadata");
    str_key_mode = PyUnicode_InternFromString("key_mode");
    str_payload_mode = PyUnicode_InternFromString("payload_mode");
    if (!str_metadata || !str_refs_metadata || !str_key_mode || !str_payload_mode)
        return NULL;
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL)
        return NULL;
    epoch_date = PyDate_FromDate(1970, 1, 1);
    epoch_datetime = PyDateTime_FromDateAndTime(1970, 1, 1, 0, 0, 0, 0);
    if (epoch_date == NULL || epoch_datetime == NULL)
        return NULL;
    PyObject *decimal_module = PyImport_ImportModule("decimal");
    if (decimal_module == NULL)
        return NULL;
    decimal_type = PyObject_GetAttrString(decimal_module, "Decimal");
    Py_DECREF(decimal_module);
    str_create_decimal = PyUnicode_InternFromString("create_decimal");
    str_scaleb = PyUnicode_InternFromString("scaleb");
    if (decimal_type == NULL || str_create_decimal == NULL || str_scaleb == NULL)
        return NULL;
    if (PyType_Ready(&ReaderType) < 0 || PyType_Ready(&AvroDecoderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&wire_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddType(m, &ReaderType) < 0 || PyModule_AddType(m, &AvroDecoderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
