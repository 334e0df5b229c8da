/* _jsonform: records -> Conduit's JSON form (one JSON object per line), a whole batch per call.
 *
 * Why: cdcflow.convert.jsonform._line builds, per record, a dict of JSON-able values and
 * serialises it with orjson, then escapes its strings as Go does: several microseconds of
 * interpreter time per record, most of a file -> file run. This kernel writes the same bytes
 * for a whole batch straight into one buffer.
 *
 * Contract: dumps(records, Config(config), handback) -> bytes, every record's line ending in
 * "\n", byte-identical to the Python path (jsonform._line): Go's field order, sorted object
 * keys, Go's string escaping (tidbtext.h's TT_JSON_GO), Go's float texts, RFC 3339 datetimes,
 * null for an empty position or metadata. The kernel only writes what it is sure of; for
 * anything else it drops what it wrote of that record and appends handback(record) (the Python
 * path's line) instead: an unusual type or subclass, a float whose repr has an exponent where Go
 * writes none, a datetime with a time zone, metadata that is not str -> str, a lone surrogate,
 * deep nesting, a Decimal exponent too wide to spell out...
 *
 * config: (Record, operations, operation_texts)
 *   operations: tuple of the Operation members; operation_texts: their JSON (b'"create"' ...).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stddef.h>
#include <string.h>
#include <structmember.h>

#include "recordslots.h"
#include "tidbtext.h"

/* Nesting followed before handing back (orjson itself stops at 255). */
#define MAX_DEPTH 64

/* ------------------------------------------------------------------ scalar values */

/* A JSON string of an exact str, escaped as Go escapes it; TT_PASS for a lone surrogate. */
static int put_go_str(tt_buf *b, PyObject *v)
{
    return tt_json_str(b, v, TT_JSON_GO);
}

static int put_bytes_b64(tt_buf *b, PyObject *v)
{
    if (tt_buf_putc(b, '"') < 0
        || tt_buf_put_b64(b, (const unsigned char *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v)) < 0
        || tt_buf_putc(b, '"') < 0)
        return TT_ERR;
    return TT_OK;
}


/* A float as jsonform.go_float writes it, or "NaN" / "Infinity" / "-Infinity"; TT_PASS where
 * repr has an exponent and Go writes none (1e-6 <= |v| < 1e-4, 1e16 <= |v| < 1e21: rare). */
static int put_float_value(tt_buf *b, PyObject *v)
{
    double d = PyFloat_AS_DOUBLE(v);
    if (d != d)
        return tt_buf_put(b, "\"NaN\"", 5) < 0 ? TT_ERR : TT_OK;
    if (d - d != 0.0)
        return tt_buf_put(b, d > 0 ? "\"Infinity\"" : "\"-Infinity\"", d > 0 ? 10 : 11) < 0 ? TT_ERR : TT_OK;
    double m = d < 0 ? -d : d;
    /* Go's exponent range: repr's text is Go's there; elsewhere repr without its ".0" */
    return tt_put_repr_trimmed(b, d, !(m != 0.0 && (m < 1e-6 || m >= 1e21)));
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


/* textforms.decimal_text: format(v, "f") when finite with exponent <= 0, else str(v). */
static int put_decimal(tt_buf *b, PyObject *v)
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
        r = tt_json_utf8(b, p, len, TT_JSON_GO);
    else if (parsed == -2)
        r = TT_PASS;
    else
        r = d.exponent <= 0 ? put_decimal_f(b, &d) : tt_json_utf8(b, p, len, TT_JSON_GO);
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


/* textforms.rfc3339_text of a naive datetime (taken as UTC): YYYY-MM-DDTHH:MM:SS[.fraction]Z, the
 * fraction without trailing zeros; TT_PASS for one with a time zone (Python writes its offset). */
static int put_datetime(tt_buf *b, PyObject *v)
{
    if (((PyDateTime_DateTime *)v)->hastzinfo && PyDateTime_DATE_GET_TZINFO(v) != Py_None)
        return TT_PASS;
    int us = PyDateTime_DATE_GET_MICROSECOND(v);
    if (tt_buf_putc(b, '"') < 0
        || tt_put_ymd(b, PyDateTime_GET_YEAR(v), PyDateTime_GET_MONTH(v), PyDateTime_GET_DAY(v)) < 0
        || tt_buf_putc(b, 'T') < 0
        || tt_put_hms(b, PyDateTime_DATE_GET_HOUR(v), PyDateTime_DATE_GET_MINUTE(v), PyDateTime_DATE_GET_SECOND(v)) < 0)
        return TT_ERR;
    if (us) {
        int digits = 6;
        while (us % 10 == 0) {
            us /= 10;
            digits--;
        }
        if (tt_buf_putc(b, '.') < 0 || tt_buf_put_padded(b, (unsigned long long)us, digits) < 0)
            return TT_ERR;
    }
    return tt_buf_put(b, "Z\"", 2) < 0 ? TT_ERR : TT_OK;
}

/* ------------------------------------------------------------------ values */

static int put_jsonable(tt_buf *b, PyObject *v, int depth);

/* An object with its keys sorted (Go sorts map keys; str order is UTF-8 byte order). */
static int put_jsonable_dict(tt_buf *b, PyObject *v, int depth)
{
    PyObject *keys = PyDict_Keys(v);
    if (keys == NULL)
        return TT_ERR;
    int r = TT_OK;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++)
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(keys, i))) {
            r = TT_PASS; /* Python names the key */
            goto done;
        }
    if (PyList_Sort(keys) < 0 || tt_buf_putc(b, '{') < 0) {
        r = TT_ERR;
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        PyObject *x = PyDict_GetItemWithError(v, k);
        if (x == NULL) {
            r = PyErr_Occurred() ? TT_ERR : TT_PASS;
            goto done;
        }
        if ((i && tt_buf_putc(b, ',') < 0) || (r = put_go_str(b, k)) != TT_OK || tt_buf_putc(b, ':') < 0
            || (r = put_jsonable(b, x, depth + 1)) != TT_OK) {
            if (r == TT_OK)
                r = TT_ERR;
            goto done;
        }
    }
    r = tt_buf_putc(b, '}') < 0 ? TT_ERR : TT_OK;
