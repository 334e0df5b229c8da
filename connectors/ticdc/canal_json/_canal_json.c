/* _canal_json: the canal-json row message writer (kernel of canal_json.CanalJsonEncoder).
 *
 * Why: the Python fast path builds a dict of texts per row image, serialises it with orjson and
 * rewrites the output to Go's escaping; this writes the message bytes in one pass instead.
 *
 * A Plan is built once per table in Python (canal_json._EncodePlan) from pre-encoded constant
 * JSON fragments and one entry per column (name, its `"name":` key bytes, a value kind, the
 * scale/fsp, the Python formatter, ENUM texts, the unsigned promotion limit). Plan.message(ev, now)
 * returns the message bytes, or None whenever the Python path must decide (partial images,
 * extra metadata, sqlType promotion, a value the formatter rejects, ...): exactly the cases where
 * the generated Python fast path returns None. Plan.run() does the same over a list of events.
 *
 * Also exposes thin entry points of tidbtext.h for tests: _text_of, _json_str, _json_latin1.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "tidbtext.h"

/* column kinds of a plan: tidbtext's TT_K_* plus the canal-only ones below */
#define K_BYTES 20 /* bytes written as its latin-1 text */
#define K_ENUM 21  /* str looked up in the column's {name: index text} dict, else the formatter */
#define K_CALL 22  /* always the Python formatter */

/* what writing one value did */
#define V_OK 0
#define V_BACK 1 /* hand the row back to Python */
#define V_ERR -1

typedef struct {
    PyObject *name;       /* str: the row dict's key */
    PyObject *key;        /* bytes: `"name":` in Go-escaped JSON */
    PyObject *convert;    /* value -> str (canal_json.value_formatter), raises when it does not fit */
    PyObject *enum_texts; /* K_ENUM: {element: index text}; else NULL */
    int kind;
    int param;            /* scale / fsp; -1 for None */
    int promote;          /* 1: an int above `limit` needs the wider sqlType (Python decides) */
    long long limit;
} column_plan;

typedef struct {
    PyObject_HEAD
    PyObject *table;           /* the TableSchema this plan encodes (identity-checked) */
    PyObject *row_change_type; /* events.RowChange */
    PyObject *kinds[3];        /* "insert", "update", "delete" */
    PyObject *prefixes[3];     /* bytes: message start up to `"es":`, per kind */
    PyObject *ts_part;         /* bytes: `,"ts":` */
    PyObject *types_part;      /* bytes: `,"sql":"","sqlType":{..},"mysqlType":{..},"old":` */
    PyObject *data_part;       /* bytes: `,"data":[` */
    PyObject *tail;            /* bytes: `],"_tidb":{"commitTs":` or `]}` */
    int tidb_extension;        /* tail is followed by the commit ts and `}}` */
    int changed_only;          /* old image keeps only the columns whose text changed */
    int busy;                  /* re-entered from a formatter: hand back instead of clobbering scratch */
    Py_ssize_t ncols;
    column_plan *cols;
    Py_ssize_t *data_at;       /* per column: offset of its value text in `data`, -1 for null */
    Py_ssize_t *data_len;
    tt_buf data, old, msg;     /* scratch reused across rows */
} Plan;

/* attribute names of RowChange, interned once at module init */
static PyObject *s_table, *s_kind, *s_commit_ts, *s_row, *s_old, *s_extra;

/* ------------------------------------------------------------------ one value */

/* The Python formatter's text for v, as a JSON string. A formatter error (the value does not fit)
 * hands the row back: the Python path then raises it with the table and column named. */
static int write_converted(tt_buf *b, column_plan *c, PyObject *v)
{
    PyObject *text = PyObject_CallOneArg(c->convert, v);
    if (text == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return V_ERR;
        PyErr_Clear();
        return V_BACK;
    }
    int r = tt_json_str(b, text, TT_JSON_GO);
    Py_DECREF(text);
    return r;
}

/* A text from tidbtext between quotes (those texts need no escaping); TT_PASS leaves b as it was. */
static int write_quoted_text(tt_buf *b, column_plan *c, PyObject *v)
{
    Py_ssize_t mark = b->len;
    if (tt_buf_putc(b, '"') < 0)
        return V_ERR;
    int r = tt_text_of(b, c->kind, v, c->param);
    if (r != TT_OK) {
        b->len = mark;
        return r == TT_ERR ? V_ERR : write_converted(b, c, v);
    }
    return tt_buf_putc(b, '"') < 0 ? V_ERR : V_OK;
}

