/* Tokenizer: exact ids against Hugging Face `tokenizers` on the committed corpus
 * (tests/data/tokenizer, made by tools/make_tokenizer_corpus.py), the fast splitter
 * against the PCRE2 oracle, added-token flags, and every refusal. */
#include <jansson.h>
#include <string.h>
#include <utf8proc.h>

#include "test.h"
#include "tokenizer/tokenizer_internal.h"
#include "vsr/tokenizer.h"

#define QWEN3 VSR_DATA_DIR "/tokenizers/qwen3"
#define TDATA VSR_DATA_DIR "/../tests/data/tokenizer"

static vsr_tokenizer *tok;

typedef struct corpus {
    size_t n;
    char **text;
    size_t *len;
    int32_t **ids;
    size_t *n_ids;
} corpus;
static corpus C;

/* Reads a JSONL file of {"i": n, <field>: ...}; calls fn for each line. */
static size_t read_jsonl(const char *path, void (*fn)(size_t i, json_t *obj)) {
    char *buf = test_read_file(path, NULL);
    if (!buf) return 0;
    size_t count = 0;
    for (char *line = buf, *next; *line; line = next) {
        next = strchr(line, '\n');
        size_t l = next ? (size_t)(next - line) : strlen(line);
        next = next ? next + 1 : line + l;
        json_error_t je;
        json_t *o = json_loadb(line, l, JSON_ALLOW_NUL, &je);
        if (!o) continue;
        fn((size_t)json_integer_value(json_object_get(o, "i")), o);
        json_decref(o);
        count++;
    }
    free(buf);
    return count;
}

static void grow(size_t i) {
    if (i < C.n) return;
    size_t n = i + 1;
    C.text = realloc(C.text, n * sizeof *C.text);
    C.len = realloc(C.len, n * sizeof *C.len);
    C.ids = realloc(C.ids, n * sizeof *C.ids);
    C.n_ids = realloc(C.n_ids, n * sizeof *C.n_ids);
    for (size_t k = C.n; k < n; k++) C.text[k] = NULL, C.ids[k] = NULL, C.len[k] = C.n_ids[k] = 0;
    C.n = n;
}

static void on_text(size_t i, json_t *o) {
    grow(i);
    json_t *s = json_object_get(o, "text");
    C.len[i] = json_string_length(s);
    C.text[i] = malloc(C.len[i] + 1);
    memcpy(C.text[i], json_string_value(s), C.len[i] + 1);
}

