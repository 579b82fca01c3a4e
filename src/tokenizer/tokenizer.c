/* vsr_tokenizer: loading tokenizer.json the way transformers 5 rebuilds Qwen2Tokenizer,
 * and the encode pipeline (see tokenizer_internal.h for the stages). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/json_util.h"
#include "tokenizer/tokenizer_internal.h"

#define TOKENIZER_JSON_MAX ((size_t)512 << 20)
#define TOKENIZER_CONFIG_MAX ((size_t)16 << 20)

/* ---------------- loading ---------------- */

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) memcpy(p, s, n), p[n] = 0;
    return p;
}

static vsr_status set_id_str(vsr_tokenizer *t, int32_t id, const char *s, size_t n, const char *where,
                             vsr_err *err) {
    if (id < 0 || id >= t->n_ids)
        return vsr_err_set(err, VSR_E_INTERNAL, "%s: id %d outside the table", where, id);
    if (t->id_str[id]) return VSR_OK; /* an added token that is also in the vocabulary */
    if (!(t->id_str[id] = dup_n(s, n))) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", where);
    return VSR_OK;
}

/* The added-token id tokenizers' AddedVocabulary::add_tokens assigns: the vocabulary id
 * when the content is a vocabulary token, else one past the largest added id (or the
 * vocabulary's entry count). */
static int32_t next_added_id(const vsr_tokenizer *t, const char *content, size_t len) {
    int32_t v = vsr_strmap_get(&t->vocab, content, len);
    if (v >= 0) return v;
    int32_t vs = (int32_t)t->vocab.n, max = -1;
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].id > max) max = t->added[i].id;
    if (max < 0) return vs;
    return (max >= vs || vs == 0) ? max + 1 : vs;
}

/* Adds one token unless its content is already added (tokenizers compares AddedTokens by
 * content only, so the first flags win). want_id < 0: any id. */
static vsr_status add_token(vsr_tokenizer *t, const char *content, size_t len, int64_t want_id,
                            bool special, bool normalized, bool lstrip, bool rstrip, bool single_word,
                            const char *where, vsr_err *err) {
    if (len == 0) return VSR_OK; /* tokenizers ignores empty added tokens */
    int32_t have = vsr_strmap_get(&t->added_map, content, len);
    int32_t id = have >= 0 ? have : next_added_id(t, content, len);
    if (want_id >= 0 && id != want_id)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: special token '%s' does not get ID %lld (tokenizers gives it ID %d: added "
                           "tokens must follow the vocabulary in id order)",
                           where, content, (long long)want_id, id);
    if (have >= 0) return VSR_OK;
    vsr_added_token *na = realloc(t->added, (t->n_added + 1) * sizeof *na);
    if (!na) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", where);
    t->added = na;
    vsr_added_token *a = &t->added[t->n_added];
    *a = (vsr_added_token){.content = dup_n(content, len), .len = len, .id = id, .special = special,
                           .normalized = normalized, .lstrip = lstrip, .rstrip = rstrip,
                           .single_word = single_word};
    if (!a->content) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", where);
    t->n_added++;
    if (vsr_strmap_put(&t->added_map, a->content, len, id) != VSR_OK)
        return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", where);
    if (normalized) t->has_normalized_added = true;
    return VSR_OK;
}

static bool get_flag(const json_t *o, const char *key, bool dflt) {
    const json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* An added token object: {"content": s, "special": b, "normalized": b, "lstrip": b, ...}.
 * A missing `normalized` defaults to !special, as tokenizers' AddedToken does. */
static vsr_status add_token_json(vsr_tokenizer *t, const json_t *o, int64_t want_id, bool force_special,
                                 const char *where, vsr_err *err) {
    const json_t *c = json_object_get(o, "content");
    if (!json_is_string(c))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: expected a string \"content\"", where);
    static const char *const flags[] = {"special", "normalized", "lstrip", "rstrip", "single_word"};
    for (size_t i = 0; i < 5; i++) {
        const json_t *f = json_object_get(o, flags[i]);
        if (f && !json_is_boolean(f))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" must be true or false", where, flags[i]);
    }
    bool special = force_special || get_flag(o, "special", false);
    return add_token(t, json_string_value(c), json_string_length(c), want_id, special,
                     get_flag(o, "normalized", !special), get_flag(o, "lstrip", false),
                     get_flag(o, "rstrip", false), get_flag(o, "single_word", false), where, err);
}

