/* An LD_PRELOAD fault injector for tests/test_write_sync.py: pwrite, pwrite64 and fdatasync of
 * the C library, failing on demand. Both of journal's write paths call these same functions
 * (CPython's os.pwrite and os.fdatasync, and native/write_sync.c), so one injected fault hits
 * whichever path runs, and the test holds their outcomes equal.
 *
 * jn_fault_arm(which, pass, times, err): of the calls to ``which`` (1: pwrite and pwrite64,
 * 2: fdatasync) let ``pass`` through, then fail ``times`` of them with errno ``err``; err 0
 * makes a pwrite return 0 (a write that made no progress). Single-threaded use only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/types.h>
#include <unistd.h>

static int armed_which, armed_pass, armed_times, armed_err;

void jn_fault_arm(int which, int pass, int times, int err) {
    armed_which = which;
    armed_pass = pass;
    armed_times = times;
    armed_err = err;
}

/* 1 if this call to ``which`` is to fail. */
static int fires(int which) {
    if (armed_which != which || armed_times <= 0) {
        return 0;
    }
    if (armed_pass > 0) {
        armed_pass--;
        return 0;
    }
    armed_times--;
    return 1;
}

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef int (*fdatasync_fn)(int);

static ssize_t faulty_pwrite(const char *name, int fd, const void *buf, size_t n, off_t off) {
    if (fires(1)) {
        if (armed_err == 0) {
            return 0;
        }
        errno = armed_err;
        return -1;
    }
    pwrite_fn real = (pwrite_fn)dlsym(RTLD_NEXT, name);
    return real(fd, buf, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { return faulty_pwrite("pwrite", fd, buf, n, off); }

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return faulty_pwrite("pwrite64", fd, buf, n, off); }

int fdatasync(int fd) {
    if (fires(2)) {
        errno = armed_err;
        return -1;
    }
    fdatasync_fn real = (fdatasync_fn)dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
