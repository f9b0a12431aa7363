/* zstd compression of one small payload with the GIL held: journal.engine._zstd_held; and
 * frame_write_sync, the one call here that releases it (a lone durable record's compression,
 * frame, write and fdatasync in the release its I/O makes anyway; see that function).
 *
 * Why: the zstandard package releases the GIL around every compress call. For a payload of a
 * few hundred bytes the work takes a few microseconds, but giving the GIL up and taking it back
 * costs a wait behind every other runnable thread: with 64 sessions appending from 64 threads,
 * that wait made compression cost about five times its own CPU per event. Holding the GIL for a
 * short call costs the other threads nothing they could have used (Python work needs the GIL,
 * and I/O releases it on its own). Payloads above HELD_INPUT_BYTES_MAX still go through the
 * zstandard package, which lets other threads run during a long call.
 *
 * The library is the system's libzstd, opened at import with dlopen: the module needs no zstd
 * headers to build and links nothing at build time. Where libzstd is missing (or older than
 * 1.4.0, which made the ZSTD_compress2 API stable) the import fails and journal compresses with
 * the zstandard package alone. The frames are standard zstd frames either way, without content
 * size, checksum or dictionary id (the journal frame carries those), and any zstd decoder reads
 * them: the bytes may differ from the zstandard package's bundled library, the payload may not.
 *
 * Both take a zstd level, HELD_LEVEL unless told: a record framed alone is compressed at
 * journal/engine/encoding.py's ZSTD_LEVEL, a block frame (many records compressed as one) at its
 * BLOCK_ZSTD_LEVEL, which may differ (a block is larger, and finds more in a slower search).
 *
 * A trained dictionary (journal/engine/dictionary.py) takes the same path: make_cdict digests it
 * once into a CDict (zstd's tables for it at one level, kept in a capsule), and compress_with
 * compresses a payload against that CDict (its frames, alone, carry zstd's content checksum: with
 * a dictionary file other than the one a frame was compressed with, it is what fails). With one, a
 * small record costs fewer instructions than without (the entropy tables come from the dictionary
 * instead of being built for each record: some 53,000 Ir against 84,000 for the benchmark's
 * events, bench/README.md) and the zstandard package's dictionary path would hand the GIL over
 * around each call, as above.
 *
 * One compression context serves the whole process, and a second one the dictionary calls: every
 * call holds the GIL from start to end, so no two calls ever use either at once. The plain
 * context's level is set again only when a call asks for another than the last one did (a stored
 * parameter, read when the next frame starts); a CDict fixes its own level, so the dictionary
 * context follows whichever CDict a call brings. (This is also why the module is for GIL builds of CPython
 * only; it is built against the limited API of 3.11, whose buffer protocol it uses; on Python
 * 3.10, whose limited API has none, setup.py builds it against the full API: JOURNAL_FULL_API.)
 */
#ifndef JOURNAL_FULL_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "journal_native.h"
#include "write_all.h"

#ifdef Py_GIL_DISABLED
#error "zstd_held keeps one context per process and relies on the GIL to serialize its calls"
#endif

/* journal/engine/encoding.py's HELD_COMPRESS_BYTES_MAX (tests compare them). */
#define HELD_INPUT_BYTES_MAX (16 * 1024)
#define HELD_LEVEL 1 /* journal/engine/encoding.py's ZSTD_LEVEL (tests compare them) */
#define ZSTD_VERSION_MIN 10400 /* 1.4.0: ZSTD_compress2 and ZSTD_CCtx_setParameter are stable */
/* journal/engine/dictionary.py's DICTIONARY_BYTES_MAX (tests compare them): what one CDict holds. */
#define DICT_BYTES_MAX (1024 * 1024)
#define CDICT_CAPSULE "journal.engine._zstd_held.cdict"

/* The stable zstd API, declared here by hand (its enum values are fixed by zstd.h's "stable
 * API" section and have never changed). */
