/* vsr/tokenizer.h: byte-level BPE from a Hugging Face tokenizer.json, producing
 * exactly the ids Hugging Face `tokenizers` produces (Qwen2 split pattern, NFC,
 * ByteLevel, added/special tokens matched first). */
#ifndef VSR_TOKENIZER_H
#define VSR_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "vsr/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vsr_tokenizer vsr_tokenizer;

/* dir holds tokenizer.json (and tokenizer_config.json, whose added_tokens_decoder
 * entries are added as special tokens the way transformers' Qwen2Tokenizer does).
 * With a tokenizer_config.json, the published rules apply (published-d3.md "Tokenizer
 * rules"): tokenizer_class Qwen2Tokenizer or Qwen2TokenizerFast, add_prefix_space and
 * add_bos_token absent, null or false, added_tokens_decoder an object whose every entry
 * gets its listed id. */
vsr_status vsr_tokenizer_open(const char *dir, vsr_tokenizer **out, vsr_err *err);
void vsr_tokenizer_free(vsr_tokenizer *t);

/* Encodes UTF-8 text (no BOS, no prefix space). *ids is malloc'd; caller frees. */
vsr_status vsr_tokenizer_encode(const vsr_tokenizer *t, const char *text, size_t len, int32_t **ids,
                                size_t *n_ids, vsr_err *err);
/* Id of an exact vocabulary or added token string, or -1. */
int32_t vsr_tokenizer_token_id(const vsr_tokenizer *t, const char *token);
size_t vsr_tokenizer_vocab_size(const vsr_tokenizer *t);
/* Id of the pad token (tokenizer_config.json pad_token, Qwen2Tokenizer's default
 * <|endoftext|> when the key is absent), or -1 when there is none (pad_token null, or
 * no tokenizer_config.json). */
int32_t vsr_tokenizer_pad_id(const vsr_tokenizer *t);
/* Token string of an id (GPT-2 byte alphabet for vocabulary tokens, literal text for
 * added tokens), or NULL. Owned by the tokenizer. */
const char *vsr_tokenizer_token_str(const vsr_tokenizer *t, int32_t id);
/* Bytes the ids stand for (ByteLevel decoding; added tokens as their text; nothing is
 * skipped). A cut through a multi-byte char leaves invalid UTF-8, as the raw bytes are.
 * *text is malloc'd and NUL-terminated; caller frees. Unknown ids are refused. */
vsr_status vsr_tokenizer_decode(const vsr_tokenizer *t, const int32_t *ids, size_t n, char **text,
                                size_t *len, vsr_err *err);

#ifdef __cplusplus
}
#endif

#endif