static void on_ids(size_t i, json_t *o) {
    grow(i);
    json_t *a = json_object_get(o, "ids");
    C.n_ids[i] = json_array_size(a);
    C.ids[i] = malloc((C.n_ids[i] + 1) * sizeof(int32_t));
    for (size_t k = 0; k < C.n_ids[i]; k++) C.ids[i][k] = (int32_t)json_integer_value(json_array_get(a, k));
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

static void encode_corpus(vsr_split_impl impl, const char *name) {
    size_t bad = 0;
    for (size_t i = 0; i < C.n; i++) {
        int32_t *ids;
        size_t n;
        vsr_err err = {0};
        vsr_status st = vsr_tokenizer_encode_split(tok, impl, C.text[i], C.len[i], &ids, &n, &err);
        CHECK_OK(st, err);
        if (st) continue;
        if (!same_ids(ids, n, C.ids[i], C.n_ids[i])) {
            if (bad++ < 10) {
                size_t k = 0;
                while (k < n && k < C.n_ids[i] && ids[k] == C.ids[i][k]) k++;
                fprintf(stderr, "%s: corpus string %zu (%zu bytes) differs at id %zu: got %zu ids (%d), want %zu (%d)\n",
                        name, i, C.len[i], k, n, k < n ? ids[k] : -1, C.n_ids[i], k < C.n_ids[i] ? C.ids[i][k] : -1);
            }
        }
        free(ids);
    }
    CHECK_MSG(bad == 0, "%s: %zu of %zu corpus strings differ from tokenizers", name, bad, C.n);
}

TEST(corpus_loads) {
    size_t a = read_jsonl(TDATA "/corpus.jsonl", on_text), b = read_jsonl(TDATA "/expected.jsonl", on_ids);
    CHECK_MSG(a >= 3000 && a == b && C.n == a, "corpus %zu strings, expected %zu", a, b);
    for (size_t i = 0; i < C.n; i++) CHECK_MSG(C.text[i] && C.ids[i], "corpus line %zu missing", i);
}

TEST(opens_qwen3) {
    vsr_err err = {0};
    vsr_status st = vsr_tokenizer_open(QWEN3, &tok, &err);
    CHECK_OK(st, err);
    if (!tok) exit(test_summary() | 1);
    CHECK(vsr_tokenizer_vocab_size(tok) == 151669);
}

TEST(corpus_ids_fast) { encode_corpus(VSR_SPLIT_FAST, "fast splitter"); }
TEST(corpus_ids_pcre2) { encode_corpus(VSR_SPLIT_PCRE2, "PCRE2 splitter"); }

typedef struct spans {
    size_t n, cap;
    size_t *v;
} spans;

static int add_span(void *p, size_t a, size_t b) {
    spans *s = p;
    if (s->n + 2 > s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = a;
    s->v[s->n++] = b;
    return 0;
}

/* The splitters compared directly, on every corpus string and its NFC form. */
TEST(fast_split_equals_pcre2) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(tok->pcre.code, NULL);
    size_t bad = 0, pieces = 0;
    for (size_t i = 0; i < C.n; i++) {
        for (int form = 0; form < 2; form++) {
            const char *s = C.text[i];
            size_t n = C.len[i];
            utf8proc_uint8_t *nfc = NULL;
            if (form == 1) {
                utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                                  UTF8PROC_STABLE | UTF8PROC_COMPOSE);
                if (r < 0) continue;
                s = (const char *)nfc, n = (size_t)r;
            }
            spans a = {0}, b = {0};
            vsr_split_fast(s, n, add_span, &a);
            int rc = vsr_split_pcre2(&tok->pcre, md, s, n, add_span, &b);
            CHECK(rc == 0);
            pieces += a.n / 2;
            if (a.n != b.n || (a.n && memcmp(a.v, b.v, a.n * sizeof *a.v))) {
                if (bad++ < 10) {
                    size_t k = 0;
                    while (k < a.n && k < b.n && a.v[k] == b.v[k]) k++;
                    fprintf(stderr, "corpus string %zu (%s): splits differ at piece %zu: fast [%zu,%zu) pcre2 [%zu,%zu)\n",
                            i, form ? "NFC" : "raw", k / 2, k / 2 * 2 < a.n ? a.v[k / 2 * 2] : 0,
                            k / 2 * 2 + 1 < a.n ? a.v[k / 2 * 2 + 1] : 0, k / 2 * 2 < b.n ? b.v[k / 2 * 2] : 0,
                            k / 2 * 2 + 1 < b.n ? b.v[k / 2 * 2 + 1] : 0);
                }
            }
            free(a.v), free(b.v), free(nfc);
        }
    }
    pcre2_match_data_free(md);
    CHECK_MSG(bad == 0, "%zu of %zu strings split differently", bad, 2 * C.n);
    CHECK(pieces > 100000);
}

/* The NFC quick check may only say "stable" for text NFC leaves alone: every code point
 * after a starter that composes with many marks, and every corpus string. */
