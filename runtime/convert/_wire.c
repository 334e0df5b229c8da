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
#include <stdint.h>
#include <string.h>

#include "recordslots.h"

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

/* -- the Reader type ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyTypeObject *record_type;
    Py_ssize_t slot_offset[N_SLOTS]; /* where Record keeps each slot, from its member descriptors */
    PyObject *operations;            /* tuple: Operation members by number */
    PyObject *handback;              /* exception types that send a record back to Python */
} Reader;

/* Where ``type`` keeps the six record slots. Records are made (Reader) and read (Writer)
 * through these offsets, skipping __init__ and attribute lookup: that is safe only for a
 * class whose instances are exactly the six slots and plain object.__new__. */
static int record_slots(PyTypeObject *type, Py_ssize_t offsets[N_SLOTS])
{
    if (type->tp_dictoffset != 0 || type->tp_new != PyBaseObject_Type.tp_new || !(type->tp_flags & Py_TPFLAGS_HAVE_GC)) {
        PyErr_Format(PyExc_TypeError, "%s is not a plain __slots__ class", type->tp_name);
        return -1;
    }
    int at = rs_slot_offsets(type, SLOT_NAMES, N_SLOTS, offsets);
    if (at < 0)
        return -1;
    if (at < N_SLOTS) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", type->tp_name, SLOT_NAMES[at]);
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
    if (record_slots(type, self->slot_offset) < 0)
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

/* ``decode(data)`` into *value, for the ``len`` bytes at ``data`` (the codec's decoder: the Avro
 * kernel's compiled plan when it covers the schema, ``Codec.decode`` otherwise). */
static int decode_into(PyObject **value, PyObject *decode, const unsigned char *data, Py_ssize_t len)
{
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)data, len);
    if (bytes == NULL)
        return -1;
    PyObject *decoded = PyObject_CallOneArg(decode, bytes);
    Py_DECREF(bytes);
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

/* -- the Writer type: records to batch messages (the host's side) ------------------------
 *
 * The inverse of the Reader: records whose data are raw bytes (or absent) and whose
 * metadata is a dict of str are written as ``to_wire`` writes them, framed straight into
 * the batch messages, without a bytes object per record. Any other record goes through
 * Python: ``prepare(record)`` gives what ``to_wire`` would write (structured data encoded
 * as Avro, schema references in the metadata); when that is still not plain (Struct data,
 * unusual types), ``serialize(prepared)`` gives the record's bytes or raises Python's error. */

typedef struct {
    PyObject_HEAD
    PyTypeObject *record_type;
    Py_ssize_t slot_offset[N_SLOTS];
} Writer;

static int Writer_init(Writer *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"record_type", NULL};
    PyTypeObject *type;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!:Writer", kwlist, &PyType_Type, &type))
        return -1;
    if (record_slots(type, self->slot_offset) < 0)
        return -1;
    Py_INCREF(type);
    Py_XSETREF(self->record_type, type);
    return 0;
}

static void Writer_dealloc(Writer *self)
{
    Py_XDECREF(self->record_type);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t varint_size(uint64_t v)
{
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static unsigned char *put_varint(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

/* Bytes of a length-delimited field holding ``len`` bytes: tag, length, value. */
static Py_ssize_t field_size(Py_ssize_t len)
{
    return 1 + varint_size((uint64_t)len) + len;
}

static unsigned char *put_field(unsigned char *p, unsigned char tag, const char *data, Py_ssize_t len)
{
    *p++ = tag;
    p = put_varint(p, (uint64_t)len);
    memcpy(p, data, (size_t)len);
    return p + len;
}

/* The metadata block of the records being written: the last metadata dict seen and its map
 * entries encoded. Consecutive records of a batch mostly carry the same (or an equal) dict. */
typedef struct {
    PyObject *metadata; /* strong: keeps the identity check valid */
    PyObject *block;    /* bytes */
} BlockCache;

/* The block for ``metadata`` into *block (borrowed from the cache): 0, 1 when the metadata is
 * not a dict of exact str (Python writes, or refuses, it), -1 on MemoryError-class failures. */
static int metadata_block(BlockCache *c, PyObject *metadata, PyObject **block)
{
    if (c->metadata != NULL && metadata != c->metadata) {
        int equal = PyObject_RichCompareBool(metadata, c->metadata, Py_EQ);
        if (equal < 0)
            PyErr_Clear(); /* an odd value's __eq__: encode afresh, the value decides below */
        else if (equal)
            metadata = c->metadata;
    }
    if (metadata == c->metadata) {
        *block = c->block;
        return 0;
    }
    if (!PyDict_CheckExact(metadata))
        return 1;
    Py_ssize_t size = 0, pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(metadata, &pos, &k, &v)) {
        Py_ssize_t kn, vn;
        /* only exact str: a subclass may encode itself otherwise; a lone surrogate does not
         * encode at all (Python raises the UnicodeEncodeError) */
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v) || PyUnicode_AsUTF8AndSize(k, &kn) == NULL ||
            PyUnicode_AsUTF8AndSize(v, &vn) == NULL) {
            if (PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeError))
                    return -1;
                PyErr_Clear();
            }
            return 1;
        }
        size += field_size(field_size(kn) + field_size(vn));
    }
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size);
    if (bytes == NULL)
        return -1;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(bytes);
    pos = 0;
    while (PyDict_Next(metadata, &pos, &k, &v)) {
        Py_ssize_t kn, vn;
        const char *ks = PyUnicode_AsUTF8AndSize(k, &kn); /* cached by the pass above */
        const char *vs = PyUnicode_AsUTF8AndSize(v, &vn);
        *p++ = TAG_METADATA;
        p = put_varint(p, (uint64_t)(field_size(kn) + field_size(vn)));
        p = put_field(p, 0x0A, ks, kn); /* MapEntry.key = 1 */
        p = put_field(p, 0x12, vs, vn); /* MapEntry.value = 2 */
    }
    Py_INCREF(metadata);
    Py_XSETREF(c->metadata, metadata);
    Py_XSETREF(c->block, bytes);
    *block = bytes;
    return 0;
}

