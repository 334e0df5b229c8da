/* The compiled twin of cdcflow.convert.protobuf's batch messages: ``batch_bytes`` (records ->
 * the bytes of ``repeated opencdc.v1.Record records = 1``) and ``from_wire`` (those bytes ->
 * Records). upb is the reference; this file covers the shape every plugin batch has in
 * practice (raw or empty data, metadata of str, fields in number order) and hands the rest to
 * Python, record by record when writing, the whole message when reading. Writing matches
 * ``SerializeToString(deterministic=True)`` byte for byte (tests/convert/test_wire_twin.py).
 * Only public CPython API.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
    TAG_RECORDS = 0x0A,  /* batch message: records = 1 */
    TAG_POSITION = 0x0A, /* Record.position = 1 */
    TAG_OPERATION = 0x10,
    TAG_METADATA = 0x1A, /* one map entry each: key = 1 (0x0A), value = 2 (0x12) */
    TAG_KEY = 0x22,
    TAG_PAYLOAD = 0x2A,
    TAG_BEFORE = 0x0A, /* Change.before = 1 */
    TAG_AFTER = 0x12,  /* Change.after = 2 */
    TAG_RAW = 0x0A,    /* Data.raw_data = 1 */
};
enum { N_VALUES = 6 }; /* position, operation, metadata, key, before, after */

static PyObject *s_position, *s_operation, *s_metadata, *s_key, *s_before, *s_after;
static PyObject *s_prepare, *s_serialize, *s_operation_type;
static PyObject *s_record_type, *s_operations, *s_block_of, *s_finish, *s_decode;

static Py_ssize_t varint_size(uint64_t v)
{
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* tag + length prefix + n bytes */
static Py_ssize_t field_size(Py_ssize_t n) { return 1 + varint_size((uint64_t)n) + n; }

static unsigned char *put_varint(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

static unsigned char *put_field(unsigned char *p, unsigned char tag, const char *data, Py_ssize_t n)
{
    *p++ = tag;
    p = put_varint(p, (uint64_t)n);
    memcpy(p, data, (size_t)n);
    return p + n;
}

/* -- writing ---------------------------------------------------------------------------- */

typedef struct {
    const char *key, *value;
    Py_ssize_t key_len, value_len;
} Entry;

/* upb's deterministic map order, as it appears in the output: keys by bytes, and of two keys
 * where one is the other's prefix, the longer first. */
static int entry_order(const void *a_, const void *b_)
{
    const Entry *a = a_, *b = b_;
    Py_ssize_t common = a->key_len < b->key_len ? a->key_len : b->key_len;
    int c = memcmp(a->key, b->key, (size_t)common);
    if (c != 0)
        return c;
    return (a->key_len < b->key_len) - (a->key_len > b->key_len);
}

/* The last metadata written and its block of map entries. */
typedef struct {
    PyObject *metadata; /* a copy: the records' dicts may change while Python runs */
    PyObject *block;
} BlockCache;

/* Every key and value an exact str: 1; anything else 0 (upb decides). */
static int plain_metadata(PyObject *metadata)
{
    if (!PyDict_CheckExact(metadata))
        return 0;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(metadata, &pos, &k, &v))
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v))
            return 0;
    return 1;
}

/* *block = the metadata's map entries in upb's deterministic order (new reference); 1 when the
 * metadata is not plain, -1 on error. */
