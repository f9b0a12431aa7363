/* A libFuzzer-free driver for fuzz/fuzz_scan.c, so any C compiler (gcc in CI) can run the
 * target under AddressSanitizer and UndefinedBehaviorSanitizer.
 *
 *   driver [-n INPUTS] [-t SECONDS] [-s SEED] [CORPUS_FILE...]
 *
 * It replays every corpus file, then runs INPUTS generated inputs (or as many as fit in
 * SECONDS): fresh random bytes, and corpus entries mutated by bit flips, byte overwrites,
 * truncation, insertion and header rewrites. Each input is an exact-size heap copy, so a
 * read one byte past the end is a sanitizer report. It prints how many inputs ran.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define INPUT_BYTES_MAX 4096
#define CORPUS_MAX 256

static uint64_t rng_state;

static uint64_t next_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t below(size_t n) { return n ? (size_t)(next_u64() % n) : 0; }

static void run(const uint8_t *data, size_t size) {
    uint8_t *exact = malloc(size ? size : 1);
    if (exact == NULL) abort();
    memcpy(exact, data, size);
    LLVMFuzzerTestOneInput(exact, size);
    free(exact);
}

static size_t mutate(uint8_t *buf, size_t size) {
    for (size_t k = 0, rounds = 1 + below(4); k < rounds; k++) {
        switch (below(6)) {
        case 0: /* flip a bit */
            if (size) buf[below(size)] ^= (uint8_t)(1u << below(8));
            break;
        case 1: /* overwrite a byte */
            if (size) buf[below(size)] = (uint8_t)next_u64();
            break;
        case 2: /* truncate */
            size = below(size + 1);
            break;
        case 3: /* insert random bytes */
            for (size_t i = 0, n = below(16); i < n && size < INPUT_BYTES_MAX; i++) {
                size_t at = below(size + 1);
                memmove(buf + at + 1, buf + at, size - at);
                buf[at] = (uint8_t)next_u64();
                size++;
            }
            break;
        case 4: /* rewrite the parameter header: other salt, seq, start or mode */
            if (size >= 20) buf[below(20)] = (uint8_t)next_u64();
            break;
        default: /* zero a run */
            if (size) {
                size_t at = below(size), n = below(64);
                memset(buf + at, 0, size - at < n ? size - at : n);
            }
            break;
        }
    }
    return size;
}

int main(int argc, char **argv) {
    unsigned long long inputs = 10000, seed = 1;
    double seconds = 0;
    int first_file = argc;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            inputs = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) {
            seconds = strtod(argv[++i], NULL);
        } else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
        } else {
            first_file = i;
            break;
        }
    }
    rng_state = seed;

    static uint8_t corpus[CORPUS_MAX][INPUT_BYTES_MAX];
    static size_t corpus_len[CORPUS_MAX];
    size_t corpus_n = 0;
    unsigned long long ran = 0;
    for (int i = first_file; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (f == NULL) {
            fprintf(stderr, "driver: cannot open %s\n", argv[i]);
            return 2;
        }
        uint8_t buf[INPUT_BYTES_MAX];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        run(buf, n);
        ran++;
        if (corpus_n < CORPUS_MAX) {
            memcpy(corpus[corpus_n], buf, n);
            corpus_len[corpus_n++] = n;
        }
    }

    clock_t t0 = clock();
    uint8_t buf[INPUT_BYTES_MAX];
    for (unsigned long long k = 0; seconds > 0 || k < inputs; k++) {
        if (seconds > 0 && (k & 255) == 0 && (double)(clock() - t0) / CLOCKS_PER_SEC >= seconds) break;
        size_t n;
        if (corpus_n == 0 || below(4) == 0) {
            n = 20 + below(600);
            for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)next_u64();
        } else {
            size_t pick = below(corpus_n);
            n = corpus_len[pick];
            memcpy(buf, corpus[pick], n);
            n = mutate(buf, n);
        }
        run(buf, n);
        ran++;
    }
    printf("inputs: %llu\n", ran);
    return 0;
}
