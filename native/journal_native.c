/* The C helper of journal: see journal_native.h for the contract and journal/engine/format.py for
 * the byte layout it mirrors. Integers are little-endian on disk; loads go through memcpy
 * and stores byte by byte, so nothing needs alignment and the bytes are the same on any host. */
#include "journal_native.h"

#include <string.h>

/* --- XXH64, from the xxHash specification ------------------------------------------------- */

#define P64_1 0x9E3779B185EBCA87ull
#define P64_2 0xC2B2AE3D27D4EB4Full
#define P64_3 0x165667B19E3779F9ull
#define P64_4 0x85EBCA77C2B2AE63ull
#define P64_5 0x27D4EB2F165667C5ull

/* Little-endian loads. memcpy compiles to one unaligned load; the swap is for big-endian hosts. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define JN_LE64(v) __builtin_bswap64(v)
#define JN_LE32(v) __builtin_bswap32(v)
#else
#define JN_LE64(v) (v)
#define JN_LE32(v) (v)
#endif

static uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return JN_LE64(v);
}

static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return JN_LE32(v);
}

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

static void wr64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void wr16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t xxh_round(uint64_t acc, uint64_t lane) {
    acc += lane * P64_2;
    return rotl64(acc, 31) * P64_1;
}

static uint64_t xxh_merge(uint64_t acc, uint64_t v) {
    acc ^= xxh_round(0, v);
    return acc * P64_1 + P64_4;
}

uint64_t jn_xxh64(const uint8_t *p, size_t n, uint64_t seed) {
    size_t i = 0; /* indices, not end pointers: p may be NULL when n is 0 */
    uint64_t acc;
    if (n >= 32) {
        uint64_t v1 = seed + P64_1 + P64_2, v2 = seed + P64_2, v3 = seed, v4 = seed - P64_1;
        for (; n - i >= 32; i += 32) {
            v1 = xxh_round(v1, rd64(p + i));
            v2 = xxh_round(v2, rd64(p + i + 8));
            v3 = xxh_round(v3, rd64(p + i + 16));
            v4 = xxh_round(v4, rd64(p + i + 24));
        }
        acc = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        acc = xxh_merge(acc, v1);
        acc = xxh_merge(acc, v2);
        acc = xxh_merge(acc, v3);
        acc = xxh_merge(acc, v4);
    } else {
        acc = seed + P64_5;
    }
    acc += (uint64_t)n;
    for (; n - i >= 8; i += 8) {
        acc ^= xxh_round(0, rd64(p + i));
        acc = rotl64(acc, 27) * P64_1 + P64_4;
    }
    if (n - i >= 4) {
        acc ^= (uint64_t)rd32(p + i) * P64_1;
        acc = rotl64(acc, 23) * P64_2 + P64_3;
        i += 4;
    }
    for (; i < n; i++) {
        acc ^= (uint64_t)p[i] * P64_5;
        acc = rotl64(acc, 11) * P64_1;
    }
    acc ^= acc >> 33;
    acc *= P64_2;
    acc ^= acc >> 29;
    acc *= P64_3;
    acc ^= acc >> 32;
    return acc;
}

/* --- encoding ----------------------------------------------------------------------------- */

size_t jn_encode_batch(uint8_t *out, size_t out_cap, const uint8_t *payloads, size_t payloads_len,
                       const uint32_t *flags, const uint32_t *raw_lens, const uint32_t *stored_lens,
                       size_t n, uint64_t first_seq, uint64_t salt, int commit_last) {
    /* Check every argument before writing a byte, so a refusal leaves nothing half done. */
    size_t in_total = 0;
    for (size_t i = 0; i < n; i++) {
        if ((flags[i] & ~JN_FLAGS_KNOWN) != 0 || stored_lens[i] > JN_FRAME_STORED_BYTES_LIMIT) return 0;
        if (stored_lens[i] > payloads_len - in_total) return 0;
        in_total += stored_lens[i];
    }
    if (in_total != payloads_len || n == 0) return 0;
    if (n - 1 > UINT64_MAX - first_seq) return 0; /* the last seq must fit in 64 bits */
    if (n > (SIZE_MAX - in_total) / JN_FRAME_HEADER_BYTES) return 0;
    size_t out_total = in_total + n * JN_FRAME_HEADER_BYTES;
    if (out_total > out_cap) return 0;

    uint8_t *w = out;
    size_t r = 0; /* an index, not a pointer: payloads may be NULL when every payload is empty */
    for (size_t i = 0; i < n; i++) {
        uint32_t frame_flags = flags[i] | ((commit_last && i == n - 1) ? JN_FLAG_COMMIT : 0u);
        wr32(w + 8, stored_lens[i]);
        wr32(w + 12, raw_lens[i]);
        wr64(w + 16, first_seq + i);
        wr16(w + 24, frame_flags);
        wr16(w + 26, 0); /* dictionary id: none (format.c_encode_batch frames the others in Python) */
        wr32(w + 28, JN_FRAME_MARKER);
        if (stored_lens[i] > 0) memcpy(w + JN_FRAME_HEADER_BYTES, payloads + r, stored_lens[i]);
        wr64(w, jn_xxh64(w + JN_FRAME_CHECKSUMMED_FROM,
                         JN_FRAME_HEADER_BYTES - JN_FRAME_CHECKSUMMED_FROM + (size_t)stored_lens[i], salt));
        w += JN_FRAME_HEADER_BYTES + stored_lens[i];
        r += stored_lens[i];
    }
    return out_total;
}

