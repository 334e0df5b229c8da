/* _jsonform: records -> Conduit's JSON form (one JSON object per line), a whole batch per call.
 *
 * Why: cdcflow.convert.jsonform.dumps_lines builds, per record, a dict of JSON-able values
 * (the generated per-schema writer converts Decimal, dates, times, bytes...) and serialises it
 * with orjson: several microseconds of interpreter time per record, half of a storage -> file
 * run. This kernel writes the same bytes for a whole batch straight into one bytes object.
 *
 * Contract: dumps(records, Config(config), resolve, handback) -> bytes, every record's line ending in
 * "\n", byte-identical to the Python path. The kernel only writes what it is sure of; for
 * anything else it drops what it wrote of that record and appends handback(record) (the
 * Python path's line) instead: an unusual type or subclass, a value the schema refuses (Python
 * then picks or derives another schema), metadata that is not str -> str, a lone surrogate,
 * deep nesting, a Decimal exponent too wide to spell out... Float texts come from orjson.dumps
 * itself (the reference, and faster than repr's dtoa).
 * Which schema a part (key / payload) is written with stays Python's decision:
 * resolve(part, metadata, subject, version) returns (plan, extra_metadata_json or None), or
 * None to hand the record back. The kernel asks again whenever (subject, version, collection)
 * of that part changes, and after every handback (which may register a derived schema).
 *
 * config: (Record, operations, operation_texts, key_subject, key_version, payload_subject,
 *          payload_version, derived_key, collection_key)
 *   operations: tuple of the Operation members; operation_texts: their JSON (b'"create"' ...);
 *   the *_key entries are the metadata keys (str).
 *
 * Plan(nodes, root): one schema, compiled for writing. nodes is a tuple of tuples, children are
 * indexes into it (recursive schemas stay plain data):
 *   (K_NULL,) (K_BOOLEAN,) (K_INT,) (K_LONG,) (K_DOUBLE,) (K_BYTES,) (K_STRING,) (K_DECIMAL_TEXT,)
 *   (K_DATE,) (K_DATETIME,) (K_TIME,) (K_FOREIGN,) (K_PASS,)
 *   (K_BIGINT, precision, limit)        limit: 10**precision (int) or None (any int)
 *   (K_DECIMAL, precision, scale)
 *   (K_ENUM, symbols)                   symbols: frozenset of str
 *   (K_FIXED, size)
 *   (K_RECORD, names, encoded, children)  names: tuple of str; encoded: JSON of each name + ":"
 *   (K_ARRAY, item) (K_MAP, value)
 *   (K_UNION, children, labels)         children in the order Python tests them; labels: None, or
 *                                       per child the JSON '{"branch":' (b"" for null) when the
 *                                       union is written in Avro's JSON union form
 *   K_FOREIGN: any value, written as cdcflow.convert.jsonform.jsonable writes it; K_PASS: never
 *   written here (the record is handed back).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stddef.h>
#include <string.h>
#include <structmember.h>

#include "recordslots.h"
#include "tidbtext.h"

enum {
    K_NULL = 0, K_BOOLEAN, K_INT, K_LONG, K_DOUBLE, K_BYTES, K_STRING, K_DECIMAL_TEXT, K_DATE,
    K_DATETIME, K_TIME, K_FOREIGN, K_PASS, K_BIGINT, K_DECIMAL, K_ENUM, K_FIXED, K_RECORD, K_ARRAY,
    K_MAP, K_UNION, K_COUNT
};

/* Results of the value writers, on top of TT_OK / TT_PASS / TT_ERR: the value does not fit
 * this schema node, exactly when the generated Python writer refuses it (a union then tries its
 * next branch; anywhere else the record is handed back and Python picks another schema). */
#define NOFIT 2

/* Nesting followed before handing back (orjson itself stops at 255). */
#define MAX_DEPTH 64

/* ------------------------------------------------------------------ Plan */

typedef struct {
    int kind;
    int precision, scale;
    unsigned long long limit64; /* K_BIGINT: 10**precision when that fits 64 bits, else 0 (none) */
    Py_ssize_t size;            /* K_FIXED */
    Py_ssize_t count;           /* K_RECORD fields, K_UNION branches */
    Py_ssize_t *children;
    PyObject *limit;            /* K_BIGINT: 10**precision or NULL (any int) */
    PyObject *symbols;          /* K_ENUM: frozenset */
    PyObject *names;            /* K_RECORD: tuple of str */
    PyObject *encoded;          /* K_RECORD: tuple of bytes; K_UNION: tuple of bytes or NULL */
    PyObject *index;            /* K_RECORD: dict name -> field number */
} Node;

typedef struct {
    PyObject_HEAD
    Py_ssize_t count;
    Py_ssize_t root;
    Node *nodes;
} Plan;

static void plan_free_nodes(Plan *p)
{
    if (p->nodes == NULL)
        return;
    for (Py_ssize_t i = 0; i < p->count; i++) {
        Node *n = &p->nodes[i];
        PyMem_Free(n->children);
        Py_CLEAR(n->limit);
        Py_CLEAR(n->symbols);
        Py_CLEAR(n->names);
        Py_CLEAR(n->encoded);
        Py_CLEAR(n->index);
    }
    PyMem_Free(p->nodes);
    p->nodes = NULL;
}

static void Plan_dealloc(PyObject *self)
{
    plan_free_nodes((Plan *)self);
    Py_TYPE(self)->tp_free(self);
}

static int bad_plan(PyObject *entry, const char *why)
{
    PyErr_Format(PyExc_ValueError, "plan node %R: %s", entry, why);
    return -1;
}

/* Item i of a node tuple as a C int / index. */
static int entry_int(PyObject *entry, Py_ssize_t i, long *out)
{
    if (PyTuple_GET_SIZE(entry) <= i || !PyLong_Check(PyTuple_GET_ITEM(entry, i)))
        return bad_plan(entry, "missing an int item");
    *out = PyLong_AsLong(PyTuple_GET_ITEM(entry, i));
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int entry_children(PyObject *entry, Py_ssize_t i, Node *n, Py_ssize_t total)
{
    if (PyTuple_GET_SIZE(entry) <= i || !PyTuple_Check(PyTuple_GET_ITEM(entry, i)))
        return bad_plan(entry, "missing the tuple of children");
    PyObject *kids = PyTuple_GET_ITEM(entry, i);
    n->count = PyTuple_GET_SIZE(kids);
    n->children = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n->count ? n->count : 1));
    if (n->children == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < n->count; k++) {
        Py_ssize_t c = PyLong_AsSsize_t(PyTuple_GET_ITEM(kids, k));
        if (c == -1 && PyErr_Occurred())
            return -1;
        if (c < 0 || c >= total)
            return bad_plan(entry, "child index out of range");
        n->children[k] = c;
    }
    return 0;
}

static int single_child(PyObject *entry, Node *n, Py_ssize_t total)
{
    long c;
    if (entry_int(entry, 1, &c) < 0)
        return -1;
    if (c < 0 || c >= total)
        return bad_plan(entry, "child index out of range");
    n->count = 1;
    n->children = PyMem_Malloc(sizeof(Py_ssize_t));
    if (n->children == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    n->children[0] = (Py_ssize_t)c;
    return 0;
}

/* A tuple item of the given exact type, as a new reference. */
static PyObject *entry_object(PyObject *entry, Py_ssize_t i, PyTypeObject *type)
{
    if (PyTuple_GET_SIZE(entry) <= i || !Py_IS_TYPE(PyTuple_GET_ITEM(entry, i), type)) {
        bad_plan(entry, type == &PyTuple_Type ? "missing a tuple item" : "missing an item of the right type");
        return NULL;
    }
    return Py_NewRef(PyTuple_GET_ITEM(entry, i));
}

static int record_node(PyObject *entry, Node *n, Py_ssize_t total)
{
    if ((n->names = entry_object(entry, 1, &PyTuple_Type)) == NULL
        || (n->encoded = entry_object(entry, 2, &PyTuple_Type)) == NULL || entry_children(entry, 3, n, total) < 0)
        return -1;
    if (PyTuple_GET_SIZE(n->names) != n->count || PyTuple_GET_SIZE(n->encoded) != n->count)
        return bad_plan(entry, "names, encoded names and children differ in length");
    if ((n->index = PyDict_New()) == NULL)
        return -1;
    for (Py_ssize_t k = 0; k < n->count; k++) {
        PyObject *name = PyTuple_GET_ITEM(n->names, k);
        if (!PyUnicode_CheckExact(name) || !PyBytes_CheckExact(PyTuple_GET_ITEM(n->encoded, k)))
            return bad_plan(entry, "a field name is not str or its JSON not bytes");
        PyObject *at = PyLong_FromSsize_t(k);
        if (at == NULL)
            return -1;
        int r = PyDict_SetItem(n->index, name, at);
        Py_DECREF(at);
        if (r < 0)
            return -1;
    }
    if (PyDict_GET_SIZE(n->index) != n->count)
        return bad_plan(entry, "duplicate field names");
    return 0;
}

static int parse_node(PyObject *entry, Node *n, Py_ssize_t total)
{
    long kind, v;
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 1)
        return bad_plan(entry, "not a non-empty tuple");
    if (entry_int(entry, 0, &kind) < 0)
        return -1;
    if (kind < 0 || kind >= K_COUNT)
        return bad_plan(entry, "unknown kind");
    n->kind = (int)kind;
    switch (kind) {
    case K_BIGINT: {
        if (entry_int(entry, 1, &v) < 0)
            return -1;
        n->precision = (int)v;
        PyObject *limit = PyTuple_GET_SIZE(entry) > 2 ? PyTuple_GET_ITEM(entry, 2) : NULL;
        if (limit == NULL || (limit != Py_None && !PyLong_CheckExact(limit)))
            return bad_plan(entry, "limit must be an int or None");
        if (limit != Py_None) {
            n->limit = Py_NewRef(limit);
            unsigned long long l = 1;
            for (int k = 0; k < n->precision && k < 20; k++)
                l *= 10;
            n->limit64 = n->precision >= 1 && n->precision <= 19 ? l : 0;
        }
        return 0;
    }
    case K_DECIMAL:
        if (entry_int(entry, 1, &v) < 0)
            return -1;
        n->precision = (int)v;
        if (entry_int(entry, 2, &v) < 0)
            return -1;
        n->scale = (int)v;
        return 0;
    case K_ENUM:
        n->symbols = entry_object(entry, 1, &PyFrozenSet_Type);
        return n->symbols == NULL ? -1 : 0;
    case K_FIXED:
        if (entry_int(entry, 1, &v) < 0)
            return -1;
        n->size = (Py_ssize_t)v;
        return 0;
    case K_RECORD:
        return record_node(entry, n, total);
    case K_ARRAY:
    case K_MAP:
        return single_child(entry, n, total);
    case K_UNION: {
        if (entry_children(entry, 1, n, total) < 0)
            return -1;
        PyObject *labels = PyTuple_GET_SIZE(entry) > 2 ? PyTuple_GET_ITEM(entry, 2) : Py_None;
        if (labels != Py_None) {
            if (!PyTuple_CheckExact(labels) || PyTuple_GET_SIZE(labels) != n->count)
                return bad_plan(entry, "labels must be None or one bytes per branch");
            for (Py_ssize_t k = 0; k < n->count; k++)
                if (!PyBytes_CheckExact(PyTuple_GET_ITEM(labels, k)))
                    return bad_plan(entry, "labels must be bytes");
            n->encoded = Py_NewRef(labels);
        }
        return 0;
    }
    default:
        return 0;
    }
}

