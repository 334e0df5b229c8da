/* _avro_decode: Avro binary -> native Python values, one compiled plan per schema.
 *
 * Why: Codec.decode (cdcflow.avro_values) runs a generated Python reader per record; for the
 * flat rows CDC moves, the interpreter overhead of that reader is most of the standalone
 * plugin's decode cost. This kernel walks a plan (built once in Python from the codec's node
 * tree, see avro_values._decode_plan) and builds exactly the values the generated reader
 * builds: same types, same Decimal exponents, same date/datetime/timedelta.
 *
 * Contract: Plan(nodes, root, fallback).decode(data) returns the value, or HAND_BACK when it
 * does not decide (calling the plan, plan(data), returns fallback(data) then): input that is not exact bytes, truncated input, trailing bytes, a varint beyond 64
 * bits, a bad boolean / union index / enum index, invalid UTF-8, an out-of-range date, nesting
 * deeper than MAX_DEPTH, or any exception a Python callable of the plan raised. The Python
 * path then decodes the same bytes and returns the value or raises the typed error. Only
 * MemoryError-class failures of the kernel's own allocations propagate as exceptions.
 *
 * Plan nodes (a tuple of tuples; children are indexes into that tuple, so recursive schemas
 * are plain data without reference cycles):
 *   (K_NULL,) (K_BOOLEAN,) (K_LONG,) (K_FLOAT,) (K_DOUBLE,) (K_BYTES,) (K_STRING,) (K_BIGINT,)
 *   (K_DATE,) (K_DATETIME,) (K_TIME,)
 *   (K_DECIMAL, precision, scale, fast, convert, Decimal)  convert(raw bytes) -> Decimal is the
 *        reference conversion, used whenever the C fast path (fast=1, <= 8 bytes) does not apply
 *   (K_DECIMAL_TEXT, Decimal)       Decimal(text)
 *   (K_ENUM, symbols)               symbols: tuple of str
 *   (K_FIXED, size)
 *   (K_RECORD, keys, children)      keys: tuple of str (the native field names), children: ints
 *   (K_ARRAY, item) (K_MAP, value) (K_UNION, branches)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "plantuple.h"

enum {
    K_NULL = 0, K_BOOLEAN, K_LONG, K_FLOAT, K_DOUBLE, K_BYTES, K_STRING, K_BIGINT, K_DECIMAL,
    K_DECIMAL_TEXT, K_DATE, K_DATETIME, K_TIME, K_ENUM, K_FIXED, K_RECORD, K_ARRAY, K_MAP, K_UNION,
    K_COUNT
};

/* Nesting the kernel follows before handing back (keeps the C stack small). */
#define MAX_DEPTH 64
/* Items of zero bytes (nulls) per array/map block the kernel builds itself; above, hand back. */
#define MAX_EMPTY_ITEMS 65536

#define US_PER_SECOND 1000000LL
#define US_PER_DAY 86400000000LL
#define EPOCH_ORDINAL 719163LL    /* date(1970, 1, 1).toordinal() */
#define MAX_ORDINAL 3652059LL     /* date(9999, 12, 31).toordinal() */

/* The one sentinel: "not decided here, ask the Python path". Set at module init. */
static PyObject *hand_back = NULL;

typedef struct {
    int kind;
    int precision, scale, decimal_fast;
    int items_take_no_bytes; /* K_ARRAY: an item may be zero bytes long (nulls) */
    Py_ssize_t size;        /* K_FIXED: byte count */
    Py_ssize_t count;       /* K_RECORD fields, K_UNION branches, K_ENUM symbols */
    Py_ssize_t *children;   /* K_RECORD fields, K_UNION branches; K_ARRAY / K_MAP: children[0] */
    PyObject *names;        /* borrowed from the plan tuple: K_RECORD keys, K_ENUM symbols */
    PyObject *convert;      /* borrowed: K_DECIMAL reference conversion */
    PyObject *decimal_type; /* borrowed: K_DECIMAL, K_DECIMAL_TEXT */
} PlanNode;

