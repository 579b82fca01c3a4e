/* The published catalogue (data/catalog/published-d3-{pins,golden}.json, embedded): its entries, the revision a repo
 * loads without --revision, the pinned file set of a published package (every difference
 * refused by file name), and the golden answers attached to the v3.1.0 revisions. */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "package/package_internal.h"
#include "package/pins.h"
#include "test.h"
#include "vsr/catalog.h"
#include "vsr/engine.h"
#include "vsr/fixture.h"

#define LITE_PIN "b731454b7b17e455cbda511574a274a731ea8c2e"
#define LITE_V31 "a8d25a91ef75552803f7009d25b7bd435991abd9"
#define NANO_PIN "6601b4d1398bdbdfa8813dff456a96b92458ca95"
#define EDGE_V31 "18d61df78684675463af9ae732872478845c5a79"

static const vsr_builtin *find(const char *repo, const char *rev) { return vsr_catalog_find(repo, rev); }

TEST(published_entries) {
    static const struct {
        const char *repo, *rev;
        int files, gib;
        long long params;
    } pins[] = {
        {"vllm-sr/d3", "dc6c41cb98429ea8fc30e5bfb04b75757222575c", 20, 72, 26086635760LL},
        {"vllm-sr/d3-flash", "581c9953d43579645f6249e91430518ee7d838a1", 13, 32, 8393739504LL},
        {"vllm-sr/d3-mini", "61dbd3a320591004ade9afa3cc95cddae78a2488", 11, 16, 4539918336LL},
        {"vllm-sr/d3-nano", NANO_PIN, 9, 8, 2213763904LL},
        {"vllm-sr/d3-lite", LITE_PIN, 9, 4, 853247040LL},
    };
    for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++) {
        const vsr_builtin *b = find(pins[i].repo, NULL);
        CHECK_MSG(b && !strcmp(b->revision, pins[i].rev), "%s loads %s without --revision", pins[i].repo,
                  b ? b->revision : "(nothing)");
        if (!b) continue;
        CHECK(b->published && b->default_revision && !strcmp(b->release, "pinned"));
        CHECK(b->n_files == pins[i].files);
        CHECK(b->min_device_memory_gib == pins[i].gib);
        CHECK(b->parameters == pins[i].params);
        CHECK(b->model_sha256 && strlen(b->model_sha256) == 64);
        /* The manifest's pinned hash is manifest_sha256 itself. */
        CHECK(b->manifest_sha256 && !strcmp(vsr_catalog_pinned_sha256(b, "MODEL_MANIFEST.json"), b->manifest_sha256));
        CHECK(vsr_catalog_pinned_sha256(b, "chat_template.jinja") != NULL);
        CHECK(vsr_catalog_pinned_sha256(b, "no-such-file") == NULL);
        CHECK(b->golden_json == NULL);
    }
    /* d3 has 11 shards plus the index; the two small ones a single model.safetensors. */
    CHECK(vsr_catalog_pinned_sha256(find("vllm-sr/d3", NULL), "model-00011-of-00011.safetensors") != NULL);
    CHECK(vsr_catalog_pinned_sha256(find("vllm-sr/d3", NULL), "model.safetensors.index.json") != NULL);
    CHECK(vsr_catalog_pinned_sha256(find("vllm-sr/d3-lite", NULL), "model.safetensors") != NULL);
    CHECK(strcmp(vsr_catalog_pinned_sha256(find("vllm-sr/d3-lite", NULL), "chat_template.jinja"),
                 "273d8e0e683b885071fb17e08d71e5f2a5ddfb5309756181681de4f5a1822d80") == 0);

    /* v3.1.0 revisions: golden answers for cpu and rocm, no pins. */
    static const char *const v31[][2] = {
        {"vllm-sr/d3", "cbff3a3cb0b074b6585fe9f747b9f9f5557a0e75"},
        {"vllm-sr/d3-edge", EDGE_V31},
        {"vllm-sr/d3-flash", "521525effa79469d899a570726547dd7f00da3af"},
        {"vllm-sr/d3-lite", LITE_V31},
        {"vllm-sr/d3-mini", "a475367de0d8133a3c1a2a0dc12303d89cfa2ab4"},
        {"vllm-sr/d3-nano", "3aeb1c22a5632aac72353c36b3d0111c40e7dbf4"},
    };
    for (size_t i = 0; i < sizeof v31 / sizeof v31[0]; i++) {
        const vsr_builtin *b = find(v31[i][0], v31[i][1]);
        CHECK_MSG(b != NULL, "%s@%s is in the catalogue", v31[i][0], v31[i][1]);
        if (!b) continue;
        CHECK(!strcmp(b->release, "v3.1.0") && b->n_files == 0 && b->model_sha256 == NULL);
        json_t *g = b->golden_json ? json_loads(b->golden_json, 0, NULL) : NULL;
        CHECK(json_is_object(json_object_get(g, "cpu")) && json_is_object(json_object_get(g, "rocm")));
        CHECK(json_object_size(g) == 2);
        json_t *dom = json_object_get(json_object_get(g, "cpu"), "domain");
        CHECK(json_is_string(json_object_get(dom, "choice")));
        CHECK(json_is_real(json_object_get(json_object_get(json_object_get(g, "cpu"), "reasoning"), "noul")));
        json_decref(g);
    }
    /* The recorded d3 cpu answer, to the last digit the file holds. */
    json_t *g = json_loads(find("vllm-sr/d3", "cbff3a3cb0b074b6585fe9f747b9f9f5557a0e75")->golden_json, 0, NULL);
    double noul = json_real_value(json_object_get(json_object_get(json_object_get(g, "cpu"), "reasoning"), "noul"));
    CHECK(noul == 0.8079518200151894);
    json_decref(g);
    /* d3-edge has no pinned revision: its v3.1.0 revision is the default. */
    CHECK(!strcmp(vsr_catalog_default_revision("vllm-sr/d3-edge"), EDGE_V31));
    CHECK(!strcmp(vsr_catalog_default_revision("vllm-sr/d3-FP8"), "2fb271adbdaf6dc969ca1ca746b61a6a5127ed62"));
    CHECK(vsr_catalog_default_revision("org/unknown") == NULL);
    CHECK(!strcmp(vsr_catalog_default()->repo, "vllm-sr-c/d3-tiny"));
}