TEST(nfc_quick_check_is_sound) {
    size_t stable = 0, wrong = 0;
    for (uint32_t c = 1; c < 0x110000; c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        uint8_t in[8] = {'e'};
        utf8proc_ssize_t l = 1 + utf8proc_encode_char((utf8proc_int32_t)c, in + 1);
        if (!vsr_nfc_quick_stable((const char *)in, (size_t)l)) continue;
        stable++;
        utf8proc_uint8_t *out = NULL;
        utf8proc_ssize_t r = utf8proc_map(in, l, &out, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (r != l || memcmp(out, in, (size_t)l)) {
            if (wrong++ < 5) fprintf(stderr, "quick check calls e U+%04X stable, NFC changes it\n", c);
        }
        free(out);
    }
    CHECK(wrong == 0 && stable > 200000);
    CHECK(vsr_nfc_quick_stable("plain ASCII", 11));
    CHECK(!vsr_nfc_quick_stable("e\xCC\x81", 3)); /* e + U+0301 */
    CHECK(!vsr_nfc_quick_stable("\xE1\x84\x80\xE1\x85\xA1", 6)); /* Hangul L + V jamo */
    for (size_t i = 0; i < C.n; i++) {
        if (!vsr_nfc_quick_stable(C.text[i], C.len[i])) continue;
        utf8proc_uint8_t *out = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)C.text[i], (utf8proc_ssize_t)C.len[i], &out,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        CHECK_MSG(r == (utf8proc_ssize_t)C.len[i] && !memcmp(out, C.text[i], C.len[i]), "corpus string %zu", i);
        free(out);
    }
}

static void check_encode(const char *text, const int32_t *want, size_t n_want) {
    int32_t *ids;
    size_t n;
    vsr_err err = {0};
    vsr_status st = vsr_tokenizer_encode(tok, text, strlen(text), &ids, &n, &err);
    CHECK_OK(st, err);
    if (st) return;
    CHECK_MSG(same_ids(ids, n, want, n_want), "\"%s\": got %zu ids, first %d", text, n, n ? ids[0] : -1);
    free(ids);
}

TEST(special_tokens) {
    check_encode("<|im_start|>", (int32_t[]){151644}, 1);
    check_encode("<|im_end|><|endoftext|>", (int32_t[]){151645, 151643}, 2);
    check_encode("<think>", (int32_t[]){151667}, 1);
    check_encode("</think>", (int32_t[]){151668}, 1);
    int32_t a = vsr_tokenizer_token_id(tok, "a"), b = vsr_tokenizer_token_id(tok, "b");
    CHECK(a >= 0 && b >= 0);
    check_encode("a<|image_pad|>b", (int32_t[]){a, 151655, b}, 3);
    /* a prefix of a special token is plain text */
    int32_t *ids;
    size_t n;
    vsr_err err = {0};
    CHECK_OK(vsr_tokenizer_encode(tok, "<|im_start|", 11, &ids, &n, &err), err);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] < 151643);
    free(ids);
}

TEST(empty_string) {
    int32_t *ids = NULL;
    size_t n = 99;
    vsr_err err = {0};
    CHECK_OK(vsr_tokenizer_encode(tok, "", 0, &ids, &n, &err), err);
    CHECK(n == 0 && ids != NULL);
    free(ids);
    CHECK_OK(vsr_tokenizer_encode(tok, NULL, 0, &ids, &n, &err), err);
    CHECK(n == 0);
    free(ids);
}

TEST(invalid_utf8) {
    static const struct {
        const char *s;
        size_t len, off;
    } cases[] = {
        {"ab\xC3(", 4, 2},           /* bad continuation */
        {"abc\xE4\xB8", 5, 3},       /* truncated at the end */
        {"\xED\xA0\x80", 3, 0},      /* surrogate */
        {"xy\xC0\xAF", 4, 2},        /* overlong */
        {"\xF4\x90\x80\x80", 4, 0},  /* above U+10FFFF */
        {"hello \xFF world", 13, 6}, /* never valid */
        {"12345678\x80", 9, 8},      /* after the 8-byte ASCII fast path */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t *ids = (int32_t *)1;
        size_t n = 7;
        vsr_err err = {0};
        char want[64];
        snprintf(want, sizeof want, "not valid UTF-8 at byte offset %zu", cases[i].off);
        vsr_status st = vsr_tokenizer_encode(tok, cases[i].s, cases[i].len, &ids, &n, &err);
        CHECK_ERR(st, err, VSR_E_INVALID, want);
        CHECK(ids == NULL && n == 0);
    }
    CHECK(vsr_utf8_invalid_at("\xF0\x9F\x98\x80 ok \xE2\x82\xAC", 11) == (size_t)-1);
}

