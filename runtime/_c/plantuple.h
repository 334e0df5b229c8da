/* plantuple.h: reading the plan tuples Python builds for a kernel.
 *
 * The Avro kernels (decode and encode) take one schema as a flat tuple of node tuples
 * (cdcflow.avro_values.flat_plan): item 0 the node's kind, then ints, names and the indexes of
 * child nodes. A plan is checked once when it is built, never per value, so every read here
 * says what is wrong with which node (ValueError / TypeError) instead of trusting the tuple.
 *
 * Static functions only: each kernel compiles its own copy.
 */
#ifndef CDCFLOW_PLANTUPLE_H
#define CDCFLOW_PLANTUPLE_H

#include <Python.h>

/* entry[i] as an int within [min, max]; -1 with an exception when missing or out of range. */
static int pt_int(PyObject *entry, Py_ssize_t i, long long min, long long max, long long *out)
{
    if (i >= PyTuple_GET_SIZE(entry)) {
        PyErr_Format(PyExc_ValueError, "plan node %R: missing item %zd", entry, i);
        return -1;
    }
    long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, i));
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < min || v > max) {
        PyErr_Format(PyExc_ValueError, "plan node %R: item %zd out of range", entry, i);
        return -1;
    }
    *out = v;
    return 0;
}

/* entry[i], borrowed, of exactly ``type`` unless that is NULL; NULL with an exception otherwise.
 * Exact types: the kernels read tuples and dicts with the unchecked macros. */
static PyObject *pt_item(PyObject *entry, Py_ssize_t i, PyTypeObject *type)
{
    if (i >= PyTuple_GET_SIZE(entry)) {
        PyErr_Format(PyExc_ValueError, "plan node %R: missing item %zd", entry, i);
        return NULL;
    }
    PyObject *v = PyTuple_GET_ITEM(entry, i);
    if (type != NULL && !Py_IS_TYPE(v, type)) {
        PyErr_Format(PyExc_TypeError, "plan node %R: item %zd must be %s", entry, i, type->tp_name);
        return NULL;
    }
    return v;
}

/* ``indexes`` (a tuple of node indexes, each checked against the node count) as a new array in
 * *children (PyMem; at least one slot) and its length in *count. */
static int pt_children(PyObject *indexes, Py_ssize_t n_nodes, Py_ssize_t **children, Py_ssize_t *count)
{
    Py_ssize_t n = PyTuple_GET_SIZE(indexes);
    *children = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Py_ssize_t));
    if (*children == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v;
        if (pt_int(indexes, i, 0, (long long)n_nodes - 1, &v) < 0)
            return -1;
        (*children)[i] = (Py_ssize_t)v;
    }
    *count = n;
    return 0;
}

/* An array's item node or a map's value node: the single child index at entry[i]. */
static int pt_one_child(PyObject *entry, Py_ssize_t i, Py_ssize_t n_nodes, Py_ssize_t **children, Py_ssize_t *count)
{
    long long v;
    if (pt_int(entry, i, 0, (long long)n_nodes - 1, &v) < 0)
        return -1;
    if ((*children = PyMem_Malloc(sizeof(Py_ssize_t))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    (*children)[0] = (Py_ssize_t)v;
    *count = 1;
    return 0;
}

#endif
