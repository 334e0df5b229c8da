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
    if (PyType_Ready(&ReaderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&wire_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddType(m, &ReaderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