TEST(token_lookup_and_decode) {
    CHECK(vsr_tokenizer_token_id(tok, "<|im_end|>") == 151645);
    CHECK(vsr_tokenizer_token_id(tok, "<tool_call>") == 151657);
    CHECK(vsr_tokenizer_token_id(tok, "!") == 0); /* the first vocabulary entry */
    int32_t the = vsr_tokenizer_token_id(tok, "\xC4\xA0the"); /* "Ġthe" */
    CHECK(the >= 0);
    check_encode(" the", &the, 1);
    CHECK(vsr_tokenizer_token_id(tok, "no-such-token-here") == -1);
    CHECK(vsr_tokenizer_token_str(tok, 151645) && !strcmp(vsr_tokenizer_token_str(tok, 151645), "<|im_end|>"));
    CHECK(vsr_tokenizer_token_str(tok, 999999) == NULL);
    /* decode(encode(s)) gives back s for corpus strings that NFC leaves alone */
    size_t checked = 0, bad = 0;
    for (size_t i = 0; i < C.n; i++) {
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)C.text[i], (utf8proc_ssize_t)C.len[i], &nfc,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        bool stable = r == (utf8proc_ssize_t)C.len[i] && !memcmp(nfc, C.text[i], C.len[i]);
        free(nfc);
        if (!stable) continue;
        char *text;
        size_t len;
        vsr_err err = {0};
        CHECK_OK(vsr_tokenizer_decode(tok, C.ids[i], C.n_ids[i], &text, &len, &err), err);
        if (len != C.len[i] || memcmp(text, C.text[i], len)) bad++;
        free(text);
        checked++;
    }
    CHECK_MSG(bad == 0 && checked > 2500, "%zu of %zu round trips differ", bad, checked);
    char *text;
    size_t len;
    vsr_err err = {0};
    CHECK_ERR(vsr_tokenizer_decode(tok, (int32_t[]){5, 200000}, 2, &text, &len, &err), err, VSR_E_INVALID,
              "id 200000 (position 1) is not a token");
}

/* ---- added-token flags: a small tokenizer (tests/data/tokenizer/flags) with lstrip,
 * rstrip, single_word and normalized tokens, ids from `tokenizers` ---- */
static vsr_tokenizer *ftok;
static corpus F;

static void on_flag_case(size_t i, json_t *o) {
    (void)i;
    size_t k = F.n++;
    F.text = realloc(F.text, F.n * sizeof *F.text);
    F.len = realloc(F.len, F.n * sizeof *F.len);
    F.ids = realloc(F.ids, F.n * sizeof *F.ids);
    F.n_ids = realloc(F.n_ids, F.n * sizeof *F.n_ids);
    json_t *s = json_object_get(o, "text"), *a = json_object_get(o, "ids");
    F.len[k] = json_string_length(s);
    F.text[k] = strdup(json_string_value(s));
    F.n_ids[k] = json_array_size(a);
    F.ids[k] = malloc((F.n_ids[k] + 1) * sizeof(int32_t));
    for (size_t j = 0; j < F.n_ids[k]; j++) F.ids[k][j] = (int32_t)json_integer_value(json_array_get(a, j));
}

TEST(added_token_flags) {
    vsr_err err = {0};
    CHECK_OK(vsr_tokenizer_open(TDATA "/flags", &ftok, &err), err);
    if (!ftok) return;
    size_t n = read_jsonl(TDATA "/flags/cases.jsonl", on_flag_case);
    CHECK(n >= 20);
    for (size_t i = 0; i < F.n; i++) {
        for (int impl = 0; impl < 2; impl++) {
            int32_t *ids;
            size_t m;
            CHECK_OK(vsr_tokenizer_encode_split(ftok, (vsr_split_impl)impl, F.text[i], F.len[i], &ids, &m, &err), err);
            CHECK_MSG(same_ids(ids, m, F.ids[i], F.n_ids[i]), "flags case %zu \"%s\": got %zu ids, want %zu", i,
                      F.text[i], m, F.n_ids[i]);
            free(ids);
        }
    }
}