static vsr_status load_vocab(vsr_tokenizer *t, const json_t *vocab, vsr_err *err) {
    size_t n = json_object_size(vocab);
    if (vsr_strmap_init(&t->vocab, (uint32_t)n) != VSR_OK)
        return vsr_err_set(err, VSR_E_NOMEM, "tokenizer.json: out of memory for %zu tokens", n);
    int64_t max = -1;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)vocab, k, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= INT32_MAX / 2)
            return vsr_err_set(err, VSR_E_FORMAT,
                               "tokenizer.json: model.vocab[\"%s\"] must be an id in [0, 2^30)", k);
        if (json_integer_value(v) > max) max = json_integer_value(v);
    }
    t->n_ids = (int32_t)(max + 1);
    return VSR_OK;
}

static vsr_status fill_vocab(vsr_tokenizer *t, const json_t *vocab, vsr_err *err) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)vocab, k, v) {
        int32_t id = (int32_t)json_integer_value(v);
        if (t->id_str[id])
            return vsr_err_set(err, VSR_E_FORMAT,
                               "tokenizer.json: model.vocab gives id %d to both \"%s\" and \"%s\"", id,
                               t->id_str[id], k);
        vsr_status st = set_id_str(t, id, k, strlen(k), "tokenizer.json", err);
        if (st) return st;
        if (vsr_strmap_put(&t->vocab, t->id_str[id], strlen(k), id) != VSR_OK)
            return vsr_err_set(err, VSR_E_NOMEM, "tokenizer.json: out of memory");
    }
    return VSR_OK;
}

static vsr_status load_merges(vsr_tokenizer *t, const json_t *merges, vsr_err *err) {
    size_t n = json_array_size(merges);
    if (vsr_merge_map_init(&t->merges, n) != VSR_OK)
        return vsr_err_set(err, VSR_E_NOMEM, "tokenizer.json: out of memory for %zu merges", n);
    char buf[1024];
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t la, lb;
        if (json_is_string(m)) { /* "a b": exactly one space */
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == s || !sp[1])
                return vsr_err_set(err, VSR_E_FORMAT,
                                   "tokenizer.json: model.merges[%zu] \"%s\" is not two tokens joined by one space",
                                   i, s);
            a = s, la = (size_t)(sp - s), b = sp + 1, lb = strlen(sp + 1);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0)), la = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1)), lb = json_string_length(json_array_get(m, 1));
        } else {
            return vsr_err_set(err, VSR_E_FORMAT,
                               "tokenizer.json: model.merges[%zu] must be \"a b\" or [\"a\", \"b\"]", i);
        }
        int32_t ia = vsr_strmap_get(&t->vocab, a, la), ib = vsr_strmap_get(&t->vocab, b, lb);
        if (ia < 0 || ib < 0)
            return vsr_err_set(err, VSR_E_FORMAT,
                               "tokenizer.json: model.merges[%zu]: \"%.*s\" is not in the vocabulary", i,
                               (int)(ia < 0 ? la : lb), ia < 0 ? a : b);
        if (la + lb >= sizeof buf)
            return vsr_err_set(err, VSR_E_FORMAT, "tokenizer.json: model.merges[%zu] is over %zu bytes", i,
                               sizeof buf);
        memcpy(buf, a, la), memcpy(buf + la, b, lb);
        int32_t im = vsr_strmap_get(&t->vocab, buf, la + lb);
        if (im < 0)
            return vsr_err_set(err, VSR_E_FORMAT,
                               "tokenizer.json: model.merges[%zu]: the merged token \"%.*s\" is not in the "
                               "vocabulary", i, (int)(la + lb), buf);
        vsr_merge_map_put(&t->merges, ia, ib, (int32_t)i, im);
    }
    return VSR_OK;
}

/* transformers' Qwen2Tokenizer keeps tokenizer.json's post-processor; one that inserts
 * tokens (TemplateProcessing, BOS) would change the ids, so only ByteLevel is served. */
