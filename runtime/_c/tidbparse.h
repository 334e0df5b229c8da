/* tidbparse.h: TiDB text forms -> Python values, fast path only (owner: helper "csv").
 *
 * The Python parsers (connectors/ticdc/tidb.py parse_*, and int / float / decimal.Decimal as the codecs
 * call them) stay the reference. Each function here takes the common, canonical shape of a
 * value's text and builds exactly what the Python parser returns for it; for any other text
 * (signs, spaces, underscores, exponents where not listed, non-ASCII digits, out-of-range
 * fields, too many digits) it answers "not handled" and the caller hands the text to Python,
 * which returns the value or raises the error with its context.
 *
 * Stable API (every function is static; the including module compiles its own copy):
 *
 *   int tidbparse_init(void);
 *       Once, in the module's init: imports the datetime C API and decimal.Decimal.
 *       0 on success, -1 with an exception set.
 *
 *   Every parser below: (const char *s, Py_ssize_t n, ..., PyObject **out) and returns
 *       TIDBPARSE_OK (1)        *out is a new reference to the value;
 *       TIDBPARSE_NOT_HANDLED (0)  *out untouched, no exception: give the text to Python;
 *       TIDBPARSE_ERROR (-1)    an exception is set (MemoryError-class failures only).
 *   s need not be NUL-terminated; it is UTF-8 (any byte >= 0x80 makes it "not handled").
 *
 *   tidbparse_int(s, n, out)       -?[0-9]+ within -2**63 .. 2**64-1        -> int   (as int(text))
 *   tidbparse_float(s, n, out)     -?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?, at most 64 bytes
 *                                                                          -> float (as float(text))
 *   tidbparse_decimal(s, n, out)   -?[0-9]+(\.[0-9]+)?, at most 200 digits  -> Decimal(text)
 *   tidbparse_date(s, n, out)      YYYY-MM-DD, a real date, year >= 1        -> date  (as tidb.parse_date)
 *   tidbparse_datetime(s, n, out)  YYYY-MM-DD HH:MM:SS[.f{1,6}], a real date and time
 *                                                                          -> datetime (as tidb.parse_datetime)
 *   tidbparse_time(s, n, max_us, out)  -?HH[H]:MM:SS[.f{1,6}] (minutes, seconds 00..59); with
 *                                  max_us >= 0 a magnitude above it is "not handled"
 *                                                                          -> timedelta (as tidb.parse_time)
 *
 * Why "not handled" instead of errors: C never decides what a bad value means; the Python path
 * raises the typed error naming the file, line and column.
 */
#ifndef CDCFLOW_TIDBPARSE_H
#define CDCFLOW_TIDBPARSE_H

#include <Python.h>
#include <datetime.h>
#include <stdint.h>
#include <string.h>

#define TIDBPARSE_OK 1
#define TIDBPARSE_NOT_HANDLED 0
#define TIDBPARSE_ERROR (-1)

/* decimal.Decimal, fetched once at module init (a constant afterwards). */
static PyObject *tidbparse_decimal_type = NULL;

static int tidbparse_init(void)
{
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL)
        return -1;
    if (tidbparse_decimal_type == NULL) {
        PyObject *mod = PyImport_ImportModule("decimal");
        if (mod == NULL)
            return -1;
        tidbparse_decimal_type = PyObject_GetAttrString(mod, "Decimal");
        Py_DECREF(mod);
        if (tidbparse_decimal_type == NULL)
            return -1;
    }
    return 0;
}

static inline int tidbparse_is_digit(char c) { return c >= '0' && c <= '9'; }