/* --- scanning ----------------------------------------------------------------------------- */

static int all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0) return 0;
    return 1;
}

static int flags_supported(uint32_t flags, uint32_t dict_id) {
    uint32_t kind = flags & JN_FLAG_KIND_MASK;
    /* Every kind the two kind bits can name is known; a block frame's record flags are in its table. */
    /* A dictionary (format version 4) only on a zstd (codec 1) data or block frame. */
    int dict_ok = dict_id == 0 || ((flags & JN_FLAG_CODEC_MASK) == 1u && (kind == JN_KIND_DATA || kind == JN_KIND_BLOCK));
    return (flags & ~JN_FLAGS_KNOWN) == 0 && (flags & JN_FLAG_CODEC_MASK) <= 1u && dict_ok &&
           (kind != JN_KIND_BLOCK || (flags & JN_BLOCK_FRAME_FLAGS_REFUSED) == 0);
}

/* format.block_count: the record count at the front of a genuine block frame's payload, or 0
 * if it is out of range or the table does not fit the payload. */
static uint32_t block_count(const uint8_t *payload, uint32_t stored_len) {
    if (stored_len < JN_BLOCK_COUNT_BYTES) return 0;
    uint32_t n = rd32(payload);
    if (n < 2u || n > JN_BLOCK_RECORDS_MAX) return 0;
    if (JN_BLOCK_COUNT_BYTES + (uint64_t)n * JN_BLOCK_ENTRY_BYTES > stored_len) return 0;
    return n;
}

/* Whether the bytes at h (avail of them) hold a genuine frame: marker, then a length within the
 * limit and the bytes, then the salted checksum. The answer is JN_GENUINE, or the stop reason
 * of format.scan for a frame that is not (ZEROS, TRUNCATED or CHECKSUM). Nothing past avail
 * is read, and no field but the marker and the length is looked at before the checksum held. */
#define JN_GENUINE (-1)
static int check_frame(const uint8_t *h, size_t avail, uint64_t salt) {
    if (avail < JN_FRAME_HEADER_BYTES) return all_zero(h, avail) ? JN_STOP_ZEROS : JN_STOP_TRUNCATED;
    if (rd32(h + JN_FRAME_MARKER_OFFSET) != JN_FRAME_MARKER)
        return all_zero(h, JN_FRAME_HEADER_BYTES) ? JN_STOP_ZEROS : JN_STOP_CHECKSUM;
    uint32_t stored_len = rd32(h + 8);
    if (stored_len > JN_FRAME_STORED_BYTES_LIMIT) return JN_STOP_CHECKSUM;
    if (stored_len > avail - JN_FRAME_HEADER_BYTES) return JN_STOP_TRUNCATED;
    size_t span = JN_FRAME_HEADER_BYTES - JN_FRAME_CHECKSUMMED_FROM + (size_t)stored_len;
    if (jn_xxh64(h + JN_FRAME_CHECKSUMMED_FROM, span, salt) != rd64(h)) return JN_STOP_CHECKSUM;
    return JN_GENUINE;
}

int jn_verify_frame(const uint8_t *buf, size_t size, size_t pos, uint64_t salt, jn_frame *out) {
    if (pos > size || check_frame(buf + pos, size - pos, salt) != JN_GENUINE) return 0;
    const uint8_t *h = buf + pos;
    out->offset = (uint64_t)pos;
    out->seq = rd64(h + 16);
    out->flags = rd16(h + 24);
    out->raw_len = rd32(h + 12);
    out->stored_len = rd32(h + 8);
    out->aux = rd16(h + 26); /* the dictionary id */
    return 1;
}

