/* tests/test_vela2_package.c: Vela 2.0 decoder packages (src/package/vela2_package.c).
 *
 * A tiny vela2 fixture opens, verifies and maps; its identity is the reference's sha256_json of
 * the weight digests; and every refusal of the vela2 reader is provoked once, on a copy of the
 * fixture with one thing changed: config.json and calibration.json keys, missing files, the
 * index, MODEL_MANIFEST.json, SHA256SUMS, the tensors, quantization, the 0.3B encoder, Vela 3
 * (vllm-sr/vela3-fast) by config and by repo name, and other Vela layouts. */
#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture/builtin.h"
#include "fixture/vela2_fixture.h"
#include "test.h"
#include "vsr/catalog.h"
#include "vsr/engine.h"
#include "vsr/vela2_decide.h"
#include "vsr/hash.h"
#include "vsr/package.h"
#include "vsr/safetensors.h"

#define V2_PIN_TINY "b52203853b1e0ffdad0346642f67a336f06ca83f1f36f6ffcd15f2085c045a82"

static char base[PATH_MAX];
static vsr_fixture_info base_info;

static const char *base_pkg(void) {
    if (base[0]) return base;
    snprintf(base, sizeof base, "%s/base", test_tmpdir());
    vsr_v2_fixture_opts o = {.size = "tiny", .seed = 7};
    vsr_err err = {0};
    vsr_status st = vsr_v2_fixture_write(base, &o, NULL, &base_info, &err);
    CHECK_OK(st, err);
    return base;
}

/* A copy of the base package: weights hard-linked (never edited in place: see detach), the rest copied. */
static const char *clone(const char *tag) {
    static char dir[PATH_MAX];
    static int n;
    snprintf(dir, sizeof dir, "%s/c%d-%s", test_tmpdir(), n++, tag);
    mkdir(dir, 0755);
    DIR *d = opendir(base_pkg());
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char a[PATH_MAX * 2], b[PATH_MAX * 2];
        snprintf(a, sizeof a, "%s/%s", base, e->d_name);
        snprintf(b, sizeof b, "%s/%s", dir, e->d_name);
        if (strstr(e->d_name, ".safetensors") || !strcmp(e->d_name, "tokenizer.json")) {
            CHECK(link(a, b) == 0);
            continue;
        }
        size_t len;
        char *buf = test_read_file(a, &len);
        CHECK(buf && test_write_file(b, buf, len) == 0);
        free(buf);
    }
    if (d) closedir(d);
    return dir;
}

static void rm(const char *dir, const char *name) {
    char p[PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK(unlink(p) == 0);
}

static void put(const char *dir, const char *name, const char *text) {
    char p[PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    unlink(p); /* never through a hard link */
    CHECK(test_write_file(p, text, strlen(text)) == 0);
}

/* Sets dir/name's value at `path` ("a/b/0/c": object keys and array indexes) to the JSON text
 * `value`, or removes it when value is NULL; path NULL replaces the whole document. */
static void edit(const char *dir, const char *name, const char *path, const char *value) {
    char p[PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    json_error_t je;
    json_t *doc = json_load_file(p, 0, &je), *v = value ? json_loads(value, JSON_DECODE_ANY, &je) : NULL;
    CHECK(doc && (v || !value));
    if (!path) {
        json_decref(doc);
        doc = v;
    } else {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", path);
        json_t *cur = doc;
        char *save = NULL, *tok = strtok_r(buf, "/", &save);
        while (tok) {
            char *next = strtok_r(NULL, "/", &save);
            if (!next) {
                if (json_is_array(cur)) {
                    if (v) json_array_set_new(cur, (size_t)atoi(tok), v);
                    else json_array_remove(cur, (size_t)atoi(tok));
                } else if (v) json_object_set_new(cur, tok, v);
                else json_object_del(cur, tok);
            } else {
                cur = json_is_array(cur) ? json_array_get(cur, (size_t)atoi(tok)) : json_object_get(cur, tok);
            }
            tok = next;
        }
    }
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_ENCODE_ANY);
    put(dir, name, text);
    free(text);
    json_decref(doc);
}

/* The optional digests out of the way, for a check that comes after them. */
static void no_digests(const char *dir) {
    rm(dir, "MODEL_MANIFEST.json");
    rm(dir, "SHA256SUMS");
}

/* open; on success verify; the first failure must be `code` with `needle` (stage "open" or "verify"). */
static void expect(const char *dir, const char *stage, vsr_status code, const char *needle) {
    vsr_package *p = NULL;
    vsr_err err = {0};
    vsr_status st = vsr_package_open(dir, NULL, NULL, &p, &err);
    if (!strcmp(stage, "open")) {
        CHECK_ERR(st, err, code, needle);
        vsr_package_close(p);
        return;
    }
    CHECK_OK(st, err);
    if (!st) {
        st = vsr_package_verify(p, 1, NULL, &err);
        CHECK_ERR(st, err, code, needle);
    }
    vsr_package_close(p);
}

TEST(fixture_opens_verifies_and_maps) {
    const char *dir = base_pkg();
    vsr_package *p = NULL;
    vsr_err err = {0};
    CHECK_OK(vsr_package_open(dir, NULL, NULL, &p, &err), err);
    if (!p) return;
    CHECK(p->family == VSR_FAMILY_VELA2 && !strcmp(vsr_family_name(p->family), "vela2"));
    CHECK(p->vela2 && !strcmp(p->vela2->model_name, "vllm-sr-c/Vela-2.0-tiny-fixture"));
    CHECK(p->vela2->max_length == 4096 && p->vela2->pad_token_id == 151643 && p->vela2->head_dim == 32);
    CHECK(p->vela2->span_d == 32 && p->vela2->span_slots == 8 && p->vela2->broad_d == 32 && p->vela2->broad_slots == 8);
    CHECK(p->vela2->hybrid_rmax == 48 && p->vela2->window == 40 && p->vela2->stride == 32 && p->vela2->window_above == 48);
    CHECK(p->vela2->has_broad_head && p->broad_head && p->has_manifest);
    CHECK(!strcmp(p->text_prefix, "backbone.") && !strcmp(p->config.architectures, "Vela2DecoderModel"));
    CHECK(p->params_text == base_info.params_text && p->params_heads == base_info.params_readout);
    CHECK(vsr_package_params_loaded(p) == base_info.params_loaded);
    /* the calibration is kept for the decision layer */
    json_t *cal = p->vela2->calibration;
    CHECK(json_real_value(json_object_get(json_object_get(cal, "temperature"), "span")) == 0.4);
    CHECK(json_array_size(json_object_get(cal, "pii_types")) == 17);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(cal, "pii_schema"), "text")),
                  "Which spans are personal information?"));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(json_object_get(cal, "pii_schema"), "labels"),
                                                    "US_DRIVER_LICENSE")),
                  "us driver license"));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(json_object_get(cal, "halu_schema"), "labels"),
                                                    "unsupported")),
                  "a claim not supported by the context"));
    /* the device gate: BF16, never quantized */
    vsr_gate_request r;
    vsr_package_gate_request(p, &r);
    CHECK(r.needs_bf16 && !r.quantized_family_ok && r.scheme == VSR_SCHEME_BF16 && r.weight_bytes > 0);
    CHECK_OK(vsr_package_verify(p, 2, NULL, &err), err);
    CHECK(p->verified && !strcmp(p->model_sha256, base_info.model_sha256));
    CHECK(!strcmp(p->manifest.manifest_sha256, base_info.manifest_sha256));
    CHECK_OK(vsr_package_map(p, &err), err);
    const vsr_tensor *t = vsr_st_find(p->broad_head, "span_broad.K.weight");
    CHECK(t && t->data);
    vsr_package_close(p);
}