static int metadata_block(BlockCache *c, PyObject *metadata, PyObject **block)
{
    if (!plain_metadata(metadata))
        return 1;
    if (c->metadata != NULL) {
        int same = PyObject_RichCompareBool(metadata, c->metadata, Py_EQ); /* str == str only */
        if (same < 0)
            return -1;
        if (same) {
            Py_INCREF(c->block);
            *block = c->block;
            return 0;
        }
    }
    Py_ssize_t n = PyDict_GET_SIZE(metadata), pos = 0, i = 0, size = 0;
    Entry *entries = PyMem_Malloc(sizeof(Entry) * (size_t)(n ? n : 1));
    if (entries == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *k, *v;
    while (PyDict_Next(metadata, &pos, &k, &v)) {
        Entry *e = &entries[i++];
        e->key = PyUnicode_AsUTF8AndSize(k, &e->key_len);
        e->value = e->key ? PyUnicode_AsUTF8AndSize(v, &e->value_len) : NULL;
        if (e->value == NULL) { /* a lone surrogate: upb says what is wrong */
            PyMem_Free(entries);
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
                return -1;
            PyErr_Clear();
            return 1;
        }
        size += field_size(field_size(e->key_len) + field_size(e->value_len));
    }
    qsort(entries, (size_t)n, sizeof(Entry), entry_order);
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size);
    PyObject *copy = bytes ? PyDict_Copy(metadata) : NULL;
    if (copy == NULL) {
        Py_XDECREF(bytes);
        PyMem_Free(entries);
        return -1;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(bytes);
    for (i = 0; i < n; i++) {
        Entry *e = &entries[i];
        *p++ = TAG_METADATA;
        p = put_varint(p, (uint64_t)(field_size(e->key_len) + field_size(e->value_len)));
        p = put_field(p, 0x0A, e->key, e->key_len);
        p = put_field(p, 0x12, e->value, e->value_len);
    }
    PyMem_Free(entries);
    Py_XDECREF(c->metadata);
    Py_XDECREF(c->block);
    c->metadata = copy;
    Py_INCREF(bytes);
    c->block = bytes;
    *block = bytes;
    return 0;
}

/* One record to write: its values as plain parts, or its whole bytes from upb (opaque). */
typedef struct {
    PyObject *values[N_VALUES]; /* strong */
    PyObject *block;            /* strong; NULL when opaque */
    PyObject *opaque;           /* strong; the record's bytes from ``serialize`` */
    long operation;
    Py_ssize_t change; /* Change message size, -1 without payload */
    Py_ssize_t size;   /* the record's bytes */
} Out;

static void out_clear(Out *o)
{
    for (int i = 0; i < N_VALUES; i++)
        Py_CLEAR(o->values[i]);
    Py_CLEAR(o->block);
    Py_CLEAR(o->opaque);
}

/* Parts of ``o->values`` as the kernel writes them: 0, 1 when not plain, -1 on error. */
static int plain_parts(Out *o, PyObject *operation_type, BlockCache *cache)
{
    PyObject *position = o->values[0], *op = o->values[1];
    if (!PyBytes_CheckExact(position))
        return 1;
    if (!(PyLong_CheckExact(op) || Py_IS_TYPE(op, (PyTypeObject *)operation_type)))
        return 1;
    int overflow;
    o->operation = PyLong_AsLongAndOverflow(op, &overflow);
    if (o->operation == -1 && PyErr_Occurred())
        return -1;
    if (overflow || o->operation < 0 || o->operation > INT32_MAX) /* upb decides */
        return 1;
    for (int i = 3; i < N_VALUES; i++)
        if (o->values[i] != Py_None && !PyBytes_CheckExact(o->values[i]))
            return 1;
    int status = metadata_block(cache, o->values[2], &o->block);
    if (status != 0)
        return status;
    Py_ssize_t size = PyBytes_GET_SIZE(position) ? field_size(PyBytes_GET_SIZE(position)) : 0;
    if (o->operation)
        size += 1 + varint_size((uint64_t)o->operation);
    size += PyBytes_GET_SIZE(o->block);
    if (o->values[3] != Py_None)
        size += field_size(field_size(PyBytes_GET_SIZE(o->values[3])));
    o->change = -1;
    if (o->values[4] != Py_None || o->values[5] != Py_None) {
        o->change = 0;
        for (int i = 4; i < N_VALUES; i++)
            if (o->values[i] != Py_None)
                o->change += field_size(field_size(PyBytes_GET_SIZE(o->values[i])));
        size += field_size(o->change);
    }
    o->size = size;
    return 0;
}

static PyObject *const *value_names[N_VALUES] = {&s_position, &s_operation, &s_metadata, &s_key, &s_before, &s_after};

/* Fill ``o`` for ``record`` as protobuf._fill takes it: a record with a dict side goes through
 * ``prepare``; values the kernel does not write go to ``serialize`` (upb). 0 or -1. */
static int take_record(PyObject *record, PyObject *plan[3], BlockCache *cache, Out *o)
{
    int dict_side = 0;
    for (int i = 0; i < N_VALUES; i++) {
        o->values[i] = PyObject_GetAttr(record, *value_names[i]);
        if (o->values[i] == NULL)
            return -1;
        if (i >= 3 && PyDict_CheckExact(o->values[i]))
            dict_side = 1;
    }
    if (dict_side) {
        PyObject *prepared = PyObject_CallOneArg(plan[0], record);
        if (prepared == NULL)
            return -1;
        if (!PyTuple_CheckExact(prepared) || PyTuple_GET_SIZE(prepared) != N_VALUES) {
            Py_DECREF(prepared);
            PyErr_SetString(PyExc_SystemError, "prepare() must return a 6-tuple");
            return -1;
        }
        for (int i = 0; i < N_VALUES; i++) {
            PyObject *v = PyTuple_GET_ITEM(prepared, i);
            Py_INCREF(v);
            Py_DECREF(o->values[i]);
            o->values[i] = v;
        }
        Py_DECREF(prepared);
    }
    int status = plain_parts(o, plan[2], cache);
    if (status <= 0)
        return status;
    PyObject *values = PyTuple_New(N_VALUES);
    if (values == NULL)
        return -1;
    for (int i = 0; i < N_VALUES; i++) {
        Py_INCREF(o->values[i]);
        PyTuple_SET_ITEM(values, i, o->values[i]);
    }
    o->opaque = PyObject_CallOneArg(plan[1], values);
    Py_DECREF(values);
    if (o->opaque == NULL)
        return -1;
    if (!PyBytes_CheckExact(o->opaque)) {
        PyErr_SetString(PyExc_SystemError, "serialize() must return bytes");
        return -1;
    }
    o->size = PyBytes_GET_SIZE(o->opaque);
    return 0;
}

static unsigned char *put_data(unsigned char *p, unsigned char tag, PyObject *raw)
{
    Py_ssize_t n = PyBytes_GET_SIZE(raw);
    *p++ = tag;
    p = put_varint(p, (uint64_t)field_size(n));
    return put_field(p, TAG_RAW, PyBytes_AS_STRING(raw), n);
}

static unsigned char *put_record(unsigned char *p, const Out *o)
{
    *p++ = TAG_RECORDS;
    p = put_varint(p, (uint64_t)o->size);
    if (o->opaque != NULL) {
        memcpy(p, PyBytes_AS_STRING(o->opaque), (size_t)o->size);
        return p + o->size;
    }
    PyObject *position = o->values[0];
    if (PyBytes_GET_SIZE(position))
        p = put_field(p, TAG_POSITION, PyBytes_AS_STRING(position), PyBytes_GET_SIZE(position));
    if (o->operation) {
        *p++ = TAG_OPERATION;
        p = put_varint(p, (uint64_t)o->operation);
    }
    memcpy(p, PyBytes_AS_STRING(o->block), (size_t)PyBytes_GET_SIZE(o->block));
    p += PyBytes_GET_SIZE(o->block);
    if (o->values[3] != Py_None)
        p = put_data(p, TAG_KEY, o->values[3]);
    if (o->change >= 0) {
        *p++ = TAG_PAYLOAD;
        p = put_varint(p, (uint64_t)o->change);
        if (o->values[4] != Py_None)
            p = put_data(p, TAG_BEFORE, o->values[4]);
        if (o->values[5] != Py_None)
            p = put_data(p, TAG_AFTER, o->values[5]);
    }
    return p;
}

/* Read attributes ``names`` of ``plan`` into ``out`` (new references); -1 on error. */
static int plan_attrs(PyObject *plan, PyObject **const names[], int n, PyObject **out)
{
    for (int i = 0; i < n; i++) {
        out[i] = PyObject_GetAttr(plan, *names[i]);
        if (out[i] == NULL) {
            while (i--)
                Py_CLEAR(out[i]);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(batch_bytes_doc,
"batch_bytes(records, plan) -> bytes\n\n"
"The bytes of a batch message holding ``records`` (a sequence of Record), as\n"
"protobuf.batch_bytes's upb path writes them. ``plan`` (protobuf._WritePlan) gives\n"
"``prepare`` (record with a dict side -> 6-tuple), ``serialize`` (6-tuple -> one\n"
"record's bytes, by upb, for values the kernel does not write) and ``operation_type``.");

static PyObject *batch_bytes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    static PyObject **const names[3] = {&s_prepare, &s_serialize, &s_operation_type};
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "batch_bytes(records, plan)");
        return NULL;
    }
    PyObject *plan[3];
    if (plan_attrs(args[1], names, 3, plan) < 0)
        return NULL;
    if (!PyType_Check(plan[2])) {
        PyErr_SetString(PyExc_TypeError, "plan.operation_type must be a type");
        for (int i = 0; i < 3; i++)
            Py_DECREF(plan[i]);
        return NULL;
    }
    PyObject *result = NULL, *seq = PySequence_Fast(args[0], "batch_bytes() needs a sequence of records");
    Out *outs = NULL;
    Py_ssize_t n = 0, done = 0, total = 0;
    BlockCache cache = {NULL, NULL};
    if (seq == NULL)
        goto end;
    n = PySequence_Fast_GET_SIZE(seq);
    outs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Out));
    if (outs == NULL) {
        PyErr_NoMemory();
        goto end;
    }
    for (; done < n; done++) {
        Out *o = &outs[done];
        if (take_record(PySequence_Fast_GET_ITEM(seq, done), plan, &cache, o) < 0) {
            done++;
            goto end;
        }
        total += field_size(o->size);
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result != NULL) {
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(result);
        for (Py_ssize_t i = 0; i < n; i++)
            p = put_record(p, &outs[i]);
    }