int jn_scan(const uint8_t *buf, size_t size, uint64_t base_offset, uint64_t salt, jn_scan_state *state,
            jn_frame *frames, size_t frames_cap, int count_only) {
    size_t pos = (size_t)state->pos;
    uint64_t expected = state->expected_seq;
    int exhausted = state->seq_exhausted != 0;
    size_t count = 0;
    int stop;
    uint64_t stop_seq = 0, last_seq = 0;
    for (;;) {
        if (count == frames_cap) {
            stop = JN_STOP_FULL;
            break;
        }
        if (pos == size) {
            stop = JN_STOP_END;
            break;
        }
        /* Bounds before lengths: nothing past size is ever read. */
        if (pos > size) {
            stop = JN_STOP_ZEROS;
            break;
        }
        const uint8_t *h = buf + pos;
        int checked = check_frame(h, size - pos, salt);
        if (checked != JN_GENUINE) {
            stop = checked;
            break;
        }
        uint32_t stored_len = rd32(h + 8);
        /* The frame is genuine from here on: its fields can be trusted. */
        uint64_t seq = rd64(h + 16);
        uint32_t flags = rd16(h + 24);
        uint32_t kind = flags & JN_FLAG_KIND_MASK;
        if (!flags_supported(flags, rd16(h + 26))) {
            stop = JN_STOP_FLAGS;
            stop_seq = seq;
            break;
        }
        uint32_t records = 0;
        if (kind == JN_KIND_DATA) {
            if (exhausted || seq != expected) {
                stop = JN_STOP_SEQ;
                stop_seq = seq;
                break;
            }
            if (expected == UINT64_MAX)
                exhausted = 1;
            else
                expected++;
            records = 1;
        } else if (kind == JN_KIND_BLOCK) {
            records = block_count(h + JN_FRAME_HEADER_BYTES, stored_len);
            if (records == 0) {
                stop = JN_STOP_FLAGS;
                stop_seq = seq;
                break;
            }
            /* Its seq is its last record's; its first must be the expected one. */
            if (exhausted || seq < records - 1u || seq - (records - 1u) != expected) {
                stop = JN_STOP_SEQ;
                stop_seq = seq < records - 1u ? seq : seq - (records - 1u);
                break;
            }
            if (seq == UINT64_MAX)
                exhausted = 1;
            else
                expected = seq + 1;
        } else if (exhausted ? seq != UINT64_MAX : (expected == 0 || seq != expected - 1)) {
            /* Padding and seal frames carry the seq of the record before them. */
            stop = JN_STOP_SEQ;
            stop_seq = seq;
            break;
        }
        if (!count_only) {
            jn_frame *f = &frames[count];
            f->offset = (uint64_t)pos + base_offset;
            f->seq = seq;
            f->flags = flags;
            f->raw_len = rd32(h + 12);
            f->stored_len = stored_len;
            f->aux = records;
        }
        count++;
        last_seq = seq;
        pos += JN_FRAME_HEADER_BYTES + (size_t)stored_len;
        if (kind == JN_KIND_SEAL) {
            stop = JN_STOP_SEALED;
            stop_seq = seq;
            break;
        }
    }
    state->pos = (uint64_t)pos;
    state->expected_seq = expected;
    state->seq_exhausted = (uint32_t)exhausted;
    state->stop = (uint32_t)stop;
    state->stop_seq = stop_seq;
    state->count = (uint64_t)count;
    state->last_seq = last_seq;
    return stop;
}

int64_t jn_find_later_commit(const uint8_t *buf, size_t size, size_t start, uint64_t salt, uint64_t after_seq) {
    if (start > size || size - start < JN_FRAME_HEADER_BYTES) return -1;
    /* The marker narrows the candidates; the checksum proves a candidate genuine. */
    size_t p = start + JN_FRAME_MARKER_OFFSET;
    while (size - p >= 4) {
        const uint8_t *hit = memchr(buf + p, (int)(JN_FRAME_MARKER & 0xFFu), size - p - 3);
        if (hit == NULL) return -1;
        p = (size_t)(hit - buf);
        if (rd32(hit) == JN_FRAME_MARKER) {
            jn_frame f;
            if (jn_verify_frame(buf, size, p - JN_FRAME_MARKER_OFFSET, salt, &f) && f.seq > after_seq &&
                ((f.flags & JN_FLAG_COMMIT) != 0 || (f.flags & JN_FLAG_KIND_MASK) == JN_KIND_SEAL))
                return (int64_t)f.offset;
        }
        p++;
    }
    return -1;
}