static vsr_status check_post_processor(const json_t *pp, vsr_err *err) {
    if (!pp || json_is_null(pp)) return VSR_OK;
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (type && !strcmp(type, "ByteLevel")) return VSR_OK;
    if (type && !strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(pp, "processors");
        size_t i;
        json_t *p;
        json_array_foreach(list, i, p) {
            vsr_status st = check_post_processor(p, err);
            if (st) return st;
        }
        return VSR_OK;
    }
    return vsr_err_set(err, VSR_E_UNSUPPORTED,
                       "tokenizer.json: post_processor type \"%s\" may add tokens (expected ByteLevel or null)",
                       type ? type : "?");
}

/* Named special tokens (string or {"content": ...}); Qwen2Tokenizer's defaults apply when
 * a key is absent, JSON null means none. */
static vsr_status add_named_specials(vsr_tokenizer *t, const json_t *cfg, vsr_err *err) {
    static const struct {
        const char *key, *dflt;
    } named[] = {{"bos_token", NULL},   {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"},
                 {"sep_token", NULL},   {"pad_token", "<|endoftext|>"}, {"cls_token", NULL},
                 {"mask_token", NULL}};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        const json_t *v = json_object_get(cfg, named[i].key);
        char where[96];
        snprintf(where, sizeof where, "tokenizer_config.json: %s", named[i].key);
        vsr_status st = VSR_OK;
        if (!v && named[i].dflt)
            st = add_token(t, named[i].dflt, strlen(named[i].dflt), -1, true, false, false, false, false,
                           where, err);
        else if (json_is_string(v))
            st = add_token(t, json_string_value(v), json_string_length(v), -1, true, false, false, false,
                           false, where, err);
        else if (json_is_object(v))
            st = add_token_json(t, v, -1, true, where, err);
        else if (v && !json_is_null(v))
            st = vsr_err_set(err, VSR_E_FORMAT, "%s: expected a string, an object or null", where);
        if (st) return st;
        if (!strcmp(named[i].key, "pad_token")) {
            const char *c = !v ? named[i].dflt
                            : json_is_string(v) ? json_string_value(v)
                            : json_is_object(v) ? json_string_value(json_object_get(v, "content")) : NULL;
            t->pad_id = c && *c ? vsr_strmap_get(&t->added_map, c, strlen(c)) : -1;
        }
    }
    static const char *const lists[] = {"additional_special_tokens", "extra_special_tokens"};
    for (size_t l = 0; l < 2; l++) {
        const json_t *arr = json_object_get(cfg, lists[l]);
        if (!json_is_array(arr)) continue;
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v) {
            char where[96];
            snprintf(where, sizeof where, "tokenizer_config.json: %s[%zu]", lists[l], i);
            vsr_status st = json_is_string(v) ? add_token(t, json_string_value(v), json_string_length(v), -1,
                                                          true, false, false, false, false, where, err)
                            : json_is_object(v) ? add_token_json(t, v, -1, true, where, err)
                                                : vsr_err_set(err, VSR_E_FORMAT, "%s: expected a string", where);
            if (st) return st;
        }
    }
    return VSR_OK;
}

static int cmp_key_id(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* tokenizer_config.json (its rules already checked): add added_tokens_decoder in id order,
 * then the named special tokens (TokenizersBackend.__init__ and Qwen2Tokenizer.__init__). */
static vsr_status load_config(vsr_tokenizer *t, const json_t *cfg, vsr_err *err) {
    const json_t *dec = json_object_get(cfg, "added_tokens_decoder");
    if (dec && !json_is_object(dec))
        return vsr_err_set(err, VSR_E_FORMAT, "tokenizer_config.json: added_tokens_decoder must be an object");
    size_t n = json_object_size(dec), k = 0;
    long long *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return vsr_err_set(err, VSR_E_NOMEM, "tokenizer_config.json: out of memory");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)dec, key, v) {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || id < 0 || id >= INT32_MAX / 2 || !json_is_object(v)) {
            free(ids);
            return vsr_err_set(err, VSR_E_FORMAT,
                               "tokenizer_config.json: added_tokens_decoder[\"%s\"]: expected a decimal id "
                               "and a token object", key);
        }
        ids[k++] = id;
    }
    qsort(ids, n, sizeof *ids, cmp_key_id);
    for (size_t i = 0; i < n; i++) {
        char skey[32], where[96];
        snprintf(skey, sizeof skey, "%lld", ids[i]);
        snprintf(where, sizeof where, "tokenizer_config.json: added_tokens_decoder[\"%s\"]", skey);
        const json_t *o = json_object_get(dec, skey);
        if (!o) {
            free(ids);
            return vsr_err_set(err, VSR_E_FORMAT, "%s: key is not in canonical decimal form", where);
        }
        /* every entry is added as a special token (published-d3.md "Tokenizer rules") */
        vsr_status st = add_token_json(t, o, ids[i], true, where, err);
        if (st) {
            free(ids);
            return st;
        }
    }
    free(ids);
    return add_named_specials(t, cfg, err);
}

