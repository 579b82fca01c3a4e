/* The package store (a Hugging Face hub cache read offline): store folder selection,
 * branch/tag/PR-ref/commit resolution, symlinked snapshots, and every "not in the store"
 * message; then opening and verifying a package from the store, and built-in pins. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "package/package_internal.h"
#include "pkgbuild.h"
#include "test.h"
#include "vsr/catalog.h"
#include "vsr/hash.h"

#define C1 "1111111111111111111111111111111111111111"
#define C2 "2222222222222222222222222222222222222222"
#define C3 "3333333333333333333333333333333333333333"
#define FP8_REV "2fb271adbdaf6dc969ca1ca746b61a6a5127ed62"

static char store[PATH_MAX];

static void put_ref(const char *repo_dir, const char *ref, const char *commit) {
    char p[PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/refs/%s", repo_dir, ref);
    test_write_file(p, commit, strlen(commit));
}

/* Lays `pkg`'s files out as huggingface_hub does: blobs/<sha256> plus relative links
 * snapshots/<commit>/<name> -> ../../blobs/<sha256>. */
static void install(const char *repo, const char *commit, const char *pkg) {
    char rd[PATH_MAX * 2], p[PATH_MAX * 3], link[PATH_MAX * 3], target[PATH_MAX];
    const char *slash = strchr(repo, '/');
    snprintf(rd, sizeof rd, "%s/models--%.*s--%s", store, (int)(slash - repo), repo, slash + 1);
    snprintf(p, sizeof p, "%s/snapshots/%s/x", rd, commit);
    test_write_file(p, "", 0);
    unlink(p);
    const char *names[] = {"config.json", "decision_config.json", "readout.safetensors", "tokenizer.json",
                           "tokenizer_config.json", "chat_template.jinja", "model.safetensors", "MODEL_MANIFEST.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char src[PATH_MAX * 2], sum[65];
        snprintf(src, sizeof src, "%s/%s", pkg, names[i]);
        size_t n;
        char *buf = test_read_file(src, &n);
        if (!buf) continue;
        vsr_sha256_hex(buf, n, sum);
        snprintf(p, sizeof p, "%s/blobs/%s", rd, sum);
        test_write_file(p, buf, n);
        free(buf);
        snprintf(link, sizeof link, "%s/snapshots/%s/%s", rd, commit, names[i]);
        snprintf(target, sizeof target, "../../blobs/%s", sum);
        symlink(target, link);
    }
}

static void make_store(void) {
    snprintf(store, sizeof store, "%s/hub", test_tmpdir());
    char rd[PATH_MAX * 2], p[PATH_MAX * 3];
    snprintf(rd, sizeof rd, "%s/models--org--name", store);
    put_ref(rd, "main", C1);
    put_ref(rd, "v1.0", C2);          /* a tag */
    put_ref(rd, "refs/pr/1", C3);     /* PR refs are stored verbatim under refs/refs/pr/1 */
    put_ref(rd, "broken", "not-a-commit\n");
    put_ref(rd, "dangling", "4444444444444444444444444444444444444444");
    put_ref(rd, "newline", C1 "\n");
    const char *c[] = {C1, C2, C3};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/snapshots/%s/config.json", rd, c[i]);
        test_write_file(p, "{}", 2);
    }
    snprintf(p, sizeof p, "%s/models--other--Model-2.5/refs/main", store);
    test_write_file(p, C1, 40);
}

TEST(store_dir_selection) {
    char buf[PATH_MAX];
    const char *vars[] = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"};
    for (int i = 0; i < 4; i++) unsetenv(vars[i]);
    setenv("HOME", "/home/u", 1);
    CHECK(!strcmp(vsr_store_dir(NULL, buf, sizeof buf), "/home/u/.cache/huggingface/hub"));
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    CHECK(!strcmp(vsr_store_dir(NULL, buf, sizeof buf), "/xdg/huggingface/hub"));
    setenv("HF_HOME", "~/hf", 1);
    CHECK(!strcmp(vsr_store_dir(NULL, buf, sizeof buf), "/home/u/hf/hub"));
    setenv("HUGGINGFACE_HUB_CACHE", "/legacy", 1);
    CHECK(!strcmp(vsr_store_dir(NULL, buf, sizeof buf), "/legacy"));
    setenv("HF_HUB_CACHE", "/hubcache", 1);
    CHECK(!strcmp(vsr_store_dir(NULL, buf, sizeof buf), "/hubcache"));
    CHECK(!strcmp(vsr_store_dir("/explicit", buf, sizeof buf), "/explicit"));
    CHECK(!strcmp(vsr_store_dir("", buf, sizeof buf), "/hubcache"));
    for (int i = 0; i < 4; i++) unsetenv(vars[i]);
}