/* model_sha256 = sha256_json({shard: sha256, broad_head.safetensors: sha256}) (reference
 * registry/artifacts.py: json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)),
 * recomputed here from the files' own digests. */
TEST(identity_is_sha256_json_of_the_weight_digests) {
    const char *dir = base_pkg();
    const char *names[] = {"broad_head.safetensors", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"};
    char doc[1024] = "{", sha[65];
    for (int i = 0; i < 3; i++) {
        char p[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        size_t n;
        char *buf = test_read_file(p, &n);
        CHECK(buf != NULL);
        vsr_sha256_hex(buf, n, sha);
        free(buf);
        snprintf(doc + strlen(doc), sizeof doc - strlen(doc), "%s\"%s\":\"%s\"", i ? "," : "", names[i], sha);
    }
    strcat(doc, "}");
    char want[65];
    vsr_sha256_hex(doc, strlen(doc), want);
    CHECK(!strcmp(want, base_info.model_sha256));
    /* without a broad head the identity holds the shards only, and the package still opens */
    const char *nb = clone("nobroad");
    rm(nb, "broad_head.safetensors");
    no_digests(nb);
    edit(nb, "calibration.json", "broad_head", NULL);
    vsr_package *p = NULL;
    vsr_err err = {0};
    CHECK_OK(vsr_package_open(nb, NULL, NULL, &p, &err), err);
    if (p) {
        CHECK(!p->vela2->has_broad_head && !p->broad_head);
        CHECK_OK(vsr_package_verify(p, 1, NULL, &err), err);
        CHECK(strcmp(p->model_sha256, base_info.model_sha256));
        vsr_package_close(p);
    }
    /* pii_buckets instead of the length rule, and no manifest and no SHA256SUMS: still a package */
    const char *bk = clone("buckets");
    no_digests(bk);
    edit(bk, "calibration.json", "pii_length_rule", NULL);
    edit(bk, "calibration.json", "pii_buckets", "[{\"name\":\"short\",\"max_tokens\":64,\"threshold\":0.2}]");
    expect(bk, "open", VSR_OK, "");
}

typedef struct json_case {
    const char *file, *path, *value;
    const char *stage;
    vsr_status code;
    const char *needle;
} json_case;

static const json_case json_cases[] = {
    /* what config.json names */
    {"config.json", "model_type", "\"vela2-unified\"", "open", VSR_E_UNSUPPORTED,
     "this runtime serves the Vela 2.0 decoder packages only (0.8B, 4B, 9B: model_type \"vela2-decoder\")"},
    {"config.json", "model_type", "\"vela3-fast\"", "open", VSR_E_UNSUPPORTED,
     "is a newer release whose layout is not public; only the documented Vela 2.0 decoder layout is served"},
    {"config.json", "format_version", "2", "open", VSR_E_UNSUPPORTED,
     "config.json names model_type \"vela2-decoder\" with format_version 2, which is not a span package layout this "
     "runtime reads"},
    {"config.json", "format_version", NULL, "open", VSR_E_UNSUPPORTED, "with format_version absent"},
    {"config.json", "model_type", "\"vela2-encoder\"", "open", VSR_E_UNSUPPORTED, "not a span package layout"},
    /* config.json keys */
    {"config.json", "architectures", "\"Vela2DecoderModel\"", "open", VSR_E_FORMAT,
     "\"architectures\" must be a list of strings"},
    {"config.json", "model_name", NULL, "open", VSR_E_FORMAT, "\"model_name\" must be a non-empty string"},
    {"config.json", "quantization_config", "{\"quant_method\":\"compressed-tensors\"}", "open", VSR_E_UNSUPPORTED,
     "a Vela 2.0 span package cannot carry quantized weights: only Decision 3.0 packages may be quantized"},
    {"config.json", "backbone_config/quantization_config", "{\"quant_method\":\"compressed-tensors\"}", "open",
     VSR_E_UNSUPPORTED, "only Decision 3.0 packages may be quantized"},
    {"config.json", "backbone_config", "3", "open", VSR_E_FORMAT, "\"backbone_config\" must be an object"},
    {"config.json", "backbone_config/model_type", "\"qwen3\"", "open", VSR_E_UNSUPPORTED,
     "config.json: backbone_config must describe a qwen3_5 model: model_type \"qwen3\" is not supported"},
    {"config.json", "backbone_config/dtype", "\"float16\"", "open", VSR_E_UNSUPPORTED,
     "a Vela 2.0 backbone is bfloat16"},
    {"config.json", "backbone_config/hidden_size", NULL, "open", VSR_E_FORMAT,
     "config.json: backbone_config: required key \"hidden_size\" is missing"},
    {"config.json", "head_dim", NULL, "open", VSR_E_FORMAT, "config.json: required key \"head_dim\" is missing"},
    {"config.json", "head_dim", "0", "open", VSR_E_FORMAT, "\"head_dim\" must be an integer from 1 to 65536"},
    {"config.json", "span_head", "[]", "open", VSR_E_FORMAT, "\"span_head\" must be an object {\"d\", \"slots\"}"},
    {"config.json", "span_head/extra", "1", "open", VSR_E_FORMAT, "config.json: span_head: unknown key \"extra\""},
    {"config.json", "span_head/d", "\"x\"", "open", VSR_E_FORMAT, "config.json: span_head: \"d\" must be an integer"},
    {"config.json", "pad_token_id", "-1", "open", VSR_E_FORMAT, "\"pad_token_id\" must be an integer from 0 to 151935"},
    {"config.json", "max_length", "8", "open", VSR_E_FORMAT, "\"max_length\" must be an integer from 16"},
    {"config.json", "span_layout", NULL, "open", VSR_E_FORMAT, "\"span_layout\" must be an object"},
    {"config.json", "span_layout/stride", NULL, "open", VSR_E_FORMAT,
     "config.json: span_layout: required key \"stride\" is missing"},
    {"config.json", "span_layout/window_above", "40", "open", VSR_E_FORMAT,
     "config.json: span_layout: window_above (40) must equal hybrid_rmax (48)"},
    {"config.json", "span_layout/stride", "41", "open", VSR_E_FORMAT, "stride (41) must not exceed window (40)"},
    {"config.json", "span_layout/window", "5000", "open", VSR_E_FORMAT, "\"window\" must be an integer from 1 to 4096"},
    /* calibration.json */
    {"calibration.json", NULL, "[]", "open", VSR_E_FORMAT, "calibration.json must hold a JSON object"},
    {"calibration.json", "temperature", NULL, "open", VSR_E_FORMAT,
     "calibration.json: \"temperature\" must be an object"},
    {"calibration.json", "temperature/span", "0", "open", VSR_E_FORMAT,
     "calibration.json: temperature: \"span\" must be a number in (0, 1e+06]"},
    {"calibration.json", "thresholds", "3", "open", VSR_E_FORMAT, "calibration.json: \"thresholds\" must be an object"},
    {"calibration.json", "thresholds/span:*", NULL, "open", VSR_E_FORMAT,
     "calibration.json: thresholds: required key \"span:*\" is missing"},
    {"calibration.json", "thresholds/set:*", NULL, "open", VSR_E_FORMAT, "required key \"set:*\" is missing"},
    {"calibration.json", "thresholds/span:halu", "1.5", "open", VSR_E_FORMAT, "\"span:halu\" must be a number in [0, 1]"},
    {"calibration.json", "pii_types", "[1]", "open", VSR_E_FORMAT, "calibration.json: pii_types[0] must be a string"},
    {"calibration.json", "pii_length_rule/anchors", "[]", "open", VSR_E_FORMAT,
     "pii_length_rule must be {\"anchors\": [{\"n_tokens\", \"threshold\"}, ...]}"},
    {"calibration.json", "pii_length_rule/anchors/1/n_tokens", "20", "open", VSR_E_FORMAT,
     "calibration.json: pii_length_rule.anchors[1]: n_tokens must increase"},
    {"calibration.json", "pii_length_rule/anchors/0/threshold", "0", "open", VSR_E_FORMAT,
     "pii_length_rule.anchors[0]: \"threshold\" must be a number in (0, 1]"},
    {"calibration.json", "pii_sparse_gate/K", "0.5", "open", VSR_E_FORMAT, "pii_sparse_gate must be {\"K\": integer"},
    {"calibration.json", "pii_sparse_gate/t_sparse", NULL, "open", VSR_E_FORMAT,
     "calibration.json: pii_sparse_gate: required key \"t_sparse\" is missing"},
    {"calibration.json", "pii_schema/labels", "{}", "open", VSR_E_FORMAT,
     "calibration.json: pii_schema.labels must be an object of 1 to 255 {label: description}"},
    {"calibration.json", "pii_schema/text", NULL, "open", VSR_E_FORMAT,
     "calibration.json: pii_schema must be an object with a string \"text\""},
    {"calibration.json", "halu_schema/labels/unsupported", "3", "open", VSR_E_FORMAT,
     "halu_schema.labels[\"unsupported\"] must be a string description"},
    {"calibration.json", "relevance_schema/levels", "[]", "open", VSR_E_FORMAT, "relevance_schema must be {\"text\""},
    {"calibration.json", "relevance_schema/values", NULL, "open", VSR_E_FORMAT,
     "relevance_schema.values must be an object {level: number}"},
    {"calibration.json", "relevance_schema/values/highly_relevant", NULL, "open", VSR_E_FORMAT,
     "relevance_schema level \"highly_relevant\" needs a string description and a number in values"},
    {"calibration.json", "broad_head/temperature", "-1", "open", VSR_E_FORMAT,
     "calibration.json: broad_head: \"temperature\" must be a number in (0, 1e+06]"},
    {"calibration.json", "broad_head/threshold", NULL, "open", VSR_E_FORMAT,
     "calibration.json: broad_head: required key \"threshold\" is missing"},
    {"calibration.json", "broad_head/router_label_sets", "[[]]", "open", VSR_E_FORMAT,
     "broad_head.router_label_sets[0] must be a non-empty list of strings"},
    {"calibration.json", "broad_head/router_label_sets", "3", "open", VSR_E_FORMAT,
     "broad_head.router_label_sets must be a list of label lists"},
    {"calibration.json", "broad_head", NULL, "open", VSR_E_FORMAT,
     "the package ships broad_head.safetensors but calibration.json has no \"broad_head\" block"},
    {"calibration.json", "noul_calibration/default", "1", "open", VSR_E_FORMAT,
     "noul_calibration must be {\"T\", \"b\", \"default\": true|false}"},
    {"calibration.json", "noul_calibration/T", "0", "open", VSR_E_FORMAT,
     "calibration.json: noul_calibration: \"T\" must be a number in (0"},
    /* the index */
    {"model.safetensors.index.json", "weight_map", "{}", "open", VSR_E_FORMAT,
     "model.safetensors.index.json lists no valid shards"},
    {"model.safetensors.index.json", "weight_map/set_bias", "\"../x.safetensors\"", "open", VSR_E_FORMAT,
     "weight_map[\"set_bias\"] must name a file inside the package"},
    /* the manifest */
    {"MODEL_MANIFEST.json", "format", "\"d3-package-manifest/1\"", "open", VSR_E_FORMAT,
     "MODEL_MANIFEST.json: \"format\" must be \"vela2-decoder-release/1\" (found \"d3-package-manifest/1\")"},
    {"MODEL_MANIFEST.json", "files_sha256", "{}", "open", VSR_E_FORMAT,
     "MODEL_MANIFEST.json: \"files_sha256\" must be a non-empty object {file: sha256}"},
    {"MODEL_MANIFEST.json", "files_sha256/config.json", "\"ABC\"", "open", VSR_E_FORMAT,
     "files_sha256[\"config.json\"] must be 64 lowercase hex digits"},
    {"MODEL_MANIFEST.json", "files_sha256/MODEL_MANIFEST.json",
     "\"0000000000000000000000000000000000000000000000000000000000000000\"", "open", VSR_E_FORMAT,
     "files_sha256 must not list the manifest itself"},
    {"MODEL_MANIFEST.json", "files_sha256/vela2_inference.py",
     "\"0000000000000000000000000000000000000000000000000000000000000000\"", "open", VSR_E_NOT_FOUND,
     "vela2_inference.py: listed in files_sha256 but missing from the package"},
    {"MODEL_MANIFEST.json", "files_sha256/model-00001-of-00002.safetensors", NULL, "open", VSR_E_INTEGRITY,
     "MODEL_MANIFEST.json does not list the weight shard model-00001-of-00002.safetensors"},
    {"MODEL_MANIFEST.json", "files_sha256/broad_head.safetensors", NULL, "open", VSR_E_INTEGRITY,
     "MODEL_MANIFEST.json does not list broad_head.safetensors"},
    {"MODEL_MANIFEST.json", NULL, "[1]", "open", VSR_E_FORMAT, "MODEL_MANIFEST.json: \"format\" must be"},
};

TEST(every_json_refusal) {
    for (size_t i = 0; i < sizeof json_cases / sizeof json_cases[0]; i++) {
        const json_case *c = &json_cases[i];
        const char *dir = clone("json");
        edit(dir, c->file, c->path, c->value);
        test_current = c->needle;
        expect(dir, c->stage, c->code, c->needle);
    }
    test_current = "every_json_refusal";
}

TEST(missing_files_and_digests) {
    const char *d = clone("nocal");
    rm(d, "calibration.json");
    expect(d, "open", VSR_E_NOT_FOUND, "calibration.json: file is missing from");
    d = clone("notok");
    rm(d, "tokenizer.json");
    expect(d, "open", VSR_E_NOT_FOUND, "tokenizer.json: file is missing from");
    d = clone("noindex");
    rm(d, "model.safetensors.index.json");
    expect(d, "open", VSR_E_NOT_FOUND, "model.safetensors.index.json: listed in files_sha256 but missing");
    no_digests(d);
    expect(d, "open", VSR_E_NOT_FOUND,
           "model.safetensors.index.json: file is missing from");
    expect(d, "open", VSR_E_NOT_FOUND, "(a vela2-decoder package lists its weight shards there)");
    d = clone("badman");
    put(d, "MODEL_MANIFEST.json", "{\"format\": ");
    expect(d, "open", VSR_E_FORMAT, "MODEL_MANIFEST.json: not valid JSON");
    d = clone("badsums");
    put(d, "SHA256SUMS", "xyz  config.json\n");
    expect(d, "verify", VSR_E_FORMAT, "SHA256SUMS: line 1 is not \"<64 lowercase hex digits>  <file name>\"");
    /* a manifest name outside the package */
    d = clone("unsafe");
    {
        char p[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/MODEL_MANIFEST.json", d);
        json_t *doc = json_load_file(p, 0, NULL);
        json_object_set_new(json_object_get(doc, "files_sha256"), "../x",
                            json_string("0000000000000000000000000000000000000000000000000000000000000000"));
        char *text = json_dumps(doc, JSON_INDENT(2));
        put(d, "MODEL_MANIFEST.json", text);
        free(text);
        json_decref(doc);
    }
    expect(d, "open", VSR_E_INVALID,
           "MODEL_MANIFEST.json: files_sha256 names \"../x\", which is not a relative path inside the package");
    /* SHA256SUMS catches a changed file */
    d = clone("sums");
    edit(d, "config.json", "model_name", "\"renamed\"");
    expect(d, "verify", VSR_E_INTEGRITY, "files differ from SHA256SUMS: ['config.json']");
    /* a changed weight byte: SHA256SUMS first, the manifest when there is no SHA256SUMS */
    d = clone("flip");
    char a[PATH_MAX * 2];
    snprintf(a, sizeof a, "%s/model-00002-of-00002.safetensors", d);
    size_t n;
    char *buf = test_read_file(a, &n);
    CHECK(buf && n > 100);
    buf[n - 5] ^= 1;
    unlink(a);
    CHECK(test_write_file(a, buf, n) == 0);
    free(buf);
    expect(d, "verify", VSR_E_INTEGRITY, "files differ from SHA256SUMS: ['model-00002-of-00002.safetensors']");
    rm(d, "SHA256SUMS");
    expect(d, "verify", VSR_E_INTEGRITY, "weights differ from MODEL_MANIFEST.json: ['model-00002-of-00002.safetensors']");
    /* a non-weight file the manifest lists */
    d = clone("mancal");
    rm(d, "SHA256SUMS");
    edit(d, "MODEL_MANIFEST.json", "files_sha256/calibration.json",
         "\"1111111111111111111111111111111111111111111111111111111111111111\"");
    expect(d, "verify", VSR_E_INTEGRITY, "files differ from MODEL_MANIFEST.json: ['calibration.json']");
}

/* ---- tensors: shard 2 (the heads) and the broad head rewritten ---- */

typedef struct tedit {
    const char *drop;     /* a tensor to leave out */
    const char *add;      /* a tensor to add (F32 [2]) */
    const char *reshape;  /* a tensor written with its first dim one smaller */
    const char *retype;   /* a tensor written as I32 */
} tedit;

/* Rewrites dir/file from its tensors with one edit; `index`: also updates the weight_map. */
static void rewrite(const char *dir, const char *file, const tedit *e, bool index) {
    char p[PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    vsr_st_file *f = NULL;
    vsr_err err = {0};
    CHECK_OK(vsr_st_open(p, file, &f, &err), err);
    if (!f) return;
    vsr_st_writer *w = vsr_st_writer_new();
    for (size_t i = 0; i < vsr_st_count(f); i++) {
        const vsr_tensor *t = vsr_st_at(f, i);
        if (e->drop && !strcmp(t->name, e->drop)) continue;
        int64_t shape[8];
        memcpy(shape, t->shape, sizeof shape);
        size_t nbytes = t->nbytes;
        vsr_dtype dt = t->dtype;
        if (e->reshape && !strcmp(t->name, e->reshape)) {
            nbytes = nbytes / (size_t)shape[0] * (size_t)(shape[0] - 1);
            shape[0]--;
        }
        if (e->retype && !strcmp(t->name, e->retype)) dt = VSR_DT_I32;
        CHECK_OK(vsr_st_writer_add(w, t->name, dt, t->ndim, shape, t->data, nbytes, &err), err);
    }
    float two[2] = {1, 2};
    if (e->add) CHECK_OK(vsr_st_writer_add(w, e->add, VSR_DT_F32, 1, (int64_t[]){2}, two, sizeof two, &err), err);
    unlink(p);
    CHECK_OK(vsr_st_writer_save(w, p, &err), err);
    vsr_st_writer_free(w);
    vsr_st_close(f);
    if (index && (e->drop || e->add)) {
        char q[256];
        if (e->drop) {
            snprintf(q, sizeof q, "weight_map/%s", e->drop);
            edit(dir, "model.safetensors.index.json", q, NULL);
        }
        if (e->add) {
            snprintf(q, sizeof q, "weight_map/%s", e->add);
            char v[160];
            snprintf(v, sizeof v, "\"%s\"", file);
            edit(dir, "model.safetensors.index.json", q, v);
        }
    }
}

TEST(tensor_refusals) {
    static const struct {
        tedit e;
        bool broad;
        const char *stage;
        vsr_status code;
        const char *needle;
    } cases[] = {
        {{.add = "extra.weight"}, false, "open", VSR_E_FORMAT,
         "unexpected tensor \"extra.weight\": a vela2-decoder package holds backbone.*, head.*, set_bias and span2.*"},
        {{.drop = "span2.Q.weight"}, false, "verify", VSR_E_FORMAT,
         "weights: tensor \"span2.Q.weight\" is missing (expected [32, 64] for the router span head"},
        {{.reshape = "head.key.weight"}, false, "verify", VSR_E_FORMAT,
         "tensor \"head.key.weight\" has shape [31, 64], expected [32, 64] for the candidate head"},
        {{.retype = "head.scalar.weight"}, false, "verify", VSR_E_FORMAT,
         "tensor \"head.scalar.weight\" has dtype I32, expected F32, BF16 or F16"},
        {{.add = "head.extra"}, false, "verify", VSR_E_FORMAT, "unexpected tensor \"head.extra\": not part of the candidate head"},
        {{.add = "span2.o2"}, false, "verify", VSR_E_FORMAT, "unexpected tensor \"span2.o2\": not part of the router span head"},
        {{.drop = "set_bias", .add = "set_bias"}, false, "verify", VSR_E_FORMAT,
         "tensor \"set_bias\" must be one F32 or BF16 value"},
        {{.add = "backbone.layers.9.extra"}, false, "verify", VSR_E_FORMAT,
         "unexpected tensor \"backbone.layers.9.extra\" (F32): not part of this qwen3_5 text model"},
        {{.drop = "span_broad.K.weight"}, true, "open", VSR_E_FORMAT,
         "broad_head.safetensors: the broad head needs span_broad.K.weight [d, hidden] and span_broad.slot.weight"},
        {{.drop = "span_broad.v.weight"}, true, "verify", VSR_E_FORMAT,
         "weights: tensor \"span_broad.v.weight\" is missing (expected [1, 32] for the broad span head)"},
        {{.add = "span_broad.zz"}, true, "verify", VSR_E_FORMAT,
         "broad_head.safetensors: unexpected tensor \"span_broad.zz\": not part of the broad span head"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *dir = clone("tensor");
        no_digests(dir);
        rewrite(dir, cases[i].broad ? "broad_head.safetensors" : "model-00002-of-00002.safetensors", &cases[i].e,
                !cases[i].broad);
        test_current = cases[i].needle;
        expect(dir, cases[i].stage, cases[i].code, cases[i].needle);
    }
    test_current = "tensor_refusals";
}

/* ---- the store: Vela 3 by repo name ---- */

static const char *store_with(const char *repo_dir_name, const char *commit, const char *pkg) {
    static char store[PATH_MAX];
    snprintf(store, sizeof store, "%s/store-%s", test_tmpdir(), commit);
    char p[PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/%s/refs/main", store, repo_dir_name);
    char c[64];
    snprintf(c, sizeof c, "%s\n", commit);
    CHECK(test_write_file(p, c, strlen(c)) == 0);
    snprintf(p, sizeof p, "%s/%s/snapshots", store, repo_dir_name);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%s/snapshots/%s", store, repo_dir_name, commit);
    CHECK(rename(pkg, p) == 0);
    return store;
}

TEST(vela3_fast_by_repo_name) {
    vsr_package *p = NULL;
    vsr_err err = {0};
    /* in the documented vela2-decoder format: served */
    const char *store = store_with("models--vllm-sr--vela3-fast", "1111111111111111111111111111111111111111",
                                   clone("v3ok"));
    CHECK_OK(vsr_package_open("vllm-sr/vela3-fast", NULL, store, &p, &err), err);
    if (p) {
        CHECK(p->family == VSR_FAMILY_VELA2 && !strcmp(p->revision, "1111111111111111111111111111111111111111"));
        vsr_package_close(p);
    }
    /* in any other layout: refused by name */
    const char *d = clone("v3other");
    edit(d, "config.json", NULL, "{\"model_type\": \"qwen3_5_text\", \"architectures\": [\"Vela3Model\"]}");
    store = store_with("models--vllm-sr--vela3-fast", "2222222222222222222222222222222222222222", d);
    CHECK_ERR(vsr_package_open("vllm-sr/vela3-fast", NULL, store, &p, &err), err, VSR_E_UNSUPPORTED,
              "vllm-sr/vela3-fast: a Vela 3 package (the seed's vllm-sr/vela3-fast) is a newer release whose layout "
              "is not public");
    CHECK(strstr(err.msg, "this package's config.json has model_type \"qwen3_5_text\", format_version absent") != NULL);
    /* not in the store: the store's answer, with what the runtime says about the release */
    CHECK_ERR(vsr_package_open("vllm-sr/vela3-fast", NULL, test_tmpdir(), &p, &err), err, VSR_E_NOT_FOUND,
              "vllm-sr/vela3-fast is a newer span release (Vela 3) whose package layout is not public; only Vela "
              "2.0 decoder packages (model_type \"vela2-decoder\") are served");
    CHECK(strstr(err.msg, "is not in the package store") != NULL);
}

TEST(fixture_options_are_checked) {
    vsr_err err = {0};
    vsr_v2_fixture_opts o = {.size = "huge"};
    CHECK_ERR(vsr_v2_fixture_check(&o, &err), err, VSR_E_INVALID,
              "fixture: unknown --size 'huge' for --family vela2 (expected tiny, small or lite)");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/fx-twice", test_tmpdir());
    o.size = "tiny";
    o.no_broad_head = true;
    CHECK_OK(vsr_v2_fixture_write(dir, &o, NULL, NULL, &err), err);
    CHECK_ERR(vsr_v2_fixture_write(dir, &o, NULL, NULL, &err), err, VSR_E_INVALID,
              "folder is not empty; the fixture writer needs a new or empty folder");
    /* the same options give the same bytes */
    char dir2[PATH_MAX];
    snprintf(dir2, sizeof dir2, "%s/fx-again", test_tmpdir());
    vsr_fixture_info a, b;
    snprintf(dir, sizeof dir, "%s/fx-a", test_tmpdir());
    CHECK_OK(vsr_v2_fixture_write(dir, &o, NULL, &a, &err), err);
    CHECK_OK(vsr_v2_fixture_write(dir2, &o, NULL, &b, &err), err);
    CHECK(!strcmp(a.model_sha256, b.model_sha256) && !strcmp(a.manifest_sha256, b.manifest_sha256));
    /* a different seed gives other weights */
    o.seed = 1;
    snprintf(dir, sizeof dir, "%s/fx-seed1", test_tmpdir());
    CHECK_OK(vsr_v2_fixture_write(dir, &o, NULL, &b, &err), err);
    CHECK(strcmp(a.model_sha256, b.model_sha256));
}

/* ---- built-ins and their golden answers ---- */

/* Each Vela 2.0 built-in: its recipe gives the recorded revision, identity, manifest and
 * parameters; the writer entry points of vsr/fixture.h (family vela2) agree with the vela2
 * writer; CPU answers are recorded for it. */
TEST(builtins_regenerate_with_recorded_goldens) {
    CHECK(vsr_builtin_v2_fixture_count == 3);
    for (size_t i = 0; i < vsr_builtin_v2_fixture_count; i++) {
        const vsr_builtin *b = &vsr_builtin_v2_fixtures[i];
        CHECK(!strcmp(b->family, "vela2") && b->scheme == VSR_SCHEME_BF16 && b->fixture && !b->published);
        CHECK(vsr_builtin_fixture_find(b->repo) == b && vsr_catalog_find(b->repo, NULL) == b &&
              vsr_catalog_find(b->repo, b->revision) == b && vsr_catalog_find_identity(b->model_sha256) == b);
        vsr_fixture_opts o;
        vsr_builtin_fixture_opts(b, &o);
        char rev[41];
        vsr_err e = {0};
        CHECK_OK(vsr_fixture_revision(&o, rev, &e), e);
        CHECK_MSG(!strcmp(rev, b->revision), "%s: revision %s, recorded %s", b->repo, rev, b->revision);
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/bi-%zu", test_tmpdir(), i);
        vsr_fixture_info info;
        CHECK_OK(vsr_fixture_write_ex(dir, &o, NULL, &info, &e), e);
        CHECK_MSG(!strcmp(info.model_sha256, b->model_sha256), "%s model_sha256 %s", b->repo, info.model_sha256);
        CHECK_MSG(!strcmp(info.manifest_sha256, b->manifest_sha256), "%s manifest %s", b->repo, info.manifest_sha256);
        CHECK(info.params_loaded == b->parameters);
        /* the package's own verify computes the same identity */
        vsr_package *p = NULL;
        CHECK_OK(vsr_package_open(dir, NULL, NULL, &p, &e), e);
        if (p) {
            CHECK_OK(vsr_package_verify(p, 1, NULL, &e), e);
            CHECK(!strcmp(p->model_sha256, b->model_sha256) && !strcmp(p->manifest.manifest_sha256, b->manifest_sha256));
            CHECK(p->vela2->has_broad_head == !b->fixture->no_broad_head);
        }
        vsr_package_close(p);
        json_t *g = b->golden_json ? json_loads(b->golden_json, 0, NULL) : NULL;
        json_t *cpu = json_object_get(g, "cpu");
        CHECK_MSG(cpu && json_object_size(json_object_get(cpu, "answers")) == 3 &&
                      json_object_size(json_object_get(cpu, "spans")) == 3 &&
                      json_object_size(json_object_get(cpu, "thresholds")) == 3,
                  "%s: no CPU golden answers/spans/thresholds recorded", b->repo);
        json_decref(g);
    }
    /* family vela2 through vsr/fixture.h refuses the Decision 3.0 options */
    vsr_err e = {0};
    vsr_fixture_opts o = {.family = "vela2", .size = "tiny", .scheme = "fp8"};
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "fixture: --family vela2 takes no --scheme (span packages stay BF16)");
    o = (vsr_fixture_opts){.family = "vela2", .size = "tiny", .actorder = true};
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "fixture: --family vela2 takes no --actorder");
    o = (vsr_fixture_opts){.family = "decision3", .size = "tiny", .scheme = "bf16", .no_broad_head = true};
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "fixture: --no-broad-head applies only to --family vela2");
    o = (vsr_fixture_opts){.family = "vela3", .size = "tiny", .scheme = "bf16"};
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "fixture: unknown --family 'vela3' (expected decision3 or vela2)");
}

/* Flips the sign bit of the first element of span2.v.weight (the router span head's output
 * weights, F32) in dir's shard 2, then rewrites MODEL_MANIFEST.json and SHA256SUMS to the new
 * digests: a package whose own digests are all consistent, with one weight byte changed. */
static void flip_and_fix_digests(const char *dir) {
    char a[PATH_MAX * 2];
    snprintf(a, sizeof a, "%s/model-00002-of-00002.safetensors", dir);
    vsr_st_file *f = NULL;
    vsr_err e = {0};
    CHECK_OK(vsr_st_open_header(a, NULL, &f, &e), e);
    const vsr_tensor *t = f ? vsr_st_find(f, "span2.v.weight") : NULL;
    CHECK(t && t->dtype == VSR_DT_F32);
    uint64_t off = t ? t->offset : 0;
    vsr_st_close(f);
    size_t n;
    char *buf = test_read_file(a, &n);
    CHECK(buf && off + 4 <= n);
    if (!buf || off + 4 > n) return;
    buf[off + 3] ^= (char)0x80;
    char sha[65];
    vsr_sha256_hex(buf, n, sha);
    unlink(a); /* never through a hard link */
    CHECK(test_write_file(a, buf, n) == 0);
    free(buf);
    char v[80];
    snprintf(v, sizeof v, "\"%s\"", sha);
    edit(dir, "MODEL_MANIFEST.json", "files_sha256/model-00002-of-00002.safetensors", v);
    /* SHA256SUMS: every file with its digest, the rewritten manifest too */
    const char *names[] = {"MODEL_MANIFEST.json", "broad_head.safetensors", "calibration.json", "config.json",
                           "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                           "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"};
    char sums[4096] = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char q[PATH_MAX * 2];
        snprintf(q, sizeof q, "%s/%s", dir, names[i]);
        char *b = test_read_file(q, &n);
        if (!b) continue; /* no broad head */
        vsr_sha256_hex(b, n, sha);
        free(b);
        snprintf(sums + strlen(sums), sizeof sums - strlen(sums), "%s  %s\n", sha, names[i]);
    }
    put(dir, "SHA256SUMS", sums);
}

/* Loads `model` on the CPU and runs the golden self-check; returns the status of the check. */
static vsr_status golden_of(const char *model, const char *store, vsr_engine *en, vsr_err *e) {
    vsr_engine_opts o = {.model = model, .store_dir = store, .device = "cpu", .dtype = "auto", .threads = 2};
    vsr_status st = vsr_engine_prepare(en, &o, e);
    if (!st) st = vsr_engine_load(en, &o, e);
    if (!st) st = vsr_engine_golden(en, e);
    return st;
}

TEST(golden_verified_on_cpu_and_a_changed_weight_caught) {
    const vsr_builtin *b = vsr_builtin_fixture_find("vllm-sr-c/vela2-tiny");
    CHECK(b != NULL);
    if (!b) return;
    vsr_err e = {0};
    /* 1. by name from the store: matched against the recorded CPU answers */
    char store[PATH_MAX], snap[PATH_MAX + 800];
    snprintf(store, sizeof store, "%s/gstore", test_tmpdir());
    CHECK_OK(vsr_builtin_fixture_install(b, store, NULL, snap, sizeof snap, &e), e);
    vsr_engine en;
    CHECK_OK(golden_of("vllm-sr-c/vela2-tiny", store, &en, &e), e);
    CHECK_MSG(!strcmp(en.golden.status, "matched") && en.golden.checked == 6 && en.golden.matched == 6 &&
                  !strcmp(en.golden.reference, "cpu"),
              "by name: %s %d/%d %s", en.golden.status, en.golden.matched, en.golden.checked, en.golden.reason);
    /* the check compares what the record holds: the answers, spans and thresholds */
    json_t *got = en.golden.answers_json ? json_loads(en.golden.answers_json, 0, NULL) : NULL;
    CHECK(got && json_object_get(got, "answers") && json_is_array(json_object_get(json_object_get(got, "spans"), "pii")) &&
          json_is_number(json_object_get(json_object_get(got, "thresholds"), "pii")));
    json_decref(got);
    vsr_engine_close(&en);

    /* 2. a local copy written by `vllm-srun fixture OUT --family vela2 --size tiny`: the same bytes */
    char local[PATH_MAX];
    snprintf(local, sizeof local, "%s/glocal", test_tmpdir());
    vsr_v2_fixture_opts vo = {.size = "tiny"};
    CHECK_OK(vsr_v2_fixture_write(local, &vo, NULL, NULL, &e), e);
    CHECK_OK(golden_of(local, NULL, &en, &e), e);
    CHECK_MSG(!strcmp(en.golden.status, "matched") && en.golden.matched == 6, "local copy: %s %s", en.golden.status,
              en.golden.reason);
    vsr_engine_close(&en);

    /* 3. one weight byte changed in the store's snapshot, manifest and SHA256SUMS rewritten to match:
     * the catalogue's pin refuses it before any answer */
    flip_and_fix_digests(snap);
    vsr_status st = golden_of("vllm-sr-c/vela2-tiny", store, &en, &e);
    CHECK_ERR(st, e, VSR_E_INTEGRITY, "vllm-sr-c/vela2-tiny@");
    CHECK(strstr(e.msg, "but the catalogue pins " V2_PIN_TINY " for this built-in package") != NULL);
    vsr_engine_close(&en);

    /* 4. the same change to a local copy: its own digests agree, so it loads, but it is no longer the
     * built-in (another identity): unverified, never `matched`; and the recorded answers, asked of
     * it, differ: the golden check itself catches the changed byte */
    char tam[PATH_MAX];
    snprintf(tam, sizeof tam, "%s/gtampered", test_tmpdir());
    CHECK_OK(vsr_v2_fixture_write(tam, &vo, NULL, NULL, &e), e);
    flip_and_fix_digests(tam);
    CHECK_OK(golden_of(tam, NULL, &en, &e), e);
    CHECK_MSG(!strcmp(en.golden.status, "unverified") && strcmp(en.pkg->model_sha256, b->model_sha256),
              "tampered copy: %s", en.golden.status);
    vsr_golden_report r;
    CHECK_OK(vsr_v2_golden_check(en.v2, b->golden_json, "cpu", 1e-3, &r, &e), e);
    CHECK_MSG(!strcmp(r.status, "failed") && strstr(r.reason, "golden answers differ: golden.") && r.matched == 0,
              "recorded answers against the changed weight: %s %s", r.status, r.reason);
    vsr_golden_report_free(&r);
    vsr_engine_close(&en);

    /* 5. a copy with another calibration (thresholds), manifest rewritten: same weights, other
     * answers; not the built-in's manifest, so unverified rather than failed */
    char cal[PATH_MAX];
    snprintf(cal, sizeof cal, "%s/gcal", test_tmpdir());
    CHECK_OK(vsr_v2_fixture_write(cal, &vo, NULL, NULL, &e), e);
    rm(cal, "SHA256SUMS");
    edit(cal, "calibration.json", "thresholds/span:halu", "0.9");
    {
        char q[PATH_MAX * 2], sha[65], v[80];
        size_t n;
        snprintf(q, sizeof q, "%s/calibration.json", cal);
        char *buf = test_read_file(q, &n);
        CHECK(buf != NULL);
        if (buf) vsr_sha256_hex(buf, n, sha);
        free(buf);
        snprintf(v, sizeof v, "\"%s\"", sha);
        edit(cal, "MODEL_MANIFEST.json", "files_sha256/calibration.json", v);
    }
    CHECK_OK(golden_of(cal, NULL, &en, &e), e);
    CHECK_MSG(!strcmp(en.golden.status, "unverified") && !strcmp(en.pkg->model_sha256, b->model_sha256),
              "calibration copy: %s", en.golden.status);
    CHECK_OK(vsr_v2_golden_check(en.v2, b->golden_json, "cpu", 1e-3, &r, &e), e);
    CHECK_MSG(!strcmp(r.status, "failed"), "recorded answers against another calibration: %s", r.status);
    vsr_golden_report_free(&r);
    vsr_engine_close(&en);

    /* 6. no recorded answers for another device class: unverified, with the reason */
    en = (vsr_engine){0};
    CHECK_OK(golden_of(local, NULL, &en, &e), e);
    CHECK_OK(vsr_v2_golden_check(en.v2, b->golden_json, "cuda", 0.02, &r, &e), e);
    CHECK(!strcmp(r.status, "unverified") && strstr(r.reason, "no recorded answers for device class cuda"));
    vsr_golden_report_free(&r);
    vsr_engine_close(&en);
}

int main(void) {
    RUN(fixture_opens_verifies_and_maps);
    RUN(identity_is_sha256_json_of_the_weight_digests);
    RUN(every_json_refusal);
    RUN(missing_files_and_digests);
    RUN(tensor_refusals);
    RUN(vela3_fast_by_repo_name);
    RUN(fixture_options_are_checked);
    RUN(builtins_regenerate_with_recorded_goldens);
    RUN(golden_verified_on_cpu_and_a_changed_weight_caught);
    return test_summary();
}
