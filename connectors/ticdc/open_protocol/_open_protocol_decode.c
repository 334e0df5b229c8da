/* _open_protocol_decode.c: TiCDC open-protocol messages -> events, the common shapes in C.
 *
 * The Python decoder (open_protocol.OpenProtocolDecoder) stays the reference. This kernel reads
 * a message (batch-framed key and value JSON) with a strict reader specialised to the bytes
 * TiCDC and our encoder write: no whitespace, keys in their fixed order, each column object
 * `{"t":CODE[,"h":true],"f":FLAGS,"v":VALUE}`. Per table signature the Python decoder gives it a
 * RowPlan (the table, and per column the exact bytes around the value, a value kind, the Python
 * converter); the kernel matches those bytes with memcmp and converts the value straight to its
 * Python type, without building the intermediate dicts.
 *
 * Hand-back rule: anything else (another key layout, whitespace, an unknown signature, a value
 * outside a kind's fast path that the Python converter rejects, invalid JSON or UTF-8, bad
 * framing) makes `decode` return None and the caller decodes the whole message in Python, which
 * produces the events or the typed error with its position. C raises only MemoryError-class
 * errors (and whatever a non-Exception, e.g. KeyboardInterrupt, raised inside a converter).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "tidbparse.h"
#include "tidbtext.h" /* tt_buf, the scratch buffer for unescaped strings */

/* status of every reader step */
#define ST_OK 0
#define ST_PASS 1 /* not handled here: the message goes to the Python path */
#define ST_ERR (-1) /* a Python exception is set */

/* value kinds (the Python side picks one per column; exported as module constants) */
enum {
    K_CONV = 0,    /* any JSON scalar, given to the column's Python converter */
    K_INT,         /* integer within [lo, hi] (TINYINT..BIGINT, YEAR, BIT) */
    K_DOUBLE,      /* number -> float */
    K_FLOAT,       /* number -> float rounded to float32 */
    K_DECIMAL,     /* plain decimal string -> Decimal */
    K_DATE,        /* "YYYY-MM-DD" -> date */
    K_DATETIME,    /* "YYYY-MM-DD HH:MM:SS[.f]" -> naive datetime */
    K_TIME,        /* "[-]HH:MM:SS[.f]" -> timedelta, TiDB's range */
    K_STR,         /* string -> str (text, JSON) */
    K_GO_BYTES,    /* Go-quoted string -> bytes (binary CHAR/VARCHAR) */
    K_B64_BYTES,   /* base64 string -> bytes (BLOB) */
    K_B64_TEXT,    /* base64 string -> str (TEXT) */
    K_ENUM_NAME,   /* index -> element name (aux: tuple of names, "" at 0) */
    K_UINT_TEXT,   /* non-negative integer -> its decimal text (ENUM/SET without elements) */
    K_COUNT
};

/* TiDB's TIME range, as canal_json.parse_time enforces it (838:59:59) */
static const long long TIME_MAX_US = ((838LL * 60 + 59) * 60 + 59) * 1000000LL;

/* ======================================================================== plans */

typedef struct {
    PyObject *lead; /* bytes: '"name":{"t":CODE,' (between the column separator and "h"/"f") */
    PyObject *tail; /* bytes: '"f":FLAGS,"v":' */
    PyObject *name; /* str: the row dict key */
    PyObject *conv; /* the Python converter for values off the fast path */
    PyObject *aux;  /* K_ENUM_NAME: tuple of names by index; otherwise None */
    int kind;
    uint64_t neg_limit; /* K_INT: magnitude of the smallest allowed value (0: none negative) */
    uint64_t hi;        /* K_INT: largest allowed value */
} ColumnPlan;

typedef struct {
    PyObject_HEAD
    PyObject *table;
    Py_ssize_t ncols;
    ColumnPlan *cols;
} RowPlan;

