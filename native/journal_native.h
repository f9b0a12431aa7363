/* The C helper of journal: frame encoding and frame scanning over memory buffers.
 *
 * It computes and never does I/O, so every byte that reaches a file still goes through the
 * Python file layer (and the crash simulator). journal/engine/format.py, the code of
 * docs/FORMAT.md, is the reference and the pure-Python twin; tests hold the two byte-equal.
 * Every constant below mirrors a name there.
 */
#ifndef JOURNAL_NATIVE_H
#define JOURNAL_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#define JN_FRAME_HEADER_BYTES 32
#define JN_FRAME_CHECKSUMMED_FROM 8
#define JN_FRAME_MARKER 0x3146524Au /* b"JRF1" little-endian */
#define JN_FRAME_MARKER_OFFSET 28
#define JN_FRAME_STORED_BYTES_LIMIT (256u * 1024u * 1024u)

#define JN_FLAG_CODEC_MASK 0x0003u
#define JN_FLAG_KIND_MASK 0x000Cu
#define JN_KIND_DATA 0x0000u
#define JN_KIND_SEAL 0x0004u
#define JN_KIND_PADDING 0x0008u
#define JN_KIND_BLOCK 0x000Cu
#define JN_FLAG_COMMIT 0x0010u
/* FLAG_AFTER_SYNC (format version 3): every byte before the frame was fdatasync'd before it was written */
#define JN_FLAG_AFTER_SYNC 0x0100u
#define JN_FLAGS_KNOWN 0x01FFu
/* FLAG_KEYED | FLAG_BYTES | FLAG_SYNTHETIC: per record in a block's table, never on its frame */
#define JN_BLOCK_FRAME_FLAGS_REFUSED 0x00E0u
#define JN_BLOCK_RECORDS_MAX 4096u
#define JN_BLOCK_COUNT_BYTES 4u
#define JN_BLOCK_ENTRY_BYTES 5u

/* Stop reasons: the values of format.Stop, plus one the Python wrapper never returns. */
#define JN_STOP_END 0
#define JN_STOP_TRUNCATED 1
#define JN_STOP_ZEROS 2
#define JN_STOP_CHECKSUM 3
#define JN_STOP_SEQ 4
#define JN_STOP_FLAGS 5
#define JN_STOP_SEALED 6
#define JN_STOP_FULL 7 /* the caller's frame array is full; call again from state->pos */

/* One accepted frame; the field order is format.Frame's, so a row maps onto it directly. */
typedef struct jn_frame {
    uint64_t offset; /* of the frame header, plus the caller's base offset */
    uint64_t seq;    /* a block frame's: its last record's */
    uint32_t flags;
    uint32_t raw_len;
    uint32_t stored_len;
    uint32_t aux; /* jn_scan: records in the frame (1, a block's N, 0); jn_verify_frame: dictionary id */
} jn_frame;

/* The scanner's position, carried across calls so a long segment can be scanned in chunks. */
typedef struct jn_scan_state {
    uint64_t pos;          /* in: where to start; out: where the stop (or the next frame) is */
    uint64_t expected_seq; /* the seq the next data frame must carry */
    uint32_t seq_exhausted; /* 1 once a data frame carried seq 2^64-1: no data frame may follow */
    uint32_t stop;          /* out: a JN_STOP_* value */
    uint64_t stop_seq;      /* out: the seq of the offending genuine frame, else 0 */
    uint64_t count;         /* out: frames accepted by this call */
    uint64_t last_seq;      /* out: seq of the last accepted frame (valid when count > 0) */
} jn_scan_state;

/* XXH64 of n bytes at p with the given seed, as the xxHash specification defines it. */
uint64_t jn_xxh64(const uint8_t *p, size_t n, uint64_t seed);

/* Frame a batch into out: frame i takes payload bytes [sum(lens[..i]), +lens[i]) of
 * payloads, seq first_seq + i, flags[i] (plus FLAG_COMMIT on the last frame if commit_last)
 * and raw_lens[i]. Returns the number of bytes written, or 0 if an argument is out of range
 * (unknown flag bits, a payload over the limit, lengths that do not add up, out too small). */
size_t jn_encode_batch(uint8_t *out, size_t out_cap, const uint8_t *payloads, size_t payloads_len,
                       const uint32_t *flags, const uint32_t *raw_lens, const uint32_t *stored_lens,
                       size_t n, uint64_t first_seq, uint64_t salt, int commit_last);

/* Walk frames in buf[0, size) from state->pos, validating each exactly as format.scan does:
 * bounds before lengths, the checksum before any field is trusted, then flags (and a block's
 * record count), then seq continuity (a block takes as many seqs as it holds records). Accepted frames go to frames[0, frames_cap); JN_STOP_FULL means the array
 * filled up before a stop. frames may be NULL when frames_cap is 0 and count_only is set:
 * then frames are only counted (the verify-only path). Returns state->stop. */
int jn_scan(const uint8_t *buf, size_t size, uint64_t base_offset, uint64_t salt, jn_scan_state *state,
            jn_frame *frames, size_t frames_cap, int count_only);

/* Whether a genuine frame (marker, length within the limit and the buffer, salted checksum)
 * starts at buf[pos]; if so, 1 with its fields in *out (out->offset = pos, out->aux = its
 * dictionary id), whatever its seq, flags or dictionary id. 0 otherwise (format.verify_frame). */
int jn_verify_frame(const uint8_t *buf, size_t size, size_t pos, uint64_t salt, jn_frame *out);

/* Offset of the first genuine frame at or after start whose seq is above after_seq and that
 * carries FLAG_COMMIT or is a seal frame; -1 if there is none (format.find_later_commit). */
int64_t jn_find_later_commit(const uint8_t *buf, size_t size, size_t start, uint64_t salt, uint64_t after_seq);

#endif