/* The rules of a Qwen2 tokenizer (published-d3.md "Tokenizer rules"): the class, and no
 * prefix space or BOS token (the flags absent, null or false). */
static vsr_status check_config_rules(const json_t *cfg, vsr_err *err) {
    const json_t *cls = json_object_get(cfg, "tokenizer_class");
    if (!json_is_string(cls) ||
        (strcmp(json_string_value(cls), "Qwen2Tokenizer") && strcmp(json_string_value(cls), "Qwen2TokenizerFast"))) {
        char *shown = !cls ? strdup("None") : json_is_string(cls) ? strdup(json_string_value(cls))
                                                                  : vsr_json_dumps_python(cls, false, false, false);
        vsr_status st = vsr_err_set(err, VSR_E_UNSUPPORTED,
                                    "tokenizer_config.json: unsupported tokenizer class '%s' (tokenizer_class must "
                                    "be Qwen2Tokenizer or Qwen2TokenizerFast)",
                                    shown ? shown : "?");
        free(shown);
        return st;
    }
    static const char *const flags[] = {"add_prefix_space", "add_bos_token"};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(cfg, flags[i]);
        if (v && !json_is_null(v) && !json_is_false(v)) {
            char *shown = vsr_json_dumps_python(v, false, false, false);
            vsr_status st = vsr_err_set(err, VSR_E_UNSUPPORTED,
                                        "tokenizer_config.json: %s is %s: the tokenizer must not add a prefix "
                                        "space or a BOS token",
                                        flags[i], shown ? shown : "set");
            free(shown);
            return st;
        }
    }
    return VSR_OK;
}