typedef struct {
    PyObject_HEAD
    PyObject *source;       /* the nodes tuple: keeps every borrowed object above alive */
    PyObject *fallback;     /* plan(data) calls fallback(data) where decode(data) hands back */
    vectorcallfunc vectorcall;
    PlanNode *nodes;
    Py_ssize_t n_nodes;
    Py_ssize_t root;
} Plan;

typedef struct {
    const unsigned char *p, *end;
    int depth;
} Reader;

/* ------------------------------------------------------------------------------------------ */
/* primitive reads: 0 on success, -1 to hand back (no exception)                               */
/* ------------------------------------------------------------------------------------------ */

/* Unsigned base-128 varint, as cdcflow.varint.read_uvarint accepts it: at most 10 bytes and
 * at most 64 bits of value (redundant zero continuation bytes are fine). */
static inline int read_uvarint(Reader *r, uint64_t *out)
{
    uint64_t value = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (r->p >= r->end)
            return -1;
        unsigned b = *r->p++;
        if (shift == 63 && (b & 0x7F) > 1)
            return -1;  /* bits beyond 64, or a continuation past the 10th byte */
        value |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = value;
            return 0;
        }
    }
    return -1;
}

static inline int read_long(Reader *r, int64_t *out)
{
    uint64_t z;
    if (r->p < r->end && *r->p < 0x80) {  /* one byte: most lengths, indexes, small ints */
        z = *r->p++;
    } else if (read_uvarint(r, &z) < 0) {
        return -1;
    }
    *out = (int64_t)((z >> 1) ^ (~(z & 1) + 1));  /* zig-zag */
    return 0;
}

/* A length-prefixed run of bytes that lies wholly inside the input. */
static inline int read_span(Reader *r, const unsigned char **start, Py_ssize_t *len)
{
    int64_t n;
    if (read_long(r, &n) < 0 || n < 0 || n > r->end - r->p)
        return -1;
    *start = r->p;
    *len = (Py_ssize_t)n;
    r->p += n;
    return 0;
}

/* Clears a Python-level failure (the Python path will meet and name it) so the caller hands
 * back; NULL either way. */
static PyObject *hand_back_from_python_error(void)
{
    PyErr_Clear();
    return NULL;
}

static PyObject *strict_utf8(const unsigned char *s, Py_ssize_t n)
{
    PyObject *v = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    return v != NULL ? v : hand_back_from_python_error();
}

/* ------------------------------------------------------------------------------------------ */
/* calendar                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Proleptic Gregorian year/month/day of a day count from 1970-01-01 (400-year cycles of
 * 146097 days; the year is counted from March so the leap day ends it). */
static void civil_from_days(int64_t days, int *year, int *month, int *day)
{
    int64_t shifted = days + 719468;  /* days since 0000-03-01 */
    int64_t cycle = (shifted >= 0 ? shifted : shifted - 146096) / 146097;
    int64_t day_of_cycle = shifted - cycle * 146097;                       /* 0 .. 146096 */
    int64_t year_of_cycle =
        (day_of_cycle - day_of_cycle / 1460 + day_of_cycle / 36524 - day_of_cycle / 146096) / 365;
    int64_t day_of_year = day_of_cycle - (365 * year_of_cycle + year_of_cycle / 4 - year_of_cycle / 100);
    int64_t month_from_march = (5 * day_of_year + 2) / 153;                 /* 0 = March */
    *day = (int)(day_of_year - (153 * month_from_march + 2) / 5 + 1);
    *month = (int)(month_from_march < 10 ? month_from_march + 3 : month_from_march - 9);
    *year = (int)(year_of_cycle + cycle * 400 + (*month <= 2));
}

/* Floor division of microseconds into whole days and the microseconds left (0 .. day - 1). */
static inline void split_days(int64_t us, int64_t *days, int64_t *rest)
{
    int64_t d = us / US_PER_DAY, r = us % US_PER_DAY;
    if (r < 0) {
        r += US_PER_DAY;
        d -= 1;
    }
    *days = d;
    *rest = r;
}