static PyObject *Plan_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *nodes;
    Py_ssize_t root;
    static char *kwlist[] = {"nodes", "root", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!n:Plan", kwlist, &PyTuple_Type, &nodes, &root))
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(nodes);
    if (root < 0 || root >= count) {
        PyErr_SetString(PyExc_ValueError, "root index out of range");
        return NULL;
    }
    Plan *p = (Plan *)type->tp_alloc(type, 0);
    if (p == NULL)
        return NULL;
    p->nodes = PyMem_Calloc((size_t)count, sizeof(Node));
    if (p->nodes == NULL) {
        Py_DECREF(p);
        return PyErr_NoMemory();
    }
    p->count = count;
    p->root = root;
    for (Py_ssize_t i = 0; i < count; i++)
        if (parse_node(PyTuple_GET_ITEM(nodes, i), &p->nodes[i], count) < 0) {
            Py_DECREF(p);
            return NULL;
        }
    return (PyObject *)p;
}

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.convert._jsonform.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_dealloc = Plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Plan(nodes: tuple, root: int): one schema, compiled for writing its JSON form.",
    .tp_new = Plan_new,
};

/* ------------------------------------------------------------------ scalar values */

/* JSON string of an exact str: NOFIT for another type, TT_PASS for a lone surrogate (orjson
 * raises; Python says so). */
static int put_str(tt_buf *b, PyObject *v)
{
    if (!PyUnicode_CheckExact(v))
        return NOFIT;
    return tt_json_str_orjson(b, v);
}

static int put_bytes_b64(tt_buf *b, PyObject *v)
{
    if (tt_buf_putc(b, '"') < 0
        || tt_buf_put_b64(b, (const unsigned char *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v)) < 0
        || tt_buf_putc(b, '"') < 0)
        return TT_ERR;
    return TT_OK;
}

/* orjson.dumps, fetched once at module init: the reference for float texts, and its shortest
 * round-trip formatting (Ryu) is several times faster than repr's (dtoa), call included. */
static PyObject *orjson_dumps = NULL;

/* A float as the JSON form writes it: orjson's number, or "NaN" / "Infinity" / "-Infinity". */
static int put_float_value(tt_buf *b, PyObject *v)
{
    double d = PyFloat_AS_DOUBLE(v);
    if (d != d)
        return tt_buf_put(b, "\"NaN\"", 5) < 0 ? TT_ERR : TT_OK;
    if (d - d != 0.0)
        return tt_buf_put(b, d > 0 ? "\"Infinity\"" : "\"-Infinity\"", d > 0 ? 10 : 11) < 0 ? TT_ERR : TT_OK;
    PyObject *text = PyObject_CallOneArg(orjson_dumps, v);
    if (text == NULL)
        return TT_ERR;
    int r = TT_OK;
    if (!PyBytes_Check(text)) {
        PyErr_SetString(PyExc_SystemError, "orjson.dumps returned no bytes");
        r = TT_ERR;
    } else if (tt_buf_put(b, PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text)) < 0)
        r = TT_ERR;
    Py_DECREF(text);
    return r;
}

/* An exact int within [lo, hi] (lo >= INT64_MIN) as digits; NOFIT outside. */
static int put_int_range(tt_buf *b, PyObject *v, long long lo, long long hi)
{
    if (!PyLong_CheckExact(v))
        return NOFIT;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return TT_ERR;
    if (overflow || x < lo || x > hi)
        return NOFIT;
    return tt_buf_put_i64(b, x) < 0 ? TT_ERR : TT_OK;
}

/* str(v) of an int, digits as they are (orjson writes ints past 64 bits as this text). */
static int put_int_text(tt_buf *b, PyObject *v)
{
    PyObject *s = PyObject_Str(v);
    if (s == NULL)
        return TT_ERR;
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(s, &n);
    int r = p == NULL || tt_buf_put(b, p, n) < 0 ? TT_ERR : TT_OK;
    Py_DECREF(s);
    return r;
}

/* The generic writer's int: exact within -2**63 .. 2**64-1 as orjson writes it, beyond as text. */
static int put_any_int(tt_buf *b, PyObject *v)
{
    int r = tt_text_int(b, v);
    return r == TT_PASS ? put_int_text(b, v) : r;
}

/* K_BIGINT: any exact int with |v| < 10**precision (or any int without a limit). */
static int put_bigint(tt_buf *b, const Node *n, PyObject *v)
{
    if (!PyLong_CheckExact(v))
        return NOFIT;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return TT_ERR;
    if (!overflow && n->limit64 != 0) { /* the common case: 64-bit value, 64-bit limit */
        unsigned long long mag = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
        if (mag >= n->limit64)
            return NOFIT;
        return tt_buf_put_i64(b, x) < 0 ? TT_ERR : TT_OK;
    }
    if (n->limit != NULL) { /* -limit < v < limit, compared by Python's ints */
        PyObject *mag = PyNumber_Absolute(v);
        if (mag == NULL)
            return TT_ERR;
        int below = PyObject_RichCompareBool(mag, n->limit, Py_LT);
        Py_DECREF(mag);
        if (below < 0)
            return TT_ERR;
        if (!below)
            return NOFIT;
    }
    return put_any_int(b, v);
}

/* str(Decimal) of a finite value, split up: [-]int[.frac][E[+-]exp]. The coefficient's digits are
 * int + frac; the Decimal exponent is exp - len(frac). */
typedef struct {
    int negative;
    const char *int_digits, *frac_digits;
    Py_ssize_t n_int, n_frac;
    long long exponent;
    Py_ssize_t lead_zeros; /* of int + frac; == n_int + n_frac for a zero */
} DecimalText;

static int digit_run(const char *p, Py_ssize_t len, Py_ssize_t *i)
{
    Py_ssize_t start = *i;
    while (*i < len && p[*i] >= '0' && p[*i] <= '9')
        (*i)++;
    return *i > start;
}

/* 0; -1 for the texts of NaN / Infinity (letters); -2 for exponents too wide to spell out here. */
static int parse_decimal_text(const char *p, Py_ssize_t len, DecimalText *d)
{
    Py_ssize_t i = 0;
    d->negative = len > 0 && p[0] == '-';
    i += d->negative;
    d->int_digits = p + i;
    if (!digit_run(p, len, &i))
        return -1;
    d->n_int = (p + i) - d->int_digits;
    d->frac_digits = p + i;
    d->n_frac = 0;
    if (i < len && p[i] == '.') {
        i++;
        d->frac_digits = p + i;
        if (!digit_run(p, len, &i))
            return -1;
        d->n_frac = (p + i) - d->frac_digits;
    }
    long long e = 0;
    if (i < len && p[i] == 'E') {
        i++;
        int neg_e = i < len && p[i] == '-';
        if (i < len && (p[i] == '-' || p[i] == '+'))
            i++;
        Py_ssize_t e_start = i;
        if (!digit_run(p, len, &i))
            return -1;
        if (i - e_start > 6) /* a million digits or more: left to Python */
            return -2;
        for (Py_ssize_t k = e_start; k < i; k++)
            e = e * 10 + (p[k] - '0');
        e = neg_e ? -e : e;
    }
    if (i != len)
        return -1;
    d->exponent = e - d->n_frac;
    Py_ssize_t total = d->n_int + d->n_frac;
    d->lead_zeros = 0;
    while (d->lead_zeros < total
           && (d->lead_zeros < d->n_int ? d->int_digits[d->lead_zeros]
                                         : d->frac_digits[d->lead_zeros - d->n_int]) == '0')
        d->lead_zeros++;
    return 0;
}