end:
    for (Py_ssize_t i = 0; i < done; i++)
        out_clear(&outs[i]);
    PyMem_Free(outs);
    Py_XDECREF(seq);
    Py_XDECREF(cache.metadata);
    Py_XDECREF(cache.block);
    for (int i = 0; i < 3; i++)
        Py_DECREF(plan[i]);
    return result;
}

/* -- reading ---------------------------------------------------------------------------- */

/* A length prefix at *pp: a varint of at most 5 bytes no larger than what is left. */
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

/* A length-delimited value at *pp (just after its tag): [*v, *v + *n), *pp moved past it. */
static int read_field(const unsigned char **pp, const unsigned char *end, const unsigned char **v, Py_ssize_t *n)
{
    if (read_length(pp, end, n) < 0)
        return -1;
    *v = *pp;
    *pp += *n;
    return 0;
}

/* One record's fields, pointing into the message. */
typedef struct {
    const unsigned char *position;
    Py_ssize_t position_len;
    int operation;
    const unsigned char *block;
    Py_ssize_t block_len;
    PyObject *plan; /* its block's protobuf._Block (borrowed from the call's cache) */
    const unsigned char *data[3]; /* key, before, after: NULL when absent or empty Data */
    Py_ssize_t data_len[3];
} Fields;