/* The JSON value of one non-null column value, exactly what the generated Python expression
 * (canal_json._text_expr) gives; V_BACK where that expression fails. */
static int write_value(tt_buf *b, column_plan *c, PyObject *v)
{
    switch (c->kind) {
    case TT_K_INT:
        /* the Python fast path formats every exact int with str(); >64-bit ints go back */
        if (tt_buf_putc(b, '"') < 0)
            return V_ERR;
        {
            int r = tt_text_int(b, v);
            if (r != TT_OK)
                return r;
        }
        return tt_buf_putc(b, '"') < 0 ? V_ERR : V_OK;
    case TT_K_STR:
        return tt_json_str(b, v, TT_JSON_GO);
    case K_BYTES:
        if (!PyBytes_CheckExact(v))
            return V_BACK;
        return tt_json_latin1(b, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), TT_JSON_GO);
    case K_ENUM:
        if (PyUnicode_CheckExact(v)) {
            PyObject *text = PyDict_GetItemWithError(c->enum_texts, v);
            if (text != NULL)
                return tt_json_str(b, text, TT_JSON_GO);
            if (PyErr_Occurred())
                return V_ERR;
        }
        return write_converted(b, c, v);
    case K_CALL:
        return write_converted(b, c, v);
    default:
        return write_quoted_text(b, c, v);
    }
}

/* ------------------------------------------------------------------ row images */

/* An int above the column's signed maximum makes TiCDC write the wider sqlType: the Python
 * general path builds that message. */
static int needs_promotion(column_plan *c, PyObject *v)
{
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    return overflow > 0 || (!overflow && x > c->limit);
}

/* `{"c":"text",...}` of a full row into p->data, recording where each value's text is. */
static int write_data_image(Plan *p, PyObject *row)
{
    tt_buf *b = &p->data;
    if (tt_buf_putc(b, '{') < 0)
        return V_ERR;
    for (Py_ssize_t i = 0; i < p->ncols; i++) {
        column_plan *c = &p->cols[i];
        PyObject *v = PyDict_GetItemWithError(row, c->name);
        if (v == NULL)
            return PyErr_Occurred() ? V_ERR : V_BACK;
        if ((i && tt_buf_putc(b, ',') < 0)
            || tt_buf_put(b, PyBytes_AS_STRING(c->key), PyBytes_GET_SIZE(c->key)) < 0)
            return V_ERR;
        p->data_at[i] = b->len;
        if (v == Py_None) {
            p->data_at[i] = -1;
            if (tt_buf_put(b, "null", 4) < 0)
                return V_ERR;
            continue;
        }
        if (c->promote) {
            int r = needs_promotion(c, v);
            if (r != 0)
                return r < 0 ? V_ERR : V_BACK;
        }
        int r = write_value(b, c, v);
        if (r != V_OK)
            return r;
        p->data_len[i] = b->len - p->data_at[i];
    }
    return tt_buf_putc(b, '}') < 0 ? V_ERR : V_OK;
}

/* The old image into p->old; with changed_only, a column whose text equals the new image's
 * (both null, or the same JSON text: escaping is one-to-one) is left out. */
static int write_old_image(Plan *p, PyObject *old)
{
    tt_buf *b = &p->old;
    int first = 1;
    if (tt_buf_putc(b, '{') < 0)
        return V_ERR;
    for (Py_ssize_t i = 0; i < p->ncols; i++) {
        column_plan *c = &p->cols[i];
        PyObject *v = PyDict_GetItemWithError(old, c->name);
        if (v == NULL)
            return PyErr_Occurred() ? V_ERR : V_BACK;
        Py_ssize_t mark = b->len;
        if ((!first && tt_buf_putc(b, ',') < 0)
            || tt_buf_put(b, PyBytes_AS_STRING(c->key), PyBytes_GET_SIZE(c->key)) < 0)
            return V_ERR;
        Py_ssize_t at = b->len;
        if (v == Py_None) {
            if (p->changed_only && p->data_at[i] < 0) {
                b->len = mark;
                continue;
            }
            if (tt_buf_put(b, "null", 4) < 0)
                return V_ERR;
        } else {
            int r = write_value(b, c, v);
            if (r != V_OK)
                return r;
            if (p->changed_only && p->data_at[i] >= 0 && p->data_len[i] == b->len - at
                && memcmp(p->data.data + p->data_at[i], b->data + at, (size_t)(b->len - at)) == 0) {
                b->len = mark;
                continue;
            }
        }
        first = 0;
    }
    return tt_buf_putc(b, '}') < 0 ? V_ERR : V_OK;
}

