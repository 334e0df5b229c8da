/* recordslots.h: where a __slots__ class (cdcflow.record.Record) keeps its slots.
 *
 * Kernels that make or read Records (the wire Reader and Writer, the JSON-form writer, the CSV
 * records builder) reach the six slots by offset instead of attribute lookups. The offsets come
 * from the class's member descriptors, so a Record that stops being a plain __slots__ class is
 * noticed, and each kernel decides how to say so (an error, or handing the batch back).
 *
 * Static functions only: each kernel compiles its own copy.
 */
#ifndef CDCFLOW_RECORDSLOTS_H
#define CDCFLOW_RECORDSLOTS_H

#include <Python.h>
#include <structmember.h>

/* Fills offsets[i] for names[0..n) and returns n when every name is an object member
 * (T_OBJECT_EX) defined by ``type`` itself and lying inside its instances. Otherwise returns
 * the index of the first name that is not (no exception set; a missing attribute counts as
 * "not"), or -1 with an exception when a lookup failed for another reason. */
static int rs_slot_offsets(PyTypeObject *type, const char *const *names, int n, Py_ssize_t *offsets)
{
    for (int i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttrString((PyObject *)type, names[i]);
        if (d == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return -1;
            PyErr_Clear();
            return i;
        }
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyDescrObject *)d)->d_type == type
                 && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        Py_ssize_t offset = ok ? ((PyMemberDescrObject *)d)->d_member->offset : 0;
        Py_DECREF(d);
        if (!ok || offset < (Py_ssize_t)sizeof(PyObject)
            || offset + (Py_ssize_t)sizeof(PyObject *) > type->tp_basicsize)
            return i;
        offsets[i] = offset;
    }
    return n;
}

#endif
