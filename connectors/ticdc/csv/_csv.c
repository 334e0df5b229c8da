/* _csv: TiCDC CSV kernels (cdcflow.connectors.ticdc.csv._csv), the compiled twin of the csv package's hot paths.
 *
 * decode(plan, data, header) reads a whole CSV file of one table into columns (what the
 * column-wise reader in csv/decode.py builds), encode(plan, kinds, commit_ts, rows) writes plain rows
 * (what csv/encode.py's generated line writer writes). Plans are tuples built once per (table, options)
 * in csv/decode.py and csv/encode.py; see _decode_plan / _encode_plan there for their layout.
 *
 * Both hand the whole batch back (return None) for anything outside the usual shapes: odd
 * quoting, a bad value, a row of another table, a value the fast text forms do not cover and
 * whose Python writer raises. The csv package then runs its Python path, which produces the result or the
 * typed error naming file, line and column. C raises only MemoryError-class failures.
 *
 * parse_value(kind, text, max_us) exposes runtime/_c/tidbparse.h for the property tests.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "recordslots.h"
#include "tidbparse.h"
#include "tidbtext.h"

/* ------------------------------------------------------------------ shared */

/* TiDB's TIME range, -838:59:59 .. 838:59:59 (tidb.TIME_MAX_US): CSV's TIME parser checks it */
#define TIDB_TIME_MAX_US (((838LL * 60 + 59) * 60 + 59) * 1000000LL)

/* Column kinds of a decode plan (csv/decode.py _DECODE_KINDS mirrors these numbers). */
enum {
    DK_TEXT = 0,     /* the field text is the value (str) */
    DK_INT = 1,      /* int(text) */
    DK_FLOAT = 2,    /* float(text) */
    DK_DECIMAL = 3,  /* Decimal(text) */
    DK_DATE = 4,     /* tidb.parse_date */
    DK_DATETIME = 5, /* tidb.parse_datetime */
    DK_TIME = 6,     /* tidb.parse_time */
    DK_BASE64 = 7,   /* strict base64 -> bytes */
    DK_HEX = 8,      /* hex pairs -> bytes */
    DK_CALL = 9,     /* only the column's Python parser */
};

/* Column kinds of an encode plan (csv/encode.py _EK_* mirrors these numbers). */
enum {
    EK_CALL = 0,     /* only the column's Python field writer */
    EK_INT = 1,      /* str(v) */
    EK_GO_FLOAT = 2, /* format_go_float, unquoted */
    EK_STR = 3,      /* quoted str, quote characters doubled */
    EK_DECIMAL = 4,  /* quoted, param = scale */
    EK_DATE = 5,     /* quoted */
    EK_DATETIME = 6, /* quoted, param = fsp (-1: None) */
    EK_BASE64 = 7,   /* quoted base64 of bytes */
    EK_HEX = 8,      /* quoted hex of bytes */
};

/* A Python exception raised by a Python parser / writer the kernel called: the batch goes back
 * to the Python path, which raises it again with its context. MemoryError stays raised. */
static int hand_back_exception(void)
{
    if (PyErr_ExceptionMatches(PyExc_MemoryError) || !PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyErr_Clear();
    return 0;
}

/* ------------------------------------------------------------------ base64 / hex */

static const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* The bytes of s when it is canonical padded base64 (what b2a_base64 writes for them), else
 * NULL without an exception: strict base64 that is not canonical goes to the Python parser. */
static PyObject *b64_decode_canonical(const char *s, Py_ssize_t n, int *not_handled)
{
    *not_handled = 1;
    if (n % 4)
        return NULL;
    Py_ssize_t pad = 0;
    if (n && s[n - 1] == '=')
        pad = (n >= 2 && s[n - 2] == '=') ? 2 : 1;
    Py_ssize_t size = n / 4 * 3 - pad;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) {
        *not_handled = 0;
        return NULL;
    }
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i += 4) {
        int last = i + 4 == n;
        int v[4];
        for (int j = 0; j < 4; j++) {
            unsigned char c = (unsigned char)s[i + j];
            v[j] = (last && c == '=' && j >= 4 - pad) ? 0 : b64_value(c);
            if (v[j] < 0)
                goto refuse;
        }
        unsigned int word = (unsigned int)(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
        int take = last ? 3 - (int)pad : 3;
        /* canonical: the bits a padded group does not use are zero */
        if (last && pad && (word & ((1u << (8 * pad)) - 1)))
            goto refuse;
        for (int j = 0; j < take; j++)
            o[k++] = (unsigned char)(word >> (16 - 8 * j));
    }
    *not_handled = 0;
    return out;
refuse:
    Py_DECREF(out);
    return NULL;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static PyObject *hex_decode(const char *s, Py_ssize_t n, int *not_handled)
{
    *not_handled = 1;
    if (n % 2)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n / 2);
    if (out == NULL) {
        *not_handled = 0;
        return NULL;
    }
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i += 2) {
        int hi = hex_value((unsigned char)s[i]), lo = hex_value((unsigned char)s[i + 1]);
        if (hi < 0 || lo < 0) {
            Py_DECREF(out);
            return NULL;
        }
        o[i / 2] = (unsigned char)(hi << 4 | lo);
    }
    *not_handled = 0;
    return out;
}

/* ------------------------------------------------------------------ decode: tokenizer */

typedef struct {
    char delimiter, quote;
    const char *null;
    Py_ssize_t null_len;
    /* csv.field_size_limit(): csv.reader refuses longer fields and the Python path then reads
       with its exact tokenizer, so a longer field (in bytes, >= its characters) goes back too */
    Py_ssize_t field_limit;
} dialect;

typedef struct {
    const char *p;     /* field text (in the data, or in the scratch buffer when unescaped) */
    Py_ssize_t n;
    int quoted;
    int in_data;       /* p points into the data (so it stays valid for the whole call) */
} field;

enum { TOK_MORE, TOK_END, TOK_REFUSE, TOK_ERROR };

/* One field at *pos. TOK_MORE: a delimiter followed; TOK_END: the record ended (terminator
 * consumed, or end of data); TOK_REFUSE: a shape the kernel leaves to Python (a quote inside an
 * unquoted field, text after a closing quote, a lone CR, an open quoted field).
 * Doubled quotes are undone into `scratch`, which the field then points into. */