/* date.fromordinal(v + EPOCH_ORDINAL); out of date's range: hand back. */
static PyObject *make_date(int64_t v)
{
    if (v < 1 - EPOCH_ORDINAL || v > MAX_ORDINAL - EPOCH_ORDINAL)
        return NULL;
    int y, m, d;
    civil_from_days(v, &y, &m, &d);
    return PyDate_FromDate(y, m, d);
}

/* datetime(1970, 1, 1) + timedelta(microseconds=v): naive; out of datetime's range: hand back. */
static PyObject *make_datetime(int64_t v)
{
    int64_t days, rest;
    split_days(v, &days, &rest);
    if (days < 1 - EPOCH_ORDINAL || days > MAX_ORDINAL - EPOCH_ORDINAL)
        return NULL;
    int y, m, d;
    civil_from_days(days, &y, &m, &d);
    int64_t seconds = rest / US_PER_SECOND;
    return PyDateTime_FromDateAndTime(y, m, d, (int)(seconds / 3600), (int)(seconds / 60 % 60),
                                      (int)(seconds % 60), (int)(rest % US_PER_SECOND));
}

/* timedelta(microseconds=v), normalized as timedelta normalizes (days may be negative). */
static PyObject *make_time(int64_t v)
{
    int64_t days, rest;
    split_days(v, &days, &rest);
    return PyDelta_FromDSU((int)days, (int)(rest / US_PER_SECOND), (int)(rest % US_PER_SECOND));
}

/* ------------------------------------------------------------------------------------------ */
/* numbers held as big-endian two's complement bytes (bigint, decimal)                         */
/* ------------------------------------------------------------------------------------------ */

/* The signed value of 1..8 big-endian bytes. */
static inline int64_t be_signed64(const unsigned char *s, Py_ssize_t n)
{
    uint64_t u = (s[0] & 0x80) ? ~(uint64_t)0 : 0;  /* sign extension */
    for (Py_ssize_t i = 0; i < n; i++)
        u = (u << 8) | s[i];
    return (int64_t)u;
}

/* int.from_bytes(s, "big", signed=True) */
static PyObject *int_from_be(const unsigned char *s, Py_ssize_t n)
{
    if (n == 0)
        return PyLong_FromLong(0);
    if (n <= 8)
        return PyLong_FromLongLong(be_signed64(s, n));
#if PY_VERSION_HEX >= 0x030D0000
    return PyLong_FromNativeBytes(s, (size_t)n, Py_ASNATIVEBYTES_BIG_ENDIAN);
#else
    return _PyLong_FromByteArray(s, (size_t)n, 0, 1);
#endif
}

/* Widest unscaled decimal the C path converts: 32 bytes hold every 65-digit DECIMAL. */
#define DECIMAL_FAST_BYTES 32
/* Room for its digits: 32 bytes < 10**78, plus a sign, "E-", a scale and the NUL. */
#define DECIMAL_TEXT_SIZE 112

/* Writes the decimal digits of the big-endian two's complement number s[0..n) (1 <= n <=
 * DECIMAL_FAST_BYTES) as "-?<digits>" into text; returns the digit count (sign excluded). */