enum {
    ZSTD_C_COMPRESSION_LEVEL = 100,
    ZSTD_C_CONTENT_SIZE_FLAG = 200,
    ZSTD_C_CHECKSUM_FLAG = 201,
    ZSTD_C_DICT_ID_FLAG = 202,
};
typedef struct zstd_cctx zstd_cctx;
typedef struct zstd_cdict zstd_cdict;
typedef unsigned (*version_fn)(void);
typedef zstd_cctx *(*create_fn)(void);
typedef size_t (*free_fn)(zstd_cctx *);
typedef size_t (*set_parameter_fn)(zstd_cctx *, int, int);
typedef size_t (*compress2_fn)(zstd_cctx *, void *, size_t, const void *, size_t);
typedef size_t (*bound_fn)(size_t);
typedef unsigned (*is_error_fn)(size_t);
typedef const char *(*error_name_fn)(size_t);
typedef zstd_cdict *(*create_cdict_fn)(const void *, size_t, int);
typedef size_t (*free_cdict_fn)(zstd_cdict *);
typedef size_t (*ref_cdict_fn)(zstd_cctx *, const zstd_cdict *);
typedef int (*level_bound_fn)(void);

static compress2_fn zstd_compress2;
static is_error_fn zstd_is_error;
static error_name_fn zstd_error_name;
static create_cdict_fn zstd_create_cdict;
static free_cdict_fn zstd_free_cdict;
static ref_cdict_fn zstd_ref_cdict;
static set_parameter_fn zstd_set_parameter;
static zstd_cctx *cctx;
static int cctx_level;                 /* the level cctx is set to */
static int level_min;                  /* ZSTD_minCLevel(): the fastest level (negative) */
static int level_max;                  /* ZSTD_maxCLevel() */
static zstd_cctx *dict_cctx;           /* the dictionary calls' context */
static const zstd_cdict *dict_cctx_ref; /* the CDict dict_cctx refers to now (NULL: none) */
static char *scratch;      /* the compressed bytes, copied out into a new bytes object */
static size_t scratch_cap; /* ZSTD_compressBound(HELD_INPUT_BYTES_MAX) */
static unsigned library_version;
static create_fn zstd_create;
static free_fn zstd_free;
static bound_fn zstd_bound;
static int plain_level; /* the level of a lone frame: open_library's (HELD_LEVEL) */

/* frame_write_sync's contexts: one is taken for a compression and given back before the write,
 * so a pool holds about as many as compressions run at once (the CPU cores), whatever the
 * number of threads appending. More than POOL_CONTEXTS_MAX given back are freed. Guarded by
 * pool_mu, not the GIL: they are taken and given back with the GIL released. A plain context
 * (no dictionary) and a dictionary one differ in their checksum flag, hence two pools. */
#define POOL_CONTEXTS_MAX 8
typedef struct {
    zstd_cctx *free[POOL_CONTEXTS_MAX];
    int count;
    int checksum; /* ZSTD_C_CHECKSUM_FLAG of its contexts */
} context_pool;
static context_pool plain_pool = {{NULL}, 0, 0};
static context_pool dict_pool = {{NULL}, 0, 1};
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static int pool_fork_handlers; /* pthread_atfork done (once per process) */

/* A fork while another thread held pool_mu would leave it locked for ever in the child, whose
 * next lone append would then hang: the forking thread takes it first (the holders never wait
 * for anything while they hold it) and both sides let it go after. */
static void pool_before_fork(void) { pthread_mutex_lock(&pool_mu); }
static void pool_after_fork(void) { pthread_mutex_unlock(&pool_mu); }

/* Look ``name`` up in ``lib`` and store it in the function pointer at ``out`` (of ``size``
 * bytes). The address is copied, not cast: ISO C has no conversion from void * to a function
 * pointer, and POSIX guarantees the representations match. */
static int bind(void *lib, const char *name, void *out, size_t size) {
    void *p = dlsym(lib, name);
    if (p == NULL || size != sizeof p) {
        PyErr_Format(PyExc_ImportError, "libzstd has no %s", name);
        return -1;
    }
    memcpy(out, &p, size);
    return 0;
}

static int set_parameter(set_parameter_fn set, zstd_cctx *on, int param, int value) {
    size_t rc = set(on, param, value);
    if (zstd_is_error(rc)) {
        PyErr_Format(PyExc_ImportError, "libzstd refused parameter %d = %d: %s", param, value, zstd_error_name(rc));
        return -1;
    }
    return 0;
}

/* Open libzstd (kept open for the life of the process once this succeeds) and make the one
 * context; ImportError if it cannot, with nothing left allocated or open. Another import of the
 * module after a success finds the context made and keeps it. */