/* ------------------------------------------------------------------ one message */

static int put_bytes(tt_buf *b, PyObject *bytes)
{
    return tt_buf_put(b, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
}

/* A non-negative int that fits in 64 bits (commit ts); -1 with no error for anything else. */
static long long small_nonneg(PyObject *v)
{
    if (!PyLong_CheckExact(v))
        return -1;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        PyErr_Clear(); /* not reachable for an exact int; treat as "hand back" */
    return overflow ? -1 : x;
}

static int kind_index(Plan *p, PyObject *kind)
{
    for (int k = 0; k < 3; k++)
        if (kind == p->kinds[k])
            return k;
    if (!PyUnicode_CheckExact(kind))
        return -1;
    for (int k = 0; k < 3; k++)
        if (PyUnicode_Compare(kind, p->kinds[k]) == 0)
            return k;
    return -1;
}

/* Fetch the RowChange fields the message needs; V_BACK for shapes the Python general path decides. */
typedef struct {
    PyObject *row, *old, *extra, *kind, *ts; /* new references */
} row_fields;

static void fields_release(row_fields *f)
{
    Py_XDECREF(f->row);
    Py_XDECREF(f->old);
    Py_XDECREF(f->extra);
    Py_XDECREF(f->kind);
    Py_XDECREF(f->ts);
}

static int fields_get(PyObject *ev, row_fields *f)
{
    memset(f, 0, sizeof *f);
    if ((f->row = PyObject_GetAttr(ev, s_row)) == NULL || (f->old = PyObject_GetAttr(ev, s_old)) == NULL
        || (f->extra = PyObject_GetAttr(ev, s_extra)) == NULL || (f->kind = PyObject_GetAttr(ev, s_kind)) == NULL
        || (f->ts = PyObject_GetAttr(ev, s_commit_ts)) == NULL)
        return V_ERR;
    return V_OK;
}

/* The whole message into p->msg, or V_BACK. */
static int write_message(Plan *p, PyObject *ev, long long now)
{
    row_fields f;
    int r = fields_get(ev, &f);
    if (r != V_OK)
        goto done;
    r = V_BACK;
    if (!PyDict_CheckExact(f.row) || PyDict_GET_SIZE(f.row) != p->ncols)
        goto done;
    int has_extra = PyObject_IsTrue(f.extra);
    if (has_extra != 0) {
        r = has_extra < 0 ? V_ERR : V_BACK;
        goto done;
    }
    long long ts = small_nonneg(f.ts);
    int k = kind_index(p, f.kind);
    if (ts < 0 || k < 0)
        goto done;
    int with_old = k == 1 && f.old != Py_None;
    if (with_old && (!PyDict_CheckExact(f.old) || PyDict_GET_SIZE(f.old) != p->ncols))
        goto done;
    tt_buf_clear(&p->data);
    tt_buf_clear(&p->old);
    tt_buf_clear(&p->msg);
    if ((r = write_data_image(p, f.row)) != V_OK || (with_old && (r = write_old_image(p, f.old)) != V_OK))
        goto done;
    tt_buf *m = &p->msg;
    r = V_ERR;
    if (put_bytes(m, p->prefixes[k]) < 0 || tt_buf_put_i64(m, ts >> 18) < 0 || put_bytes(m, p->ts_part) < 0
        || tt_buf_put_i64(m, now) < 0 || put_bytes(m, p->types_part) < 0)
        goto done;
    if (with_old) {
        if (tt_buf_putc(m, '[') < 0 || tt_buf_put(m, p->old.data, p->old.len) < 0 || tt_buf_putc(m, ']') < 0)
            goto done;
    } else if (tt_buf_put(m, "null", 4) < 0)
        goto done;
    if (put_bytes(m, p->data_part) < 0 || tt_buf_put(m, p->data.data, p->data.len) < 0
        || put_bytes(m, p->tail) < 0)
        goto done;
    if (p->tidb_extension && (tt_buf_put_i64(m, ts) < 0 || tt_buf_put(m, "}}", 2) < 0))
        goto done;
    r = V_OK;
done:
    fields_release(&f);
    return r;
}

/* bytes, Py_None (hand back) or NULL */
static PyObject *plan_encode_one(Plan *p, PyObject *ev, long long now)
{
    if (p->busy)
        Py_RETURN_NONE;
    p->busy = 1;
    int r = write_message(p, ev, now);
    p->busy = 0;
    if (r == V_ERR)
        return NULL;
    if (r == V_BACK)
        Py_RETURN_NONE;
    return tt_buf_bytes(&p->msg);
}

/* `now` as a C integer; 0 (and *ok = 0) when it is not a 64-bit exact int */
static long long now_arg(PyObject *now, int *ok)
{
    *ok = 0;
    if (!PyLong_CheckExact(now))
        return 0;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(now, &overflow);
    if (x == -1 && PyErr_Occurred())
        return 0;
    *ok = !overflow;
    return x;
}

static PyObject *Plan_message(Plan *p, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "message(event, now) takes 2 arguments");
        return NULL;
    }
    int ok;
    long long now = now_arg(args[1], &ok);
    if (PyErr_Occurred())
        return NULL;
    if (!ok || Py_TYPE(args[0]) != (PyTypeObject *)p->row_change_type)
        Py_RETURN_NONE;
    PyObject *table = PyObject_GetAttr(args[0], s_table);
    if (table == NULL)
        return NULL;
    int mine = table == p->table;
    Py_DECREF(table);
    if (!mine)
        Py_RETURN_NONE;
    return plan_encode_one(p, args[0], now);
}