static int signed_be_to_text(const unsigned char *s, Py_ssize_t n, char *text, int *text_len)
{
    /* magnitude as base-2**32 limbs, most significant first */
    uint32_t limbs[DECIMAL_FAST_BYTES / 4];
    int n_limbs = (int)((n + 3) / 4), negative = s[0] >> 7;
    memset(limbs, 0, sizeof limbs);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t from_end = n - 1 - i;  /* byte position counted from the least significant */
        limbs[n_limbs - 1 - from_end / 4] |= (uint32_t)s[i] << (8 * (from_end % 4));
    }
    if (n % 4 != 0 && negative)  /* sign-extend the partial top limb */
        limbs[0] |= ~(uint32_t)0 << (8 * (n % 4));
    if (negative) {  /* two's complement negate: invert, add one */
        uint64_t carry = 1;
        for (int i = n_limbs - 1; i >= 0; i--) {
            uint64_t sum = (uint64_t)(uint32_t)~limbs[i] + carry;
            limbs[i] = (uint32_t)sum;
            carry = sum >> 32;
        }
    }
    /* repeated division by 10**9 gives nine digits at a time, least significant chunk first */
    char reversed[DECIMAL_TEXT_SIZE];
    int count = 0, top = 0;
    while (top < n_limbs && limbs[top] == 0)
        top++;
    do {
        uint64_t rest = 0;
        for (int i = top; i < n_limbs; i++) {
            uint64_t cur = (rest << 32) | limbs[i];
            limbs[i] = (uint32_t)(cur / 1000000000u);
            rest = cur % 1000000000u;
        }
        while (top < n_limbs && limbs[top] == 0)
            top++;
        for (int k = 0; k < 9 && (rest != 0 || top < n_limbs || k == 0); k++) {
            reversed[count++] = (char)('0' + rest % 10);
            rest /= 10;
        }
    } while (top < n_limbs);
    int len = 0;
    if (negative)
        text[len++] = '-';
    for (int i = count - 1; i >= 0; i--)
        text[len++] = reversed[i];
    *text_len = len;
    return count;
}

/* The unscaled value with ``scale`` fraction digits. The C path writes "<unscaled>E-<scale>",
 * which Decimal() reads exactly, giving the value and exponent the reference conversion
 * (Context(prec).create_decimal(unscaled).scaleb(-scale)) gives when nothing rounds: the plan
 * sets ``fast`` only for scales where scaleb stays exact, and here the digits must fit the
 * precision. Anything else goes through the reference conversion itself. */
static PyObject *make_decimal(const PlanNode *node, const unsigned char *s, Py_ssize_t n)
{
    if (node->decimal_fast && n <= DECIMAL_FAST_BYTES) {
        char text[DECIMAL_TEXT_SIZE];
        int len = 1, digits = 1;
        text[0] = '0';  /* no bytes: zero */
        if (n > 0)
            digits = signed_be_to_text(s, n, text, &len);
        if (digits <= node->precision) {
            len += snprintf(text + len, sizeof text - (size_t)len, "E-%d", node->scale);
            PyObject *str = PyUnicode_FromStringAndSize(text, len);
            if (str == NULL)
                return NULL;
            PyObject *v = PyObject_CallOneArg(node->decimal_type, str);
            Py_DECREF(str);
            return v != NULL ? v : hand_back_from_python_error();
        }
    }
    PyObject *raw = PyBytes_FromStringAndSize((const char *)s, n);
    if (raw == NULL)
        return NULL;
    PyObject *v = PyObject_CallOneArg(node->convert, raw);
    Py_DECREF(raw);
    return v != NULL ? v : hand_back_from_python_error();
}

/* ------------------------------------------------------------------------------------------ */
/* the walk                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Every decode_* returns a new reference, or NULL: with an exception set on a failure of the
 * kernel's own (MemoryError-class), without one to hand back. */
static PyObject *decode_node(const Plan *plan, Py_ssize_t index, Reader *r);

/* A dict sized for ``n`` keys up front: a 20-field row would otherwise resize three times. */
static inline PyObject *new_dict(Py_ssize_t n)
{
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_NewPresized(n);
#else
    (void)n;
    return PyDict_New();
#endif
}