/* One record as the writer sees it: plain (its parts, borrowed) or opaque bytes from Python. */
typedef struct {
    PyObject *position; /* bytes, NULL when empty */
    long operation;
    PyObject *block;    /* bytes */
    PyObject *part[3];  /* key, before, after: bytes or NULL */
    Py_ssize_t change;  /* Change message size; -1 without payload */
    PyObject *opaque;   /* the whole record's bytes when not plain (strong) */
    PyObject *owner;    /* the prepared tuple the plain parts are borrowed from (strong) */
    Py_ssize_t size;    /* the record's bytes */
} Out;

/* Fill ``o`` from a record's six values; 1 when they are not plain, -1 on failure. */
static int plain_record(PyObject *const values[N_SLOTS], BlockCache *cache, Out *o)
{
    PyObject *position = values[SLOT_POSITION];
    if (position == NULL || (position != Py_None && !PyBytes_CheckExact(position)))
        return 1;
    o->position = position != Py_None && PyBytes_GET_SIZE(position) > 0 ? position : NULL;
    PyObject *op = values[SLOT_OPERATION];
    if (op == NULL || !PyLong_Check(op))
        return 1;
    int overflow;
    o->operation = PyLong_AsLongAndOverflow(op, &overflow);
    if (o->operation == -1 && PyErr_Occurred())
        return -1;
    if (overflow || o->operation < 0) /* negative operation numbers: Python's varint decides */
        return 1;
    for (int i = 0; i < 3; i++) {
        PyObject *v = values[SLOT_KEY + i];
        if (v == NULL || (v != Py_None && !PyBytes_CheckExact(v)))
            return 1;
        o->part[i] = v == Py_None ? NULL : v;
    }
    if (values[SLOT_METADATA] == NULL)
        return 1;
    int status = metadata_block(cache, values[SLOT_METADATA], &o->block);
    if (status != 0)
        return status;
    Py_ssize_t size = o->position ? field_size(PyBytes_GET_SIZE(o->position)) : 0;
    if (o->operation)
        size += 1 + varint_size((uint64_t)o->operation);
    size += PyBytes_GET_SIZE(o->block);
    if (o->part[0])
        size += field_size(field_size(PyBytes_GET_SIZE(o->part[0])));
    o->change = -1;
    if (o->part[1] || o->part[2]) {
        o->change = 0;
        for (int i = 1; i < 3; i++)
            if (o->part[i])
                o->change += field_size(field_size(PyBytes_GET_SIZE(o->part[i])));
        size += field_size(o->change);
    }
    o->size = size;
    return 0;
}

/* Python's view of a record the writer cannot take as it is: ``prepare(record)``, then
 * ``serialize(prepared)`` when that is still not plain. Sets ``o``, plain (its parts borrowed
 * from ``o->owner``, the prepared tuple) or opaque; -1 with Python's exception. */
static int python_record(PyObject *record, PyObject *prepare, PyObject *serialize, BlockCache *cache, Out *o)
{
    PyObject *prepared = PyObject_CallOneArg(prepare, record);
    if (prepared == NULL)
        return -1;
    if (!PyTuple_CheckExact(prepared) || PyTuple_GET_SIZE(prepared) != N_SLOTS) {
        Py_DECREF(prepared);
        PyErr_SetString(PyExc_SystemError, "prepare() must return a 6-tuple");
        return -1;
    }
    int status = plain_record(((PyTupleObject *)prepared)->ob_item, cache, o);
    if (status == 0) {
        o->owner = prepared;
        return 0;
    }
    if (status == 1) {
        o->opaque = PyObject_CallOneArg(serialize, prepared);
        if (o->opaque != NULL && !PyBytes_CheckExact(o->opaque)) {
            Py_CLEAR(o->opaque);
            PyErr_SetString(PyExc_SystemError, "serialize() must return bytes");
        }
        status = o->opaque == NULL ? -1 : 0;
        if (status == 0)
            o->size = PyBytes_GET_SIZE(o->opaque);
    }
    Py_DECREF(prepared);
    return status;
}