static vsr_status load(vsr_tokenizer *t, const char *dir, vsr_err *err) {
    char path[4200];
    json_t *tj = NULL, *cfg = NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    vsr_status st = vsr_json_load_file(path, NULL, TOKENIZER_JSON_MAX, &tj, err);
    if (st) return st;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    vsr_err cerr;
    st = vsr_json_load_file(path, NULL, TOKENIZER_CONFIG_MAX, &cfg, &cerr);
    if (st == VSR_E_NOT_FOUND) cfg = NULL;
    else if (st) {
        *err = cerr;
        goto out;
    }
    if (cfg && !json_is_object(cfg)) {
        st = vsr_err_set(err, VSR_E_FORMAT, "%s: expected a JSON object", path);
        goto out;
    }
    if (cfg && (st = check_config_rules(cfg, err))) goto out;
    const json_t *model = json_object_get(tj, "model");
    if (!json_is_object(model)) {
        st = vsr_err_set(err, VSR_E_FORMAT, "%s/tokenizer.json: no \"model\" object", dir);
        goto out;
    }
    const json_t *type = json_object_get(model, "type");
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "BPE"))) {
        st = vsr_err_set(err, VSR_E_UNSUPPORTED, "%s/tokenizer.json: model type \"%s\" is not supported (expected BPE)",
                         dir, json_is_string(type) ? json_string_value(type) : "?");
        goto out;
    }
    const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab) || json_object_size(vocab) == 0) {
        st = vsr_err_set(err, VSR_E_FORMAT, "%s/tokenizer.json: model.vocab must be a non-empty object of token -> id",
                         dir);
        goto out;
    }
    if (!json_is_array(merges)) {
        st = vsr_err_set(err, VSR_E_FORMAT, "%s/tokenizer.json: model.merges must be an array", dir);
        goto out;
    }
    if ((st = check_post_processor(json_object_get(tj, "post_processor"), err))) goto out;
    if ((st = load_vocab(t, vocab, err))) goto out;
    /* Added tokens: tokenizer_config.json's added_tokens_decoder when there is a config
     * (transformers ignores tokenizer.json's list then), else tokenizer.json's list. */
    int32_t n_vocab_ids = t->n_ids;
    int64_t max_added = -1;
    const json_t *atl = json_object_get(tj, "added_tokens");
    {
        const char *k;
        json_t *v;
        json_object_foreach(cfg ? json_object_get(cfg, "added_tokens_decoder") : NULL, k, v) {
            long long id = strtoll(k, NULL, 10);
            if (id > max_added && id < INT32_MAX / 2) max_added = id;
        }
        size_t i;
        json_array_foreach(cfg ? NULL : atl, i, v) {
            json_int_t id = json_integer_value(json_object_get(v, "id"));
            if (id > max_added && id < INT32_MAX / 2) max_added = id;
        }
    }
    /* room for every id: vocabulary, listed added ids, and up to 64 named specials */
    t->n_ids = (int32_t)((max_added + 1 > n_vocab_ids ? max_added + 1 : n_vocab_ids) + 64);
    t->id_str = calloc((size_t)t->n_ids, sizeof *t->id_str);
    if (!t->id_str || vsr_strmap_init(&t->added_map, 64) != VSR_OK) {
        st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", dir);
        goto out;
    }
    if ((st = fill_vocab(t, vocab, err))) goto out;
    if ((st = load_merges(t, merges, err))) goto out;
    if (cfg) {
        if ((st = load_config(t, cfg, err))) goto out;
    } else if (atl) {
        if (!json_is_array(atl)) {
            st = vsr_err_set(err, VSR_E_FORMAT, "%s/tokenizer.json: added_tokens must be an array", dir);
            goto out;
        }
        size_t i;
        json_t *v;
        json_array_foreach(atl, i, v) {
            char where[96];
            snprintf(where, sizeof where, "tokenizer.json: added_tokens[%zu]", i);
            const json_t *id = json_object_get(v, "id");
            if (!json_is_object(v) || !json_is_integer(id)) {
                st = vsr_err_set(err, VSR_E_FORMAT, "%s: expected an object with an integer \"id\"", where);
                goto out;
            }
            if ((st = add_token_json(t, v, json_integer_value(id), false, where, err))) goto out;
        }
    }
    if (t->n_added > 64 + (size_t)(max_added + 1 > n_vocab_ids ? max_added + 1 - n_vocab_ids : 0)) {
        st = vsr_err_set(err, VSR_E_FORMAT, "%s: too many named special tokens", dir);
        goto out;
    }
    int32_t top = n_vocab_ids;
    for (size_t i = 0; i < t->n_added; i++) {
        if (t->added[i].id >= t->n_ids) {
            st = vsr_err_set(err, VSR_E_FORMAT, "%s: added token \"%s\" has id %d beyond the table", dir,
                             t->added[i].content, t->added[i].id);
            goto out;
        }
        if ((st = set_id_str(t, t->added[i].id, t->added[i].content, t->added[i].len, dir, err))) goto out;
        if (t->added[i].id + 1 > top) top = t->added[i].id + 1;
    }
    t->n_ids = top;
    /* distinct token strings (tokenizers' get_vocab_size(with_added_tokens=True)) */
    t->vocab_count = t->vocab.n;
    for (size_t i = 0; i < t->n_added; i++)
        if (vsr_strmap_get(&t->vocab, t->added[i].content, t->added[i].len) < 0) t->vocab_count++;
    for (size_t i = 0; i < t->n_added; i++) t->added_first[t->added[i].normalized][(uint8_t)t->added[i].content[0]] = true;
    for (int k = 0; k < 324; k++) t->char_byte[k] = -1;
    for (int b = 0; b < 256; b++) t->char_byte[vsr_byte_level_char((uint8_t)b)] = (int16_t)b;
    /* ByteLevel: the initial symbol of each byte is its GPT-2 alphabet char's vocab id */
    for (int b = 0; b < 256; b++) {
        char u[4];
        utf8proc_ssize_t l = utf8proc_encode_char((utf8proc_int32_t)vsr_byte_level_char((uint8_t)b),
                                                  (utf8proc_uint8_t *)u);
        t->byte_id[b] = vsr_strmap_get(&t->vocab, u, (size_t)l);
    }
    st = VSR_OK;