static PyObject *decode_record(const Plan *plan, const PlanNode *node, Reader *r)
{
    PyObject *out = new_dict(node->count);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < node->count; i++) {
        PyObject *v = decode_node(plan, node->children[i], r);
        if (v == NULL || PyDict_SetItem(out, PyTuple_GET_ITEM(node->names, i), v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(v);
    }
    return out;
}

/* The item count of the next array/map block (0 ends the value). A negative count is followed
 * by the block's byte size, which is not needed. A count larger than the bytes left cannot be
 * real unless items take no bytes (nulls), and then only up to a bound: a corrupt count must
 * not make the kernel build a huge list. */
static int read_block_count(Reader *r, const PlanNode *node, Py_ssize_t *count)
{
    int64_t n, size;
    if (read_long(r, &n) < 0)
        return -1;
    if (n < 0) {
        if (n == INT64_MIN || read_long(r, &size) < 0)
            return -1;
        n = -n;
    }
    if (n > r->end - r->p && (!node->items_take_no_bytes || n > MAX_EMPTY_ITEMS))
        return -1;
    *count = (Py_ssize_t)n;
    return 0;
}

static PyObject *decode_array(const Plan *plan, const PlanNode *node, Reader *r)
{
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (;;) {
        Py_ssize_t count;
        if (read_block_count(r, node, &count) < 0)
            goto fail;
        if (count == 0)
            return out;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *v = decode_node(plan, node->children[0], r);
            if (v == NULL)
                goto fail;
            int rc = PyList_Append(out, v);
            Py_DECREF(v);
            if (rc < 0)
                goto fail;
        }
    }
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *decode_map(const Plan *plan, const PlanNode *node, Reader *r)
{
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (;;) {
        Py_ssize_t count;
        if (read_block_count(r, node, &count) < 0)
            goto fail;
        if (count == 0)
            return out;
        for (Py_ssize_t i = 0; i < count; i++) {
            const unsigned char *s;
            Py_ssize_t n;
            if (read_span(r, &s, &n) < 0)
                goto fail;
            PyObject *key = strict_utf8(s, n);
            if (key == NULL)
                goto fail;
            PyObject *v = decode_node(plan, node->children[0], r);
            if (v == NULL) {
                Py_DECREF(key);
                goto fail;
            }
            int rc = PyDict_SetItem(out, key, v);
            Py_DECREF(key);
            Py_DECREF(v);
            if (rc < 0)
                goto fail;
        }
    }
fail:
    Py_DECREF(out);
    return NULL;
}

/* A little-endian IEEE float or double, as struct.unpack_from("<f" / "<d") reads it. */
static PyObject *decode_float(int size, Reader *r)
{
    if (r->end - r->p < size)
        return NULL;
    const char *at = (const char *)r->p;
    r->p += size;
    double v = size == 4 ? PyFloat_Unpack4(at, 1) : PyFloat_Unpack8(at, 1);
    if (v == -1.0 && PyErr_Occurred())
        return NULL;
    return PyFloat_FromDouble(v);
}

/* Scalars read from a length-prefixed span: bytes, string, bigint, decimal, decimal text. */
static PyObject *decode_span_value(const PlanNode *node, Reader *r)
{
    const unsigned char *s;
    Py_ssize_t n;
    if (read_span(r, &s, &n) < 0)
        return NULL;
    switch (node->kind) {
    case K_BYTES:
        return PyBytes_FromStringAndSize((const char *)s, n);
    case K_STRING:
        return strict_utf8(s, n);
    case K_BIGINT:
        return int_from_be(s, n);
    case K_DECIMAL:
        return make_decimal(node, s, n);
    default: { /* K_DECIMAL_TEXT */
        PyObject *text = strict_utf8(s, n);
        if (text == NULL)
            return NULL;
        PyObject *v = PyObject_CallOneArg(node->decimal_type, text);
        Py_DECREF(text);
        return v != NULL ? v : hand_back_from_python_error();
    }
    }
}

static PyObject *decode_node(const Plan *plan, Py_ssize_t index, Reader *r)
{
    const PlanNode *node = &plan->nodes[index];
    int64_t v;
    switch (node->kind) {
    case K_NULL:
        Py_RETURN_NONE;
    case K_BOOLEAN:
        if (r->p >= r->end || *r->p > 1)
            return NULL;
        return PyBool_FromLong(*r->p++);
    case K_LONG:
        return read_long(r, &v) < 0 ? NULL : PyLong_FromLongLong(v);
    case K_FLOAT:
    case K_DOUBLE:
        return decode_float(node->kind == K_FLOAT ? 4 : 8, r);
    case K_BYTES:
    case K_STRING:
    case K_BIGINT:
    case K_DECIMAL:
    case K_DECIMAL_TEXT:
        return decode_span_value(node, r);
    case K_DATE:
        return read_long(r, &v) < 0 ? NULL : make_date(v);
    case K_DATETIME:
        return read_long(r, &v) < 0 ? NULL : make_datetime(v);
    case K_TIME:
        return read_long(r, &v) < 0 ? NULL : make_time(v);
    case K_ENUM:
        if (read_long(r, &v) < 0 || v < 0 || v >= node->count)
            return NULL;
        return Py_NewRef(PyTuple_GET_ITEM(node->names, (Py_ssize_t)v));
    case K_FIXED:
        if (r->end - r->p < node->size)
            return NULL;
        r->p += node->size;
        return PyBytes_FromStringAndSize((const char *)r->p - node->size, node->size);
    case K_UNION:
        if (read_long(r, &v) < 0 || v < 0 || v >= node->count)
            return NULL;
        return decode_node(plan, node->children[v], r);
    default:
        break;
    }
    /* containers: bounded nesting, so recursive schemas cannot exhaust the C stack */
    if (r->depth >= MAX_DEPTH)
        return NULL;
    r->depth++;
    PyObject *out = node->kind == K_RECORD ? decode_record(plan, node, r)
                  : node->kind == K_ARRAY ? decode_array(plan, node, r)
                  : decode_map(plan, node, r);
    r->depth--;
    return out;
}

/* ------------------------------------------------------------------------------------------ */
/* Plan type                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* The value of data, or a new reference to hand_back. */
static PyObject *plan_decode(const Plan *plan, PyObject *data)
{
    if (!PyBytes_CheckExact(data))  /* bytearray/memoryview: the Python path keeps their slice types */
        return Py_NewRef(hand_back);
    Reader r = {(const unsigned char *)PyBytes_AS_STRING(data),
                (const unsigned char *)PyBytes_AS_STRING(data) + PyBytes_GET_SIZE(data), 0};
    PyObject *v = decode_node(plan, plan->root, &r);
    if (v == NULL) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError))
            PyErr_Clear();  /* not expected (values are range-checked first), but never decide here */
        return PyErr_Occurred() ? NULL : Py_NewRef(hand_back);
    }
    if (r.p != r.end) {  /* trailing bytes: the Python path names them */
        Py_DECREF(v);
        return Py_NewRef(hand_back);
    }
    return v;
}

