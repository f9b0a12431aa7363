/* A durable write in one call: journal._write_sync, for journal/fs.py's OsFile.
 *
 * Why: a durable append is a pwrite and an fdatasync. Called one by one from Python, each gives
 * up the GIL and takes it back, and with many threads appending (many sessions in one process,
 * or the callers of one journal's group commit) every give-up lets another thread in: two GIL
 * hand-offs an event, each a context switch. Here both calls run under one release of the GIL.
 * On tmpfs, 64 threads each appending durably to a journal of their own made 3.1 voluntary
 * context switches an event with the two calls and 1.0 with this one (bench/README.md,
 * "Engine changes").
 *
 * write_all_sync(fd, data, offset) -> int does what journal/fs.py's write_all and then
 * OsFile.fdatasync do, which stay as its twin (JOURNAL_PURE=1, no compiler, or a file whose
 * pwrite or fdatasync a test wrapped) and which tests/test_write_sync.py holds it equal to:
 * pwrite until every byte is written (a call interrupted by a signal, EINTR, is made again, as
 * CPython's os.pwrite and os.fdatasync do; a write that makes no progress is ENOSPC), then one
 * fdatasync. It returns 0 when both succeeded, the errno of a failed write as a positive
 * number (nothing was synced: the caller may roll the write back), or the errno of a failed
 * fdatasync as a negative number (the write went through; the caller fails stop, never
 * retries: the kernel may have dropped the pages).
 *
 * The data is held through the buffer protocol while the GIL is released, so it cannot move
 * or be freed meanwhile. It does no other I/O and keeps no state.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <sys/types.h>
#include <unistd.h>

/* 0, a write's errno (> 0) or an fdatasync's errno negated (< 0); runs without the GIL. */
static int write_then_sync(int fd, const char *buf, size_t size, long long offset) {
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(fd, buf + done, size - done, (off_t)(offset + (long long)done));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        }
        if (n == 0) {
            return ENOSPC; /* a short write that made no progress: the disk is full */
        }
        done += (size_t)n;
    }
    while (fdatasync(fd) != 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

/* write_all_sync(fd, data, offset) -> 0, a write's errno, or minus an fdatasync's errno. */
static PyObject *write_all_sync(PyObject *self, PyObject *args) {
    (void)self;
    int fd;
    Py_buffer data;
    long long offset;
    if (!PyArg_ParseTuple(args, "iy*L:write_all_sync", &fd, &data, &offset)) {
        return NULL;
    }
    if (fd < 0 || offset < 0) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "write_all_sync needs a file descriptor and an offset of 0 or more");
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = write_then_sync(fd, (const char *)data.buf, (size_t)data.len, offset);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromLong(rc);
}

static PyMethodDef methods[] = {
    {"write_all_sync", write_all_sync, METH_VARARGS,
     "write_all_sync(fd, data, offset) -> 0, the errno of a failed write, or minus the errno of a failed fdatasync"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_write_sync", "a pwrite and an fdatasync under one release of the GIL (journal/fs.py)",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__write_sync(void) { return PyModule_Create(&module); }