/* Coefficient digit k (0-based, leading zeros skipped; a zero's one digit is "0"). */
static char coefficient_digit(const DecimalText *d, Py_ssize_t k)
{
    Py_ssize_t total = d->n_int + d->n_frac;
    if (d->lead_zeros == total)
        return '0';
    k += d->lead_zeros;
    return k < d->n_int ? d->int_digits[k] : d->frac_digits[k - d->n_int];
}

static Py_ssize_t coefficient_len(const DecimalText *d)
{
    Py_ssize_t total = d->n_int + d->n_frac;
    return d->lead_zeros == total ? 1 : total - d->lead_zeros;
}

/* format(v, "f") for exponent <= 0, as a JSON string: the coefficient with the point -exponent
 * digits from its end, "0." and zeros in front when it is shorter. */
static int put_decimal_f(tt_buf *b, const DecimalText *d)
{
    Py_ssize_t n = coefficient_len(d), k = (Py_ssize_t)-d->exponent;
    Py_ssize_t int_len = n > k ? n - k : 1;
    if (tt_buf_reserve(b, 4 + int_len + k + 1) < 0)
        return TT_ERR;
    char *o = b->data + b->len;
    *o++ = '"';
    if (d->negative)
        *o++ = '-';
    if (n > k) {
        for (Py_ssize_t j = 0; j < n - k; j++)
            *o++ = coefficient_digit(d, j);
    } else
        *o++ = '0';
    if (k > 0) {
        *o++ = '.';
        for (Py_ssize_t j = 0; j < k - n; j++)
            *o++ = '0';
        for (Py_ssize_t j = n > k ? n - k : 0; j < n; j++)
            *o++ = coefficient_digit(d, j);
    }
    *o++ = '"';
    b->len = o - b->data;
    return TT_OK;
}

/* K_DECIMAL (n set): fits when the exponent is -scale, the coefficient has at most `precision`
 * digits and the value is not a negative zero; written as format(v, "f").
 * decimal_text (n NULL): format(v, "f") when finite with exponent <= 0, else str(v). */
static int put_decimal(tt_buf *b, PyObject *v, const Node *n)
{
    PyObject *s = PyObject_Str(v);
    if (s == NULL)
        return TT_ERR;
    Py_ssize_t len;
    const char *p = PyUnicode_AsUTF8AndSize(s, &len);
    int r = TT_ERR;
    DecimalText d;
    int parsed = p == NULL ? 0 : parse_decimal_text(p, len, &d);
    if (p == NULL)
        ;
    else if (parsed == -1) /* NaN, Infinity: str(v) is decimal_text's text */
        r = n != NULL ? TT_PASS : tt_json_utf8_orjson(b, p, len);
    else if (parsed == -2)
        r = TT_PASS;
    else if (n != NULL) {
        int zero = d.lead_zeros == d.n_int + d.n_frac;
        if (n->scale < 0)
            r = TT_PASS;
        else if (d.exponent != -(long long)n->scale || coefficient_len(&d) > n->precision || (zero && d.negative))
            r = NOFIT;
        else
            r = put_decimal_f(b, &d);
    } else
        r = d.exponent <= 0 ? put_decimal_f(b, &d) : tt_json_utf8_orjson(b, p, len);
    Py_DECREF(s);
    return r;
}

/* A text of tidbtext.h (ASCII that needs no escaping) between quotes. */
static int put_quoted_text(tt_buf *b, int kind, PyObject *v)
{
    Py_ssize_t mark = b->len;
    if (tt_buf_putc(b, '"') < 0)
        return TT_ERR;
    int r = tt_text_of(b, kind, v, -1);
    if (r != TT_OK) {
        b->len = mark;
        return r;
    }
    return tt_buf_putc(b, '"') < 0 ? TT_ERR : TT_OK;
}

/* TIME: a timedelta whose microseconds fit a signed 64-bit long (what the Avro long holds). */
static int put_time(tt_buf *b, PyObject *v)
{
    if (!PyDelta_CheckExact(v))
        return NOFIT;
    long long days = PyDateTime_DELTA_GET_DAYS(v), us;
    long long rest = (long long)PyDateTime_DELTA_GET_SECONDS(v) * 1000000 + PyDateTime_DELTA_GET_MICROSECONDS(v);
    if (__builtin_mul_overflow(days, 86400000000LL, &us) || __builtin_add_overflow(us, rest, &us))
        return NOFIT;
    return put_quoted_text(b, TT_K_TIME, v);
}

/* ------------------------------------------------------------------ values without a schema */

static int put_jsonable(tt_buf *b, PyObject *v, int depth);

static int put_jsonable_dict(tt_buf *b, PyObject *v, int depth)
{
    if (tt_buf_putc(b, '{') < 0)
        return TT_ERR;
    Py_ssize_t pos = 0;
    PyObject *k, *x;
    int first = 1;
    while (PyDict_Next(v, &pos, &k, &x)) {
        if (!first && tt_buf_putc(b, ',') < 0)
            return TT_ERR;
        first = 0;
        if (!PyUnicode_CheckExact(k))
            return TT_PASS; /* Python names the key */
        int r = tt_json_str_orjson(b, k);
        if (r != TT_OK)
            return r;
        if (tt_buf_putc(b, ':') < 0)
            return TT_ERR;
        if ((r = put_jsonable(b, x, depth + 1)) != TT_OK)
            return r;
    }
    return tt_buf_putc(b, '}') < 0 ? TT_ERR : TT_OK;
}

static int put_jsonable_list(tt_buf *b, PyObject *v, int depth)
{
    if (tt_buf_putc(b, '[') < 0)
        return TT_ERR;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
        if (i && tt_buf_putc(b, ',') < 0)
            return TT_ERR;
        int r = put_jsonable(b, PyList_GET_ITEM(v, i), depth + 1);
        if (r != TT_OK)
            return r;
    }
    return tt_buf_putc(b, ']') < 0 ? TT_ERR : TT_OK;
}

/* jsonform.jsonable + orjson: JSON types as they are, the text forms for bytes, Decimal, dates,
 * times; TT_PASS for anything else (Python raises its ConversionError). Never NOFIT. */
static int put_jsonable(tt_buf *b, PyObject *v, int depth)
{
    if (depth > MAX_DEPTH)
        return TT_PASS;
    if (v == Py_None)
        return tt_buf_put(b, "null", 4) < 0 ? TT_ERR : TT_OK;
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyUnicode_Type)
        return tt_json_str_orjson(b, v);
    if (t == &PyBool_Type)
        return tt_buf_put(b, v == Py_True ? "true" : "false", v == Py_True ? 4 : 5) < 0 ? TT_ERR : TT_OK;
    if (t == &PyLong_Type)
        return put_any_int(b, v);
    if (t == &PyFloat_Type)
        return put_float_value(b, v);
    if (t == &PyDict_Type)
        return put_jsonable_dict(b, v, depth);
    if (t == &PyList_Type)
        return put_jsonable_list(b, v, depth);
    if (t == &PyBytes_Type)
        return put_bytes_b64(b, v);
    if (t == (PyTypeObject *)tt_decimal_type)
        return put_decimal(b, v, NULL);
    if (t == PyDateTimeAPI->DateTimeType)
        return put_quoted_text(b, TT_K_DATETIME, v); /* TT_PASS when it has a time zone */
    if (t == PyDateTimeAPI->DateType)
        return put_quoted_text(b, TT_K_DATE, v);
    if (t == PyDateTimeAPI->DeltaType)
        return put_quoted_text(b, TT_K_TIME, v);
    return TT_PASS;
}

/* ------------------------------------------------------------------ values with a schema */

static int put_node(tt_buf *b, const Plan *p, Py_ssize_t at, PyObject *v, int depth);

/* The field number of dict key k in record node n, or -1 (not a field); -2 with an error set. */
static Py_ssize_t field_of(const Node *n, PyObject *k, Py_ssize_t guess)
{
    /* rows usually list their fields in the schema's order: try that first */
    if (guess < n->count) {
        PyObject *name = PyTuple_GET_ITEM(n->names, guess);
        if (name == k)
            return guess;
        if (PyUnicode_GET_LENGTH(name) == PyUnicode_GET_LENGTH(k)) {
            int eq = PyUnicode_Compare(name, k);
            if (eq == -1 && PyErr_Occurred())
                return -2;
            if (eq == 0)
                return guess;
        }
    }
    PyObject *at = PyDict_GetItemWithError(n->index, k);
    if (at == NULL)
        return PyErr_Occurred() ? -2 : -1;
    return PyLong_AsSsize_t(at);
}

/* A record: an exact dict holding exactly the schema's fields, written in the dict's own order
 * (the Python writer keeps it). */
static int put_record(tt_buf *b, const Plan *p, const Node *n, PyObject *v, int depth)
{
    if (!PyDict_CheckExact(v) || PyDict_GET_SIZE(v) != n->count)
        return NOFIT;
    if (tt_buf_putc(b, '{') < 0)
        return TT_ERR;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *x;
    while (PyDict_Next(v, &pos, &k, &x)) {
        if (!PyUnicode_CheckExact(k))
            return TT_PASS; /* a str subclass may still name a field */
        Py_ssize_t f = field_of(n, k, i);
        if (f == -2)
            return TT_ERR;
        if (f < 0)
            return NOFIT; /* same size, an unknown key: a field is missing */
        PyObject *enc = PyTuple_GET_ITEM(n->encoded, f);
        if ((i && tt_buf_putc(b, ',') < 0) || tt_buf_put(b, PyBytes_AS_STRING(enc), PyBytes_GET_SIZE(enc)) < 0)
            return TT_ERR;
        int r = put_node(b, p, n->children[f], x, depth + 1);
        if (r != TT_OK)
            return r;
        i++;
    }
    return tt_buf_putc(b, '}') < 0 ? TT_ERR : TT_OK;
}