static PyObject *Plan_decode(PyObject *self, PyObject *data)
{
    return plan_decode((const Plan *)self, data);
}

/* plan(data): the value, from the kernel or else from the fallback (which raises the typed
 * error). A vectorcall, so callers holding the plan pay no Python frame per record. */
static PyObject *Plan_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    const Plan *plan = (const Plan *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Plan() takes exactly one argument, the data");
        return NULL;
    }
    PyObject *v = plan_decode(plan, args[0]);
    if (v != hand_back || plan->fallback == Py_None)
        return v;
    Py_DECREF(v);
    return PyObject_CallOneArg(plan->fallback, args[0]);
}

static int plan_node(PlanNode *node, PyObject *entry, Py_ssize_t n_nodes)
{
    long long kind, a, b, fast;
    PyObject *x, *y;
    if (!PyTuple_Check(entry)) {
        PyErr_SetString(PyExc_TypeError, "plan nodes must be tuples");
        return -1;
    }
    if (pt_int(entry, 0, 0, K_COUNT - 1, &kind) < 0)
        return -1;
    node->kind = (int)kind;
    switch (kind) {
    case K_DECIMAL:
        if (pt_int(entry, 1, 1, INT_MAX, &a) < 0 || pt_int(entry, 2, INT_MIN, INT_MAX, &b) < 0
            || pt_int(entry, 3, 0, 1, &fast) < 0 || (x = pt_item(entry, 4, NULL)) == NULL
            || (y = pt_item(entry, 5, NULL)) == NULL)
            return -1;
        if (fast && (b < 0 || b > 999999)) {
            PyErr_Format(PyExc_ValueError, "plan node %R: the fast path needs 0 <= scale <= 999999", entry);
            return -1;
        }
        node->precision = (int)a;
        node->scale = (int)b;
        node->decimal_fast = (int)fast;
        node->convert = x;
        node->decimal_type = y;
        return 0;
    case K_DECIMAL_TEXT:
        return (node->decimal_type = pt_item(entry, 1, NULL)) == NULL ? -1 : 0;
    case K_ENUM:
        if ((x = pt_item(entry, 1, &PyTuple_Type)) == NULL)
            return -1;
        node->names = x;
        node->count = PyTuple_GET_SIZE(x);
        return 0;
    case K_FIXED:
        if (pt_int(entry, 1, 0, PY_SSIZE_T_MAX, &a) < 0)
            return -1;
        node->size = a;
        return 0;
    case K_RECORD:
        if ((x = pt_item(entry, 1, &PyTuple_Type)) == NULL || (y = pt_item(entry, 2, &PyTuple_Type)) == NULL)
            return -1;
        if (PyTuple_GET_SIZE(x) != PyTuple_GET_SIZE(y)) {
            PyErr_Format(PyExc_ValueError, "plan node %R: keys and children differ in length", entry);
            return -1;
        }
        node->names = x;
        return pt_children(y, n_nodes, &node->children, &node->count);
    case K_UNION:
        if ((x = pt_item(entry, 1, &PyTuple_Type)) == NULL)
            return -1;
        return pt_children(x, n_nodes, &node->children, &node->count);
    case K_ARRAY:
    case K_MAP:  /* one child, the item / value node, at item 1 */
        return pt_one_child(entry, 1, n_nodes, &node->children, &node->count);
    default:
        return 0;
    }
}