done:
    Py_DECREF(keys);
    return r;
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


/* jsonform.jsonable + orjson + Go's escaping: JSON types as they are, the text forms for bytes,
 * Decimal, dates, datetimes, times; TT_PASS for anything else (Python raises its ConversionError). */
static int put_jsonable(tt_buf *b, PyObject *v, int depth)
{
    if (depth > MAX_DEPTH)
        return TT_PASS;
    if (v == Py_None)
        return tt_buf_put(b, "null", 4) < 0 ? TT_ERR : TT_OK;
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyUnicode_Type)
        return put_go_str(b, v);
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
        return put_decimal(b, v);
    if (t == PyDateTimeAPI->DateTimeType)
        return put_datetime(b, v);
    if (t == PyDateTimeAPI->DateType)
        return put_quoted_text(b, TT_K_DATE, v);
    if (t == PyDateTimeAPI->DeltaType)
        return put_quoted_text(b, TT_K_TIME, v);
    return TT_PASS;
}

/* ------------------------------------------------------------------ records */

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

/* What one dumps() call holds: the config and the metadata text of the previous record. */
typedef struct {
    PyTypeObject *record_type;
    Py_ssize_t offsets[A_COUNT]; /* the Record slots, read directly (Record uses __slots__) */
    PyObject *operations, *operation_texts;
    PyObject *handback;
    /* the metadata dict written last (a strong ref keeps its keys and values alive), where its
     * entries are in its record's line, and where each of its first META_ENTRIES entries (in
     * sorted order) is; meta_base: where that line starts in the output */
    PyObject *meta_dict;
    Py_ssize_t meta_at, meta_len, meta_count, meta_base;
    Output *out;
    struct { PyObject *key, *value; Py_ssize_t at, len; } meta[META_ENTRIES];
} Batch;

static void batch_forget(Batch *bt)
{
    Py_CLEAR(bt->meta_dict);
    bt->meta_count = 0;
}

static inline PyObject *slot(const Batch *bt, PyObject *rec, int attr)
{
    return *(PyObject **)((char *)rec + bt->offsets[attr]);
}

/* Append `len` bytes the previous record's line has at `at`. */
static int put_again(tt_buf *b, const Batch *bt, Py_ssize_t at, Py_ssize_t len)
{
    return tt_buf_put(b, bt->out->data + bt->meta_base + at, len) < 0 ? TT_ERR : TT_OK;
}

/* The metadata object's entries ("k":"v",...) without braces, keys sorted. Records of a batch
 * mostly share the dict or most of its entries (the same key and value objects, only a
 * timestamp differs): what the previous record wrote for the same objects is copied instead of
 * written again. */
