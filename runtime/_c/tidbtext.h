/* tidbtext.h: native Python value -> TiDB text form, JSON string writing, a growable buffer.
 *
 * Shared by the text-writing codec kernels (canal-json, CSV, open protocol). Every function is
 * `static`, so each extension module compiles its own copy; the only state is what tt_init()
 * fetches once at module init (the datetime C API and decimal.Decimal).
 *
 * The texts mirror cdcflow.connectors.ticdc.tidb's fast paths exactly (inline_text_expr, inline_go_float_expr,
 * format_time). Whenever the Python fast path would take its slow branch, a tt_text_* function
 * writes nothing and returns TT_PASS, and the caller hands the value (or its row) back to Python,
 * which formats it or raises the typed error with context.
 *
 * Return convention of every tt_* that can fail:  TT_OK (0) written;  TT_PASS (1) not handled,
 * nothing written, no exception set;  TT_ERR (-1) a Python exception is set (MemoryError etc.).
 *
 * API (stable; add, do not rename):
 *   int  tt_init(void)                                   once in PyInit_*; -1 on error
 *   tt_buf: {char *data; Py_ssize_t len, cap}
 *   int  tt_buf_init(tt_buf *, Py_ssize_t cap)           -1 + MemoryError
 *   void tt_buf_free(tt_buf *)
 *   void tt_buf_clear(tt_buf *)                          len = 0, keeps the memory
 *   int  tt_buf_reserve(tt_buf *, Py_ssize_t extra)      room for `extra` more bytes
 *   int  tt_buf_put(tt_buf *, const char *, Py_ssize_t)
 *   int  tt_buf_putc(tt_buf *, char)
 *   int  tt_buf_put_i64(tt_buf *, long long)             decimal digits
 *   int  tt_buf_put_u64(tt_buf *, unsigned long long)
 *   PyObject *tt_buf_bytes(const tt_buf *)               new bytes object of the contents
 *
 *   JSON strings (TT_JSON_ORJSON: orjson's escaping; TT_JSON_GO: Go encoding/json's, as TiCDC
 *   writes canal-json: <, >, & and U+2028/9 as \u003c-style lowercase escapes, \b \f as \u0008
 *   \u000c; both: \" \\ \n \r \t short, other controls \u00xx lowercase):
 *   int  tt_json_utf8(tt_buf *, const char *utf8, Py_ssize_t n, int style)   quotes included
 *   int  tt_json_latin1(tt_buf *, const char *bytes, Py_ssize_t n, int style) bytes as U+0000..U+00FF
 *   int  tt_json_str(tt_buf *, PyObject *str, int style)    TT_PASS: not an exact str / lone surrogate
 *   int  tt_utf8_of(PyObject *str, const char **p, Py_ssize_t *n)  TT_PASS as above
 *
 *   Value -> text (plain text appended, no quotes; every text but TT_STR's is ASCII digits and
 *   "-.: e+", so it needs no JSON escaping). `param` is the column's scale / fsp, -1 for None:
 *   int  tt_text_int(tt_buf *, PyObject *v)               exact int within -2**63 .. 2**64-1
 *   int  tt_text_str(tt_buf *, PyObject *v)               exact str, raw UTF-8
 *   int  tt_text_decimal(tt_buf *, PyObject *v, int scale)  exact Decimal; scale -1 -> TT_PASS
 *   int  tt_text_datetime(tt_buf *, PyObject *v, int fsp) exact naive datetime, fsp -1 or 0..6
 *   int  tt_text_date(tt_buf *, PyObject *v)              exact date
 *   int  tt_text_time(tt_buf *, PyObject *v, int fsp)     exact timedelta (format_time)
 *   int  tt_text_float(tt_buf *, PyObject *v)             format_float's no-exponent case
 *   int  tt_text_go_float(tt_buf *, PyObject *v)          format_go_float for 1e-4 <= |v| < 1e6
 *   int  tt_text_bool(tt_buf *, PyObject *v)              exact bool -> "1" / "0"
 *   int  tt_text_of(tt_buf *, int kind, PyObject *v, int param)   dispatch on TT_K_* below
 */
