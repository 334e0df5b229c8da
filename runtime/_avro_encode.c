/* _avro_encode: native Python values -> Avro binary, one compiled plan per schema.
 *
 * Why: Codec.encode (cdcflow.avro_values) runs a generated Python writer per record that
 * checks each value strictly and appends small byte strings to a list; for the flat rows CDC
 * moves, that interpreter work is most of the standalone host's to_wire cost. This kernel
 * walks a plan (built once in Python from the codec's node tree, see
 * avro_values._encode_plan) together with the value and writes the same bytes the generated
 * writer writes into one growable buffer.
 *
 * Contract: Plan(nodes, root, fallback).encode(value) returns the bytes, or HAND_BACK when it
 * does not decide (calling the plan, plan(value), returns fallback(value) then). The kernel
 * decides only values it is sure of: exact types (bool is not an int, a str subclass is not a
 * str), ints within the field's range, Decimals whose exponent and digit count fit, naive
 * datetimes, strs without lone surrogates. Anything else, a value nested deeper than
 * MAX_DEPTH, or a Python-level failure while looking at the value, is handed back, and the
 * Python path writes the same bytes or raises the typed error with its path. Only
 * MemoryError-class failures of the kernel's own allocations propagate as exceptions.
 *
 * Every encode_* step answers one of: OK (written), NO (the value certainly is not of this
 * type: the strict Python check refuses it, so a union tries its next branch), PASS (not
 * sure: hand the whole value back) or ERR (an exception is set).
 *
 * Plan nodes (a tuple of tuples; children are indexes into that tuple, so recursive schemas
 * are plain data without reference cycles):
 *   (K_NULL,) (K_BOOLEAN,) (K_INT,) (K_LONG,) (K_FLOAT,) (K_DOUBLE,) (K_BYTES,) (K_STRING,)
 *   (K_DECIMAL_TEXT,) (K_DATE,) (K_DATETIME,) (K_TIME,)
 *   (K_BIGINT, precision, limit)    limit: 10**precision (an int), or None for no limit
 *   (K_DECIMAL, precision, scale)
 *   (K_ENUM, index_of)              index_of: dict symbol -> its index
 *   (K_FIXED, size)
 *   (K_RECORD, keys, children)      keys: the native field names, in schema order
 *   (K_ARRAY, item) (K_MAP, value)
 *   (K_UNION, branch_numbers, children)  in the order branches are tried (the generated
 *        writer's: scalar branches first, then containers); branch_numbers are what is written
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "plantuple.h"
#include "tidbtext.h"

enum {
    K_NULL = 0, K_BOOLEAN, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_BYTES, K_STRING, K_BIGINT, K_DECIMAL,
    K_DECIMAL_TEXT, K_DATE, K_DATETIME, K_TIME, K_ENUM, K_FIXED, K_RECORD, K_ARRAY, K_MAP, K_UNION,
    K_COUNT
};

enum { OK = 0, NO = 1, PASS = 2, ERR = -1 };

/* Nesting the kernel follows before handing back (keeps the C stack small). */
#define MAX_DEPTH 64
/* Scratch bytes a plan keeps between calls; a larger buffer (a 1 MiB value) is freed after. */
#define SCRATCH_KEEP (64 * 1024)

#define US_PER_SECOND 1000000LL
#define US_PER_DAY 86400000000LL
/* |timedelta.days| up to which days * US_PER_DAY plus a day cannot overflow int64 */
#define SAFE_DELTA_DAYS 106751990LL
/* digits an int64 always holds: 10**18 - 1 < 2**63 */
#define INT64_DIGITS 18

/* The one sentinel: "not decided here, ask the Python path". Set at module init. */
static PyObject *hand_back = NULL;

typedef struct {
    int kind;
    int precision, scale;     /* K_DECIMAL; K_BIGINT: precision (<= 0: no limit) */
    uint64_t limit64;         /* K_BIGINT with 1 <= precision <= 19: 10**precision */
    Py_ssize_t size;          /* K_FIXED: byte count */
    Py_ssize_t count;         /* K_RECORD fields, K_UNION branches */
    Py_ssize_t *children;     /* K_RECORD fields, K_UNION branches; K_ARRAY / K_MAP: children[0] */
    int64_t *numbers;         /* K_UNION: the branch number written for each child */
    PyObject *keys;           /* borrowed from the plan tuple: K_RECORD keys */
    PyObject *index_of;       /* borrowed: K_ENUM symbol -> index dict */
    PyObject *limit;          /* borrowed: K_BIGINT 10**precision, or None */
} PlanNode;

typedef struct {
    PyObject_HEAD
    PyObject *source;         /* the nodes tuple: keeps every borrowed object above alive */
    PyObject *fallback;       /* plan(value) calls fallback(value) where encode(value) hands back */
    vectorcallfunc vectorcall;
    PlanNode *nodes;
    Py_ssize_t n_nodes;
    Py_ssize_t root;
    tt_buf scratch;           /* reused output buffer (no malloc per record) */
    int scratch_busy;         /* set while an encode writes into scratch (re-entry gets its own) */
} Plan;