static int put_metadata_entries(tt_buf *b, Batch *bt, PyObject *metadata)
{
    Py_ssize_t start = b->len;
    if (metadata == bt->meta_dict) {
        if (put_again(b, bt, bt->meta_at, bt->meta_len) != TT_OK)
            return TT_ERR;
        for (Py_ssize_t k = 0; k < bt->meta_count; k++) /* where they are in this line */
            bt->meta[k].at += start - bt->meta_at;
        bt->meta_at = start;
        return TT_OK;
    }
    PyObject *keys = PyDict_Keys(metadata);
    if (keys == NULL)
        return TT_ERR;
    Py_ssize_t n = PyList_GET_SIZE(keys), i;
    int r = TT_OK;
    for (i = 0; i < n; i++)
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(keys, i))) {
            Py_DECREF(keys);
            return TT_PASS;
        }
    if (PyList_Sort(keys) < 0) {
        Py_DECREF(keys);
        return TT_ERR;
    }
    for (i = 0; i < n && r == TT_OK; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        PyObject *v = PyDict_GetItemWithError(metadata, k);
        if (v == NULL) {
            r = PyErr_Occurred() ? TT_ERR : TT_PASS;
            break;
        }
        if (!PyUnicode_CheckExact(v)) {
            r = TT_PASS;
            break;
        }
        if (i && tt_buf_putc(b, ',') < 0) {
            r = TT_ERR;
            break;
        }
        Py_ssize_t at = b->len;
        if (i < bt->meta_count && bt->meta[i].key == k && bt->meta[i].value == v)
            r = put_again(b, bt, bt->meta[i].at, bt->meta[i].len);
        else {
            r = put_go_str(b, k);
            if (r == TT_OK)
                r = tt_buf_putc(b, ':') < 0 ? TT_ERR : put_go_str(b, v);
        }
        if (r == TT_OK && i < META_ENTRIES) { /* borrowed: the dict held below keeps them alive */
            bt->meta[i].key = k;
            bt->meta[i].value = v;
            bt->meta[i].at = at;
            bt->meta[i].len = b->len - at;
        }
    }
    Py_DECREF(keys);
    if (r != TT_OK) {
        batch_forget(bt); /* the entries point into a line that is not kept */
        return r;
    }
    Py_XSETREF(bt->meta_dict, Py_NewRef(metadata));
    bt->meta_at = start;
    bt->meta_len = b->len - start;
    bt->meta_count = n < META_ENTRIES ? n : META_ENTRIES;
    return TT_OK;
}

/* One side: raw data (exact bytes) as base64 text, None as null, a dict as an object. */
static int put_side(tt_buf *b, PyObject *v)
{
    if (v == Py_None)
        return tt_buf_put(b, "null", 4) < 0 ? TT_ERR : TT_OK;
    if (PyBytes_CheckExact(v))
        return put_bytes_b64(b, v);
    if (PyDict_CheckExact(v))
        return put_jsonable_dict(b, v, 0);
    return TT_PASS;
}

static int put_record_fields(tt_buf *b, Batch *bt, PyObject *const *attrs);

/* One record's line; TT_PASS when the record goes back to Python. The record's slots are held
 * while its line is written: sorting keys may run Python code, which could reassign them. */
static int put_record_line(tt_buf *b, Batch *bt, PyObject *rec)
{
    PyObject *attrs[A_COUNT];
    for (int i = 0; i < A_COUNT; i++)
        if ((attrs[i] = slot(bt, rec, i)) == NULL)
            return TT_PASS; /* an unset slot: Python raises AttributeError */
    for (int i = 0; i < A_COUNT; i++)
        Py_INCREF(attrs[i]);
    int r = put_record_fields(b, bt, attrs);
    for (int i = 0; i < A_COUNT; i++)
        Py_DECREF(attrs[i]);
    return r;
}