/* run(events, start, now, out, slow) -> index: appends to `out` the message of each event from
 * `start` on while the events are RowChanges of this plan's table; a row handed back is encoded
 * by `slow(event, now)` (the Python path, which may raise). Returns the first index not taken. */
static PyObject *Plan_run(Plan *p, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "run(events: list, start, now, out: list, slow)");
        return NULL;
    }
    PyObject *events = args[0], *out = args[3], *slow = args[4];
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    int now_ok;
    long long now = now_arg(args[2], &now_ok);
    if (PyErr_Occurred())
        return NULL;
    for (; i >= 0 && i < PyList_GET_SIZE(events); i++) {
        PyObject *ev = PyList_GET_ITEM(events, i);
        if (Py_TYPE(ev) != (PyTypeObject *)p->row_change_type)
            break;
        PyObject *table = PyObject_GetAttr(ev, s_table);
        if (table == NULL)
            return NULL;
        int mine = table == p->table;
        Py_DECREF(table);
        if (!mine)
            break;
        Py_INCREF(ev); /* `slow` may change the list */
        PyObject *msg = now_ok ? plan_encode_one(p, ev, now) : Py_NewRef(Py_None);
        if (msg == Py_None) {
            Py_DECREF(msg);
            msg = PyObject_CallFunctionObjArgs(slow, ev, args[2], NULL);
        }
        Py_DECREF(ev);
        if (msg == NULL)
            return NULL;
        int r = PyList_Append(out, msg);
        Py_DECREF(msg);
        if (r < 0)
            return NULL;
    }
    return PyLong_FromSsize_t(i);
}

/* ------------------------------------------------------------------ Plan construction */

static void plan_free_columns(Plan *p)
{
    if (p->cols != NULL) {
        for (Py_ssize_t i = 0; i < p->ncols; i++) {
            Py_XDECREF(p->cols[i].name);
            Py_XDECREF(p->cols[i].key);
            Py_XDECREF(p->cols[i].convert);
            Py_XDECREF(p->cols[i].enum_texts);
        }
        PyMem_Free(p->cols);
        p->cols = NULL;
    }
    PyMem_Free(p->data_at);
    PyMem_Free(p->data_len);
    p->data_at = p->data_len = NULL;
}

/* Plans hold formatters and the TableSchema, none of which refer back to a Plan, so the type
 * takes no part in cyclic GC. */