/* A Data message [p, p + n): empty (None) or exactly one raw_data. -1 for anything else. */
static int read_data(const unsigned char *p, Py_ssize_t n, const unsigned char **data, Py_ssize_t *len)
{
    const unsigned char *end = p + n;
    *data = NULL;
    if (n == 0)
        return 0;
    if (*p++ != TAG_RAW || read_field(&p, end, data, len) < 0 || p != end)
        return -1;
    return 0;
}

/* One record [p, end) in the usual shape (each field once, in number order); -1 otherwise. */
static int read_fields(const unsigned char *p, const unsigned char *end, int n_operations, Fields *f)
{
    const unsigned char *v;
    Py_ssize_t n;
    memset(f, 0, sizeof(*f));
    f->position = p;
    if (p < end && *p == TAG_POSITION) {
        p++;
        if (read_field(&p, end, &f->position, &f->position_len) < 0)
            return -1;
    }
    if (p < end && *p == TAG_OPERATION) { /* one varint byte; longer forms go to upb */
        if (p + 1 >= end || p[1] >= n_operations)
            return -1;
        f->operation = p[1];
        p += 2;
    }
    f->block = p;
    while (p < end && *p == TAG_METADATA) {
        p++;
        if (read_field(&p, end, &v, &n) < 0)
            return -1;
    }
    f->block_len = p - f->block;
    if (p < end && *p == TAG_KEY) {
        p++;
        if (read_field(&p, end, &v, &n) < 0 || read_data(v, n, &f->data[0], &f->data_len[0]) < 0)
            return -1;
    }
    if (p < end && *p == TAG_PAYLOAD) {
        const unsigned char *change, *change_end;
        p++;
        if (read_field(&p, end, &change, &n) < 0)
            return -1;
        change_end = change + n;
        for (int i = 1; i < 3; i++) {
            if (change < change_end && *change == (i == 1 ? TAG_BEFORE : TAG_AFTER)) {
                change++;
                if (read_field(&change, change_end, &v, &n) < 0 || read_data(v, n, &f->data[i], &f->data_len[i]) < 0)
                    return -1;
            }
        }
        if (change != change_end)
            return -1;
    }
    return p == end ? 0 : -1;
}