typedef struct {
    const Plan *plan;
    tt_buf *out;
    int depth;
} Writer;

/* ------------------------------------------------------------------------------------------ */
/* writing                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Unsigned base-128 varint (at most 10 bytes for 64 bits). */
static inline int put_uvarint(tt_buf *b, uint64_t z)
{
    if (tt_buf_reserve(b, 10) < 0)
        return ERR;
    unsigned char *p = (unsigned char *)b->data + b->len;
    Py_ssize_t n = 0;
    while (z >= 0x80) {
        p[n++] = (unsigned char)(z | 0x80);
        z >>= 7;
    }
    p[n++] = (unsigned char)z;
    b->len += n;
    return OK;
}

/* Avro long: the zig-zag of a signed 64-bit value as a varint. */
static inline int put_long(tt_buf *b, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (v < 0 ? ~(uint64_t)0 : 0);
    return put_uvarint(b, z);
}

static inline int put_span(tt_buf *b, const char *s, Py_ssize_t n)
{
    if (put_long(b, (int64_t)n) < 0 || tt_buf_put(b, s, n) < 0)
        return ERR;
    return OK;
}

/* After a Python-level failure while looking at a value: the kernel's own allocation failures
 * propagate; anything else is the Python path's to meet and name (PASS). */
static int pass_on_python_error(void)
{
    if (PyErr_ExceptionMatches(PyExc_MemoryError))
        return ERR;
    PyErr_Clear();
    return PASS;
}

/* The big-endian two's complement of ``v`` in exactly ``n`` bytes (which hold it). */
static void put_be64(unsigned char *p, uint64_t u, Py_ssize_t n)
{
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        p[i] = (unsigned char)u;
        u >>= 8;
    }
}

static inline int bit_length64(uint64_t u)
{
    int bits = 0;
    while (u) {
        bits++;
        u >>= 1;
    }
    return bits;
}

/* Length-prefixed big-endian two's complement of the int ``v`` in ``n`` bytes (which hold it). */
static int put_int_bytes(tt_buf *b, PyObject *v, Py_ssize_t n)
{
    if (put_long(b, (int64_t)n) < 0 || tt_buf_reserve(b, n) < 0)
        return ERR;
    unsigned char *p = (unsigned char *)b->data + b->len;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyLong_AsNativeBytes(v, p, n, Py_ASNATIVEBYTES_BIG_ENDIAN) < 0)
        return pass_on_python_error();
#else
    if (_PyLong_AsByteArray((PyLongObject *)v, p, (size_t)n, 0, 1) < 0)
        return pass_on_python_error();
#endif
    b->len += n;
    return OK;
}

/* Bits of |v| for an int beyond 64 bits (the C API's count; -1 with an exception set). */
static int64_t abs_bits(PyObject *v)
{
    size_t bits = _PyLong_NumBits(v);
    if (bits == (size_t)-1 && PyErr_Occurred())
        return -1;
    return (int64_t)bits;
}

/* ------------------------------------------------------------------------------------------ */
/* scalars                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* The int ``v`` as a signed 64-bit value: OK, NO (beyond 64 bits), or a failure. */
static int as_int64(PyObject *v, int64_t *out)
{
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return pass_on_python_error();
    if (overflow)
        return NO;
    *out = x;
    return OK;
}

static int encode_ranged_int(tt_buf *b, PyObject *v, int64_t min, int64_t max)
{
    int64_t x;
    if (!PyLong_CheckExact(v))
        return NO;
    int r = as_int64(v, &x);
    if (r != OK)
        return r;
    if (x < min || x > max)
        return NO;
    return put_long(b, x);
}

/* BIGINT beyond 64 bits (wide DECIMAL(p, 0) ints): Python's int does the arithmetic. */
static int encode_wide_bigint(tt_buf *b, const PlanNode *node, PyObject *v, int sign)
{
    if (node->precision > 0 && node->precision <= INT64_DIGITS)
        return NO;  /* |v| >= 2**63 > 10**18 >= the limit */
    /* |v| for the limit; ~v = |v| - 1 for a negative v's byte count (fewer bits only when |v|
     * is a power of two: -128 fits one byte) */
    PyObject *other = sign > 0 ? Py_NewRef(v) : PyNumber_Invert(v);
    if (other == NULL)
        return pass_on_python_error();
    int r = OK;
    if (node->limit != Py_None) {
        PyObject *magnitude = sign > 0 ? Py_NewRef(v) : PyNumber_Negative(v);
        int below = magnitude == NULL ? -1 : PyObject_RichCompareBool(magnitude, node->limit, Py_LT);
        Py_XDECREF(magnitude);
        r = below < 0 ? pass_on_python_error() : below ? OK : NO;
    }
    if (r == OK) {
        int64_t bits = abs_bits(other);
        r = bits < 0 ? pass_on_python_error() : put_int_bytes(b, v, (Py_ssize_t)(bits / 8 + 1));
    }
    Py_DECREF(other);
    return r;
}