/* Write record ``o`` (``o->size`` bytes) at ``p``; returns the end. */
static unsigned char *put_record(unsigned char *p, const Out *o)
{
    if (o->opaque != NULL) {
        memcpy(p, PyBytes_AS_STRING(o->opaque), (size_t)o->size);
        return p + o->size;
    }
    if (o->position)
        p = put_field(p, TAG_POSITION, PyBytes_AS_STRING(o->position), PyBytes_GET_SIZE(o->position));
    if (o->operation) {
        *p++ = TAG_OPERATION;
        p = put_varint(p, (uint64_t)o->operation);
    }
    memcpy(p, PyBytes_AS_STRING(o->block), (size_t)PyBytes_GET_SIZE(o->block));
    p += PyBytes_GET_SIZE(o->block);
    if (o->part[0]) { /* key = 4: Data{raw_data = 1} */
        Py_ssize_t n = PyBytes_GET_SIZE(o->part[0]);
        *p++ = TAG_KEY;
        p = put_varint(p, (uint64_t)field_size(n));
        p = put_field(p, TAG_RAW_DATA, PyBytes_AS_STRING(o->part[0]), n);
    }
    if (o->change >= 0) { /* payload = 5: Change{before = 1, after = 2}, each Data{raw_data = 1} */
        *p++ = TAG_PAYLOAD;
        p = put_varint(p, (uint64_t)o->change);
        for (int i = 1; i < 3; i++) {
            if (!o->part[i])
                continue;
            Py_ssize_t n = PyBytes_GET_SIZE(o->part[i]);
            *p++ = i == 1 ? TAG_BEFORE : TAG_AFTER;
            p = put_varint(p, (uint64_t)field_size(n));
            p = put_field(p, TAG_RAW_DATA, PyBytes_AS_STRING(o->part[i]), n);
        }
    }
    return p;
}

/* The message being filled: a bytes object grown as records come, cut to size when done. */
typedef struct {
    PyObject *data;    /* bytes, or NULL before the first record */
    Py_ssize_t len;    /* bytes written */
    Py_ssize_t budget; /* framed record sizes (plus overhead each) so far, against the budget */
    PyObject *indexes; /* list of the records' indexes */
} Message;

/* Room for ``extra`` more bytes; ``hint`` is the size the whole message will likely reach. */
static int message_reserve(Message *m, Py_ssize_t extra, Py_ssize_t hint)
{
    if (m->data == NULL) {
        m->data = PyBytes_FromStringAndSize(NULL, extra > hint ? extra : hint);
        return m->data == NULL ? -1 : 0;
    }
    Py_ssize_t cap = PyBytes_GET_SIZE(m->data);
    if (m->len + extra <= cap)
        return 0;
    Py_ssize_t want = cap + cap / 2;
    if (want < m->len + extra)
        want = m->len + extra;
    return _PyBytes_Resize(&m->data, want);
}

/* Append the finished message (bytes, indexes) to ``out`` and start an empty one. */
static int message_flush(Message *m, PyObject *out)
{
    if (m->data == NULL)
        return 0;
    if (_PyBytes_Resize(&m->data, m->len) < 0) {
        Py_CLEAR(m->indexes);
        return -1;
    }
    PyObject *pair = PyTuple_Pack(2, m->data, m->indexes);
    Py_CLEAR(m->data);
    Py_CLEAR(m->indexes);
    m->len = m->budget = 0;
    if (pair == NULL)
        return -1;
    int status = PyList_Append(out, pair);
    Py_DECREF(pair);
    return status;
}

static void out_release(Out *o)
{
    Py_CLEAR(o->opaque);
    Py_CLEAR(o->owner);
}

PyDoc_STRVAR(Writer_frame_doc,
"frame(records, prepare, serialize, budget, frame_overhead, first_index) -> (messages, oversized)\n\n"
"``records`` (a list) as batch messages: ``[(message bytes, [record index, ...]), ...]`` and\n"
"``{index: size}`` of the records too big to send. Each record is framed as field 1; a new\n"
"message starts when the next record's size plus ``frame_overhead`` would take the message's\n"
"sum past ``budget``; a record over the budget alone is left out. Records not plain (raw\n"
"bytes or None data, metadata a dict of str) go through ``prepare(record)`` and, when still\n"
"not plain, ``serialize(prepared)`` -> bytes. Their exceptions propagate.");

