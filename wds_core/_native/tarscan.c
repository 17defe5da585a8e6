/* The common case of a tar walk in C (wds_core._native.tarscan): consecutive plain ustar headers of regular files.
 * Built by setup.py when a C compiler and Python's headers are there; wds_core.tar.tario walks every header in
 * Python without it, and walks in Python whatever this leaves.
 *
 * scan(buf, body, pos, n, base, max_member, out, fd=-1, copy_below=0, budget=-1) -> pos
 *
 * From the header at buf[pos], while the header is one the Python walk would take as a plain regular member,
 * appends (name, body[dpos:dpos + size], base + pos) to the list out and moves pos past the member and its
 * padding.  Returns the position of the first header it leaves to the caller: the first that is not whole in
 * buf[:n], a zero block, a type other than a regular file ('0', NUL, '7'), a size field that is not eleven octal
 * digits, a member larger than max_member or whose data runs past n, or a header whose checksum is not a plain
 * octal number equal to its (unsigned or signed) sum.  What it takes is exactly what tario's walk would take
 * (the same name, data and offset; tests/core/test_fuzz.py compares them); anything else it stops at, so every
 * error keeps being reported by tario, with its wording and offset.
 *
 * buf is any contiguous buffer (bytes, mmap); body is what the members' data are sliced from (buf itself, or a
 * memoryview of the map for views); the data of members smaller than copy_below are bytes copied from buf
 * instead (as tario's walk copies them).  Nothing is read outside buf[:min(n, len(buf))].
 *
 * fd, when buf maps that file from its start, is where headers are read from (WINDOW bytes at a time, with
 * pread): a member's data are then never touched here.  Each first touch of a page of the map is a page fault,
 * which costs several microseconds on a virtual machine, and a header far from the last one almost always
 * lands on a page not touched yet; a read costs a fraction of that, and whoever reads the data (or not: a
 * label, but not the image) pays its own faults.  The small members copied are taken from the bytes read with
 * their header, or read on their own.  A read that fails or comes back short falls back to the map.
 *
 * buf None: the file alone, n its size.  Headers and data are read from fd, every member's data into a bytes
 * object of its own (one copy, the GIL released for large ones); a read that fails or comes back short stops
 * the walk there, for the caller's walk to report.  This is how a local plain shard that cannot be mapped is
 * read (compiled.walk_file); one that can is walked as buf with fd -1 and copy_below past its size, every
 * member copied out of the map (a page fault maps 16 pages at once, where a read looks each page up).
 *
 * budget >= 0: no member is started once pos has moved that many bytes (what out holds stays bounded).
 *
 * Every byte taken from buf (a header, a member's data) is copied out under a guard against SIGBUS (a file cut
 * while it is mapped: ../sigbus_guard.c): the walk then stops at the header whose bytes it could not have, and
 * the caller's walk reads on from there with plain reads and reports the cut with its member and offset.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "sigbus_guard.h" /* copy_out, guard, import_guard, pread_fully, RELEASE_GIL */

#define BLOCK 512
#define WINDOW 8192 /* bytes of headers read at once: a small member's header and the next few */

/* The size field's first eleven bytes as octal digits (tario's fast path reads no more): -1 if they are not. */
static long long octal11(const unsigned char *field)
{
    long long value = 0;
    for (int i = 0; i < 11; i++) {
        if (field[i] < '0' || field[i] > '7')
            return -1;
        value = value * 8 + (field[i] - '0');
    }
    return value;
}

/* headers.checksum_ok: the stored checksum (octal digits up to a NUL, spaces around them) against the unsigned or
 * the signed sum of the header with its checksum field counted as spaces.  A base-256 field is left to Python. */
static int checksum_ok(const unsigned char *h)
{
    const unsigned char *field = h + 148;
    if (field[0] & 0x80)
        return 0;
    int start = 0, stop = 0;
    while (stop < 8 && field[stop] != 0)
        stop++;
    while (start < stop && field[start] == ' ')
        start++;
    while (stop > start && field[stop - 1] == ' ')
        stop--;
    long stored = 0;
    for (int i = start; i < stop; i++) {
        if (field[i] < '0' || field[i] > '7')
            return 0;
        stored = stored * 8 + (field[i] - '0');
    }
    /* the checksum field counts as eight spaces; bytes above 127 count 256 less in the signed sum */
    unsigned long unsigned_sum = 8 * ' ', high = 0;
    for (int i = 0; i < BLOCK; i++) {
        unsigned_sum += h[i];
        high += h[i] >> 7;
    }
    for (int i = 148; i < 156; i++) {
        unsigned_sum -= h[i];
        high -= h[i] >> 7;
    }
    return stored == (long)unsigned_sum || stored == (long)unsigned_sum - 256 * (long)high;
}

/* headers.ustar_name, decoded as tario decodes it (UTF-8, undecodable bytes as surrogates) */
static PyObject *member_name(const unsigned char *h)
{
    const unsigned char *end = memchr(h, 0, 100);
    Py_ssize_t len = end != NULL ? end - h : 100;
    if (h[345] == 0 || memcmp(h + 257, "ustar\0", 6) != 0)
        return PyUnicode_DecodeUTF8((const char *)h, len, "surrogateescape");
    const unsigned char *pend = memchr(h + 345, 0, 155);
    Py_ssize_t plen = pend != NULL ? pend - (h + 345) : 155;
    char joined[155 + 1 + 100];
    memcpy(joined, h + 345, plen);
    joined[plen] = '/';
    memcpy(joined + plen + 1, h, len);
    return PyUnicode_DecodeUTF8(joined, plen + 1 + len, "surrogateescape");
}