/* BIGINT: bytes of the minimal two's complement (at least one byte), the form
 * int.to_bytes((v + (v < 0)).bit_length() // 8 + 1, "big", signed=True) gives; the value must
 * lie strictly within +-10**precision when the schema has a precision. */
static int encode_bigint(tt_buf *b, const PlanNode *node, PyObject *v)
{
    if (!PyLong_CheckExact(v))
        return NO;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return pass_on_python_error();
    if (!overflow) {
        uint64_t magnitude = x < 0 ? 0ULL - (uint64_t)x : (uint64_t)x;
        if (node->limit64 != 0 && magnitude >= node->limit64)
            return NO;
        unsigned char raw[8];
        Py_ssize_t n = bit_length64(x < 0 ? ~(uint64_t)x : (uint64_t)x) / 8 + 1;
        put_be64(raw, (uint64_t)x, n);
        return put_span(b, (const char *)raw, n);
    }
    if (overflow > 0) {  /* BIGINT UNSIGNED's upper half: 2**63 .. 2**64-1, nine bytes */
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (u != (unsigned long long)-1 || !PyErr_Occurred()) {
            if (node->limit64 != 0 && u >= node->limit64)
                return NO;
            unsigned char raw[9] = {0};
            put_be64(raw + 1, u, 8);
            return put_span(b, (const char *)raw, 9);
        }
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return pass_on_python_error();
        PyErr_Clear();
    }
    return encode_wide_bigint(b, node, v, overflow);
}

/* What str(Decimal) says of a finite value: sign, the coefficient's digits (leading zeros
 * dropped, "0" for zero) and the exponent, as Decimal.as_tuple() would. */
typedef struct {
    int negative;
    const char *text;         /* str(value), UTF-8 */
    Py_ssize_t text_len;
    Py_ssize_t n_digits;      /* as len(as_tuple().digits) */
    int64_t exponent;
    int is_zero;
} DecimalParts;

/* Parses "[-]digits[.digits][E[+-]digits]"; 0, or -1 for anything else: NaN and Infinity
 * (is_special tells those apart), an exponent beyond 18 digits, a lower-case "e" (a context
 * with capitals=0), which the Python path then decides. */
static int decimal_parts(const char *s, Py_ssize_t n, DecimalParts *d)
{
    Py_ssize_t i = 0, fraction = 0, significant = 0;
    int seen_point = 0, seen_digit = 0;
    d->negative = n > 0 && s[0] == '-';
    i = d->negative;
    for (; i < n && s[i] != 'E'; i++) {
        char c = s[i];
        if (c == '.' && !seen_point) {
            seen_point = 1;
        } else if (c >= '0' && c <= '9') {
            seen_digit = 1;
            fraction += seen_point;
            if (c != '0' || significant > 0)
                significant++;
        } else {
            return -1;
        }
    }
    if (!seen_digit)
        return -1;
    int64_t e = 0;
    if (i < n) {  /* 'E', a sign, then at most 18 digits */
        int e_negative = 0, e_digits = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            e_negative = s[i++] == '-';
        for (; i < n; i++, e_digits++) {
            if (s[i] < '0' || s[i] > '9' || e_digits >= 18)
                return -1;
            e = e * 10 + (s[i] - '0');
        }
        if (e_digits == 0)
            return -1;
        if (e_negative)
            e = -e;
    }
    d->is_zero = significant == 0;
    d->n_digits = significant > 0 ? significant : 1;
    d->exponent = e - fraction;
    return 0;
}

/* NaN, sNaN, Infinity (signed or not): their as_tuple() exponent is a letter, never a scale. */
static int is_special(const char *s, Py_ssize_t n)
{
    Py_ssize_t i = n > 0 && s[0] == '-';
    return i < n && (s[i] == 'N' || s[i] == 's' || s[i] == 'I');
}

/* The coefficient's digits (sign included) as a NUL-terminated string, for int(). */
static char *coefficient_text(const DecimalParts *d)
{
    char *out = PyMem_Malloc((size_t)d->n_digits + 2);
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_ssize_t k = 0;
    if (d->negative)
        out[k++] = '-';
    int started = 0;
    for (Py_ssize_t i = d->negative; i < d->text_len && d->text[i] != 'E'; i++) {
        char c = d->text[i];
        if (c == '.' || (c == '0' && !started))
            continue;
        started = 1;
        out[k++] = c;
    }
    if (!started)
        out[k++] = '0';
    out[k] = '\0';
    return out;
}

/* Unscaled values of up to WIDE_DIGITS digits are converted here: 10**78 < 2**260, nine limbs. */
#define WIDE_DIGITS 78
#define WIDE_LIMBS 9

static const uint32_t pow10_u32[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000,
                                       1000000000};