static PyObject *Writer_frame(Writer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "frame() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    if (self->record_type == NULL) {
        PyErr_SetString(PyExc_TypeError, "Writer was not initialised");
        return NULL;
    }
    PyObject *records = args[0], *prepare = args[1], *serialize = args[2];
    if (!PyList_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "frame() needs a list of records");
        return NULL;
    }
    Py_ssize_t budget = PyLong_AsSsize_t(args[3]);
    Py_ssize_t overhead = budget == -1 && PyErr_Occurred() ? -1 : PyLong_AsSsize_t(args[4]);
    Py_ssize_t first = overhead == -1 && PyErr_Occurred() ? -1 : PyLong_AsSsize_t(args[5]);
    if (first == -1 && PyErr_Occurred())
        return NULL;
    PyObject *messages = PyList_New(0), *oversized = PyDict_New();
    BlockCache cache = {NULL, NULL};
    Message m = {NULL, 0, 0, NULL};
    if (messages == NULL || oversized == NULL)
        goto fail;
    /* The list may change size while prepare() runs Python code: read its length each time. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records); i++) {
        PyObject *record = PyList_GET_ITEM(records, i);
        Py_INCREF(record);
        Out o = {0};
        int status = 1;
        /* The slot values, held: comparing metadata may run Python code that reassigns slots. */
        PyObject *held[N_SLOTS] = {NULL};
        if (Py_IS_TYPE(record, self->record_type)) {
            for (int k = 0; k < N_SLOTS; k++) {
                held[k] = *(PyObject **)((char *)record + self->slot_offset[k]);
                Py_XINCREF(held[k]);
            }
            status = plain_record(held, &cache, &o);
        }
        if (status == 1)
            status = python_record(record, prepare, serialize, &cache, &o);
        if (status < 0) {
            out_release(&o);
            for (int k = 0; k < N_SLOTS; k++)
                Py_XDECREF(held[k]);
            Py_DECREF(record);
            goto fail;
        }
        PyObject *index = PyLong_FromSsize_t(first + i);
        Py_ssize_t framed = o.size + overhead;
        int ok = index != NULL;
        if (ok && framed > budget) {
            PyObject *size = PyLong_FromSsize_t(o.size);
            ok = size != NULL && PyDict_SetItem(oversized, index, size) == 0;
            Py_XDECREF(size);
        } else if (ok) {
            if (m.budget + framed > budget && m.data != NULL)
                ok = message_flush(&m, messages) == 0;
            Py_ssize_t need = field_size(o.size);
            /* hint: this record's size for every record left, within the budget */
            Py_ssize_t left = PyList_GET_SIZE(records) - i, hint = budget - m.budget;
            if (left < hint / (need > 0 ? need : 1))
                hint = need * left;
            if (ok && m.indexes == NULL)
                ok = (m.indexes = PyList_New(0)) != NULL;
            ok = ok && message_reserve(&m, need, hint) == 0 && PyList_Append(m.indexes, index) == 0;
            if (ok) {
                unsigned char *start = (unsigned char *)PyBytes_AS_STRING(m.data) + m.len;
                unsigned char *p = start;
                *p++ = TAG_RECORDS;
                p = put_varint(p, (uint64_t)o.size);
                p = put_record(p, &o);
                m.len += p - start;
                m.budget += framed;
            }
        }
        Py_XDECREF(index);
        out_release(&o);
        for (int k = 0; k < N_SLOTS; k++)
            Py_XDECREF(held[k]);
        Py_DECREF(record);
        if (!ok)
            goto fail;
    }
    if (message_flush(&m, messages) < 0)
        goto fail;
    Py_CLEAR(cache.metadata);
    Py_CLEAR(cache.block);
    PyObject *result = PyTuple_Pack(2, messages, oversized);
    Py_DECREF(messages);
    Py_DECREF(oversized);
    return result;
fail:
    Py_CLEAR(m.data);
    Py_CLEAR(m.indexes);
    Py_CLEAR(cache.metadata);
    Py_CLEAR(cache.block);
    Py_XDECREF(messages);
    Py_XDECREF(oversized);
    return NULL;
}

static PyMethodDef Writer_methods[] = {
    {"frame", (PyCFunction)(void (*)(void))Writer_frame, METH_FASTCALL, Writer_frame_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(Writer_doc,
"Writer(record_type)\n\n"
"Writes ``record_type`` objects (the __slots__ class the Reader makes) as batch messages\n"
"(see frame).");

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.convert._wire.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = Writer_doc,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Writer_init,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
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
    if (PyType_Ready(&ReaderType) < 0 || PyType_Ready(&WriterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&wire_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddType(m, &ReaderType) < 0 || PyModule_AddType(m, &WriterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
