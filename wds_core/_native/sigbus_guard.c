/* The process's one guard against SIGBUS in copies out of a memory map (wds_core._native.sigbus_guard), for the compiled
 * helpers that read maps (wds_core/_native/tarscan.c, wds_core/_native/mapcopy.c), which reach it through the capsule
 * declared in sigbus_guard.h.
 *
 * Reading a page of a map past the end of a file cut after it was mapped (or a page the disk fails to give)
 * raises SIGBUS, which ends the process.  A helper brackets its copies with enter() and leave(); copy() is a
 * memcpy that a SIGBUS jumps back out of, saying the bytes are not there.
 *
 * The handler is installed by the first enter() and the handling it replaced is put back by the last leave(), so
 * the guard is there exactly while a helper copies out of a map, whatever was set in between: a DataLoader worker
 * forked from a process that had read a shard (torch's worker loop sets its own SIGBUS handler), an application's
 * signal.signal(SIGBUS, ...), faulthandler.  Outside those copies wds leaves SIGBUS as it finds it.  A SIGBUS
 * while the guard is there that is not in a guarded copy of this thread (another thread's fault, a kill) goes
 * where it would have gone without wds: the replaced handling is put back and the signal delivered to it again.
 * A child forked while a copy ran (in another thread: fork holds the GIL) puts the replaced handling back.
 *
 * Why one guard for the process, not one per helper: each helper with its own handler took the other's for the
 * one it replaced, and a helper that installed its handler again after the other had would chain the two in a
 * circle, a SIGBUS outside the copies going round it for ever.
 *
 * enter() and leave() are called with the GIL held (so never two at a time); copy() may run with it released:
 * where a SIGBUS jumps to is per thread.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#define WDS_SIGBUS_GUARD_OWNER
#include "sigbus_guard.h"

static _Thread_local sigjmp_buf *volatile guarded; /* where a SIGBUS in this thread's guarded copy jumps to */
static struct sigaction replaced;                  /* the SIGBUS handling the guard replaced while it is there */
static int copying;                                /* helpers between enter() and leave() */
static int at_fork_set;

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    (void)context;
    sigjmp_buf *jump = guarded;
    if (jump != NULL) {
        guarded = NULL;
        siglongjmp(*jump, 1);
    }
    /* not ours: the handling that was there takes it.  A fault comes back when the instruction runs again; a
     * signal sent (kill, raise: si_code <= 0) is sent again */
    sigaction(SIGBUS, &replaced, NULL);
    if (info == NULL || info->si_code <= 0)
        raise(sig);
}

static int ours_installed(void)
{
    struct sigaction now;
    if (sigaction(SIGBUS, NULL, &now) != 0)
        return 0;
    return (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigbus;
}

static void put_back(void)
{
    struct sigaction was;
    if (sigaction(SIGBUS, &replaced, &was) != 0)
        return;
    if (!((was.sa_flags & SA_SIGINFO) && was.sa_sigaction == on_sigbus))
        sigaction(SIGBUS, &was, NULL); /* someone set their own while the guard was there: theirs stays */
}

static void in_forked_child(void)
{
    if (copying > 0) {
        copying = 0;
        put_back();
    }
}

/* The guard on until leave(): 1, or 0 with errno set when the handler could not be installed. */
static int enter(void)
{
    if (copying > 0) {
        copying++;
        return 1;
    }
    if (!at_fork_set) {
        if (pthread_atfork(NULL, NULL, in_forked_child) != 0)
            return 0;
        at_fork_set = 1;
    }
    /* with no copy going on, the handler is never ours (leave() and a fork put back what it replaced) */
    struct sigaction ours;
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = on_sigbus;
    ours.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK; /* NODEFER: a jump out leaves SIGBUS unblocked */
    sigemptyset(&ours.sa_mask);
    if (sigaction(SIGBUS, &ours, &replaced) != 0)
        return 0;
    copying = 1;
    return 1;
}

static void leave(void)
{
    if (copying > 0 && --copying == 0)
        put_back();
}

/* memcpy from a map: 0 when done, -1 when a SIGBUS stopped it (the bytes are not there); between enter() and
 * leave() */
static int copy(void *into, const void *from, size_t size)
{
    sigjmp_buf here;
    if (sigsetjmp(here, 0) != 0)
        return -1;
    guarded = &here;
    atomic_signal_fence(memory_order_seq_cst);
    memcpy(into, from, size);
    atomic_signal_fence(memory_order_seq_cst);
    guarded = NULL;
    return 0;
}

static const WdsSigbusGuard api = {enter, leave, copy};

static PyObject *status(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("{s:i,s:O}", "copying", copying, "installed", ours_installed() ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"status", status, METH_NOARGS, "{'copying': helpers inside a guarded stretch, 'installed': the handler is ours}"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "sigbus_guard", NULL, -1, methods};

PyMODINIT_FUNC PyInit_sigbus_guard(void)
{
    PyObject *created = PyModule_Create(&module);
    if (created == NULL)
        return NULL;
    PyObject *capsule = PyCapsule_New((void *)&api, WDS_SIGBUS_GUARD_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(created, "_api", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(created);
        return NULL;
    }
    return created;
}
