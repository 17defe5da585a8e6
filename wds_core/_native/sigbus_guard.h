/* Copies out of a memory map that survive its file being cut, for the compiled helpers that read maps
 * (wds_core/_native/tarscan.c, wds_core/_native/mapcopy.c): the process's one guard, wds_core._native.sigbus_guard
 * (sigbus_guard.c says how it works), reached through a capsule.
 *
 * A helper calls import_guard() when its module is created (failing, the module does not import and Python reads
 * without it), brackets its copies with guard->enter() (0: errno says why) and guard->leave(), and copies with
 * copy_out(), which says -1 when the bytes are not there; pread_fully() reads such bytes from the file itself.
 *
 * Included after Python.h (copy_out releases the GIL around large copies).
 */
#ifndef WDS_SIGBUS_GUARD_H
#define WDS_SIGBUS_GUARD_H

#include <stddef.h>

#define WDS_SIGBUS_GUARD_CAPSULE "wds_core._native.sigbus_guard._api"
#define RELEASE_GIL (1 << 16) /* copies (and reads) this large let other threads run meanwhile */

typedef struct {
    int (*enter)(void);                                  /* the guard on for this process's copies: 1, or 0 */
    void (*leave)(void);                                 /* one enter() done with */
    int (*copy)(void *into, const void *from, size_t n); /* memcpy: 0, or -1 when a SIGBUS stopped it */
} WdsSigbusGuard;

#ifndef WDS_SIGBUS_GUARD_OWNER
#include <errno.h>
#include <unistd.h>

static const WdsSigbusGuard *guard;

/* (the module by its full name, not PyCapsule_Import: that takes the attributes of a package still importing) */
static int import_guard(void)
{
    PyObject *owner = PyImport_ImportModule("wds_core._native.sigbus_guard");
    PyObject *capsule = owner == NULL ? NULL : PyObject_GetAttrString(owner, "_api");
    Py_XDECREF(owner);
    if (capsule != NULL)
        guard = (const WdsSigbusGuard *)PyCapsule_GetPointer(capsule, WDS_SIGBUS_GUARD_CAPSULE);
    Py_XDECREF(capsule);
    return guard == NULL ? -1 : 0;
}

/* A guarded copy, with the GIL released for large ones (a page not in memory yet is read from the disk
 * meanwhile); called with the GIL held, between guard->enter() and guard->leave() */
static int copy_out(void *into, const void *from, size_t size)
{
    int status;
    if (size >= RELEASE_GIL) {
        Py_BEGIN_ALLOW_THREADS
        status = guard->copy(into, from, size);
        Py_END_ALLOW_THREADS
    } else {
        status = guard->copy(into, from, size);
    }
    return status;
}

/* What stands in for a copy the map cannot give: up to size bytes at offset of the file fd with pread, reading on
 * after EINTR (a profiler's timer), the GIL released for large reads; called with the GIL held.  How many bytes
 * there were: fewer where the file ends (now), or on an error. */
static Py_ssize_t pread_fully(int fd, char *into, Py_ssize_t size, Py_ssize_t offset)
{
    Py_ssize_t got = 0;
    while (offset >= 0 && got < size) {
        ssize_t n;
        if (size >= RELEASE_GIL) {
            Py_BEGIN_ALLOW_THREADS
            n = pread(fd, into + got, (size_t)(size - got), (off_t)(offset + got));
            Py_END_ALLOW_THREADS
        } else {
            n = pread(fd, into + got, (size_t)(size - got), (off_t)(offset + got));
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += n;
    }
    return got;
}
#endif

#endif