/* f->plan for the record's metadata block: ``block_of(block)`` once per distinct block (cached in
 * ``plans``); 1 when upb refuses the block (block_of returned None), -1 on error. */
static int block_plan(Fields *f, const Fields *last, PyObject *plans, PyObject *block_of)
{
    if (last != NULL && last->block_len == f->block_len && memcmp(last->block, f->block, (size_t)f->block_len) == 0) {
        f->plan = last->plan;
        return 0;
    }
    PyObject *key = PyBytes_FromStringAndSize((const char *)f->block, f->block_len);
    if (key == NULL)
        return -1;
    PyObject *plan = PyDict_GetItemWithError(plans, key); /* borrowed */
    if (plan == NULL && !PyErr_Occurred()) {
        plan = PyObject_CallOneArg(block_of, key);
        if (plan != NULL && PyDict_SetItem(plans, key, plan) < 0)
            Py_CLEAR(plan);
        Py_XDECREF(plan); /* the cache holds it */
    }
    Py_DECREF(key);
    if (plan == NULL)
        return -1;
    f->plan = plan;
    return plan == Py_None ? 1 : 0;
}

static PyObject *bytes_or_none(const unsigned char *data, Py_ssize_t n)
{
    if (data == NULL)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)data, n);
}

/* The Record of ``f``: built here, or by ``finish`` when its metadata names a schema. */
static PyObject *make_record(const Fields *f, Py_ssize_t index, PyObject *plan[4])
{
    PyObject *metadata_of_block = PyObject_GetAttr(f->plan, s_metadata);
    PyObject *decode = metadata_of_block ? PyObject_GetAttr(f->plan, s_decode) : NULL;
    if (decode == NULL) {
        Py_XDECREF(metadata_of_block);
        return NULL;
    }
    int by_python = PyObject_IsTrue(decode);
    Py_DECREF(decode);
    PyObject *args[1 + N_VALUES] = {NULL};
    PyObject **values = args + 1, *record = NULL;
    if (by_python < 0 || !PyDict_CheckExact(metadata_of_block)) {
        if (by_python >= 0)
            PyErr_SetString(PyExc_SystemError, "_Block.metadata must be a dict");
        Py_DECREF(metadata_of_block);
        return NULL;
    }
    values[0] = PyBytes_FromStringAndSize((const char *)f->position, f->position_len);
    values[2] = PyDict_Copy(metadata_of_block);
    Py_DECREF(metadata_of_block);
    for (int i = 0; i < 3; i++)
        values[3 + i] = bytes_or_none(f->data[i], f->data_len[i]);
    for (int i = 0; i < N_VALUES; i++)
        if (i != 1 && values[i] == NULL)
            goto done;
    if (by_python) { /* finish(index, position, operation number, metadata, key, before, after) */
        args[0] = PyLong_FromSsize_t(index);
        values[1] = PyLong_FromLong(f->operation);
        if (args[0] != NULL && values[1] != NULL)
            record = PyObject_Vectorcall(plan[3], args, 1 + N_VALUES, NULL);
    } else {
        values[1] = PyTuple_GET_ITEM(plan[1], f->operation);
        Py_INCREF(values[1]);
        record = PyObject_Vectorcall(plan[0], values, N_VALUES, NULL);
    }
done:
    for (int i = 0; i < 1 + N_VALUES; i++)
        Py_XDECREF(args[i]);
    return record;
}