/* A published-layout fixture written straight into a store snapshot of `repo` at `rev`
 * (no refs: only the catalogue can name the revision). */
static void put_snapshot(const char *store, const char *repo, const char *rev, const char *like) {
    char dir[PATH_MAX * 2];
    const char *slash = strchr(repo, '/');
    snprintf(dir, sizeof dir, "%s/models--%.*s--%s/snapshots/%s", store, (int)(slash - repo), repo, slash + 1, rev);
    vsr_fixture_opts o = {.family = "decision3", .size = "tiny", .scheme = "bf16", .seed = 3, .like = like};
    vsr_err e = {0};
    vsr_status st = vsr_fixture_write(dir, &o, NULL, &e);
    CHECK_OK(st, e);
}

static const char *store_dir(void) {
    static char s[PATH_MAX];
    if (!s[0]) snprintf(s, sizeof s, "%s/hub", test_tmpdir());
    return s;
}

TEST(default_revision_and_pinned_files) {
    const char *store = store_dir();
    put_snapshot(store, "vllm-sr/d3-lite", LITE_PIN, "d3-lite");
    vsr_package *p = NULL;
    vsr_err e = {0};
    /* No --revision and no refs/main: the pinned revision is the one opened. */
    vsr_status st = vsr_package_open("vllm-sr/d3-lite", NULL, store, &p, &e);
    CHECK_OK(st, e);
    if (st) return;
    CHECK(!strcmp(p->revision, LITE_PIN));
    CHECK(p->builtin && !strcmp(p->builtin->release, "pinned"));
    /* Our fixture has the published file set but not the published bytes: refused by name. */
    st = vsr_package_verify(p, 2, NULL, &e);
    CHECK_ERR(st, e, VSR_E_INTEGRITY, "differs from the pinned package");
    CHECK(strstr(e.msg, "vllm-sr/d3-lite@" LITE_PIN ": ") != NULL);
    CHECK(strstr(e.msg, ".json") || strstr(e.msg, ".safetensors") || strstr(e.msg, ".jinja"));
    CHECK(!p->verified);
    vsr_package_close(p);

    /* An explicit revision the store lacks is not replaced by the pin. */
    st = vsr_package_open("vllm-sr/d3-lite", "main", store, &p, &e);
    CHECK_ERR(st, e, VSR_E_NOT_FOUND, "main");
    vsr_package_close(p);
    /* The pinned revision of another repo that the store does not hold. */
    p = NULL;
    st = vsr_package_open("vllm-sr/d3-nano", NULL, store, &p, &e);
    CHECK_ERR(st, e, VSR_E_NOT_FOUND, "vllm-sr/d3-nano");
    vsr_package_close(p);
}

/* vsr_package_check_pins on a package whose pins are its own files, then with each kind of
 * difference: the check names the file every time. */