static int open_library(int level) {
    if (cctx != NULL) {
        return 0;
    }
    static const char *const names[] = {"libzstd.so.1", "libzstd.1.dylib", "libzstd.so"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && lib == NULL; i++) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    }
    if (lib == NULL) {
        PyErr_SetString(PyExc_ImportError, "no libzstd on this system (libzstd.so.1)");
        return -1;
    }
    version_fn version;
    create_fn create;
    free_fn release = NULL;
    set_parameter_fn set;
    bound_fn bound;
    level_bound_fn min_level;
    level_bound_fn max_level;
    zstd_cctx *made = NULL;
    zstd_cctx *made_dict = NULL;
    if (bind(lib, "ZSTD_versionNumber", &version, sizeof version) || bind(lib, "ZSTD_createCCtx", &create, sizeof create) ||
        bind(lib, "ZSTD_freeCCtx", &release, sizeof release) ||
        bind(lib, "ZSTD_CCtx_setParameter", &set, sizeof set) || bind(lib, "ZSTD_compressBound", &bound, sizeof bound) ||
        bind(lib, "ZSTD_compress2", &zstd_compress2, sizeof zstd_compress2) ||
        bind(lib, "ZSTD_isError", &zstd_is_error, sizeof zstd_is_error) ||
        bind(lib, "ZSTD_getErrorName", &zstd_error_name, sizeof zstd_error_name) ||
        bind(lib, "ZSTD_createCDict", &zstd_create_cdict, sizeof zstd_create_cdict) ||
        bind(lib, "ZSTD_freeCDict", &zstd_free_cdict, sizeof zstd_free_cdict) ||
        bind(lib, "ZSTD_CCtx_refCDict", &zstd_ref_cdict, sizeof zstd_ref_cdict) ||
        bind(lib, "ZSTD_minCLevel", &min_level, sizeof min_level) ||
        bind(lib, "ZSTD_maxCLevel", &max_level, sizeof max_level)) {
        goto fail;
    }
    library_version = version();
    if (library_version < ZSTD_VERSION_MIN) {
        PyErr_Format(PyExc_ImportError, "libzstd %u is older than 1.4.0", library_version);
        goto fail;
    }
    level_min = min_level();
    level_max = max_level();
    if (level < level_min || level > level_max) {
        PyErr_Format(PyExc_ImportError, "libzstd has no level %d", level);
        goto fail;
    }
    made = create();
    made_dict = create();
    scratch_cap = bound(HELD_INPUT_BYTES_MAX);
    scratch = malloc(scratch_cap);
    if (made == NULL || made_dict == NULL || scratch == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    /* Both contexts write frames without content size, checksum or dictionary id (the journal
     * frame carries those), but for the checksum below. With a CDict referenced, its level is
     * the one used. */
    zstd_cctx *const contexts[] = {made, made_dict};
    for (size_t i = 0; i < 2; i++) {
        if (set_parameter(set, contexts[i], ZSTD_C_COMPRESSION_LEVEL, level) ||
            set_parameter(set, contexts[i], ZSTD_C_CONTENT_SIZE_FLAG, 0) ||
            set_parameter(set, contexts[i], ZSTD_C_CHECKSUM_FLAG, 0) ||
            set_parameter(set, contexts[i], ZSTD_C_DICT_ID_FLAG, 0)) {
            goto fail;
        }
    }
    /* With a dictionary, zstd's content checksum (4 bytes of the raw bytes' XXH64) is written:
     * it is what tells a dictionary file other than the one a frame was compressed with, which
     * may otherwise decode to other bytes of the right length (docs/FORMAT.md, "Dictionaries"). */
    if (set_parameter(set, made_dict, ZSTD_C_CHECKSUM_FLAG, 1)) {
        goto fail;
    }
    cctx = made;
    cctx_level = level;
    plain_level = level;
    zstd_create = create;
    zstd_free = release;
    zstd_bound = bound;
    dict_cctx = made_dict;
    zstd_set_parameter = set;
    return 0;
fail:
    if (made != NULL && release != NULL) {
        release(made);
    }
    if (made_dict != NULL && release != NULL) {
        release(made_dict);
    }
    cctx = NULL;
    dict_cctx = NULL;
    free(scratch);
    scratch = NULL;
    dlclose(lib);
    return -1;
}