PyDoc_STRVAR(from_wire_doc,
"from_wire(message, plan) -> list | None\n\n"
"The records of a batch message's bytes, as protobuf.from_wire's upb path reads them, or\n"
"None when the message is not in the usual shape (upb then reads it and names any error).\n"
"``plan`` (protobuf._ReadPlan): ``record_type``, ``operations`` (tuple by number),\n"
"``block_of`` (metadata entries' bytes -> protobuf._Block or None) and ``finish`` (the\n"
"Python reference's last step, for records whose metadata names a schema).");

static PyObject *from_wire(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    static PyObject **const names[4] = {&s_record_type, &s_operations, &s_block_of, &s_finish};
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "from_wire(message: bytes, plan)");
        return NULL;
    }
    PyObject *plan[4];
    if (plan_attrs(args[1], names, 4, plan) < 0)
        return NULL;
    PyObject *result = NULL, *plans = NULL;
    Fields *fields = NULL;
    Py_ssize_t n = 0, cap = 0;
    if (!PyTuple_CheckExact(plan[1]) || PyTuple_GET_SIZE(plan[1]) == 0 || PyTuple_GET_SIZE(plan[1]) > 0x80) {
        PyErr_SetString(PyExc_TypeError, "plan.operations must be a tuple of 1 to 128 members");
        goto end;
    }
    int n_operations = (int)PyTuple_GET_SIZE(plan[1]);
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    const unsigned char *end = p + PyBytes_GET_SIZE(args[0]);
    plans = PyDict_New();
    if (plans == NULL)
        goto end;
    /* first every record's fields and metadata plan, so a message handed back has run no finish() */
    while (p < end) {
        const unsigned char *v;
        Py_ssize_t len;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            Fields *more = PyMem_Realloc(fields, sizeof(Fields) * (size_t)cap);
            if (more == NULL) {
                PyErr_NoMemory();
                goto end;
            }
            fields = more;
        }
        if (*p++ != TAG_RECORDS || read_field(&p, end, &v, &len) < 0 ||
            read_fields(v, v + len, n_operations, &fields[n]) < 0)
            goto hand_back;
        int status = block_plan(&fields[n], n ? &fields[n - 1] : NULL, plans, plan[2]);
        if (status < 0)
            goto end;
        if (status > 0)
            goto hand_back;
        n++;
    }
    result = PyList_New(n);
    if (result == NULL)
        goto end;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *record = make_record(&fields[i], i, plan);
        if (record == NULL) {
            Py_CLEAR(result);
            goto end;
        }
        PyList_SET_ITEM(result, i, record);
    }
    goto end;
hand_back:
    result = Py_None;
    Py_INCREF(result);
end:
    PyMem_Free(fields);
    Py_XDECREF(plans);
    for (int i = 0; i < 4; i++)
        Py_DECREF(plan[i]);
    return result;
}

static PyMethodDef wire_methods[] = {
    {"batch_bytes", (PyCFunction)(void (*)(void))batch_bytes, METH_FASTCALL, batch_bytes_doc},
    {"from_wire", (PyCFunction)(void (*)(void))from_wire, METH_FASTCALL, from_wire_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT, "_wire", "Compiled twin of cdcflow.convert.protobuf's batch messages.", -1, wire_methods,
};

PyMODINIT_FUNC PyInit__wire(void)
{
    struct {
        PyObject **slot;
        const char *text;
    } strings[] = {
        {&s_position, "position"}, {&s_operation, "operation"}, {&s_metadata, "metadata"},
        {&s_key, "key"}, {&s_before, "before"}, {&s_after, "after"}, {&s_prepare, "prepare"},
        {&s_serialize, "serialize"}, {&s_operation_type, "operation_type"}, {&s_record_type, "record_type"},
        {&s_operations, "operations"}, {&s_block_of, "block_of"}, {&s_finish, "finish"}, {&s_decode, "decode"},
    };
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++)
        if ((*strings[i].slot = PyUnicode_InternFromString(strings[i].text)) == NULL)
            return NULL;
    return PyModule_Create(&wire_module);
}