/* limbs = limbs * mul + add (little-endian base 2**32); -1 if it would not fit (not expected). */
static int limbs_mul_add(uint32_t *limbs, int *used, uint32_t mul, uint32_t add)
{
    uint64_t carry = add;
    for (int i = 0; i < *used; i++) {
        uint64_t t = (uint64_t)limbs[i] * mul + carry;
        limbs[i] = (uint32_t)t;
        carry = t >> 32;
    }
    if (carry) {
        if (*used == WIDE_LIMBS)
            return -1;
        limbs[(*used)++] = (uint32_t)carry;
    }
    return 0;
}

/* The decimal's coefficient (sign included) as ((|u|.bit_length() + 8) // 8) bytes of big-endian
 * two's complement, length-prefixed: nine decimal digits at a time into base 2**32 limbs. */
static int put_wide_unscaled(tt_buf *b, const DecimalParts *d)
{
    uint32_t limbs[WIDE_LIMBS] = {0};
    int used = 1, chunk_digits = 0;
    uint32_t chunk = 0;
    for (Py_ssize_t i = d->negative; i < d->text_len && d->text[i] != 'E'; i++) {
        char c = d->text[i];
        if (c == '.')
            continue;
        chunk = chunk * 10 + (uint32_t)(c - '0');
        if (++chunk_digits == 9) {
            if (limbs_mul_add(limbs, &used, pow10_u32[9], chunk) < 0)
                return PASS;
            chunk = 0;
            chunk_digits = 0;
        }
    }
    if (chunk_digits > 0 && limbs_mul_add(limbs, &used, pow10_u32[chunk_digits], chunk) < 0)
        return PASS;
    while (used > 1 && limbs[used - 1] == 0)
        used--;
    Py_ssize_t n = (32 * (used - 1) + bit_length64(limbs[used - 1]) + 8) / 8;
    if (put_long(b, (int64_t)n) < 0 || tt_buf_reserve(b, n) < 0)
        return ERR;
    unsigned char *p = (unsigned char *)b->data + b->len;
    for (Py_ssize_t k = 0; k < n; k++) {  /* k counts bytes from the least significant */
        Py_ssize_t limb = k / 4;
        p[n - 1 - k] = limb < used ? (unsigned char)(limbs[limb] >> (8 * (k % 4))) : 0;
    }
    if (d->negative) {  /* two's complement: invert, add one */
        unsigned carry = 1;
        for (Py_ssize_t i = n - 1; i >= 0; i--) {
            unsigned sum = (unsigned char)~p[i] + carry;
            p[i] = (unsigned char)sum;
            carry = sum >> 8;
        }
    }
    b->len += n;
    return OK;
}

/* The same for coefficients wider than WIDE_DIGITS, through Python's int. */
static int put_huge_unscaled(tt_buf *b, const DecimalParts *d)
{
    char *digits = coefficient_text(d);
    if (digits == NULL)
        return ERR;
    PyObject *u = PyLong_FromString(digits, NULL, 10);
    PyMem_Free(digits);
    if (u == NULL)
        return pass_on_python_error();
    int64_t bits = abs_bits(u);
    int r = bits < 0 ? pass_on_python_error() : put_int_bytes(b, u, (Py_ssize_t)((bits + 8) / 8));
    Py_DECREF(u);
    return r;
}

/* DECIMAL(p, s) as bytes: the unscaled value in ((|u|.bit_length() + 8) // 8) bytes of big-endian
 * two's complement, the count the generated writer (and fastavro) uses. The value must be an
 * exact Decimal with exponent -s, at most p digits and no negative zero. */
static int encode_decimal(tt_buf *b, const PlanNode *node, PyObject *v)
{
    if (Py_TYPE(v) != (PyTypeObject *)tt_decimal_type)
        return NO;
    PyObject *text = PyObject_Str(v);
    if (text == NULL)
        return pass_on_python_error();
    DecimalParts d;
    d.text = PyUnicode_AsUTF8AndSize(text, &d.text_len);
    int r;
    if (d.text == NULL)
        r = pass_on_python_error();
    else if (decimal_parts(d.text, d.text_len, &d) < 0)
        r = is_special(d.text, d.text_len) ? NO : PASS;  /* the rest: a text form not expected here */
    else if (d.exponent != -(int64_t)node->scale || d.n_digits > node->precision || (d.negative && d.is_zero))
        r = NO;
    else if (d.n_digits <= INT64_DIGITS) {
        int64_t u = 0;
        for (Py_ssize_t i = d.negative; i < d.text_len && d.text[i] != 'E'; i++)
            if (d.text[i] >= '0' && d.text[i] <= '9')
                u = u * 10 + (d.text[i] - '0');
        if (d.negative)
            u = -u;
        unsigned char raw[8];
        Py_ssize_t n = (bit_length64(u < 0 ? 0ULL - (uint64_t)u : (uint64_t)u) + 8) / 8;
        put_be64(raw, (uint64_t)u, n);
        r = put_span(b, (const char *)raw, n);
    } else if (d.n_digits <= WIDE_DIGITS) {  /* DECIMAL(65, 30) and the like */
        r = put_wide_unscaled(b, &d);
    } else {  /* wider still: Python's int does the base conversion */
        r = put_huge_unscaled(b, &d);
    }
    Py_DECREF(text);
    return r;
}

