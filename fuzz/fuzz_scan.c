/* Fuzz target for the C helper's scanner (and the encoder that feeds it).
 *
 * Built two ways (docs/NATIVE.md):
 *   - with libFuzzer:  clang -g -O1 -fsanitize=fuzzer,address,undefined -Inative \
 *                        fuzz/fuzz_scan.c native/journal_native.c -o fuzz_scan
 *   - with any C compiler and fuzz/driver.c, which replays a corpus and random inputs; the
 *     test suite builds that one with -fsanitize=address,undefined (tests/test_native_sanitize.py).
 *
 * Input layout: salt u64 | expected seq u64 | start u16 | mode u8 | arg u8 | body.
 * Mode bit 0 clear: the body is scanned as it is (random and corpus bytes).
 * Mode bit 0 set: the body is cut into payloads, framed with jn_encode_batch, damaged as
 * arg says, then scanned; so the scanner also sees genuine frames, not only noise.
 *
 * Besides the sanitizers' own checks, every run asserts the scanner's contract: frames lie
 * inside the buffer, follow each other without gaps, hold the records their kind says (a block
 * its table's count) with contiguous seqs, a chunked scan and a count-only scan agree, and a
 * commit found after damage is a real frame inside the buffer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "journal_native.h"

#define CHECK(cond)                 \
    do {                            \
        if (!(cond)) __builtin_trap(); \
    } while (0)

static uint64_t rd64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void check_scan(const uint8_t *buf, size_t size, size_t start, uint64_t salt, uint64_t expected,
                       uint64_t after_seq) {
    size_t cap = size / JN_FRAME_HEADER_BYTES + 1;
    jn_frame *frames = malloc(cap * sizeof *frames);
    CHECK(frames != NULL);

    /* Chunked, the way the Python wrapper calls it: three frames per call. */
    jn_scan_state st;
    memset(&st, 0, sizeof st);
    st.pos = start;
    st.expected_seq = expected;
    size_t total = 0;
    int stop;
    do {
        jn_frame chunk[3];
        stop = jn_scan(buf, size, 1000, salt, &st, chunk, 3, 0);
        CHECK(st.count <= 3);
        for (size_t i = 0; i < st.count; i++) {
            CHECK(total < cap);
            frames[total++] = chunk[i];
        }
    } while (stop == JN_STOP_FULL);
    CHECK(stop >= JN_STOP_END && stop <= JN_STOP_SEALED);
    CHECK(st.pos <= size && st.pos >= start);

    uint64_t at = start, records = 0;
    for (size_t i = 0; i < total; i++) {
        CHECK(frames[i].offset == at + 1000);
        CHECK(frames[i].stored_len <= JN_FRAME_STORED_BYTES_LIMIT);
        /* A frame's record count: 1 for data, a block's 2..max, none for padding and seal. */
        uint32_t kind = frames[i].flags & JN_FLAG_KIND_MASK;
        if (kind == JN_KIND_DATA)
            CHECK(frames[i].aux == 1);
        else if (kind == JN_KIND_BLOCK)
            CHECK(frames[i].aux >= 2 && frames[i].aux <= JN_BLOCK_RECORDS_MAX &&
                  JN_BLOCK_COUNT_BYTES + (uint64_t)frames[i].aux * JN_BLOCK_ENTRY_BYTES <= frames[i].stored_len);
        else
            CHECK(frames[i].aux == 0);
        /* Records are contiguous: a frame holding records ends at seq expected + records so far. */
        if (frames[i].aux && !st.seq_exhausted) CHECK(frames[i].seq == expected + records + frames[i].aux - 1);
        records += frames[i].aux;
        at += JN_FRAME_HEADER_BYTES + frames[i].stored_len;
        CHECK(at <= size);
    }
    CHECK(at == st.pos);
    if (!st.seq_exhausted) CHECK(st.expected_seq == expected + records);
    if (stop == JN_STOP_END) CHECK(st.pos == size);

    /* The verify-only pass must reach the same verdict. */
    jn_scan_state v;
    memset(&v, 0, sizeof v);
    v.pos = start;
    v.expected_seq = expected;
    int vstop = jn_scan(buf, size, 1000, salt, &v, NULL, cap, 1);
    CHECK(vstop == stop && v.pos == st.pos && v.stop_seq == st.stop_seq && v.count == total);

    int64_t later = jn_find_later_commit(buf, size, start, salt, after_seq);
    CHECK(later == -1 || ((uint64_t)later >= start && (uint64_t)later + JN_FRAME_HEADER_BYTES <= size));

    /* Every frame the scan accepted verifies alone; whatever verifies lies within the buffer. */
    jn_frame one;
    for (size_t i = 0; i < total; i++) {
        CHECK(jn_verify_frame(buf, size, (size_t)(frames[i].offset - 1000), salt, &one) == 1);
        CHECK(one.seq == frames[i].seq && one.stored_len == frames[i].stored_len);
    }
    if (jn_verify_frame(buf, size, start, salt, &one))
        CHECK(one.offset == start && one.stored_len <= size - start - JN_FRAME_HEADER_BYTES);
    CHECK(jn_verify_frame(buf, size, size + 1, salt, &one) == 0);
    free(frames);
}