/* The level argument ``arg`` of ``func`` into ``*level``: -1 with a TypeError or ValueError set if
 * it is no int or a level libzstd does not have (zstd would quietly clamp it). */
static int level_of(PyObject *arg, const char *func, int *level) {
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (v < level_min || v > level_max) {
        PyErr_Format(PyExc_ValueError, "%s: level %ld is not one of libzstd's (%d to %d)", func, v, level_min,
                     level_max);
        return -1;
    }
    *level = (int)v;
    return 0;
}

/* The (data[, level]) arguments of ``func``: -1 with a TypeError set if there are not 1 or 2. */
static int data_and_level(PyObject *const *args, Py_ssize_t nargs, const char *func, int *level) {
    if (nargs != 1 && nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s takes the data and an optional level (1 or 2 arguments), not %zd", func,
                     nargs);
        return -1;
    }
    *level = HELD_LEVEL;
    return nargs == 2 ? level_of(args[1], func, level) : 0;
}

/* compress(data[, level]) -> bytes: one zstd frame of data (at most HELD_INPUT_BYTES_MAX bytes)
 * at ``level`` (HELD_LEVEL if not given). */
static PyObject *held_compress(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int level;
    if (data_and_level(args, nargs, "compress", &level) != 0) {
        return NULL;
    }
    Py_buffer in;
    if (PyObject_GetBuffer(args[0], &in, PyBUF_SIMPLE) != 0) {
        return NULL;
    }
    PyObject *out = NULL;
    if (in.len > HELD_INPUT_BYTES_MAX) {
        PyErr_Format(PyExc_ValueError, "%zd bytes is more than the %d this compressor takes", in.len,
                     HELD_INPUT_BYTES_MAX);
    } else {
        size_t n = 0;
        if (level != cctx_level) {
            n = zstd_set_parameter(cctx, ZSTD_C_COMPRESSION_LEVEL, level);
            /* On a refusal the context keeps the level it had: cctx_level stays true to it. */
            cctx_level = zstd_is_error(n) ? cctx_level : level;
        }
        if (!zstd_is_error(n)) {
            n = zstd_compress2(cctx, scratch, scratch_cap, in.buf, (size_t)in.len);
        }
        if (zstd_is_error(n)) {
            PyErr_Format(PyExc_RuntimeError, "zstd compression failed: %s", zstd_error_name(n));
        } else {
            out = PyBytes_FromStringAndSize(scratch, (Py_ssize_t)n);
        }
    }
    PyBuffer_Release(&in);
    return out;
}

static void cdict_free(PyObject *capsule) {
    zstd_cdict *cd = PyCapsule_GetPointer(capsule, CDICT_CAPSULE);
    if (cd == NULL) {
        PyErr_Clear(); /* a destructor has no caller to report to; the capsule was made here */
        return;
    }
    if (dict_cctx_ref == cd) {
        /* The context must not keep pointing at freed tables: the next call refers afresh. */
        zstd_ref_cdict(dict_cctx, NULL);
        dict_cctx_ref = NULL;
    }
    zstd_free_cdict(cd);
}

/* make_cdict(data[, level]) -> capsule: the dictionary ``data`` (at most DICT_BYTES_MAX bytes)
 * digested for ``level`` (HELD_LEVEL if not given), for compress_with: every frame compressed
 * with it is at that level. zstd copies the bytes, so the caller's buffer may go. */
static PyObject *held_make_cdict(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int level;
    if (data_and_level(args, nargs, "make_cdict", &level) != 0) {
        return NULL;
    }
    Py_buffer in;
    if (PyObject_GetBuffer(args[0], &in, PyBUF_SIMPLE) != 0) {
        return NULL;
    }
    PyObject *out = NULL;
    if (in.len > DICT_BYTES_MAX) {
        PyErr_Format(PyExc_ValueError, "a dictionary of %zd bytes is more than the %d this compressor takes", in.len,
                     DICT_BYTES_MAX);
    } else {
        zstd_cdict *cd = zstd_create_cdict(in.buf, (size_t)in.len, level);
        if (cd == NULL) {
            PyErr_SetString(PyExc_MemoryError, "zstd could not make the dictionary's tables");
        } else {
            out = PyCapsule_New(cd, CDICT_CAPSULE, cdict_free);
            if (out == NULL) {
                zstd_free_cdict(cd);
            }
        }
    }
    PyBuffer_Release(&in);
    return out;
}