/* Whether a value of node ``index`` can be zero bytes long: null, an empty fixed, or a record of
 * such fields. ``depth`` stops at recursive records (which then count as taking bytes: a record
 * that contains itself needs a union, and a union index is one byte). */
static int takes_no_bytes(const Plan *plan, Py_ssize_t index, int depth)
{
    const PlanNode *node = &plan->nodes[index];
    if (node->kind == K_NULL || (node->kind == K_FIXED && node->size == 0))
        return 1;
    if (node->kind != K_RECORD || depth > MAX_DEPTH)
        return 0;
    for (Py_ssize_t i = 0; i < node->count; i++)
        if (!takes_no_bytes(plan, node->children[i], depth + 1))
            return 0;
    return 1;
}

static int Plan_traverse(PyObject *self, visitproc visit, void *arg)
{
    Plan *plan = (Plan *)self;
    Py_VISIT(plan->source);
    Py_VISIT(plan->fallback);
    return 0;
}

static int Plan_clear(PyObject *self)
{
    Plan *plan = (Plan *)self;
    /* None, not NULL: a call during the collection then returns HAND_BACK instead of crashing.
     * source stays: the nodes borrow from it, and it holds no reference back to the plan. */
    Py_SETREF(plan->fallback, Py_NewRef(Py_None));
    return 0;
}