#ifndef CDCFLOW_TIDBTEXT_H
#define CDCFLOW_TIDBTEXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <string.h>

#define TT_OK 0
#define TT_PASS 1
#define TT_ERR (-1)

#define TT_JSON_ORJSON 0
#define TT_JSON_GO 1

/* value kinds for tt_text_of (also the kind numbers kernels' plans use) */
#define TT_K_INT 1
#define TT_K_STR 2
#define TT_K_DECIMAL 3
#define TT_K_DATETIME 4
#define TT_K_DATE 5
#define TT_K_TIME 6
#define TT_K_FLOAT 7
#define TT_K_GO_FLOAT 8
#define TT_K_BOOL 9

/* decimal.Decimal, fetched once by tt_init (a module-level constant afterwards) */
static PyObject *tt_decimal_type = NULL;

static int tt_init(void)
{
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL)
        return -1;
    if (tt_decimal_type == NULL) {
        PyObject *mod = PyImport_ImportModule("decimal");
        if (mod == NULL)
            return -1;
        tt_decimal_type = PyObject_GetAttrString(mod, "Decimal");
        Py_DECREF(mod);
        if (tt_decimal_type == NULL)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ growable buffer */

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} tt_buf;

static int tt_buf_init(tt_buf *b, Py_ssize_t cap)
{
    if (cap < 16)
        cap = 16;
    b->data = PyMem_Malloc((size_t)cap);
    b->len = 0;
    b->cap = b->data ? cap : 0;
    if (b->data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void tt_buf_free(tt_buf *b)
{
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static void tt_buf_clear(tt_buf *b) { b->len = 0; }

/* Grow (doubling, so appends are amortised O(1)) until `extra` more bytes fit. */
static int tt_buf_grow(tt_buf *b, Py_ssize_t extra)
{
    if (extra > PY_SSIZE_T_MAX - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t need = b->len + extra;
    Py_ssize_t cap = b->cap > 0 ? b->cap : 16;
    while (cap < need)
        cap = cap > PY_SSIZE_T_MAX / 2 ? need : cap * 2;
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int tt_buf_reserve(tt_buf *b, Py_ssize_t extra)
{
    return extra <= b->cap - b->len ? 0 : tt_buf_grow(b, extra);
}

static inline int tt_buf_put(tt_buf *b, const char *s, Py_ssize_t n)
{
    if (tt_buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

static inline int tt_buf_putc(tt_buf *b, char c)
{
    if (tt_buf_reserve(b, 1) < 0)
        return -1;
    b->data[b->len++] = c;
    return 0;
}

/* "00" "01" ... "99": two digits per division (commit timestamps have 19 digits) */
static const char tt_digit_pairs[201] =
    "0001020304050607080910111213141516171819"
    "2021222324252627282930313233343536373839"
    "4041424344454647484950515253545556575859"
    "6061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static int tt_buf_put_u64(tt_buf *b, unsigned long long v)
{
    char tmp[24]; /* 2**64-1 has 20 digits */
    int i = (int)sizeof tmp;
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        tmp[--i] = tt_digit_pairs[2 * r + 1];
        tmp[--i] = tt_digit_pairs[2 * r];
    }
    if (v >= 10) {
        tmp[--i] = tt_digit_pairs[2 * v + 1];
        tmp[--i] = tt_digit_pairs[2 * v];
    } else
        tmp[--i] = (char)('0' + v);
    return tt_buf_put(b, tmp + i, (Py_ssize_t)sizeof tmp - i);
}

static int tt_buf_put_i64(tt_buf *b, long long v)
{
    if (v >= 0)
        return tt_buf_put_u64(b, (unsigned long long)v);
    if (tt_buf_putc(b, '-') < 0)
        return -1;
    /* negate in unsigned arithmetic: -LLONG_MIN overflows a signed long long */
    return tt_buf_put_u64(b, 0ULL - (unsigned long long)v);
}

/* `width` digits of v, zero padded (v < 10**width) */
static int tt_buf_put_padded(tt_buf *b, unsigned long long v, int width)
{
    if (tt_buf_reserve(b, width) < 0)
        return -1;
    for (int i = width - 1; i >= 0; i--) {
        b->data[b->len + i] = (char)('0' + v % 10);
        v /= 10;
    }
    b->len += width;
    return 0;
}

static PyObject *tt_buf_bytes(const tt_buf *b)
{
    return PyBytes_FromStringAndSize(b->data, b->len);
}

/* ------------------------------------------------------------------ JSON strings */

/* Per byte: 0 copy as is; 'u' \u00xx; a letter: that short escape; 'g' Go only (<, >, & as
 * \u00xx; 0xE2 may start U+2028/9); 'b'/'f' short in orjson, \u00xx in Go. */
static const unsigned char tt_json_class[256] = {
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'b', 't', 'n', 'u', 'f', 'r', 'u', 'u',
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u',
    0, 0, '"', 0, 0, 0, 'g', 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'g', 0, 'g', 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '\\', 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 'g', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

static const char tt_hex[] = "0123456789abcdef";

static int tt_put_u00(tt_buf *b, unsigned char c)
{
    char esc[6] = {'\\', 'u', '0', '0', tt_hex[c >> 4], tt_hex[c & 15]};
    return tt_buf_put(b, esc, 6);
}

/* One escaped byte (or the U+2028/9 sequence starting at s[i]); sets *used to the input bytes
 * consumed. Called only for bytes whose class is non-zero. */
static int tt_json_escape_at(tt_buf *b, const unsigned char *s, Py_ssize_t i, Py_ssize_t n, int style,
                             Py_ssize_t *used)
{
    unsigned char c = s[i];
    unsigned char cls = tt_json_class[c];
    *used = 1;
    switch (cls) {
    case 'u':
        return tt_put_u00(b, c);
    case 'b':
    case 'f':
        if (style == TT_JSON_GO)
            return tt_put_u00(b, c);
        return tt_buf_put(b, cls == 'b' ? "\\b" : "\\f", 2); /* orjson writes them short */
    case 't':
    case 'n':
    case 'r':
    case '"':
    case '\\': {
        char esc[2] = {'\\', (char)cls};
        return tt_buf_put(b, esc, 2);
    }
    default: /* 'g' */
        if (style != TT_JSON_GO)
            return tt_buf_putc(b, (char)c);
        if (c != 0xE2)
            return tt_put_u00(b, c);
        /* U+2028 / U+2029 are E2 80 A8 / E2 80 A9 in UTF-8; any other E2 sequence is copied */
        if (i + 2 < n && s[i + 1] == 0x80 && (s[i + 2] == 0xA8 || s[i + 2] == 0xA9)) {
            *used = 3;
            return tt_buf_put(b, s[i + 2] == 0xA8 ? "\\u2028" : "\\u2029", 6);
        }
        return tt_buf_putc(b, (char)c);
    }
}

/* `"` + escaped UTF-8 + `"`: runs of plain bytes are copied with one memcpy each. */
static int tt_json_utf8(tt_buf *b, const char *utf8, Py_ssize_t n, int style)
{
    const unsigned char *s = (const unsigned char *)utf8;
    /* most strings need no escape: reserve for that case once */
    if (tt_buf_reserve(b, n + 2) < 0)
        return TT_ERR;
    b->data[b->len++] = '"';
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < n;) {
        if (tt_json_class[s[i]] == 0) {
            i++;
            continue;
        }
        if (tt_buf_put(b, (const char *)s + run, i - run) < 0)
            return TT_ERR;
        Py_ssize_t used;
        if (tt_json_escape_at(b, s, i, n, style, &used) < 0)
            return TT_ERR;
        i += used;
        run = i;
    }
    if (tt_buf_put(b, (const char *)s + run, n - run) < 0 || tt_buf_putc(b, '"') < 0)
        return TT_ERR;
    return TT_OK;
}

/* bytes read as latin-1 (each byte one code point U+0000..U+00FF), written as a JSON string in
 * UTF-8: what `json(bytes.decode("latin-1"))` gives. */
static int tt_json_latin1(tt_buf *b, const char *bytes, Py_ssize_t n, int style)
{
    const unsigned char *s = (const unsigned char *)bytes;
    if (n > (PY_SSIZE_T_MAX - 2) / 2) {
        PyErr_NoMemory();
        return TT_ERR;
    }
    if (tt_buf_reserve(b, 2 * n + 2) < 0)
        return TT_ERR;
    b->data[b->len++] = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x80) {
            if (tt_buf_reserve(b, 2) < 0)
                return TT_ERR;
            b->data[b->len++] = (char)(0xC0 | (c >> 6));
            b->data[b->len++] = (char)(0x80 | (c & 0x3F));
        } else if (tt_json_class[c] == 0 || (tt_json_class[c] == 'g' && style != TT_JSON_GO)) {
            if (tt_buf_putc(b, (char)c) < 0)
                return TT_ERR;
        } else {
            Py_ssize_t used; /* c < 0x80, so never the U+2028 case */
            if (tt_json_escape_at(b, s, i, n, style, &used) < 0)
                return TT_ERR;
        }
    }
    if (tt_buf_putc(b, '"') < 0)
        return TT_ERR;
    return TT_OK;
}

/* UTF-8 of an exact str (cached in the object by CPython, so no copy); TT_PASS for a subclass or
 * a str holding a lone surrogate (which has no UTF-8: Python decides what to do with it). */
static int tt_utf8_of(PyObject *v, const char **p, Py_ssize_t *n)
{
    if (!PyUnicode_CheckExact(v))
        return TT_PASS;
    *p = PyUnicode_AsUTF8AndSize(v, n);
    if (*p == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return TT_ERR;
        PyErr_Clear();
        return TT_PASS;
    }
    return TT_OK;
}

static int tt_json_str(tt_buf *b, PyObject *v, int style)
{
    const char *p;
    Py_ssize_t n;
    int r = tt_utf8_of(v, &p, &n);
    return r != TT_OK ? r : tt_json_utf8(b, p, n, style);
}

/* ------------------------------------------------------------------ value -> text */

/* str(v) for an exact int; ints beyond 64 bits go back to Python (rare, and slow anyway). */
static int tt_text_int(tt_buf *b, PyObject *v)
{
    if (!PyLong_CheckExact(v))
        return TT_PASS;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return TT_ERR;
    if (!overflow)
        return tt_buf_put_i64(b, x) < 0 ? TT_ERR : TT_OK;
    if (overflow < 0)
        return TT_PASS;
    /* BIGINT UNSIGNED reaches 2**64-1 */
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return TT_ERR;
        PyErr_Clear();
        return TT_PASS;
    }
    return tt_buf_put_u64(b, u) < 0 ? TT_ERR : TT_OK;
}

static int tt_text_str(tt_buf *b, PyObject *v)
{
    const char *p;
    Py_ssize_t n;
    int r = tt_utf8_of(v, &p, &n);
    if (r != TT_OK)
        return r;
    return tt_buf_put(b, p, n) < 0 ? TT_ERR : TT_OK;
}

static int tt_is_digits(const char *s, Py_ssize_t n)
{
    if (n <= 0)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/* str(d) is the text exactly when it has `scale` fractional digits and no exponent (then it
 * equals format(d, "f")): the check tidb.inline_text_expr makes. NaN/Infinity never pass. */
static int tt_text_decimal(tt_buf *b, PyObject *v, int scale)
{
    if (scale < 0 || Py_TYPE(v) != (PyTypeObject *)tt_decimal_type)
        return TT_PASS;
    PyObject *s = PyObject_Str(v);
    if (s == NULL)
        return TT_ERR;
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(s, &n);
    int r = TT_ERR;
    if (p != NULL) {
        int ok;
        if (scale == 0)
            ok = tt_is_digits(p, n) || (n > 1 && p[0] == '-' && tt_is_digits(p + 1, n - 1));
        else
            ok = n >= (Py_ssize_t)scale + 1 && p[n - scale - 1] == '.' && memchr(p, 'E', (size_t)n) == NULL;
        r = !ok ? TT_PASS : tt_buf_put(b, p, n) < 0 ? TT_ERR : TT_OK;
    }
    Py_DECREF(s);
    return r;
}

/* microseconds per unit of the last digit of an fsp-digit fraction */
static const int tt_frac_unit[7] = {1000000, 100000, 10000, 1000, 100, 10, 1};

/* "." + the first `fsp` (1..6) of the six microsecond digits */
static int tt_put_fraction(tt_buf *b, int us, int fsp)
{
    if (tt_buf_putc(b, '.') < 0)
        return -1;
    return tt_buf_put_padded(b, (unsigned long long)(us / tt_frac_unit[fsp]), fsp);
}

/* The fraction rule shared by DATETIME and TIME: fsp -1 (None) writes six digits when non-zero;
 * fsp 0..6 pads to fsp digits and passes a value with finer digits than fsp (Python raises).
 * Callers check the pass case before writing anything else. */
static int tt_fraction(tt_buf *b, int us, int fsp)
{
    if (fsp < 0)
        return us == 0 ? TT_OK : tt_put_fraction(b, us, 6) < 0 ? TT_ERR : TT_OK;
    if (fsp > 6 || us % tt_frac_unit[fsp] != 0)
        return TT_PASS;
    if (fsp == 0)
        return TT_OK;
    return tt_put_fraction(b, us, fsp) < 0 ? TT_ERR : TT_OK;
}

static int tt_put_ymd(tt_buf *b, int y, int m, int d)
{
    if (tt_buf_put_padded(b, (unsigned long long)y, 4) < 0 || tt_buf_putc(b, '-') < 0
        || tt_buf_put_padded(b, (unsigned long long)m, 2) < 0 || tt_buf_putc(b, '-') < 0
        || tt_buf_put_padded(b, (unsigned long long)d, 2) < 0)
        return -1;
    return 0;
}

static int tt_put_hms(tt_buf *b, int h, int m, int s)
{
    if (tt_buf_put_padded(b, (unsigned long long)h, 2) < 0 || tt_buf_putc(b, ':') < 0
        || tt_buf_put_padded(b, (unsigned long long)m, 2) < 0 || tt_buf_putc(b, ':') < 0
        || tt_buf_put_padded(b, (unsigned long long)s, 2) < 0)
        return -1;
    return 0;
}

/* `YYYY-MM-DD HH:MM:SS[.f]` for a naive exact datetime (format_datetime's text). */
static int tt_text_datetime(tt_buf *b, PyObject *v, int fsp)
{
    if (!PyDateTime_CheckExact(v) || PyDateTime_DATE_GET_TZINFO(v) != Py_None || fsp > 6)
        return TT_PASS;
    int us = PyDateTime_DATE_GET_MICROSECOND(v);
    /* decide before writing anything: TT_PASS must leave the buffer as it was */
    if (fsp >= 0 && us % tt_frac_unit[fsp] != 0)
        return TT_PASS;
    if (tt_put_ymd(b, PyDateTime_GET_YEAR(v), PyDateTime_GET_MONTH(v), PyDateTime_GET_DAY(v)) < 0
        || tt_buf_putc(b, ' ') < 0
        || tt_put_hms(b, PyDateTime_DATE_GET_HOUR(v), PyDateTime_DATE_GET_MINUTE(v),
                      PyDateTime_DATE_GET_SECOND(v)) < 0)
        return TT_ERR;
    return tt_fraction(b, us, fsp) == TT_ERR ? TT_ERR : TT_OK;
}

static int tt_text_date(tt_buf *b, PyObject *v)
{
    if (!PyDate_CheckExact(v))
        return TT_PASS;
    return tt_put_ymd(b, PyDateTime_GET_YEAR(v), PyDateTime_GET_MONTH(v), PyDateTime_GET_DAY(v)) < 0
        ? TT_ERR : TT_OK;
}

/* `[-]HH:MM:SS[.f]` for an exact timedelta (format_time's text; hours may exceed 24). */
static int tt_text_time(tt_buf *b, PyObject *v, int fsp)
{
    if (!PyDelta_CheckExact(v) || fsp > 6)
        return TT_PASS;
    /* whole seconds fit in 64 bits (|days| <= 999999999), microseconds of the total may not:
     * keep them apart. timedelta normalises to 0 <= seconds < 86400, 0 <= microseconds < 10**6. */
    long long whole = (long long)PyDateTime_DELTA_GET_DAYS(v) * 86400 + PyDateTime_DELTA_GET_SECONDS(v);
    int us = PyDateTime_DELTA_GET_MICROSECONDS(v);
    int negative = whole < 0;
    unsigned long long secs;
    if (!negative)
        secs = (unsigned long long)whole;
    else if (us == 0)
        secs = 0ULL - (unsigned long long)whole;
    else { /* -(whole s + us) = (-whole - 1) s + (10**6 - us) */
        secs = 0ULL - (unsigned long long)whole - 1;
        us = 1000000 - us;
    }
    if (fsp >= 0 && us % tt_frac_unit[fsp] != 0)
        return TT_PASS;
    unsigned long long h = secs / 3600;
    if (negative && tt_buf_putc(b, '-') < 0)
        return TT_ERR;
    /* f"{h:02d}": at least two digits */
    if ((h < 10 ? tt_buf_put_padded(b, h, 2) : tt_buf_put_u64(b, h)) < 0 || tt_buf_putc(b, ':') < 0
        || tt_buf_put_padded(b, (secs / 60) % 60, 2) < 0 || tt_buf_putc(b, ':') < 0
        || tt_buf_put_padded(b, secs % 60, 2) < 0)
        return TT_ERR;
    return tt_fraction(b, us, fsp) == TT_ERR ? TT_ERR : TT_OK;
}

/* repr(v) (shortest round-trip digits), or NULL with an exception; free with PyMem_Free. */
static char *tt_float_repr(double d)
{
    return PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
}

/* repr without a trailing ".0", when repr has no exponent and the value is finite. */
static int tt_put_repr_trimmed(tt_buf *b, double d, int allow_exponent_pass)
{
    char *r = tt_float_repr(d);
    if (r == NULL)
        return TT_ERR;
    size_t n = strlen(r);
    int res;
    if (allow_exponent_pass && (strchr(r, 'e') != NULL || strchr(r, 'n') != NULL))
        res = TT_PASS;
    else {
        if (n >= 2 && r[n - 2] == '.' && r[n - 1] == '0')
            n -= 2;
        res = tt_buf_put(b, r, (Py_ssize_t)n) < 0 ? TT_ERR : TT_OK;
    }
    PyMem_Free(r);
    return res;
}

/* format_float (Go's FormatFloat 'f', -1) where repr has no exponent; nan/inf/exponent pass. */
static int tt_text_float(tt_buf *b, PyObject *v)
{
    if (!PyFloat_CheckExact(v))
        return TT_PASS;
    return tt_put_repr_trimmed(b, PyFloat_AS_DOUBLE(v), 1);
}

/* format_go_float (Go's %v, TiCDC's CSV) where it prints no exponent: 1e-4 <= |v| < 1e6. */
static int tt_text_go_float(tt_buf *b, PyObject *v)
{
    if (!PyFloat_CheckExact(v))
        return TT_PASS;
    double d = PyFloat_AS_DOUBLE(v);
    if (!((1e-4 <= d && d < 1e6) || (-1e6 < d && d <= -1e-4)))
        return TT_PASS;
    return tt_put_repr_trimmed(b, d, 0);
}

static int tt_text_bool(tt_buf *b, PyObject *v)
{
    if (!PyBool_Check(v))
        return TT_PASS;
    return tt_buf_putc(b, v == Py_True ? '1' : '0') < 0 ? TT_ERR : TT_OK;
}

static int tt_text_of(tt_buf *b, int kind, PyObject *v, int param)
{
    switch (kind) {
    case TT_K_INT: return tt_text_int(b, v);
    case TT_K_STR: return tt_text_str(b, v);
    case TT_K_DECIMAL: return tt_text_decimal(b, v, param);
    case TT_K_DATETIME: return tt_text_datetime(b, v, param);
    case TT_K_DATE: return tt_text_date(b, v);
    case TT_K_TIME: return tt_text_time(b, v, param);
    case TT_K_FLOAT: return tt_text_float(b, v);
    case TT_K_GO_FLOAT: return tt_text_go_float(b, v);
    case TT_K_BOOL: return tt_text_bool(b, v);
    default: return TT_PASS;
    }
}

/* ------------------------------------------------------------------ added for the JSON-form kernel
 *
 *   int  tt_buf_put_b64(tt_buf *, const unsigned char *, Py_ssize_t n)  standard base64, padded
 *        (binascii.b2a_base64(data, newline=False)); no quotes
 *   char *tt_b64_write(char *o, const unsigned char *, Py_ssize_t n)   the same into reserved memory,
 *        without the GIL (after tt_b64_fill_pairs)
 */

static const char tt_b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Two letters per 12 bits: filled on first use (idempotent, under the GIL), read-only after. */
static unsigned short tt_b64_pairs[4096];
static int tt_b64_pairs_ready = 0;

static void tt_b64_fill_pairs(void)
{
    for (unsigned v = 0; v < 4096; v++) {
        char two[2] = {tt_b64_alphabet[v >> 6], tt_b64_alphabet[v & 63]};
        memcpy(&tt_b64_pairs[v], two, 2);
    }
    tt_b64_pairs_ready = 1;
}

/* Base64 of s[0..n) written to `o`, which has room for ((n + 2) / 3) * 4 bytes; returns the end.
 * 3 input bytes -> 4 letters (two table reads of 12 bits each); the tail (1 or 2 bytes) padded
 * with '='. Touches no Python object and allocates nothing, so it may run with the GIL released
 * (_jsonform's dumps_wire); the caller runs tt_b64_fill_pairs() first, with the GIL held. */
static char *tt_b64_write(char *o, const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned v = ((unsigned)s[i] << 16) | ((unsigned)s[i + 1] << 8) | s[i + 2];
        memcpy(o, &tt_b64_pairs[v >> 12], 2);
        memcpy(o + 2, &tt_b64_pairs[v & 4095], 2);
        o += 4;
    }
    if (i < n) {
        unsigned v = (unsigned)s[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)s[i + 1] << 8;
        o[0] = tt_b64_alphabet[v >> 18];
        o[1] = tt_b64_alphabet[(v >> 12) & 63];
        o[2] = i + 1 < n ? tt_b64_alphabet[(v >> 6) & 63] : '=';
        o[3] = '=';
        o += 4;
    }
    return o;
}

/* tt_b64_write into the buffer: the room is reserved once, so the loop stores without bounds checks. */
static int tt_buf_put_b64(tt_buf *b, const unsigned char *s, Py_ssize_t n)
{
    if (n > (PY_SSIZE_T_MAX / 4) * 3 - 3) {
        PyErr_NoMemory();
        return -1;
    }
    if (!tt_b64_pairs_ready)
        tt_b64_fill_pairs();
    Py_ssize_t out_len = ((n + 2) / 3) * 4;
    if (tt_buf_reserve(b, out_len) < 0)
        return -1;
    tt_b64_write(b->data + b->len, s, n);
    b->len += out_len;
    return 0;
}

#endif /* CDCFLOW_TIDBTEXT_H */