static int next_field(const char **pos, const char *end, const dialect *d, tt_buf *scratch, field *f)
{
    const char *p = *pos;
    f->quoted = 0;
    f->in_data = 1;
    if (p < end && *p == d->quote) {
        const char *start = ++p;
        int doubled = 0;
        for (;;) {
            const char *q = memchr(p, d->quote, (size_t)(end - p));
            if (q == NULL)
                return TOK_REFUSE;
            if (q + 1 < end && q[1] == d->quote) {
                doubled = 1;
                p = q + 2;
                continue;
            }
            f->quoted = 1;
            if (!doubled) {
                f->p = start;
                f->n = q - start;
            } else {
                tt_buf_clear(scratch);
                for (const char *c = start; c < q; c++) {
                    if (tt_buf_putc(scratch, *c) < 0)
                        return TOK_ERROR;
                    if (*c == d->quote)
                        c++; /* the second of a doubled pair */
                }
                f->p = scratch->data;
                f->n = scratch->len;
                f->in_data = 0;
            }
            p = q + 1;
            break;
        }
    } else {
        const char *start = p;
        while (p < end) {
            char c = *p;
            if (c == d->delimiter || c == '\n' || c == '\r')
                break;
            if (c == d->quote)
                return TOK_REFUSE;
            p++;
        }
        f->p = start;
        f->n = p - start;
    }
    if (f->n > d->field_limit)
        return TOK_REFUSE;
    if (p == end) {
        *pos = p;
        return TOK_END;
    }
    if (*p == d->delimiter) {
        *pos = p + 1;
        return TOK_MORE;
    }
    if (*p == '\n') {
        *pos = p + 1;
        return TOK_END;
    }
    if (*p == '\r' && p + 1 < end && p[1] == '\n') {
        *pos = p + 2;
        return TOK_END;
    }
    return TOK_REFUSE;
}

/* Up to `cap` fields of the record at *pos into fields[]; returns the count, -1 to hand the
 * data back (too many fields, an empty line, a refused shape), -2 on a Python error. Fields
 * that needed unescaping are copied so that several can live at once. */
