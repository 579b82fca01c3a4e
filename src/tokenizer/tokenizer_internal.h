/* Internals of the byte-level BPE tokenizer, shared by its source files, its test
 * and its benchmark (not part of the public API).
 *
 * Pipeline (what Hugging Face `tokenizers` does for the Qwen2Tokenizer that
 * transformers 5 rebuilds from tokenizer.json):
 *   1. validate UTF-8 (refuse with the byte offset)
 *   2. split out added tokens whose `normalized` flag is false (leftmost-longest)
 *   3. NFC-normalise each remaining piece; split out `normalized` added tokens
 *   4. pre-tokenize each remaining piece with the Qwen2 split pattern
 *      (fast hand-written splitter, or PCRE2 as the oracle)
 *   5. ByteLevel: each byte becomes one initial symbol (its GPT-2 alphabet char)
 *   6. BPE merges by rank, cached per word. */
#ifndef VSR_TOKENIZER_INTERNAL_H
#define VSR_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vsr/error.h"
#include "vsr/tokenizer.h"

/* transformers' models/qwen2/tokenization_qwen2.py PRETOKENIZE_REGEX (Oniguruma syntax). */
#define VSR_QWEN2_PATTERN                                                                          \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef enum vsr_split_impl {
    VSR_SPLIT_FAST,  /* hand-written Qwen2 splitter over utf8proc categories */
    VSR_SPLIT_PCRE2, /* the pattern compiled by PCRE2 (JIT when available): the oracle */
} vsr_split_impl;

/* Called once per pre-token [start, end) (byte offsets into the piece). Nonzero stops. */
typedef int (*vsr_piece_fn)(void *ctx, size_t start, size_t end);

/* ---- NFC (nfc.c) ---- */
/* True when valid UTF-8 s is certainly NFC already (every char inert; see nfc.c), so
 * utf8proc_map can be skipped. False means "normalise it", not "it is not NFC". */
bool vsr_nfc_quick_stable(const char *s, size_t n);

/* ---- splitting (split.c) ---- */
/* Byte offset of the first invalid UTF-8 sequence, or (size_t)-1 if s is valid
 * (no overlongs, no surrogates, nothing above U+10FFFF). */
size_t vsr_utf8_invalid_at(const char *s, size_t n);
/* Splits valid UTF-8 s with the Qwen2 pattern; returns the callback's nonzero
 * value if it stopped the walk, else 0. */
int vsr_split_fast(const char *s, size_t n, vsr_piece_fn fn, void *ctx);
/* Oniguruma's Unicode \s, which is also Rust's char::is_whitespace (White_Space). */
bool vsr_is_white_space(uint32_t c);
/* Letter or number (utf8proc categories L*, N*): stands in for Rust's
 * char::is_alphanumeric in added tokens' single_word rule. */
bool vsr_is_alnum(uint32_t c);

typedef struct vsr_pcre_split {
    pcre2_code *code;
    bool jit;
} vsr_pcre_split;
/* Compiles an Oniguruma-syntax pattern for PCRE2 (UTF, UCP), spelling \s and \S as
 * Oniguruma's Unicode whitespace (PCRE2's \s also takes U+180E, Oniguruma's does not). */
vsr_status vsr_pcre_split_init(vsr_pcre_split *p, const char *onig_pattern, vsr_err *err);
void vsr_pcre_split_free(vsr_pcre_split *p);
/* As vsr_split_fast; -1 if PCRE2 reports an error (match limit). */
int vsr_split_pcre2(const vsr_pcre_split *p, pcre2_match_data *md, const char *s, size_t n,
                    vsr_piece_fn fn, void *ctx);

/* ---- the tokenizer object ---- */
typedef struct vsr_added_token {
    char *content; /* UTF-8, as matched against the raw (or NFC) text */
    size_t len;
    int32_t id;
    bool special, normalized, lstrip, rstrip, single_word;
} vsr_added_token;

/* Open-addressing string -> id map (vocabulary, added tokens). */
typedef struct vsr_strmap {
    uint32_t mask;
    uint32_t *slots; /* index+1 into keys, 0 = empty */
    const char **keys;
    uint32_t *key_len;
    int32_t *vals;
    uint32_t n, cap;
} vsr_strmap;

