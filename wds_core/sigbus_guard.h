/* Copies out of a memory map that survive its file being cut: included by the compiled helpers that read maps
 * (wds_core/tar/tarscan.c, wds_core/io/mapcopy.c), each with its own copy of these functions and its own handler.
 *
 * Reading a page of a map past the end of a file cut after it was mapped (or a page the disk fails to give)
 * raises SIGBUS, which ends the process.  install_guard() installs, once, a handler that jumps back out of a
 * copy made by guarded_copy(), which then says the bytes are not there.  A SIGBUS outside a guarded copy goes to
 * the handler that was there before (another helper's guard, Python's faulthandler), or ends the process as it
 * would have.  A faulthandler enabled after the guard sees a guarded SIGBUS first: it prints its report, then
 * hands the signal back.  The GIL may be released around a guarded copy: the jump is per thread.
 *
 * Included after Python.h (copy_out releases the GIL around large copies).
 */
#ifndef WDS_SIGBUS_GUARD_H
#define WDS_SIGBUS_GUARD_H

#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#define RELEASE_GIL (1 << 16) /* copies (and reads) this large let other threads run meanwhile */

static _Thread_local sigjmp_buf *volatile guarded; /* where a SIGBUS in this thread's guarded copy jumps to */
static struct sigaction before_us;                 /* the SIGBUS handling the guard replaced */
static int guard_installed;

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    sigjmp_buf *jump = guarded;
    if (jump != NULL) {
        guarded = NULL;
        siglongjmp(*jump, 1);
    }
    if (before_us.sa_flags & SA_SIGINFO) {
        before_us.sa_sigaction(sig, info, context);
    } else if (before_us.sa_handler != SIG_DFL && before_us.sa_handler != SIG_IGN) {
        before_us.sa_handler(sig);
    } else { /* the default: the process ends by this signal, as it would have without the guard */
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

/* Installs the handler once (called with the GIL held, so never twice at a time): whether it is there. */
static int install_guard(void)
{
    if (!guard_installed) {
        struct sigaction ours;
        memset(&ours, 0, sizeof ours);
        ours.sa_sigaction = on_sigbus;
        ours.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK; /* NODEFER: a jump out leaves SIGBUS unblocked */
        sigemptyset(&ours.sa_mask);
        if (sigaction(SIGBUS, &ours, &before_us) == 0)
            guard_installed = 1;
    }
    return guard_installed;
}

/* memcpy from a map: 0 when done, -1 when a SIGBUS stopped it (the bytes are not there) */
static int guarded_copy(void *into, const void *from, size_t size)
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

/* guarded_copy, with the GIL released for large copies (a page not in memory yet is read from the disk
 * meanwhile); called with the GIL held */
static int copy_out(void *into, const void *from, size_t size)
{
    int status;
    if (size >= RELEASE_GIL) {
        Py_BEGIN_ALLOW_THREADS
        status = guarded_copy(into, from, size);
        Py_END_ALLOW_THREADS
    } else {
        status = guarded_copy(into, from, size);
    }
    return status;
}

#endif