static int encode_decimal_text(tt_buf *b, PyObject *v)
{
    if (Py_TYPE(v) != (PyTypeObject *)tt_decimal_type)
        return NO;
    PyObject *text = PyObject_Str(v);
    if (text == NULL)
        return pass_on_python_error();
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    int r = s == NULL ? pass_on_python_error() : put_span(b, s, n);
    Py_DECREF(text);
    return r;
}

/* UTF-8 of an exact str. ASCII strs hold it already; for others a temporary bytes, rather than
 * the UTF-8 copy CPython would otherwise cache inside the (record's) str for its lifetime. A lone
 * surrogate has no UTF-8: the Python path raises its error. */
static int encode_string(tt_buf *b, PyObject *v)
{
    if (!PyUnicode_CheckExact(v))
        return NO;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(v) < 0)  /* a legacy str made by the old C API: its form is built now */
        return pass_on_python_error();
#endif
    if (PyUnicode_IS_ASCII(v))
        return put_span(b, (const char *)PyUnicode_DATA(v), PyUnicode_GET_LENGTH(v));
    PyObject *utf8 = PyUnicode_AsUTF8String(v);
    if (utf8 == NULL)
        return pass_on_python_error();
    int r = put_span(b, PyBytes_AS_STRING(utf8), PyBytes_GET_SIZE(utf8));
    Py_DECREF(utf8);
    return r;
}

/* IEEE single: the value must survive the round trip to 32 bits (NaN always does). */
static int encode_float(tt_buf *b, PyObject *v)
{
    if (!PyFloat_CheckExact(v))
        return NO;
    double x = PyFloat_AS_DOUBLE(v);
    char raw[4];
    if (PyFloat_Pack4(x, raw, 1) < 0)
        return pass_on_python_error();  /* too large for 32 bits: Python raises its own error */
    if (x == x && PyFloat_Unpack4(raw, 1) != x)
        return NO;
    return tt_buf_put(b, raw, 4) < 0 ? ERR : OK;
}

static int encode_double(tt_buf *b, PyObject *v)
{
    if (!PyFloat_CheckExact(v))
        return NO;
    char raw[8];
    if (PyFloat_Pack8(PyFloat_AS_DOUBLE(v), raw, 1) < 0)
        return pass_on_python_error();
    return tt_buf_put(b, raw, 8) < 0 ? ERR : OK;
}

/* Days from 1970-01-01 to a proleptic Gregorian date (the year counted from March, so the
 * leap day ends it; 400-year cycles of 146097 days). */
static int64_t days_from_civil(int year, int month, int day)
{
    int64_t y = year - (month <= 2);
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t year_of_era = y - era * 400;
    int64_t day_of_year = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1;
    int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    return era * 146097 + day_of_era - 719468;
}

static int encode_date(tt_buf *b, PyObject *v)
{
    if (!PyDate_CheckExact(v))
        return NO;
    return put_long(b, days_from_civil(PyDateTime_GET_YEAR(v), PyDateTime_GET_MONTH(v), PyDateTime_GET_DAY(v)));
}

/* Naive datetime: microseconds since 1970-01-01 00:00 (fold plays no part in naive arithmetic). */
static int encode_datetime(tt_buf *b, PyObject *v)
{
    if (!PyDateTime_CheckExact(v) || PyDateTime_DATE_GET_TZINFO(v) != Py_None)
        return NO;
    int64_t days = days_from_civil(PyDateTime_GET_YEAR(v), PyDateTime_GET_MONTH(v), PyDateTime_GET_DAY(v));
    int64_t seconds = PyDateTime_DATE_GET_HOUR(v) * 3600LL + PyDateTime_DATE_GET_MINUTE(v) * 60LL
                      + PyDateTime_DATE_GET_SECOND(v);
    return put_long(b, days * US_PER_DAY + seconds * US_PER_SECOND + PyDateTime_DATE_GET_MICROSECOND(v));
}

/* TIME as signed microseconds (timedelta // 1µs); days beyond int64's reach go to Python. */
static int encode_time(tt_buf *b, PyObject *v)
{
    if (!PyDelta_CheckExact(v))
        return NO;
    int64_t days = PyDateTime_DELTA_GET_DAYS(v);
    if (days > SAFE_DELTA_DAYS || days < -SAFE_DELTA_DAYS)
        return PASS;
    return put_long(b, days * US_PER_DAY + PyDateTime_DELTA_GET_SECONDS(v) * US_PER_SECOND
                       + PyDateTime_DELTA_GET_MICROSECONDS(v));
}

