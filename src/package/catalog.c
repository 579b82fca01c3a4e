/* The catalogue: packages the runtime knows by name, in this order (vsr_catalog_find returns
 * the first match, so a repo's pinned revision comes before its other entries):
 *   1. the published BF16 vllm-sr/d3-* packages at their pinned revisions, from
 *      data/catalog/published-d3-pins.json (embedded below);
 *   2. their v3.1.0 revisions with the reference's golden answers, from
 *      data/catalog/published-d3-golden.json (embedded below);
 *   3. the published quantized packages of the seeds (no identity or golden answers recorded:
 *      their own manifest decides, their self-check is `unverified`);
 *   4. the built-in fixture packages (src/fixture/builtin.c).
 * The two JSON files are parsed once, on first use; a malformed file is a build defect and
 * aborts with the reason (tests/test_catalog.c parses them in CI). */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture/builtin.h"
#include "vsr/catalog.h"

__asm__(".section .rodata\n"
        ".global vsr_catalog_pins_json\n"
        ".type vsr_catalog_pins_json, @object\n"
        "vsr_catalog_pins_json:\n"
        ".incbin \"" VSR_DATA_DIR "/catalog/published-d3-pins.json\"\n"
        ".byte 0\n"
        ".global vsr_catalog_golden_json\n"
        ".type vsr_catalog_golden_json, @object\n"
        "vsr_catalog_golden_json:\n"
        ".incbin \"" VSR_DATA_DIR "/catalog/published-d3-golden.json\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char vsr_catalog_pins_json[];
extern const char vsr_catalog_golden_json[];

/* The seeds' quantized packages (quantization-support-by-hardware-and-model, seed 001). */
static const vsr_builtin seed_quantized[] = {
    {.repo = "vllm-sr/d3-FP8", .revision = "2fb271adbdaf6dc969ca1ca746b61a6a5127ed62", .family = "decision3",
     .scheme = VSR_SCHEME_FP8, .scheme_note = "FP8 W8A8 (E4M3, per-channel, dynamic per-token)", .published = true,
     .release = "seed", .default_revision = true},
    {.repo = "vllm-sr/d3-W4A16-GPTQ", .revision = "93aa927c5bbf184770ecd144972bed9a1450a4bd", .family = "decision3",
     .scheme = VSR_SCHEME_INT4, .scheme_note = "int4 W4A16, GPTQ (symmetric, group 128)", .published = true,
     .release = "seed", .default_revision = true},
    {.repo = "vllm-sr/d3-W4A16-AWQ", .revision = "39ffacd3644dad729b6885ac986e740e8db7e22d", .family = "decision3",
     .scheme = VSR_SCHEME_INT4, .scheme_note = "int4 W4A16, AWQ (asymmetric, group 128)", .published = true,
     .release = "seed", .default_revision = true},
    {.repo = "vllm-sr/d3-NVFP4", .revision = "07fa5a04859155eb99a034e2e424d423dd50ce1d", .family = "decision3",
     .scheme = VSR_SCHEME_NVFP4, .scheme_note = "NVFP4 W4A4", .published = true, .release = "seed",
     .default_revision = true},
    {.repo = "vllm-sr/d3-NVFP4-AWQ", .revision = "27dbfdc48957f9cbc3b83ac49a58d3434451a0a9", .family = "decision3",
     .scheme = VSR_SCHEME_NVFP4, .scheme_note = "NVFP4 W4A4 with AWQ smoothing", .published = true,
     .release = "seed", .default_revision = true},
};
#define N_SEED (sizeof seed_quantized / sizeof seed_quantized[0])

#define DEFAULT_REPO "vllm-sr-c/d3-tiny"

/* Entries parsed from the embedded JSON: process-lifetime, never freed. */
static vsr_builtin *parsed;
static size_t n_parsed;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void die(const char *what, const char *why) {
    fprintf(stderr, "vllm-sr-c: the embedded catalogue %s is malformed: %s\n", what, why);
    abort();
}

static const char *dup_str(const json_t *v, const char *what, const char *key) {
    if (!json_is_string(v)) die(what, key);
    char *s = strdup(json_string_value(v));
    if (!s) die(what, "out of memory");
    return s;
}

static bool is_hex(const char *s, size_t n) {
    if (strlen(s) != n) return false;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'))) return false;
    return true;
}

/* A published BF16 entry: repo and revision from the file, the family's fixed fields. */
static vsr_builtin *published_entry(vsr_builtin *b, const char *repo, json_t *e, const char *what,
                                    const char *release) {
    b->repo = strdup(repo);
    if (!b->repo) die(what, "out of memory");
    b->revision = dup_str(json_object_get(e, "revision"), what, "revision");
    if (!is_hex(b->revision, 40)) die(what, repo);
    b->family = "decision3";
    b->scheme = VSR_SCHEME_BF16;
    b->scheme_note = "BF16 (unquantized), FP32 readout";
    b->published = true;
    b->release = release;
    return b;
}

static void parse_pins(json_t *root, vsr_builtin *out, size_t *n) {
    const char *what = "data/catalog/published-d3-pins.json";
    const char *repo;
    json_t *e;
    json_object_foreach(root, repo, e) {
        vsr_builtin *b = published_entry(&out[(*n)++], repo, e, what, "pinned");
        b->model_sha256 = dup_str(json_object_get(e, "model_sha256"), what, "model_sha256");
        b->manifest_sha256 = dup_str(json_object_get(e, "manifest_sha256"), what, "manifest_sha256");
        if (!is_hex(b->model_sha256, 64) || !is_hex(b->manifest_sha256, 64))
            die(what, repo);
        json_t *lp = json_object_get(e, "loaded_parameters"), *mg = json_object_get(e, "min_device_memory_gib");
        if (!json_is_integer(lp) || !json_is_integer(mg)) die(what, repo);
        b->parameters = json_integer_value(lp);
        b->min_device_memory_gib = (int)json_integer_value(mg);
        json_t *files = json_object_get(e, "files_sha256");
        if (!json_is_object(files) || json_object_size(files) == 0) die(what, "files_sha256");
        vsr_pinned_file *f = calloc(json_object_size(files), sizeof *f);
        if (!f) die(what, "out of memory");
        const char *name;
        json_t *sha;
        int k = 0;
        json_object_foreach(files, name, sha) {
            f[k].name = strdup(name);
            f[k].sha256 = dup_str(sha, what, name);
            if (!f[k].name || !is_hex(f[k].sha256, 64)) die(what, name);
            k++;
        }
        b->files = f;
        b->n_files = k;
        b->default_revision = true;
    }
}

static void parse_golden(json_t *root, vsr_builtin *out, size_t *n) {
    const char *what = "data/catalog/published-d3-golden.json";
    const char *repo;
    json_t *e;
    json_object_foreach(root, repo, e) {
        bool has_pinned = false;
        for (size_t i = 0; i < *n; i++) has_pinned |= !strcmp(out[i].repo, repo);
        vsr_builtin *b = published_entry(&out[(*n)++], repo, e, what, "v3.1.0");
        json_t *answers = json_object_get(e, "answers");
        if (!json_is_object(answers) || json_object_size(answers) == 0) die(what, "answers");
        char *g = json_dumps(answers, JSON_COMPACT | JSON_REAL_PRECISION(17));
        if (!g) die(what, "out of memory");
        b->golden_json = g;
        /* d3-edge has no pinned revision: its v3.1.0 revision is the one `serve` loads. */
        b->default_revision = !has_pinned;
    }
}

static void parse_all(void) {
    json_error_t je;
    json_t *pins = json_loads(vsr_catalog_pins_json, 0, &je);
    if (!json_is_object(pins)) die("data/catalog/published-d3-pins.json", je.text);
    json_t *golden = json_loads(vsr_catalog_golden_json, 0, &je);
    if (!json_is_object(golden)) die("data/catalog/published-d3-golden.json", je.text);
    parsed = calloc(json_object_size(pins) + json_object_size(golden), sizeof *parsed);
    if (!parsed) die("catalogue", "out of memory");
    parse_pins(pins, parsed, &n_parsed);
    parse_golden(golden, parsed, &n_parsed);
    json_decref(pins);
    json_decref(golden);
}

static void ensure(void) { pthread_once(&once, parse_all); }

size_t vsr_catalog_count(void) {
    ensure();
    return n_parsed + N_SEED + vsr_builtin_fixture_count + vsr_builtin_v2_fixture_count;
}

const vsr_builtin *vsr_catalog_at(size_t i) {
    ensure();
    if (i < n_parsed) return &parsed[i];
    i -= n_parsed;
    if (i < N_SEED) return &seed_quantized[i];
    i -= N_SEED;
    if (i < vsr_builtin_fixture_count) return &vsr_builtin_fixtures[i];
    i -= vsr_builtin_fixture_count;
    return i < vsr_builtin_v2_fixture_count ? &vsr_builtin_v2_fixtures[i] : NULL;
}

const vsr_builtin *vsr_catalog_find(const char *repo, const char *revision) {
    if (!repo) return NULL;
    const vsr_builtin *first = NULL;
    for (size_t i = 0; i < vsr_catalog_count(); i++) {
        const vsr_builtin *b = vsr_catalog_at(i);
        if (strcmp(b->repo, repo)) continue;
        if (revision) {
            if (b->revision && !strcmp(b->revision, revision)) return b;
            continue;
        }
        if (b->default_revision || b->fixture) return b;
        if (!first) first = b;
    }
    return first;
}

const char *vsr_catalog_default_revision(const char *repo) {
    const vsr_builtin *b = vsr_catalog_find(repo, NULL);
    return b ? b->revision : NULL;
}

const char *vsr_catalog_pinned_sha256(const vsr_builtin *b, const char *name) {
    for (int i = 0; b && name && i < b->n_files; i++)
        if (!strcmp(b->files[i].name, name)) return b->files[i].sha256;
    return NULL;
}

const vsr_builtin *vsr_catalog_find_identity(const char *model_sha256) {
    if (!model_sha256 || !model_sha256[0]) return NULL;
    for (size_t i = 0; i < vsr_catalog_count(); i++) {
        const vsr_builtin *b = vsr_catalog_at(i);
        if (b->model_sha256 && !strcmp(b->model_sha256, model_sha256)) return b;
    }
    return NULL;
}

const vsr_builtin *vsr_catalog_default(void) { return vsr_catalog_find(DEFAULT_REPO, NULL); }