static void structured(const uint8_t *body, size_t n, uint64_t salt, uint64_t seq, uint16_t where, uint8_t arg) {
    size_t frames = n / 4 < 32 ? n / 4 : 32;
    if (frames == 0) return;
    uint32_t flags[32], raw_lens[32], lens[32];
    size_t payload_len = 0;
    for (size_t i = 0; i < frames; i++) {
        lens[i] = body[4 * i] % 48;
        /* Data frames with a known codec, so that the undamaged batch must scan to the end. */
        flags[i] = body[4 * i + 1] & JN_FLAGS_KNOWN & ~JN_FLAG_KIND_MASK & ~0x2u;
        raw_lens[i] = (uint32_t)body[4 * i + 2] << 8 | body[4 * i + 3];
        payload_len += lens[i];
    }
    uint8_t *payloads = malloc(payload_len + 1);
    CHECK(payloads != NULL);
    for (size_t i = 0; i < payload_len; i++) payloads[i] = body[i % n];
    if (seq > UINT64_MAX - frames) seq = UINT64_MAX - frames;
    size_t out_len = payload_len + frames * JN_FRAME_HEADER_BYTES;
    uint8_t *out = malloc(out_len);
    CHECK(out != NULL);
    size_t wrote = jn_encode_batch(out, out_len, payloads, payload_len, flags, raw_lens, lens, frames, seq, salt, arg & 1);
    CHECK(wrote == out_len);
    /* Undamaged, every frame comes back and the scan ends cleanly at the end. */
    jn_scan_state st;
    memset(&st, 0, sizeof st);
    st.expected_seq = seq;
    CHECK(jn_scan(out, out_len, 0, salt, &st, NULL, frames + 1, 1) == JN_STOP_END && st.count == frames);
    switch ((arg >> 1) % 4) {
    case 0: /* torn: cut at an arbitrary point */
        out_len = where % (out_len + 1);
        break;
    case 1: /* a flipped bit */
        out[where % out_len] ^= (uint8_t)(1u << (arg >> 5));
        break;
    case 2: /* a zeroed run, as preallocated or lost sectors leave */
        memset(out + where % out_len, 0, out_len - where % out_len < 64 ? out_len - where % out_len : 64);
        break;
    default: /* a lying length field in the first frame: 16 MiB or more */
        out[11] = (uint8_t)(arg | 0x01);
        break;
    }
    /* Copy into an exact-size allocation so that any read past the end is caught. */
    uint8_t *exact = malloc(out_len ? out_len : 1);
    CHECK(exact != NULL);
    memcpy(exact, out, out_len);
    check_scan(exact, out_len, 0, salt, seq, seq);
    free(exact);
    free(out);
    free(payloads);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 20) return 0;
    uint64_t salt = rd64(data), expected = rd64(data + 8);
    uint16_t start_raw = (uint16_t)(data[16] | data[17] << 8);
    uint8_t mode = data[18], arg = data[19];
    const uint8_t *body = data + 20;
    size_t n = size - 20;
    if (mode & 1) {
        structured(body, n, salt, expected, start_raw, arg);
    } else {
        uint8_t *exact = malloc(n ? n : 1);
        CHECK(exact != NULL);
        memcpy(exact, body, n);
        check_scan(exact, n, start_raw % (n + 1), salt, expected, expected >> (arg % 64));
        free(exact);
    }
    return 0;
}