static int put_array(tt_buf *b, const Plan *p, const Node *n, PyObject *v, int depth)
{
    if (!PyList_CheckExact(v))
        return NOFIT;
    if (tt_buf_putc(b, '[') < 0)
        return TT_ERR;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
        if (i && tt_buf_putc(b, ',') < 0)
            return TT_ERR;
        int r = put_node(b, p, n->children[0], PyList_GET_ITEM(v, i), depth + 1);
        if (r != TT_OK)
            return r;
    }
    return tt_buf_putc(b, ']') < 0 ? TT_ERR : TT_OK;
}

static int put_map(tt_buf *b, const Plan *p, const Node *n, PyObject *v, int depth)
{
    if (!PyDict_CheckExact(v))
        return NOFIT;
    if (tt_buf_putc(b, '{') < 0)
        return TT_ERR;
    Py_ssize_t pos = 0;
    PyObject *k, *x;
    int first = 1;
    while (PyDict_Next(v, &pos, &k, &x)) {
        if (!PyUnicode_CheckExact(k))
            return NOFIT;
        if (!first && tt_buf_putc(b, ',') < 0)
            return TT_ERR;
        first = 0;
        int r = tt_json_str_orjson(b, k);
        if (r != TT_OK)
            return r;
        if (tt_buf_putc(b, ':') < 0)
            return TT_ERR;
        if ((r = put_node(b, p, n->children[0], x, depth + 1)) != TT_OK)
            return r;
    }
    return tt_buf_putc(b, '}') < 0 ? TT_ERR : TT_OK;
}

/* The first branch (in Python's test order) that takes the value; in the JSON union form the
 * value is wrapped as {"branch": value} (null stays null). */
static int put_union(tt_buf *b, const Plan *p, const Node *n, PyObject *v, int depth)
{
    for (Py_ssize_t k = 0; k < n->count; k++) {
        Py_ssize_t mark = b->len;
        PyObject *label = n->encoded ? PyTuple_GET_ITEM(n->encoded, k) : NULL;
        Py_ssize_t label_len = label ? PyBytes_GET_SIZE(label) : 0;
        if (label_len && tt_buf_put(b, PyBytes_AS_STRING(label), label_len) < 0)
            return TT_ERR;
        int r = put_node(b, p, n->children[k], v, depth + 1);
        if (r == NOFIT) {
            b->len = mark;
            continue;
        }
        if (r == TT_OK && label_len && tt_buf_putc(b, '}') < 0)
            return TT_ERR;
        return r;
    }
    return NOFIT;
}

static int put_node(tt_buf *b, const Plan *p, Py_ssize_t at, PyObject *v, int depth)
{
    if (depth > MAX_DEPTH)
        return TT_PASS;
    const Node *n = &p->nodes[at];
    switch (n->kind) {
    case K_NULL:
        if (v != Py_None)
            return NOFIT;
        return tt_buf_put(b, "null", 4) < 0 ? TT_ERR : TT_OK;
    case K_BOOLEAN:
        if (!PyBool_Check(v))
            return NOFIT;
        return tt_buf_put(b, v == Py_True ? "true" : "false", v == Py_True ? 4 : 5) < 0 ? TT_ERR : TT_OK;
    case K_INT:
        return put_int_range(b, v, -2147483648LL, 2147483647LL);
    case K_LONG:
        return put_int_range(b, v, LLONG_MIN, LLONG_MAX);
    case K_DOUBLE:
        if (!PyFloat_CheckExact(v))
            return NOFIT;
        return put_float_value(b, v);
    case K_BYTES:
        if (!PyBytes_CheckExact(v))
            return NOFIT;
        return put_bytes_b64(b, v);
    case K_FIXED:
        if (!PyBytes_CheckExact(v) || PyBytes_GET_SIZE(v) != n->size)
            return NOFIT;
        return put_bytes_b64(b, v);
    case K_STRING:
        return put_str(b, v);
    case K_ENUM: {
        if (!PyUnicode_CheckExact(v))
            return NOFIT;
        int in = PySet_Contains(n->symbols, v);
        if (in < 0)
            return TT_ERR;
        return in ? put_str(b, v) : NOFIT;
    }
    case K_BIGINT:
        return put_bigint(b, n, v);
    case K_DECIMAL:
        if (Py_TYPE(v) != (PyTypeObject *)tt_decimal_type)
            return NOFIT;
        return put_decimal(b, v, n);
    case K_DECIMAL_TEXT:
        if (Py_TYPE(v) != (PyTypeObject *)tt_decimal_type)
            return NOFIT;
        return put_decimal(b, v, NULL);
    case K_DATE:
        if (!PyDate_CheckExact(v))
            return NOFIT;
        return put_quoted_text(b, TT_K_DATE, v);
    case K_DATETIME:
        if (!PyDateTime_CheckExact(v) || PyDateTime_DATE_GET_TZINFO(v) != Py_None)
            return NOFIT;
        return put_quoted_text(b, TT_K_DATETIME, v);
    case K_TIME:
        return put_time(b, v);
    case K_FOREIGN:
        return put_jsonable(b, v, depth);
    case K_RECORD:
        return put_record(b, p, n, v, depth);
    case K_ARRAY:
        return put_array(b, p, n, v, depth);
    case K_MAP:
        return put_map(b, p, n, v, depth);
    case K_UNION:
        return put_union(b, p, n, v, depth);
    default: /* K_PASS */
        return TT_PASS;
    }
}

/* ------------------------------------------------------------------ records */

enum { PART_KEY = 0, PART_PAYLOAD = 1 };
#define META_ENTRIES 16
enum { A_POSITION, A_OPERATION, A_METADATA, A_KEY, A_BEFORE, A_AFTER, A_COUNT };
static const char *const attr_names[A_COUNT] = {"position", "operation", "metadata", "key", "before", "after"};

/* The batch's output: a PyMem buffer grown by doubling, copied into the returned bytes once
 * (public API only: resizing a bytes object in place needs a private call). Each record is
 * written into a small reused buffer first (hot in the cache) and appended here once
 * complete, so a record handed back leaves nothing to undo. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Output;

static int output_append(Output *out, const char *p, Py_ssize_t n)
{
    if (n > out->cap - out->len) {
        if (n > PY_SSIZE_T_MAX / 2 - out->len) {
            PyErr_NoMemory();
            return -1;
        }
        Py_ssize_t cap = out->cap * 2 > out->len + n ? out->cap * 2 : out->len + n;
        char *data = PyMem_Realloc(out->data, (size_t)cap);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        out->data = data;
        out->cap = cap;
    }
    memcpy(out->data + out->len, p, (size_t)n);
    out->len += n;
    return 0;
}

/* What one dumps() call holds: the parsed config and, per part, the last schema decision. */
typedef struct {
    PyTypeObject *record_type;
    Py_ssize_t offsets[A_COUNT]; /* the Record slots, read directly (Record uses __slots__) */
    PyObject *operations, *operation_texts;
    PyObject *ref_keys[2][2];    /* [part][0 subject, 1 version] */
    PyObject *derived_key, *collection_key;
    PyObject *resolve, *handback;
    struct {
        int valid;
        PyObject *subject, *version, *collection; /* strong refs: compared by identity first */
        Plan *plan;                               /* NULL: hand the record back */
        PyObject *extra;                          /* bytes: '"subject-key":"...","version-key":"..."' or NULL */
    } part[2];
    /* the metadata dict written last (a strong ref keeps its keys and values alive), where its
     * entries are in its record's line, and where each of its first META_ENTRIES entries is;
     * meta_base: where that line starts in the output */
    PyObject *meta_dict;
    Py_ssize_t meta_at, meta_len, meta_count, meta_base;
    Output *out;
    struct { PyObject *key, *value; Py_ssize_t at, len; } meta[META_ENTRIES];
} Batch;

static void batch_forget(Batch *bt)
{
    for (int i = 0; i < 2; i++) {
        bt->part[i].valid = 0;
        Py_CLEAR(bt->part[i].subject);
        Py_CLEAR(bt->part[i].version);
        Py_CLEAR(bt->part[i].collection);
        Py_CLEAR(bt->part[i].plan);
        Py_CLEAR(bt->part[i].extra);
    }
    Py_CLEAR(bt->meta_dict);
    bt->meta_count = 0;
}

/* Offsets of the Record slots from its member descriptors; -1 (no exception) when Record is not
 * laid out that way, -2 with an exception. */
static int batch_offsets(Batch *bt)
{
    int at = rs_slot_offsets(bt->record_type, attr_names, A_COUNT, bt->offsets);
    return at < 0 ? -2 : (at < A_COUNT ? -1 : 0);
}

static inline PyObject *slot(const Batch *bt, PyObject *rec, int attr)
{
    return *(PyObject **)((char *)rec + bt->offsets[attr]);
}

static int same(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (a == NULL || b == NULL)
        return 0;
    return PyObject_RichCompareBool(a, b, Py_EQ);
}

/* The schema decision for `part` of a record with this metadata (cached while its inputs repeat):
 * 1 with bt->part[part] set, 0 to hand the record back, -1 on error. */