static Py_ssize_t next_record(const char **pos, const char *end, const dialect *d, tt_buf *scratch,
                              tt_buf *unescaped, field *fields, Py_ssize_t cap)
{
    Py_ssize_t count = 0;
    tt_buf_clear(unescaped);
    if (*pos < end && (**pos == '\n' || **pos == '\r'))
        return -1; /* an empty line: csv.reader gives an empty row, which the Python path rejects */
    for (;;) {
        if (count == cap)
            return -1;
        field *f = &fields[count];
        int r = next_field(pos, end, d, scratch, f);
        if (r == TOK_REFUSE)
            return -1;
        if (r == TOK_ERROR)
            return -2;
        if (!f->in_data) {
            /* keep an offset into `unescaped` (it may move while growing); fixed up below */
            Py_ssize_t at = unescaped->len;
            if (tt_buf_put(unescaped, f->p, f->n) < 0)
                return -2;
            f->p = (const char *)(intptr_t)at;
        }
        count++;
        if (r == TOK_END)
            break;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        if (!fields[i].in_data)
            fields[i].p = unescaped->data + (intptr_t)fields[i].p;
    return count;
}

static int field_equals(const field *f, const char *s, Py_ssize_t n)
{
    return f->n == n && memcmp(f->p, s, (size_t)n) == 0;
}

static int field_equals_bytes(const field *f, PyObject *b)
{
    return field_equals(f, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
}

/* ------------------------------------------------------------------ decode: values */

typedef struct {
    int kind;
    PyObject *careful;     /* the column's Python parser (borrowed from the plan) */
    PyObject *values;      /* the output list (owned) */
    /* the previous row's text and value: repeated texts (status names, dates, one customer's
     * rows) reuse the value instead of building it again; values are immutable */
    const char *last_p;
    Py_ssize_t last_n;
    PyObject *last;        /* borrowed from `values` */
    tt_buf last_copy;      /* the previous text when it was unescaped (not in the data) */
} column_state;

/* The careful Python parser on the field's text. 1: *out set; 0: hand back; -1: error. */
static int call_careful(column_state *c, const field *f, PyObject **out)
{
    PyObject *text = PyUnicode_DecodeUTF8(f->p, f->n, "strict");
    if (text == NULL)
        return hand_back_exception();
    PyObject *v = PyObject_CallOneArg(c->careful, text);
    Py_DECREF(text);
    if (v == NULL)
        return hand_back_exception();
    *out = v;
    return 1;
}

/* Exact powers of ten a double holds (10**22 is the last one). */
static const double exact_tens[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                      1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* float(text) for -?D+(.D+)? texts whose digits, read as one integer, fit 53 bits and that have
 * at most 22 fraction digits: that integer and 10**k are exact doubles, so one IEEE division is
 * the correctly rounded value, the one float() returns (Clinger's fast path). Such texts are the
 * usual shortest reprs TiCDC writes. 1 with *out set; 0 for any other text. */
static int clinger_double(const char *s, Py_ssize_t n, double *out)
{
    Py_ssize_t i = (n > 0 && s[0] == '-') ? 1 : 0, digits = 0, fraction = -1;
    unsigned long long m = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (c == '.' && fraction < 0 && digits > 0) {
            fraction = 0;
            continue;
        }
        if (c < '0' || c > '9' || ++digits > 17)
            return 0;
        m = m * 10 + (unsigned long long)(c - '0');
        if (fraction >= 0)
            fraction++;
    }
    if (digits == 0 || fraction == 0 || fraction > 22 || m > (1ULL << 53))
        return 0;
    double d = fraction > 0 ? (double)m / exact_tens[fraction] : (double)m;
    *out = s[0] == '-' ? -d : d;
    return 1;
}

/* float(text): the fast path above, everything else through tidbparse_float (Python's strtod). */
static int parse_float(const char *s, Py_ssize_t n, PyObject **out)
{
    double d;
    if (!clinger_double(s, n, &d))
        return tidbparse_float(s, n, out);
    PyObject *r = PyFloat_FromDouble(d);
    if (r == NULL)
        return TIDBPARSE_ERROR;
    *out = r;
    return TIDBPARSE_OK;
}

/* The value of one non-NULL field: 1 with *out a new reference, 0 to hand back, -1 on error. */
static int convert_value(column_state *c, const field *f, PyObject **out)
{
    int r;
    int not_handled;
    PyObject *v;
    switch (c->kind) {
    case DK_TEXT:
        v = PyUnicode_DecodeUTF8(f->p, f->n, "strict");
        if (v == NULL)
            return hand_back_exception();
        *out = v;
        return 1;
    case DK_INT: r = tidbparse_int(f->p, f->n, out); break;
    case DK_FLOAT: r = parse_float(f->p, f->n, out); break;
    case DK_DECIMAL: r = tidbparse_decimal(f->p, f->n, out); break;
    case DK_DATE: r = tidbparse_date(f->p, f->n, out); break;
    case DK_DATETIME: r = tidbparse_datetime(f->p, f->n, out); break;
    case DK_TIME: r = tidbparse_time(f->p, f->n, TIDB_TIME_MAX_US, out); break;
    case DK_BASE64:
    case DK_HEX:
        v = c->kind == DK_BASE64 ? b64_decode_canonical(f->p, f->n, &not_handled)
                                 : hex_decode(f->p, f->n, &not_handled);
        if (v != NULL) {
            *out = v;
            return 1;
        }
        if (!not_handled)
            return -1;
        r = TIDBPARSE_NOT_HANDLED;
        break;
    default: r = TIDBPARSE_NOT_HANDLED; break;
    }
    if (r == TIDBPARSE_ERROR)
        return -1;
    if (r == TIDBPARSE_OK)
        return 1;
    return call_careful(c, f, out);
}

/* Append the column's value for field f (NULL text -> None). 1 ok, 0 hand back, -1 error. */
static int append_value(column_state *c, const field *f, const dialect *d)
{
    PyObject *v;
    if (!f->quoted && field_equals(f, d->null, d->null_len))
        return PyList_Append(c->values, Py_None) < 0 ? -1 : 1;
    if (f->quoted && field_equals(f, d->null, d->null_len))
        return 0; /* a quoted NULL text is a value; the Python path tells the two apart */
    if (c->last != NULL && f->n == c->last_n && (f->n == 0 || memcmp(f->p, c->last_p, (size_t)f->n) == 0))
        return PyList_Append(c->values, c->last) < 0 ? -1 : 1;
    int r = convert_value(c, f, &v);
    if (r <= 0)
        return r;
    int ok = PyList_Append(c->values, v);
    Py_DECREF(v);
    if (ok < 0)
        return -1;
    if (f->in_data) {
        c->last_p = f->p;
    } else {
        /* an unescaped text lives in a scratch buffer the next field reuses: keep a copy */
        tt_buf_clear(&c->last_copy);
        if (tt_buf_put(&c->last_copy, f->p, f->n) < 0)
            return -1;
        c->last_p = c->last_copy.data;
    }
    c->last_n = f->n;
    c->last = v; /* the list holds it */
    return 1;
}

/* ------------------------------------------------------------------ decode: the file */

/* The decode plan, unpacked once per call. It mirrors the Python NamedTuple csv/decode.py DecodePlan
 * (built by _decode_plan): unpack_decode_plan reads its fields by position, in that class's order. */
typedef struct {
    dialect d;
    Py_ssize_t meta;          /* meta fields before the columns, with the handle-key field */
    int include_commit_ts;
    int handle_key;           /* output-handle-key: a row may lack that field (TiCDC v8) */
    PyObject *table, *schema; /* bytes */
    PyObject *header, *header_alt; /* tuples of bytes, or None */
    PyObject *kinds, *carefuls;    /* tuples, one per column */
    PyObject *op_create, *op_update, *op_delete;
    Py_ssize_t ncols;
} decode_plan;

static int unpack_decode_plan(PyObject *plan, decode_plan *p)
{
    PyObject *delimiter, *quote, *null;
    int meta;
    if (!PyArg_ParseTuple(plan, "SSSippSSOOO!O!OOOn", &delimiter, &quote, &null, &meta, &p->include_commit_ts,
                          &p->handle_key, &p->table, &p->schema, &p->header, &p->header_alt,
                          &PyTuple_Type, &p->kinds, &PyTuple_Type, &p->carefuls,
                          &p->op_create, &p->op_update, &p->op_delete, &p->d.field_limit))
        return -1;
    if (PyBytes_GET_SIZE(delimiter) != 1 || PyBytes_GET_SIZE(quote) != 1
        || PyTuple_GET_SIZE(p->kinds) != PyTuple_GET_SIZE(p->carefuls)) {
        PyErr_SetString(PyExc_SystemError, "_csv.decode: malformed plan");
        return -1;
    }
    p->d.delimiter = PyBytes_AS_STRING(delimiter)[0];
    p->d.quote = PyBytes_AS_STRING(quote)[0];
    p->d.null = PyBytes_AS_STRING(null);
    p->d.null_len = PyBytes_GET_SIZE(null);
    p->meta = meta;
    p->ncols = PyTuple_GET_SIZE(p->kinds);
    return 0;
}

/* Whether the record's fields are the header tuple's texts. */
static int fields_are(const field *fields, Py_ssize_t count, PyObject *names)
{
    if (names == Py_None || !PyTuple_Check(names) || PyTuple_GET_SIZE(names) != count)
        return 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *b = PyTuple_GET_ITEM(names, i);
        if (!PyBytes_Check(b) || !field_equals_bytes(&fields[i], b))
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ the file: one reader
 *
 * The walk over the file (records, header, meta fields, what makes it hand the file back) is one
 * function (read_rows) that hands each checked row to a sink: decode's columns. */

/* An unsigned commit ts's digits -> its value; 0 to hand back (empty, a sign, spaces, more than
 * 20 digits or 64 bits): the Python path reads or rejects those. */
static int commit_ts_of(const field *f, unsigned long long *ts)
{
    if (f->n == 0 || f->n > 20)
        return 0;
    unsigned long long v = 0;
    for (Py_ssize_t i = 0; i < f->n; i++) {
        char c = f->p[i];
        if (c < '0' || c > '9')
            return 0;
        unsigned long long d = (unsigned long long)(c - '0');
        if (v > (ULLONG_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *ts = v;
    return 1;
}

/* The tokenizer's buffers and the fields of the current record, for one call. */
typedef struct {
    tt_buf scratch, unescaped;
    field *fields;
    Py_ssize_t cap; /* meta + columns + one spare: a record with more fields is seen as such */
} reader;

static void reader_free(reader *r)
{
    PyMem_Free(r->fields);
    r->fields = NULL;
    tt_buf_free(&r->scratch);
    tt_buf_free(&r->unescaped);
}

/* Zeroes r first, so reader_free is safe whatever happens. */
static int reader_init(reader *r, const decode_plan *p)
{
    memset(r, 0, sizeof *r);
    r->cap = p->meta + p->ncols + 1;
    r->fields = PyMem_Calloc((size_t)r->cap, sizeof(field));
    if (r->fields == NULL || tt_buf_init(&r->scratch, 64) < 0 || tt_buf_init(&r->unescaped, 64) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* One data row's meta fields, checked, and where its column fields start. */
typedef struct {
    char op;                      /* 'I', 'U' or 'D' */
    unsigned long long commit_ts; /* 0 without the commit-ts column */
    const field *values;          /* plan.ncols fields */
} row_head;

/* The checks of the Python path on a row's meta fields. 1 ok, 0 hand back, -1 error. */
static int read_row_head(const decode_plan *p, const field *f, Py_ssize_t count, Py_ssize_t meta, row_head *h)
{
    if (count != meta + p->ncols)
        return 0;
    if (f[0].n != 1 || (f[0].p[0] != 'I' && f[0].p[0] != 'U' && f[0].p[0] != 'D'))
        return 0;
    if (!field_equals_bytes(&f[1], p->table) || !field_equals_bytes(&f[2], p->schema))
        return 0;
    h->commit_ts = 0;
    if (p->include_commit_ts && !commit_ts_of(&f[3], &h->commit_ts))
        return 0;
    if (p->handle_key && meta == p->meta) {
        /* the handle-key text is not used, but the Python path decodes all of the data */
        PyObject *t = PyUnicode_DecodeUTF8(f[meta - 1].p, f[meta - 1].n, "strict");
        if (t == NULL)
            return hand_back_exception();
        Py_DECREF(t);
    }
    h->op = f[0].p[0];
    h->values = f + meta;
    return 1;
}

typedef int (*row_sink)(void *sink, const row_head *row);

/* Every record of the data: the header (when `header`) checked and skipped, each data row's
 * meta fields checked and the row given to `sink`. 1 all read, 0 hand back, -1 error. */
static int read_rows(const decode_plan *p, reader *rd, const char *data, Py_ssize_t len, int header,
                     row_sink sink, void *ctx)
{
    const char *pos = data, *end = data + len;
    Py_ssize_t meta = -1; /* decided by the first row: with or without the handle-key field */
    while (pos < end) {
        Py_ssize_t count = next_record(&pos, end, &p->d, &rd->scratch, &rd->unescaped, rd->fields, rd->cap);
        if (count == -2)
            return -1;
        if (count < 0)
            return 0;
        if (header) {
            header = 0;
            if (!fields_are(rd->fields, count, p->header) && !fields_are(rd->fields, count, p->header_alt))
                return 0;
            continue;
        }
        if (meta < 0)
            meta = (p->handle_key && count == p->meta + p->ncols - 1) ? p->meta - 1 : p->meta;
        row_head h;
        int r = read_row_head(p, rd->fields, count, meta, &h);
        if (r > 0)
            r = sink(ctx, &h);
        if (r <= 0)
            return r;
    }
    return 1;
}

/* ------------------------------------------------------------------ decode: the file */

typedef struct {
    decode_plan plan;
    column_state *cols;
    PyObject *commit_ts;      /* list or NULL */
    char *ops;                /* one letter per row */
    Py_ssize_t rows, ops_cap;
} decoder;

static void decoder_free(decoder *k)
{
    if (k->cols != NULL)
        for (Py_ssize_t i = 0; i < k->plan.ncols; i++) {
            Py_XDECREF(k->cols[i].values);
            tt_buf_free(&k->cols[i].last_copy);
        }
    PyMem_Free(k->cols);
    PyMem_Free(k->ops);
    Py_XDECREF(k->commit_ts);
}

static int decoder_init(decoder *k, PyObject *plan)
{
    memset(k, 0, sizeof *k);
    if (unpack_decode_plan(plan, &k->plan) < 0)
        return -1;
    Py_ssize_t ncols = k->plan.ncols;
    k->cols = PyMem_Calloc((size_t)(ncols ? ncols : 1), sizeof(column_state));
    if (k->cols == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < ncols; i++) {
        column_state *c = &k->cols[i];
        c->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(k->plan.kinds, i));
        if (c->kind == -1 && PyErr_Occurred())
            return -1;
        c->careful = PyTuple_GET_ITEM(k->plan.carefuls, i);
        if ((c->kind != DK_TEXT && !PyCallable_Check(c->careful)) || c->kind < DK_TEXT || c->kind > DK_CALL) {
            PyErr_SetString(PyExc_SystemError, "_csv.decode: malformed column plan");
            return -1;
        }
        if ((c->values = PyList_New(0)) == NULL)
            return -1;
    }
    if (k->plan.include_commit_ts && (k->commit_ts = PyList_New(0)) == NULL)
        return -1;
    return 0;
}

/* decode's sink: the row's commit ts, operation and values appended. 1 taken, 0 hand back, -1 error. */
static int decode_row(void *ctx, const row_head *h)
{
    decoder *k = ctx;
    const decode_plan *p = &k->plan;
    if (k->commit_ts != NULL) {
        PyObject *ts = PyLong_FromUnsignedLongLong(h->commit_ts);
        if (ts == NULL)
            return -1;
        int ok = PyList_Append(k->commit_ts, ts);
        Py_DECREF(ts);
        if (ok < 0)
            return -1;
    }
    if (k->rows == k->ops_cap) {
        Py_ssize_t cap = k->ops_cap ? k->ops_cap * 2 : 256;
        char *ops = PyMem_Realloc(k->ops, (size_t)cap);
        if (ops == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        k->ops = ops;
        k->ops_cap = cap;
    }
    k->ops[k->rows++] = h->op;
    for (Py_ssize_t i = 0; i < p->ncols; i++) {
        int r = append_value(&k->cols[i], &h->values[i], &p->d);
        if (r <= 0)
            return r;
    }
    return 1;
}

/* (operations or None, commit ts list or None, [column values]) from the rows read. */
static PyObject *decoder_result(decoder *k)
{
    const decode_plan *p = &k->plan;
    PyObject *ops = Py_None, *columns = NULL, *ts = k->commit_ts ? k->commit_ts : Py_None;
    Py_ssize_t i;
    for (i = 0; i < k->rows && k->ops[i] == 'I'; i++)
        ;
    if (i < k->rows) {
        if ((ops = PyList_New(k->rows)) == NULL)
            return NULL;
        for (i = 0; i < k->rows; i++) {
            PyObject *op = k->ops[i] == 'I' ? p->op_create : k->ops[i] == 'U' ? p->op_update : p->op_delete;
            Py_INCREF(op);
            PyList_SET_ITEM(ops, i, op);
        }
    } else {
        Py_INCREF(ops);
    }
    if ((columns = PyList_New(p->ncols)) == NULL) {
        Py_DECREF(ops);
        return NULL;
    }
    for (i = 0; i < p->ncols; i++) {
        PyList_SET_ITEM(columns, i, k->cols[i].values); /* steals */
        k->cols[i].values = NULL;
    }
    Py_INCREF(ts);
    return Py_BuildValue("(NNN)", ops, ts, columns);
}

static PyObject *csv_decode(PyObject *self, PyObject *args)
{
    PyObject *plan;
    Py_buffer data;
    int header;
    if (!PyArg_ParseTuple(args, "O!y*p", &PyTuple_Type, &plan, &data, &header))
        return NULL;
    decoder k;
    reader rd;
    PyObject *result = NULL;
    memset(&rd, 0, sizeof rd);
    if (decoder_init(&k, plan) < 0 || reader_init(&rd, &k.plan) < 0)
        goto done;
    int r = read_rows(&k.plan, &rd, data.buf, data.len, header, decode_row, &k);
    if (r < 0)
        goto done;
    if (r == 0) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    result = decoder_result(&k);
done:
    reader_free(&rd);
    decoder_free(&k);
    PyBuffer_Release(&data);
    return result;
}

/* ------------------------------------------------------------------ encode */

/* One column of the encode plan: mirrors csv/encode.py EncodeColumn, field for field. */
typedef struct {
    PyObject *name;   /* str key of the row dict */
    int kind;
    int param;        /* DECIMAL scale, DATETIME fsp (-1: None) */
    PyObject *writer; /* the careful field writer: value -> final field text (quoted) */
} out_column;

typedef struct {
    PyObject *prefixes; /* dict: kind -> bytes of the op/table/schema fields */
    const char *delimiter, *terminator, *null;
    Py_ssize_t delimiter_len, terminator_len, null_len;
    char quote;
    int include_commit_ts;
    Py_ssize_t ncols;
    out_column *cols;
} encode_plan;

/* The encode plan mirrors csv/encode.py EncodePlan (built by _Writer._encode_plan), read by position. */
static int unpack_encode_plan(PyObject *plan, encode_plan *p)
{
    PyObject *delimiter, *terminator, *null, *quote, *columns;
    memset(p, 0, sizeof *p);
    if (!PyArg_ParseTuple(plan, "O!SSSSpO!", &PyDict_Type, &p->prefixes, &delimiter, &terminator, &null, &quote,
                          &p->include_commit_ts, &PyTuple_Type, &columns))
        return -1;
    if (PyBytes_GET_SIZE(quote) != 1) {
        PyErr_SetString(PyExc_SystemError, "_csv.encode: malformed plan");
        return -1;
    }
    p->delimiter = PyBytes_AS_STRING(delimiter);
    p->delimiter_len = PyBytes_GET_SIZE(delimiter);
    p->terminator = PyBytes_AS_STRING(terminator);
    p->terminator_len = PyBytes_GET_SIZE(terminator);
    p->null = PyBytes_AS_STRING(null);
    p->null_len = PyBytes_GET_SIZE(null);
    p->quote = PyBytes_AS_STRING(quote)[0];
    p->ncols = PyTuple_GET_SIZE(columns);
    p->cols = PyMem_Calloc((size_t)(p->ncols ? p->ncols : 1), sizeof(out_column));
    if (p->cols == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < p->ncols; i++) {
        out_column *c = &p->cols[i];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(columns, i), "UiiO", &c->name, &c->kind, &c->param, &c->writer))
            return -1;
    }
    return 0;
}

/* The quoted UTF-8 of an exact str, quote characters doubled. TT_PASS for anything else. */
static int put_quoted_str(tt_buf *b, PyObject *v, char quote)
{
    const char *s;
    Py_ssize_t n;
    int r = tt_utf8_of(v, &s, &n);
    if (r != TT_OK)
        return r;
    if (tt_buf_reserve(b, n + 2) < 0)
        return TT_ERR;
    b->data[b->len++] = quote;
    const char *q = memchr(s, quote, (size_t)n);
    if (q == NULL) {
        memcpy(b->data + b->len, s, (size_t)n);
        b->len += n;
    } else {
        for (Py_ssize_t i = 0; i < n; i++)
            if ((s[i] == quote && tt_buf_putc(b, quote) < 0) || tt_buf_putc(b, s[i]) < 0)
                return TT_ERR;
    }
    return tt_buf_putc(b, quote) < 0 ? TT_ERR : TT_OK;
}

/* "quote + text + quote" for the binary forms, TT_PASS when the text holds the quote character
 * (the Python writer then decides) or the value is not exact bytes. */
static int put_binary(tt_buf *b, PyObject *v, int hex, char quote)
{
    if (!PyBytes_CheckExact(v))
        return TT_PASS;
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(v);
    Py_ssize_t n = PyBytes_GET_SIZE(v);
    Py_ssize_t start = b->len;
    Py_ssize_t size = hex ? 2 * n : (n + 2) / 3 * 4;
    if (tt_buf_reserve(b, size + 2) < 0)
        return TT_ERR;
    char *o = b->data + b->len;
    *o++ = quote;
    if (hex) {
        for (Py_ssize_t i = 0; i < n; i++) {
            *o++ = tt_hex[s[i] >> 4];
            *o++ = tt_hex[s[i] & 15];
        }
    } else {
        Py_ssize_t i = 0;
        for (; i + 3 <= n; i += 3) {
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
    }
    *o++ = quote;
    if (memchr(b->data + start + 1, quote, (size_t)size) != NULL)
        return TT_PASS; /* caller resets b->len */
    b->len = o - b->data;
    return TT_OK;
}

/* The Python field writer's text for v: 1 written, 0 hand back, -1 error. */
static int put_written(tt_buf *b, const out_column *c, PyObject *v)
{
    PyObject *text = PyObject_CallOneArg(c->writer, v);
    if (text == NULL)
        return hand_back_exception();
    int r = tt_text_str(b, text);
    Py_DECREF(text);
    return r == TT_ERR ? -1 : r == TT_OK;
}

/* One non-NULL value as its field text: 1 written, 0 hand back, -1 error. */
static int put_value(tt_buf *b, const encode_plan *p, const out_column *c, PyObject *v)
{
    Py_ssize_t start = b->len;
    int r;
    switch (c->kind) {
    case EK_INT: r = tt_text_int(b, v); break;
    case EK_GO_FLOAT: r = tt_text_go_float(b, v); break;
    case EK_STR: r = put_quoted_str(b, v, p->quote); break;
    case EK_BASE64:
    case EK_HEX: r = put_binary(b, v, c->kind == EK_HEX, p->quote); break;
    case EK_DECIMAL:
    case EK_DATE:
    case EK_DATETIME:
        if (tt_buf_putc(b, p->quote) < 0)
            return -1;
        r = c->kind == EK_DECIMAL ? tt_text_decimal(b, v, c->param)
            : c->kind == EK_DATE ? tt_text_date(b, v) : tt_text_datetime(b, v, c->param);
        if (r == TT_OK && tt_buf_putc(b, p->quote) < 0)
            return -1;
        break;
    default: r = TT_PASS; break;
    }
    if (r == TT_ERR)
        return -1;
    if (r == TT_OK)
        return 1;
    b->len = start;
    return put_written(b, c, v);
}

/* One row's line: 1 written, 0 hand back, -1 error. */
static int put_row(tt_buf *b, const encode_plan *p, PyObject *kind, PyObject *ts, PyObject *row)
{
    PyObject *prefix = PyDict_GetItemWithError(p->prefixes, kind);
    if (prefix == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyDict_CheckExact(row))
        return 0;
    if (tt_buf_put(b, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix)) < 0)
        return -1;
    if (p->include_commit_ts) {
        int r = tt_text_int(b, ts);
        if (r != TT_OK)
            return r == TT_ERR ? -1 : 0;
        if (tt_buf_put(b, p->delimiter, p->delimiter_len) < 0)
            return -1;
    }
    for (Py_ssize_t i = 0; i < p->ncols; i++) {
        const out_column *c = &p->cols[i];
        if (i && tt_buf_put(b, p->delimiter, p->delimiter_len) < 0)
            return -1;
        PyObject *v = PyDict_GetItemWithError(row, c->name);
        if (v == NULL)
            return PyErr_Occurred() ? -1 : 0;
        if (v == Py_None) {
            if (tt_buf_put(b, p->null, p->null_len) < 0)
                return -1;
            continue;
        }
        Py_INCREF(v); /* a Python writer may run arbitrary code */
        int r = put_value(b, p, c, v);
        Py_DECREF(v);
        if (r <= 0)
            return r;
    }
    return tt_buf_put(b, p->terminator, p->terminator_len) < 0 ? -1 : 1;
}

static PyObject *csv_encode(PyObject *self, PyObject *args)
{
    PyObject *plan, *kinds, *commit_ts, *rows;
    if (!PyArg_ParseTuple(args, "O!O!O!O!", &PyTuple_Type, &plan, &PyList_Type, &kinds, &PyList_Type, &commit_ts,
                          &PyList_Type, &rows))
        return NULL;
    encode_plan p;
    tt_buf b = {NULL, 0, 0};
    PyObject *result = NULL;
    if (unpack_encode_plan(plan, &p) < 0)
        goto done;
    Py_ssize_t n = PyList_GET_SIZE(rows);
    if (PyList_GET_SIZE(kinds) < n)
        n = PyList_GET_SIZE(kinds);
    if (PyList_GET_SIZE(commit_ts) < n)
        n = PyList_GET_SIZE(commit_ts);
    if (tt_buf_init(&b, 128 * (n + 1)) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* the lists may change under a Python writer: index them afresh, hold what we use */
        if (i >= PyList_GET_SIZE(rows) || i >= PyList_GET_SIZE(kinds) || i >= PyList_GET_SIZE(commit_ts))
            break;
        PyObject *kind = PyList_GET_ITEM(kinds, i), *ts = PyList_GET_ITEM(commit_ts, i),
                 *row = PyList_GET_ITEM(rows, i);
        Py_INCREF(kind);
        Py_INCREF(ts);
        Py_INCREF(row);
        int r = put_row(&b, &p, kind, ts, row);
        Py_DECREF(kind);
        Py_DECREF(ts);
        Py_DECREF(row);
        if (r < 0)
            goto done;
        if (r == 0) {
            Py_INCREF(Py_None);
            result = Py_None;
            goto done;
        }
    }
    result = tt_buf_bytes(&b);
done:
    PyMem_Free(p.cols);
    tt_buf_free(&b);
    return result;
}

/* ------------------------------------------------------------------ records
 *
 * records(plan, positions, operations, commit_ts, columns, start, end): rows [start, end) of
 * column-wise values as cdcflow Records, exactly what events.rows_to_records builds (its
 * generated comprehension is the reference): the metadata a copy of the table's template with
 * the commit ts texts slotted in (texts shared by consecutive rows of one commit ts); the key a dict of
 * the handle columns; the row a dict of every column; DELETE rows as `before`, others as `after`.
 * `positions` is a bytes prefix (row i gets prefix + decimal(i + 1), the storage source's
 * position) or a list of bytes (row i gets positions[i - start]). Anything outside the usual
 * shapes (a commit ts that is not a small exact int, lists shorter than `end`) hands the batch
 * back: None, and the Python builder makes it. */

static const char *const record_slot_names[] = {"position", "operation", "metadata", "key", "before", "after"};
enum { SLOT_POSITION, SLOT_OPERATION, SLOT_METADATA, SLOT_KEY, SLOT_BEFORE, SLOT_AFTER, RECORD_SLOTS };

/* The records plan (events.records_plan, the NamedTuple events.RecordsPlan: fields in this order), unpacked once per call. */
typedef struct {
    PyTypeObject *record;     /* cdcflow.record.Record */
    Py_ssize_t offsets[RECORD_SLOTS];
    PyObject *template;       /* dict: the table's row metadata */
    PyObject *names;          /* tuple of str, one per column */
    PyObject *key_indexes;    /* tuple of column indexes of the handle key (empty: key None) */
    PyObject *created_key, *ts_key;
    PyObject *create, *delete_;
} records_plan;

/* Where Record keeps each slot: its member descriptors say, so a new instance can be filled as
 * Record.__init__ fills it without running a Python frame per row. Checked on every call, so a
 * Record that stops being a plain __slots__ class fails loudly instead of being written blindly. */
static int record_layout(records_plan *p)
{
    PyTypeObject *type = p->record;
    if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type->tp_alloc == NULL || type->tp_itemsize != 0) {
        PyErr_SetString(PyExc_SystemError, "_csv.records: Record is not a plain __slots__ class");
        return -1;
    }
    int at = rs_slot_offsets(type, record_slot_names, RECORD_SLOTS, p->offsets);
    if (at < 0)
        return -1;
    if (at < RECORD_SLOTS) {
        PyErr_Format(PyExc_SystemError, "_csv.records: Record.%s is not an object slot", record_slot_names[at]);
        return -1;
    }
    return 0;
}

static int unpack_records_plan(PyObject *plan, records_plan *p)
{
    if (!PyArg_ParseTuple(plan, "O!O!O!O!UUOO", &PyType_Type, &p->record, &PyDict_Type, &p->template,
                          &PyTuple_Type, &p->names, &PyTuple_Type, &p->key_indexes, &p->created_key, &p->ts_key,
                          &p->create, &p->delete_))
        return -1;
    Py_ssize_t ncols = PyTuple_GET_SIZE(p->names);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(p->key_indexes); i++) {
        PyObject *k = PyTuple_GET_ITEM(p->key_indexes, i);
        Py_ssize_t at = PyLong_Check(k) ? PyLong_AsSsize_t(k) : -1;
        if (at < 0 || at >= ncols) {
            PyErr_Clear();
            PyErr_SetString(PyExc_SystemError, "_csv.records: malformed key indexes");
            return -1;
        }
    }
    return record_layout(p);
}

/* The decimal digits of v, most significant first, into digits[]; returns their count. */
#define MAX_U64_DIGITS 20
static int u64_digits(unsigned long long v, char digits[MAX_U64_DIGITS])
{
    char reversed[MAX_U64_DIGITS];
    int n = 0;
    do {
        reversed[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (int k = 0; k < n; k++)
        digits[k] = reversed[n - 1 - k];
    return n;
}

/* An ASCII str of the decimal digits of v. */
static PyObject *decimal_str(unsigned long long v)
{
    char digits[MAX_U64_DIGITS];
    int n = u64_digits(v, digits);
    PyObject *s = PyUnicode_New(n, 127);
    if (s == NULL)
        return NULL;
    memcpy(PyUnicode_1BYTE_DATA(s), digits, (size_t)n);
    return s;
}

/* The two metadata texts of commit ts `ts`: opencdc.createdAt (the TSO's physical milliseconds
 * as nanoseconds) and ticdc.commit-ts. Kept while consecutive rows have the same ts. */
typedef struct {
    unsigned long long ts;
    PyObject *created, *text; /* NULL: none made yet */
} ts_texts;

static int ts_texts_for(ts_texts *t, unsigned long long ts)
{
    if (t->text != NULL && t->ts == ts)
        return 0;
    Py_CLEAR(t->created);
    Py_CLEAR(t->text);
    if ((t->created = decimal_str((ts >> 18) * 1000000ULL)) == NULL || (t->text = decimal_str(ts)) == NULL) {
        Py_CLEAR(t->created);
        return -1;
    }
    t->ts = ts;
    return 0;
}

/* A row's metadata: its own copy of the template (as the Python builder makes one per row) with
 * the commit ts texts set. */
static PyObject *row_metadata(const records_plan *p, const ts_texts *t)
{
    PyObject *md = PyDict_Copy(p->template);
    if (md == NULL)
        return NULL;
    if (PyDict_SetItem(md, p->created_key, t->created) < 0 || PyDict_SetItem(md, p->ts_key, t->text) < 0) {
        Py_DECREF(md);
        return NULL;
    }
    return md;
}

/* A commit ts the fast texts cover: an exact int whose createdAt product fits 64 bits.
 * 1 with *ts set, 0 to hand back. */
static int small_commit_ts(PyObject *v, unsigned long long *ts)
{
    if (!PyLong_CheckExact(v))
        return 0;
    unsigned long long t = PyLong_AsUnsignedLongLong(v);
    if (t == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or wider than 64 bits: Python's ints do it */
        return 0;
    }
    if ((t >> 18) > ULLONG_MAX / 1000000ULL)
        return 0;
    *ts = t;
    return 1;
}

/* The storage source's position of row i: prefix + decimal(i + 1). */
static PyObject *numbered_position(PyObject *prefix, Py_ssize_t i)
{
    char digits[MAX_U64_DIGITS];
    int n = u64_digits((unsigned long long)i + 1, digits);
    Py_ssize_t plen = PyBytes_GET_SIZE(prefix);
    PyObject *out = PyBytes_FromStringAndSize(NULL, plen + n);
    if (out == NULL)
        return NULL;
    memcpy(PyBytes_AS_STRING(out), PyBytes_AS_STRING(prefix), (size_t)plen);
    memcpy(PyBytes_AS_STRING(out) + plen, digits, (size_t)n);
    return out;
}

/* One row's items, each a new reference taken right after the lists were checked to hold them,
 * so the row is built from values this call owns whatever happens to the lists. (Collection is
 * off during the loop, so no finalizer runs; the check per row keeps that reasoning local.) */
typedef struct {
    PyObject *position, *operation, *commit_ts;
    PyObject **values; /* one per column */
} row_items;

static void row_items_clear(row_items *r, Py_ssize_t ncols)
{
    Py_CLEAR(r->position);
    Py_CLEAR(r->operation);
    Py_CLEAR(r->commit_ts);
    for (Py_ssize_t c = 0; c < ncols; c++)
        Py_CLEAR(r->values[c]);
}

/* Take row i's items. 1 taken, 0 to hand back (a list is not the shape or too short), -1 error. */
static int take_row(const records_plan *p, PyObject *positions, PyObject *operations, PyObject *commit_ts,
                    PyObject *columns, Py_ssize_t i, Py_ssize_t start, row_items *r)
{
    Py_ssize_t ncols = PyTuple_GET_SIZE(p->names);
    if (!PyList_CheckExact(columns) || PyList_GET_SIZE(columns) != ncols)
        return 0;
    if (operations != Py_None && PyList_GET_SIZE(operations) <= i)
        return 0;
    if (commit_ts != Py_None && PyList_GET_SIZE(commit_ts) <= i)
        return 0;
    for (Py_ssize_t c = 0; c < ncols; c++) {
        PyObject *col = PyList_GET_ITEM(columns, c);
        if (!(PyList_CheckExact(col) || PyTuple_CheckExact(col)) || PySequence_Fast_GET_SIZE(col) <= i)
            return 0;
    }
    if (PyList_CheckExact(positions)) {
        if (PyList_GET_SIZE(positions) <= i - start)
            return 0;
        r->position = PyList_GET_ITEM(positions, i - start);
        Py_INCREF(r->position);
    } else if ((r->position = numbered_position(positions, i)) == NULL) {
        return -1;
    }
    r->operation = operations == Py_None ? p->create : PyList_GET_ITEM(operations, i);
    Py_INCREF(r->operation);
    r->commit_ts = commit_ts == Py_None ? NULL : PyList_GET_ITEM(commit_ts, i);
    Py_XINCREF(r->commit_ts);
    for (Py_ssize_t c = 0; c < ncols; c++) {
        r->values[c] = PySequence_Fast_GET_ITEM(PyList_GET_ITEM(columns, c), i);
        Py_INCREF(r->values[c]);
    }
    return 1;
}

/* The row dict (every column, table order) and the key dict (the handle columns; None without). */
static int row_dicts(const records_plan *p, PyObject *const *values, PyObject **row, PyObject **key)
{
    Py_ssize_t ncols = PyTuple_GET_SIZE(p->names);
    *key = NULL;
    if ((*row = PyDict_New()) == NULL)
        return -1;
    for (Py_ssize_t c = 0; c < ncols; c++)
        if (PyDict_SetItem(*row, PyTuple_GET_ITEM(p->names, c), values[c]) < 0)
            goto fail;
    Py_ssize_t nkey = PyTuple_GET_SIZE(p->key_indexes);
    if (nkey == 0) {
        Py_INCREF(Py_None);
        *key = Py_None;
        return 0;
    }
    if ((*key = PyDict_New()) == NULL)
        goto fail;
    for (Py_ssize_t k = 0; k < nkey; k++) {
        Py_ssize_t c = PyLong_AsSsize_t(PyTuple_GET_ITEM(p->key_indexes, k)); /* checked when unpacked */
        if (PyDict_SetItem(*key, PyTuple_GET_ITEM(p->names, c), values[c]) < 0)
            goto fail;
    }
    return 0;
fail:
    Py_CLEAR(*row);
    Py_CLEAR(*key);
    return -1;
}

/* A new Record with its six slots set; steals every reference it is given (also on failure). */
static PyObject *new_record(const records_plan *p, PyObject *slots[RECORD_SLOTS])
{
    PyObject *r = p->record->tp_alloc(p->record, 0);
    if (r == NULL) {
        for (int k = 0; k < RECORD_SLOTS; k++)
            Py_DECREF(slots[k]);
        return NULL;
    }
    for (int k = 0; k < RECORD_SLOTS; k++)
        *(PyObject **)((char *)r + p->offsets[k]) = slots[k];
    return r;
}

/* Row i's record from its items. 1 made (*out set), 0 to hand back, -1 error. */
static int row_record(const records_plan *p, row_items *r, ts_texts *texts, PyObject **out)
{
    unsigned long long ts = 0;
    if (r->commit_ts != NULL && !small_commit_ts(r->commit_ts, &ts))
        return 0;
    if (ts_texts_for(texts, ts) < 0)
        return -1;
    PyObject *md = row_metadata(p, texts);
    if (md == NULL)
        return -1;
    PyObject *row, *key;
    if (row_dicts(p, r->values, &row, &key) < 0) {
        Py_DECREF(md);
        return -1;
    }
    int deleted = r->operation == p->delete_;
    Py_INCREF(Py_None);
    PyObject *slots[RECORD_SLOTS] = {r->position, r->operation, md, key, deleted ? row : Py_None,
                                     deleted ? Py_None : row};
    r->position = r->operation = NULL; /* new_record steals them */
    *out = new_record(p, slots);
    return *out == NULL ? -1 : 1;
}

static PyObject *csv_records(PyObject *self, PyObject *args)
{
    PyObject *plan, *positions, *operations, *commit_ts, *columns;
    Py_ssize_t start, end;
    records_plan p;
    if (!PyArg_ParseTuple(args, "O!OOOOnn", &PyTuple_Type, &plan, &positions, &operations, &commit_ts, &columns,
                          &start, &end))
        return NULL;
    if (unpack_records_plan(plan, &p) < 0)
        return NULL;
    if (start < 0 || end < start || !(PyList_CheckExact(positions) || PyBytes_CheckExact(positions))
        || !(operations == Py_None || PyList_CheckExact(operations))
        || !(commit_ts == Py_None || PyList_CheckExact(commit_ts)))
        Py_RETURN_NONE;
    Py_ssize_t ncols = PyTuple_GET_SIZE(p.names);
    /* Automatic collection is off while the batch is built and back on (if it was on) when it is
     * returned: these records hold no cycles, and a collection every few hundred allocations
     * would only promote the still-referenced batch to older generations, where full
     * collections traverse it again and again (~0.5 us per record; the cost of the batch's
     * young-generation pass after the call stays). Nothing is skipped: the allocations still
     * count, and the next allocation after the call collects as usual. */
    int gc_was_enabled = PyGC_Disable();
    row_items items = {NULL, NULL, NULL, PyMem_Calloc((size_t)(ncols ? ncols : 1), sizeof(PyObject *))};
    PyObject *out = items.values == NULL ? PyErr_NoMemory() : PyList_New(end - start);
    ts_texts texts = {0, NULL, NULL};
    int r = 1;
    for (Py_ssize_t i = start; out != NULL && i < end && r > 0; i++) {
        PyObject *record = NULL;
        r = take_row(&p, positions, operations, commit_ts, columns, i, start, &items);
        if (r > 0)
            r = row_record(&p, &items, &texts, &record);
        row_items_clear(&items, ncols);
        if (r > 0)
            PyList_SET_ITEM(out, i - start, record);
    }
    Py_XDECREF(texts.created);
    Py_XDECREF(texts.text);
    PyMem_Free(items.values);
    if (gc_was_enabled)
        PyGC_Enable();
    if (r <= 0) {
        Py_CLEAR(out);
        if (r == 0)
            Py_RETURN_NONE;
    }
    return out;
}

/* ------------------------------------------------------------------ test entry point */

static PyObject *csv_parse_value(PyObject *self, PyObject *args)
{
    int kind;
    const char *s;
    Py_ssize_t n;
    long long max_us = -1;
    if (!PyArg_ParseTuple(args, "is#|L", &kind, &s, &n, &max_us))
        return NULL;
    PyObject *out = NULL;
    int r;
    switch (kind) {
    case DK_INT: r = tidbparse_int(s, n, &out); break;
    case DK_FLOAT: r = tidbparse_float(s, n, &out); break;
    case -DK_FLOAT: r = parse_float(s, n, &out); break; /* the kernel's own fast path */
    case DK_DECIMAL: r = tidbparse_decimal(s, n, &out); break;
    case DK_DATE: r = tidbparse_date(s, n, &out); break;
    case DK_DATETIME: r = tidbparse_datetime(s, n, &out); break;
    case DK_TIME: r = tidbparse_time(s, n, max_us, &out); break;
    default:
        PyErr_Format(PyExc_ValueError, "no tidbparse function for kind %d", kind);
        return NULL;
    }
    if (r == TIDBPARSE_ERROR)
        return NULL;
    if (r == TIDBPARSE_NOT_HANDLED)
        Py_RETURN_NOTIMPLEMENTED;
    return out;
}

static PyMethodDef methods[] = {
    {"decode", csv_decode, METH_VARARGS,
     "decode(plan, data, header) -> (operations | None, commit_ts | None, columns) or None to hand back"},
    {"encode", csv_encode, METH_VARARGS,
     "encode(plan, kinds, commit_ts, rows) -> CSV bytes of the rows, or None to hand back"},
    {"records", csv_records, METH_VARARGS,
     "records(plan, positions, operations, commit_ts, columns, start, end) -> [Record] or None to hand back"},
    {"parse_value", csv_parse_value, METH_VARARGS,
     "parse_value(kind, text[, max_us]) -> value or NotImplemented (tidbparse.h, for tests)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_csv", "TiCDC CSV kernels", -1, methods};

PyMODINIT_FUNC PyInit__csv(void)
{
    if (tidbparse_init() < 0 || tt_init() < 0)
        return NULL;
    return PyModule_Create(&module);
}
