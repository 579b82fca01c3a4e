/* Tokenizer encode speed over tests/data/tokenizer/corpus.jsonl, one thread: the fast
 * splitter and the PCRE2 splitter, each repeated until at least 1 s has passed (after
 * one warm-up pass that also fills the word cache, as `tokenizers` warms its own).
 *
 * Build (from the repo root, after `make build/libvsr.a`):
 *   cc -std=c17 -O2 -march=x86-64-v2 -Iinclude -Isrc -D_GNU_SOURCE -o build/tokenizer_bench \
 *      bench/tokenizer_bench.c build/libvsr.a -ljansson -lcrypto -lpcre2-8 -lutf8proc -lm -pthread
 * Run: build/tokenizer_bench [TOKENIZER_DIR [CORPUS_JSONL]]
 * Compare: python3 bench/tokenizer_bench.py (same corpus, Hugging Face `tokenizers`). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/tokenizer_internal.h"
#include "vsr/tokenizer.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int count_piece(void *ctx, size_t a, size_t b) {
    (void)a, (void)b;
    ++*(size_t *)ctx;
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "data/tokenizers/qwen3";
    const char *path = argc > 2 ? argv[2] : "tests/data/tokenizer/corpus.jsonl";
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t n = 0, cap = 0, bytes = 0;
    char **text = NULL;
    size_t *len = NULL;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t l;
    while ((l = getline(&line, &lcap, f)) > 0) {
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)l, JSON_ALLOW_NUL, &je);
        if (!o) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            text = realloc(text, cap * sizeof *text);
            len = realloc(len, cap * sizeof *len);
        }
        json_t *s = json_object_get(o, "text");
        len[n] = json_string_length(s);
        text[n] = malloc(len[n] + 1);
        memcpy(text[n], json_string_value(s), len[n] + 1);
        bytes += len[n++];
        json_decref(o);
    }
    free(line);
    fclose(f);
    vsr_tokenizer *t;
    vsr_err err = {0};
    double t0 = now();
    if (vsr_tokenizer_open(dir, &t, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("load %s: %.3f s\ncorpus: %zu strings, %zu bytes\n", dir, now() - t0, n, bytes);
    static const struct {
        vsr_split_impl impl;
        const char *name;
    } impls[] = {{VSR_SPLIT_FAST, "vsr fast splitter"}, {VSR_SPLIT_PCRE2, "vsr PCRE2 splitter"}};
    for (size_t k = 0; k < 2; k++) {
        size_t ids_total = 0;
        int reps = 0;
        double start = 0, el = 0;
        for (int pass = -1;; pass++) {
            if (pass == 0) start = now();
            for (size_t i = 0; i < n; i++) {
                int32_t *ids;
                size_t m;
                if (vsr_tokenizer_encode_split(t, impls[k].impl, text[i], len[i], &ids, &m, &err)) {
                    fprintf(stderr, "string %zu: %s\n", i, err.msg);
                    return 1;
                }
                if (pass == 0) ids_total += m;
                free(ids);
            }
            if (pass >= 0) {
                reps = pass + 1;
                if ((el = now() - start) >= 1.0) break;
            }
        }
        printf("%-20s %8.2f MB/s  (%d passes in %.2f s, %zu ids a pass)\n", impls[k].name,
               (double)bytes * reps / el / 1e6, reps, el, ids_total);
    }
    /* The splitters alone, over every corpus string (no added tokens, NFC, BPE). */
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->pcre.code, NULL);
    for (size_t k = 0; k < 2; k++) {
        size_t pieces = 0;
        int reps = 0;
        double start = now(), el;
        do {
            for (size_t i = 0; i < n; i++) {
                if (impls[k].impl == VSR_SPLIT_FAST) vsr_split_fast(text[i], len[i], count_piece, &pieces);
                else vsr_split_pcre2(&t->pcre, md, text[i], len[i], count_piece, &pieces);
            }
            reps++;
        } while ((el = now() - start) < 1.0);
        printf("%-20s %8.2f MB/s  split only (%zu pieces a pass)\n", impls[k].name,
               (double)bytes * reps / el / 1e6, pieces / (size_t)reps);
    }
    pcre2_match_data_free(md);
    vsr_tokenizer_free(t);
    for (size_t i = 0; i < n; i++) free(text[i]);
    free(text), free(len);
    return 0;
}