out:
    json_decref(tj);
    json_decref(cfg);
    return st;
}

vsr_status vsr_tokenizer_open(const char *dir, vsr_tokenizer **out, vsr_err *err) {
    *out = NULL;
    if (!dir || !*dir) return vsr_err_set(err, VSR_E_INVALID, "tokenizer: no folder given");
    vsr_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return vsr_err_set(err, VSR_E_NOMEM, "tokenizer %s: out of memory", dir);
    snprintf(t->dir, sizeof t->dir, "%s", dir);
    t->pad_id = -1;
    vsr_status st = load(t, dir, err);
    if (st == VSR_OK) st = vsr_pcre_split_init(&t->pcre, VSR_QWEN2_PATTERN, err);
    if (st == VSR_OK && !(t->cache = vsr_bpe_cache_new()))
        st = vsr_err_set(err, VSR_E_NOMEM, "tokenizer %s: out of memory", dir);
    if (st) {
        vsr_tokenizer_free(t);
        return st;
    }
    /* The fast splitter is the default: bench/RESULTS.md and bench/notes/cpu.md have the figures
     * (VSR_TOKENIZER_SPLIT=pcre2 selects the oracle, for checking). */
    const char *env = getenv("VSR_TOKENIZER_SPLIT");
    t->split_default = env && !strcmp(env, "pcre2") ? VSR_SPLIT_PCRE2 : VSR_SPLIT_FAST;
    *out = t;
    return VSR_OK;
}

void vsr_tokenizer_free(vsr_tokenizer *t) {
    if (!t) return;
    if (t->id_str)
        for (int32_t i = 0; i < t->n_ids; i++) free(t->id_str[i]);
    free(t->id_str);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    vsr_strmap_free(&t->vocab);
    vsr_strmap_free(&t->added_map);
    vsr_merge_map_free(&t->merges);
    vsr_pcre_split_free(&t->pcre);
    vsr_bpe_cache_free(t->cache);
    free(t);
}

int32_t vsr_tokenizer_token_id(const vsr_tokenizer *t, const char *token) {
    if (!t || !token) return -1;
    size_t n = strlen(token);
    int32_t id = vsr_strmap_get(&t->added_map, token, n);
    return id >= 0 ? id : vsr_strmap_get(&t->vocab, token, n);
}

size_t vsr_tokenizer_vocab_size(const vsr_tokenizer *t) { return t ? t->vocab_count : 0; }

int32_t vsr_tokenizer_pad_id(const vsr_tokenizer *t) { return t ? t->pad_id : -1; }

const char *vsr_tokenizer_token_str(const vsr_tokenizer *t, int32_t id) {
    return (t && id >= 0 && id < t->n_ids) ? t->id_str[id] : NULL;
}

/* ---------------- encoding ---------------- */

typedef struct enc_ctx {
    const vsr_tokenizer *t;
    vsr_split_impl impl;
    pcre2_match_data *md;
    vsr_ids *out;
    const char *base;
    vsr_status st;
} enc_ctx;

static int on_piece(void *p, size_t start, size_t end) {
    enc_ctx *c = p;
    c->st = vsr_bpe_word(c->t, (const uint8_t *)c->base + start, end - start, c->out);
    return c->st != VSR_OK;
}

