#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef wire_module = {PyModuleDef_HEAD_INIT, "_wire", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&wire_module); }