/* compress_with(cdict, data) -> bytes: one zstd frame of data (at most HELD_INPUT_BYTES_MAX
 * bytes) against the dictionary of ``cdict`` (a make_cdict capsule). */
static PyObject *held_compress_with(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "compress_with takes a dictionary and the data (2 arguments), not %zd", nargs);
        return NULL;
    }
    if (!PyCapsule_IsValid(args[0], CDICT_CAPSULE)) {
        PyErr_SetString(PyExc_TypeError, "compress_with takes a dictionary made by make_cdict first");
        return NULL;
    }
    zstd_cdict *cd = PyCapsule_GetPointer(args[0], CDICT_CAPSULE);
    if (cd == NULL) {
        return NULL;
    }
    Py_buffer in;
    if (PyObject_GetBuffer(args[1], &in, PyBUF_SIMPLE) != 0) {
        return NULL;
    }
    PyObject *out = NULL;
    if (in.len > HELD_INPUT_BYTES_MAX) {
        PyErr_Format(PyExc_ValueError, "%zd bytes is more than the %d this compressor takes", in.len,
                     HELD_INPUT_BYTES_MAX);
    } else {
        size_t n = 0;
        if (dict_cctx_ref != cd) {
            n = zstd_ref_cdict(dict_cctx, cd);
            dict_cctx_ref = zstd_is_error(n) ? NULL : cd;
        }
        if (!zstd_is_error(n)) {
            n = zstd_compress2(dict_cctx, scratch, scratch_cap, in.buf, (size_t)in.len);
        }
        if (zstd_is_error(n)) {
            PyErr_Format(PyExc_RuntimeError, "zstd compression failed: %s", zstd_error_name(n));
        } else {
            out = PyBytes_FromStringAndSize(scratch, (Py_ssize_t)n);
        }
    }
    PyBuffer_Release(&in);
    return out;
}

/* A context of ``pool``, or a new one set as the pool's are; NULL if none can be made (the record
 * is then stored raw). Runs without the GIL. */
static zstd_cctx *pool_take(context_pool *pool) {
    zstd_cctx *c = NULL;
    pthread_mutex_lock(&pool_mu);
    if (pool->count > 0) {
        c = pool->free[--pool->count];
    }
    pthread_mutex_unlock(&pool_mu);
    if (c != NULL) {
        return c;
    }
    c = zstd_create();
    if (c == NULL) {
        return NULL;
    }
    if (zstd_is_error(zstd_set_parameter(c, ZSTD_C_COMPRESSION_LEVEL, plain_level)) ||
        zstd_is_error(zstd_set_parameter(c, ZSTD_C_CONTENT_SIZE_FLAG, 0)) ||
        zstd_is_error(zstd_set_parameter(c, ZSTD_C_CHECKSUM_FLAG, pool->checksum)) ||
        zstd_is_error(zstd_set_parameter(c, ZSTD_C_DICT_ID_FLAG, 0))) {
        zstd_free(c);
        return NULL;
    }
    return c;
}