static int put_record_fields(tt_buf *b, Batch *bt, PyObject *const *attrs)
{
    PyObject *position = attrs[A_POSITION], *metadata = attrs[A_METADATA];
    if (!PyBytes_CheckExact(position) || !PyDict_CheckExact(metadata))
        return TT_PASS;
    PyObject *op_text = NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(bt->operations); i++)
        if (PyTuple_GET_ITEM(bt->operations, i) == attrs[A_OPERATION])
            op_text = PyTuple_GET_ITEM(bt->operation_texts, i);
    if (op_text == NULL)
        return TT_PASS;
    int r;
    if (tt_buf_put(b, "{\"position\":", 12) < 0)
        return TT_ERR;
    if (PyBytes_GET_SIZE(position) == 0) {
        if (tt_buf_put(b, "null", 4) < 0)
            return TT_ERR;
    } else if (put_bytes_b64(b, position) != TT_OK)
        return TT_ERR;
    if (tt_buf_put(b, ",\"operation\":", 13) < 0
        || tt_buf_put(b, PyBytes_AS_STRING(op_text), PyBytes_GET_SIZE(op_text)) < 0
        || tt_buf_put(b, ",\"metadata\":", 12) < 0)
        return TT_ERR;
    if (PyDict_GET_SIZE(metadata) == 0) {
        batch_forget(bt); /* the cached metadata text is in the previous line only */
        if (tt_buf_put(b, "null", 4) < 0)
            return TT_ERR;
    } else {
        if (tt_buf_putc(b, '{') < 0)
            return TT_ERR;
        if ((r = put_metadata_entries(b, bt, metadata)) != TT_OK)
            return r;
        if (tt_buf_putc(b, '}') < 0)
            return TT_ERR;
    }
    if (tt_buf_put(b, ",\"key\":", 7) < 0)
        return TT_ERR;
    if ((r = put_side(b, attrs[A_KEY])) != TT_OK)
        return r;
    if (tt_buf_put(b, ",\"payload\":{\"before\":", 21) < 0)
        return TT_ERR;
    if ((r = put_side(b, attrs[A_BEFORE])) != TT_OK)
        return r;
    if (tt_buf_put(b, ",\"after\":", 9) < 0)
        return TT_ERR;
    if ((r = put_side(b, attrs[A_AFTER])) != TT_OK)
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
    batch_forget(bt); /* the truncated record may have held the cached metadata text */
    return r;
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
    if (!PyTuple_CheckExact(tuple) || PyTuple_GET_SIZE(tuple) != 3 || !PyType_Check(PyTuple_GET_ITEM(tuple, 0))
        || !PyTuple_CheckExact(PyTuple_GET_ITEM(tuple, 1)) || !PyTuple_CheckExact(PyTuple_GET_ITEM(tuple, 2))
        || PyTuple_GET_SIZE(PyTuple_GET_ITEM(tuple, 1)) != PyTuple_GET_SIZE(PyTuple_GET_ITEM(tuple, 2))) {
        PyErr_SetString(PyExc_TypeError, "config: (Record, operations, operation_texts)");
        return NULL;
    }
    PyObject *texts = PyTuple_GET_ITEM(tuple, 2);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(texts); i++)
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(texts, i))) {
            PyErr_SetString(PyExc_TypeError, "config: operation texts must be bytes");
            return NULL;
        }
    Py_ssize_t offsets[A_COUNT];
    int at = rs_slot_offsets((PyTypeObject *)PyTuple_GET_ITEM(tuple, 0), attr_names, A_COUNT, offsets);
    if (at < 0)
        return NULL;
    if (at < A_COUNT) {
        PyErr_SetString(PyExc_TypeError, "config: the Record type has no __slots__ layout this kernel reads");
        return NULL;
    }
    Config *c = (Config *)type->tp_alloc(type, 0);
    if (c == NULL)
        return NULL;
    c->tuple = Py_NewRef(tuple);
    memcpy(c->offsets, offsets, sizeof c->offsets);
    return (PyObject *)c;
}

static PyTypeObject ConfigType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.convert._jsonform.Config",
    .tp_basicsize = sizeof(Config),
    .tp_dealloc = Config_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Config((Record, operations, operation_texts)): what dumps() reads records with.",
    .tp_new = Config_new,
};

static PyObject *py_dumps(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *records, *config, *handback;
    if (!PyArg_ParseTuple(args, "OOO:dumps", &records, &config, &handback))
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
    PyObject *t = ((Config *)config)->tuple; /* borrowed: the caller holds config for the call */
    bt.record_type = (PyTypeObject *)PyTuple_GET_ITEM(t, 0);
    bt.operations = PyTuple_GET_ITEM(t, 1);
    bt.operation_texts = PyTuple_GET_ITEM(t, 2);
    memcpy(bt.offsets, ((Config *)config)->offsets, sizeof bt.offsets);
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
        int r = Py_IS_TYPE(rec, bt.record_type) ? put_record_line(&b, &bt, rec) : TT_PASS;
        if (r == TT_PASS)
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
static const char W_POSITION[] = "{\"position\":", W_OPERATION[] = ",\"operation\":",
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
        if (r->position.len == 0) { /* an empty position is null, as Go writes an empty []byte */
            memcpy(o, "null", 4);
            o += 4;
        } else {
            *o++ = '"';
            o = tt_b64_write(o, s + r->position.at, r->position.len);
            *o++ = '"';
        }
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
        total += (unsigned long long)(W_FIXED + (r->position.len ? 2 + b64_len(r->position.len) : 4) + ops[r->op].len + meta[r->block].len
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
     "dumps(records, config: Config, handback) -> bytes: the JSON lines of the records."},
    {"b64", py_b64, METH_O, "b64(data) -> str: standard base64 (for tests)."},
    {"dumps_wire", py_dumps_wire, METH_VARARGS,
     "dumps_wire(message, operation_texts, metadata_json) -> (lines, acks) or None: a batch message's "
     "records as JSON lines and its ack message, None when it is not the plain shape."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jsonform", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__jsonform(void)
{
    if (tt_init() < 0 || PyType_Ready(&ConfigType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Config", (PyObject *)&ConfigType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