/* Pre-tokenizes and BPE-encodes one normalized piece. */
static vsr_status encode_piece(enc_ctx *c, const char *s, size_t n, vsr_err *err) {
    c->base = s;
    c->st = VSR_OK;
    int rc = c->impl == VSR_SPLIT_PCRE2 ? vsr_split_pcre2(&c->t->pcre, c->md, s, n, on_piece, c)
                                        : vsr_split_fast(s, n, on_piece, c);
    if (c->st) return vsr_err_set(err, c->st, "tokenizer: out of memory while encoding");
    if (rc) return vsr_err_set(err, VSR_E_INTERNAL, "tokenizer: PCRE2 failed on a %zu-byte piece", n);
    return VSR_OK;
}

static uint32_t last_char(const char *s, size_t n) { /* of valid UTF-8 s[0..n), n > 0 */
    size_t i = n - 1;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80) i--;
    int32_t cp;
    utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
    return (uint32_t)cp;
}

static uint32_t first_char(const char *s, size_t n) {
    int32_t cp;
    utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &cp);
    return (uint32_t)cp;
}

typedef vsr_status (*gap_fn)(enc_ctx *c, const char *s, size_t n, vsr_err *err);

/* tokenizers' AddedVocabulary::find_matches over the tokens whose `normalized` flag is
 * `want_normalized`: leftmost-longest matches, then the single_word / lstrip / rstrip
 * rules; gaps go to `gap`, matched tokens become their ids. */
static vsr_status split_added(enc_ctx *c, const char *s, size_t n, bool want_normalized, gap_fn gap,
                              vsr_err *err) {
    const vsr_tokenizer *t = c->t;
    size_t start_off = 0, i = 0;
    vsr_status st;
    while (i < n) {
        /* leftmost-longest: the first position where any token matches, its longest token */
        const vsr_added_token *best = NULL;
        const bool *first = t->added_first[want_normalized];
        for (; i < n && !best; i++) {
            if (!first[(uint8_t)s[i]]) continue;
            for (size_t k = 0; k < t->n_added; k++) {
                const vsr_added_token *a = &t->added[k];
                if (a->normalized != want_normalized || (uint8_t)a->content[0] != (uint8_t)s[i] ||
                    a->len > n - i || (best && a->len <= best->len) || memcmp(a->content, s + i, a->len))
                    continue;
                best = a;
            }
        }
        if (!best) break;
        size_t start = i - 1, stop = start + best->len;
        i = stop;
        if (best->single_word) {
            bool start_space = start == 0 || !(vsr_is_alnum(last_char(s, start)) || s[start - 1] == '_');
            bool stop_space = stop == n || !(vsr_is_alnum(first_char(s + stop, n - stop)) || s[stop] == '_');
            if (!start_space || !stop_space) continue; /* not a whole word: text, search on after it */
        }
        if (best->lstrip) { /* swallow the whitespace before it, but not into the previous match */
            size_t ns = start;
            while (ns > 0) {
                size_t p = ns - 1;
                while (p > 0 && ((uint8_t)s[p] & 0xC0) == 0x80) p--;
                if (!vsr_is_white_space(first_char(s + p, ns - p))) break;
                ns = p;
            }
            start = ns > start_off ? ns : start_off;
        }
        if (best->rstrip) {
            while (stop < n) {
                size_t l = 1;
                while (stop + l < n && ((uint8_t)s[stop + l] & 0xC0) == 0x80) l++;
                if (!vsr_is_white_space(first_char(s + stop, l))) break;
                stop += l;
            }
        }
        if (start_off < start && (st = gap(c, s + start_off, start - start_off, err))) return st;
        if ((st = vsr_ids_push(c->out, &best->id, 1)))
            return vsr_err_set(err, st, "tokenizer: out of memory while encoding");
        start_off = stop;
        if (i < stop) i = stop;
    }
    if (start_off < n) return gap(c, s + start_off, n - start_off, err);
    return VSR_OK;
}

static vsr_status normalized_gap(enc_ctx *c, const char *s, size_t n, vsr_err *err) {
    return encode_piece(c, s, n, err);
}

/* A piece outside the non-normalized added tokens: NFC, then the normalized added
 * tokens, then pre-tokenization and BPE. */
