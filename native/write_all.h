/* The durable write loop of the C helpers: journal._write_sync (native/write_sync.c) and the lone
 * frame's write of journal.engine._zstd_held (native/zstd_held.c) both run it without the GIL, so
 * a failed write and a failed fdatasync are answered the same way on both (journal/fs.py's
 * write_all_synced reads the answers). One copy, included by both. */
#ifndef JOURNAL_WRITE_ALL_H
#define JOURNAL_WRITE_ALL_H

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <sys/types.h>
#include <unistd.h>

/* The answer for a pwrite that wrote nothing: above every errno, so fs.py can raise what
 * write_all raises then (journal/fs.py's _NO_PROGRESS; tests compare them). */
#define NO_PROGRESS 0x10000

/* pwrite all of buf[0, size) at offset: 0, a write's errno or NO_PROGRESS. */
static inline int write_all(int fd, const char *buf, size_t size, long long offset) {
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
            return NO_PROGRESS;
        }
        done += (size_t)n;
    }
    return 0;
}

/* The bytes after the first first_last ones, then those, then an fdatasync: 0, a write's errno
 * or NO_PROGRESS (> 0), or an fdatasync's errno negated (< 0). Runs without the GIL. */
static inline int write_then_sync(int fd, const char *buf, size_t size, long long offset, size_t first_last) {
    if (offset > 0 && (long long)size > LLONG_MAX - offset) {
        return EFBIG; /* the end would not fit an offset: past any file's size */
    }
    size_t head = first_last < size ? first_last : size;
    int rc = write_all(fd, buf + head, size - head, offset + (long long)head);
    if (rc == 0) {
        rc = write_all(fd, buf, head, offset);
    }
    if (rc != 0) {
        return rc;
    }
    while (fdatasync(fd) != 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

#endif