static int resolve_part(Batch *bt, int part, PyObject *metadata, PyObject *subject, PyObject *version)
{
    PyObject *collection = PyDict_GetItemWithError(metadata, bt->collection_key);
    if (collection == NULL && PyErr_Occurred())
        return -1;
    if (bt->part[part].valid) {
        int a = same(bt->part[part].subject, subject), c, d;
        if (a < 0 || (a && (c = same(bt->part[part].version, version)) < 0)
            || (a && c && (d = same(bt->part[part].collection, collection)) < 0))
            return -1;
        if (a && c && d)
            return bt->part[part].plan != NULL;
    }
    PyObject *res = PyObject_CallFunction(bt->resolve, "iOOO", part, metadata, subject ? subject : Py_None,
                                          version ? version : Py_None);
    if (res == NULL)
        return -1;
    Plan *plan = NULL;
    PyObject *extra = NULL;
    if (res != Py_None) {
        if (!PyTuple_CheckExact(res) || PyTuple_GET_SIZE(res) != 2 || !Py_IS_TYPE(PyTuple_GET_ITEM(res, 0), &PlanType)
            || (PyTuple_GET_ITEM(res, 1) != Py_None && !PyBytes_CheckExact(PyTuple_GET_ITEM(res, 1)))) {
            Py_DECREF(res);
            PyErr_SetString(PyExc_TypeError, "resolve must return None or (Plan, bytes | None)");
            return -1;
        }
        plan = (Plan *)Py_NewRef(PyTuple_GET_ITEM(res, 0));
        if (PyTuple_GET_ITEM(res, 1) != Py_None)
            extra = Py_NewRef(PyTuple_GET_ITEM(res, 1));
    }
    Py_DECREF(res);
    Py_XSETREF(bt->part[part].subject, Py_XNewRef(subject));
    Py_XSETREF(bt->part[part].version, Py_XNewRef(version));
    Py_XSETREF(bt->part[part].collection, Py_XNewRef(collection));
    Py_XSETREF(bt->part[part].plan, plan);
    Py_XSETREF(bt->part[part].extra, extra);
    bt->part[part].valid = 1;
    return plan != NULL;
}

/* Append `len` bytes the previous record's line has at `at`. */
static int put_again(tt_buf *b, const Batch *bt, Py_ssize_t at, Py_ssize_t len)
{
    return tt_buf_put(b, bt->out->data + bt->meta_base + at, len) < 0 ? TT_ERR : TT_OK;
}

/* The metadata entries ("k":"v",...) without braces. Records of a batch mostly share the dict
 * or most of its entries (the same key and value objects, only a timestamp differs): what the
 * previous record wrote for the same objects is copied instead of written again. */
static int put_metadata_entries(tt_buf *b, Batch *bt, PyObject *metadata)
{
    Py_ssize_t start = b->len, pos = 0, i = 0;
    if (metadata == bt->meta_dict) {
        if (put_again(b, bt, bt->meta_at, bt->meta_len) != TT_OK)
            return TT_ERR;
        for (Py_ssize_t k = 0; k < bt->meta_count; k++) /* where they are in this line */
            bt->meta[k].at += start - bt->meta_at;
        bt->meta_at = start;
        return TT_OK;
    }
    PyObject *k, *v;
    int r;
    while (PyDict_Next(metadata, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v))
            return TT_PASS;
        if (i && tt_buf_putc(b, ',') < 0)
            return TT_ERR;
        Py_ssize_t at = b->len;
        if (i < bt->meta_count && bt->meta[i].key == k && bt->meta[i].value == v)
            r = put_again(b, bt, bt->meta[i].at, bt->meta[i].len);
        else {
            r = tt_json_str_orjson(b, k);
            if (r == TT_OK)
                r = tt_buf_putc(b, ':') < 0 ? TT_ERR : tt_json_str_orjson(b, v);
        }
        if (r != TT_OK)
            return r;
        if (i < META_ENTRIES) { /* borrowed: the dict held below keeps them alive */
            bt->meta[i].key = k;
            bt->meta[i].value = v;
            bt->meta[i].at = at;
            bt->meta[i].len = b->len - at;
        }
        i++;
    }
    Py_XSETREF(bt->meta_dict, Py_NewRef(metadata));
    bt->meta_at = start;
    bt->meta_len = b->len - start;
    bt->meta_count = i < META_ENTRIES ? i : META_ENTRIES;
    return TT_OK;
}

/* Raw data (exact bytes) as base64 text, None as null; TT_PASS for anything else. */
static int put_raw(tt_buf *b, PyObject *v)
{
    if (v == Py_None)
        return tt_buf_put(b, "null", 4) < 0 ? TT_ERR : TT_OK;
    if (!PyBytes_CheckExact(v))
        return TT_PASS;
    return put_bytes_b64(b, v);
}

/* One side with the part's plan (NOFIT: the schema refuses it, Python decides), or raw. */
static int put_side(tt_buf *b, Batch *bt, int part, PyObject *v, int with_store)
{
    if (!PyDict_CheckExact(v))
        return put_raw(b, v);
    if (!with_store)
        return put_jsonable(b, v, 0);
    Plan *plan = bt->part[part].plan;
    int r = put_node(b, plan, plan->root, v, 0);
    return r == NOFIT ? TT_PASS : r;
}

/* The part's schema: TT_OK with bt->part[part] set, TT_PASS hand back, TT_ERR. *derived is set
 * when the metadata gains the part's reference. */
static int part_schema(Batch *bt, int part, PyObject *metadata, int *derived)
{
    PyObject *subject = PyDict_GetItemWithError(metadata, bt->ref_keys[part][0]);
    if (subject == NULL && PyErr_Occurred())
        return TT_ERR;
    PyObject *version = PyDict_GetItemWithError(metadata, bt->ref_keys[part][1]);
    if (version == NULL && PyErr_Occurred())
        return TT_ERR;
    int r = resolve_part(bt, part, metadata, subject, version);
    if (r < 0)
        return TT_ERR;
    if (r == 0)
        return TT_PASS;
    *derived = bt->part[part].extra != NULL;
    /* a derived reference is appended to a copy of the metadata: keys the metadata already holds
     * (as None) would keep their place instead, so those records go to Python */
    if (*derived && (subject != NULL || version != NULL))
        return TT_PASS;
    return TT_OK;
}

/* One record's line; TT_PASS when the record goes back to Python. */
static int put_record_fields(tt_buf *b, Batch *bt, PyObject *const *attrs, int with_store);

/* The record's slots are held while its line is written: resolve runs Python code, which could
 * reassign them. */
static int put_record_line(tt_buf *b, Batch *bt, PyObject *rec, int with_store)
{
    PyObject *attrs[A_COUNT];
    for (int i = 0; i < A_COUNT; i++)
        if ((attrs[i] = slot(bt, rec, i)) == NULL)
            return TT_PASS; /* an unset slot: Python raises AttributeError */
    for (int i = 0; i < A_COUNT; i++)
        Py_INCREF(attrs[i]);
    int r = put_record_fields(b, bt, attrs, with_store);
    for (int i = 0; i < A_COUNT; i++)
        Py_DECREF(attrs[i]);
    return r;
}

static int put_record_fields(tt_buf *b, Batch *bt, PyObject *const *attrs, int with_store)
{
    PyObject *position = attrs[A_POSITION], *metadata = attrs[A_METADATA];
    PyObject *key = attrs[A_KEY], *before = attrs[A_BEFORE], *after = attrs[A_AFTER];
    if (!PyBytes_CheckExact(position) || !PyDict_CheckExact(metadata))
        return TT_PASS;
    PyObject *op_text = NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(bt->operations); i++)
        if (PyTuple_GET_ITEM(bt->operations, i) == attrs[A_OPERATION])
            op_text = PyTuple_GET_ITEM(bt->operation_texts, i);
    if (op_text == NULL)
        return TT_PASS;

    int key_derived = 0, payload_derived = 0, r;
    if (with_store && PyDict_CheckExact(key) && (r = part_schema(bt, PART_KEY, metadata, &key_derived)) != TT_OK)
        return r;
    if (with_store && (PyDict_CheckExact(before) || PyDict_CheckExact(after))
        && (r = part_schema(bt, PART_PAYLOAD, metadata, &payload_derived)) != TT_OK)
        return r;
    if (key_derived || payload_derived) { /* the marker must be new too (see part_schema) */
        int has = PyDict_Contains(metadata, bt->derived_key);
        if (has < 0)
            return TT_ERR;
        if (has)
            return TT_PASS;
    }

    if (tt_buf_put(b, "{\"position\":\"", 13) < 0
        || tt_buf_put_b64(b, (const unsigned char *)PyBytes_AS_STRING(position), PyBytes_GET_SIZE(position)) < 0
        || tt_buf_put(b, "\",\"operation\":", 14) < 0
        || tt_buf_put(b, PyBytes_AS_STRING(op_text), PyBytes_GET_SIZE(op_text)) < 0
        || tt_buf_put(b, ",\"metadata\":{", 13) < 0)
        return TT_ERR;
    Py_ssize_t entries_at = b->len;
    if ((r = put_metadata_entries(b, bt, metadata)) != TT_OK)
        return r;
    int any = b->len > entries_at;
    for (int part = 0; part < 2; part++) {
        PyObject *extra = bt->part[part].extra;
        if (!(part == PART_KEY ? key_derived : payload_derived))
            continue;
        if ((any && tt_buf_putc(b, ',') < 0) || tt_buf_put(b, PyBytes_AS_STRING(extra), PyBytes_GET_SIZE(extra)) < 0)
            return TT_ERR;
        any = 1;
    }
    if (key_derived || payload_derived) {
        const char *parts = key_derived && payload_derived ? "key,payload" : key_derived ? "key" : "payload";
        if ((any && tt_buf_putc(b, ',') < 0) || tt_json_str_orjson(b, bt->derived_key) != TT_OK
            || tt_buf_putc(b, ':') < 0 || tt_json_utf8_orjson(b, parts, (Py_ssize_t)strlen(parts)) < 0)
            return TT_ERR;
    }
    if (tt_buf_put(b, "},\"key\":", 8) < 0)
        return TT_ERR;
    if ((r = put_side(b, bt, PART_KEY, key, with_store)) != TT_OK)
        return r;
    if (tt_buf_put(b, ",\"payload\":{\"before\":", 21) < 0)
        return TT_ERR;
    if ((r = put_side(b, bt, PART_PAYLOAD, before, with_store)) != TT_OK)
        return r;
    if (tt_buf_put(b, ",\"after\":", 9) < 0)
        return TT_ERR;
    if ((r = put_side(b, bt, PART_PAYLOAD, after, with_store)) != TT_OK)
        return r;
    return tt_buf_put(b, "}}\n", 3) < 0 ? TT_ERR : TT_OK;
}