/* The value of exactly `count` ASCII digits at s, or -1 when any is not a digit. */
static inline int tidbparse_fixed_digits(const char *s, int count)
{
    int v = 0;
    for (int i = 0; i < count; i++) {
        if (!tidbparse_is_digit(s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* Length of the run of ASCII digits starting at s[i] (bounded by n). */
static inline Py_ssize_t tidbparse_digit_run(const char *s, Py_ssize_t i, Py_ssize_t n)
{
    Py_ssize_t j = i;
    while (j < n && tidbparse_is_digit(s[j]))
        j++;
    return j - i;
}

static int tidbparse_int(const char *s, Py_ssize_t n, PyObject **out)
{
    Py_ssize_t i = 0;
    int negative = 0;
    if (n > 0 && s[0] == '-') {
        negative = 1;
        i = 1;
    }
    if (i == n)
        return TIDBPARSE_NOT_HANDLED;
    /* 20 digits cover 2**64-1; leading zeros beyond that go to Python (rare, still correct) */
    if (n - i > 20)
        return TIDBPARSE_NOT_HANDLED;
    uint64_t v = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (!tidbparse_is_digit(c))
            return TIDBPARSE_NOT_HANDLED;
        uint64_t d = (uint64_t)(c - '0');
        if (v > (UINT64_MAX - d) / 10)
            return TIDBPARSE_NOT_HANDLED; /* beyond 64 bits: Python's int does arbitrary size */
        v = v * 10 + d;
    }
    PyObject *r;
    if (!negative)
        r = PyLong_FromUnsignedLongLong((unsigned long long)v);
    else if (v <= (uint64_t)INT64_MAX)
        r = PyLong_FromLongLong(-(long long)v);
    else if (v == (uint64_t)INT64_MAX + 1)
        r = PyLong_FromLongLong(INT64_MIN);
    else
        return TIDBPARSE_NOT_HANDLED;
    if (r == NULL)
        return TIDBPARSE_ERROR;
    *out = r;
    return TIDBPARSE_OK;
}

/* Whether s starts with -?D+(.D+)?, the plain decimal shape; *end gets where that shape ends. */
static inline int tidbparse_plain_number(const char *s, Py_ssize_t n, Py_ssize_t *end)
{
    Py_ssize_t i = (n > 0 && s[0] == '-') ? 1 : 0;
    Py_ssize_t run = tidbparse_digit_run(s, i, n);
    if (run == 0)
        return 0;
    i += run;
    if (i < n && s[i] == '.') {
        run = tidbparse_digit_run(s, i + 1, n);
        if (run == 0)
            return 0;
        i += 1 + run;
    }
    *end = i;
    return 1;
}

static int tidbparse_float(const char *s, Py_ssize_t n, PyObject **out)
{
    /* Python's float() and PyOS_string_to_double share one correctly rounded conversion, so
       for the shapes accepted here the value is the same; PyOS_string_to_double needs a NUL
       terminated copy, hence the bound on the length. */
    char buf[65];
    Py_ssize_t i;
    if (n > 64 || !tidbparse_plain_number(s, n, &i))
        return TIDBPARSE_NOT_HANDLED;
    if (i < n) {
        if (s[i] != 'e' && s[i] != 'E')
            return TIDBPARSE_NOT_HANDLED;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        Py_ssize_t run = tidbparse_digit_run(s, i, n);
        if (run == 0 || i + run != n)
            return TIDBPARSE_NOT_HANDLED;
    }
    memcpy(buf, s, (size_t)n);
    buf[n] = '\0';
    char *end = NULL;
    double d = PyOS_string_to_double(buf, &end, NULL); /* NULL: overflow gives +-inf, as float() */
    if (d == -1.0 && PyErr_Occurred())
        return TIDBPARSE_ERROR;
    if (end != buf + n)
        return TIDBPARSE_NOT_HANDLED;
    PyObject *r = PyFloat_FromDouble(d);
    if (r == NULL)
        return TIDBPARSE_ERROR;
    *out = r;
    return TIDBPARSE_OK;
}

static int tidbparse_decimal(const char *s, Py_ssize_t n, PyObject **out)
{
    /* Decimal(text) itself builds the value, so digits and exponent are exactly Python's;
       C only keeps the exotic shapes (exponents, NaN, spaces, underscores) on the Python path. */
    Py_ssize_t end;
    if (n > 201 || !tidbparse_plain_number(s, n, &end) || end != n)
        return TIDBPARSE_NOT_HANDLED;
    PyObject *text = PyUnicode_FromStringAndSize(s, n);
    if (text == NULL)
        return TIDBPARSE_ERROR;
    PyObject *r = PyObject_CallOneArg(tidbparse_decimal_type, text);
    Py_DECREF(text);
    if (r == NULL)
        return TIDBPARSE_ERROR;
    *out = r;
    return TIDBPARSE_OK;
}

static inline int tidbparse_days_in_month(int year, int month)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (month == 2 && year % 4 == 0 && (year % 100 != 0 || year % 400 == 0))
        return 29;
    return days[month - 1];
}

/* YYYY-MM-DD at s (10 bytes available): 1 with the fields set when it is a real date. */
static inline int tidbparse_ymd(const char *s, int *year, int *month, int *day)
{
    if (s[4] != '-' || s[7] != '-')
        return 0;
    int y = tidbparse_fixed_digits(s, 4), m = tidbparse_fixed_digits(s + 5, 2), d = tidbparse_fixed_digits(s + 8, 2);
    if (y < 1 || m < 1 || m > 12 || d < 1 || d > tidbparse_days_in_month(y, m))
        return 0;
    *year = y;
    *month = m;
    *day = d;
    return 1;
}

/* HH:MM:SS at s (8 bytes available) within a day. */
static inline int tidbparse_hms(const char *s, int *hour, int *minute, int *second)
{
    if (s[2] != ':' || s[5] != ':')
        return 0;
    int h = tidbparse_fixed_digits(s, 2), mi = tidbparse_fixed_digits(s + 3, 2), se = tidbparse_fixed_digits(s + 6, 2);
    if (h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 59)
        return 0;
    *hour = h;
    *minute = mi;
    *second = se;
    return 1;
}

/* 1..6 fraction digits at s (count given) -> microseconds, or -1 when not all digits. */
static inline int tidbparse_micros(const char *s, Py_ssize_t count)
{
    if (count < 1 || count > 6)
        return -1;
    int v = tidbparse_fixed_digits(s, (int)count);
    if (v < 0)
        return -1;
    for (Py_ssize_t k = count; k < 6; k++)
        v *= 10;
    return v;
}

static int tidbparse_date(const char *s, Py_ssize_t n, PyObject **out)
{
    int y, m, d;
    if (n != 10 || !tidbparse_ymd(s, &y, &m, &d))
        return TIDBPARSE_NOT_HANDLED;
    PyObject *r = PyDate_FromDate(y, m, d);
    if (r == NULL)
        return TIDBPARSE_ERROR;
    *out = r;
    return TIDBPARSE_OK;
}

static int tidbparse_datetime(const char *s, Py_ssize_t n, PyObject **out)
{
    int y, mo, d, h, mi, se, us = 0;
    if (!(n == 19 || (n >= 21 && n <= 26)) || s[10] != ' ')
        return TIDBPARSE_NOT_HANDLED;
    if (!tidbparse_ymd(s, &y, &mo, &d) || !tidbparse_hms(s + 11, &h, &mi, &se))
        return TIDBPARSE_NOT_HANDLED;
    if (n > 19) {
        if (s[19] != '.' || (us = tidbparse_micros(s + 20, n - 20)) < 0)
            return TIDBPARSE_NOT_HANDLED;
    }
    PyObject *r = PyDateTime_FromDateAndTime(y, mo, d, h, mi, se, us);
    if (r == NULL)
        return TIDBPARSE_ERROR;
    *out = r;
    return TIDBPARSE_OK;
}

static int tidbparse_time(const char *s, Py_ssize_t n, long long max_us, PyObject **out)
{
    Py_ssize_t i = 0;
    int negative = 0;
    if (n > 0 && s[0] == '-') {
        negative = 1;
        i = 1;
    }
    Py_ssize_t hour_digits = tidbparse_digit_run(s, i, n);
    if (hour_digits < 2 || hour_digits > 3 || n - i - hour_digits < 6)
        return TIDBPARSE_NOT_HANDLED;
    int h = tidbparse_fixed_digits(s + i, (int)hour_digits);
    i += hour_digits;
    const char *p = s + i; /* :MM:SS */
    if (p[0] != ':' || p[3] != ':')
        return TIDBPARSE_NOT_HANDLED;
    int mi = tidbparse_fixed_digits(p + 1, 2), se = tidbparse_fixed_digits(p + 4, 2);
    if (mi < 0 || mi > 59 || se < 0 || se > 59)
        return TIDBPARSE_NOT_HANDLED;
    i += 6;
    int us = 0;
    if (i < n) {
        if (s[i] != '.' || (us = tidbparse_micros(s + i + 1, n - i - 1)) < 0)
            return TIDBPARSE_NOT_HANDLED;
    }
    long long total = ((long long)(h * 60 + mi) * 60 + se) * 1000000LL + us;
    if (max_us >= 0 && total > max_us)
        return TIDBPARSE_NOT_HANDLED;
    if (negative)
        total = -total;
    /* timedelta normalises (days, seconds, microseconds) itself, as timedelta(microseconds=...) */
    long long days = total / 86400000000LL, rest = total % 86400000000LL;
    if (rest < 0) {
        rest += 86400000000LL;
        days -= 1;
    }
    PyObject *r = PyDelta_FromDSU((int)days, (int)(rest / 1000000LL), (int)(rest % 1000000LL));
    if (r == NULL)
        return TIDBPARSE_ERROR;
    *out = r;
    return TIDBPARSE_OK;
}

#endif /* CDCFLOW_TIDBPARSE_H */
