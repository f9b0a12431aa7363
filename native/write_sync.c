/* A durable write in one call: journal._write_sync, for journal/fs.py's OsFile.
 *
 * Why: a durable append is a pwrite and an fdatasync. Called one by one from Python, each gives
 * up the GIL and takes it back, and with many threads appending (many sessions in one process,
 * or the callers of one journal's group commit) every give-up lets another thread in: two GIL
 * hand-offs an event, each a context switch. Here both calls run under one release of the GIL.
 * On tmpfs, 64 threads each appending durably to a journal of their own made 3.1 voluntary
 * context switches an event with the two calls and 1.1 with this one (bench/README.md,
 * "Engine changes").
 *
 * write_all_sync(fd, data, offset, first_last) -> int does what journal/fs.py's write_all and
 * then OsFile.fdatasync do, which stay as its twin (JOURNAL_PURE=1, no compiler, or a file
 * whose pwrite or fdatasync a test wrapped) and which tests/test_write_sync.py holds it equal
 * to: pwrite until every byte is written (the first ``first_last`` bytes after the rest, as the
 * writer lays down a batch of several frames: its first header last), then one fdatasync. A
 * call interrupted by a signal (EINTR) is made again, as CPython's os.pwrite and os.fdatasync
 * do, though without running Python's signal handlers in between (they run once the call
 * returns). It returns 0 when both succeeded; the errno of a failed write as a positive
 * number, or NO_PROGRESS for a pwrite that wrote nothing (nothing was synced: the caller may
 * roll the write back); or the errno of a failed fdatasync as a negative number (the write
 * went through; the caller fails stop, never retries: the kernel may have dropped the pages).
 * A bad descriptor or offset is pwrite's to refuse (EBADF, EINVAL), as it is os.pwrite's.
 *
 * The data is held through the buffer protocol while the GIL is released, so it cannot move
 * or be freed meanwhile. It does no other I/O and keeps no state.
 *
 * Built against the limited API of 3.11, whose buffer protocol it uses; on Python 3.10, whose
 * limited API has none, setup.py builds it against the full API (JOURNAL_FULL_API).
 */
#ifndef JOURNAL_FULL_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>


#include "write_all.h"

/* write_all_sync(fd, data, offset, first_last) -> as write_then_sync. */
static PyObject *write_all_sync(PyObject *self, PyObject *args) {
    (void)self;
    int fd;
    Py_buffer data;
    long long offset;
    Py_ssize_t first_last;
    if (!PyArg_ParseTuple(args, "iy*Ln:write_all_sync", &fd, &data, &offset, &first_last)) {
        return NULL;
    }
    if (first_last < 0) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "write_all_sync: first_last is a count of bytes, 0 or more");
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = write_then_sync(fd, (const char *)data.buf, (size_t)data.len, offset, (size_t)first_last);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromLong(rc);
}

static PyMethodDef methods[] = {
    {"write_all_sync", write_all_sync, METH_VARARGS,
     "write_all_sync(fd, data, offset, first_last) -> 0, a failed write's errno or NO_PROGRESS, or minus a failed "
     "fdatasync's errno"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_write_sync", "a pwrite and an fdatasync under one release of the GIL (journal/fs.py)",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__write_sync(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "NO_PROGRESS", NO_PROGRESS) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