/* Python's line for a record the kernel did not write, appended in its place. */
static int put_handed_back(Output *out, Batch *bt, PyObject *rec)
{
    PyObject *line = PyObject_CallOneArg(bt->handback, rec);
    if (line == NULL)
        return -1;
    int r = 0;
    if (!PyBytes_Check(line)) {
        PyErr_SetString(PyExc_TypeError, "handback must return bytes");
        r = -1;
    } else
        r = output_append(out, PyBytes_AS_STRING(line), PyBytes_GET_SIZE(line));
    Py_DECREF(line);
    /* Python may have registered or reordered derived schemas: decide the parts afresh; and the
     * truncated record may have held the cached metadata text */
    batch_forget(bt);
    return r;
}

static int batch_config(Batch *bt, PyObject *config)
{
    if (!PyTuple_CheckExact(config) || PyTuple_GET_SIZE(config) != 9 || !PyType_Check(PyTuple_GET_ITEM(config, 0))
        || !PyTuple_CheckExact(PyTuple_GET_ITEM(config, 1)) || !PyTuple_CheckExact(PyTuple_GET_ITEM(config, 2))
        || PyTuple_GET_SIZE(PyTuple_GET_ITEM(config, 1)) != PyTuple_GET_SIZE(PyTuple_GET_ITEM(config, 2))) {
        PyErr_SetString(PyExc_TypeError, "config: (Record, operations, operation_texts, 6 metadata keys)");
        return -1;
    }
    bt->record_type = (PyTypeObject *)PyTuple_GET_ITEM(config, 0);
    bt->operations = PyTuple_GET_ITEM(config, 1);
    bt->operation_texts = PyTuple_GET_ITEM(config, 2);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(bt->operation_texts); i++)
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(bt->operation_texts, i))) {
            PyErr_SetString(PyExc_TypeError, "config: operation texts must be bytes");
            return -1;
        }
    for (int i = 3; i < 9; i++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(config, i))) {
            PyErr_SetString(PyExc_TypeError, "config: metadata keys must be str");
            return -1;
        }
    bt->ref_keys[PART_KEY][0] = PyTuple_GET_ITEM(config, 3);
    bt->ref_keys[PART_KEY][1] = PyTuple_GET_ITEM(config, 4);
    bt->ref_keys[PART_PAYLOAD][0] = PyTuple_GET_ITEM(config, 5);
    bt->ref_keys[PART_PAYLOAD][1] = PyTuple_GET_ITEM(config, 6);
    bt->derived_key = PyTuple_GET_ITEM(config, 7);
    bt->collection_key = PyTuple_GET_ITEM(config, 8);
    int r = batch_offsets(bt);
    if (r == -1)
        PyErr_SetString(PyExc_TypeError, "config: the Record type has no __slots__ layout this kernel reads");
    return r < 0 ? -1 : 0;
}

/* Config(tuple): the config checked and the Record slot offsets looked up once (per process),
 * not per dumps() call (a one-record call, dumps_record, would otherwise pay for it). */
typedef struct {
    PyObject_HEAD
    PyObject *tuple;
    Py_ssize_t offsets[A_COUNT];
} Config;

static void Config_dealloc(PyObject *self)
{
    Py_CLEAR(((Config *)self)->tuple);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *Config_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *tuple;
    static char *kwlist[] = {"config", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Config", kwlist, &tuple))
        return NULL;
    Batch bt;
    memset(&bt, 0, sizeof bt);
    if (batch_config(&bt, tuple) < 0)
        return NULL;
    Config *c = (Config *)type->tp_alloc(type, 0);
    if (c == NULL)
        return NULL;
    c->tuple = Py_NewRef(tuple);
    memcpy(c->offsets, bt.offsets, sizeof c->offsets);
    return (PyObject *)c;
}

static PyTypeObject ConfigType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.convert._jsonform.Config",
    .tp_basicsize = sizeof(Config),
    .tp_dealloc = Config_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Config((Record, operations, operation_texts, key_subject, key_version, payload_subject, "
              "payload_version, derived_key, collection_key)): what dumps() reads records with.",
    .tp_new = Config_new,
};

/* The Batch's config from a checked Config: plain assignments. */
static void batch_from(Batch *bt, const Config *c)
{
    PyObject *t = c->tuple;
    bt->record_type = (PyTypeObject *)PyTuple_GET_ITEM(t, 0);
    bt->operations = PyTuple_GET_ITEM(t, 1);
    bt->operation_texts = PyTuple_GET_ITEM(t, 2);
    bt->ref_keys[PART_KEY][0] = PyTuple_GET_ITEM(t, 3);
    bt->ref_keys[PART_KEY][1] = PyTuple_GET_ITEM(t, 4);
    bt->ref_keys[PART_PAYLOAD][0] = PyTuple_GET_ITEM(t, 5);
    bt->ref_keys[PART_PAYLOAD][1] = PyTuple_GET_ITEM(t, 6);
    bt->derived_key = PyTuple_GET_ITEM(t, 7);
    bt->collection_key = PyTuple_GET_ITEM(t, 8);
    memcpy(bt->offsets, c->offsets, sizeof bt->offsets);
}

static PyObject *py_dumps(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *records, *config, *resolve, *handback;
    if (!PyArg_ParseTuple(args, "OOOO:dumps", &records, &config, &resolve, &handback))
        return NULL;
    if (!PyList_CheckExact(records) && !PyTuple_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "records must be a list or tuple");
        return NULL;
    }
    if (!Py_IS_TYPE(config, &ConfigType)) {
        PyErr_SetString(PyExc_TypeError, "config must be a Config");
        return NULL;
    }
    Batch bt;
    memset(&bt, 0, sizeof bt);
    batch_from(&bt, (Config *)config); /* borrowed: the caller holds config for the call */
    int with_store = resolve != Py_None;
    bt.resolve = resolve;
    bt.handback = handback;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(records);
    tt_buf b;
    if (tt_buf_init(&b, 4096) < 0)
        return NULL;
    Output output = {NULL, 0, 256 * (n ? n : 1)};
    output.data = PyMem_Malloc((size_t)output.cap);
    if (output.data == NULL) {
        PyErr_NoMemory();
        tt_buf_free(&b);
        return NULL;
    }
    bt.out = &output;
    PyObject *out = NULL;
    /* the records stay alive (the list holds them) unless a callback changes the list: hold each */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i >= PySequence_Fast_GET_SIZE(records))
            break;
        PyObject *rec = Py_NewRef(PySequence_Fast_GET_ITEM(records, i));
        tt_buf_clear(&b);
        int r = Py_IS_TYPE(rec, bt.record_type) ? put_record_line(&b, &bt, rec, with_store) : TT_PASS;
        if (r == TT_PASS || r == NOFIT)
            r = put_handed_back(&output, &bt, rec) < 0 ? TT_ERR : TT_OK;
        else if (r == TT_OK) {
            bt.meta_base = output.len; /* the metadata cache now refers to this line */
            r = output_append(&output, b.data, b.len) < 0 ? TT_ERR : TT_OK;
        }
        Py_DECREF(rec);
        if (r == TT_ERR)
            goto done;
    }
    out = PyBytes_FromStringAndSize(output.data, output.len);
done:
    batch_forget(&bt);
    tt_buf_free(&b);
    PyMem_Free(output.data);
    return out;
}

/* For tests: the base64 and float writers on their own. */
static PyObject *py_b64(PyObject *mod, PyObject *arg)
{
    (void)mod;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "b64 needs bytes");
        return NULL;
    }
    tt_buf b;
    if (tt_buf_init(&b, 16) < 0)
        return NULL;
    PyObject *res = tt_buf_put_b64(&b, (const unsigned char *)PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg)) < 0
        ? NULL : PyUnicode_DecodeASCII(b.data, b.len, NULL);
    tt_buf_free(&b);
    return res;
}

/* ------------------------------------------------------------------ dumps_wire
 *
 * dumps_wire(message, operation_texts, metadata_json) -> (lines, acks) | None
 *
 * Why: a standalone destination plugin gets its records as the bytes of Destination.Run
 * requests. When it only writes them as JSON lines, building a Record per record (from_wire)
 * and writing it (dumps) costs most of the plugin's CPU, and both hold the GIL, so gRPC's
 * receiving threads wait. This reads the message and writes the lines in C with the GIL
 * released: dumps_lines(from_wire(message)) byte for byte, and the ack message
 * (framing.encode_acks of the positions) the plugin answers with once they are durable.
 *
 * It handles the plain shape only: records in field 1, each with optional position,
 * operation, metadata entries, key and payload in field order, data raw or empty. Anything else
 * (Struct data, unknown or repeated fields, an operation it has no text for, a length past its
 * message) returns None, and the caller converts the whole message in Python.
 * metadata_json(block) -> bytes | None: the JSON object of a record's metadata from the bytes
 * of its map entries (upb parses them: duplicate keys, UTF-8 checks, its key order), or None
 * when the metadata is not plain (a schema reference, which makes from_wire decode the data;
 * entries upb refuses): then the whole message is None too. Asked once per distinct block.
 *
 * Phases: scan (GIL released) -> metadata texts and output sizes (GIL) -> write (GIL released)
 * into bytes objects of the exact size, not yet visible to any other code.
 */