static void RowPlan_dealloc(RowPlan *self)
{
    for (Py_ssize_t i = 0; i < self->ncols; i++) {
        ColumnPlan *c = &self->cols[i];
        Py_XDECREF(c->lead);
        Py_XDECREF(c->tail);
        Py_XDECREF(c->name);
        Py_XDECREF(c->conv);
        Py_XDECREF(c->aux);
    }
    PyMem_Free(self->cols);
    Py_XDECREF(self->table);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* One column spec: mirrors the Python NamedTuple open_protocol/decode.py ColumnSpec, read by position
 * (lead: bytes, tail: bytes, name: str, kind: int, lo: int, hi: int, conv, aux). */
static int column_plan_init(ColumnPlan *c, PyObject *spec)
{
    PyObject *lead, *tail, *name, *lo, *hi, *conv, *aux;
    int kind;
    if (!PyArg_ParseTuple(spec, "O!O!UiO!O!OO;column spec (lead, tail, name, kind, lo, hi, conv, aux)",
                          &PyBytes_Type, &lead, &PyBytes_Type, &tail, &name, &kind, &PyLong_Type, &lo,
                          &PyLong_Type, &hi, &conv, &aux))
        return -1;
    if (kind < 0 || kind >= K_COUNT) {
        PyErr_Format(PyExc_ValueError, "unknown value kind %d", kind);
        return -1;
    }
    if (kind == K_ENUM_NAME && !PyTuple_CheckExact(aux)) {
        PyErr_SetString(PyExc_TypeError, "an ENUM column's aux must be the tuple of names");
        return -1;
    }
    c->kind = kind;
    c->neg_limit = 0;
    c->hi = 0;
    if (kind == K_INT) {
        /* the bounds of every integer type fit these: lo >= -2**63, hi <= 2**64-1 */
        long long l = PyLong_AsLongLong(lo);
        if (l == -1 && PyErr_Occurred())
            return -1;
        unsigned long long h = PyLong_AsUnsignedLongLong(hi);
        if (h == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        c->neg_limit = l < 0 ? 0ULL - (unsigned long long)l : 0;
        c->hi = h;
    }
    c->lead = Py_NewRef(lead);
    c->tail = Py_NewRef(tail);
    c->name = Py_NewRef(name);
    c->conv = Py_NewRef(conv);
    c->aux = Py_NewRef(aux);
    return 0;
}

static PyObject *RowPlan_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *table, *specs;
    if (!PyArg_ParseTuple(args, "OO!:RowPlan", &table, &PyTuple_Type, &specs))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(specs);
    RowPlan *self = (RowPlan *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->table = Py_NewRef(table);
    self->cols = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(ColumnPlan));
    if (self->cols == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (column_plan_init(&self->cols[i], PyTuple_GET_ITEM(specs, i)) < 0) {
            Py_DECREF(self);
            return NULL;
        }
        self->ncols = i + 1; /* dealloc releases exactly the initialised columns */
    }
    return (PyObject *)self;
}

static PyObject *RowPlan_get_table(RowPlan *self, void *closure) { return Py_NewRef(self->table); }

static PyGetSetDef RowPlan_getset[] = {
    {"table", (getter)RowPlan_get_table, NULL, "the TableSchema rows of this plan carry", NULL},
    {NULL},
};

static PyTypeObject RowPlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.connectors.ticdc.open_protocol._open_protocol_decode.RowPlan",
    .tp_basicsize = sizeof(RowPlan),
    .tp_dealloc = (destructor)RowPlan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RowPlan(table, column_specs): one table signature as the kernel matches it.",
    .tp_new = RowPlan_new,
    .tp_getset = RowPlan_getset,
};

/* ======================================================================== JSON reader */

typedef struct {
    const char *p;
    const char *end;
} Cursor;

/* Consume the literal s (n bytes) when the input continues with it. */
static inline int take(Cursor *c, const char *s, Py_ssize_t n)
{
    if (c->end - c->p < n || memcmp(c->p, s, (size_t)n) != 0)
        return 0;
    c->p += n;
    return 1;
}