static void Plan_dealloc(PyObject *self)
{
    Plan *plan = (Plan *)self;
    PyObject_GC_UnTrack(self);
    if (plan->nodes != NULL) {
        for (Py_ssize_t i = 0; i < plan->n_nodes; i++)
            PyMem_Free(plan->nodes[i].children);
        PyMem_Free(plan->nodes);
    }
    Py_XDECREF(plan->source);
    Py_XDECREF(plan->fallback);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *Plan_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *source, *fallback = Py_None;
    Py_ssize_t root;
    static char *keywords[] = {"nodes", "root", "fallback", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!n|O:Plan", keywords, &PyTuple_Type, &source, &root,
                                     &fallback))
        return NULL;
    if (fallback != Py_None && !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "plan fallback must be callable or None");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(source);
    if (root < 0 || root >= n) {
        PyErr_SetString(PyExc_ValueError, "plan root is not a node index");
        return NULL;
    }
    Plan *plan = (Plan *)type->tp_alloc(type, 0);
    if (plan == NULL)
        return NULL;
    plan->source = Py_NewRef(source);
    plan->fallback = Py_NewRef(fallback);
    plan->vectorcall = Plan_vectorcall;
    plan->root = root;
    plan->nodes = PyMem_Calloc((size_t)n, sizeof(PlanNode));
    if (plan->nodes == NULL) {
        Py_DECREF(plan);
        return PyErr_NoMemory();
    }
    plan->n_nodes = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (plan_node(&plan->nodes[i], PyTuple_GET_ITEM(source, i), n) < 0) {
            Py_DECREF(plan);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PlanNode *node = &plan->nodes[i];
        if (node->kind == K_ARRAY)  /* a map item always has a key, at least its length byte */
            node->items_take_no_bytes = takes_no_bytes(plan, node->children[0], 0);
    }
    return (PyObject *)plan;
}

static PyMethodDef Plan_methods[] = {
    {"decode", Plan_decode, METH_O,
     "decode(data: bytes) -> the value, or HAND_BACK when the Python path must decide"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow._avro_decode.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_dealloc = Plan_dealloc,
    .tp_vectorcall_offset = offsetof(Plan, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = Plan_traverse,
    .tp_clear = Plan_clear,
    .tp_doc = "Plan(nodes: tuple, root: int, fallback=None): one Avro schema, compiled for decode.\n\n"
              "plan(data) returns the value (fallback(data) where the kernel hands back);\n"
              "plan.decode(data) returns the value or HAND_BACK.",
    .tp_methods = Plan_methods,
    .tp_new = Plan_new,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_avro_decode",
    "Avro binary decode kernel for cdcflow.avro_values.Codec (see runtime/_avro_decode.c).", -1, NULL,
};

static int add_int(PyObject *m, const char *name, long v)
{
    return PyModule_AddIntConstant(m, name, v);
}

PyMODINIT_FUNC PyInit__avro_decode(void)
{
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL)
        return NULL;
    if (PyType_Ready(&PlanType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (hand_back == NULL) {
        /* a plain object: no decoded value can be it */
        hand_back = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
        if (hand_back == NULL)
            goto fail;
    }
    if (PyModule_AddObjectRef(m, "HAND_BACK", hand_back) < 0
        || PyModule_AddObjectRef(m, "Plan", (PyObject *)&PlanType) < 0
        || add_int(m, "K_NULL", K_NULL) < 0 || add_int(m, "K_BOOLEAN", K_BOOLEAN) < 0
        || add_int(m, "K_LONG", K_LONG) < 0 || add_int(m, "K_FLOAT", K_FLOAT) < 0
        || add_int(m, "K_DOUBLE", K_DOUBLE) < 0 || add_int(m, "K_BYTES", K_BYTES) < 0
        || add_int(m, "K_STRING", K_STRING) < 0 || add_int(m, "K_BIGINT", K_BIGINT) < 0
        || add_int(m, "K_DECIMAL", K_DECIMAL) < 0 || add_int(m, "K_DECIMAL_TEXT", K_DECIMAL_TEXT) < 0
        || add_int(m, "K_DATE", K_DATE) < 0 || add_int(m, "K_DATETIME", K_DATETIME) < 0
        || add_int(m, "K_TIME", K_TIME) < 0 || add_int(m, "K_ENUM", K_ENUM) < 0
        || add_int(m, "K_FIXED", K_FIXED) < 0 || add_int(m, "K_RECORD", K_RECORD) < 0
        || add_int(m, "K_ARRAY", K_ARRAY) < 0 || add_int(m, "K_MAP", K_MAP) < 0
        || add_int(m, "K_UNION", K_UNION) < 0 || add_int(m, "MAX_DEPTH", MAX_DEPTH) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