/* A slice of the message; at < 0: the data is absent (JSON null). */
typedef struct {
    Py_ssize_t at, len;
} WireSpan;

typedef struct {
    WireSpan position, key, before, after;
    Py_ssize_t block; /* index of its metadata block in WireScan.blocks */
    unsigned char op;
} WireRecord;

typedef struct {
    const unsigned char *s;
    Py_ssize_t n;
    unsigned char operations; /* operation numbers below this have a text */
    WireRecord *records;
    Py_ssize_t count, cap;
    WireSpan *blocks;
    Py_ssize_t block_count, block_cap;
} WireScan;

enum { WIRE_OK = 0, WIRE_PASS = 1, WIRE_NOMEM = 2 };

/* A length prefix at s[*i] of at most 5 bytes (upb refuses longer ones) whose value fits before
 * `end`; *i moves past it. -1: not so. */
static int wire_length(const unsigned char *s, Py_ssize_t end, Py_ssize_t *i, Py_ssize_t *out)
{
    unsigned long long v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (*i >= end)
            return -1;
        unsigned char c = s[(*i)++];
        v |= (unsigned long long)(c & 0x7F) << shift;
        if (c < 0x80) {
            if (v > (unsigned long long)(end - *i))
                return -1;
            *out = (Py_ssize_t)v;
            return 0;
        }
    }
    return -1;
}

/* A length-delimited field at s[*k] with tag `tag`, inside [.., end): *at and *len of its value,
 * *k past it. 0 absent, 1 read, -1 malformed. */
static int wire_field(const unsigned char *s, Py_ssize_t end, unsigned char tag, Py_ssize_t *k,
                      Py_ssize_t *at, Py_ssize_t *len)
{
    if (*k >= end || s[*k] != tag)
        return 0;
    (*k)++;
    if (wire_length(s, end, k, len) < 0)
        return -1;
    *at = *k;
    *k += *len;
    return 1;
}

/* A Data message in s[at, at + len): empty -> absent, raw_data filling it -> its bytes; -1 else
 * (structured data, more fields). */
static int wire_data(const unsigned char *s, Py_ssize_t at, Py_ssize_t len, WireSpan *out)
{
    if (len == 0) {
        out->at = -1;
        out->len = 0;
        return 0;
    }
    Py_ssize_t k = at, end = at + len;
    if (wire_field(s, end, 0x0A, &k, &out->at, &out->len) != 1 || k != end)
        return -1;
    return 0;
}

/* One record in s[k, end); its metadata block's span in *meta. -1: not the plain shape. */
static int wire_record(const WireScan *ws, Py_ssize_t k, Py_ssize_t end, WireRecord *r, WireSpan *meta)
{
    const unsigned char *s = ws->s;
    Py_ssize_t at, len;
    r->position.at = k;
    r->position.len = 0;
    r->key.at = r->before.at = r->after.at = -1;
    r->key.len = r->before.len = r->after.len = 0;
    r->op = 0;
    int got = wire_field(s, end, 0x0A, &k, &at, &len); /* position = 1 */
    if (got < 0)
        return -1;
    if (got) {
        r->position.at = at;
        r->position.len = len;
    }
    if (k < end && s[k] == 0x10) { /* operation = 2: every known number is one varint byte */
        if (k + 1 >= end || s[k + 1] >= ws->operations)
            return -1;
        r->op = s[k + 1];
        k += 2;
    }
    meta->at = k;
    while ((got = wire_field(s, end, 0x1A, &k, &at, &len)) == 1) /* metadata = 3: map entries */
        ;
    if (got < 0)
        return -1;
    meta->len = k - meta->at;
    if ((got = wire_field(s, end, 0x22, &k, &at, &len)) < 0 || (got && wire_data(s, at, len, &r->key) < 0))
        return -1; /* key = 4 */
    if ((got = wire_field(s, end, 0x2A, &k, &at, &len)) < 0) /* payload = 5: Change{before = 1, after = 2} */
        return -1;
    if (got) {
        Py_ssize_t p = at, change_end = at + len, data_at, data_len;
        if ((got = wire_field(s, change_end, 0x0A, &p, &data_at, &data_len)) < 0
            || (got && wire_data(s, data_at, data_len, &r->before) < 0))
            return -1;
        if ((got = wire_field(s, change_end, 0x12, &p, &data_at, &data_len)) < 0
            || (got && wire_data(s, data_at, data_len, &r->after) < 0))
            return -1;
        if (p != change_end)
            return -1;
    }
    return k == end ? 0 : -1;
}

/* Grow an array of `size`-byte items to hold one more (raw allocator: no GIL needed). */
static int wire_grow(void **items, Py_ssize_t count, Py_ssize_t *cap, size_t size)
{
    if (count < *cap)
        return 0;
    Py_ssize_t new_cap = *cap ? *cap * 2 : 1024;
    if ((size_t)new_cap > PY_SSIZE_T_MAX / size)
        return -1;
    void *grown = PyMem_RawRealloc(*items, (size_t)new_cap * size);
    if (grown == NULL)
        return -1;
    *items = grown;
    *cap = new_cap;
    return 0;
}

/* The records and their distinct metadata blocks (a block equal to the previous record's is not
 * added again: a batch is mostly one table). Runs without the GIL. */
static int wire_scan(WireScan *ws)
{
    const unsigned char *s = ws->s;
    Py_ssize_t i = 0, n = ws->n, size;
    while (i < n) {
        if (s[i] != 0x0A) /* a field other than records = 1 */
            return WIRE_PASS;
        i++;
        if (wire_length(s, n, &i, &size) < 0)
            return WIRE_PASS;
        if (wire_grow((void **)&ws->records, ws->count, &ws->cap, sizeof(WireRecord)) < 0)
            return WIRE_NOMEM;
        WireRecord *r = &ws->records[ws->count];
        WireSpan meta;
        if (wire_record(ws, i, i + size, r, &meta) < 0)
            return WIRE_PASS;
        i += size;
        const WireSpan *last = ws->block_count ? &ws->blocks[ws->block_count - 1] : NULL;
        if (last == NULL || last->len != meta.len || memcmp(s + last->at, s + meta.at, (size_t)meta.len) != 0) {
            if (wire_grow((void **)&ws->blocks, ws->block_count, &ws->block_cap, sizeof(WireSpan)) < 0)
                return WIRE_NOMEM;
            ws->blocks[ws->block_count++] = meta;
        }
        r->block = ws->block_count - 1;
        ws->count++;
    }
    return WIRE_OK;
}

static Py_ssize_t b64_len(Py_ssize_t n) { return ((n + 2) / 3) * 4; }

static Py_ssize_t varint_len(unsigned long long v)
{
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static char *put_varint(char *o, unsigned long long v)
{
    while (v >= 0x80) {
        *o++ = (char)(v | 0x80);
        v >>= 7;
    }
    *o++ = (char)v;
    return o;
}

/* The JSON texts around the values of a line (the keys in dumps_lines' order). */
static const char W_POSITION[] = "{\"position\":\"", W_OPERATION[] = "\",\"operation\":",
                  W_METADATA[] = ",\"metadata\":", W_KEY[] = ",\"key\":",
                  W_BEFORE[] = ",\"payload\":{\"before\":", W_AFTER[] = ",\"after\":", W_END[] = "}}\n";
#define W_LEN(text) ((Py_ssize_t)sizeof(text) - 1)
#define W_FIXED (W_LEN(W_POSITION) + W_LEN(W_OPERATION) + W_LEN(W_METADATA) + W_LEN(W_KEY) \
                 + W_LEN(W_BEFORE) + W_LEN(W_AFTER) + W_LEN(W_END))

static Py_ssize_t data_json_len(WireSpan d) { return d.at < 0 ? 4 : 2 + b64_len(d.len); }

/* framing.encode_acks: per position Ack{position = 1} in field 1; an empty Ack for no position. */
static Py_ssize_t ack_len(Py_ssize_t n)
{
    if (n == 0)
        return 2;
    Py_ssize_t inner = 1 + varint_len((unsigned long long)n) + n;
    return 1 + varint_len((unsigned long long)inner) + inner;
}

static char *put_ack(char *o, const unsigned char *position, Py_ssize_t n)
{
    *o++ = 0x0A;
    if (n == 0) {
        *o++ = 0;
        return o;
    }
    o = put_varint(o, (unsigned long long)(1 + varint_len((unsigned long long)n) + n));
    *o++ = 0x0A;
    o = put_varint(o, (unsigned long long)n);
    memcpy(o, position, (size_t)n);
    return o + n;
}

#define W_PUT(o, text) (memcpy((o), (text), sizeof(text) - 1), (o) + sizeof(text) - 1)

static char *put_data_json(char *o, const unsigned char *s, WireSpan d)
{
    if (d.at < 0) {
        memcpy(o, "null", 4);
        return o + 4;
    }
    *o++ = '"';
    o = tt_b64_write(o, s + d.at, d.len);
    *o++ = '"';
    return o;
}

/* What the write phase reads: texts as pointers into bytes objects held for the whole call. */
typedef struct {
    const char *data;
    Py_ssize_t len;
} WireText;