/* ---- refusals ---- */

static const char *write_tok(const char *name, const char *tokenizer_json, const char *config_json) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), name);
    char path[600];
    if (tokenizer_json) {
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        test_write_file(path, tokenizer_json, strlen(tokenizer_json));
    }
    if (config_json) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        test_write_file(path, config_json, strlen(config_json));
    }
    return dir;
}

static void check_refused(const char *name, const char *tj, const char *cfg, vsr_status code, const char *needle) {
    vsr_tokenizer *t = (vsr_tokenizer *)1;
    vsr_err err = {0};
    vsr_status st = vsr_tokenizer_open(write_tok(name, tj, cfg), &t, &err);
    if (code == VSR_OK) CHECK_OK(st, err);
    else CHECK_ERR(st, err, code, needle);
    if (code == VSR_OK) CHECK(t != NULL && t != (vsr_tokenizer *)1);
    else CHECK_MSG(t == NULL, "%s: tokenizer not NULL on failure", name);
    if (st == VSR_OK) vsr_tokenizer_free(t);
}

#define MODEL_OK "\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]"
#define QWEN2 "\"tokenizer_class\":\"Qwen2Tokenizer\""

TEST(refusals) {
    vsr_tokenizer *t = (vsr_tokenizer *)1;
    vsr_err err = {0};
    CHECK_ERR(vsr_tokenizer_open("/nonexistent/tok", &t, &err), err, VSR_E_NOT_FOUND,
              "/nonexistent/tok/tokenizer.json: file is missing");
    CHECK(t == NULL);
    check_refused("malformed", "{\"model\": {", NULL, VSR_E_FORMAT, "not valid JSON");
    check_refused("nomodel", "{\"version\":\"1.0\"}", NULL, VSR_E_FORMAT, "no \"model\" object");
    check_refused("wordpiece", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}", NULL, VSR_E_UNSUPPORTED,
                  "model type \"WordPiece\" is not supported (expected BPE)");
    check_refused("unigram", "{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0.0]]}}", NULL, VSR_E_UNSUPPORTED,
                  "model type \"Unigram\"");
    check_refused("novocab", "{\"model\":{\"type\":\"BPE\",\"merges\":[]}}", NULL, VSR_E_FORMAT,
                  "model.vocab must be a non-empty object");
    check_refused("nomerges", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}", NULL, VSR_E_FORMAT,
                  "model.merges must be an array");
    check_refused("badid", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}", NULL, VSR_E_FORMAT,
                  "model.vocab[\"a\"] must be an id");
    check_refused("dupid", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}", NULL,
                  VSR_E_FORMAT, "gives id 0 to both");
    check_refused("mergeoov", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a c\"]}}",
                  NULL, VSR_E_FORMAT, "model.merges[0]: \"c\" is not in the vocabulary");
    check_refused("mergedoov", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[[\"a\",\"b\"]]}}",
                  NULL, VSR_E_FORMAT, "the merged token \"ab\" is not in the vocabulary");
    check_refused("mergeform", "{\"model\":{" MODEL_OK ",\"x\":0}}", NULL, VSR_OK, ""); /* valid: sanity */
    check_refused("mergebad", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a\"]}}", NULL,
                  VSR_E_FORMAT, "is not two tokens joined by one space");
    check_refused("template", "{\"model\":{" MODEL_OK "},\"post_processor\":{\"type\":\"TemplateProcessing\"}}",
                  NULL, VSR_E_UNSUPPORTED, "post_processor type \"TemplateProcessing\" may add tokens");
    check_refused("cfgjson", "{\"model\":{" MODEL_OK "}}", "{nope", VSR_E_FORMAT, "tokenizer_config.json: not valid JSON");
    check_refused("addedflag", "{\"model\":{" MODEL_OK "}}",
                  "{" QWEN2 ",\"added_tokens_decoder\":{\"3\":{\"content\":\"<x>\",\"lstrip\":1}}}", VSR_E_FORMAT,
                  "\"lstrip\" must be true or false");
}

/* published-d3.md "Tokenizer rules": each rule broken alone on a config that otherwise
 * loads (the "ok" case), with the reference's message. */
TEST(published_rules) {
    const char *tj = "{\"model\":{" MODEL_OK "}}";
    check_refused("rules_ok", tj, "{" QWEN2 ",\"add_bos_token\":false,\"add_prefix_space\":null}", VSR_OK, "");
    check_refused("rules_fast", tj, "{\"tokenizer_class\":\"Qwen2TokenizerFast\"}", VSR_OK, "");
    /* tokenizer_class */
    check_refused("class_llama", tj, "{\"tokenizer_class\":\"LlamaTokenizer\"}", VSR_E_UNSUPPORTED,
                  "unsupported tokenizer class 'LlamaTokenizer'");
    check_refused("class_none", tj, "{\"add_bos_token\":false}", VSR_E_UNSUPPORTED,
                  "unsupported tokenizer class 'None'");
    check_refused("class_case", tj, "{\"tokenizer_class\":\"qwen2tokenizer\"}", VSR_E_UNSUPPORTED,
                  "unsupported tokenizer class 'qwen2tokenizer'");
    /* add_bos_token / add_prefix_space: absent, null or false only */
    check_refused("bos", tj, "{" QWEN2 ",\"add_bos_token\":true}", VSR_E_UNSUPPORTED,
                  "the tokenizer must not add a prefix space or a BOS token");
    check_refused("prefix", tj, "{" QWEN2 ",\"add_prefix_space\":true}", VSR_E_UNSUPPORTED,
                  "the tokenizer must not add a prefix space or a BOS token");
    check_refused("prefix1", tj, "{" QWEN2 ",\"add_prefix_space\":1}", VSR_E_UNSUPPORTED,
                  "add_prefix_space is 1: the tokenizer must not add a prefix space or a BOS token");
    check_refused("bos_str", tj, "{" QWEN2 ",\"add_bos_token\":\"no\"}", VSR_E_UNSUPPORTED,
                  "the tokenizer must not add a prefix space or a BOS token");
    /* added_tokens_decoder: an object, every entry at its listed id */
    check_refused("decoder_array", tj, "{" QWEN2 ",\"added_tokens_decoder\":[]}", VSR_E_FORMAT,
                  "added_tokens_decoder must be an object");
    check_refused("addedid", tj,
                  "{" QWEN2 ",\"unk_token\":null,\"eos_token\":null,\"pad_token\":null,\"added_tokens_decoder\":"
                  "{\"7\":{\"content\":\"<x>\",\"special\":true}}}",
                  VSR_E_FORMAT, "special token '<x>' does not get ID 7");
    /* the same content listed twice: the second id cannot be given */
    check_refused("addedtwice", tj,
                  "{" QWEN2 ",\"added_tokens_decoder\":{\"3\":{\"content\":\"<x>\"},\"4\":{\"content\":\"<x>\"}}}",
                  VSR_E_FORMAT, "special token '<x>' does not get ID 4");
    /* a vocabulary token listed at another id */
    check_refused("addedvocab", tj, "{" QWEN2 ",\"added_tokens_decoder\":{\"3\":{\"content\":\"ab\"}}}",
                  VSR_E_FORMAT, "special token 'ab' does not get ID 3");
    /* the pad token: Qwen2Tokenizer's default when absent, none when null */
    vsr_tokenizer *t = NULL;
    vsr_err err = {0};
    CHECK_OK(vsr_tokenizer_open(write_tok("pad_default", tj, "{" QWEN2 "}"), &t, &err), err);
    if (t) {
        CHECK(vsr_tokenizer_pad_id(t) >= 0 &&
              !strcmp(vsr_tokenizer_token_str(t, vsr_tokenizer_pad_id(t)), "<|endoftext|>"));
        vsr_tokenizer_free(t);
    }
    CHECK_OK(vsr_tokenizer_open(write_tok("pad_null", tj, "{" QWEN2 ",\"pad_token\":null}"), &t, &err), err);
    if (t) {
        CHECK(vsr_tokenizer_pad_id(t) == -1);
        vsr_tokenizer_free(t);
    }
    CHECK_OK(vsr_tokenizer_open(write_tok("pad_obj", tj, "{" QWEN2 ",\"pad_token\":{\"content\":\"<p>\"}}"), &t, &err),
             err);
    if (t) {
        CHECK(vsr_tokenizer_pad_id(t) >= 0 && !strcmp(vsr_tokenizer_token_str(t, vsr_tokenizer_pad_id(t)), "<p>"));
        vsr_tokenizer_free(t);
    }
    /* added_tokens_decoder entries are added as special tokens even when marked
     * "special": false, so without a `normalized` flag they are not normalized (tokenizers'
     * AddedToken default): an NFD token matches the raw text, as Hugging Face tokenizers
     * gives it ([3] for add_special_tokens([AddedToken("e\u0301", special=True)])) */
    CHECK_OK(vsr_tokenizer_open(write_tok("special_flag", tj,
                                          "{" QWEN2 ",\"added_tokens_decoder\":{\"3\":{\"content\":\"e\\u0301\","
                                          "\"special\":false}}}"),
                                &t, &err),
             err);
    if (t) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(vsr_tokenizer_encode(t, "e\xcc\x81", 3, &ids, &n, &err), err);
        CHECK_MSG(n == 1 && ids[0] == 3, "got %zu ids", n);
        free(ids);
        vsr_tokenizer_free(t);
    }
    /* data/tokenizers/qwen3 (what the fixtures copy) keeps every rule */
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/data/tokenizers/qwen3", getenv("VSR_REPO") ? getenv("VSR_REPO") : ".");
    CHECK_OK(vsr_tokenizer_open(dir, &t, &err), err);
    if (t) {
        CHECK(vsr_tokenizer_pad_id(t) == 151643);
        vsr_tokenizer_free(t);
    }
}

