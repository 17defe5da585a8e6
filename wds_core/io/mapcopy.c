/* Bytes copied out of a memory map, guarded against SIGBUS (wds_core.io.mapcopy): what indexed access reads local
 * shards with (wds_core/io/local.py local_random_access).  Built by setup.py when a C compiler and Python's headers
 * are there; without it, local shards are read by offset with pread instead (a little slower, as safe).
 *
 * copy(buffer, offset, size) -> bytes | None
 *
 * The bytes [offset, offset + size) of buffer (a map), fewer where it ends (as slicing gives them), or None when
 * reading them raised SIGBUS: the file was cut after it was mapped (../sigbus_guard.c).  The caller then reads
 * those bytes from the file itself, which says where it ends now.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../sigbus_guard.h" /* copy_out, guard, import_guard */

static PyObject *copy(PyObject *self, PyObject *args)
{
    PyObject *bufobj;
    Py_ssize_t offset, size;
    if (!PyArg_ParseTuple(args, "Onn", &bufobj, &offset, &size))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (offset < 0 || offset > view.len)
        offset = view.len;
    if (size < 0)
        size = 0;
    if (size > view.len - offset)
        size = view.len - offset;
    PyObject *data = PyBytes_FromStringAndSize(NULL, size);
    if (data == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (!guard->enter()) {
        Py_DECREF(data);
        PyBuffer_Release(&view);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    int status = copy_out(PyBytes_AS_STRING(data), (const char *)view.buf + offset, (size_t)size);
    guard->leave();
    PyBuffer_Release(&view);
    if (status != 0) {
        Py_DECREF(data);
        Py_RETURN_NONE;
    }
    return data;
}

static PyMethodDef methods[] = {
    {"copy", copy, METH_VARARGS, "Bytes of a map as slicing gives them, or None when the file was cut (SIGBUS)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "mapcopy", NULL, -1, methods};

PyMODINIT_FUNC PyInit_mapcopy(void)
{
    if (import_guard() < 0)
        return NULL;
    return PyModule_Create(&module);
}