static int encode_enum(tt_buf *b, const PlanNode *node, PyObject *v)
{
    if (!PyUnicode_CheckExact(v))
        return NO;
    PyObject *index = PyDict_GetItemWithError(node->index_of, v);
    if (index == NULL)
        return PyErr_Occurred() ? pass_on_python_error() : NO;
    int64_t i = 0;
    int r = as_int64(index, &i);
    return r == OK ? put_long(b, i) : r == NO ? PASS : r;
}

static int encode_fixed(tt_buf *b, const PlanNode *node, PyObject *v)
{
    if (!PyBytes_CheckExact(v) || PyBytes_GET_SIZE(v) != node->size)
        return NO;
    return tt_buf_put(b, PyBytes_AS_STRING(v), node->size) < 0 ? ERR : OK;
}

/* ------------------------------------------------------------------------------------------ */
/* containers                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static int encode_node(Writer *w, Py_ssize_t index, PyObject *v);

/* Field values are looked up by the native name and held while written: a lookup may run a
 * key's Python __eq__, which could change the dict. */
static int encode_record(Writer *w, const PlanNode *node, PyObject *v)
{
    if (!PyDict_CheckExact(v) || PyDict_GET_SIZE(v) != node->count)
        return NO;
    for (Py_ssize_t i = 0; i < node->count; i++) {
        PyObject *x = PyDict_GetItemWithError(v, PyTuple_GET_ITEM(node->keys, i));
        if (x == NULL)
            return PyErr_Occurred() ? pass_on_python_error() : NO;  /* a missing field */
        Py_INCREF(x);
        int r = encode_node(w, node->children[i], x);
        Py_DECREF(x);
        if (r != OK)
            return r;
    }
    return OK;
}

/* One block of ``n`` items, then the 0 that ends the array (an empty one is just the 0). */
static int encode_array(Writer *w, const PlanNode *node, PyObject *v)
{
    if (!PyList_CheckExact(v))
        return NO;
    Py_ssize_t n = PyList_GET_SIZE(v);
    if (n > 0 && put_long(w->out, (int64_t)n) < 0)
        return ERR;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_GET_SIZE(v) != n)
            return PASS;  /* changed while written */
        PyObject *x = Py_NewRef(PyList_GET_ITEM(v, i));
        int r = encode_node(w, node->children[0], x);
        Py_DECREF(x);
        if (r != OK)
            return r;
    }
    return tt_buf_putc(w->out, 0) < 0 ? ERR : OK;
}

static int encode_map(Writer *w, const PlanNode *node, PyObject *v)
{
    if (!PyDict_CheckExact(v))
        return NO;
    Py_ssize_t n = PyDict_GET_SIZE(v), pos = 0, written = 0;
    if (n > 0 && put_long(w->out, (int64_t)n) < 0)
        return ERR;
    PyObject *key, *x;
    while (PyDict_Next(v, &pos, &key, &x)) {
        if (!PyUnicode_CheckExact(key))
            return NO;
        Py_INCREF(key);
        Py_INCREF(x);
        int r = encode_string(w->out, key);
        if (r == OK)
            r = encode_node(w, node->children[0], x);
        Py_DECREF(key);
        Py_DECREF(x);
        if (r != OK)
            return r;
        written++;
    }
    if (written != n || PyDict_GET_SIZE(v) != n)
        return PASS;  /* changed while written */
    return tt_buf_putc(w->out, 0) < 0 ? ERR : OK;
}

/* The first branch (in the plan's order) that takes the value; a refusal deep inside a
 * container branch (NO) rolls its bytes back and tries the next, as the Python writer does. */
static int encode_union(Writer *w, const PlanNode *node, PyObject *v)
{
    Py_ssize_t mark = w->out->len;
    for (Py_ssize_t i = 0; i < node->count; i++) {
        if (put_long(w->out, node->numbers[i]) < 0)
            return ERR;
        int r = encode_node(w, node->children[i], v);
        if (r != NO)
            return r;
        w->out->len = mark;
    }
    return NO;
}

