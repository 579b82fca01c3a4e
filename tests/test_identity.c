/* identity.model_sha256 against Python's json.dumps: tests/data/identity/<case>.json were
 * written by tools/identity_oracle.py (non-ASCII and escaped codes, floats such as 0.75,
 * 1.0, 1e-05 and 1e+16, integer vs float temperature, null max_length, extra keys that
 * the identity leaves out, nested shard names). */
#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "package/package_internal.h"
#include "test.h"

static const char *const keys[] = {"format_version", "format_id", "prompt",      "base_model",     "revision",
                                   "codes",          "token_ids", "temperature", "attention_mode", "pooling",
                                   "max_length",     "readout_dtype"};

static int cases;

static void check_case(const char *path) {
    json_error_t je;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    CHECK_MSG(doc != NULL, "%s: %s", path, je.text);
    if (!doc) return;
    cases++;
    json_t *files = json_object_get(doc, "files"), *dec = json_object_get(doc, "decision");
    const char *want = json_string_value(json_object_get(doc, "model_sha256"));
    const char *names[32], *sums[32];
    int n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(files, k, v) {
        names[n] = k;
        sums[n++] = json_string_value(v);
    }
    char got[65];
    vsr_err e = {0};
    CHECK_OK(vsr_identity_model_sha256(n, names, sums, dec, got, &e), e);
    CHECK_MSG(!strcmp(got, want), "%s: C computes %s, Python %s", path, got, want);

    /* The canonical text itself, byte for byte, for a readable diff when it breaks. */
    json_t *d = json_object();
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (json_object_get(dec, keys[i])) json_object_set(d, keys[i], json_object_get(dec, keys[i]));
    json_t *root = json_pack("{s:O,s:o}", "files", files, "decision", d);
    char *dump = vsr_json_dumps_python_compact(root);
    const char *pydump = json_string_value(json_object_get(doc, "dump"));
    if (dump && pydump && strcmp(dump, pydump)) {
        size_t i = 0;
        while (dump[i] && dump[i] == pydump[i]) i++;
        CHECK_MSG(0, "%s: dumps differ at byte %zu: C \"%.40s\" Python \"%.40s\"", path, i, dump + i, pydump + i);
    }
    free(dump);
    json_decref(root);
    json_decref(doc);
}

TEST(python_oracle_cases) {
    const char *repo = getenv("VSR_REPO");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/tests/data/identity", repo && *repo ? repo : ".");
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".json")) continue;
        char p[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        check_case(p);
    }
    closedir(d);
    CHECK_MSG(cases >= 8, "only %d oracle cases found", cases);
}

TEST(identity_edges) {
    vsr_err e = {0};
    char a[65], b[65];
    const char *n1[] = {"model.safetensors"}, *s1[] = {"00"};
    /* no decision: an empty object, not null */
    CHECK_OK(vsr_identity_model_sha256(1, n1, s1, NULL, a, &e), e);
    json_t *empty = json_object();
    CHECK_OK(vsr_identity_model_sha256(1, n1, s1, empty, b, &e), e);
    CHECK(!strcmp(a, b));
    /* keys outside the identity list do not change it; keys inside do */
    json_object_set_new(empty, "comment", json_string("x"));
    CHECK_OK(vsr_identity_model_sha256(1, n1, s1, empty, b, &e), e);
    CHECK(!strcmp(a, b));
    json_object_set_new(empty, "pooling", json_string("last"));
    CHECK_OK(vsr_identity_model_sha256(1, n1, s1, empty, b, &e), e);
    CHECK(strcmp(a, b) != 0);
    json_t *arr = json_array();
    CHECK_ERR(vsr_identity_model_sha256(1, n1, s1, arr, b, &e), e, VSR_E_INVALID, "must be a JSON object");
    const char *bad[] = {"\xff\xfe.safetensors"};
    CHECK_ERR(vsr_identity_model_sha256(1, bad, s1, NULL, b, &e), e, VSR_E_INVALID, "is not valid UTF-8");
    json_decref(empty);
    json_decref(arr);
    /* The known value for a fixed input (Python: sha256(b'{"decision":{},"files":{"model.safetensors":"00"}}')). */
    CHECK(!strcmp(a, "c27e4702db43bd863df1752ef6e9c6e4cca3698760494aa1b6ecdc153d2db9b6"));
}


/* Python's repr() for the reference's messages: JSON text in, repr(json.loads(text)) out
 * (the expected strings were printed by CPython 3). */
TEST(python_repr) {
    static const char *const reprs[][2] = {
        {"\"d2\"", "'d2'"},
        {"\"it's\"", "\"it's\""},
        {"\"say \\\"hi\\\"\"", "'say \"hi\"'"},
        {"\"both ' and \\\"\"", "'both \\' and \"'"},
        {"\"tab\\there\\nnl\"", "'tab\\there\\nnl'"},
        {"\"back\\\\slash\"", "'back\\\\slash'"},
        {"\"caf\\u00e9\"", "'caf\xc3\xa9'"},
        {"\"\\u007f\\u0080\\u00a0\\u00ad\"", "'\\x7f\\x80\\xa0\\xad'"},
        {"\"\\u4e2d\"", "'\xe4\xb8\xad'"},
        {"null", "None"},
        {"true", "True"},
        {"false", "False"},
        {"3", "3"},
        {"-7", "-7"},
        {"0.75", "0.75"},
        {"1.0", "1.0"},
        {"1e-05", "1e-05"},
        {"1e+16", "1e+16"},
        {"1.5e+300", "1.5e+300"},
        {"123456789.125", "123456789.125"},
        {"0.1", "0.1"},
        {"-0.0", "-0.0"},
        {"100.0", "100.0"},
        {"1000000000000000.0", "1000000000000000.0"},
        {"1.2345678901234568e+16", "1.2345678901234568e+16"},
        {"[1, \"a\", null]", "[1, 'a', None]"},
        {"{\"k\": [1.5]}", "{'k': [1.5]}"},
    };
    char buf[256];
    for (size_t i = 0; i < sizeof reprs / sizeof reprs[0]; i++) {
        json_error_t je;
        json_t *v = json_loads(reprs[i][0], JSON_DECODE_ANY, &je);
        CHECK_MSG(v != NULL, "%s: %s", reprs[i][0], je.text);
        vsr_py_repr_json(v, buf, sizeof buf);
        CHECK_MSG(!strcmp(buf, reprs[i][1]), "repr(%s): got %s, want %s", reprs[i][0], buf, reprs[i][1]);
        json_decref(v);
    }
    const char *names[] = {"config.json", "tokenizer.json", "it's.json"};
    CHECK(!strcmp(vsr_py_repr_list(names, 3, buf, sizeof buf), "['config.json', 'tokenizer.json', \"it's.json\"]"));
    CHECK(!strcmp(vsr_py_repr_list(names, 0, buf, sizeof buf), "[]"));
    const int64_t shape[2] = {255, 2560};
    CHECK(!strcmp(vsr_py_repr_shape(2, shape, buf, sizeof buf), "[255, 2560]"));
    CHECK(!strcmp(vsr_py_repr_shape(0, shape, buf, sizeof buf), "[]"));
    CHECK(!strcmp(vsr_py_repr_str("lm_head.weight", buf, sizeof buf), "'lm_head.weight'"));
    /* truncation keeps a terminated string */
    char small[6];
    vsr_py_repr_str("abcdefghij", small, sizeof small);
    CHECK(!strcmp(small, "'abcd"));
}

int main(void) {
    RUN(python_oracle_cases);
    RUN(identity_edges);
    RUN(python_repr);
    return test_summary();
}
