/* The catalogue: packages the runtime knows by name. The published vllm-sr/d3-* packages
 * with the revisions their records measured (seed quantization-support-by-hardware-and-
 * model; no identity or golden answers recorded here: their own manifest decides, their
 * self-check is `unverified`), then the built-in fixture packages (src/fixture/builtin.c). */
#include <string.h>

#include "fixture/builtin.h"
#include "vsr/catalog.h"

static const vsr_builtin published[] = {
    {.repo = "vllm-sr/d3-FP8", .revision = "2fb271adbdaf6dc969ca1ca746b61a6a5127ed62", .family = "decision3",
     .scheme = VSR_SCHEME_FP8, .scheme_note = "FP8 W8A8 (E4M3, per-channel, dynamic per-token)", .published = true},
    {.repo = "vllm-sr/d3-W4A16-GPTQ", .revision = "93aa927c5bbf184770ecd144972bed9a1450a4bd", .family = "decision3",
     .scheme = VSR_SCHEME_INT4, .scheme_note = "int4 W4A16, GPTQ (symmetric, group 128)", .published = true},
    {.repo = "vllm-sr/d3-W4A16-AWQ", .revision = "39ffacd3644dad729b6885ac986e740e8db7e22d", .family = "decision3",
     .scheme = VSR_SCHEME_INT4, .scheme_note = "int4 W4A16, AWQ (asymmetric, group 128)", .published = true},
    {.repo = "vllm-sr/d3-NVFP4", .revision = "07fa5a04859155eb99a034e2e424d423dd50ce1d", .family = "decision3",
     .scheme = VSR_SCHEME_NVFP4, .scheme_note = "NVFP4 W4A4", .published = true},
    {.repo = "vllm-sr/d3-NVFP4-AWQ", .revision = "27dbfdc48957f9cbc3b83ac49a58d3434451a0a9", .family = "decision3",
     .scheme = VSR_SCHEME_NVFP4, .scheme_note = "NVFP4 W4A4 with AWQ smoothing", .published = true},
};
#define N_PUBLISHED (sizeof published / sizeof published[0])

#define DEFAULT_REPO "vllm-sr-c/d3-tiny"

size_t vsr_catalog_count(void) { return N_PUBLISHED + vsr_builtin_fixture_count; }

const vsr_builtin *vsr_catalog_at(size_t i) {
    if (i < N_PUBLISHED) return &published[i];
    i -= N_PUBLISHED;
    return i < vsr_builtin_fixture_count ? &vsr_builtin_fixtures[i] : NULL;
}

const vsr_builtin *vsr_catalog_find(const char *repo, const char *revision) {
    if (!repo) return NULL;
    for (size_t i = 0; i < vsr_catalog_count(); i++) {
        const vsr_builtin *b = vsr_catalog_at(i);
        if (strcmp(b->repo, repo)) continue;
        if (!revision || (b->revision && !strcmp(b->revision, revision))) return b;
    }
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