static int encode_node(Writer *w, Py_ssize_t index, PyObject *v)
{
    const PlanNode *node = &w->plan->nodes[index];
    tt_buf *b = w->out;
    switch (node->kind) {
    case K_NULL:
        return v == Py_None ? OK : NO;
    case K_BOOLEAN:
        if (!PyBool_Check(v))  /* bool cannot be subclassed: the check is exact */
            return NO;
        return tt_buf_putc(b, v == Py_True ? 1 : 0) < 0 ? ERR : OK;
    case K_INT:
        return encode_ranged_int(b, v, INT32_MIN, INT32_MAX);
    case K_LONG:
        return encode_ranged_int(b, v, INT64_MIN, INT64_MAX);
    case K_FLOAT:
        return encode_float(b, v);
    case K_DOUBLE:
        return encode_double(b, v);
    case K_BYTES:
        if (!PyBytes_CheckExact(v))
            return NO;
        return put_span(b, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    case K_STRING:
        return encode_string(b, v);
    case K_BIGINT:
        return encode_bigint(b, node, v);
    case K_DECIMAL:
        return encode_decimal(b, node, v);
    case K_DECIMAL_TEXT:
        return encode_decimal_text(b, v);
    case K_DATE:
        return encode_date(b, v);
    case K_DATETIME:
        return encode_datetime(b, v);
    case K_TIME:
        return encode_time(b, v);
    case K_ENUM:
        return encode_enum(b, node, v);
    case K_FIXED:
        return encode_fixed(b, node, v);
    case K_UNION:
        return encode_union(w, node, v);
    default:
        break;
    }
    /* containers: bounded nesting, so a deep (recursive) value cannot exhaust the C stack */
    if (w->depth >= MAX_DEPTH)
        return PASS;
    w->depth++;
    int r = node->kind == K_RECORD ? encode_record(w, node, v)
          : node->kind == K_ARRAY ? encode_array(w, node, v)
          : encode_map(w, node, v);
    w->depth--;
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Plan type                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* The bytes of value, or a new reference to hand_back. The plan's scratch buffer is reused
 * across calls; a call re-entered while it is in use (through a key's Python __eq__) writes
 * into a buffer of its own. */
static PyObject *plan_encode(Plan *plan, PyObject *value)
{
    tt_buf own, *out = &own;
    int use_scratch = !plan->scratch_busy;
    if (use_scratch) {
        if (plan->scratch.data == NULL && tt_buf_init(&plan->scratch, 256) < 0)
            return NULL;
        out = &plan->scratch;
        plan->scratch_busy = 1;
    } else if (tt_buf_init(&own, 256) < 0) {
        return NULL;
    }
    tt_buf_clear(out);
    Writer w = {plan, out, 0};
    int r = encode_node(&w, plan->root, value);
    PyObject *result = r == OK ? tt_buf_bytes(out) : r == ERR ? NULL : Py_NewRef(hand_back);
    if (use_scratch) {
        if (out->cap > SCRATCH_KEEP)  /* a huge value: do not keep its buffer */
            tt_buf_free(out);
        plan->scratch_busy = 0;
    } else {
        tt_buf_free(&own);
    }
    return result;
}

static PyObject *Plan_encode(PyObject *self, PyObject *value)
{
    return plan_encode((Plan *)self, value);
}

/* plan(value): the bytes, from the kernel or else from the fallback (which raises the typed
 * error). A vectorcall, so callers holding the plan pay no Python frame per record. */
static PyObject *Plan_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Plan *plan = (Plan *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Plan() takes exactly one argument, the value");
        return NULL;
    }
    PyObject *out = plan_encode(plan, args[0]);
    if (out != hand_back || plan->fallback == Py_None)
        return out;
    Py_DECREF(out);
    return PyObject_CallOneArg(plan->fallback, args[0]);
}

static int plan_bigint(PlanNode *node, PyObject *entry)
{
    long long precision;
    PyObject *limit;
    if (pt_int(entry, 1, INT_MIN, INT_MAX, &precision) < 0 || (limit = pt_item(entry, 2, NULL)) == NULL)
        return -1;
    if (precision > 0 ? !PyLong_CheckExact(limit) : limit != Py_None) {
        PyErr_Format(PyExc_TypeError, "plan node %R: the limit must be 10**precision, or None without one", entry);
        return -1;
    }
    node->precision = (int)precision;
    node->limit = limit;
    node->limit64 = 0;  /* no limit within 64 bits: 10**20 > 2**64 */
    if (precision > 0 && precision <= 19) {
        node->limit64 = 1;
        for (long long i = 0; i < precision; i++)
            node->limit64 *= 10;
    }
    return 0;
}

static int plan_union(PlanNode *node, PyObject *entry, Py_ssize_t n_nodes)
{
    PyObject *numbers, *children;
    if ((numbers = pt_item(entry, 1, &PyTuple_Type)) == NULL
        || (children = pt_item(entry, 2, &PyTuple_Type)) == NULL)
        return -1;
    if (PyTuple_GET_SIZE(numbers) != PyTuple_GET_SIZE(children)) {
        PyErr_Format(PyExc_ValueError, "plan node %R: branch numbers and children differ in length", entry);
        return -1;
    }
    if (pt_children(children, n_nodes, &node->children, &node->count) < 0)
        return -1;
    node->numbers = PyMem_Calloc(node->count > 0 ? (size_t)node->count : 1, sizeof(int64_t));
    if (node->numbers == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < node->count; i++) {
        long long v;
        if (pt_int(numbers, i, 0, INT64_MAX, &v) < 0)
            return -1;
        node->numbers[i] = v;
    }
    return 0;
}

static int plan_node(PlanNode *node, PyObject *entry, Py_ssize_t n_nodes)
{
    long long kind, a, b;
    PyObject *x, *y;
    if (!PyTuple_Check(entry)) {
        PyErr_SetString(PyExc_TypeError, "plan nodes must be tuples");
        return -1;
    }
    if (pt_int(entry, 0, 0, K_COUNT - 1, &kind) < 0)
        return -1;
    node->kind = (int)kind;
    switch (kind) {
    case K_BIGINT:
        return plan_bigint(node, entry);
    case K_DECIMAL:
        if (pt_int(entry, 1, 1, INT_MAX, &a) < 0 || pt_int(entry, 2, INT_MIN, INT_MAX, &b) < 0)
            return -1;
        node->precision = (int)a;
        node->scale = (int)b;
        return 0;
    case K_ENUM:
        if ((x = pt_item(entry, 1, &PyDict_Type)) == NULL)
            return -1;
        node->index_of = x;
        return 0;
    case K_FIXED:
        if (pt_int(entry, 1, 0, PY_SSIZE_T_MAX, &a) < 0)
            return -1;
        node->size = (Py_ssize_t)a;
        return 0;
    case K_RECORD:
        if ((x = pt_item(entry, 1, &PyTuple_Type)) == NULL || (y = pt_item(entry, 2, &PyTuple_Type)) == NULL)
            return -1;
        if (PyTuple_GET_SIZE(x) != PyTuple_GET_SIZE(y)) {
            PyErr_Format(PyExc_ValueError, "plan node %R: keys and children differ in length", entry);
            return -1;
        }
        node->keys = x;
        return pt_children(y, n_nodes, &node->children, &node->count);
    case K_UNION:
        return plan_union(node, entry, n_nodes);
    case K_ARRAY:
    case K_MAP:  /* one child, the item / value node, at item 1 */
        return pt_one_child(entry, 1, n_nodes, &node->children, &node->count);
    default:
        return 0;
    }
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
        for (Py_ssize_t i = 0; i < plan->n_nodes; i++) {
            PyMem_Free(plan->nodes[i].children);
            PyMem_Free(plan->nodes[i].numbers);
        }
        PyMem_Free(plan->nodes);
    }
    tt_buf_free(&plan->scratch);
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
    Plan *plan = (Plan *)type->tp_alloc(type, 0);  /* zeroed: scratch starts empty */
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
    return (PyObject *)plan;
}

static PyMethodDef Plan_methods[] = {
    {"encode", Plan_encode, METH_O,
     "encode(value) -> the Avro bytes, or HAND_BACK when the Python path must decide"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow._avro_encode.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_dealloc = Plan_dealloc,
    .tp_vectorcall_offset = offsetof(Plan, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = Plan_traverse,
    .tp_clear = Plan_clear,
    .tp_doc = "Plan(nodes: tuple, root: int, fallback=None): one Avro schema, compiled for encode.\n\n"
              "plan(value) returns the bytes (fallback(value) where the kernel hands back);\n"
              "plan.encode(value) returns the bytes or HAND_BACK.",
    .tp_methods = Plan_methods,
    .tp_new = Plan_new,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_avro_encode",
    "Avro binary encode kernel for cdcflow.avro_values.Codec (see runtime/_avro_encode.c).", -1, NULL,
};

PyMODINIT_FUNC PyInit__avro_encode(void)
{
    if (tt_init() < 0)  /* the datetime C API and decimal.Decimal */
        return NULL;
    if (PyType_Ready(&PlanType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (hand_back == NULL) {
        /* a plain object: no encoded value (always bytes) can be it */
        hand_back = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
        if (hand_back == NULL)
            goto fail;
    }
    static const struct { const char *name; long value; } constants[] = {
        {"K_NULL", K_NULL}, {"K_BOOLEAN", K_BOOLEAN}, {"K_INT", K_INT}, {"K_LONG", K_LONG},
        {"K_FLOAT", K_FLOAT}, {"K_DOUBLE", K_DOUBLE}, {"K_BYTES", K_BYTES}, {"K_STRING", K_STRING},
        {"K_BIGINT", K_BIGINT}, {"K_DECIMAL", K_DECIMAL}, {"K_DECIMAL_TEXT", K_DECIMAL_TEXT},
        {"K_DATE", K_DATE}, {"K_DATETIME", K_DATETIME}, {"K_TIME", K_TIME}, {"K_ENUM", K_ENUM},
        {"K_FIXED", K_FIXED}, {"K_RECORD", K_RECORD}, {"K_ARRAY", K_ARRAY}, {"K_MAP", K_MAP},
        {"K_UNION", K_UNION}, {"MAX_DEPTH", MAX_DEPTH},
    };
    if (PyModule_AddObjectRef(m, "HAND_BACK", hand_back) < 0
        || PyModule_AddObjectRef(m, "Plan", (PyObject *)&PlanType) < 0)
        goto fail;
    for (size_t i = 0; i < sizeof constants / sizeof constants[0]; i++)
        if (PyModule_AddIntConstant(m, constants[i].name, constants[i].value) < 0)
            goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