TEST(resolve_revisions) {
    char snap[PATH_MAX], commit[41], want[PATH_MAX * 2];
    vsr_err e = {0};
    struct { const char *rev, *commit; } ok[] = {
        {NULL, C1}, {"main", C1}, {"v1.0", C2}, {"refs/pr/1", C3}, {C2, C2}, {"newline", C1}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        vsr_status st = vsr_store_resolve(store, "org/name", ok[i].rev, snap, sizeof snap, commit, &e);
        CHECK_OK(st, e);
        CHECK(!strcmp(commit, ok[i].commit));
        snprintf(want, sizeof want, "%s/models--org--name/snapshots/%s", store, ok[i].commit);
        char real[PATH_MAX];
        CHECK(realpath(want, real) && !strcmp(snap, real));
    }
    /* the store comes from $HF_HUB_CACHE when not given */
    setenv("HF_HUB_CACHE", store, 1);
    CHECK_OK(vsr_store_resolve(NULL, "org/name", "v1.0", snap, sizeof snap, commit, &e), e);
    unsetenv("HF_HUB_CACHE");
}

TEST(resolve_refusals) {
    char snap[PATH_MAX], commit[41];
    vsr_err e = {0};
    CHECK_ERR(vsr_store_resolve(store, "vllm-sr/d3-FP8", NULL, snap, sizeof snap, commit, &e), e, VSR_E_NOT_FOUND,
              "vllm-sr/d3-FP8 is not in the package store ");
    CHECK(strstr(e.msg, "(the store holds: org/name, other/Model-2.5)") != NULL);
    char empty[PATH_MAX];
    snprintf(empty, sizeof empty, "%s/empty-store", test_tmpdir());
    mkdir(empty, 0755);
    CHECK_ERR(vsr_store_resolve(empty, "vllm-sr/d3-FP8", NULL, snap, sizeof snap, commit, &e), e, VSR_E_NOT_FOUND,
              "(the store is empty)");
    CHECK_ERR(vsr_store_resolve("/no/such/store", "a/b", NULL, snap, sizeof snap, commit, &e), e, VSR_E_NOT_FOUND,
              "(the store folder does not exist)");
    /* unknown revision: names the refs and snapshots there are */
    CHECK_ERR(vsr_store_resolve(store, "org/name", "v2.0", snap, sizeof snap, commit, &e), e, VSR_E_NOT_FOUND,
              "org/name: revision \"v2.0\" is not in the package store");
    CHECK(strstr(e.msg, "refs: broken, dangling, main, newline, refs/pr/1, v1.0") != NULL);
    CHECK(strstr(e.msg, "snapshots: " C1 ", " C2 ", " C3) != NULL);
    /* a short hash is not a commit: it would have to be a ref */
    CHECK_ERR(vsr_store_resolve(store, "org/name", "1111111", snap, sizeof snap, commit, &e), e, VSR_E_NOT_FOUND,
              "revision \"1111111\" is not in the package store");
    CHECK_ERR(vsr_store_resolve(store, "org/name", "5555555555555555555555555555555555555555", snap, sizeof snap, commit,
                                &e),
              e, VSR_E_NOT_FOUND, "org/name: commit 5555555555555555555555555555555555555555 has no snapshot");
    CHECK_ERR(vsr_store_resolve(store, "org/name", "dangling", snap, sizeof snap, commit, &e), e, VSR_E_NOT_FOUND,
              "refs/dangling points to commit 4444444444444444444444444444444444444444, which has no snapshot");
    CHECK_ERR(vsr_store_resolve(store, "org/name", "broken", snap, sizeof snap, commit, &e), e, VSR_E_FORMAT,
              "refs/broken holds \"not-a-commit\", not a 40-hex commit");
    CHECK_ERR(vsr_store_resolve(store, "org/name", "../../x", snap, sizeof snap, commit, &e), e, VSR_E_INVALID,
              "is not a commit, branch or tag name");
    CHECK_ERR(vsr_store_resolve(store, "org/name", "/etc/passwd", snap, sizeof snap, commit, &e), e, VSR_E_INVALID,
              "is not a commit, branch or tag name");
    const char *bad_repos[] = {"noslash", "/abs/x", "-org/x", "org/", "org/na me", "org/x/y", "org/../x"};
    for (size_t i = 0; i < sizeof bad_repos / sizeof bad_repos[0]; i++)
        CHECK_ERR(vsr_store_resolve(store, bad_repos[i], NULL, snap, sizeof snap, commit, &e), e, VSR_E_INVALID,
                  "is not a Hub repository ID");
    CHECK(vsr_repo_name_valid("vllm-sr/d3-W4A16-GPTQ") && vsr_repo_name_valid("a/b.c_d-e"));
}