/* The fixture with only 3 tokens: "ab" merges, unknown bytes are dropped, the named
 * specials of Qwen2Tokenizer's defaults get the next ids. */
TEST(small_tokenizer) {
    vsr_tokenizer *t = NULL;
    vsr_err err = {0};
    CHECK_OK(vsr_tokenizer_open(write_tok("mergeform", NULL, NULL), &t, &err), err);
    if (!t) return;
    int32_t *ids;
    size_t n;
    CHECK_OK(vsr_tokenizer_encode(t, "abab", 4, &ids, &n, &err), err);
    CHECK(n == 2 && ids[0] == 2 && ids[1] == 2);
    free(ids);
    vsr_tokenizer_free(t);
    vsr_tokenizer_free(NULL);
}

int main(void) {
    RUN(corpus_loads);
    RUN(opens_qwen3);
    RUN(corpus_ids_fast);
    RUN(corpus_ids_pcre2);
    RUN(fast_split_equals_pcre2);
    RUN(nfc_quick_check_is_sound);
    RUN(special_tokens);
    RUN(empty_string);
    RUN(invalid_utf8);
    RUN(token_lookup_and_decode);
    RUN(added_token_flags);
    RUN(refusals);
    RUN(published_rules);
    RUN(small_tokenizer);
    vsr_tokenizer_free(tok);
    vsr_tokenizer_free(ftok);
    for (size_t i = 0; i < C.n; i++) free(C.text[i]), free(C.ids[i]);
    free(C.text), free(C.len), free(C.ids), free(C.n_ids);
    for (size_t i = 0; i < F.n; i++) free(F.text[i]), free(F.ids[i]);
    free(F.text), free(F.len), free(F.ids), free(F.n_ids);
    return test_summary();
}