/* Merge table: (left id, right id) -> (rank, merged id); one 16-byte slot per probe. */
typedef struct vsr_merge_slot {
    uint64_t key; /* (left << 32 | right) + 1; 0 = empty */
    int32_t rank, merged;
} vsr_merge_slot;
typedef struct vsr_merge_map {
    uint32_t mask;
    vsr_merge_slot *slot;
} vsr_merge_map;

#define VSR_BPE_CACHE_SLOTS 16384 /* direct-mapped; must be a power of two */
#define VSR_BPE_CACHE_LOCKS 64
#define VSR_BPE_CACHE_MAX_WORD 128 /* longer words are not cached */

typedef struct vsr_bpe_cache_entry {
    uint64_t hash;
    uint32_t len, n_ids;
    /* followed by len bytes of the word, then n_ids int32 ids (aligned) */
} vsr_bpe_cache_entry;

typedef struct vsr_bpe_cache {
    vsr_bpe_cache_entry *slot[VSR_BPE_CACHE_SLOTS];
    pthread_mutex_t lock[VSR_BPE_CACHE_LOCKS];
} vsr_bpe_cache;

struct vsr_tokenizer {
    char dir[4096];
    /* vocabulary: id -> token string (GPT-2 byte alphabet), and the reverse map */
    int32_t n_ids;     /* 1 + the largest id of the vocabulary and added tokens */
    char **id_str;     /* [n_ids], NULL where no token has that id */
    size_t vocab_count;/* distinct ids in vocabulary + added tokens */
    vsr_strmap vocab;  /* model vocabulary only */
    vsr_merge_map merges;
    int32_t byte_id[256]; /* initial symbol of each byte (-1: not in vocab, dropped) */
    /* added tokens: all, then the two matching sets by the `normalized` flag */
    vsr_added_token *added;
    size_t n_added;
    vsr_strmap added_map;
    bool has_normalized_added;
    bool added_first[2][256]; /* [normalized][byte]: some added token starts with this byte */
    int16_t char_byte[324];   /* GPT-2 alphabet char -> byte, -1 outside it */
    vsr_pcre_split pcre;
    vsr_split_impl split_default;
    vsr_bpe_cache *cache;
    int32_t pad_id;           /* tokenizer_config.json's pad token (Qwen2Tokenizer's default
                               * <|endoftext|> when absent), -1 when null or no config */
};

/* ---- BPE (bpe.c) ---- */
vsr_status vsr_strmap_init(vsr_strmap *m, uint32_t expected);
void vsr_strmap_free(vsr_strmap *m);
/* key must outlive the map; returns VSR_E_INVALID on a duplicate key. */
vsr_status vsr_strmap_put(vsr_strmap *m, const char *key, size_t len, int32_t val);
int32_t vsr_strmap_get(const vsr_strmap *m, const char *key, size_t len); /* -1 if absent */
vsr_status vsr_merge_map_init(vsr_merge_map *m, size_t expected);
void vsr_merge_map_free(vsr_merge_map *m);
/* A later duplicate pair replaces the earlier one (as tokenizers' HashMap collect does). */
void vsr_merge_map_put(vsr_merge_map *m, int32_t left, int32_t right, int32_t rank, int32_t merged);
vsr_bpe_cache *vsr_bpe_cache_new(void);
void vsr_bpe_cache_free(vsr_bpe_cache *c);

/* Growable id list. */
typedef struct vsr_ids {
    int32_t *v;
    size_t n, cap;
} vsr_ids;
vsr_status vsr_ids_push(vsr_ids *ids, const int32_t *v, size_t n);

/* Appends the BPE ids of one pre-token (raw bytes; the ByteLevel mapping is implicit). */
vsr_status vsr_bpe_word(const vsr_tokenizer *t, const uint8_t *w, size_t n, vsr_ids *out);

/* Encodes with a chosen splitter (the public encode uses t->split_default). */
vsr_status vsr_tokenizer_encode_split(const vsr_tokenizer *t, vsr_split_impl impl, const char *text,
                                      size_t len, int32_t **ids, size_t *n_ids, vsr_err *err);

/* GPT-2 ByteLevel alphabet: byte b -> one code point. */
uint32_t vsr_byte_level_char(uint8_t b);

#endif