static inline int take_char(Cursor *c, char ch)
{
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static inline int take_bytes(Cursor *c, PyObject *bytes)
{
    return take(c, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
}

static inline int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

typedef struct {
    const char *s; /* the literal, sign included */
    Py_ssize_t n;
    int is_int;    /* no fraction, no exponent */
    int negative;
} Number;

/* A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? -- anything looser is not JSON. */
static int scan_number(Cursor *c, Number *num)
{
    const char *p = c->p, *end = c->end;
    num->s = p;
    num->negative = 0;
    num->is_int = 1;
    if (p < end && *p == '-') {
        num->negative = 1;
        p++;
    }
    if (p >= end || !is_digit(*p))
        return 0;
    if (*p == '0')
        p++;
    else
        while (p < end && is_digit(*p))
            p++;
    if (p < end && *p == '.') {
        num->is_int = 0;
        p++;
        if (p >= end || !is_digit(*p))
            return 0;
        while (p < end && is_digit(*p))
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        num->is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !is_digit(*p))
            return 0;
        while (p < end && is_digit(*p))
            p++;
    }
    num->n = p - num->s;
    c->p = p;
    return 1;
}

/* Magnitude of an integer literal's digits; 0 when it does not fit 64 bits. */
static int int_magnitude(const Number *num, uint64_t *mag)
{
    const char *p = num->s + num->negative, *end = num->s + num->n;
    if (end - p > 20)
        return 0;
    uint64_t v = 0;
    for (; p < end; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *mag = v;
    return 1;
}

/* The int orjson gives for an integer literal within -2**63 .. 2**64-1 (beyond it orjson makes
   a float, which is left to Python). */
static int int_object(const Number *num, PyObject **out)
{
    uint64_t mag;
    if (!int_magnitude(num, &mag))
        return ST_PASS;
    if (!num->negative)
        *out = PyLong_FromUnsignedLongLong(mag);
    else if (mag <= (uint64_t)INT64_MAX + 1)
        *out = PyLong_FromLongLong(mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(long long)mag);
    else
        return ST_PASS;
    return *out ? ST_OK : ST_ERR;
}

/* A float literal whose digits, read as one integer m, stay below 2**53 and whose decimal
 * exponent e has |e| <= 22: m and 10**|e| are both exact doubles, so the one IEEE multiply or
 * divide m * 10**e is the correctly rounded value, the same double any correct strtod gives
 * (Clinger's fast path). Saves the strtod machinery (and its FPU control word switches) for
 * the short literals TiCDC and orjson write. 0 when the literal is outside that shape. */
static int fast_double(const Number *num, double *out)
{
    static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const char *p = num->s + num->negative, *end = num->s + num->n;
    uint64_t m = 0;
    int digits = 0, exp10 = 0;
    for (; p < end && is_digit(*p); p++) {
        m = m * 10 + (uint64_t)(*p - '0');
        if (m && ++digits > 15) /* 10**15 < 2**53: no digit count below 16 can overflow it */
            return 0;
    }
    if (p < end && *p == '.')
        for (p++; p < end && is_digit(*p); p++) {
            m = m * 10 + (uint64_t)(*p - '0');
            exp10--;
            if (m && ++digits > 15)
                return 0;
        }
    if (p < end) { /* exponent part */
        int sign = 1, e = 0;
        p++;
        if (*p == '+' || *p == '-')
            sign = *p++ == '-' ? -1 : 1;
        for (; p < end; p++) {
            e = e * 10 + (*p - '0');
            if (e > 400)
                return 0;
        }
        exp10 += sign * e;
    }
    if (exp10 < -22 || exp10 > 22)
        return 0;
    double d = (double)m;
    d = exp10 < 0 ? d / POW10[-exp10] : d * POW10[exp10];
    *out = num->negative ? -d : d;
    return 1;
}

/* The double of a number literal (correctly rounded, as orjson's); infinities are an error in
   orjson, so they go to Python too. */
static int double_of(const Number *num, double *out)
{
    PyObject *f = NULL;
    if (num->is_int) {
        /* orjson reads an integer literal as an int (so "-0" is 0 and float() of it +0.0);
           beyond 64 bits it makes a float its own way, left to Python */
        uint64_t mag;
        if (!int_magnitude(num, &mag) || (num->negative && mag > (uint64_t)INT64_MAX + 1))
            return ST_PASS;
        /* the conversion rounds to nearest, as float(int) does */
        *out = num->negative && mag ? -(double)mag : (double)mag;
        return ST_OK;
    }
    if (fast_double(num, out))
        return ST_OK;
    int st = tidbparse_float(num->s, num->n, &f);
    if (st != TIDBPARSE_OK)
        return st == TIDBPARSE_ERROR ? ST_ERR : ST_PASS;
    double d = PyFloat_AS_DOUBLE(f);
    Py_DECREF(f);
    if (isinf(d))
        return ST_PASS;
    *out = d;
    return ST_OK;
}

typedef struct {
    const char *s; /* the raw bytes between the quotes */
    Py_ssize_t n;
    int escaped;   /* holds a backslash escape */
    int ascii;     /* every raw byte < 0x80 */
} String;

/* A JSON string at the cursor: its raw span. Raw control characters are not JSON. */
static int scan_string(Cursor *c, String *str)
{
    const unsigned char *p = (const unsigned char *)c->p, *end = (const unsigned char *)c->end;
    if (p >= end || *p != '"')
        return 0;
    p++;
    str->s = (const char *)p;
    str->escaped = 0;
    unsigned char high = 0;
    for (;;) {
        if (p >= end)
            return 0;
        unsigned char ch = *p;
        if (ch == '"')
            break;
        if (ch < 0x20)
            return 0;
        if (ch == '\\') {
            str->escaped = 1;
            if (p + 1 >= end)
                return 0;
            p += 2; /* the escaped byte is checked when unescaping */
            continue;
        }
        high |= ch;
        p++;
    }
    str->n = (const char *)p - str->s;
    str->ascii = high < 0x80;
    c->p = (const char *)p + 1;
    return 1;
}

/* Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF): what orjson accepts. */
static int utf8_valid(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        int more;
        unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (b >= 0xC2 && b <= 0xDF)
            more = 1;
        else if (b >= 0xE0 && b <= 0xEF) {
            more = 2;
            if (b == 0xE0)
                lo = 0xA0; /* overlong */
            else if (b == 0xED)
                hi = 0x9F; /* UTF-16 surrogates */
        } else if (b >= 0xF0 && b <= 0xF4) {
            more = 3;
            if (b == 0xF0)
                lo = 0x90; /* overlong */
            else if (b == 0xF4)
                hi = 0x8F; /* above U+10FFFF */
        } else
            return 0;
        if (n - i <= more || s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (int k = 2; k <= more; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += more + 1;
    }
    return 1;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = s[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9')
            v |= (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            v |= (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F')
            v |= (unsigned)(ch - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

static void put_utf8(char *dst, Py_ssize_t *len, unsigned cp)
{
    unsigned char *d = (unsigned char *)dst + *len;
    if (cp < 0x80) {
        d[0] = (unsigned char)cp;
        *len += 1;
    } else if (cp < 0x800) {
        d[0] = (unsigned char)(0xC0 | (cp >> 6));
        d[1] = (unsigned char)(0x80 | (cp & 0x3F));
        *len += 2;
    } else if (cp < 0x10000) {
        d[0] = (unsigned char)(0xE0 | (cp >> 12));
        d[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (unsigned char)(0x80 | (cp & 0x3F));
        *len += 3;
    } else {
        d[0] = (unsigned char)(0xF0 | (cp >> 18));
        d[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        d[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        d[3] = (unsigned char)(0x80 | (cp & 0x3F));
        *len += 4;
    }
}

/* The escapes of a JSON string resolved into buf (valid UTF-8 out, or ST_PASS). An escape
   never grows the text (\uXXXX is 6 bytes for at most 3; a pair is 12 for 4), so the raw
   length bounds the output. */
static int unescape(const String *str, tt_buf *buf, int *ascii)
{
    tt_buf_clear(buf);
    if (tt_buf_reserve(buf, str->n) < 0)
        return ST_ERR;
    const char *p = str->s, *end = str->s + str->n;
    char *out = buf->data;
    Py_ssize_t len = 0;
    unsigned char high = 0;
    while (p < end) {
        if (*p != '\\') {
            high |= (unsigned char)*p;
            out[len++] = *p++;
            continue;
        }
        char e = p[1]; /* scan_string saw a byte after every backslash */
        p += 2;
        switch (e) {
        case '"': out[len++] = '"'; continue;
        case '\\': out[len++] = '\\'; continue;
        case '/': out[len++] = '/'; continue;
        case 'b': out[len++] = '\b'; continue;
        case 'f': out[len++] = '\f'; continue;
        case 'n': out[len++] = '\n'; continue;
        case 'r': out[len++] = '\r'; continue;
        case 't': out[len++] = '\t'; continue;
        case 'u': break;
        default: return ST_PASS;
        }
        unsigned cp;
        if (end - p < 4 || !hex4(p, &cp))
            return ST_PASS;
        p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* high surrogate: a low one must follow */
            unsigned low;
            if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, &low) || low < 0xDC00 || low > 0xDFFF)
                return ST_PASS;
            p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF)
            return ST_PASS; /* a lone low surrogate */
        if (cp >= 0x80)
            high = 0x80;
        put_utf8(out, &len, cp);
    }
    buf->len = len;
    *ascii = high < 0x80;
    return ST_OK;
}

/* The text of a JSON string as checked UTF-8: the raw span, or the unescaped scratch copy
   (valid until the next call). */
static int string_utf8(tt_buf *scratch, const String *str, const char **s, Py_ssize_t *n, int *ascii)
{
    if (!str->escaped) {
        if (!str->ascii && !utf8_valid((const unsigned char *)str->s, str->n))
            return ST_PASS;
        *s = str->s;
        *n = str->n;
        *ascii = str->ascii;
        return ST_OK;
    }
    int st = unescape(str, scratch, ascii);
    if (st != ST_OK)
        return st;
    if (!*ascii && !utf8_valid((const unsigned char *)scratch->data, scratch->len))
        return ST_PASS;
    *s = scratch->data;
    *n = scratch->len;
    return ST_OK;
}

/* str of checked UTF-8; ASCII is copied straight into a compact 1-byte string. */
static PyObject *str_of(const char *s, Py_ssize_t n, int ascii)
{
    if (!ascii)
        return PyUnicode_DecodeUTF8(s, n, NULL);
    PyObject *r = PyUnicode_New(n, 127);
    if (r != NULL)
        memcpy(PyUnicode_DATA(r), s, (size_t)n);
    return r;
}

/* ======================================================================== base64 */

/* value of each byte in the standard alphabet, -1 elsewhere ('=' included) */
static const signed char B64[256] = {
    ['A'] = 0,  ['B'] = 1,  ['C'] = 2,  ['D'] = 3,  ['E'] = 4,  ['F'] = 5,  ['G'] = 6,  ['H'] = 7,
    ['I'] = 8,  ['J'] = 9,  ['K'] = 10, ['L'] = 11, ['M'] = 12, ['N'] = 13, ['O'] = 14, ['P'] = 15,
    ['Q'] = 16, ['R'] = 17, ['S'] = 18, ['T'] = 19, ['U'] = 20, ['V'] = 21, ['W'] = 22, ['X'] = 23,
    ['Y'] = 24, ['Z'] = 25, ['a'] = 26, ['b'] = 27, ['c'] = 28, ['d'] = 29, ['e'] = 30, ['f'] = 31,
    ['g'] = 32, ['h'] = 33, ['i'] = 34, ['j'] = 35, ['k'] = 36, ['l'] = 37, ['m'] = 38, ['n'] = 39,
    ['o'] = 40, ['p'] = 41, ['q'] = 42, ['r'] = 43, ['s'] = 44, ['t'] = 45, ['u'] = 46, ['v'] = 47,
    ['w'] = 48, ['x'] = 49, ['y'] = 50, ['z'] = 51, ['0'] = 52, ['1'] = 53, ['2'] = 54, ['3'] = 55,
    ['4'] = 56, ['5'] = 57, ['6'] = 58, ['7'] = 59, ['8'] = 60, ['9'] = 61, ['+'] = 62, ['/'] = 63,
};
/* B64 holds 0 for 'A' and for every byte not listed; this tells them apart */
static inline int b64_char(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '+' ||
           ch == '/';
}

/* Decoded length of canonical-shape base64 (length a multiple of 4, alphabet only, at most two
   '=' at the very end), or -1 for every other text (binascii's strict mode decides those).
   Leftover bits of the last group are ignored, as binascii does. */
static Py_ssize_t b64_length(const unsigned char *s, Py_ssize_t n)
{
    if (n % 4)
        return -1;
    Py_ssize_t pad = 0;
    if (n && s[n - 1] == '=')
        pad = (s[n - 2] == '=') ? 2 : 1;
    for (Py_ssize_t i = 0; i < n - pad; i++)
        if (!b64_char(s[i]))
            return -1;
    return n / 4 * 3 - pad;
}

static void b64_decode(const unsigned char *s, Py_ssize_t n, unsigned char *out)
{
    Py_ssize_t o = 0, i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32_t v = (uint32_t)B64[s[i]] << 18 | (uint32_t)B64[s[i + 1]] << 12;
        out[o++] = (unsigned char)(v >> 16);
        if (s[i + 2] == '=')
            break;
        v |= (uint32_t)B64[s[i + 2]] << 6;
        out[o++] = (unsigned char)(v >> 8);
        if (s[i + 3] == '=')
            break;
        v |= (uint32_t)B64[s[i + 3]];
        out[o++] = (unsigned char)v;
    }
}

/* ======================================================================== decoder */

typedef struct {
    PyObject_HEAD
    PyObject *plans;      /* dict: key suffix bytes -> list of RowPlan (kept by the Python decoder) */
    PyObject *row_change; /* events.RowChange */
    PyObject *resolved;   /* events.ResolvedEvent */
    PyObject *kinds[3];   /* "insert", "update", "delete" */
    tt_buf scratch;       /* unescaped strings, decoded base64 text */
} Decoder;

enum { KIND_INSERT, KIND_UPDATE, KIND_DELETE };

static void Decoder_dealloc(Decoder *self)
{
    Py_XDECREF(self->plans);
    Py_XDECREF(self->row_change);
    Py_XDECREF(self->resolved);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(self->kinds[i]);
    tt_buf_free(&self->scratch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Decoder_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *plans, *row_change, *resolved, *ins, *upd, *del;
    if (!PyArg_ParseTuple(args, "O!OOUUU:Decoder", &PyDict_Type, &plans, &row_change, &resolved, &ins, &upd, &del))
        return NULL;
    Decoder *self = (Decoder *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->plans = Py_NewRef(plans);
    self->row_change = Py_NewRef(row_change);
    self->resolved = Py_NewRef(resolved);
    self->kinds[KIND_INSERT] = Py_NewRef(ins);
    self->kinds[KIND_UPDATE] = Py_NewRef(upd);
    self->kinds[KIND_DELETE] = Py_NewRef(del);
    if (tt_buf_init(&self->scratch, 256) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* A value off the kind's fast path: the JSON scalar as orjson gives it, then the column's
   Python converter. A converter that raises means the Python path reports the error. */
static int convert_generic(Decoder *self, const ColumnPlan *col, Cursor *c, PyObject **out)
{
    PyObject *v = NULL;
    char ch = c->p < c->end ? *c->p : '\0';
    if (ch == '"') {
        String str;
        const char *s;
        Py_ssize_t n;
        int ascii, st;
        if (!scan_string(c, &str))
            return ST_PASS;
        if ((st = string_utf8(&self->scratch, &str, &s, &n, &ascii)) != ST_OK)
            return st;
        if ((v = str_of(s, n, ascii)) == NULL)
            return ST_ERR;
    } else if (ch == '-' || is_digit(ch)) {
        Number num;
        int st;
        if (!scan_number(c, &num))
            return ST_PASS;
        if (num.is_int) {
            if ((st = int_object(&num, &v)) != ST_OK)
                return st;
        } else {
            double d;
            if ((st = double_of(&num, &d)) != ST_OK)
                return st;
            if ((v = PyFloat_FromDouble(d)) == NULL)
                return ST_ERR;
        }
    } else if (take(c, "true", 4))
        v = Py_NewRef(Py_True);
    else if (take(c, "false", 5))
        v = Py_NewRef(Py_False);
    else
        return ST_PASS; /* objects, arrays, anything malformed */
    PyObject *r = PyObject_CallOneArg(col->conv, v);
    Py_DECREF(v);
    if (r == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return ST_ERR; /* KeyboardInterrupt and the like are not ours to swallow */
        PyErr_Clear();
        return ST_PASS;
    }
    *out = r;
    return ST_OK;
}

static int value_int(const ColumnPlan *col, const Number *num, PyObject **out)
{
    uint64_t mag;
    if (!num->is_int || !int_magnitude(num, &mag))
        return ST_PASS;
    if (num->negative) {
        if (mag > col->neg_limit)
            return ST_PASS;
        *out = mag == (uint64_t)INT64_MAX + 1 ? PyLong_FromLongLong(INT64_MIN) : PyLong_FromLongLong(-(long long)mag);
    } else {
        if (mag > col->hi)
            return ST_PASS;
        *out = PyLong_FromUnsignedLongLong(mag);
    }
    return *out ? ST_OK : ST_ERR;
}

/* Number-valued kinds; ST_PASS sends the value to convert_generic. */
static int value_number(const ColumnPlan *col, Cursor *c, PyObject **out)
{
    Number num;
    Cursor at = *c;
    if (!scan_number(&at, &num))
        return ST_PASS;
    int st;
    switch (col->kind) {
    case K_INT:
        st = value_int(col, &num, out);
        break;
    case K_DOUBLE:
    case K_FLOAT: {
        double d;
        if ((st = double_of(&num, &d)) != ST_OK)
            break;
        if (col->kind == K_FLOAT) {
            /* TiDB FLOAT is 32-bit: the float32 nearest, as struct.pack("<f") rounds; a value
               beyond its range is the converter's error */
            float f = (float)d;
            if (isinf(f))
                return ST_PASS;
            d = (double)f;
        }
        st = (*out = PyFloat_FromDouble(d)) ? ST_OK : ST_ERR;
        break;
    }
    case K_ENUM_NAME: {
        uint64_t mag;
        if (!num.is_int || num.negative || !int_magnitude(&num, &mag) ||
            mag >= (uint64_t)PyTuple_GET_SIZE(col->aux))
            return ST_PASS;
        *out = Py_NewRef(PyTuple_GET_ITEM(col->aux, (Py_ssize_t)mag));
        st = ST_OK;
        break;
    }
    case K_UINT_TEXT: {
        uint64_t mag;
        /* str(int) of a canonical non-negative literal is the literal itself */
        if (!num.is_int || num.negative || !int_magnitude(&num, &mag))
            return ST_PASS;
        st = (*out = str_of(num.s, num.n, 1)) ? ST_OK : ST_ERR;
        break;
    }
    default:
        return ST_PASS;
    }
    if (st == ST_OK)
        *c = at;
    return st;
}

/* String-valued kinds; ST_PASS sends the value to convert_generic. */
static int value_string(Decoder *self, const ColumnPlan *col, Cursor *c, PyObject **out)
{
    String str;
    Cursor at = *c;
    if (!scan_string(&at, &str))
        return ST_PASS;
    const char *s;
    Py_ssize_t n;
    int ascii, st;
    switch (col->kind) {
    case K_STR:
        if ((st = string_utf8(&self->scratch, &str, &s, &n, &ascii)) != ST_OK)
            return st;
        *out = str_of(s, n, ascii);
        break;
    case K_GO_BYTES:
        /* Go quoting only adds backslashes: text without one is its own UTF-8 bytes */
        if ((st = string_utf8(&self->scratch, &str, &s, &n, &ascii)) != ST_OK)
            return st;
        if (memchr(s, '\\', (size_t)n) != NULL)
            return ST_PASS;
        *out = PyBytes_FromStringAndSize(s, n);
        break;
    case K_B64_BYTES: {
        Py_ssize_t len;
        if (str.escaped || (len = b64_length((const unsigned char *)str.s, str.n)) < 0)
            return ST_PASS;
        *out = PyBytes_FromStringAndSize(NULL, len);
        if (*out != NULL)
            b64_decode((const unsigned char *)str.s, str.n, (unsigned char *)PyBytes_AS_STRING(*out));
        break;
    }
    case K_B64_TEXT: {
        Py_ssize_t len;
        if (str.escaped || (len = b64_length((const unsigned char *)str.s, str.n)) < 0)
            return ST_PASS;
        tt_buf_clear(&self->scratch);
        if (tt_buf_reserve(&self->scratch, len + 1) < 0)
            return ST_ERR;
        unsigned char *buf = (unsigned char *)self->scratch.data;
        b64_decode((const unsigned char *)str.s, str.n, buf);
        unsigned char high = 0;
        for (Py_ssize_t i = 0; i < len; i++)
            high |= buf[i];
        if (high >= 0x80 && !utf8_valid(buf, len))
            return ST_PASS; /* the converter's UnicodeDecodeError */
        *out = str_of((const char *)buf, len, high < 0x80);
        break;
    }
    case K_DECIMAL:
    case K_DATE:
    case K_DATETIME:
    case K_TIME: {
        /* TiDB's text forms are ASCII without escapes; the parsers say "not handled" otherwise */
        if (str.escaped || !str.ascii)
            return ST_PASS;
        PyObject *v = NULL;
        int r = col->kind == K_DECIMAL    ? tidbparse_decimal(str.s, str.n, &v)
                : col->kind == K_DATE     ? tidbparse_date(str.s, str.n, &v)
                : col->kind == K_DATETIME ? tidbparse_datetime(str.s, str.n, &v)
                                          : tidbparse_time(str.s, str.n, TIME_MAX_US, &v);
        if (r != TIDBPARSE_OK)
            return r == TIDBPARSE_ERROR ? ST_ERR : ST_PASS;
        *out = v;
        break;
    }
    default:
        return ST_PASS;
    }
    if (*out == NULL)
        return ST_ERR;
    *c = at;
    return ST_OK;
}

/* One column's value at the cursor -> *out (new reference). */
static int column_value(Decoder *self, const ColumnPlan *col, Cursor *c, PyObject **out)
{
    if (take(c, "null", 4)) {
        *out = Py_NewRef(Py_None);
        return ST_OK;
    }
    int st = ST_PASS;
    if (c->p < c->end && col->kind != K_CONV) {
        char ch = *c->p;
        if (ch == '"')
            st = value_string(self, col, c, out);
        else if (ch == '-' || is_digit(ch))
            st = value_number(col, c, out);
    }
    if (st == ST_PASS)
        st = convert_generic(self, col, c, out);
    return st;
}

/* One row image `{col:{...},...}` (the cursor just past its '{') read with `plan` into a new
   dict in *row. ST_PASS when the image does not have exactly the plan's columns or a value
   is not one the kernel or its converter takes. */
static int read_image(Decoder *self, const RowPlan *plan, Cursor *c, PyObject **row)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return ST_ERR;
    for (Py_ssize_t i = 0; i < plan->ncols; i++) {
        const ColumnPlan *col = &plan->cols[i];
        if ((i > 0 && !take_char(c, ',')) || !take_bytes(c, col->lead))
            goto pass;
        take(c, "\"h\":true,", 9); /* the Python path does not read "h" either once the table is known */
        if (!take_bytes(c, col->tail))
            goto pass;
        PyObject *v;
        int st = column_value(self, col, c, &v);
        if (st != ST_OK) {
            Py_DECREF(d);
            return st;
        }
        st = PyDict_SetItem(d, col->name, v);
        Py_DECREF(v);
        if (st < 0) {
            Py_DECREF(d);
            return ST_ERR;
        }
        if (!take_char(c, '}'))
            goto pass;
    }
    if (!take_char(c, '}'))
        goto pass;
    *row = d;
    return ST_OK;
pass:
    Py_DECREF(d);
    return ST_PASS;
}

/* An old image holding only some of the plan's columns, in any order (TiCDC's
   only-output-updated-columns): the Python path converts such an image column by column in its
   own order, so the dict keeps the message's order. An image with every column (in another
   order) is read in the plan's order there: left to Python, as are repeated columns. */
static int read_partial_image(Decoder *self, const RowPlan *plan, Cursor *c, PyObject **row)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return ST_ERR;
    Py_ssize_t next = 0; /* columns usually come in plan order: try the one after the last first */
    int st = ST_PASS;
    if (take_char(c, '}'))
        goto done;
    for (;;) {
        const ColumnPlan *col = NULL;
        for (Py_ssize_t k = 0; k < plan->ncols && col == NULL; k++) {
            Py_ssize_t i = (next + k) % plan->ncols;
            if (take_bytes(c, plan->cols[i].lead)) {
                col = &plan->cols[i];
                next = i + 1;
            }
        }
        if (col == NULL)
            goto fail;
        take(c, "\"h\":true,", 9);
        if (!take_bytes(c, col->tail))
            goto fail;
        int seen = PyDict_Contains(d, col->name);
        if (seen != 0) {
            st = seen < 0 ? ST_ERR : ST_PASS;
            goto fail;
        }
        PyObject *v;
        if ((st = column_value(self, col, c, &v)) != ST_OK)
            goto fail;
        int r = PyDict_SetItem(d, col->name, v);
        Py_DECREF(v);
        if (r < 0) {
            st = ST_ERR;
            goto fail;
        }
        st = ST_PASS;
        if (!take_char(c, '}'))
            goto fail;
        if (take_char(c, ','))
            continue;
        if (take_char(c, '}'))
            break;
        goto fail;
    }
    if (PyDict_GET_SIZE(d) >= plan->ncols)
        goto fail;
done:
    *row = d;
    return ST_OK;
fail:
    Py_DECREF(d);
    return st;
}

/* The new and old images of a row value with one of `plans`; *kind set, *matched a new
   reference (the plan stays alive even if a converter's Python code changes the list). */
static int read_row_value(Decoder *self, PyObject *plans, const char *doc, Py_ssize_t n, RowPlan **matched,
                          int *kind, PyObject **row, PyObject **old)
{
    Cursor c = {doc, doc + n};
    int is_delete;
    if (take(&c, "{\"u\":{", 6))
        is_delete = 0;
    else if (take(&c, "{\"d\":{", 6))
        is_delete = 1;
    else
        return ST_PASS;
    Cursor start = c;
    RowPlan *plan = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(plans); i++) {
        /* one signature per column list, so at most one plan matches every column's bytes */
        PyObject *item = PyList_GET_ITEM(plans, i);
        if (!Py_IS_TYPE(item, &RowPlanType))
            return ST_PASS;
        plan = (RowPlan *)Py_NewRef(item);
        c = start;
        int st = read_image(self, plan, &c, row);
        if (st == ST_OK)
            break;
        Py_CLEAR(plan);
        if (st == ST_ERR)
            return ST_ERR;
    }
    if (plan == NULL)
        return ST_PASS;
    *old = NULL;
    if (!is_delete && take(&c, ",\"p\":{", 6)) {
        Cursor p_start = c;
        int st = read_image(self, plan, &c, old);
        if (st == ST_PASS) {
            c = p_start;
            st = read_partial_image(self, plan, &c, old);
        }
        if (st != ST_OK) {
            Py_DECREF(*row);
            Py_DECREF(plan);
            return st;
        }
        *kind = KIND_UPDATE;
    } else
        *kind = is_delete ? KIND_DELETE : KIND_INSERT;
    if (!(c.p + 1 == c.end && *c.p == '}')) {
        Py_DECREF(*row);
        Py_XDECREF(*old);
        Py_DECREF(plan);
        return ST_PASS;
    }
    *matched = plan;
    return ST_OK;
}

static uint64_t be64(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | u[i];
    return v;
}

/* One `[8-byte big-endian length][payload]` entry at *pos. */
static int frame(const char *buf, Py_ssize_t len, Py_ssize_t *pos, const char **doc, Py_ssize_t *n)
{
    if (len - *pos < 8)
        return 0;
    uint64_t size = be64(buf + *pos);
    if (size > (uint64_t)(len - *pos - 8))
        return 0;
    *doc = buf + *pos + 8;
    *n = (Py_ssize_t)size;
    *pos += 8 + (Py_ssize_t)size;
    return 1;
}

/* Key `{"ts":N<suffix>`: the commit ts and the rest of the document (which names the table). */
static int read_key(const char *doc, Py_ssize_t n, uint64_t *ts, const char **suffix, Py_ssize_t *slen)
{
    Cursor c = {doc, doc + n};
    Number num;
    if (!take(&c, "{\"ts\":", 6) || !scan_number(&c, &num) || !num.is_int || num.negative ||
        !int_magnitude(&num, ts) || c.p >= c.end || *c.p != ',')
        return 0;
    *suffix = c.p;
    *slen = c.end - c.p;
    return 1;
}

/* The RowChange of one row; steals row and old. */
static PyObject *row_change(Decoder *self, RowPlan *plan, int kind, uint64_t ts, PyObject *row, PyObject *old)
{
    PyObject *ts_obj = PyLong_FromUnsignedLongLong(ts);
    PyObject *extra = PyDict_New();
    PyObject *ev = NULL;
    if (ts_obj != NULL && extra != NULL) {
        PyObject *args[6] = {plan->table, self->kinds[kind], ts_obj, row, old ? old : Py_None, extra};
        ev = PyObject_Vectorcall(self->row_change, args, 6, NULL);
    }
    Py_XDECREF(ts_obj);
    Py_XDECREF(extra);
    Py_DECREF(row);
    Py_XDECREF(old);
    return ev;
}

/* The plan list for a key suffix: the previous entry's when the bytes repeat (rows of a batch
   share their table), else a dict lookup. *cache_key / *cache_list hold strong references. */
static int plans_for(Decoder *self, const char *suffix, Py_ssize_t slen, PyObject **cache_key, PyObject **cache_list)
{
    if (*cache_key != NULL && PyBytes_GET_SIZE(*cache_key) == slen &&
        memcmp(PyBytes_AS_STRING(*cache_key), suffix, (size_t)slen) == 0)
        return ST_OK;
    PyObject *key = PyBytes_FromStringAndSize(suffix, slen);
    if (key == NULL)
        return ST_ERR;
    PyObject *list = PyDict_GetItemWithError(self->plans, key);
    if (list == NULL || !PyList_CheckExact(list)) {
        Py_DECREF(key);
        return PyErr_Occurred() ? ST_ERR : ST_PASS;
    }
    Py_XSETREF(*cache_key, key);
    Py_XSETREF(*cache_list, Py_NewRef(list));
    return ST_OK;
}

static int decode_message(Decoder *self, const char *key, Py_ssize_t klen, const char *value, Py_ssize_t vlen,
                          PyObject *events)
{
    static const char RESOLVED_SUFFIX[] = ",\"t\":3}";
    if (klen < 8 || be64(key) != 1)
        return ST_PASS;
    Py_ssize_t kpos = 8, vpos = 0;
    PyObject *cache_key = NULL, *cache_list = NULL;
    int st = ST_OK;
    while (kpos < klen) {
        const char *kdoc, *vdoc, *suffix;
        Py_ssize_t kn, vn, slen;
        uint64_t ts;
        PyObject *ev;
        if (!frame(key, klen, &kpos, &kdoc, &kn) || !read_key(kdoc, kn, &ts, &suffix, &slen)) {
            st = ST_PASS;
            break;
        }
        if (slen == (Py_ssize_t)sizeof RESOLVED_SUFFIX - 1 && memcmp(suffix, RESOLVED_SUFFIX, (size_t)slen) == 0) {
            /* a resolved event's value entry, when there is one, is empty */
            if (vpos < vlen && (!frame(value, vlen, &vpos, &vdoc, &vn) || vn != 0)) {
                st = ST_PASS;
                break;
            }
            PyObject *ts_obj = PyLong_FromUnsignedLongLong(ts);
            if (ts_obj == NULL) {
                st = ST_ERR;
                break;
            }
            ev = PyObject_CallOneArg(self->resolved, ts_obj);
            Py_DECREF(ts_obj);
        } else {
            if ((st = plans_for(self, suffix, slen, &cache_key, &cache_list)) != ST_OK)
                break;
            if (!frame(value, vlen, &vpos, &vdoc, &vn)) {
                st = ST_PASS;
                break;
            }
            RowPlan *plan;
            int kind;
            PyObject *row, *old;
            if ((st = read_row_value(self, cache_list, vdoc, vn, &plan, &kind, &row, &old)) != ST_OK)
                break;
            ev = row_change(self, plan, kind, ts, row, old);
            Py_DECREF(plan);
        }
        if (ev == NULL) {
            st = ST_ERR;
            break;
        }
        int r = PyList_Append(events, ev);
        Py_DECREF(ev);
        if (r < 0) {
            st = ST_ERR;
            break;
        }
    }
    if (st == ST_OK && vpos < vlen)
        st = ST_PASS; /* more value entries than keys */
    Py_XDECREF(cache_key);
    Py_XDECREF(cache_list);
    return st;
}

static PyObject *Decoder_decode(Decoder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "decode(key, value) takes 2 arguments");
        return NULL;
    }
    PyObject *key = args[0], *value = args[1];
    if (!PyBytes_CheckExact(key) || (value != Py_None && !PyBytes_CheckExact(value)))
        Py_RETURN_NONE;
    PyObject *events = PyList_New(0);
    if (events == NULL)
        return NULL;
    int st = decode_message(self, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key),
                            value == Py_None ? "" : PyBytes_AS_STRING(value),
                            value == Py_None ? 0 : PyBytes_GET_SIZE(value), events);
    if (st == ST_OK)
        return events;
    Py_DECREF(events);
    if (st == ST_ERR)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef Decoder_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))Decoder_decode, METH_FASTCALL,
     "decode(key, value) -> list of events, or None: the message is for the Python path."},
    {NULL},
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.connectors.ticdc.open_protocol._open_protocol_decode.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_dealloc = (destructor)Decoder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decoder(plans, RowChange, ResolvedEvent, insert, update, delete): open-protocol messages "
              "of known table signatures -> events.",
    .tp_new = Decoder_new,
    .tp_methods = Decoder_methods,
};

/* ======================================================================== module */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_open_protocol_decode",
    .m_doc = "Compiled fast path of the TiCDC open-protocol decoder (see open_protocol/decode.py).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__open_protocol_decode(void)
{
    if (tidbparse_init() < 0)
        return NULL;
    if (PyType_Ready(&RowPlanType) < 0 || PyType_Ready(&DecoderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    static const struct {
        const char *name;
        int value;
    } kinds[] = {
        {"K_CONV", K_CONV},         {"K_INT", K_INT},           {"K_DOUBLE", K_DOUBLE},
        {"K_FLOAT", K_FLOAT},       {"K_DECIMAL", K_DECIMAL},   {"K_DATE", K_DATE},
        {"K_DATETIME", K_DATETIME}, {"K_TIME", K_TIME},         {"K_STR", K_STR},
        {"K_GO_BYTES", K_GO_BYTES}, {"K_B64_BYTES", K_B64_BYTES}, {"K_B64_TEXT", K_B64_TEXT},
        {"K_ENUM_NAME", K_ENUM_NAME}, {"K_UINT_TEXT", K_UINT_TEXT},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (PyModule_AddIntConstant(m, kinds[i].name, kinds[i].value) < 0)
            goto fail;
    if (PyModule_AddObjectRef(m, "RowPlan", (PyObject *)&RowPlanType) < 0 ||
        PyModule_AddObjectRef(m, "Decoder", (PyObject *)&DecoderType) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