/* The bytes [dpos, dpos + size) as a bytes object in *data: from the window when it holds them, else read from
 * fd, else copied from buf.  0 when done, -1 on an error (set), 1 when they cannot be had (no buf and the file
 * ends before them, or the map's file was cut): the walk stops there. */
static int copied(PyObject **data, const unsigned char *buf, Py_ssize_t dpos, Py_ssize_t size, int fd,
                  const unsigned char *window, Py_ssize_t wstart, Py_ssize_t wlen)
{
    if (dpos >= wstart && dpos + size <= wstart + wlen) {
        *data = PyBytes_FromStringAndSize((const char *)window + (dpos - wstart), size);
        return *data == NULL ? -1 : 0;
    }
    *data = PyBytes_FromStringAndSize(NULL, size);
    if (*data == NULL)
        return -1;
    char *into = PyBytes_AS_STRING(*data);
    if (fd >= 0 && pread_fully(fd, into, size, dpos) == size)
        return 0;
    if (buf != NULL && copy_out(into, buf + dpos, (size_t)size) == 0)
        return 0;
    Py_CLEAR(*data);
    return 1;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    PyObject *bufobj, *body, *out;
    Py_ssize_t pos, n, base, max_member, copy_below = 0, budget = -1;
    int fd = -1;
    if (!PyArg_ParseTuple(args, "OOnnnnO!|inn", &bufobj, &body, &pos, &n, &base, &max_member, &PyList_Type, &out,
                          &fd, &copy_below, &budget))
        return NULL;
    const Py_ssize_t start = pos;
    unsigned char window[WINDOW];
    unsigned char header[BLOCK]; /* a header of buf, copied out of it under the guard */
    Py_ssize_t wstart = 0, wlen = 0; /* window holds the file's bytes [wstart, wstart + wlen) */
    Py_buffer view = {0};
    const unsigned char *buf = NULL;
    if (bufobj == Py_None) { /* the file alone: headers and data are read from fd, every member copied */
        if (fd < 0) {
            PyErr_SetString(PyExc_ValueError, "scan without a buffer needs a file descriptor");
            return NULL;
        }
        copy_below = PY_SSIZE_T_MAX;
    } else {
        if (PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        buf = view.buf;
        if (n > view.len)
            n = view.len;
        if (!guard->enter()) {
            PyBuffer_Release(&view);
            return PyErr_SetFromErrno(PyExc_OSError);
        }
    }
    PyObject *result = NULL;
    while (pos >= 0 && pos <= n - BLOCK && (budget < 0 || pos - start < budget)) {
        const unsigned char *h = NULL;
        if (fd >= 0) {
            if (pos < wstart || pos + BLOCK > wstart + wlen) {
                Py_ssize_t want = n - pos < WINDOW ? n - pos : WINDOW;
                ssize_t got;
                do
                    got = pread(fd, window, (size_t)want, (off_t)pos);
                while (got < 0 && errno == EINTR);
                wstart = pos;
                wlen = got > 0 ? got : 0;
            }
            if (pos + BLOCK <= wstart + wlen)
                h = window + (pos - wstart);
        }
        if (h == NULL && buf != NULL) {
            if (guard->copy(header, buf + pos, BLOCK) != 0)
                break; /* the map's file was cut: the caller's walk reads on from here */
            h = header;
        }
        if (h == NULL)
            break; /* the file ends inside the header: the caller's walk reports it */
        unsigned char kind = h[156];
        if (h[0] == 0 || !(kind == '0' || kind == 0 || kind == '7'))
            break;
        long long size = octal11(h + 124);
        Py_ssize_t dpos = pos + BLOCK;
        if (size < 0 || size > max_member || size > n - dpos || !checksum_ok(h))
            break;
        Py_ssize_t next = dpos + (Py_ssize_t)((size + BLOCK - 1) & ~(long long)(BLOCK - 1));
        if (buf == NULL && next > n)
            break; /* the file ends inside the member's padding: the caller's walk reports it */
        PyObject *data = NULL;
        if (size < copy_below) {
            int status = copied(&data, buf, dpos, (Py_ssize_t)size, fd, window, wstart, wlen);
            if (status < 0)
                goto done;
            if (status > 0)
                break;
        } else if ((data = PySequence_GetSlice(body, dpos, dpos + (Py_ssize_t)size)) == NULL) {
            goto done;
        }
        PyObject *name = member_name(h);
        PyObject *offset = name == NULL ? NULL : PyLong_FromSsize_t(base + pos);
        PyObject *item = offset == NULL ? NULL : PyTuple_Pack(3, name, data, offset);
        Py_XDECREF(name);
        Py_XDECREF(offset);
        Py_DECREF(data);
        if (item == NULL)
            goto done;
        int failed = PyList_Append(out, item);
        Py_DECREF(item);
        if (failed)
            goto done;
        pos = next;
    }
    result = PyLong_FromSsize_t(pos);
done:
    if (buf != NULL) {
        guard->leave();
        PyBuffer_Release(&view);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Take consecutive plain regular members into a list; the position where it stopped."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tarscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit_tarscan(void)
{
    if (import_guard() < 0)
        return NULL;
    return PyModule_Create(&module);
}