static void Plan_dealloc(Plan *p)
{
    Py_XDECREF(p->table);
    Py_XDECREF(p->row_change_type);
    for (int k = 0; k < 3; k++) {
        Py_XDECREF(p->kinds[k]);
        Py_XDECREF(p->prefixes[k]);
    }
    Py_XDECREF(p->ts_part);
    Py_XDECREF(p->types_part);
    Py_XDECREF(p->data_part);
    Py_XDECREF(p->tail);
    plan_free_columns(p);
    tt_buf_free(&p->data);
    tt_buf_free(&p->old);
    tt_buf_free(&p->msg);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

/* One column: mirrors the Python NamedTuple canal_json/encode.py KernelColumn, read by position
 * (name: str, key: bytes, kind: int, param: int, convert: callable, enum_texts: dict|None,
 *  promote_limit: int|None). */
static int column_from_tuple(column_plan *c, PyObject *t)
{
    PyObject *name, *key, *convert, *enum_texts, *limit;
    int kind, param;
    if (!PyTuple_Check(t)
        || !PyArg_ParseTuple(t, "UO!iiOOO", &name, &PyBytes_Type, &key, &kind, &param, &convert, &enum_texts,
                             &limit)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a column plan is a tuple");
        return -1;
    }
    if (!PyCallable_Check(convert) || (kind == K_ENUM && !PyDict_CheckExact(enum_texts))) {
        PyErr_SetString(PyExc_TypeError, "column plan: convert must be callable, ENUM texts a dict");
        return -1;
    }
    if (limit != Py_None) {
        c->limit = PyLong_AsLongLong(limit);
        if (c->limit == -1 && PyErr_Occurred())
            return -1;
        c->promote = 1;
    }
    c->name = Py_NewRef(name);
    c->key = Py_NewRef(key);
    c->convert = Py_NewRef(convert);
    c->enum_texts = kind == K_ENUM ? Py_NewRef(enum_texts) : NULL;
    c->kind = kind;
    c->param = param;
    return 0;
}

static int is_bytes_tuple(PyObject *t, Py_ssize_t n)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(t, i)))
            return 0;
    return 1;
}

static PyObject *Plan_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"table", "row_change_type", "kinds", "prefixes", "ts_part", "types_part",
                             "data_part", "tail", "tidb_extension", "changed_only", "columns", NULL};
    PyObject *table, *rc_type, *kinds, *prefixes, *ts_part, *types_part, *data_part, *tail, *columns;
    int tidb_extension, changed_only;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!O!SSSSppO!:Plan", kwlist, &table, &rc_type,
                                     &PyTuple_Type, &kinds, &PyTuple_Type, &prefixes, &ts_part, &types_part,
                                     &data_part, &tail, &tidb_extension, &changed_only, &PyTuple_Type, &columns))
        return NULL;
    if (!PyType_Check(rc_type) || PyTuple_GET_SIZE(kinds) != 3 || !is_bytes_tuple(prefixes, 3)) {
        PyErr_SetString(PyExc_TypeError, "Plan: row_change_type must be a type; kinds and prefixes 3-tuples");
        return NULL;
    }
    for (int k = 0; k < 3; k++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(kinds, k))) {
            PyErr_SetString(PyExc_TypeError, "Plan: kinds must be str");
            return NULL;
        }
    Plan *p = (Plan *)type->tp_alloc(type, 0);
    if (p == NULL)
        return NULL;
    p->table = Py_NewRef(table);
    p->row_change_type = Py_NewRef(rc_type);
    for (int k = 0; k < 3; k++) {
        p->kinds[k] = Py_NewRef(PyTuple_GET_ITEM(kinds, k));
        p->prefixes[k] = Py_NewRef(PyTuple_GET_ITEM(prefixes, k));
    }
    p->ts_part = Py_NewRef(ts_part);
    p->types_part = Py_NewRef(types_part);
    p->data_part = Py_NewRef(data_part);
    p->tail = Py_NewRef(tail);
    p->tidb_extension = tidb_extension;
    p->changed_only = changed_only;
    Py_ssize_t n = PyTuple_GET_SIZE(columns);
    p->cols = PyMem_Calloc(n ? (size_t)n : 1, sizeof(column_plan));
    p->data_at = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_ssize_t));
    p->data_len = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_ssize_t));
    if (p->cols == NULL || p->data_at == NULL || p->data_len == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    /* count columns as they are filled, so dealloc releases exactly those */
    for (Py_ssize_t i = 0; i < n; i++) {
        p->ncols = i;
        if (column_from_tuple(&p->cols[i], PyTuple_GET_ITEM(columns, i)) < 0)
            goto fail;
    }
    p->ncols = n;
    if (tt_buf_init(&p->data, 256) < 0 || tt_buf_init(&p->old, 256) < 0 || tt_buf_init(&p->msg, 1024) < 0)
        goto fail;
    return (PyObject *)p;
fail:
    /* a column parsed only partly holds no references (column_from_tuple takes them last) */
    Py_DECREF(p);
    return NULL;
}

