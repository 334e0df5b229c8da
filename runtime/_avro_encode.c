/* placeholder: the kernel is being written (see runtime/accel.py) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_avro_encode", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__avro_encode(void) { return PyModule_Create(&module); }