static vsr_status raw_gap(enc_ctx *c, const char *s, size_t n, vsr_err *err) {
    utf8proc_uint8_t *nfc = NULL;
    if (!vsr_nfc_quick_stable(s, n)) {
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (r < 0)
            return vsr_err_set(err, r == UTF8PROC_ERROR_NOMEM ? VSR_E_NOMEM : VSR_E_INVALID,
                               "tokenizer: NFC normalisation failed: %s", utf8proc_errmsg(r));
        s = (const char *)nfc, n = (size_t)r;
    }
    vsr_status st = c->t->has_normalized_added ? split_added(c, s, n, true, normalized_gap, err)
                                               : encode_piece(c, s, n, err);
    free(nfc);
    return st;
}

vsr_status vsr_tokenizer_encode_split(const vsr_tokenizer *t, vsr_split_impl impl, const char *text,
                                      size_t len, int32_t **ids, size_t *n_ids, vsr_err *err) {
    *ids = NULL;
    *n_ids = 0;
    if (!t || (!text && len)) return vsr_err_set(err, VSR_E_INVALID, "tokenizer: no tokenizer or text");
    size_t bad = vsr_utf8_invalid_at(text, len);
    if (bad != (size_t)-1)
        return vsr_err_set(err, VSR_E_INVALID, "tokenizer: text is not valid UTF-8 at byte offset %zu (byte 0x%02X)",
                           bad, (unsigned)(uint8_t)text[bad]);
    vsr_ids out = {0};
    enc_ctx c = {.t = t, .impl = impl, .out = &out};
    if (impl == VSR_SPLIT_PCRE2 && !(c.md = pcre2_match_data_create_from_pattern(t->pcre.code, NULL)))
        return vsr_err_set(err, VSR_E_NOMEM, "tokenizer: out of memory");
    vsr_status st = len ? split_added(&c, text, len, false, raw_gap, err) : VSR_OK;
    pcre2_match_data_free(c.md);
    if (st) {
        free(out.v);
        return st;
    }
    if (!out.v && !(out.v = malloc(sizeof *out.v))) /* a valid pointer even for zero ids */
        return vsr_err_set(err, VSR_E_NOMEM, "tokenizer: out of memory");
    *ids = out.v;
    *n_ids = out.n;
    return VSR_OK;
}

vsr_status vsr_tokenizer_encode(const vsr_tokenizer *t, const char *text, size_t len, int32_t **ids,
                                size_t *n_ids, vsr_err *err) {
    return vsr_tokenizer_encode_split(t, t ? t->split_default : VSR_SPLIT_FAST, text, len, ids, n_ids, err);
}

/* ---------------- decoding ---------------- */

vsr_status vsr_tokenizer_decode(const vsr_tokenizer *t, const int32_t *ids, size_t n, char **text,
                                size_t *len, vsr_err *err) {
    *text = NULL;
    *len = 0;
    const int16_t *char_byte = t->char_byte;
    size_t cap = 64, o = 0;
    char *buf = malloc(cap);
    if (!buf) return vsr_err_set(err, VSR_E_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *s = vsr_tokenizer_token_str(t, ids[i]);
        if (!s) {
            free(buf);
            return vsr_err_set(err, VSR_E_INVALID, "tokenizer: id %d (position %zu) is not a token", ids[i], i);
        }
        size_t sl = strlen(s);
        if (o + sl + 1 > cap) {
            while (o + sl + 1 > cap) cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                return vsr_err_set(err, VSR_E_NOMEM, "tokenizer: out of memory");
            }
            buf = nb;
        }
        if (vsr_strmap_get(&t->added_map, s, sl) >= 0) { /* added tokens are literal text */
            memcpy(buf + o, s, sl), o += sl;
            continue;
        }
        for (size_t k = 0; k < sl;) { /* every vocabulary char is one GPT-2 alphabet byte */
            int32_t cp;
            utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + k, (utf8proc_ssize_t)(sl - k), &cp);
            if (l <= 0 || cp < 0 || cp >= 324 || char_byte[cp] < 0) {
                free(buf);
                return vsr_err_set(err, VSR_E_FORMAT,
                                   "tokenizer: token %d \"%s\" has a char outside the ByteLevel alphabet", ids[i], s);
            }
            buf[o++] = (char)char_byte[cp];
            k += (size_t)l;
        }
    }
    buf[o] = 0;
    *text = buf;
    *len = o;
    return VSR_OK;
}