static PyMethodDef Plan_methods[] = {
    {"message", (PyCFunction)(void (*)(void))Plan_message, METH_FASTCALL,
     "message(event, now) -> bytes, or None when the Python path must encode the event"},
    {"run", (PyCFunction)(void (*)(void))Plan_run, METH_FASTCALL,
     "run(events, start, now, out, slow) -> index of the first event not of this plan's table"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcflow.connectors.ticdc.canal_json._canal_json.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_dealloc = (destructor)Plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Per-table canal-json row message writer (see canal_json._EncodePlan).",
    .tp_methods = Plan_methods,
    .tp_new = Plan_new,
};

/* ------------------------------------------------------------------ tidbtext test entry points */

static PyObject *text_of(PyObject *self, PyObject *args)
{
    int kind, param;
    PyObject *v;
    if (!PyArg_ParseTuple(args, "iOi:_text_of", &kind, &v, &param))
        return NULL;
    tt_buf b;
    if (tt_buf_init(&b, 16) < 0)
        return NULL;
    int r = tt_text_of(&b, kind, v, param);
    PyObject *out = r == TT_ERR ? NULL : r == TT_PASS ? Py_NewRef(Py_None)
        : PyUnicode_DecodeUTF8(b.data, b.len, "strict");
    tt_buf_free(&b);
    return out;
}

static PyObject *json_str(PyObject *self, PyObject *args)
{
    int style;
    PyObject *v;
    if (!PyArg_ParseTuple(args, "Oi:_json_str", &v, &style))
        return NULL;
    tt_buf b;
    if (tt_buf_init(&b, 16) < 0)
        return NULL;
    int r = tt_json_str(&b, v, style);
    PyObject *out = r == TT_ERR ? NULL : r == TT_PASS ? Py_NewRef(Py_None) : tt_buf_bytes(&b);
    tt_buf_free(&b);
    return out;
}

static PyObject *json_latin1(PyObject *self, PyObject *args)
{
    int style;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*i:_json_latin1", &data, &style))
        return NULL;
    tt_buf b;
    PyObject *out = NULL;
    if (tt_buf_init(&b, 16) == 0) {
        if (tt_json_latin1(&b, data.buf, data.len, style) == TT_OK)
            out = tt_buf_bytes(&b);
        tt_buf_free(&b);
    }
    PyBuffer_Release(&data);
    return out;
}

static PyMethodDef module_methods[] = {
    {"_text_of", text_of, METH_VARARGS, "_text_of(kind, value, param) -> str, or None (not handled)"},
    {"_json_str", json_str, METH_VARARGS, "_json_str(value, style) -> JSON string bytes, or None"},
    {"_json_latin1", json_latin1, METH_VARARGS, "_json_latin1(data, style) -> JSON string bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_canal_json", "canal-json encode kernel (see canal_json/encode.py)", -1, module_methods,
};

static int add_int(PyObject *m, const char *name, long v)
{
    return PyModule_AddIntConstant(m, name, v);
}

PyMODINIT_FUNC PyInit__canal_json(void)
{
    if (tt_init() < 0)
        return NULL;
    if ((s_table = PyUnicode_InternFromString("table")) == NULL
        || (s_kind = PyUnicode_InternFromString("kind")) == NULL
        || (s_commit_ts = PyUnicode_InternFromString("commit_ts")) == NULL
        || (s_row = PyUnicode_InternFromString("row")) == NULL
        || (s_old = PyUnicode_InternFromString("old")) == NULL
        || (s_extra = PyUnicode_InternFromString("extra")) == NULL)
        return NULL;
    if (PyType_Ready(&PlanType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Plan", (PyObject *)&PlanType) < 0
        || add_int(m, "K_INT", TT_K_INT) < 0 || add_int(m, "K_STR", TT_K_STR) < 0
        || add_int(m, "K_DECIMAL", TT_K_DECIMAL) < 0 || add_int(m, "K_DATETIME", TT_K_DATETIME) < 0
        || add_int(m, "K_DATE", TT_K_DATE) < 0 || add_int(m, "K_TIME", TT_K_TIME) < 0
        || add_int(m, "K_FLOAT", TT_K_FLOAT) < 0 || add_int(m, "K_GO_FLOAT", TT_K_GO_FLOAT) < 0
        || add_int(m, "K_BOOL", TT_K_BOOL) < 0 || add_int(m, "K_BYTES", K_BYTES) < 0
        || add_int(m, "K_ENUM", K_ENUM) < 0 || add_int(m, "K_CALL", K_CALL) < 0
        || add_int(m, "JSON_ORJSON", TT_JSON_ORJSON) < 0 || add_int(m, "JSON_GO", TT_JSON_GO) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