/* The lines and acks into buffers of exactly the sizes computed before. Runs without the GIL. */
static void wire_write(const WireScan *ws, const WireText *ops, const WireText *meta, char *lines, char *acks)
{
    const unsigned char *s = ws->s;
    for (Py_ssize_t i = 0; i < ws->count; i++) {
        const WireRecord *r = &ws->records[i];
        char *o = W_PUT(lines, W_POSITION);
        o = tt_b64_write(o, s + r->position.at, r->position.len);
        o = W_PUT(o, W_OPERATION);
        memcpy(o, ops[r->op].data, (size_t)ops[r->op].len);
        o = W_PUT(o + ops[r->op].len, W_METADATA);
        memcpy(o, meta[r->block].data, (size_t)meta[r->block].len);
        o = W_PUT(o + meta[r->block].len, W_KEY);
        o = put_data_json(o, s, r->key);
        o = W_PUT(o, W_BEFORE);
        o = put_data_json(o, s, r->before);
        o = W_PUT(o, W_AFTER);
        o = put_data_json(o, s, r->after);
        lines = W_PUT(o, W_END);
        acks = put_ack(acks, s + r->position.at, r->position.len);
    }
}

/* The JSON text of each distinct metadata block (metadata_json, cached by the block's bytes);
 * WIRE_PASS when one is not plain. `held` keeps the texts alive. GIL held. */
static int wire_metadata(const WireScan *ws, PyObject *metadata_json, PyObject *held, WireText *meta)
{
    PyObject *cache = PyDict_New();
    if (cache == NULL)
        return -1;
    int r = WIRE_OK;
    for (Py_ssize_t i = 0; i < ws->block_count && r == WIRE_OK; i++) {
        PyObject *block = PyBytes_FromStringAndSize((const char *)ws->s + ws->blocks[i].at, ws->blocks[i].len);
        if (block == NULL) {
            Py_DECREF(cache);
            return -1;
        }
        PyObject *text = PyDict_GetItemWithError(cache, block); /* borrowed */
        if (text == NULL && !PyErr_Occurred()) {
            PyObject *made = PyObject_CallOneArg(metadata_json, block);
            if (made != NULL && made != Py_None && !PyBytes_CheckExact(made)) {
                PyErr_SetString(PyExc_TypeError, "metadata_json must return bytes or None");
                Py_CLEAR(made);
            }
            if (made != NULL && PyDict_SetItem(cache, block, made) == 0)
                text = made;
            Py_XDECREF(made); /* the cache holds it */
        }
        Py_DECREF(block);
        if (text == NULL)
            r = -1;
        else if (text == Py_None)
            r = WIRE_PASS;
        else if (PyList_Append(held, text) < 0)
            r = -1;
        else {
            meta[i].data = PyBytes_AS_STRING(text);
            meta[i].len = PyBytes_GET_SIZE(text);
        }
    }
    Py_DECREF(cache);
    return r;
}

/* Exact sizes of the lines and the acks; -1 (MemoryError set) past what a bytes object holds. */
static int wire_sizes(const WireScan *ws, const WireText *ops, const WireText *meta, Py_ssize_t *lines,
                      Py_ssize_t *acks)
{
    /* every term is below 7 x the message's size (metadata text: 6 bytes per escaped byte), and
     * there are 7 per record: summing in 64 bits cannot wrap for any message Python can hold */
    unsigned long long total = 0, ack_total = 0;
    for (Py_ssize_t i = 0; i < ws->count; i++) {
        const WireRecord *r = &ws->records[i];
        total += (unsigned long long)(W_FIXED + b64_len(r->position.len) + ops[r->op].len + meta[r->block].len
                                      + data_json_len(r->key) + data_json_len(r->before) + data_json_len(r->after));
        ack_total += (unsigned long long)ack_len(r->position.len);
    }
    if (total > (unsigned long long)PY_SSIZE_T_MAX || ack_total > (unsigned long long)PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
        return -1;
    }
    *lines = (Py_ssize_t)total;
    *acks = (Py_ssize_t)ack_total;
    return 0;
}

static PyObject *py_dumps_wire(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *message, *op_texts, *metadata_json;
    if (!PyArg_ParseTuple(args, "SO!O:dumps_wire", &message, &PyTuple_Type, &op_texts, &metadata_json))
        return NULL;
    Py_ssize_t n_ops = PyTuple_GET_SIZE(op_texts);
    if (n_ops > 127) {
        PyErr_SetString(PyExc_ValueError, "dumps_wire: at most 127 operation texts");
        return NULL;
    }
    WireText ops[127];
    for (Py_ssize_t i = 0; i < n_ops; i++) {
        PyObject *t = PyTuple_GET_ITEM(op_texts, i);
        if (!PyBytes_CheckExact(t)) {
            PyErr_SetString(PyExc_TypeError, "dumps_wire: operation texts must be bytes");
            return NULL;
        }
        ops[i].data = PyBytes_AS_STRING(t);
        ops[i].len = PyBytes_GET_SIZE(t);
    }
    if (!tt_b64_pairs_ready)
        tt_b64_fill_pairs(); /* before the GIL goes: the write phase reads the table */

    /* the caller's arguments stay referenced for the call; the message is also held here, so the
     * phases without the GIL read an immutable bytes object nobody can free */
    Py_INCREF(message);
    WireScan ws;
    memset(&ws, 0, sizeof ws);
    ws.s = (const unsigned char *)PyBytes_AS_STRING(message);
    ws.n = PyBytes_GET_SIZE(message);
    ws.operations = (unsigned char)n_ops;
    PyObject *result = NULL, *held = NULL, *lines = NULL, *acks = NULL;
    WireText *meta = NULL;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = wire_scan(&ws);
    Py_END_ALLOW_THREADS
    if (r == WIRE_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    if (r == WIRE_PASS)
        goto pass;
    held = PyList_New(0);
    meta = PyMem_Malloc(sizeof(WireText) * (size_t)(ws.block_count ? ws.block_count : 1));
    if (held == NULL || meta == NULL) {
        if (meta == NULL)
            PyErr_NoMemory();
        goto done;
    }
    if ((r = wire_metadata(&ws, metadata_json, held, meta)) < 0)
        goto done;
    if (r == WIRE_PASS)
        goto pass;
    Py_ssize_t lines_len, acks_len;
    if (wire_sizes(&ws, ops, meta, &lines_len, &acks_len) < 0)
        goto done;
    if ((lines = PyBytes_FromStringAndSize(NULL, lines_len)) == NULL
        || (acks = PyBytes_FromStringAndSize(NULL, acks_len)) == NULL)
        goto done;
    {
        char *lines_out = PyBytes_AS_STRING(lines), *acks_out = PyBytes_AS_STRING(acks);
        Py_BEGIN_ALLOW_THREADS
        wire_write(&ws, ops, meta, lines_out, acks_out);
        Py_END_ALLOW_THREADS
    }
    result = PyTuple_Pack(2, lines, acks);
    goto done;
pass:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(lines);
    Py_XDECREF(acks);
    Py_XDECREF(held);
    PyMem_Free(meta);
    PyMem_RawFree(ws.records);
    PyMem_RawFree(ws.blocks);
    Py_DECREF(message);
    return result;
}

static PyMethodDef module_methods[] = {
    {"dumps", py_dumps, METH_VARARGS,
     "dumps(records, config: Config, resolve, handback) -> bytes: the JSON lines of the records "
     "(resolve None: no store)."},
    {"b64", py_b64, METH_O, "b64(data) -> str: standard base64 (for tests)."},
    {"dumps_wire", py_dumps_wire, METH_VARARGS,
     "dumps_wire(message, operation_texts, metadata_json) -> (lines, acks) or None: a batch message's "
     "records as JSON lines and its ack message, None when it is not the plain shape."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jsonform", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__jsonform(void)
{
    if (tt_init() < 0 || PyType_Ready(&PlanType) < 0 || PyType_Ready(&ConfigType) < 0)
        return NULL;
    if (orjson_dumps == NULL) {
        PyObject *orjson = PyImport_ImportModule("orjson");
        if (orjson == NULL)
            return NULL;
        orjson_dumps = PyObject_GetAttrString(orjson, "dumps");
        Py_DECREF(orjson);
        if (orjson_dumps == NULL)
            return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    static const struct { const char *name; int value; } kinds[] = {
        {"K_NULL", K_NULL}, {"K_BOOLEAN", K_BOOLEAN}, {"K_INT", K_INT}, {"K_LONG", K_LONG},
        {"K_DOUBLE", K_DOUBLE}, {"K_BYTES", K_BYTES}, {"K_STRING", K_STRING}, {"K_DECIMAL_TEXT", K_DECIMAL_TEXT},
        {"K_DATE", K_DATE}, {"K_DATETIME", K_DATETIME}, {"K_TIME", K_TIME}, {"K_FOREIGN", K_FOREIGN},
        {"K_PASS", K_PASS}, {"K_BIGINT", K_BIGINT}, {"K_DECIMAL", K_DECIMAL}, {"K_ENUM", K_ENUM},
        {"K_FIXED", K_FIXED}, {"K_RECORD", K_RECORD}, {"K_ARRAY", K_ARRAY}, {"K_MAP", K_MAP},
        {"K_UNION", K_UNION},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (PyModule_AddIntConstant(m, kinds[i].name, kinds[i].value) < 0)
            goto fail;
    if (PyModule_AddObjectRef(m, "Plan", (PyObject *)&PlanType) < 0
        || PyModule_AddObjectRef(m, "Config", (PyObject *)&ConfigType) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
