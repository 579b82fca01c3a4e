/* vsr/tokenizer.h: byte-level BPE from a Hugging Face tokenizer.json, producing
 * exactly the ids Hugging Face `tokenizers` produces (Qwen2 split pattern, NFC,
 * ByteLevel, added/special tokens matched first). */
#ifndef VSR_TOKENIZER_H
#define VSR_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "vsr/error.h"

typedef struct vsr_tokenizer vsr_tokenizer;

/* dir holds tokenizer.json (and tokenizer_config.json, whose added_tokens_decoder
 * entries are added as special tokens the way transformers' Qwen2Tokenizer does). */
vsr_status vsr_tokenizer_open(const char *dir, vsr_tokenizer **out, vsr_err *err);
void vsr_tokenizer_free(vsr_tokenizer *t);

/* Encodes UTF-8 text (no BOS, no prefix space). *ids is malloc'd; caller frees. */
vsr_status vsr_tokenizer_encode(const vsr_tokenizer *t, const char *text, size_t len, int32_t **ids,
                                size_t *n_ids, vsr_err *err);
/* Id of an exact vocabulary or added token string, or -1. */
int32_t vsr_tokenizer_token_id(const vsr_tokenizer *t, const char *token);
size_t vsr_tokenizer_vocab_size(const vsr_tokenizer *t);

#endif