TEST(open_from_store_symlinked_snapshot) {
    char pkg[PATH_MAX];
    snprintf(pkg, sizeof pkg, "%s/src-pkg", test_tmpdir());
    tpkg_opts o = {.scheme = "fp8"};
    CHECK(tpkg_write(pkg, &o) == 0);
    install("vllm-sr/d3-FP8", FP8_REV, pkg);
    char rd[PATH_MAX * 2];
    snprintf(rd, sizeof rd, "%s/models--vllm-sr--d3-FP8", store);
    put_ref(rd, "main", FP8_REV);
    put_ref(rd, "v3.1.0", FP8_REV);

    const char *names[] = {"vllm-sr/d3-FP8", "vllm-sr/d3-FP8@v3.1.0", "vllm-sr/d3-FP8@" FP8_REV};
    for (int i = 0; i < 3; i++) {
        vsr_package *p = NULL;
        vsr_err e = {0};
        CHECK_OK(vsr_package_open(names[i], NULL, store, &p, &e), e);
        if (!p) continue;
        CHECK(!strcmp(p->repo, "vllm-sr/d3-FP8") && !strcmp(p->revision, FP8_REV));
        CHECK(p->builtin == vsr_catalog_find("vllm-sr/d3-FP8", FP8_REV) && p->builtin->published);
        CHECK_OK(vsr_package_verify(p, 2, NULL, &e), e);
        CHECK(p->verified);
        CHECK_OK(vsr_package_map(p, &e), e);
        vsr_package_close(p);
    }
    /* --revision given separately, and agreeing with @rev */
    vsr_package *p = NULL;
    vsr_err e = {0};
    CHECK_OK(vsr_package_open("vllm-sr/d3-FP8", "v3.1.0", store, &p, &e), e);
    CHECK(p && !strcmp(p->requested_revision, "v3.1.0"));
    vsr_package_close(p);
    CHECK_OK(vsr_package_open("vllm-sr/d3-FP8@main", "main", store, &p, &e), e);
    vsr_package_close(p);
    CHECK_ERR(vsr_package_open("vllm-sr/d3-FP8@nope", NULL, store, &p, &e), e, VSR_E_NOT_FOUND,
              "vllm-sr/d3-FP8: revision \"nope\" is not in the package store");

    /* a tampered blob is still named by its snapshot name */
    snprintf(rd, sizeof rd, "%s/models--vllm-sr--d3-FP8/snapshots/%s/tokenizer.json", store, FP8_REV);
    char real[PATH_MAX];
    CHECK(realpath(rd, real) != NULL);
    char *s = test_read_file(real, NULL);
    s[0] = '[';
    test_write_file(real, s, strlen(s));
    free(s);
    CHECK_OK(vsr_package_open("vllm-sr/d3-FP8", NULL, store, &p, &e), e);
    if (p) {
        CHECK_ERR(vsr_package_verify(p, 2, NULL, &e), e, VSR_E_INTEGRITY, "tokenizer.json: sha256 mismatch");
        vsr_package_close(p);
    }
}

TEST(builtin_pins) {
    /* A package installed as a built-in repo@revision must be the recorded package. */
    const vsr_builtin *b = vsr_catalog_default();
    CHECK(b != NULL);
    if (!b) return;
    char pkg[PATH_MAX];
    snprintf(pkg, sizeof pkg, "%s/impostor", test_tmpdir());
    CHECK(tpkg_write(pkg, NULL) == 0);
    vsr_package *p = NULL;
    vsr_err e = {0};
    CHECK_OK(vsr_package_open(pkg, NULL, NULL, &p, &e), e);
    if (!p) return;
    /* as if resolved from the store at the pinned revision */
    snprintf(p->repo, sizeof p->repo, "%s", b->repo);
    snprintf(p->revision, sizeof p->revision, "%.40s", b->revision);
    p->builtin = b;
    CHECK_ERR(vsr_package_verify(p, 1, NULL, &e), e, VSR_E_INTEGRITY, "but the catalogue pins");
    CHECK(strstr(e.msg, b->model_sha256 ? b->model_sha256 : "?") != NULL && !p->verified);
    /* a pin that does match passes: same package, its own identity as the pin */
    vsr_builtin mine = *b;
    char ms[65], mf[65];
    p->builtin = NULL;
    CHECK_OK(vsr_package_verify(p, 1, NULL, &e), e);
    snprintf(ms, sizeof ms, "%s", p->model_sha256);
    snprintf(mf, sizeof mf, "%s", p->manifest.manifest_sha256);
    mine.model_sha256 = ms;
    mine.manifest_sha256 = mf;
    p->builtin = &mine;
    CHECK_OK(vsr_package_verify(p, 1, NULL, &e), e);
    /* only the manifest differs */
    mine.manifest_sha256 = "0000000000000000000000000000000000000000000000000000000000000000";
    CHECK_ERR(vsr_package_verify(p, 1, NULL, &e), e, VSR_E_INTEGRITY, "manifest_sha256 is ");
    vsr_package_close(p);
}

int main(void) {
    make_store();
    RUN(store_dir_selection);
    RUN(resolve_revisions);
    RUN(resolve_refusals);
    RUN(open_from_store_symlinked_snapshot);
    RUN(builtin_pins);
    return test_summary();
}
