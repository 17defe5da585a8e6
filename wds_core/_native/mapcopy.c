/* Bytes copied out of a memory map, guarded against SIGBUS (wds_core._native.mapcopy): what indexed access reads local
 * shards with (wds_core/io/localfiles.py local_random_access).  Built by setup.py when a C compiler and Python's headers
 * are there; without it, local shards are read by offset with pread instead (a little slower, as safe).
 *
 * copy(buffer, offset, size) -> bytes | None
 * read_members(buffer, fd, members) -> list[tuple[name, bytes, header]]
 *
 * The bytes [offset, offset + size) of buffer (a map), fewer where it ends (as slicing gives them), or None when
 * reading them raised SIGBUS: the file was cut after it was mapped (../sigbus_guard.c).  The caller then reads
 * those bytes from the file itself, which says where it ends now.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sigbus_guard.h" /* copy_out, guard, import_guard, pread_fully */

/* The bytes [offset, offset + size) of a buffer of len bytes, fewer where it ends, copied out under the guard
 * (entered by the caller): a new bytes object, Py_None (a new reference) when a SIGBUS stopped the copy, NULL on
 * an error (set). */
static PyObject *copied(const char *buf, Py_ssize_t len, Py_ssize_t offset, Py_ssize_t size)
{
    if (offset < 0 || offset > len)
        offset = len;
    if (size < 0)
        size = 0;
    if (size > len - offset)
        size = len - offset;
    PyObject *data = PyBytes_FromStringAndSize(NULL, size);
    if (data == NULL)
        return NULL;
    if (copy_out(PyBytes_AS_STRING(data), buf + offset, (size_t)size) != 0) {
        Py_DECREF(data);
        Py_RETURN_NONE;
    }
    return data;
}

static PyObject *copy(PyObject *self, PyObject *args)
{
    PyObject *bufobj;
    Py_ssize_t offset, size;
    if (!PyArg_ParseTuple(args, "Onn", &bufobj, &offset, &size))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (!guard->enter()) {
        PyBuffer_Release(&view);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *data = copied(view.buf, view.len, offset, size);
    guard->leave();
    PyBuffer_Release(&view);
    return data;
}

/* ``size`` bytes at ``offset`` of the file fd (fewer where it ends), in a new bytes object */
static PyObject *pread_bytes(int fd, Py_ssize_t offset, Py_ssize_t size)
{
    PyObject *data = PyBytes_FromStringAndSize(NULL, size < 0 ? 0 : size);
    if (data == NULL)
        return NULL;
    Py_ssize_t got = pread_fully(fd, PyBytes_AS_STRING(data), size, offset);
    if (got < size && _PyBytes_Resize(&data, got) < 0)
        return NULL;
    return data;
}

/* read_members(buffer, fd, members): (name, bytes, header) of each index row (name, header, data, size) of
 * members, copied out of the map buffer (of the file fd) inside one stretch of the guard (entering and leaving it
 * are a system call each: a sample's members are read together, without a Python call each); a member the map
 * cannot give (the file was cut) is read with pread, which comes back short where the file ends now. */
static PyObject *read_members(PyObject *self, PyObject *args)
{
    PyObject *bufobj, *members;
    int fd;
    if (!PyArg_ParseTuple(args, "OiO", &bufobj, &fd, &members))
        return NULL;
    PyObject *seq = PySequence_Fast(members, "members must be a sequence of index rows");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(count);
    Py_buffer view;
    if (out == NULL || PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0) {
        Py_XDECREF(out);
        Py_DECREF(seq);
        return NULL;
    }
    if (!guard->enter()) {
        PyBuffer_Release(&view);
        Py_DECREF(out);
        Py_DECREF(seq);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    int cut = 0; /* a SIGBUS: the rest is read with pread */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name, *header;
        Py_ssize_t offset, size;
        PyObject *data = NULL, *item = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *fields = PyTuple_Check(item) ? Py_NewRef(item) : PySequence_Tuple(item); /* a list row too */
        int parsed = fields != NULL && PyArg_ParseTuple(fields, "OOnn", &name, &header, &offset, &size);
        if (parsed && !cut && offset >= 0) {
            data = copied(view.buf, view.len, offset, size); /* bytes, None (a SIGBUS) or NULL (an error) */
            if (data == Py_None) {
                Py_CLEAR(data);
                cut = 1;
            } else if (data == NULL) {
                parsed = 0;
            }
        }
        if (parsed && data == NULL)
            data = pread_bytes(fd, offset, size);
        PyObject *row = data == NULL ? NULL : PyTuple_Pack(3, name, data, header);
        Py_XDECREF(data);
        Py_XDECREF(fields);
        if (row == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, row);
    }
    guard->leave();
    PyBuffer_Release(&view);
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"copy", copy, METH_VARARGS, "Bytes of a map as slicing gives them, or None when the file was cut (SIGBUS)."},
    {"read_members", read_members, METH_VARARGS, "(name, bytes, header) of each index row, out of the map."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "mapcopy", NULL, -1, methods};

PyMODINIT_FUNC PyInit_mapcopy(void)
{
    if (import_guard() < 0)
        return NULL;
    return PyModule_Create(&module);
}