/* Give ``c`` back to ``pool`` (or free it if the pool is full). Runs without the GIL. */
static void pool_give(context_pool *pool, zstd_cctx *c) {
    pthread_mutex_lock(&pool_mu);
    if (pool->count < POOL_CONTEXTS_MAX) {
        pool->free[pool->count++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&pool_mu);
    if (c != NULL) {
        zstd_free(c);
    }
}

static void put16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

/* frame_write_sync(fd, raw, offset, seq, flags, salt, compress_min, cdict, dict_id) ->
 * (answer, frame bytes): a lone record's durable append in one release of the GIL.
 *
 * Why: with many threads appending (many sessions in one process), what bounds is the work each
 * event does while it holds the GIL, and a record's zstd call was most of it (47,000 of 109,000
 * instructions an event, bench/callgrind.py append-sync). Releasing the GIL for the zstd call
 * alone costs a wait to take it back behind every other appending thread (this module's first
 * comment). A durable append releases it anyway for its pwrite and fdatasync: here the
 * compression, the frame's header and checksum are made under that same release, so another
 * thread's Python runs meanwhile, and no hand-back is added.
 *
 * It does what journal/engine/writer.py's twin does with the GIL held (encoding.alone_spec,
 * format.encode_frame, fs.write_all_synced; tests/test_frame_write_sync.py holds the bytes
 * equal): ``raw`` (at most HELD_INPUT_BYTES_MAX bytes) compressed at HELD_LEVEL, against the
 * ``cdict`` of make_cdict if one is given (then dict_id goes in the header), where it is at
 * least ``compress_min`` bytes and the result is smaller, else stored as it is (so the frame
 * is at most 32 + len(raw) bytes, which the writer reserves ahead); the header with seq,
 * ``flags`` (no codec bits: the codec is set here) and the checksum seeded with ``salt``; then
 * write_then_sync at ``offset``. The answer is write_then_sync's: 0, a failed write's errno or
 * NO_PROGRESS (> 0; nothing synced, the caller rolls back), or minus a failed fdatasync's
 * errno. A zstd failure (only libzstd running out of memory can make one) stores the record
 * raw, which any reader takes. Arguments are checked, and the buffer allocated, before anything
 * is written: an exception means nothing was. */
static PyObject *held_frame_write_sync(PyObject *self, PyObject *args) {
    (void)self;
    int fd;
    Py_buffer raw;
    long long offset;
    PyObject *seq_arg, *flags_arg, *salt_arg, *dict_id_arg;
    Py_ssize_t compress_min;
    PyObject *cdict_arg;
    if (!PyArg_ParseTuple(args, "iy*LOOOnOO:frame_write_sync", &fd, &raw, &offset, &seq_arg, &flags_arg, &salt_arg,
                          &compress_min, &cdict_arg, &dict_id_arg)) {
        return NULL;
    }
    /* The frame's fields, each refused (OverflowError) outside what it holds: the parser's "K"
     * and "I" would keep an int's low bits, and a frame a reader takes for another record. */
    unsigned long long seq = 0, salt = 0, flags = 0, dict_id = 0;
    if (!PyLong_Check(seq_arg) || !PyLong_Check(flags_arg) || !PyLong_Check(salt_arg) || !PyLong_Check(dict_id_arg)) {
        PyBuffer_Release(&raw);
        PyErr_SetString(PyExc_TypeError, "frame_write_sync: seq, flags, salt and dict_id are ints");
        return NULL;
    }
    seq = PyLong_AsUnsignedLongLong(seq_arg);
    if (!PyErr_Occurred()) {
        salt = PyLong_AsUnsignedLongLong(salt_arg);
    }
    if (!PyErr_Occurred()) {
        flags = PyLong_AsUnsignedLongLong(flags_arg);
    }
    if (!PyErr_Occurred()) {
        dict_id = PyLong_AsUnsignedLongLong(dict_id_arg);
    }
    if (PyErr_Occurred()) { /* negative, or past 64 bits */
        PyBuffer_Release(&raw);
        return NULL;
    }
    const char *refused = NULL;
    const zstd_cdict *cd = NULL;
    if (raw.len > HELD_INPUT_BYTES_MAX) {
        refused = "frame_write_sync: the record is longer than INPUT_BYTES_MAX";
    } else if ((flags & ~(unsigned long long)JN_FLAGS_KNOWN) != 0 || (flags & JN_FLAG_CODEC_MASK) != 0) {
        refused = "frame_write_sync: flags must be known frame flags without a codec (the codec is set here)";
    } else if (compress_min < 0 || dict_id > 0xFFFFu) {
        refused = "frame_write_sync: compress_min or dict_id out of range";
    } else if (cdict_arg != Py_None) {
        if (!PyCapsule_IsValid(cdict_arg, CDICT_CAPSULE) || dict_id == 0) {
            refused = "frame_write_sync: cdict is None or a make_cdict capsule, with its dict_id (1 or more)";
        } else {
            cd = PyCapsule_GetPointer(cdict_arg, CDICT_CAPSULE);
        }
    }
    if (refused != NULL) {
        PyBuffer_Release(&raw);
        PyErr_SetString(PyExc_ValueError, refused);
        return NULL;
    }
    size_t n = (size_t)raw.len;
    size_t bound = zstd_bound(n);
    size_t cap = JN_FRAME_HEADER_BYTES + (bound > n ? bound : n);
    uint8_t *frame = malloc(cap);
    if (frame == NULL) {
        PyBuffer_Release(&raw);
        return PyErr_NoMemory();
    }
    int rc;
    size_t stored = n;
    uint32_t codec = 0;
    Py_BEGIN_ALLOW_THREADS
    if ((Py_ssize_t)n >= compress_min) {
        context_pool *pool = cd != NULL ? &dict_pool : &plain_pool;
        zstd_cctx *c = pool_take(pool);
        if (c != NULL) {
            size_t k = cd != NULL ? zstd_ref_cdict(c, cd) : 0;
            if (!zstd_is_error(k)) {
                k = zstd_compress2(c, frame + JN_FRAME_HEADER_BYTES, cap - JN_FRAME_HEADER_BYTES, raw.buf, n);
            }
            if (!zstd_is_error(k) && k < n) {
                stored = k;
                codec = 1; /* format.CODEC_ZSTD */
            }
            if (cd != NULL) {
                zstd_ref_cdict(c, NULL); /* a pooled context never points at tables freed later */
            }
            pool_give(pool, c);
        }
    }
    if (codec == 0 && n > 0) {
        memcpy(frame + JN_FRAME_HEADER_BYTES, raw.buf, n);
    }
    put32(frame + 8, (uint32_t)stored);
    put32(frame + 12, (uint32_t)n);
    put64(frame + 16, (uint64_t)seq);
    put16(frame + 24, (uint32_t)flags | codec);
    put16(frame + 26, codec != 0 && cd != NULL ? (uint32_t)dict_id : 0u);
    put32(frame + 28, JN_FRAME_MARKER);
    put64(frame, jn_xxh64(frame + JN_FRAME_CHECKSUMMED_FROM,
                          JN_FRAME_HEADER_BYTES - JN_FRAME_CHECKSUMMED_FROM + stored, (uint64_t)salt));
    rc = write_then_sync(fd, (const char *)frame, JN_FRAME_HEADER_BYTES + stored, offset, 0);
    free(frame);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&raw);
    return Py_BuildValue("(in)", rc, (Py_ssize_t)(JN_FRAME_HEADER_BYTES + stored));
}