TEST(pin_check_names_the_file) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/own", test_tmpdir());
    vsr_fixture_opts o = {.family = "decision3", .size = "tiny", .scheme = "bf16", .seed = 5, .like = "d3-mini"};
    vsr_err e = {0};
    vsr_status st = vsr_fixture_write(dir, &o, NULL, &e);
    CHECK_OK(st, e);
    vsr_package *p = NULL;
    if ((st = vsr_package_open(dir, NULL, NULL, &p, &e))) {
        CHECK_OK(st, e);
        return;
    }
    int n = p->manifest.n_files;
    CHECK(n == 10); /* d3-mini: 2 shards + index + 7 other files, the manifest not counted */
    vsr_pinned_file *files = calloc((size_t)n + 2, sizeof *files);
    const char **names = calloc((size_t)n, sizeof *names);
    char(*sums)[65] = calloc((size_t)n, sizeof *sums);
    for (int i = 0; i < n; i++) {
        names[i] = p->manifest.files[i].name;
        memcpy(sums[i], p->manifest.files[i].sha256, 65);
        files[i] = (vsr_pinned_file){names[i], sums[i]};
    }
    files[n] = (vsr_pinned_file){"MODEL_MANIFEST.json", p->manifest.manifest_sha256};
    vsr_builtin fake = {.repo = "vllm-sr/d3-mini", .revision = "61dbd3a320591004ade9afa3cc95cddae78a2488",
                        .family = "decision3", .published = true, .release = "pinned",
                        .n_files = n + 1, .files = files};
    p->builtin = &fake;
    st = vsr_package_check_pins(p, (size_t)n, names, (const char(*)[65])sums, &e);
    CHECK_OK(st, e);
    /* The whole verify passes too when the pins are the package's own bytes. */
    st = vsr_package_verify(p, 2, NULL, &e);
    CHECK_OK(st, e);

    /* A file whose bytes differ from the pin. */
    char other[65];
    memset(other, 'a', 64);
    other[64] = 0;
    const char *keep = files[2].sha256;
    files[2].sha256 = other;
    st = vsr_package_check_pins(p, (size_t)n, names, (const char(*)[65])sums, &e);
    CHECK_ERR(st, e, VSR_E_INTEGRITY, names[2]);
    CHECK(strstr(e.msg, "differs from the pinned package") != NULL);
    files[2].sha256 = keep;
    /* The manifest itself differs. */
    files[n].sha256 = other;
    st = vsr_package_check_pins(p, (size_t)n, names, (const char(*)[65])sums, &e);
    CHECK_ERR(st, e, VSR_E_INTEGRITY, "MODEL_MANIFEST.json differs from the pinned package");
    files[n].sha256 = p->manifest.manifest_sha256;
    /* A pinned file the package does not list. */
    files[n + 1] = (vsr_pinned_file){"model-00003-of-00003.safetensors", other};
    fake.n_files = n + 2;
    st = vsr_package_check_pins(p, (size_t)n, names, (const char(*)[65])sums, &e);
    CHECK_ERR(st, e, VSR_E_INTEGRITY, "the pinned package has model-00003-of-00003.safetensors");
    fake.n_files = n + 1;
    /* A package file the pin does not list (the pin list loses its first entry). */
    fake.files = files + 1;
    fake.n_files = n;
    st = vsr_package_check_pins(p, (size_t)n, names, (const char(*)[65])sums, &e);
    CHECK_ERR(st, e, VSR_E_INTEGRITY, names[0]);
    CHECK(strstr(e.msg, "is not a file of the pinned package") != NULL);
    /* No pins: nothing to check. */
    fake.n_files = 0;
    CHECK(vsr_package_check_pins(p, (size_t)n, names, (const char(*)[65])sums, &e) == VSR_OK);
    p->builtin = NULL;
    vsr_package_close(p);
    free(files);
    free(names);
    free(sums);
}

/* The golden self-check of a v3.1.0 revision compares with the reference's recorded answers
 * for the device class (our fixture's answers are not the real model's: failed, naming the
 * value); at a revision with no recording it is unverified. */
TEST(golden_attaches_to_the_recorded_revision) {
    const char *store = store_dir();
    put_snapshot(store, "vllm-sr/d3-lite", LITE_V31, "d3-lite");
    vsr_engine_opts o = {.model = "vllm-sr/d3-lite", .revision = LITE_V31, .device = "cpu", .dtype = "auto",
                         .store_dir = store, .threads = 2};
    vsr_engine en;
    vsr_err e = {0};
    vsr_status st = vsr_engine_prepare(&en, &o, &e);
    if (!st) st = vsr_engine_load(&en, &o, &e);
    CHECK_OK(st, e);
    if (!st) {
        CHECK(en.pkg->builtin && !strcmp(en.pkg->builtin->release, "v3.1.0"));
        st = vsr_engine_golden(&en, &e);
        CHECK_ERR(st, e, VSR_E_INTEGRITY, "golden self-check failed");
        CHECK(!strcmp(en.golden.status, "failed") && !strcmp(en.golden.reference, "cpu"));
        CHECK(en.golden.checked > 0 && en.golden.matched < en.golden.checked);
    }
    vsr_engine_close(&en);

    /* Same bytes at a revision the catalogue does not know: nothing recorded. */
    put_snapshot(store, "vllm-sr/d3-lite", "4444444444444444444444444444444444444444", "d3-lite");
    o.revision = "4444444444444444444444444444444444444444";
    st = vsr_engine_prepare(&en, &o, &e);
    if (!st) st = vsr_engine_load(&en, &o, &e);
    CHECK_OK(st, e);
    if (!st) {
        CHECK(en.pkg->builtin == NULL);
        st = vsr_engine_golden(&en, &e);
        CHECK_OK(st, e);
        CHECK(!strcmp(en.golden.status, "unverified"));
    }
    vsr_engine_close(&en);
}

int main(void) {
    RUN(published_entries);
    RUN(default_revision_and_pinned_files);
    RUN(pin_check_names_the_file);
    RUN(golden_attaches_to_the_recorded_revision);
    return test_summary();
}