static PyMethodDef methods[] = {
    {"compress", (PyCFunction)(void (*)(void))held_compress, METH_FASTCALL,
     "compress(data[, level]) -> one zstd frame at level (LEVEL if not given), the GIL held throughout"},
    {"make_cdict", (PyCFunction)(void (*)(void))held_make_cdict, METH_FASTCALL,
     "make_cdict(dictionary[, level]) -> the dictionary's tables at level (LEVEL if not given), for compress_with"},
    {"compress_with", (PyCFunction)(void (*)(void))held_compress_with, METH_FASTCALL,
     "compress_with(cdict, data) -> one zstd frame against the dictionary, the GIL held throughout"},
    {"frame_write_sync", held_frame_write_sync, METH_VARARGS,
     "frame_write_sync(fd, raw, offset, seq, flags, salt, compress_min, cdict, dict_id) -> (0, a failed write's "
     "errno or NO_PROGRESS, or minus a failed fdatasync's errno; the frame's bytes): a lone record compressed, "
     "framed, written and synced under one release of the GIL"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_zstd_held", "zstd compression of small payloads with the GIL held", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__zstd_held(void) {
    if (open_library(HELD_LEVEL) != 0) {
        return NULL;
    }
    if (!pool_fork_handlers) {
        if (pthread_atfork(pool_before_fork, pool_after_fork, pool_after_fork) != 0) {
            PyErr_SetString(PyExc_ImportError, "pthread_atfork refused the zstd context pool's fork handlers");
            return NULL;
        }
        pool_fork_handlers = 1;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "INPUT_BYTES_MAX", HELD_INPUT_BYTES_MAX) != 0 ||
        PyModule_AddIntConstant(m, "LEVEL", HELD_LEVEL) != 0 ||
        PyModule_AddIntConstant(m, "LEVEL_MIN", level_min) != 0 ||
        PyModule_AddIntConstant(m, "LEVEL_MAX", level_max) != 0 ||
        PyModule_AddIntConstant(m, "DICT_BYTES_MAX", DICT_BYTES_MAX) != 0 ||
        PyModule_AddIntConstant(m, "LIBRARY_VERSION", (long)library_version) != 0 ||
        PyModule_AddIntConstant(m, "NO_PROGRESS", NO_PROGRESS) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
